package world

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/vishvananda/netns"
)

// InNS runs f on an OS thread switched into network namespace name. Sockets f creates
// belong to that namespace for their whole life, whichever thread uses them later. A
// thread that cannot be switched back is never returned to the Go runtime.
func InNS(name string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		target, err := netns.GetFromName(name)
		if err != nil {
			errc <- fmt.Errorf("namespace %s: %w", name, err)
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			errc <- fmt.Errorf("entering %s: %w", name, err)
			return
		}
		ferr := f()
		if err := netns.Set(orig); err != nil {
			errc <- fmt.Errorf("leaving %s: %w", name, err)
			return // the thread stays locked and dies with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Exec runs a command in namespace ns (ip netns exec) and returns its combined output.
func Exec(ns string, args ...string) (string, error) {
	if ns != "" {
		args = append([]string{"ip", "netns", "exec", ns}, args...)
	}
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// HTTPSServer is a TLS server listening inside a namespace, answering every request
// with its body. Exposures must be TLS services (the spec's policy), so the world's
// backends are HTTPS.
type HTTPSServer struct {
	srv *http.Server
	ln  net.Listener
}

// ServeHTTPS listens on addr inside namespace ns with a fresh self-signed certificate.
func ServeHTTPS(ns, addr, body string) (*HTTPSServer, error) {
	cert, err := selfSigned()
	if err != nil {
		return nil, err
	}
	var ln net.Listener
	if err := InNS(ns, func() error {
		var err error
		ln, err = net.Listen("tcp4", addr)
		return err
	}); err != nil {
		return nil, fmt.Errorf("listening on %s in %s: %w", addr, ns, err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s (from %s)\n", body, r.RemoteAddr)
		}),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 5 * time.Second,
	}
	tl := tls.NewListener(ln, srv.TLSConfig)
	go func() { _ = srv.Serve(tl) }()
	return &HTTPSServer{srv: srv, ln: ln}, nil
}

// Close stops the server.
func (s *HTTPSServer) Close() error { return s.srv.Close() }

// Get does one HTTPS GET from inside namespace ns (certificates are not verified: the
// world's backends are self-signed) and returns the body.
func Get(ctx context.Context, ns, url string, timeout time.Duration) (string, error) {
	dialer := &net.Dialer{Timeout: timeout}
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // self-signed test backends
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := InNS(ns, func() error {
				var err error
				c, err = dialer.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: timeout}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b)), err
}

func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "bnerd world backend"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
