package gatewayconfig

import (
	"fmt"
	"net/netip"
	"strings"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// Defaults applied when a spec built in Go (not through the API server's defaulting)
// leaves a field empty; they match the CRD defaults.
var (
	DefaultIKEProposals = []string{
		"aes256gcm16-aes128gcm16-prfsha384-prfsha256-ecp384-ecp256-modp3072-modp2048",
		"aes256-aes128-sha512-sha384-sha256-ecp384-ecp256-modp3072-modp2048",
	}
	// DefaultESPProposals offer perfect forward secrecy first and the same algorithms
	// without a DH group after: a client with PFS gets it at every rekey, a client
	// without PFS still rekeys (IKEv2 creates the first CHILD_SA without a DH exchange,
	// so a PFS-only list would fail such a client only at its first rekey).
	DefaultESPProposals = []string{
		"aes256gcm16-aes128gcm16-ecp384-ecp256-modp3072-modp2048",
		"aes256-aes128-sha512-sha384-sha256-ecp384-ecp256-modp3072-modp2048",
		"aes256gcm16-aes128gcm16",
		"aes256-aes128-sha512-sha384-sha256",
	}
)

// DefaultPSKKey is the key of a pre-shared key's Secret when the spec names none.
const DefaultPSKKey = "psk"

const (
	defaultIKELifetime = "4h"
	defaultESPLifetime = "1h"
	defaultDPDDelay    = "30s"
	defaultDPDAction   = "restart"
)

// Input is what Build renders from: the gateway object's identity, spec and status.
type Input struct {
	Kind      string
	Namespace string
	Name      string
	Spec      *v1alpha1.GatewaySpec
	Status    *v1alpha1.GatewayStatus
	// ServiceCIDRPool and ExposureTargetCIDRs are the operator's address policy, carried
	// into the config for the agent's own check (optional).
	ServiceCIDRPool     netip.Prefix
	ExposureTargetCIDRs []netip.Prefix
	// WireGuard is the spec's wireguard section of a VPNGateway with protocol wireguard
	// (nil for IPsec).
	WireGuard *v1alpha1.WireGuardSpec
	// InternalSources are the operator's internal source CIDRs; routed-mode tunnels
	// connect them with the client's subnets.
	InternalSources []netip.Prefix
	// UntrustedSources are the networks the gateway drops traffic from (the operator
	// sends the gateway network; see Config.UntrustedSources).
	UntrustedSources []netip.Prefix
}

func incompletef(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrIncomplete}, a...)...)
}

// Build derives the gateway pod's Config from the object. Virtual IPs come from
// status.exposures and status.reverseExposures (the allocations the operator persisted),
// never from the spec directly. Errors wrap ErrIncomplete or ErrInvalid.
func Build(in Input) (*Config, error) {
	if in.Spec == nil || in.Status == nil {
		return nil, invalidf("spec and status are required")
	}
	if !v1alpha1.IsGatewayKind(in.Kind) {
		return nil, invalidf("kind %q is neither %s nor %s", in.Kind, v1alpha1.KindIPsecGateway, v1alpha1.KindVPNGateway)
	}
	st := in.Status
	for _, f := range []struct{ name, v string }{
		{"serviceCIDR", st.ServiceCIDR},
		{"floatingIP", st.FloatingIP},
		{"portFixedIP", st.PortFixedIP},
		{"subnetCIDR", st.SubnetCIDR},
		{"subnetGatewayIP", st.SubnetGatewayIP},
	} {
		if f.v == "" {
			return nil, incompletef("status.%s is not set yet", f.name)
		}
	}
	svc, err := netip.ParsePrefix(st.ServiceCIDR)
	if err != nil || !svc.Addr().Is4() {
		return nil, invalidf("status.serviceCIDR %q is not an IPv4 CIDR", st.ServiceCIDR)
	}
	gwAddr := svc.Masked().Addr().Next().String()
	if st.ServiceCIDRGatewayAddress != "" && st.ServiceCIDRGatewayAddress != gwAddr {
		return nil, invalidf("status.serviceCIDRGatewayAddress %q is not .1 of %s", st.ServiceCIDRGatewayAddress, st.ServiceCIDR)
	}

	cfg := &Config{
		Version:          FormatVersion,
		Gateway:          GatewayRef{Kind: in.Kind, Namespace: in.Namespace, Name: in.Name},
		ServiceCIDR:      st.ServiceCIDR,
		GatewayAddress:   gwAddr,
		PortFixedIP:      st.PortFixedIP,
		SubnetCIDR:       st.SubnetCIDR,
		SubnetGatewayIP:  st.SubnetGatewayIP,
		FloatingIP:       st.FloatingIP,
		Tunnels:          []Tunnel{},
		Exposures:        []Exposure{},
		ReverseExposures: []ReverseExposure{},
		MSSClamp:         MSSClamp{Enabled: true},
	}
	if in.ServiceCIDRPool.IsValid() {
		cfg.ServiceCIDRPool = in.ServiceCIDRPool.String()
	}
	for _, p := range in.ExposureTargetCIDRs {
		cfg.ExposureTargetCIDRs = append(cfg.ExposureTargetCIDRs, p.String())
	}

	if in.WireGuard != nil {
		cfg.Protocol = ProtocolWireGuard
		if cfg.WireGuard, err = buildWireGuard(in.WireGuard, st); err != nil {
			return nil, err
		}
	}
	routed := false
	for _, t := range in.Spec.Tunnels {
		ct := Tunnel{
			Name:          t.Name,
			PeerAddress:   t.Peer.Address,
			PeerID:        or(t.Peer.ID, t.Peer.Address),
			RemoteSubnets: append([]string(nil), t.Peer.Subnets...),
			IKEProposals:  orList(t.IKE.Proposals, DefaultIKEProposals),
			ESPProposals:  orList(t.ESP.Proposals, DefaultESPProposals),
			DPDAction:     or(t.DPD.Action, defaultDPDAction),
			PSK:           SecretKeyRef{Secret: t.PreSharedKey.Name, Key: or(t.PreSharedKey.Key, DefaultPSKKey)},
		}
		if ct.IKERekeySeconds, err = ParseDuration(or(t.IKE.Lifetime, defaultIKELifetime)); err != nil {
			return nil, invalidf("tunnel %s: ike.lifetime: %v", t.Name, err)
		}
		if ct.ESPRekeySeconds, err = ParseDuration(or(t.ESP.Lifetime, defaultESPLifetime)); err != nil {
			return nil, invalidf("tunnel %s: esp.lifetime: %v", t.Name, err)
		}
		if ct.DPDDelaySeconds, err = ParseDuration(or(t.DPD.Delay, defaultDPDDelay)); err != nil {
			return nil, invalidf("tunnel %s: dpd.delay: %v", t.Name, err)
		}
		if t.Mode == v1alpha1.TunnelModeRouted {
			ct.Mode, routed = ModeRouted, true
		}
		cfg.Tunnels = append(cfg.Tunnels, ct)
	}
	if routed {
		for _, p := range in.InternalSources {
			cfg.InternalSources = append(cfg.InternalSources, p.Masked().String())
		}
	}

	for _, p := range in.UntrustedSources {
		cfg.UntrustedSources = append(cfg.UntrustedSources, p.Masked().String())
	}

	vip := func(list []v1alpha1.AllocatedAddress, name string) string {
		for _, a := range list {
			if a.Name == name {
				return a.VirtualIP
			}
		}
		return ""
	}
	for _, e := range in.Spec.Exposures {
		v := vip(st.Exposures, e.Name)
		if v == "" {
			return nil, incompletef("exposure %s has no virtual IP in status.exposures yet", e.Name)
		}
		if e.VirtualIP != "" && e.VirtualIP != v {
			return nil, incompletef("exposure %s: pinned virtual IP %s not yet reflected in status (%s)", e.Name, e.VirtualIP, v)
		}
		cfg.Exposures = append(cfg.Exposures, Exposure{
			Name: e.Name, VirtualIP: v, TargetAddress: e.Target.Address, Ports: ports(e.Target.Ports),
		})
	}
	for _, r := range in.Spec.ReverseExposures {
		v := vip(st.ReverseExposures, r.Name)
		if v == "" {
			return nil, incompletef("reverse exposure %s has no virtual IP in status.reverseExposures yet", r.Name)
		}
		if r.VirtualIP != "" && r.VirtualIP != v {
			return nil, incompletef("reverse exposure %s: pinned virtual IP %s not yet reflected in status (%s)", r.Name, r.VirtualIP, v)
		}
		cfg.ReverseExposures = append(cfg.ReverseExposures, ReverseExposure{
			Name: r.Name, Tunnel: r.Tunnel, VirtualIP: v, TargetAddress: r.Target.Address, Ports: ports(r.Target.Ports),
		})
	}
	if err := Validate(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

func ports(in []v1alpha1.PortSpec) []Port {
	out := []Port{}
	for _, p := range in {
		proto := strings.ToLower(string(p.Protocol))
		if proto == "" {
			proto = "tcp"
		}
		out = append(out, Port{Protocol: proto, Port: p.Port})
	}
	return out
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func orList(v, def []string) []string {
	if len(v) == 0 {
		v = def
	}
	return append([]string(nil), v...)
}

// ParseDuration converts the API's lifetime notation (v1alpha1.DurationSeconds: one to six
// digits with an optional s, m, h or d suffix; bare digits are seconds) into seconds; a
// lifetime of zero is refused.
func ParseDuration(v string) (int64, error) {
	n, err := v1alpha1.DurationSeconds(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a duration such as 30s, 4h or 1d", v)
	}
	return n, nil
}
