package gatewayconfig

import (
	"fmt"
	"net/netip"
	"sort"
)

// NAT is the dataplane model the agent programs into nftables: sets and maps whose
// elements grow with exposures while the rules stay fixed, so per-packet cost does not
// depend on how many exposures exist.
type NAT struct {
	// PeerSubnets are every tunnel's remote subnets: the fail-closed guard's set.
	PeerSubnets []string
	// ForwardSNATAddress is the port's fixed IP, the source exposure targets see.
	ForwardSNATAddress string
	// ReverseSNATAddress is .1 of the service CIDR, the source reverse-exposure targets see.
	ReverseSNATAddress string
	// ExposurePorts maps virtual IP . protocol . port to target . port for exposures with
	// ports; ExposureAll maps virtual IP to target for exposures without.
	ExposurePorts []PortMapping
	ExposureAll   []AddrMapping
	// ReversePorts and ReverseAll are the same for reverse exposures.
	ReversePorts []PortMapping
	ReverseAll   []AddrMapping
	MSSClamp     MSSClamp
	// RoutedSubnets are the remote subnets of routed-mode tunnels: never source-NATed,
	// and forwarded to and from InternalSources by their real addresses. Both empty
	// without routed tunnels.
	RoutedSubnets   []string
	InternalSources []string
	// UntrustedSources are dropped before any translation unless they come from or go
	// to the port's own address (ForwardSNATAddress).
	UntrustedSources []string
}

// PortMapping is one `vip . proto . port : target . port` map element.
type PortMapping struct {
	VirtualIP  string
	Protocol   string
	Port       int32
	Target     string
	TargetPort int32
	// Owner names the exposure the element belongs to (for counters and comments).
	Owner string
}

// AddrMapping is one `vip : target` map element.
type AddrMapping struct {
	VirtualIP string
	Target    string
	Owner     string
}

// Key returns the element's map key in nft notation.
func (p PortMapping) Key() []string {
	return []string{p.VirtualIP, p.Protocol, fmt.Sprint(p.Port)}
}

// Value returns the element's map value in nft notation.
func (p PortMapping) Value() []string {
	return []string{p.Target, fmt.Sprint(p.TargetPort)}
}

// NATModel derives the NAT model from a validated Config. The output is sorted, so two
// models of the same config compare equal.
func NATModel(cfg *Config) (*NAT, error) {
	if err := Validate(cfg); err != nil {
		return nil, err
	}
	m := &NAT{
		PeerSubnets:        cfg.PeerSubnets(),
		ForwardSNATAddress: cfg.PortFixedIP,
		ReverseSNATAddress: cfg.GatewayAddress,
		ExposurePorts:      []PortMapping{},
		ExposureAll:        []AddrMapping{},
		ReversePorts:       []PortMapping{},
		ReverseAll:         []AddrMapping{},
		MSSClamp:           cfg.MSSClamp,
		RoutedSubnets:      cfg.RoutedSubnets(),
		InternalSources:    outermost(cfg.InternalSources),
		UntrustedSources:   outermost(cfg.UntrustedSources),
	}
	for _, e := range cfg.Exposures {
		if len(e.Ports) == 0 {
			m.ExposureAll = append(m.ExposureAll, AddrMapping{VirtualIP: e.VirtualIP, Target: e.TargetAddress, Owner: e.Name})
		}
		for _, p := range e.Ports {
			m.ExposurePorts = append(m.ExposurePorts, PortMapping{VirtualIP: e.VirtualIP, Protocol: p.Protocol, Port: p.Port, Target: e.TargetAddress, TargetPort: p.Port, Owner: e.Name})
		}
	}
	for _, r := range cfg.ReverseExposures {
		if len(r.Ports) == 0 {
			m.ReverseAll = append(m.ReverseAll, AddrMapping{VirtualIP: r.VirtualIP, Target: r.TargetAddress, Owner: r.Name})
		}
		for _, p := range r.Ports {
			m.ReversePorts = append(m.ReversePorts, PortMapping{VirtualIP: r.VirtualIP, Protocol: p.Protocol, Port: p.Port, Target: r.TargetAddress, TargetPort: p.Port, Owner: r.Name})
		}
	}
	sortPorts(m.ExposurePorts)
	sortPorts(m.ReversePorts)
	sortAddrs(m.ExposureAll)
	sortAddrs(m.ReverseAll)
	return m, nil
}

func sortPorts(s []PortMapping) {
	sort.Slice(s, func(i, j int) bool {
		a, b := s[i], s[j]
		if a.VirtualIP != b.VirtualIP {
			return a.VirtualIP < b.VirtualIP
		}
		if a.Protocol != b.Protocol {
			return a.Protocol < b.Protocol
		}
		return a.Port < b.Port
	})
}

func sortAddrs(s []AddrMapping) {
	sort.Slice(s, func(i, j int) bool { return s[i].VirtualIP < s[j].VirtualIP })
}

// outermost drops every prefix another one of the list contains (nft refuses
// overlapping intervals in one set) and sorts the rest.
func outermost(cidrs []string) []string {
	var ps []netip.Prefix
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(c); err == nil {
			ps = append(ps, p.Masked())
		}
	}
	var out []string
	for i, p := range ps {
		covered := false
		for j, q := range ps {
			if i != j && q.Bits() <= p.Bits() && q.Contains(p.Addr()) && (q.Bits() < p.Bits() || j < i) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, p.String())
		}
	}
	sortStrings(out)
	return out
}
