// Package peerconfig writes the client's side of a gateway tunnel for the client's own
// device: strongSwan (swanctl.conf), libreswan (ipsec.conf), FortiGate (FortiOS CLI),
// Cisco IOS XE (CLI), MikroTik RouterOS (CLI) and pfSense (the GUI's fields). It is a pure builder: the gateway object
// and (optionally) the pre-shared key go in, text comes out; reading them from the cluster
// is the caller's business.
//
// The client's side mirrors the gateway's swanctl connection (internal/gatewayconfig):
// the gateway's floating IP is the remote address and identity, the tunnel's peer
// identity is the local one, the client's subnets are the local traffic selectors and the
// gateway's service CIDR (which holds every exposure's virtual IP) the remote one, with
// the tunnel's IKE and ESP proposals and lifetimes. A proposal a vendor cannot express is
// left out with a note; when none of a phase's proposals can be expressed the build fails
// with an error saying what to change, never with a configuration that cannot work.
package peerconfig

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// Format is an output format.
type Format string

const (
	FormatStrongSwan Format = "strongswan"
	FormatLibreswan  Format = "libreswan"
	FormatFortiGate  Format = "fortigate"
	FormatCiscoIOSXE Format = "cisco-iosxe"
	FormatMikroTik   Format = "mikrotik"
	FormatPfSense    Format = "pfsense"
	FormatWireGuard  Format = "wireguard"
)

// Formats lists every format the command accepts, in the order the help shows them.
var Formats = []Format{FormatStrongSwan, FormatLibreswan, FormatFortiGate, FormatCiscoIOSXE, FormatMikroTik, FormatPfSense, FormatWireGuard}

// Errors Render wraps.
var (
	// ErrNotReady: the gateway has no floating IP or service CIDR yet.
	ErrNotReady = errors.New("gateway not ready")
	// ErrNotExpressible: the vendor cannot negotiate any of the gateway's proposals.
	ErrNotExpressible = errors.New("not expressible on this device")
	// ErrUnsupported: the format does not apply to this gateway.
	ErrUnsupported = errors.New("format not supported for this gateway")
)

// Input is what the client's side is built from.
type Input struct {
	Kind      string // IPsecGateway or VPNGateway
	Namespace string
	Name      string
	Spec      *v1alpha1.GatewaySpec
	Status    *v1alpha1.GatewayStatus
	// Protocol of a VPNGateway ("" for an IPsecGateway).
	Protocol v1alpha1.VPNProtocol
	Tunnel   string
	// PSK is the tunnel's pre-shared key; empty leaves a placeholder naming the Secret.
	PSK string
	// WireGuard is a WireGuard VPNGateway's spec.wireguard (Tunnel then names a peer).
	WireGuard *v1alpha1.WireGuardSpec
	// InternalSources are the operator's internal source CIDRs (from the gateway's
	// rendered config), which a routed tunnel's client reaches by their real addresses.
	InternalSources []netip.Prefix
}

// Exposure is one of our services the client reaches through the tunnel.
type Exposure struct {
	Name      string
	VirtualIP netip.Addr
	Ports     []v1alpha1.PortSpec // empty: every port
}

// ReverseExposure is one of the client's services our side reaches through the tunnel:
// the client's firewall must admit Source (the service CIDR's .1) to Target.
type ReverseExposure struct {
	Name   string
	Target netip.Addr
	Ports  []v1alpha1.PortSpec
}

// Peer is the client's side of one tunnel, vendor-neutral.
type Peer struct {
	Gateway string // kind namespace/name, for comments
	Tunnel  string

	GatewayAddress netip.Addr // the floating IP: remote address and remote identity
	LocalAddress   netip.Addr // the client's public address (peer.address)
	LocalID        string     // peer.id, default the address
	LocalIDType    IDType

	LocalSubnets []netip.Prefix // the client's networks
	RemoteSubnet netip.Prefix   // the gateway's service CIDR
	SNATSource   netip.Addr     // .1 of the service CIDR: source of reverse-exposure traffic

	// Routed: the tunnel is in routed mode; RoutedRemote are the fabric's networks the
	// client's networks reach by their real addresses (remote selectors besides
	// RemoteSubnet).
	Routed       bool
	RoutedRemote []netip.Prefix

	Exposures        []Exposure
	ReverseExposures []ReverseExposure

	IKE, ESP                 []Proposal
	IKELifetime, ESPLifetime int64 // seconds
	DPDDelay                 int64 // seconds
	DPDAction                string

	PSK       string
	PSKSource string // "Secret <ns>/<name>, key <key>"
}

// IDType is the kind of an IKE identity.
type IDType string

const (
	IDAddress  IDType = "address"
	IDFQDN     IDType = "fqdn"
	IDUserFQDN IDType = "user-fqdn"
)

var reFQDN = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$`)

func idType(id string) (IDType, error) {
	if a, err := netip.ParseAddr(id); err == nil && a.Is4() {
		return IDAddress, nil
	}
	if user, host, ok := strings.Cut(id, "@"); ok {
		if user == "" || !reFQDN.MatchString(host) {
			return "", fmt.Errorf("identity %q is neither an IPv4 address, an FQDN nor user@FQDN", id)
		}
		return IDUserFQDN, nil
	}
	if !reFQDN.MatchString(id) {
		return "", fmt.Errorf("identity %q is neither an IPv4 address, an FQDN nor user@FQDN", id)
	}
	return IDFQDN, nil
}

// Build derives the client's side of in.Tunnel.
func Build(in Input) (*Peer, error) {
	if in.Spec == nil || in.Status == nil {
		return nil, fmt.Errorf("%w: spec and status are required", gatewayconfig.ErrInvalid)
	}
	var t *v1alpha1.Tunnel
	var names []string
	for i := range in.Spec.Tunnels {
		names = append(names, in.Spec.Tunnels[i].Name)
		if in.Spec.Tunnels[i].Name == in.Tunnel {
			t = &in.Spec.Tunnels[i]
		}
	}
	ref := fmt.Sprintf("%s %s/%s", in.Kind, in.Namespace, in.Name)
	if t == nil {
		return nil, fmt.Errorf("%s has no tunnel %q (its tunnels: %s)", ref, in.Tunnel, strings.Join(names, ", "))
	}
	st := in.Status
	if st.FloatingIP == "" || st.ServiceCIDR == "" {
		return nil, fmt.Errorf("%w: %s has no floating IP or service CIDR in its status yet; wait for FloatingIPReady=True (kubectl vpn diagnose %s -n %s)",
			ErrNotReady, ref, in.Name, in.Namespace)
	}
	fip, err := netip.ParseAddr(st.FloatingIP)
	if err != nil || !fip.Is4() {
		return nil, fmt.Errorf("%s: status.floatingIP %q is not an IPv4 address", ref, st.FloatingIP)
	}
	svc, err := netip.ParsePrefix(st.ServiceCIDR)
	if err != nil || !svc.Addr().Is4() {
		return nil, fmt.Errorf("%s: status.serviceCIDR %q is not an IPv4 network", ref, st.ServiceCIDR)
	}
	local, err := netip.ParseAddr(t.Peer.Address)
	if err != nil || !local.Is4() {
		return nil, fmt.Errorf("%s: tunnel %s: peer.address %q is not an IPv4 address", ref, t.Name, t.Peer.Address)
	}
	p := &Peer{
		Gateway:        ref,
		Tunnel:         t.Name,
		GatewayAddress: fip,
		LocalAddress:   local,
		LocalID:        t.Peer.ID,
		RemoteSubnet:   svc.Masked(),
		SNATSource:     svc.Masked().Addr().Next(),
		DPDAction:      or(t.DPD.Action, "restart"),
		PSK:            in.PSK,
		PSKSource:      fmt.Sprintf("Secret %s/%s, key %s", in.Namespace, t.PreSharedKey.Name, or(t.PreSharedKey.Key, "psk")),
	}
	if p.LocalID == "" {
		p.LocalID = t.Peer.Address
	}
	if t.Mode == v1alpha1.TunnelModeRouted {
		p.Routed, p.RoutedRemote = true, append([]netip.Prefix(nil), in.InternalSources...)
	}
	if p.LocalIDType, err = idType(p.LocalID); err != nil {
		return nil, fmt.Errorf("%s: tunnel %s: %v", ref, t.Name, err)
	}
	for _, s := range t.Peer.Subnets {
		pfx, err := netip.ParsePrefix(s)
		if err != nil || !pfx.Addr().Is4() {
			return nil, fmt.Errorf("%s: tunnel %s: peer subnet %q is not an IPv4 network", ref, t.Name, s)
		}
		p.LocalSubnets = append(p.LocalSubnets, pfx.Masked())
	}
	for _, pr := range orList(t.IKE.Proposals, gatewayconfig.DefaultIKEProposals) {
		pp, err := ParseProposal(pr, false)
		if err != nil {
			return nil, fmt.Errorf("%s: tunnel %s: %v", ref, t.Name, err)
		}
		p.IKE = append(p.IKE, pp)
	}
	for _, pr := range orList(t.ESP.Proposals, gatewayconfig.DefaultESPProposals) {
		pp, err := ParseProposal(pr, true)
		if err != nil {
			return nil, fmt.Errorf("%s: tunnel %s: %v", ref, t.Name, err)
		}
		p.ESP = append(p.ESP, pp)
	}
	for _, d := range []struct {
		v, def string
		out    *int64
	}{{t.IKE.Lifetime, "4h", &p.IKELifetime}, {t.ESP.Lifetime, "1h", &p.ESPLifetime}, {t.DPD.Delay, "30s", &p.DPDDelay}} {
		if *d.out, err = gatewayconfig.ParseDuration(or(d.v, d.def)); err != nil {
			return nil, fmt.Errorf("%s: tunnel %s: %v", ref, t.Name, err)
		}
	}

	vip := func(list []v1alpha1.AllocatedAddress, name string) (netip.Addr, bool) {
		for _, a := range list {
			if a.Name == name {
				v, err := netip.ParseAddr(a.VirtualIP)
				return v, err == nil
			}
		}
		return netip.Addr{}, false
	}
	for _, e := range in.Spec.Exposures {
		v, ok := vip(st.Exposures, e.Name)
		if !ok {
			// Not allocated yet: the client cannot reach it yet either.
			continue
		}
		p.Exposures = append(p.Exposures, Exposure{Name: e.Name, VirtualIP: v, Ports: e.Target.Ports})
	}
	for _, r := range in.Spec.ReverseExposures {
		if r.Tunnel != t.Name {
			continue
		}
		a, err := netip.ParseAddr(r.Target.Address)
		if err != nil {
			continue
		}
		p.ReverseExposures = append(p.ReverseExposures, ReverseExposure{Name: r.Name, Target: a, Ports: r.Target.Ports})
	}
	return p, nil
}

// Render writes the client's side of in.Tunnel in the given format.
func Render(in Input, f Format) (string, error) {
	wg := in.Kind == v1alpha1.KindVPNGateway && in.Protocol == v1alpha1.VPNProtocolWireGuard
	switch {
	case f == FormatWireGuard && wg:
		return renderWireGuard(in)
	case f == FormatWireGuard:
		return "", fmt.Errorf("%w: %s %s/%s is an IPsec gateway; --format wireguard applies only to a WireGuard gateway (VPNGateway with protocol wireguard). Use --format strongswan, libreswan, fortigate, cisco-iosxe, mikrotik or pfsense", ErrUnsupported, in.Kind, in.Namespace, in.Name)
	case wg:
		return "", fmt.Errorf("%w: VPNGateway %s/%s uses protocol wireguard: use --format wireguard (there is no IPsec side to configure)", ErrUnsupported, in.Namespace, in.Name)
	}
	p, err := Build(in)
	if err != nil {
		return "", err
	}
	switch f {
	case FormatStrongSwan:
		return renderStrongSwan(p)
	case FormatLibreswan:
		return renderLibreswan(p)
	case FormatFortiGate:
		return renderFortiGate(p)
	case FormatCiscoIOSXE:
		return renderCiscoIOSXE(p)
	case FormatMikroTik:
		return renderMikroTik(p)
	case FormatPfSense:
		return renderPfSense(p)
	}
	return "", fmt.Errorf("unknown format %q (one of %s)", f, FormatNames())
}

// FormatNames lists the formats as "a|b|c".
func FormatNames() string {
	var s []string
	for _, f := range Formats {
		s = append(s, string(f))
	}
	return strings.Join(s, "|")
}

// remoteSubnets are the remote traffic selectors: the service CIDR and, routed, the
// fabric's networks.
func (p *Peer) remoteSubnets() []netip.Prefix {
	return append([]netip.Prefix{p.RemoteSubnet}, p.RoutedRemote...)
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func orList(v, def []string) []string {
	if len(v) == 0 {
		return def
	}
	return v
}

// notExpressible builds the error for a phase none of whose proposals a vendor can
// negotiate.
func notExpressible(vendor, phase string, props []Proposal, why []string, hint string) error {
	var raws []string
	for _, p := range props {
		raws = append(raws, p.Raw)
	}
	return fmt.Errorf("%w: %s cannot negotiate any of the gateway's %s proposals (%s): %s. %s",
		ErrNotExpressible, vendor, phase, strings.Join(raws, ", "), strings.Join(why, "; "), hint)
}

// mask returns the dotted netmask of a prefix.
func mask(p netip.Prefix) string {
	bits := p.Bits()
	m := uint32(0xffffffff) << (32 - bits)
	if bits == 0 {
		m = 0
	}
	return fmt.Sprintf("%d.%d.%d.%d", m>>24, m>>16&0xff, m>>8&0xff, m&0xff)
}

// wildcard returns the Cisco wildcard mask of a prefix.
func wildcard(p netip.Prefix) string {
	bits := p.Bits()
	m := ^(uint32(0xffffffff) << (32 - bits))
	if bits == 0 {
		m = 0xffffffff
	}
	return fmt.Sprintf("%d.%d.%d.%d", m>>24, m>>16&0xff, m>>8&0xff, m&0xff)
}

// portsText lists ports as "tcp/443, udp/53", or "all ports".
func portsText(ports []v1alpha1.PortSpec) string {
	if len(ports) == 0 {
		return "all ports"
	}
	var s []string
	for _, p := range ports {
		proto := strings.ToLower(string(p.Protocol))
		if proto == "" {
			proto = "tcp"
		}
		s = append(s, fmt.Sprintf("%s/%d", proto, p.Port))
	}
	return strings.Join(s, ", ")
}

// summary is the comment block every format starts with: what this is, what the client
// reaches, and what the client's firewall must admit.
func summary(p *Peer, comment string) string {
	var b strings.Builder
	line := func(s string) { b.WriteString(strings.TrimRight(comment+" "+s, " ") + "\n") }
	line(fmt.Sprintf("Client side of tunnel %s of %s.", p.Tunnel, p.Gateway))
	line(fmt.Sprintf("Gateway: %s (IKEv2, NAT-T; UDP 500 and 4500 from %s only).", p.GatewayAddress, p.LocalAddress))
	line(fmt.Sprintf("Traffic selectors: %s <-> %s.", prefixesText(p.LocalSubnets), prefixesText(p.remoteSubnets())))
	if p.Routed {
		if len(p.RoutedRemote) > 0 {
			line(fmt.Sprintf("Routed mode: your networks and %s reach each other by their real addresses (no NAT);", prefixesText(p.RoutedRemote)))
			line("route those networks into the tunnel and admit them in your firewall.")
		} else {
			line("Routed mode: your networks reach the platform's internal networks by their real addresses, but this")
			line("output does not know them (the gateway's rendered config has none yet): ask the platform team and add")
			line("them to the remote traffic selectors.")
		}
	}
	if len(p.Exposures) > 0 {
		line("Our services, reached at these virtual IPs through the tunnel:")
		for _, e := range p.Exposures {
			line(fmt.Sprintf("  %-20s %-15s %s", e.Name, e.VirtualIP, portsText(e.Ports)))
		}
	}
	if len(p.ReverseExposures) > 0 {
		line(fmt.Sprintf("Our side reaches these of your services, from %s; admit it in your firewall:", p.SNATSource))
		for _, r := range p.ReverseExposures {
			line(fmt.Sprintf("  %-20s %-15s %s", r.Name, r.Target, portsText(r.Ports)))
		}
	}
	if p.PSK == "" {
		line(fmt.Sprintf("The pre-shared key is not included: it is in %s (kubectl vpn peer-config --include-secret).", p.PSKSource))
	}
	return b.String()
}

func prefixesText(ps []netip.Prefix) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.String())
	}
	return strings.Join(s, ", ")
}

// uniqueDH returns the DH groups of the proposals in first-seen order.
func uniqueDH(props []Proposal) []DHGroup {
	var out []DHGroup
	for _, p := range props {
		for _, d := range p.DH {
			if !slices.ContainsFunc(out, func(x DHGroup) bool { return x.Number == d.Number }) {
				out = append(out, d)
			}
		}
	}
	return out
}
