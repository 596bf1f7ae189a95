package nat

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"sigs.k8s.io/knftables"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

func model(n int) *gatewayconfig.NAT {
	m := &gatewayconfig.NAT{
		PeerSubnets:        []string{"198.51.100.0/24"},
		ForwardSNATAddress: "203.0.113.5",
		ReverseSNATAddress: "100.64.7.1",
		MSSClamp:           gatewayconfig.MSSClamp{Enabled: true},
	}
	for i := 0; i < n; i++ {
		vip := fmt.Sprintf("100.%d.%d.%d", 64+i/65536, (i/256)%256, i%256)
		m.ExposurePorts = append(m.ExposurePorts, gatewayconfig.PortMapping{VirtualIP: vip, Protocol: "tcp", Port: 443, Target: "203.0.113.20", TargetPort: 443, Owner: fmt.Sprintf("e%d", i)})
	}
	m.ReverseAll = []gatewayconfig.AddrMapping{{VirtualIP: "100.64.7.201", Target: "198.51.100.10", Owner: "r"}}
	return m
}

func TestIncrementalTouchesOnlyChangedElements(t *testing.T) {
	fake := knftables.NewFake(knftables.IPv4Family, DefaultTable)
	p, err := NewWithInterface(fake, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	full, err := p.Sync(ctx, model(50))
	if err != nil || !full {
		t.Fatalf("first sync: full=%v err=%v", full, err)
	}
	dump := fake.Dump()
	for _, want := range []string{"oifname != \"ipsec0\" counter drop", "dnat ip to ip daddr . meta l4proto . th dport map @exposure_ports", "snat ip to 203.0.113.5", "snat ip to 100.64.7.1", "maxseg size set rt mtu", "maxseg size set 1360"} {
		if !strings.Contains(dump, want) {
			t.Errorf("ruleset lacks %q:\n%s", want, dump)
		}
	}

	m := model(51)
	m.ExposurePorts[0].Target = "203.0.113.21" // changed value
	full, err = p.Sync(ctx, m)
	if err != nil || full {
		t.Fatalf("second sync: full=%v err=%v", full, err)
	}
	tx := fake.LastTransaction.String()
	// one delete + one add for the changed element, one add for the new one; nothing else
	if got := fake.LastTransaction.NumOperations(); got != 3 {
		t.Errorf("incremental transaction has %d operations, want 3:\n%s", got, tx)
	}
	for _, forbidden := range []string{"flush", "table", "chain", "rule"} {
		for _, line := range strings.Split(tx, "\n") {
			if strings.HasPrefix(line, "add "+forbidden) || strings.HasPrefix(line, forbidden) || strings.HasPrefix(line, "delete "+forbidden) {
				t.Errorf("incremental transaction touches %s: %s", forbidden, line)
			}
		}
	}
	els, _ := fake.ListElements(ctx, "map", MapExposurePorts)
	if len(els) != 51 {
		t.Errorf("map has %d elements, want 51", len(els))
	}

	// unchanged model: no transaction at all
	before := fake.LastTransaction
	if _, err := p.Sync(ctx, m); err != nil {
		t.Fatal(err)
	}
	if fake.LastTransaction != before {
		t.Error("unchanged model ran a transaction")
	}

	// a rule parameter change forces a full, still single, transaction
	m2 := model(51)
	m2.ForwardSNATAddress = "203.0.113.6"
	if full, err := p.Sync(ctx, m2); err != nil || !full {
		t.Fatalf("rule change: full=%v err=%v", full, err)
	}
	if !strings.Contains(fake.Dump(), "snat ip to 203.0.113.6") || strings.Contains(fake.Dump(), "snat ip to 203.0.113.5") {
		t.Errorf("rules not rewritten:\n%s", fake.Dump())
	}
}

func TestXFRMGuardRules(t *testing.T) {
	fake := knftables.NewFake(knftables.IPv4Family, DefaultTable)
	p, err := NewWithInterface(fake, Options{Guard: GuardXFRM})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Sync(context.Background(), model(1)); err != nil {
		t.Fatal(err)
	}
	d := fake.Dump()
	if !strings.Contains(d, "rt ipsec missing counter drop") || !strings.Contains(d, "meta ipsec exists ip saddr @peer_subnets dnat") || strings.Contains(d, "ipsec0") {
		t.Errorf("xfrm ruleset:\n%s", d)
	}
}

// A WireGuard gateway has two tunnel devices while a key rotation serves both keys: the
// guard admits the client subnets through either and through no other device, and the
// tunnel's DNAT rules match traffic from either.
func TestGuardAdmitsEveryTunnelDevice(t *testing.T) {
	fake := knftables.NewFake(knftables.IPv4Family, DefaultTable)
	p, err := NewWithInterface(fake, Options{TunnelInterface: "wg0,wg1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Sync(context.Background(), model(1)); err != nil {
		t.Fatal(err)
	}
	d := fake.Dump()
	for _, want := range []string{
		`ip daddr @peer_subnets oifname != { "wg0", "wg1" } counter drop`,
		`iifname { "wg0", "wg1" } ip saddr @peer_subnets dnat`,
		`iifname != { "wg0", "wg1" } dnat`,
	} {
		if !strings.Contains(d, want) {
			t.Errorf("no %q in the ruleset:\n%s", want, d)
		}
	}
	if strings.Contains(d, `"wg0,wg1"`) {
		t.Errorf("the list went into a rule as one name:\n%s", d)
	}
}

func TestOptionsRejectInjection(t *testing.T) {
	for _, o := range []Options{{TunnelInterface: `ipsec0" accept #`}, {TunnelInterface: `wg0,wg1" accept #`}, {TunnelInterface: " , "}, {Guard: "none"}, {TunnelMTU: 10}} {
		if _, err := NewWithInterface(knftables.NewFake(knftables.IPv4Family, DefaultTable), o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
}

// inNetns runs f on a locked OS thread in a fresh network namespace, so nft and netlink
// act there only.
func inNetns(t testing.TB, f func()) {
	t.Helper()
	testenv.NeedRoot(t, "needs root for a network namespace")
	if _, err := exec.LookPath("nft"); err != nil {
		testenv.SkipDataplane(t, "needs the nft binary (Debian package nftables)")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		ns, err := netns.New()
		if err != nil {
			t.Error(err)
			return
		}
		defer ns.Close()
		f()
	}()
	<-done
}

func TestRealTableDriftRepair(t *testing.T) {
	inNetns(t, func() {
		ctx := context.Background()
		p, err := New(Options{})
		if err != nil {
			t.Error(err)
			return
		}
		m := model(100)
		if _, err := p.Sync(ctx, m); err != nil {
			t.Errorf("sync: %v", err)
			return
		}
		d := NewDriftChecker(p)
		if msg, err := d.Check(true); msg != "" || err != nil {
			t.Errorf("fresh table reported drift %q %v", msg, err)
		}
		nft := func(args ...string) {
			if out, err := exec.Command("nft", args...).CombinedOutput(); err != nil {
				t.Errorf("nft %v: %v %s", args, err, out)
			}
		}
		for _, tamper := range [][]string{
			{"delete", "element", "ip", DefaultTable, MapExposurePorts, "{ 100.64.0.5 . tcp . 443 }"},
			{"flush", "chain", "ip", DefaultTable, ChainForward},
			{"add", "rule", "ip", DefaultTable, ChainGuard, "accept"},
			{"delete", "table", "ip", DefaultTable},
			{"delete", "element", "ip", DefaultTable, SetPeerSubnets, "{ 198.51.100.0/24 }"},
		} {
			nft(tamper...)
			msg, err := d.Check(true)
			if err != nil || msg == "" {
				t.Errorf("tamper %v not detected (%q, %v)", tamper, msg, err)
				continue
			}
			p.Invalidate()
			if _, err := p.Sync(ctx, m); err != nil {
				t.Errorf("repair after %v: %v", tamper, err)
			}
			if msg, _ := d.Check(true); msg != "" {
				t.Errorf("after repair of %v still drift: %s", tamper, msg)
			}
		}
		// incremental on the real table
		m2 := model(101)
		if full, err := p.Sync(ctx, m2); err != nil || full {
			t.Errorf("incremental: full=%v %v", full, err)
		}
		if msg, _ := d.Check(true); msg != "" {
			t.Errorf("after incremental: %s", msg)
		}
	})
}

// With the port interface named, the guard keeps IKE and ESP on it; without, no such
// rule exists (tests of other parts of the ruleset run without a port).
func TestIKEGuardFollowsThePortInterface(t *testing.T) {
	for _, port := range []string{"net1", ""} {
		fake := knftables.NewFake(knftables.IPv4Family, DefaultTable)
		p, err := NewWithInterface(fake, Options{PortInterface: port})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Sync(context.Background(), model(1)); err != nil {
			t.Fatal(err)
		}
		dump := fake.Dump()
		for _, rule := range []string{`udp sport { 500, 4500 } oifname != "net1" counter drop`, `udp dport { 500, 4500 } oifname != "net1" counter drop`, `meta l4proto esp oifname != "net1" counter drop`} {
			if got := strings.Contains(dump, rule); got != (port != "") {
				t.Errorf("port %q: rule %q present=%v:\n%s", port, rule, got, dump)
			}
		}
	}
	if _, err := NewWithInterface(knftables.NewFake(knftables.IPv4Family, DefaultTable), Options{PortInterface: "net1; drop"}); err == nil {
		t.Error("a port interface name with nft syntax in it was accepted")
	}
}

// TestGuardDropCounterSurvivesRewrite makes the interface guard drop locally generated
// packets to a peer subnet (routed to lo, not the tunnel device) and reads the drop count
// through the drift check: it counts exactly the dropped pings, and keeps counting up
// across a deleted and re-created table (new rules start from zero).
func TestGuardDropCounterSurvivesRewrite(t *testing.T) {
	inNetns(t, func() {
		ctx := context.Background()
		run := func(args ...string) {
			if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
				t.Errorf("%v: %v %s", args, err, out)
			}
		}
		run("ip", "link", "set", "lo", "up")
		run("ip", "route", "add", "198.51.100.0/24", "dev", "lo")
		p, err := New(Options{})
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := p.Sync(ctx, model(1)); err != nil {
			t.Error(err)
			return
		}
		d := NewDriftChecker(p)
		check := func() uint64 {
			if msg, err := d.Check(false); msg != "" || err != nil {
				t.Errorf("drift %q %v", msg, err)
			}
			n, seen := d.GuardDropped()
			if !seen {
				t.Error("no guard rule seen")
			}
			return n
		}
		if n := check(); n != 0 {
			t.Errorf("dropped %d before any traffic", n)
		}
		ping := func(n int) {
			// Every echo request is dropped by the output guard; ping fails, as it should.
			_ = exec.Command("ping", "-n", "-q", "-c", strconv.Itoa(n), "-i", "0.2", "-W", "1", "198.51.100.5").Run()
		}
		ping(3)
		if n := check(); n != 3 {
			t.Errorf("guard dropped %d, want 3", n)
		}
		run("nft", "delete", "table", "ip", DefaultTable)
		if msg, _ := d.Check(false); msg == "" {
			t.Error("deleted table not detected")
		}
		p.Invalidate()
		if _, err := p.Sync(ctx, model(1)); err != nil {
			t.Error(err)
			return
		}
		ping(2)
		if n := check(); n != 5 {
			t.Errorf("guard dropped %d in total across the rewrite, want 5", n)
		}
	})
}

// TestInputChainKeepsTheClientOffThePod: in a network namespace with the gateway's
// addresses, a client address from a peer subnet cannot open a connection to a
// listener of the pod (the exporter's port on the port's fixed IP), while another
// source can, and the same client could before the table was applied and can again
// once the input rule is deleted: the rule, nothing else, refuses it.
func TestInputChainKeepsTheClientOffThePod(t *testing.T) {
	inNetns(t, func() {
		ip := func(args ...string) {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				t.Errorf("ip %v: %v %s", args, err, out)
			}
		}
		ip("link", "set", "lo", "up")
		// The pod's own address, a client address inside the peer subnet, and another.
		for _, a := range []string{"10.254.0.17/32", "198.51.100.9/32", "10.9.9.9/32"} {
			ip("addr", "add", a, "dev", "lo")
		}
		ln, err := net.Listen("tcp", "10.254.0.17:9903")
		if err != nil {
			t.Error(err)
			return
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
			d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
			c, err := d.Dial("tcp", "10.254.0.17:9903")
			if err == nil {
				_ = c.Close()
			}
			return err
		}
		if err := dial("198.51.100.9"); err != nil {
			t.Errorf("without the table the client address connects: %v", err)
			return
		}
		// The guard's tunnel device is lo here, so the guard lets the replies through:
		// only the input chain can refuse the client.
		p, err := New(Options{TunnelInterface: "lo"})
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := p.Sync(context.Background(), model(1)); err != nil {
			t.Errorf("sync: %v", err)
			return
		}
		if err := dial("198.51.100.9"); err == nil {
			t.Error("a client address connected to the pod through the table")
		}
		if err := dial("10.9.9.9"); err != nil {
			t.Errorf("another source was refused too: %v", err)
		}
		if out, err := exec.Command("nft", "flush", "chain", "ip", DefaultTable, ChainInput).CombinedOutput(); err != nil {
			t.Errorf("nft flush: %v %s", err, out)
		}
		if err := dial("198.51.100.9"); err != nil {
			t.Errorf("with the input chain flushed the client still cannot connect, so something else refused it: %v", err)
		}
	})
}
