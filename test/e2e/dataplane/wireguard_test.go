//go:build vmtest

// This file is compiled only into the test binary the kernel dataplane VM runs
// (TestDataplaneKernelVM builds it with -tags vmtest): the test machines' kernels have no
// WireGuard, so on the host the test would have nothing to run.

package dataplane

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"bnerd.net/vpn-operator/internal/agent/nat"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
	"bnerd.net/vpn-operator/test/e2e/netns"
)

// TestWireGuardKernel runs kernel WireGuard between two namespaces joined by a bridge
// namespace (where the capture is taken: nothing is encrypted or decrypted there) and
// puts the project's interface guard (nat.GuardInterface with the WireGuard device as the
// tunnel) in front of it. It shows: the module loads and a pair passes traffic; only UDP
// 51820 crosses the wire; with the device gone the guard drops what would otherwise leave
// in the clear (its counter moves); and, as the negative control, without the guard the
// same capture does see plaintext. It checks the kernel pieces alone; the WireGuard
// gateway built on them (a VPNGateway with protocol wireguard: its agent, exporter and
// status agent) has its own end-to-end tests in test/e2e/wireguard (TestWireGuardGateway,
// and TestWireGuardKernelVM with kernel WireGuard).
func TestWireGuardKernel(t *testing.T) {
	testenv.NeedRoot(t, "needs root")
	for _, b := range []string{"wg", "ip", "tcpdump", "ping", "nft"} {
		if _, err := exec.LookPath(b); err != nil {
			testenv.SkipDataplane(t, "needs "+b)
		}
	}
	if out, err := exec.Command("modprobe", "wireguard").CombinedOutput(); err != nil {
		t.Fatalf("modprobe wireguard: %v %s", err, out)
	}
	e := netns.New(t, "bwg")
	dir, ns, run := e.Dir, e.NS, e.Must
	// a is the gateway side (100.64.9.1), b the peer site (198.51.100.1), w the wire
	// between them (a bridge). Each end routes the other's subnet into wg0; the default
	// routes over the wire are the leak path a missing tunnel would take.
	e.Apply(netns.Topology{
		Namespaces: []string{"a", "b", "w"},
		Bridges:    []netns.Bridge{{Role: "w", Name: "br0"}},
		Links: []netns.Link{
			{A: "w", ADev: "pa", B: "a", BDev: "wire0", Bridge: "br0"},
			{A: "w", ADev: "pb", B: "b", BDev: "wire0", Bridge: "br0"},
		},
		Addrs: []netns.Addr{
			{Role: "a", Dev: "wire0", CIDR: "192.0.2.1/24"},
			{Role: "b", Dev: "wire0", CIDR: "192.0.2.2/24"},
			{Role: "a", Dev: "lo", CIDR: "100.64.9.1/32"},
			{Role: "b", Dev: "lo", CIDR: "198.51.100.1/32"},
		},
		Routes: []netns.Route{
			{Role: "a", Dst: "default", Via: "192.0.2.2"},
			{Role: "b", Dst: "default", Via: "192.0.2.1"},
		},
	})
	keys := map[string]string{}
	for _, r := range []string{"a", "b"} {
		k := strings.TrimSpace(run("", "wg", "genkey"))
		if err := os.WriteFile(filepath.Join(dir, r+".key"), []byte(k+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("wg", "pubkey")
		cmd.Stdin = strings.NewReader(k + "\n")
		pub, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		keys[r] = strings.TrimSpace(string(pub))
	}
	tunnel := func() {
		for r, p := range map[string]struct{ peer, endpoint, allowed string }{
			"a": {"b", "192.0.2.2:51820", "198.51.100.0/24"},
			"b": {"a", "192.0.2.1:51820", "100.64.9.0/24"},
		} {
			run(ns(r), "ip", "link", "add", "wg0", "type", "wireguard")
			run(ns(r), "wg", "set", "wg0", "private-key", filepath.Join(dir, r+".key"), "listen-port", "51820",
				"peer", keys[p.peer], "endpoint", p.endpoint, "allowed-ips", p.allowed)
			run(ns(r), "ip", "link", "set", "wg0", "up")
			run(ns(r), "ip", "route", "add", p.allowed, "dev", "wg0")
		}
	}
	tunnel()

	// The project's guard, programmed in a exactly as init-nat does for a tunnel device.
	model := &gatewayconfig.NAT{PeerSubnets: []string{"198.51.100.0/24"}, ForwardSNATAddress: "192.0.2.1", ReverseSNATAddress: "100.64.9.1"}
	var prog *nat.Programmer
	var drift *nat.DriftChecker
	guard := func() {
		t.Helper()
		if _, err := inNetns(ns("a"), func() (bool, error) {
			var err error
			if prog == nil {
				if prog, err = nat.New(nat.Options{Guard: nat.GuardInterface, TunnelInterface: "wg0"}); err != nil {
					return false, err
				}
				drift = nat.NewDriftChecker(prog)
			}
			prog.Invalidate()
			return prog.Sync(context.Background(), model)
		}); err != nil {
			t.Fatalf("guard: %v", err)
		}
	}
	dropped := func() uint64 {
		t.Helper()
		if _, err := inNetns(ns("a"), func() (string, error) { return drift.Check(false) }); err != nil {
			t.Fatal(err)
		}
		n, _ := drift.GuardDropped()
		return n
	}
	guard()

	capture := func(name string) func() wire {
		stop := e.Capture(name, "w", "br0", 128)
		return func() wire {
			f := stop()
			return wire{
				all:   readPcap(t, f, "ip"),
				esp:   readPcap(t, f, "udp port 51820"),
				other: readPcap(t, f, "ip and not udp port 51820"),
				inner: readPcap(t, f, "net 198.51.100.0/24 or net 100.64.0.0/10"),
			}
		}
	}
	ping := func(n int) (string, error) {
		out, err := exec.Command("ip", "netns", "exec", ns("a"), "ping", "-n", "-q", "-c", itoa(n), "-i", "0.2", "-W", "2", "-I", "100.64.9.1", "198.51.100.1").CombinedOutput()
		return string(out), err
	}

	t.Run("a WireGuard pair passes traffic and only UDP 51820 crosses the wire", func(t *testing.T) {
		stop := capture("up")
		if out, err := ping(10); err != nil {
			t.Fatalf("ping through wg0: %v\n%s", err, out)
		}
		w := stop()
		figure(t.Logf, "wireguard: %d packets on the wire (%d UDP 51820), %d other, %d with inner addresses", len(w.all), len(w.esp), len(w.other), len(w.inner))
		if len(w.inner) != 0 || len(w.other) != 0 || len(w.esp) < 20 {
			t.Errorf("wire: %d inner, %d other, %d WireGuard:\n%s", len(w.inner), len(w.other), len(w.esp), strings.Join(netns.First(append(w.inner, w.other...), 10), "\n"))
		}
		if hs := run(ns("a"), "wg", "show", "wg0", "latest-handshakes"); strings.HasSuffix(strings.TrimSpace(hs), "\t0") {
			t.Errorf("no handshake: %s", hs)
		}
	})

	t.Run("device gone: the guard drops what would leave in the clear", func(t *testing.T) {
		before := dropped()
		stop := capture("down")
		run(ns("a"), "ip", "link", "del", "wg0")
		_, _ = ping(10) // fails: dropped by the guard
		w := stop()
		n := dropped() - before
		figure(t.Logf, "wireguard: device deleted: %d packets with inner addresses on the wire, guard dropped %d", len(w.inner), n)
		if len(w.inner) != 0 {
			t.Errorf("plaintext on the wire with the device gone:\n%s", strings.Join(netns.First(w.inner, 10), "\n"))
		}
		if n < 10 {
			t.Errorf("the guard dropped %d of 10 pings", n)
		}
	})

	t.Run("negative control: without the guard the capture sees plaintext", func(t *testing.T) {
		run(ns("a"), "nft", "delete", "table", "ip", nat.DefaultTable)
		stop := capture("control")
		_, _ = ping(5)
		w := stop()
		figure(t.Logf, "wireguard negative control (guard and device removed): %d packets with inner addresses on the wire", len(w.inner))
		if len(w.inner) == 0 {
			t.Errorf("no plaintext without guard and device: the capture could not have seen a leak")
		}
	})

	t.Run("guard and tunnel restored", func(t *testing.T) {
		guard()
		// b still has its wg0; recreate a's.
		run(ns("b"), "ip", "link", "del", "wg0")
		tunnel()
		stop := capture("restored")
		if out, err := ping(5); err != nil {
			t.Errorf("ping after the restore: %v\n%s", err, out)
		}
		w := stop()
		if len(w.inner) != 0 || len(w.esp) == 0 {
			t.Errorf("after the restore: %d inner, %d WireGuard packets", len(w.inner), len(w.esp))
		}
	})
}
