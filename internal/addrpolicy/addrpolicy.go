// Package addrpolicy holds the address ranges a gateway must never reach into or route
// to: the special-purpose IPv4 ranges (above all the cloud's metadata service), and the
// operator's own ranges (the service-CIDR pool, the gateway network). The API's
// validation and the gateway agent's config check both use it, so a hostile or
// hand-edited configuration is refused by the pod even when it got past the API.
package addrpolicy

import (
	"fmt"
	"net/netip"
)

// Range is a refused range and why.
type Range struct {
	Prefix netip.Prefix
	Why    string
}

// SpecialPurpose are the IPv4 ranges no exposure may target and no client network may
// overlap, whatever the operator configures.
var SpecialPurpose = []Range{
	{netip.MustParsePrefix("0.0.0.0/8"), "\"this network\" (0.0.0.0/8)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback (127.0.0.0/8): it would reach the gateway pod itself"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (169.254.0.0/16), home of the cloud's metadata service 169.254.169.254, which would answer with the node's instance data"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast (224.0.0.0/4)"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved (240.0.0.0/4, with the broadcast address)"},
}

// SpecialAddress returns why a is a special-purpose address, or "" when it is not.
func SpecialAddress(a netip.Addr) string {
	for _, r := range SpecialPurpose {
		if r.Prefix.Contains(a) {
			return r.Why
		}
	}
	return ""
}

// SpecialOverlap returns why p overlaps a special-purpose range, or "" when it does not.
func SpecialOverlap(p netip.Prefix) string {
	for _, r := range SpecialPurpose {
		if r.Prefix.Overlaps(p) {
			return r.Why
		}
	}
	return ""
}

// Policy adds the operator's own ranges to the special-purpose ones.
type Policy struct {
	// ServiceCIDRPool is the pool gateway /24s are carved from: another gateway's
	// virtual IPs live there.
	ServiceCIDRPool netip.Prefix
	// GatewaySubnet is the gateway network's subnet (other gateways' ports, the
	// ClusterLink legs, the routers' and DHCP's ports); unset until known.
	GatewaySubnet netip.Prefix
	// ExposureTargets, when not empty, is the only space exposure targets may lie in.
	ExposureTargets []netip.Prefix
	// InternalSources are the operator's internal source networks (the gateway
	// cluster's fabric: nodes, pods): no peer lives there.
	InternalSources []netip.Prefix
}

// ExposureTarget returns an error saying why a may not be an exposure's target.
func (p Policy) ExposureTarget(a netip.Addr) error {
	if err := p.target(a); err != nil {
		return err
	}
	if len(p.ExposureTargets) > 0 {
		for _, x := range p.ExposureTargets {
			if x.Contains(a) {
				return nil
			}
		}
		return fmt.Errorf("is outside the operator's allowed exposure targets %v (IPSEC_EXPOSURE_TARGET_CIDRS)", p.ExposureTargets)
	}
	return nil
}

// ReverseTarget returns an error saying why a may not be a reverse exposure's target.
func (p Policy) ReverseTarget(a netip.Addr) error { return p.target(a) }

func (p Policy) target(a netip.Addr) error {
	if why := SpecialAddress(a); why != "" {
		return fmt.Errorf("is a special-purpose address: %s", why)
	}
	if p.ServiceCIDRPool.IsValid() && p.ServiceCIDRPool.Contains(a) {
		return fmt.Errorf("lies in the service-CIDR pool %s, where other gateways' virtual IPs live", p.ServiceCIDRPool)
	}
	if p.GatewaySubnet.IsValid() && p.GatewaySubnet.Contains(a) {
		return fmt.Errorf("lies in the gateway network's subnet %s (gateway ports, ClusterLink legs, routers), which no exposure may reach", p.GatewaySubnet)
	}
	return nil
}

// ClientSubnet returns an error saying why s may not be a client (peer) network. The
// gateway network's subnet is not judged here: the gateway reconciler reports that
// overlap under its own reason once the port's subnet is known.
func (p Policy) ClientSubnet(s netip.Prefix) error {
	if why := SpecialOverlap(s); why != "" {
		return fmt.Errorf("overlaps a special-purpose range: %s", why)
	}
	if p.ServiceCIDRPool.IsValid() && p.ServiceCIDRPool.Overlaps(s) {
		return fmt.Errorf("overlaps the service-CIDR pool %s: traffic to other gateways' virtual IPs would be taken for the client's", p.ServiceCIDRPool)
	}
	return nil
}

// PeerAddress returns an error saying why a may not be a tunnel's peer address or a
// WireGuard peer's endpoint. The pod routes the peer's /32 out of its dedicated port and
// the security group admits IKE from it, so a peer inside a range the operator uses
// would pull the pod's own traffic (to the API server, the metadata service, another
// gateway's virtual IPs or port) out of that port and open the group to it. Private
// ranges stay allowed: a platform's clients may sit in RFC 1918 space. Documentation
// (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24) and benchmark (198.18.0.0/15) ranges
// stay allowed too: they reach nothing the gateway depends on, and test worlds use them.
func (p Policy) PeerAddress(a netip.Addr) error {
	if why := SpecialAddress(a); why != "" {
		return fmt.Errorf("is a special-purpose address: %s", why)
	}
	if p.ServiceCIDRPool.IsValid() && p.ServiceCIDRPool.Contains(a) {
		return fmt.Errorf("lies in the service-CIDR pool %s, where gateways' virtual IPs live", p.ServiceCIDRPool)
	}
	if p.GatewaySubnet.IsValid() && p.GatewaySubnet.Contains(a) {
		return fmt.Errorf("lies in the gateway network's subnet %s (gateway ports, ClusterLink legs, routers)", p.GatewaySubnet)
	}
	for _, x := range p.InternalSources {
		if x.Contains(a) {
			return fmt.Errorf("lies in the operator's internal source network %s (the gateway cluster's own fabric)", x)
		}
	}
	return nil
}

// Without returns the prefixes with every address of cut taken out: a prefix inside
// cut goes, a prefix holding cut is split into the prefixes around it, the others
// stay. The operator's internal sources go through it with the gateway network: that
// network holds every gateway's port, and a gateway never trusts another's.
func Without(prefixes []netip.Prefix, cut netip.Prefix) []netip.Prefix {
	if !cut.IsValid() {
		return prefixes
	}
	cut = cut.Masked()
	var out []netip.Prefix
	for _, p := range prefixes {
		p = p.Masked()
		switch {
		case !p.Overlaps(cut):
			out = append(out, p)
		case p.Bits() >= cut.Bits():
			// Inside cut: nothing of it is left.
		default:
			// p holds cut: halve p until one half is cut; each other half stays.
			for q := p; q.Bits() < cut.Bits(); {
				lo, hi := halves(q)
				if lo.Contains(cut.Addr()) {
					out = append(out, hi)
					q = lo
				} else {
					out = append(out, lo)
					q = hi
				}
			}
		}
	}
	return out
}

// halves splits p into its two halves.
func halves(p netip.Prefix) (netip.Prefix, netip.Prefix) {
	bits := p.Bits() + 1
	lo := netip.PrefixFrom(p.Addr(), bits).Masked()
	a := lo.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v |= 1 << (32 - bits)
	hi := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), bits)
	return lo, hi
}
