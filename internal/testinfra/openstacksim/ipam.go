package openstacksim

import (
	"fmt"
	"net/netip"
)

// ipPool is one subnet's address space. Allocation hands out the lowest free
// host address, skipping the network address, the gateway and (IPv4) the
// broadcast address. hint is a lower bound on the first free address so that
// filling a large subnet stays linear instead of quadratic.
type ipPool struct {
	prefix  netip.Prefix
	gateway netip.Addr // zero when the subnet has no gateway
	first   netip.Addr
	last    netip.Addr
	used    map[netip.Addr]string // address -> owner (port ID, "fip:<id>", "gw:<router>")
	hint    netip.Addr
}

func newPool(cidr, gateway string) (*ipPool, error) {
	pfx, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, fmt.Errorf("invalid cidr %q", cidr)
	}
	if pfx != pfx.Masked() {
		return nil, fmt.Errorf("invalid cidr %q: host bits set", cidr)
	}
	if pfx.Addr().Is4() && pfx.Bits() > 30 || pfx.Addr().Is6() && pfx.Bits() > 126 {
		return nil, fmt.Errorf("cidr %q is too small", cidr)
	}
	p := &ipPool{prefix: pfx, used: map[netip.Addr]string{}}
	p.first = pfx.Addr().Next()
	p.last = lastAddr(pfx)
	if pfx.Addr().Is4() {
		p.last = p.last.Prev()
	}
	if gateway != "" {
		gw, err := netip.ParseAddr(gateway)
		if err != nil || !pfx.Contains(gw) {
			return nil, fmt.Errorf("gateway %q is not in %s", gateway, cidr)
		}
		p.gateway = gw
	}
	p.hint = p.first
	return p, nil
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	bits := p.Bits()
	for i := range b {
		for j := 0; j < 8; j++ {
			if i*8+j >= bits {
				b[i] |= 0x80 >> j
			}
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// usable reports whether a is a host address of the subnet (not network or
// broadcast address).
func (p *ipPool) usable(a netip.Addr) bool {
	return p.prefix.Contains(a) && a.Compare(p.first) >= 0 && a.Compare(p.last) <= 0
}

func (p *ipPool) inUse(a netip.Addr) bool {
	_, ok := p.used[a]
	return ok
}

// allocate takes the lowest free address, skipping the gateway (the gateway
// is only ever taken by an explicit request, normally a router interface).
func (p *ipPool) allocate(owner string) (netip.Addr, bool) {
	for a := p.hint; a.IsValid() && a.Compare(p.last) <= 0; a = a.Next() {
		if a == p.gateway {
			continue
		}
		if _, ok := p.used[a]; ok {
			continue
		}
		p.used[a] = owner
		p.hint = a.Next()
		return a, true
	}
	return netip.Addr{}, false
}

func (p *ipPool) claim(a netip.Addr, owner string) {
	p.used[a] = owner
}

func (p *ipPool) release(a netip.Addr) {
	delete(p.used, a)
	if a.Compare(p.hint) < 0 && a.Compare(p.first) >= 0 {
		p.hint = a
	}
}

func (p *ipPool) allocationPools() []AllocationPool {
	// Neutron reports the host range minus the gateway; a gateway at either
	// end of the range simply shortens it.
	start, end := p.first, p.last
	if p.gateway == start {
		start = start.Next()
	}
	if p.gateway == end {
		end = end.Prev()
	}
	if p.gateway.IsValid() && p.gateway.Compare(start) > 0 && p.gateway.Compare(end) < 0 {
		return []AllocationPool{
			{Start: start.String(), End: p.gateway.Prev().String()},
			{Start: p.gateway.Next().String(), End: end.String()},
		}
	}
	return []AllocationPool{{Start: start.String(), End: end.String()}}
}
