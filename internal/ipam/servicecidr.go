// Package ipam holds the operator's pure address allocators: each gateway's /24 from the
// service CIDR pool, the virtual IPs inside it, and transit IPs for ClusterLinks. Nothing
// here talks to the API server or OpenStack; callers persist every result to status
// before anything outside the API depends on it.
package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
)

// Errors of the service CIDR pool.
var (
	// ErrPoolExhausted: every /24 of the pool is claimed.
	ErrPoolExhausted = errors.New("service CIDR pool exhausted")
	// ErrCIDRTaken: the wanted /24 is claimed by another gateway.
	ErrCIDRTaken = errors.New("service CIDR already allocated to another gateway")
	// ErrOutsidePool: the wanted /24 is not a /24 of the pool.
	ErrOutsidePool = errors.New("service CIDR outside the pool")
)

// ServiceCIDRPool hands out /24s of a pool to owners (gateway UIDs). It is safe for
// concurrent use: two reconciles can never be given the same /24, because the claim is
// taken under the mutex before either persists it.
type ServiceCIDRPool struct {
	mu      sync.Mutex
	pool    netip.Prefix
	byCIDR  map[netip.Prefix]string
	byOwner map[string]netip.Prefix
}

// NewServiceCIDRPool returns an empty pool. The pool must be an IPv4 network of /24 or
// larger with no host bits set.
func NewServiceCIDRPool(pool netip.Prefix) (*ServiceCIDRPool, error) {
	if !pool.IsValid() || !pool.Addr().Is4() || pool.Bits() > 24 || pool.Masked() != pool {
		return nil, fmt.Errorf("service CIDR pool %s: must be an IPv4 network of /24 or larger with no host bits set", pool)
	}
	return &ServiceCIDRPool{pool: pool, byCIDR: map[netip.Prefix]string{}, byOwner: map[string]netip.Prefix{}}, nil
}

// Pool returns the pool's network.
func (p *ServiceCIDRPool) Pool() netip.Prefix { return p.pool }

// Contains reports whether cidr is one of the pool's /24s.
func (p *ServiceCIDRPool) Contains(cidr netip.Prefix) bool {
	return cidr.IsValid() && cidr.Bits() == 24 && cidr.Masked() == cidr && p.pool.Contains(cidr.Addr())
}

// Claim records that owner holds cidr: an allocation read back from status, or a /24
// implied by pinned virtual IPs. Claiming what the owner already holds is a no-op; an
// owner holding a different /24 moves to cidr (its old /24 is freed).
func (p *ServiceCIDRPool) Claim(owner string, cidr netip.Prefix) error {
	if !p.Contains(cidr) {
		return fmt.Errorf("%w: %s is not a /24 of %s", ErrOutsidePool, cidr, p.pool)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if holder, ok := p.byCIDR[cidr]; ok && holder != owner {
		return fmt.Errorf("%w: %s", ErrCIDRTaken, cidr)
	}
	if old, ok := p.byOwner[owner]; ok && old != cidr {
		delete(p.byCIDR, old)
	}
	p.byCIDR[cidr] = owner
	p.byOwner[owner] = cidr
	return nil
}

// Allocate returns owner's /24, claiming the lowest free one that overlaps none of avoid
// (the client's own networks: a virtual IP inside them could never be told apart from the
// client's addresses) when it holds none.
func (p *ServiceCIDRPool) Allocate(owner string, avoid ...netip.Prefix) (netip.Prefix, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.byOwner[owner]; ok {
		return c, nil
	}
	n := 1 << (24 - p.pool.Bits())
	base := p.pool.Addr().As4()
	start := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8
	for i := 0; i < n; i++ {
		v := start + uint32(i)<<8
		c := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), 0}), 24)
		if _, taken := p.byCIDR[c]; taken || overlapsAny(c, avoid) {
			continue
		}
		p.byCIDR[c] = owner
		p.byOwner[owner] = c
		return c, nil
	}
	return netip.Prefix{}, fmt.Errorf("%w: all %d /24s of %s are allocated", ErrPoolExhausted, n, p.pool)
}

// Lookup returns owner's /24.
func (p *ServiceCIDRPool) Lookup(owner string) (netip.Prefix, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.byOwner[owner]
	return c, ok
}

// Holder returns the owner of cidr.
func (p *ServiceCIDRPool) Holder(cidr netip.Prefix) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	o, ok := p.byCIDR[cidr]
	return o, ok
}

// Release frees owner's /24, if any.
func (p *ServiceCIDRPool) Release(owner string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.byOwner[owner]; ok {
		delete(p.byCIDR, c)
		delete(p.byOwner, owner)
	}
}

// Allocations lists every claim, sorted by CIDR (for diagnostics and tests).
func (p *ServiceCIDRPool) Allocations() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]string, len(p.byOwner))
	for o, c := range p.byOwner {
		out[o] = c.String()
	}
	return out
}

// Len is the number of claimed /24s.
func (p *ServiceCIDRPool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byOwner)
}

// GatewayAddress is .1 of a gateway's /24: the SNAT source of reverse exposures.
func GatewayAddress(cidr netip.Prefix) netip.Addr {
	return cidr.Masked().Addr().Next()
}

func overlapsAny(c netip.Prefix, others []netip.Prefix) bool {
	for _, o := range others {
		if c.Overlaps(o) {
			return true
		}
	}
	return false
}

// OverlapsAny reports the first of others that overlaps c.
func OverlapsAny(c netip.Prefix, others []netip.Prefix) (netip.Prefix, bool) {
	for _, o := range others {
		if c.Overlaps(o) {
			return o, true
		}
	}
	return netip.Prefix{}, false
}
