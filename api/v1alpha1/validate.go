package v1alpha1

import (
	"fmt"
	"net/netip"
	"regexp"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bnerd.net/vpn-operator/internal/addrpolicy"
	"bnerd.net/vpn-operator/internal/cryptofloor"
)

// Host ranges inside a gateway's /24, by last octet.
const (
	// GatewayHostOctet is .1, the SNAT source of reverse exposures.
	GatewayHostOctet = 1
	// ExposureFirstOctet..ExposureLastOctet is the range of forward virtual IPs.
	ExposureFirstOctet = 10
	ExposureLastOctet  = 199
	// ReverseFirstOctet..ReverseLastOctet is the range of reverse virtual IPs.
	ReverseFirstOctet = 200
	ReverseLastOctet  = 254
)

// The schema already refuses most of these; Validate repeats the checks because objects
// can predate a schema change, and because the reconciler must never act on input it has
// not checked itself.
var (
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	ikeIdentity  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.@:_-]*$`)
	proposalRe   = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	swanDuration = regexp.MustCompile(`^[0-9]{1,6}[smhd]?$`)
)

// plaintextPorts are well-known ports of protocols that are not encrypted end to end.
// The gateway-to-target hop crosses the fabric in the clear, so exposing one of these
// needs a deliberate allowPlaintext.
var plaintextPorts = map[int32]string{
	20: "FTP data", 21: "FTP", 23: "Telnet", 25: "SMTP", 53: "DNS", 80: "HTTP",
	110: "POP3", 119: "NNTP", 143: "IMAP", 161: "SNMP", 389: "LDAP", 445: "SMB",
	1433: "MSSQL", 3306: "MySQL", 5432: "PostgreSQL", 5900: "VNC", 6379: "Redis",
	8000: "HTTP", 8008: "HTTP", 8080: "HTTP", 8081: "HTTP", 9200: "Elasticsearch HTTP",
	11211: "memcached", 27017: "MongoDB",
}

// Validate checks the gateway spec for what the schema cannot judge. A non-empty list
// means the reconciler must not touch OpenStack.
func (s *GatewaySpec) Validate() field.ErrorList {
	return s.validate(field.NewPath("spec"))
}

// Validate checks a VPNGateway spec: the shared gateway rules plus the protocol (and,
// for wireguard, its peers in place of tunnels).
func (s *VPNGatewaySpec) Validate() field.ErrorList {
	p := field.NewPath("spec")
	switch s.Protocol {
	case "", VPNProtocolIPsec:
		errs := s.GatewaySpec.validate(p)
		if s.WireGuard != nil {
			errs = append(errs, field.Forbidden(p.Child("wireguard"), "only a gateway with protocol wireguard takes spec.wireguard"))
		}
		return errs
	case VPNProtocolWireGuard:
		return s.GatewaySpec.validateWith(p, true, s.WireGuard)
	}
	return append(s.GatewaySpec.validate(p), field.NotSupported(p.Child("protocol"), s.Protocol, []string{string(VPNProtocolIPsec), string(VPNProtocolWireGuard)}))
}

func (s *GatewaySpec) validate(p *field.Path) field.ErrorList { return s.validateWith(p, false, nil) }

// validateWith checks the spec; for protocol wireguard the client's networks come from
// the WireGuard peers in wg instead of the tunnels.
func (s *GatewaySpec) validateWith(p *field.Path, wireguard bool, wg *WireGuardSpec) field.ErrorList {
	var errs field.ErrorList

	if s.Endpoint != nil && s.Endpoint.FloatingIP != "" {
		if _, err := parseIPv4(s.Endpoint.FloatingIP); err != nil {
			errs = append(errs, field.Invalid(p.Child("endpoint", "floatingIP"), s.Endpoint.FloatingIP, err.Error()))
		}
	}

	tp := p.Child("tunnels")
	switch {
	case !wireguard && len(s.Tunnels) == 0:
		errs = append(errs, field.Required(tp, "a gateway needs at least one tunnel"))
	case wireguard && len(s.Tunnels) > 0:
		errs = append(errs, field.Forbidden(tp, "a gateway with protocol wireguard takes its peers from spec.wireguard.peers, not spec.tunnels"))
	}
	// tunnels maps every tunnel (or WireGuard peer) name to the client's networks behind it.
	tunnels := map[string][]string{}
	var remote []owned
	peerIDs := map[string]string{}
	for i := range s.Tunnels {
		t := &s.Tunnels[i]
		ip := tp.Index(i)
		if !dnsLabel.MatchString(t.Name) || len(t.Name) > 32 {
			errs = append(errs, field.Invalid(ip.Child("name"), t.Name, "must be a DNS label of at most 32 characters"))
		}
		if _, dup := tunnels[t.Name]; dup {
			errs = append(errs, field.Duplicate(ip.Child("name"), t.Name))
		}
		tunnels[t.Name] = t.Peer.Subnets
		switch t.Mode {
		case "", TunnelModeSNAT, TunnelModeRouted:
		default:
			errs = append(errs, field.NotSupported(ip.Child("mode"), t.Mode, []string{string(TunnelModeSNAT), string(TunnelModeRouted)}))
		}
		if a, err := parseIPv4(t.Peer.Address); err != nil {
			errs = append(errs, field.Invalid(ip.Child("peer", "address"), t.Peer.Address, err.Error()))
		} else if err := (addrpolicy.Policy{}).PeerAddress(a); err != nil {
			errs = append(errs, field.Invalid(ip.Child("peer", "address"), t.Peer.Address, err.Error()))
		}
		if t.Peer.ID != "" && (!ikeIdentity.MatchString(t.Peer.ID) || len(t.Peer.ID) > 253) {
			errs = append(errs, field.Invalid(ip.Child("peer", "id"), t.Peer.ID, "must be an IP address, an FQDN or user@FQDN"))
		}
		// Two tunnels with one IKE identity would share one PSK entry and charon could not
		// tell which connection a peer means.
		peerID := t.Peer.ID
		if peerID == "" {
			peerID = t.Peer.Address
		}
		if other, dup := peerIDs[peerID]; dup {
			errs = append(errs, field.Duplicate(ip.Child("peer", "id"), fmt.Sprintf("%s (also the identity of tunnel %q; peer.id defaults to peer.address)", peerID, other)))
		}
		peerIDs[peerID] = t.Name
		if len(t.Peer.Subnets) == 0 {
			errs = append(errs, field.Required(ip.Child("peer", "subnets"), "name at least one of the client's networks"))
		}
		for j, sn := range t.Peer.Subnets {
			sp := ip.Child("peer", "subnets").Index(j)
			pfx, err := parseIPv4Prefix(sn)
			if err != nil {
				errs = append(errs, field.Invalid(sp, sn, err.Error()))
				continue
			}
			if err := (addrpolicy.Policy{}).ClientSubnet(pfx); err != nil {
				errs = append(errs, field.Invalid(sp, sn, err.Error()))
			}
			if a, err := netip.ParseAddr(t.Peer.Address); err == nil && pfx.Contains(a) {
				errs = append(errs, field.Invalid(sp, sn, fmt.Sprintf("contains the peer's own address %s: the fail-closed guard would drop the tunnel's own IKE traffic", t.Peer.Address)))
			}
			for _, o := range remote {
				if o.prefix.Overlaps(pfx) {
					errs = append(errs, field.Invalid(sp, sn, fmt.Sprintf("overlaps %s at %s: the gateway could not tell which tunnel carries the traffic", o.prefix, o.path)))
				}
			}
			remote = append(remote, owned{pfx, sp})
		}
		if t.PreSharedKey.Name == "" {
			errs = append(errs, field.Required(ip.Child("preSharedKey", "name"), "name the Secret holding the pre-shared key"))
		}
		errs = append(errs, validateProposals(ip.Child("ike", "proposals"), cryptofloor.IKE, t.IKE.Proposals)...)
		errs = append(errs, validateProposals(ip.Child("esp", "proposals"), cryptofloor.ESP, t.ESP.Proposals)...)
		for _, d := range []struct {
			path *field.Path
			val  string
		}{{ip.Child("ike", "lifetime"), t.IKE.Lifetime}, {ip.Child("esp", "lifetime"), t.ESP.Lifetime}, {ip.Child("dpd", "delay"), t.DPD.Delay}} {
			if d.val != "" && !swanDuration.MatchString(d.val) {
				errs = append(errs, field.Invalid(d.path, d.val, "must be a number of seconds, optionally with an s, m, h or d suffix, such as 4h"))
			}
		}
	}
	errs = append(errs, s.intervalsOutOfBounds(p)...)
	if wireguard {
		errs = append(errs, validateWireGuard(p.Child("wireguard"), wg, tunnels, &remote)...)
	}
	inRemote := func(a netip.Addr) (netip.Prefix, bool) {
		for _, o := range remote {
			if o.prefix.Contains(a) {
				return o.prefix, true
			}
		}
		return netip.Prefix{}, false
	}

	// All pinned virtual IPs live in the gateway's one /24, so they must agree on it.
	pins := pinSet{}
	names := map[string]bool{}
	ep := p.Child("exposures")
	for i := range s.Exposures {
		e := &s.Exposures[i]
		xp := ep.Index(i)
		if !dnsLabel.MatchString(e.Name) {
			errs = append(errs, field.Invalid(xp.Child("name"), e.Name, "must be a DNS label"))
		}
		if names[e.Name] {
			errs = append(errs, field.Duplicate(xp.Child("name"), e.Name))
		}
		names[e.Name] = true
		errs = append(errs, pins.check(xp.Child("virtualIP"), e.VirtualIP, ExposureFirstOctet, ExposureLastOctet, "exposure")...)
		if a, err := parseIPv4(e.Target.Address); err != nil {
			errs = append(errs, field.Invalid(xp.Child("target", "address"), e.Target.Address, err.Error()))
		} else if why := addrpolicy.SpecialAddress(a); why != "" {
			errs = append(errs, field.Invalid(xp.Child("target", "address"), e.Target.Address, "is a special-purpose address: "+why))
		} else if pfx, ok := inRemote(a); ok {
			errs = append(errs, field.Invalid(xp.Child("target", "address"), e.Target.Address,
				fmt.Sprintf("lies in the client's subnet %s: an exposure targets one of our services; use reverseExposures for the client's", pfx)))
		}
		errs = append(errs, validatePorts(xp.Child("target", "ports"), e.Target.Ports)...)
	}

	names = map[string]bool{}
	rp := p.Child("reverseExposures")
	for i := range s.ReverseExposures {
		r := &s.ReverseExposures[i]
		xp := rp.Index(i)
		if !dnsLabel.MatchString(r.Name) {
			errs = append(errs, field.Invalid(xp.Child("name"), r.Name, "must be a DNS label"))
		}
		if names[r.Name] {
			errs = append(errs, field.Duplicate(xp.Child("name"), r.Name))
		}
		names[r.Name] = true
		errs = append(errs, pins.check(xp.Child("virtualIP"), r.VirtualIP, ReverseFirstOctet, ReverseLastOctet, "reverse exposure")...)
		subnets, ok := tunnels[r.Tunnel]
		if !ok {
			errs = append(errs, field.NotFound(xp.Child("tunnel"), r.Tunnel))
		}
		a, err := parseIPv4(r.Target.Address)
		if err != nil {
			errs = append(errs, field.Invalid(xp.Child("target", "address"), r.Target.Address, err.Error()))
		} else if why := addrpolicy.SpecialAddress(a); why != "" {
			errs = append(errs, field.Invalid(xp.Child("target", "address"), r.Target.Address, "is a special-purpose address: "+why))
		} else if ok && !prefixesContain(subnets, a) {
			errs = append(errs, field.Invalid(xp.Child("target", "address"), r.Target.Address,
				fmt.Sprintf("is not inside any peer subnet of tunnel %q, so the tunnel cannot carry traffic to it", r.Tunnel)))
		}
		errs = append(errs, validatePorts(xp.Child("target", "ports"), r.Target.Ports)...)
	}
	return errs
}

// ValidateAddresses checks the spec against the operator's address policy: exposure
// targets must lie outside the service-CIDR pool and the gateway network's subnet and
// (when the operator set one) inside the exposure-target allow-list; reverse-exposure
// targets outside the pool and the gateway subnet; client subnets must not overlap the
// pool. Validate already refuses the special-purpose ranges.
func (s *GatewaySpec) ValidateAddresses(pol addrpolicy.Policy) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec")
	for i, t := range s.Tunnels {
		for j, sn := range t.Peer.Subnets {
			if pfx, err := netip.ParsePrefix(sn); err == nil {
				if err := pol.ClientSubnet(pfx); err != nil {
					errs = append(errs, field.Invalid(p.Child("tunnels").Index(i).Child("peer", "subnets").Index(j), sn, err.Error()))
				}
			}
		}
	}
	for i, e := range s.Exposures {
		if a, err := netip.ParseAddr(e.Target.Address); err == nil {
			if err := pol.ExposureTarget(a); err != nil {
				errs = append(errs, field.Invalid(p.Child("exposures").Index(i).Child("target", "address"), e.Target.Address, err.Error()))
			}
		}
	}
	for i, r := range s.ReverseExposures {
		if a, err := netip.ParseAddr(r.Target.Address); err == nil {
			if err := pol.ReverseTarget(a); err != nil {
				errs = append(errs, field.Invalid(p.Child("reverseExposures").Index(i).Child("target", "address"), r.Target.Address, err.Error()))
			}
		}
	}
	return errs
}

// ValidatePeerAddresses checks the tunnels' peer addresses and the WireGuard peers'
// endpoints against the ranges the operator uses itself (the pool, the gateway network
// once known, the internal source networks). Validate already refuses the
// special-purpose ranges; these need the operator's configuration, so the gateway
// reconciler reports them (PeerAddressNotAllowed) instead of admission.
func (s *GatewaySpec) ValidatePeerAddresses(pol addrpolicy.Policy, wg *WireGuardSpec) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec")
	for i, t := range s.Tunnels {
		if a, err := netip.ParseAddr(t.Peer.Address); err == nil {
			if err := pol.PeerAddress(a); err != nil {
				errs = append(errs, field.Invalid(p.Child("tunnels").Index(i).Child("peer", "address"), t.Peer.Address, err.Error()))
			}
		}
	}
	if wg != nil {
		for i, peer := range wg.Peers {
			if peer.Endpoint == nil {
				continue
			}
			if a, err := netip.ParseAddr(peer.Endpoint.Address); err == nil {
				if err := pol.PeerAddress(a); err != nil {
					errs = append(errs, field.Invalid(p.Child("wireguard", "peers").Index(i).Child("endpoint", "address"), peer.Endpoint.Address, err.Error()))
				}
			}
		}
	}
	return errs
}

// PlaintextExposures lists exposures that would carry a protocol not encrypted end to
// end (or every port) without the exposure's allowPlaintext opt-in.
func (s *GatewaySpec) PlaintextExposures() field.ErrorList {
	var errs field.ErrorList
	for i, e := range s.Exposures {
		if e.AllowPlaintext {
			continue
		}
		xp := field.NewPath("spec", "exposures").Index(i)
		if len(e.Target.Ports) == 0 {
			errs = append(errs, field.Forbidden(xp.Child("target", "ports"),
				fmt.Sprintf("exposure %q forwards every port, including plaintext protocols; list its TLS ports or set allowPlaintext: true", e.Name)))
			continue
		}
		for j, port := range e.Target.Ports {
			if proto, bad := plaintextPorts[port.Port]; bad {
				errs = append(errs, field.Forbidden(xp.Child("target", "ports").Index(j),
					fmt.Sprintf("exposure %q port %d is %s, which is not encrypted end to end and would cross the fabric in the clear; expose its TLS port or set allowPlaintext: true", e.Name, port.Port, proto)))
			}
		}
	}
	return errs
}

// Validate checks the ClusterLink spec for what the schema cannot judge (and repeats
// the schema's cross-field rules for objects that predate them).
func (s *ClusterLinkSpec) Validate() field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec")
	if s.ServiceClusterRouter == "" {
		errs = append(errs, field.Required(p.Child("serviceClusterRouter"), "name the service cluster's router by name or ID"))
	}
	if pfx, err := parseIPv4Prefix(s.ServiceClusterCIDR); err != nil {
		errs = append(errs, field.Invalid(p.Child("serviceClusterCIDR"), s.ServiceClusterCIDR, err.Error()))
	} else {
		if pfx.Bits() < MinServiceClusterPrefix {
			errs = append(errs, field.Invalid(p.Child("serviceClusterCIDR"), s.ServiceClusterCIDR,
				fmt.Sprintf("must be /%d or narrower: a wider route would capture traffic far beyond one service cluster", MinServiceClusterPrefix)))
		}
		if why := addrpolicy.SpecialOverlap(pfx); why != "" {
			errs = append(errs, field.Invalid(p.Child("serviceClusterCIDR"), s.ServiceClusterCIDR, "overlaps a special-purpose range: "+why))
		}
	}
	if sel := s.GatewaySelector; sel != nil {
		for _, x := range []struct {
			name string
			sel  *metav1.LabelSelector
		}{{"namespaceSelector", sel.NamespaceSelector}, {"selector", sel.Selector}} {
			if x.sel == nil {
				continue
			}
			if _, err := metav1.LabelSelectorAsSelector(x.sel); err != nil {
				errs = append(errs, field.Invalid(p.Child("gatewaySelector", x.name), x.sel.String(), err.Error()))
			}
		}
	}
	if s.TransitIP != "" {
		if a, err := parseIPv4(s.TransitIP); err != nil {
			errs = append(errs, field.Invalid(p.Child("transitIP"), s.TransitIP, err.Error()))
		} else if last := a.As4()[3]; last == 0 || last == 1 || last == 2 || last == 255 {
			errs = append(errs, field.Invalid(p.Child("transitIP"), s.TransitIP,
				"must not be .0, .1 (the gateway cluster's router leg), .2 (the DHCP port) or .255 of the transit subnet"))
		}
	}
	if s.CredentialsSecretRef != nil && s.GatewaySelector != nil && emptySelector(s.GatewaySelector.NamespaceSelector) {
		// The customer-project label is ANDed in anyway (internal/linkselect); a selector
		// that names no namespace label still says "every gateway", and gateway labels
		// are the tenants' to set.
		errs = append(errs, field.Required(p.Child("gatewaySelector", "namespaceSelector"),
			"a cross-tenant link's gatewaySelector must select namespaces by label (an empty selector, or one on gateway labels only, would let any tenant opt its gateways in); omit gatewaySelector to serve the namespaces labelled "+LabelCustomerProject+"=<customerProjectID>"))
	}
	if s.CredentialsSecretRef != nil {
		if s.CustomerProjectID == "" {
			errs = append(errs, field.Required(p.Child("customerProjectID"), "a cross-tenant link (credentialsSecretRef set) must name the customer project it expects"))
		}
		if s.CredentialsSecretRef.Name == "" || s.CredentialsSecretRef.Namespace == "" {
			errs = append(errs, field.Required(p.Child("credentialsSecretRef"), "name and namespace are required"))
		}
	} else if s.CustomerProjectID != "" {
		errs = append(errs, field.Forbidden(p.Child("customerProjectID"), "only a cross-tenant link (credentialsSecretRef set) may carry customerProjectID"))
	}
	return errs
}

// emptySelector: nil, or a selector with neither labels nor expressions (it selects
// everything).
func emptySelector(sel *metav1.LabelSelector) bool {
	return sel == nil || len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0
}

// Validate checks a VPNTenantPolicy spec for what the schema cannot judge (and repeats
// its rules for objects that predate them).
func (s *VPNTenantPolicySpec) Validate() field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec")
	if emptySelector(&s.NamespaceSelector) {
		errs = append(errs, field.Required(p.Child("namespaceSelector"), "name at least one label or expression"))
	} else if _, err := metav1.LabelSelectorAsSelector(&s.NamespaceSelector); err != nil {
		errs = append(errs, field.Invalid(p.Child("namespaceSelector"), s.NamespaceSelector.String(), err.Error()))
	}
	for i, c := range s.RoutedSubnets {
		pfx, err := parseIPv4Prefix(c)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(p.Child("routedSubnets").Index(i), c, err.Error()))
		case pfx.Bits() < 8:
			errs = append(errs, field.Invalid(p.Child("routedSubnets").Index(i), c, "must be /8 or narrower"))
		}
	}
	for i, c := range s.ExposureTargets {
		if _, err := parseIPv4Prefix(c); err != nil {
			errs = append(errs, field.Invalid(p.Child("exposureTargets").Index(i), c, err.Error()))
		}
	}
	for i, a := range s.FloatingIPs {
		if _, err := parseIPv4(a); err != nil {
			errs = append(errs, field.Invalid(p.Child("floatingIPs").Index(i), a, err.Error()))
		}
	}
	for _, l := range []struct {
		name string
		v    *int32
	}{{"gateways", s.Limits.Gateways}, {"tunnels", s.Limits.Tunnels}, {"routedSubnets", s.Limits.RoutedSubnets},
		{"exposures", s.Limits.Exposures}, {"reverseExposurePorts", s.Limits.ReverseExposurePorts}} {
		if l.v != nil && *l.v < 0 {
			errs = append(errs, field.Invalid(p.Child("limits", l.name), *l.v, "must be 0 or more"))
		}
	}
	return errs
}

// owned is a client network and where the spec names it.
type owned struct {
	prefix netip.Prefix
	path   *field.Path
}

type pinSet struct {
	net    netip.Prefix
	netAt  *field.Path
	claims map[netip.Addr]*field.Path
}

func (ps *pinSet) check(p *field.Path, vip string, first, last uint8, what string) field.ErrorList {
	if vip == "" {
		return nil
	}
	a, err := parseIPv4(vip)
	if err != nil {
		return field.ErrorList{field.Invalid(p, vip, err.Error())}
	}
	var errs field.ErrorList
	octet := a.As4()[3]
	switch {
	case octet == GatewayHostOctet:
		errs = append(errs, field.Invalid(p, vip, "is .1 of the service CIDR, reserved as the gateway's SNAT source address"))
	case octet < first || octet > last:
		errs = append(errs, field.Invalid(p, vip, fmt.Sprintf("a %s virtual IP must lie in .%d-.%d of the gateway's service CIDR", what, first, last)))
	}
	pfx := netip.PrefixFrom(a, 24).Masked()
	if ps.netAt == nil {
		ps.net, ps.netAt = pfx, p
	} else if pfx != ps.net {
		errs = append(errs, field.Invalid(p, vip, fmt.Sprintf("is not in %s, the /24 of the virtual IP pinned at %s: a gateway has one service CIDR", ps.net, ps.netAt)))
	}
	if ps.claims == nil {
		ps.claims = map[netip.Addr]*field.Path{}
	}
	if other, dup := ps.claims[a]; dup {
		errs = append(errs, field.Duplicate(p, fmt.Sprintf("%s (already pinned at %s)", vip, other)))
	} else {
		ps.claims[a] = p
	}
	return errs
}

func validateProposals(p *field.Path, kind cryptofloor.Kind, props []string) field.ErrorList {
	var errs field.ErrorList
	for i, pr := range props {
		if !proposalRe.MatchString(pr) || len(pr) > 128 {
			errs = append(errs, field.Invalid(p.Index(i), pr, "must be a strongSwan proposal such as aes256gcm16-prfsha384-ecp384"))
			continue
		}
		if err := cryptofloor.Check(kind, pr); err != nil {
			errs = append(errs, field.Invalid(p.Index(i), pr, err.Error()))
		}
	}
	return errs
}

func validatePorts(p *field.Path, ports []PortSpec) field.ErrorList {
	var errs field.ErrorList
	seen := map[PortSpec]bool{}
	for i, port := range ports {
		if port.Port < 1 || port.Port > 65535 {
			errs = append(errs, field.Invalid(p.Index(i).Child("port"), port.Port, "must be between 1 and 65535"))
		}
		proto := port.Protocol
		if proto == "" {
			proto = ProtocolTCP
		}
		if proto != ProtocolTCP && proto != ProtocolUDP {
			errs = append(errs, field.NotSupported(p.Index(i).Child("protocol"), port.Protocol, []string{string(ProtocolTCP), string(ProtocolUDP)}))
		}
		k := PortSpec{Port: port.Port, Protocol: proto}
		if seen[k] {
			errs = append(errs, field.Duplicate(p.Index(i), fmt.Sprintf("%d/%s", port.Port, proto)))
		}
		seen[k] = true
	}
	return errs
}

func parseIPv4(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return netip.Addr{}, fmt.Errorf("must be an IPv4 address")
	}
	return a, nil
}

func parseIPv4Prefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("must be an IPv4 network in CIDR notation")
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("has host bits set; did you mean %s?", p.Masked())
	}
	return p, nil
}

func prefixesContain(cidrs []string, a netip.Addr) bool {
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(c); err == nil && p.Contains(a) {
			return true
		}
	}
	return false
}

// SortedPlaintextPorts lists the ports PlaintextExposures treats as plaintext, for docs.
func SortedPlaintextPorts() []int32 {
	out := make([]int32, 0, len(plaintextPorts))
	for p := range plaintextPorts {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
