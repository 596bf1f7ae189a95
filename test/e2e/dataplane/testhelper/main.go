// Command testhelper provides the small network services the dataplane e2e test runs
// inside its namespaces: an HTTPS backend, a plain HTTP client-side service, and a
// byte-stream sender/sink pair that detects any lost or reordered byte.
package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		log.Fatal("usage: testhelper https|http|sink ADDR | send ADDR SECONDS BYTES_PER_SECOND")
	}
	addr := os.Args[2]
	switch os.Args[1] {
	case "https":
		srv := &http.Server{Addr: addr, Handler: echo("backend"), TLSConfig: &tls.Config{Certificates: []tls.Certificate{selfSigned()}}, ReadHeaderTimeout: 5 * time.Second}
		log.Fatal(srv.ListenAndServeTLS("", ""))
	case "http":
		srv := &http.Server{Addr: addr, Handler: echo("client"), ReadHeaderTimeout: 5 * time.Second}
		log.Fatal(srv.ListenAndServe())
	case "sink":
		sink(addr)
	case "send":
		secs, _ := strconv.Atoi(os.Args[3])
		rate, _ := strconv.Atoi(os.Args[4])
		send(addr, time.Duration(secs)*time.Second, rate)
	default:
		log.Fatalf("unknown mode %s", os.Args[1])
	}
}

func echo(who string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		fmt.Fprintf(w, "%s saw %s\n", who, host)
	})
}

func selfSigned() tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		log.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "backend.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		log.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// pattern byte i of a stream is i mod 251: a lost, duplicated or reordered byte breaks it.
func sink(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go func(c net.Conn) {
			defer c.Close()
			r := bufio.NewReaderSize(c, 1<<16)
			var n int64
			ok := true
			for {
				b, err := r.ReadByte()
				if err != nil {
					if err != io.EOF {
						ok = false
					}
					break
				}
				if ok && b != byte(n%251) {
					ok = false
				}
				n++
			}
			fmt.Printf("sink received %d ok=%v\n", n, ok)
		}(c)
	}
}

func send(addr string, d time.Duration, rate int) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	chunk := rate / 20
	buf := make([]byte, chunk)
	var n int64
	deadline := time.Now().Add(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		for i := range buf {
			buf[i] = byte((n + int64(i)) % 251)
		}
		if _, err := c.Write(buf); err != nil {
			log.Fatalf("after %d bytes: %v", n, err)
		}
		n += int64(chunk)
		<-tick.C
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		log.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, c)
	fmt.Printf("sent %d\n", n)
}
