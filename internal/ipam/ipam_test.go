package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
)

func TestServiceCIDRPoolAllocatesLowestFreeAndIsStable(t *testing.T) {
	p, err := NewServiceCIDRPool(netip.MustParsePrefix("100.64.0.0/16"))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := p.Allocate("a")
	b, _ := p.Allocate("b")
	if a.String() != "100.64.0.0/24" || b.String() != "100.64.1.0/24" {
		t.Fatalf("got %s %s", a, b)
	}
	again, _ := p.Allocate("a")
	if again != a {
		t.Fatalf("second allocate for the same owner moved it: %s", again)
	}
	p.Release("a")
	c, _ := p.Allocate("c")
	if c != a {
		t.Fatalf("released /24 not reused: %s", c)
	}
}

func TestServiceCIDRPoolClaims(t *testing.T) {
	p, _ := NewServiceCIDRPool(netip.MustParsePrefix("100.64.0.0/22"))
	if err := p.Claim("a", netip.MustParsePrefix("100.64.2.0/24")); err != nil {
		t.Fatal(err)
	}
	if err := p.Claim("b", netip.MustParsePrefix("100.64.2.0/24")); !errors.Is(err, ErrCIDRTaken) {
		t.Fatalf("want ErrCIDRTaken, got %v", err)
	}
	if err := p.Claim("b", netip.MustParsePrefix("100.65.0.0/24")); !errors.Is(err, ErrOutsidePool) {
		t.Fatalf("want ErrOutsidePool, got %v", err)
	}
	if err := p.Claim("b", netip.MustParsePrefix("100.64.0.0/23")); !errors.Is(err, ErrOutsidePool) {
		t.Fatalf("a /23 is not a gateway CIDR: %v", err)
	}
	// Allocation skips the claimed /24.
	got := []string{}
	for i := 0; i < 3; i++ {
		c, err := p.Allocate(fmt.Sprint("x", i))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, c.String())
	}
	if fmt.Sprint(got) != "[100.64.0.0/24 100.64.1.0/24 100.64.3.0/24]" {
		t.Fatalf("got %v", got)
	}
	if _, err := p.Allocate("y"); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("want ErrPoolExhausted, got %v", err)
	}
	// Moving an owner frees its old /24.
	if err := p.Claim("a", netip.MustParsePrefix("100.64.2.0/24")); err != nil {
		t.Fatal(err)
	}
	p.Release("x0")
	if err := p.Claim("a", netip.MustParsePrefix("100.64.0.0/24")); err != nil {
		t.Fatal(err)
	}
	if _, held := p.Holder(netip.MustParsePrefix("100.64.2.0/24")); held {
		t.Fatal("old /24 still held after move")
	}
}

func TestServiceCIDRPoolConcurrentAllocationsNeverCollide(t *testing.T) {
	p, _ := NewServiceCIDRPool(netip.MustParsePrefix("100.64.0.0/16"))
	var wg sync.WaitGroup
	results := make([]netip.Prefix, 256)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := p.Allocate(fmt.Sprint("gw-", i))
			if err != nil {
				t.Error(err)
			}
			results[i] = c
		}()
	}
	wg.Wait()
	seen := map[netip.Prefix]bool{}
	for _, c := range results {
		if seen[c] {
			t.Fatalf("%s handed out twice", c)
		}
		seen[c] = true
	}
	if _, err := p.Allocate("one-too-many"); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("a /16 has 256 /24s; want exhaustion, got %v", err)
	}
}

func TestNewServiceCIDRPoolRefusesBadPools(t *testing.T) {
	for _, s := range []string{"100.64.0.0/25", "100.64.0.1/16", "fd00::/64"} {
		if _, err := NewServiceCIDRPool(netip.MustParsePrefix(s)); err == nil {
			t.Errorf("%s accepted", s)
		}
	}
}

var cidr = netip.MustParsePrefix("100.64.3.0/24")

func TestAssignVIPsAutoAndPinned(t *testing.T) {
	got, err := AssignVIPs(cidr, ForwardRange, []VIPRequest{{Name: "a"}, {Name: "b", Pinned: "100.64.3.10"}, {Name: "c"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "[{a 100.64.3.11} {b 100.64.3.10} {c 100.64.3.12}]"
	if fmt.Sprint(got) != want {
		t.Fatalf("got %v want %s", got, want)
	}
	rev, err := AssignVIPs(cidr, ReverseRange, []VIPRequest{{Name: "r"}}, nil)
	if err != nil || rev[0].VirtualIP != "100.64.3.200" {
		t.Fatalf("reverse: %v %v", rev, err)
	}
}

func TestAssignVIPsKeepsPreviousAddresses(t *testing.T) {
	prev := []VIPAssignment{{"a", "100.64.3.10"}, {"b", "100.64.3.11"}, {"c", "100.64.3.12"}}
	// a is removed; b and c keep their addresses; the new d takes the freed .10.
	got, err := AssignVIPs(cidr, ForwardRange, []VIPRequest{{Name: "b"}, {Name: "c"}, {Name: "d"}}, prev)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[{b 100.64.3.11} {c 100.64.3.12} {d 100.64.3.10}]" {
		t.Fatalf("got %v", got)
	}
	// A new pin on c's address wins; c moves.
	got, err = AssignVIPs(cidr, ForwardRange, []VIPRequest{{Name: "c"}, {Name: "e", Pinned: "100.64.3.12"}}, prev)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[{c 100.64.3.10} {e 100.64.3.12}]" {
		t.Fatalf("got %v", got)
	}
	// A remembered address from another /24 (the CIDR changed) is not kept.
	got, _ = AssignVIPs(netip.MustParsePrefix("100.64.4.0/24"), ForwardRange, []VIPRequest{{Name: "b"}}, prev)
	if got[0].VirtualIP != "100.64.4.10" {
		t.Fatalf("got %v", got)
	}
}

func TestAssignVIPsRefusesPins(t *testing.T) {
	cases := map[string][]VIPRequest{
		"reserved .1":         {{Name: "a", Pinned: "100.64.3.1"}},
		"reverse range":       {{Name: "a", Pinned: "100.64.3.200"}},
		"below range":         {{Name: "a", Pinned: "100.64.3.9"}},
		"other /24":           {{Name: "a", Pinned: "100.64.4.10"}},
		"duplicate pin":       {{Name: "a", Pinned: "100.64.3.20"}, {Name: "b", Pinned: "100.64.3.20"}},
		"not an IPv4":         {{Name: "a", Pinned: "fd00::1"}},
		"unparseable garbage": {{Name: "a", Pinned: "ten"}},
	}
	for name, reqs := range cases {
		if _, err := AssignVIPs(cidr, ForwardRange, reqs, nil); !errors.Is(err, ErrPinRefused) {
			t.Errorf("%s: want ErrPinRefused, got %v", name, err)
		}
	}
	if _, err := AssignVIPs(cidr, ReverseRange, []VIPRequest{{Name: "r", Pinned: "100.64.3.199"}}, nil); !errors.Is(err, ErrPinRefused) {
		t.Errorf("reverse pin in the forward range accepted: %v", err)
	}
}

func TestAssignVIPsExhaustionNeverEncroaches(t *testing.T) {
	var reqs []VIPRequest
	for i := 0; i < 55; i++ {
		reqs = append(reqs, VIPRequest{Name: fmt.Sprint("r", i)})
	}
	got, err := AssignVIPs(cidr, ReverseRange, reqs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got[54].VirtualIP != "100.64.3.254" {
		t.Fatalf("last: %v", got[54])
	}
	reqs = append(reqs, VIPRequest{Name: "one-too-many"})
	if _, err := AssignVIPs(cidr, ReverseRange, reqs, nil); !errors.Is(err, ErrRangeExhausted) {
		t.Fatalf("want ErrRangeExhausted, got %v", err)
	}
	reqs = nil
	for i := 0; i < 191; i++ {
		reqs = append(reqs, VIPRequest{Name: fmt.Sprint("f", i)})
	}
	if _, err := AssignVIPs(cidr, ForwardRange, reqs, nil); !errors.Is(err, ErrRangeExhausted) {
		t.Fatalf("191 forward exposures: want ErrRangeExhausted, got %v", err)
	}
	got, err = AssignVIPs(cidr, ForwardRange, reqs[:190], nil)
	if err != nil || got[189].VirtualIP != "100.64.3.199" {
		t.Fatalf("190 forward exposures: %v %v", got[189], err)
	}
}

func TestPinnedCIDR(t *testing.T) {
	if c, ok := PinnedCIDR("", "100.64.7.33"); !ok || c.String() != "100.64.7.0/24" {
		t.Fatalf("got %v %v", c, ok)
	}
	if _, ok := PinnedCIDR("", ""); ok {
		t.Fatal("no pins must report false")
	}
	if GatewayAddress(cidr).String() != "100.64.3.1" {
		t.Fatal("gateway address")
	}
}

func FuzzAssignVIPs(f *testing.F) {
	f.Add("100.64.3.10", "", "100.64.3.250", uint8(3))
	f.Fuzz(func(t *testing.T, p1, p2, p3 string, n uint8) {
		reqs := []VIPRequest{{Name: "a", Pinned: p1}, {Name: "b", Pinned: p2}, {Name: "c", Pinned: p3}}
		for i := 0; i < int(n%50); i++ {
			reqs = append(reqs, VIPRequest{Name: fmt.Sprint("x", i)})
		}
		for _, rng := range []VIPRange{ForwardRange, ReverseRange} {
			got, err := AssignVIPs(cidr, rng, reqs, nil)
			if err != nil {
				continue
			}
			seen := map[string]bool{}
			for _, g := range got {
				a := netip.MustParseAddr(g.VirtualIP)
				o := a.As4()[3]
				if !cidr.Contains(a) || o < rng.First || o > rng.Last || seen[g.VirtualIP] {
					t.Fatalf("bad assignment %v in %v", g, got)
				}
				seen[g.VirtualIP] = true
			}
		}
	})
}

func TestServiceCIDRAllocateAvoidsClientNetworks(t *testing.T) {
	p, err := NewServiceCIDRPool(netip.MustParsePrefix("100.64.0.0/22"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.Allocate("a", netip.MustParsePrefix("100.64.0.0/23"))
	if err != nil || c.String() != "100.64.2.0/24" {
		t.Fatalf("got %v %v, want 100.64.2.0/24", c, err)
	}
	if _, err := p.Allocate("b", netip.MustParsePrefix("100.64.0.0/16")); err == nil {
		t.Fatal("a pool entirely inside the client's network must be exhausted for it")
	}
	if o, bad := OverlapsAny(netip.MustParsePrefix("100.64.2.0/24"), []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("100.64.2.128/25")}); !bad || o.String() != "100.64.2.128/25" {
		t.Fatalf("OverlapsAny = %v %v", o, bad)
	}
}
