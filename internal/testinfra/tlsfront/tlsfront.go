// Package tlsfront serves an OpenStack (the simulator, or the real one of
// hack/openstack.sh) over TLS with a CA of its own, for tests of a cloud behind a
// private CA. Each HTTP endpoint the cloud names (Keystone's auth URL, the endpoints of
// its catalog, the links of its version documents) gets an HTTPS listener on loopback
// that forwards to it, and the URLs in the cloud's responses are rewritten to those
// listeners, as a TLS-terminating load balancer in front of a real cloud presents it:
// every request a client makes after the auth URL goes over TLS verified against the CA.
package tlsfront

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"
)

// Front is the TLS front of one cloud.
type Front struct {
	// CAFile is the PEM file of the front's CA (what OS_CACERT names).
	CAFile string
	// AuthURL is the cloud's auth URL through the front (https).
	AuthURL string

	cert    tls.Certificate
	mu      sync.Mutex
	fronts  map[string]string // backend origin (http://127.0.0.1:port) -> https origin
	servers []*http.Server
	closed  bool
	// Requests counts the requests the front forwarded, by backend origin.
	requests map[string]int
}

// loopbackOrigin matches the plain-HTTP loopback origins a test cloud names: any
// address of 127.0.0.0/8 (the 2025.1 target of hack/openstack.sh is on 127.0.0.2).
var loopbackOrigin = regexp.MustCompile(`http://(127(?:\.[0-9]{1,3}){3}|localhost):[0-9]+`)

// Start fronts the cloud whose Keystone is at authURL (http, loopback); dir receives
// the CA's PEM file.
func Start(authURL, dir string) (*Front, error) {
	u, err := url.Parse(authURL)
	if err != nil || u.Scheme != "http" || !loopbackOrigin.MatchString(u.Scheme+"://"+u.Host) {
		return nil, fmt.Errorf("tlsfront: %q is not a plain-HTTP loopback URL", authURL)
	}
	caPEM, cert, err := newCA()
	if err != nil {
		return nil, err
	}
	f := &Front{CAFile: filepath.Join(dir, "cloud-ca.pem"), cert: cert, fronts: map[string]string{}, requests: map[string]int{}}
	if err := os.WriteFile(f.CAFile, caPEM, 0o644); err != nil {
		return nil, err
	}
	origin := u.Scheme + "://" + u.Host
	front, err := f.front(origin)
	if err != nil {
		return nil, err
	}
	f.AuthURL = front + u.RequestURI()
	return f, nil
}

// Close stops every listener.
func (f *Front) Close() {
	f.mu.Lock()
	f.closed = true
	servers := f.servers
	f.mu.Unlock()
	for _, s := range servers {
		_ = s.Close()
	}
}

// Requests returns how many requests the front forwarded to each backend origin.
func (f *Front) Requests() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.requests))
	for k, v := range f.requests {
		out[k] = v
	}
	return out
}

// front returns the https origin of a backend origin, starting its listener the first
// time the origin is named.
func (f *Front) front(origin string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u, ok := f.fronts[origin]; ok {
		return u, nil
	}
	if f.closed {
		return "", fmt.Errorf("tlsfront: closed")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	backend, _ := url.Parse(origin)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(backend)
			r.Out.Host = backend.Host
			// The transport asks for gzip itself and decompresses, so the body can be
			// rewritten.
			r.Out.Header.Del("Accept-Encoding")
		},
		ModifyResponse: f.rewrite,
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests[origin]++
		f.mu.Unlock()
		proxy.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second,
		// Refused handshakes (the tests' controls) are expected, not worth a log line.
		ErrorLog:  log.New(io.Discard, "", 0),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{f.cert}, MinVersion: tls.VersionTLS12}}
	go func() { _ = srv.Serve(tls.NewListener(ln, srv.TLSConfig)) }()
	f.servers = append(f.servers, srv)
	u := "https://" + ln.Addr().String()
	f.fronts[origin] = u
	return u, nil
}

// rewrite points every loopback HTTP origin in a response (body and Location) at its
// front.
func (f *Front) rewrite(resp *http.Response) error {
	if loc := resp.Header.Get("Location"); loc != "" {
		out, err := f.replace([]byte(loc))
		if err != nil {
			return err
		}
		resp.Header.Set("Location", string(out))
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return err
	}
	out, err := f.replace(body)
	if err != nil {
		return err
	}
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	resp.Header.Del("Content-Encoding")
	return nil
}

func (f *Front) replace(b []byte) ([]byte, error) {
	var ferr error
	out := loopbackOrigin.ReplaceAllFunc(b, func(m []byte) []byte {
		u, err := f.front(string(m))
		if err != nil {
			ferr = err
			return m
		}
		return []byte(u)
	})
	return out, ferr
}

// newCA makes a CA and a certificate it signs for 127.0.0.1 and localhost.
func newCA() (caPEM []byte, cert tls.Certificate, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, cert, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bnerd-vpn-operator test cloud CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, cert, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, cert, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, cert, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, cert, err
	}
	cert = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), cert, nil
}
