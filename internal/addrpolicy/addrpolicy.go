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
