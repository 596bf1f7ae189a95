package ipam

import (
	"errors"
	"fmt"
	"net/netip"
)

// Errors of virtual IP assignment. Each error names the exposure it concerns.
var (
	// ErrRangeExhausted: the range has no free address left for an exposure.
	ErrRangeExhausted = errors.New("virtual IP range exhausted")
	// ErrPinRefused: a pinned virtual IP is outside its range, outside the gateway's
	// /24, the reserved .1, or already claimed.
	ErrPinRefused = errors.New("pinned virtual IP refused")
)

// VIPRange is a host range of a gateway's /24, by last octet.
type VIPRange struct {
	Name        string
	First, Last uint8
}

// The two ranges of the specification. They never grow into each other.
var (
	ForwardRange = VIPRange{Name: "exposure", First: 10, Last: 199}
	ReverseRange = VIPRange{Name: "reverse exposure", First: 200, Last: 254}
)

// VIPRequest is one exposure asking for a virtual IP; Pinned is its spec.virtualIP.
type VIPRequest struct {
	Name   string
	Pinned string
}

// VIPAssignment is the virtual IP given to one exposure.
type VIPAssignment struct {
	Name      string
	VirtualIP string
}

// AssignVIPs gives every request a virtual IP of rng inside cidr. Pins are honoured
// exactly or refused; an exposure that already had an address (previous, from status)
// keeps it while it is still valid and not taken by a pin, so adding or removing another
// exposure never renumbers it; everything else gets the lowest free address. The result
// is in request order. A full range is an error, never an address of another range.
func AssignVIPs(cidr netip.Prefix, rng VIPRange, reqs []VIPRequest, previous []VIPAssignment) ([]VIPAssignment, error) {
	if !cidr.Addr().Is4() || cidr.Bits() != 24 {
		return nil, fmt.Errorf("service CIDR %s is not an IPv4 /24", cidr)
	}
	cidr = cidr.Masked()
	base := cidr.Addr().As4()
	at := func(octet uint8) netip.Addr {
		b := base
		b[3] = octet
		return netip.AddrFrom4(b)
	}
	inRange := func(a netip.Addr) bool {
		if !cidr.Contains(a) {
			return false
		}
		o := a.As4()[3]
		return o >= rng.First && o <= rng.Last
	}

	used := map[netip.Addr]string{}
	out := make([]VIPAssignment, len(reqs))
	// Pins first: they are the user's explicit word and win over remembered addresses.
	for i, r := range reqs {
		out[i].Name = r.Name
		if r.Pinned == "" {
			continue
		}
		a, err := netip.ParseAddr(r.Pinned)
		switch {
		case err != nil || !a.Is4():
			return nil, fmt.Errorf("%w: %s %q: %s is not an IPv4 address", ErrPinRefused, rng.Name, r.Name, r.Pinned)
		case a == GatewayAddress(cidr):
			return nil, fmt.Errorf("%w: %s %q: %s is .1 of %s, reserved as the gateway's SNAT source address", ErrPinRefused, rng.Name, r.Name, r.Pinned, cidr)
		case !cidr.Contains(a):
			return nil, fmt.Errorf("%w: %s %q: %s is not in the gateway's service CIDR %s", ErrPinRefused, rng.Name, r.Name, r.Pinned, cidr)
		case !inRange(a):
			return nil, fmt.Errorf("%w: %s %q: %s is outside .%d-.%d of %s", ErrPinRefused, rng.Name, r.Name, r.Pinned, rng.First, rng.Last, cidr)
		}
		if other, dup := used[a]; dup {
			return nil, fmt.Errorf("%w: %s %q: %s is already pinned by %q", ErrPinRefused, rng.Name, r.Name, r.Pinned, other)
		}
		used[a] = r.Name
		out[i].VirtualIP = a.String()
	}
	prev := map[string]netip.Addr{}
	for _, p := range previous {
		if a, err := netip.ParseAddr(p.VirtualIP); err == nil {
			prev[p.Name] = a
		}
	}
	for i, r := range reqs {
		if out[i].VirtualIP != "" {
			continue
		}
		if a, ok := prev[r.Name]; ok && inRange(a) {
			if _, taken := used[a]; !taken {
				used[a] = r.Name
				out[i].VirtualIP = a.String()
			}
		}
	}
	next := int(rng.First)
	for i, r := range reqs {
		if out[i].VirtualIP != "" {
			continue
		}
		for ; next <= int(rng.Last); next++ {
			if _, taken := used[at(uint8(next))]; !taken {
				break
			}
		}
		if next > int(rng.Last) {
			return nil, fmt.Errorf("%w: no free address in .%d-.%d of %s for %s %q (%d addresses, %d requested)",
				ErrRangeExhausted, rng.First, rng.Last, cidr, rng.Name, r.Name, int(rng.Last)-int(rng.First)+1, len(reqs))
		}
		a := at(uint8(next))
		used[a] = r.Name
		out[i].VirtualIP = a.String()
	}
	return out, nil
}

// PinnedCIDR returns the /24 implied by the pinned virtual IPs (all pins of a gateway
// lie in one /24; Validate enforces that), or false when nothing is pinned.
func PinnedCIDR(pins ...string) (netip.Prefix, bool) {
	for _, p := range pins {
		if p == "" {
			continue
		}
		if a, err := netip.ParseAddr(p); err == nil && a.Is4() {
			return netip.PrefixFrom(a, 24).Masked(), true
		}
	}
	return netip.Prefix{}, false
}
