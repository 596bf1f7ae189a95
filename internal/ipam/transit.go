package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"sync"
)

// Transit subnet conventions: .1 is the gateway cluster's own router leg and .2 the
// network's DHCP port, so ClusterLink legs start at .3.
const (
	TransitRouterOffset = 1
	TransitDHCPOffset   = 2
	TransitFirstOffset  = 3
)

// ErrTransitExhausted means every leg address of the transit subnet is taken.
var ErrTransitExhausted = errors.New("no free transit IP left on the transit subnet")

// TransitRange returns the first and last address a leg may use on subnet: .3 up to
// the last host address (the broadcast address is never a host).
func TransitRange(subnet netip.Prefix) (first, last netip.Addr, err error) {
	if !subnet.IsValid() || !subnet.Addr().Is4() || subnet.Masked() != subnet {
		return first, last, fmt.Errorf("transit subnet %s: must be an IPv4 network without host bits", subnet)
	}
	if subnet.Bits() > 29 {
		return first, last, fmt.Errorf("transit subnet %s: too small for ClusterLink legs (.3 upward needs at least a /29)", subnet)
	}
	first = transitOffset(subnet.Addr(), TransitFirstOffset)
	last = transitBroadcast(subnet).Prev()
	return first, last, nil
}

// CheckTransitIP refuses an address that is outside subnet or one of its reserved
// addresses (network, router leg .1, DHCP .2, broadcast).
func CheckTransitIP(subnet netip.Prefix, a netip.Addr) error {
	first, last, err := TransitRange(subnet)
	if err != nil {
		return err
	}
	if !a.Is4() || !subnet.Contains(a) {
		return fmt.Errorf("%s is not inside the transit subnet %s", a, subnet)
	}
	if a.Less(first) || last.Less(a) {
		return fmt.Errorf("%s is reserved on the transit subnet %s (.0 network, .1 gateway router leg, .2 DHCP, broadcast)", a, subnet)
	}
	return nil
}

// NextTransitIP returns the lowest leg address of subnet for which usable says yes.
func NextTransitIP(subnet netip.Prefix, usable func(netip.Addr) bool) (netip.Addr, error) {
	first, last, err := TransitRange(subnet)
	if err != nil {
		return netip.Addr{}, err
	}
	for a := first; !last.Less(a); a = a.Next() {
		if usable(a) {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%w (%s)", ErrTransitExhausted, subnet)
}

func transitOffset(a netip.Addr, n int) netip.Addr {
	for range n {
		a = a.Next()
	}
	return a
}

func transitBroadcast(p netip.Prefix) netip.Addr {
	b := p.Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v |= host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// TransitClaims remembers which owner (a ClusterLink UID) holds which transit IP in
// this process. The API server's list of ClusterLinks lags behind allocations that are
// still being written; keeping this process's own claims under one mutex is what stops
// two concurrent reconciles from handing out one address twice.
type TransitClaims struct {
	mu     sync.Mutex
	claims map[string]netip.Addr
}

// NewTransitClaims returns an empty claim set.
func NewTransitClaims() *TransitClaims {
	return &TransitClaims{claims: map[string]netip.Addr{}}
}

// Allocate picks and records an address for owner while holding the claim lock.
// listed are the claims read from the API server (owner -> address; an owner may hold
// several when spec and status disagree); they are treated as taken together with
// every in-memory claim of another owner. pick chooses an address given the combined
// "claimed by someone else" test; typically it wraps NextTransitIP or checks a pin.
func (c *TransitClaims) Allocate(owner string, listed map[string][]netip.Addr, pick func(claimedByOther func(netip.Addr) (string, bool)) (netip.Addr, error)) (netip.Addr, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	others := map[netip.Addr]string{}
	for o, addrs := range listed {
		if o == owner {
			continue
		}
		for _, a := range addrs {
			if a.IsValid() {
				others[a] = o
			}
		}
	}
	for o, a := range c.claims {
		if o != owner {
			others[a] = o
		}
	}
	a, err := pick(func(x netip.Addr) (string, bool) {
		o, ok := others[x]
		return o, ok
	})
	if err != nil {
		return netip.Addr{}, err
	}
	c.claims[owner] = a
	return a, nil
}

// Hold records an address owner already holds (for example one read back from its
// status), so later allocations in this process skip it.
func (c *TransitClaims) Hold(owner string, a netip.Addr) {
	if !a.IsValid() {
		return
	}
	c.mu.Lock()
	c.claims[owner] = a
	c.mu.Unlock()
}

// Release forgets owner's claim, for example once its ClusterLink is gone.
func (c *TransitClaims) Release(owner string) {
	c.mu.Lock()
	delete(c.claims, owner)
	c.mu.Unlock()
}

// Owner returns who holds a in this process.
func (c *TransitClaims) Owner(a netip.Addr) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for o, x := range c.claims {
		if x == a {
			return o, true
		}
	}
	return "", false
}

// Snapshot returns the claims sorted by address, for diagnostics and tests.
func (c *TransitClaims) Snapshot() []Claim {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Claim, 0, len(c.claims))
	for o, a := range c.claims {
		out = append(out, Claim{Owner: o, Addr: a})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr.Less(out[j].Addr) })
	return out
}

// Claim is one owner's address.
type Claim struct {
	Owner string
	Addr  netip.Addr
}
