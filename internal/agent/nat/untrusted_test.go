package nat

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/testinfra/world"
)

// The gateway network is never a trusted source (docs/security.md, H1 of the security
// review): another gateway's port (here 10.254.0.9, on the gateway's own network) does
// not reach this gateway's reverse exposure, while a fabric host behind the router
// (10.250.0.20) does, by the same path. Real kernel, real nftables: a gateway namespace
// with the agent's table, its port on the gateway network, a client behind a tunnel
// device. Negative control: the same table without the untrusted sources lets the
// other port through.
func TestAnotherGatewaysPortIsNoSource(t *testing.T) {
	inNetns(t, func() {}) // the same root and nft checks
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	pre := "bnut" + hex.EncodeToString(b) + "-"
	gw, transit, client := pre+"g", pre+"t", pre+"c"
	sh := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", args, err, out)
		}
	}
	for _, ns := range []string{gw, transit, client} {
		sh("ip", "netns", "add", ns)
		ns := ns
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		sh("ip", "-n", ns, "link", "set", "lo", "up")
	}
	in := func(ns string, args ...string) {
		t.Helper()
		sh(append([]string{"ip", "netns", "exec", ns}, args...)...)
	}
	// The gateway network: the gateway's port .5; on the other side the router (.1) and
	// another gateway's port (.9), with a fabric host behind the router.
	sh("ip", "link", "add", "net1", "netns", gw, "type", "veth", "peer", "name", "tr0", "netns", transit)
	in(gw, "ip", "addr", "add", "10.254.0.5/24", "dev", "net1")
	in(transit, "ip", "addr", "add", "10.254.0.1/24", "dev", "tr0")
	in(transit, "ip", "addr", "add", "10.254.0.9/24", "dev", "tr0")
	in(transit, "ip", "addr", "add", "10.250.0.20/32", "dev", "lo")
	in(transit, "ip", "link", "set", "tr0", "up")
	in(gw, "ip", "link", "set", "net1", "up")
	in(transit, "ip", "route", "add", "100.64.7.0/24", "via", "10.254.0.5")
	in(gw, "ip", "route", "add", "10.250.0.0/16", "via", "10.254.0.1")
	// The tunnel side: the client's host behind the gateway's tunnel device.
	sh("ip", "link", "add", "tun0", "netns", gw, "type", "veth", "peer", "name", "eth0", "netns", client)
	in(gw, "ip", "addr", "add", "198.51.100.1/24", "dev", "tun0")
	in(client, "ip", "addr", "add", "198.51.100.10/24", "dev", "eth0")
	in(gw, "ip", "link", "set", "tun0", "up")
	in(client, "ip", "link", "set", "eth0", "up")
	in(client, "ip", "route", "add", "default", "via", "198.51.100.1")
	in(gw, "sysctl", "-qw", "net.ipv4.ip_forward=1")

	var ln net.Listener
	if err := world.InNS(client, func() (err error) { ln, err = net.Listen("tcp", "198.51.100.10:8080"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	dial := func(from string) error {
		return world.InNS(transit, func() error {
			d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
			c, err := d.Dial("tcp", "100.64.7.201:8080")
			if err == nil {
				_ = c.Close()
			}
			return err
		})
	}
	m := &gatewayconfig.NAT{
		PeerSubnets:        []string{"198.51.100.0/24"},
		ForwardSNATAddress: "10.254.0.5",
		ReverseSNATAddress: "100.64.7.1",
		ReverseAll:         []gatewayconfig.AddrMapping{{VirtualIP: "100.64.7.201", Target: "198.51.100.10", Owner: "erp"}},
		UntrustedSources:   []string{"10.254.0.0/24"},
	}
	var p *Programmer
	sync := func(m *gatewayconfig.NAT) {
		t.Helper()
		if err := world.InNS(gw, func() error {
			var err error
			if p == nil {
				if p, err = New(Options{TunnelInterface: "tun0"}); err != nil {
					return err
				}
			}
			_, err = p.Sync(context.Background(), m)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	sync(m)

	if err := dial("10.250.0.20"); err != nil {
		t.Fatalf("a fabric host behind the router does not reach the reverse exposure: %v", err)
	}
	if err := dial("10.254.0.9"); err == nil {
		t.Fatal("another port of the gateway network reached the reverse exposure")
	}
	if n := untrustedDrops(t, gw); n == 0 {
		t.Fatal("the other port's connection was not dropped by the untrusted-source rule")
	}

	// Negative control: without the rule the same connection goes through, so the rule
	// is what stopped it.
	open := *m
	open.UntrustedSources = nil
	sync(&open)
	if err := dial("10.254.0.9"); err != nil {
		t.Fatalf("without the untrusted sources the other port still cannot connect, so something else stopped it: %v", err)
	}
}

var reUntrustedCounter = regexp.MustCompile(`counter packets (\d+) bytes \d+ drop comment "` + UntrustedComment + `"`)

func untrustedDrops(t *testing.T, ns string) int {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "chain", "ip", DefaultTable, ChainPrerouting).CombinedOutput()
	if err != nil {
		t.Fatalf("nft: %v %s", err, out)
	}
	m := reUntrustedCounter.FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("no untrusted-source rule:\n%s", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
