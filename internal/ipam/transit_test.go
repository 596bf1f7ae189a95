package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
)

var transitNet = netip.MustParsePrefix("10.254.0.0/24")

func TestTransitRangeSkipsReserved(t *testing.T) {
	first, last, err := TransitRange(transitNet)
	if err != nil {
		t.Fatal(err)
	}
	if first.String() != "10.254.0.3" || last.String() != "10.254.0.254" {
		t.Fatalf("range = %s-%s, want 10.254.0.3-10.254.0.254", first, last)
	}
	for _, bad := range []string{"10.254.0.0", "10.254.0.1", "10.254.0.2", "10.254.0.255", "10.254.1.3"} {
		if err := CheckTransitIP(transitNet, netip.MustParseAddr(bad)); err == nil {
			t.Errorf("CheckTransitIP(%s) accepted a reserved or foreign address", bad)
		}
	}
	if err := CheckTransitIP(transitNet, netip.MustParseAddr("10.254.0.3")); err != nil {
		t.Errorf("CheckTransitIP(.3): %v", err)
	}
	if _, _, err := TransitRange(netip.MustParsePrefix("10.0.0.0/30")); err == nil {
		t.Error("a /30 has no room for legs but was accepted")
	}
	if _, _, err := TransitRange(netip.MustParsePrefix("10.0.0.1/24")); err == nil {
		t.Error("a prefix with host bits was accepted")
	}
}

func TestNextTransitIPLowestUsable(t *testing.T) {
	busy := map[string]bool{"10.254.0.3": true, "10.254.0.4": true, "10.254.0.6": true}
	a, err := NextTransitIP(transitNet, func(a netip.Addr) bool { return !busy[a.String()] })
	if err != nil || a.String() != "10.254.0.5" {
		t.Fatalf("NextTransitIP = %s, %v; want 10.254.0.5", a, err)
	}
	_, err = NextTransitIP(netip.MustParsePrefix("10.254.0.0/29"), func(netip.Addr) bool { return false })
	if !errors.Is(err, ErrTransitExhausted) {
		t.Fatalf("full subnet: err = %v, want ErrTransitExhausted", err)
	}
	// A /29 offers .3 to .6.
	n := 0
	_, _ = NextTransitIP(netip.MustParsePrefix("10.254.0.8/29"), func(a netip.Addr) bool { n++; return false })
	if n != 4 {
		t.Fatalf("a /29 offered %d leg addresses, want 4", n)
	}
}

func TestTransitClaimsSkipListedAndInMemory(t *testing.T) {
	c := NewTransitClaims()
	pickLowest := func(claimed func(netip.Addr) (string, bool)) (netip.Addr, error) {
		return NextTransitIP(transitNet, func(a netip.Addr) bool { _, taken := claimed(a); return !taken })
	}
	listed := map[string][]netip.Addr{"b": {netip.MustParseAddr("10.254.0.3")}}
	a, err := c.Allocate("a", listed, pickLowest)
	if err != nil || a.String() != "10.254.0.4" {
		t.Fatalf("a got %s, %v; want .4 (.3 listed for b)", a, err)
	}
	// c does not see a's claim in any list yet, only in memory.
	x, err := c.Allocate("c", listed, pickLowest)
	if err != nil || x.String() != "10.254.0.5" {
		t.Fatalf("c got %s, %v; want .5", x, err)
	}
	// An owner's own listed address is not taken for itself.
	y, err := c.Allocate("b", listed, pickLowest)
	if err != nil || y.String() != "10.254.0.3" {
		t.Fatalf("b got %s, %v; want its own .3", y, err)
	}
	if o, ok := c.Owner(netip.MustParseAddr("10.254.0.5")); !ok || o != "c" {
		t.Fatalf("owner of .5 = %q, %v", o, ok)
	}
	c.Release("a")
	z, err := c.Allocate("d", nil, pickLowest)
	if err != nil || z.String() != "10.254.0.4" {
		t.Fatalf("d got %s, %v; want .4 after a released it", z, err)
	}
}

func TestTransitClaimsConcurrentNeverShare(t *testing.T) {
	c := NewTransitClaims()
	const n = 64
	var wg sync.WaitGroup
	got := make([]netip.Addr, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := c.Allocate(fmt.Sprintf("owner-%d", i), nil, func(claimed func(netip.Addr) (string, bool)) (netip.Addr, error) {
				return NextTransitIP(transitNet, func(a netip.Addr) bool { _, taken := claimed(a); return !taken })
			})
			if err != nil {
				t.Error(err)
			}
			got[i] = a
		}()
	}
	wg.Wait()
	seen := map[netip.Addr]bool{}
	for _, a := range got {
		if seen[a] {
			t.Fatalf("address %s handed out twice", a)
		}
		seen[a] = true
	}
	if len(c.Snapshot()) != n {
		t.Fatalf("snapshot has %d claims, want %d", len(c.Snapshot()), n)
	}
}
