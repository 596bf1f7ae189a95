package dataplane

import (
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/vishvananda/netns"
)

// The VM has no network device, so the kube-apiserver the kernel-mode test talks to (the
// project's envtest control plane, running on the host at native speed) is reached over
// one virtio-serial port: the host end serves a yamux session on the unix socket qemu
// connects the port to and dials the API server for every stream; the guest end listens
// on 127.0.0.1 in the network namespaces that need the API (the test's own, and the
// gateway pod's) and opens a stream per connection. TLS runs end to end through it, so
// the agents verify the API server's certificate (issued for 127.0.0.1) and authenticate
// with their ServiceAccount token exactly as in a cluster.

func muxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	// Software emulation stalls the guest for seconds at a time; a keepalive timeout would
	// tear down a healthy session.
	c.EnableKeepAlive = false
	c.ConnectionWriteTimeout = 5 * time.Minute
	c.StreamOpenTimeout = 5 * time.Minute
	c.LogOutput = io.Discard
	return c
}

func pipe(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
	_ = a.Close()
	_ = b.Close()
}

// serveAPIPort accepts qemu's connection on ln and forwards every stream of the session
// to target until ln is closed.
func serveAPIPort(ln net.Listener, target string) {
	conn, err := ln.Accept()
	if err != nil {
		return
	}
	sess, err := yamux.Server(conn, muxConfig())
	if err != nil {
		_ = conn.Close()
		return
	}
	go func() {
		<-sess.CloseChan()
		_ = ln.Close()
	}()
	for {
		s, err := sess.Accept()
		if err != nil {
			return
		}
		go func() {
			up, err := net.DialTimeout("tcp", target, 10*time.Second)
			if err != nil {
				_ = s.Close()
				return
			}
			pipe(s, up)
		}()
	}
}

// guestAPI is the guest end: one yamux client session on the virtio-serial port.
type guestAPI struct {
	sess *yamux.Session
}

var (
	guestOnce sync.Once
	guest     *guestAPI
	guestErr  error
)

// sharedGuestAPI is the test binary's one session on the port, opened by the first test
// that needs the API server and kept until the process exits. The port is one byte
// stream for the whole boot and the host serves one session on it: a second client
// session (a later test in the same boot dialling again) restarts yamux's stream IDs
// inside the host's running session, and closing the first ends the host's session and
// its listener, so every test after the first found no API server (its loader never
// applied a tunnel).
func sharedGuestAPI(port string) (*guestAPI, error) {
	guestOnce.Do(func() { guest, guestErr = dialGuestAPI(port) })
	return guest, guestErr
}

func dialGuestAPI(port string) (*guestAPI, error) {
	f, err := os.OpenFile(port, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	sess, err := yamux.Client(f, muxConfig())
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &guestAPI{sess: sess}, nil
}

// listen forwards connections to addr in the network namespace nsName ("" = the
// current one) through the session. The listening socket stays in that namespace after
// the thread switches back.
func (g *guestAPI) listen(nsName, addr string) (net.Listener, error) {
	var ln net.Listener
	var err error
	if nsName == "" {
		ln, err = net.Listen("tcp", addr)
	} else {
		ln, err = inNetns(nsName, func() (net.Listener, error) { return net.Listen("tcp", addr) })
	}
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				s, err := g.sess.Open()
				if err != nil {
					_ = c.Close()
					return
				}
				pipe(c, s)
			}()
		}
	}()
	return ln, nil
}

// inNetns runs f on a thread switched into the named network namespace.
func inNetns[T any](name string, f func() (T, error)) (T, error) {
	var zero T
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return zero, err
	}
	defer orig.Close()
	target, err := netns.GetFromName(name)
	if err != nil {
		return zero, fmt.Errorf("netns %s: %w", name, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		return zero, err
	}
	out, ferr := f()
	if err := netns.Set(orig); err != nil {
		// The thread is unusable now; the runtime discards a locked thread that exits
		// locked, so leave it locked.
		runtime.LockOSThread()
		return zero, fmt.Errorf("switching back from netns %s: %w", name, err)
	}
	return out, ferr
}
