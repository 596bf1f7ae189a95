package gatewayconfig

import (
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"sort"

	"bnerd.net/vpn-operator/internal/addrpolicy"
	"bnerd.net/vpn-operator/internal/cryptofloor"
)

// Every value that reaches swanctl.conf, strongswan.conf or an nft expression passes one
// of these patterns. None admits whitespace, quotes, braces, '=', '#', ',' or control
// characters, so no value can open a section, add a key or end a list.
var (
	reName     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	reIKEID    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.@:_-]{0,252}$`)
	reProposal = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	reKind     = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]{0,62}$`)
	reK8sName  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
	reDataKey  = regexp.MustCompile(`^[-._a-zA-Z0-9]{1,253}$`)
)

// Limits of the rendered names: charon truncates nothing, but a tunnel name also becomes
// the connection, child and secret section name.
const (
	maxTunnelNameLen = 32
	maxProposalLen   = 128
	maxLifetimeSecs  = 999999 * 86400
)

var dpdActions = map[string]string{
	// DPD action -> close_action: what charon does when the peer closes the child SA.
	// Not "start" for restart: the agent's loader brings every tunnel that is not up
	// back (with backoff), and charon restarting a closed SA itself would re-create it
	// from the settings it was made with: beside a make-before-break replacement (a
	// changed connection), a peer with a uniqueness policy of "replace" would close
	// the old SA, charon would re-create it, the peer would close the new one, and so on.
	"restart": "none",
	"clear":   "none",
	"trap":    "trap",
}

func invalidf(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, a...)...)
}

func checkName(what, v string, max int) error {
	if len(v) > max || !reName.MatchString(v) {
		return invalidf("%s %q must be a DNS label of at most %d characters", what, v, max)
	}
	return nil
}

func parseIPv4(what, v string) (netip.Addr, error) {
	a, err := netip.ParseAddr(v)
	if err != nil || !a.Is4() || a.String() != v {
		return netip.Addr{}, invalidf("%s %q is not an IPv4 address", what, v)
	}
	return a, nil
}

func parsePrefix4(what, v string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(v)
	if err != nil || !p.Addr().Is4() || p.Masked() != p || p.String() != v {
		return netip.Prefix{}, invalidf("%s %q is not an IPv4 network in CIDR notation without host bits", what, v)
	}
	return p, nil
}

func checkPorts(what string, ports []Port) error {
	seen := map[Port]bool{}
	for _, p := range ports {
		if p.Protocol != "tcp" && p.Protocol != "udp" {
			return invalidf("%s: protocol %q must be tcp or udp", what, p.Protocol)
		}
		if p.Port < 1 || p.Port > 65535 {
			return invalidf("%s: port %d out of range", what, p.Port)
		}
		if seen[p] {
			return invalidf("%s: duplicate port %s/%d", what, p.Protocol, p.Port)
		}
		seen[p] = true
	}
	return nil
}

// Validate checks every field of cfg against the safe character sets and the addressing
// rules the dataplane relies on. Renderers call it, so a hand-edited or hostile Config
// cannot inject configuration syntax.
func Validate(cfg *Config) error {
	if cfg == nil {
		return invalidf("nil config")
	}
	if !reKind.MatchString(cfg.Gateway.Kind) {
		return invalidf("gateway kind %q", cfg.Gateway.Kind)
	}
	if !reK8sName.MatchString(cfg.Gateway.Namespace) || !reK8sName.MatchString(cfg.Gateway.Name) {
		return invalidf("gateway namespace/name %q/%q", cfg.Gateway.Namespace, cfg.Gateway.Name)
	}
	svc, err := parsePrefix4("serviceCIDR", cfg.ServiceCIDR)
	if err != nil {
		return err
	}
	if svc.Bits() != 24 {
		return invalidf("serviceCIDR %q must be a /24", cfg.ServiceCIDR)
	}
	gwa, err := parseIPv4("gatewayAddress", cfg.GatewayAddress)
	if err != nil {
		return err
	}
	if gwa != svc.Addr().Next() {
		return invalidf("gatewayAddress %s must be .1 of %s", gwa, svc)
	}
	fixed, err := parseIPv4("portFixedIP", cfg.PortFixedIP)
	if err != nil {
		return err
	}
	subnet, err := parsePrefix4("subnetCIDR", cfg.SubnetCIDR)
	if err != nil {
		return err
	}
	sgw, err := parseIPv4("subnetGatewayIP", cfg.SubnetGatewayIP)
	if err != nil {
		return err
	}
	if !subnet.Contains(fixed) || !subnet.Contains(sgw) {
		return invalidf("portFixedIP %s and subnetGatewayIP %s must lie in subnetCIDR %s", fixed, sgw, subnet)
	}
	if fixed == sgw {
		return invalidf("portFixedIP and subnetGatewayIP are both %s", fixed)
	}
	if _, err := parseIPv4("floatingIP", cfg.FloatingIP); err != nil {
		return err
	}
	if subnet.Overlaps(svc) {
		return invalidf("subnetCIDR %s overlaps serviceCIDR %s", subnet, svc)
	}
	// The address policy: the special-purpose ranges always, the gateway network's
	// subnet and this gateway's own /24 always, the pool and the allow-list as the
	// operator sent them.
	pol := addrpolicy.Policy{GatewaySubnet: subnet}
	if cfg.ServiceCIDRPool != "" {
		if pol.ServiceCIDRPool, err = parsePrefix4("serviceCIDRPool", cfg.ServiceCIDRPool); err != nil {
			return err
		}
		if !pol.ServiceCIDRPool.Contains(svc.Addr()) {
			return invalidf("serviceCIDR %s is not in serviceCIDRPool %s", svc, pol.ServiceCIDRPool)
		}
	} else {
		pol.ServiceCIDRPool = svc
	}
	for _, c := range cfg.ExposureTargetCIDRs {
		p, err := parsePrefix4("exposureTargetCIDRs", c)
		if err != nil {
			return err
		}
		pol.ExposureTargets = append(pol.ExposureTargets, p)
	}

	switch cfg.Protocol {
	case "":
		if len(cfg.Tunnels) == 0 {
			return invalidf("no tunnels")
		}
	case ProtocolWireGuard:
	default:
		return invalidf("protocol %q must be empty (IPsec) or %s", cfg.Protocol, ProtocolWireGuard)
	}
	if cfg.Protocol != ProtocolWireGuard && cfg.WireGuard != nil {
		return invalidf("a wireguard section needs protocol %s", ProtocolWireGuard)
	}
	var internal []netip.Prefix
	for _, s := range cfg.InternalSources {
		p, err := parsePrefix4("internal source", s)
		if err != nil {
			return err
		}
		if p.Overlaps(svc) {
			return invalidf("internal source %s overlaps serviceCIDR %s", p, svc)
		}
		internal = append(internal, p)
	}
	pol.InternalSources = internal
	for _, s := range cfg.UntrustedSources {
		if _, err := parsePrefix4("untrusted source", s); err != nil {
			return err
		}
	}
	// remotes maps each tunnel (or WireGuard peer) to the client networks behind it.
	remotes := map[string][]string{}
	tunnels := map[string]*Tunnel{}
	peerIDs := map[string]string{}
	var allSubnets []netip.Prefix
	for i := range cfg.Tunnels {
		t := &cfg.Tunnels[i]
		if err := checkName("tunnel name", t.Name, maxTunnelNameLen); err != nil {
			return err
		}
		if tunnels[t.Name] != nil {
			return invalidf("duplicate tunnel %q", t.Name)
		}
		tunnels[t.Name] = t
		remotes[t.Name] = t.RemoteSubnets
		if t.Mode != "" && t.Mode != ModeRouted {
			return invalidf("tunnel %s: mode %q must be empty (snat) or %s", t.Name, t.Mode, ModeRouted)
		}
		peer, err := parseIPv4("tunnel "+t.Name+" peer address", t.PeerAddress)
		if err != nil {
			return err
		}
		// The pod routes the peer's /32 out of its port: never one of the operator's
		// own ranges or a special one.
		if err := pol.PeerAddress(peer); err != nil {
			return invalidf("tunnel %s: peer address %s %v", t.Name, peer, err)
		}
		if !reIKEID.MatchString(t.PeerID) {
			return invalidf("tunnel %s: peer ID %q contains characters outside [A-Za-z0-9.@:_-]", t.Name, t.PeerID)
		}
		// charon picks the PSK and the peer config by identity; two tunnels with one
		// identity would be indistinguishable.
		if other, ok := peerIDs[t.PeerID]; ok {
			return invalidf("tunnels %s and %s share peer ID %q", other, t.Name, t.PeerID)
		}
		peerIDs[t.PeerID] = t.Name
		if len(t.RemoteSubnets) == 0 {
			return invalidf("tunnel %s: no remote subnets", t.Name)
		}
		for _, s := range t.RemoteSubnets {
			p, err := parsePrefix4("tunnel "+t.Name+" remote subnet", s)
			if err != nil {
				return err
			}
			if p.Overlaps(svc) || p.Overlaps(subnet) {
				return invalidf("tunnel %s: remote subnet %s overlaps the service CIDR or the gateway subnet", t.Name, p)
			}
			if err := pol.ClientSubnet(p); err != nil {
				return invalidf("tunnel %s: remote subnet %s %v", t.Name, p, err)
			}
			// The fail-closed guard drops everything to the remote subnets that is not
			// encrypted; IKE to a peer inside them would be dropped too.
			if p.Contains(peer) {
				return invalidf("tunnel %s: peer address %s lies inside its remote subnet %s", t.Name, peer, p)
			}
			for _, o := range allSubnets {
				if o.Overlaps(p) {
					return invalidf("remote subnets %s and %s overlap", o, p)
				}
			}
			// A routed subnet inside the fabric's own sources would route the fabric
			// into the tunnel.
			if t.Mode == ModeRouted {
				for _, in := range internal {
					if in.Overlaps(p) {
						return invalidf("tunnel %s: routed subnet %s overlaps internal source %s", t.Name, p, in)
					}
				}
			}
			allSubnets = append(allSubnets, p)
		}
		if err := checkProposals(t.Name, cryptofloor.IKE, t.IKEProposals); err != nil {
			return err
		}
		if err := checkProposals(t.Name, cryptofloor.ESP, t.ESPProposals); err != nil {
			return err
		}
		if !reK8sName.MatchString(t.PSK.Secret) || len(t.PSK.Secret) > 253 || !reDataKey.MatchString(t.PSK.Key) {
			return invalidf("tunnel %s: pre-shared key reference %q is not a Secret name and key", t.Name, t.PSK.String())
		}
		for _, v := range []int64{t.IKERekeySeconds, t.ESPRekeySeconds, t.DPDDelaySeconds} {
			if v < 1 || v > maxLifetimeSecs {
				return invalidf("tunnel %s: interval %d out of range", t.Name, v)
			}
		}
		if _, ok := dpdActions[t.DPDAction]; !ok {
			return invalidf("tunnel %s: dpd action %q must be restart, clear or trap", t.Name, t.DPDAction)
		}
	}

	if cfg.Protocol == ProtocolWireGuard {
		if err := validateWireGuard(cfg, svc, subnet, pol, &allSubnets, remotes); err != nil {
			return err
		}
	}

	names := map[string]bool{}
	vips := map[netip.Addr]string{}
	claimVIP := func(kind, name, v string, lo, hi byte) error {
		a, err := parseIPv4(kind+" "+name+" virtual IP", v)
		if err != nil {
			return err
		}
		if !svc.Contains(a) || a.As4()[3] < lo || a.As4()[3] > hi {
			return invalidf("%s %s: virtual IP %s outside .%d-.%d of %s", kind, name, a, lo, hi, svc)
		}
		if other, ok := vips[a]; ok {
			return invalidf("%s %s: virtual IP %s already used by %s", kind, name, a, other)
		}
		vips[a] = name
		return nil
	}
	for _, e := range cfg.Exposures {
		if err := checkName("exposure name", e.Name, 63); err != nil {
			return err
		}
		if names["e/"+e.Name] {
			return invalidf("duplicate exposure %q", e.Name)
		}
		names["e/"+e.Name] = true
		if err := claimVIP("exposure", e.Name, e.VirtualIP, 10, 199); err != nil {
			return err
		}
		tgt, err := parseIPv4("exposure "+e.Name+" target", e.TargetAddress)
		if err != nil {
			return err
		}
		if err := pol.ExposureTarget(tgt); err != nil {
			return invalidf("exposure %s: target %s %v", e.Name, tgt, err)
		}
		for _, p := range allSubnets {
			if p.Contains(tgt) {
				return invalidf("exposure %s: target %s lies in a peer subnet", e.Name, tgt)
			}
		}
		if err := checkPorts("exposure "+e.Name, e.Ports); err != nil {
			return err
		}
	}
	for _, r := range cfg.ReverseExposures {
		if err := checkName("reverse exposure name", r.Name, 63); err != nil {
			return err
		}
		if names["r/"+r.Name] {
			return invalidf("duplicate reverse exposure %q", r.Name)
		}
		names["r/"+r.Name] = true
		remote, ok := remotes[r.Tunnel]
		if !ok {
			return invalidf("reverse exposure %s: unknown tunnel %q", r.Name, r.Tunnel)
		}
		if err := claimVIP("reverse exposure", r.Name, r.VirtualIP, 200, 254); err != nil {
			return err
		}
		tgt, err := parseIPv4("reverse exposure "+r.Name+" target", r.TargetAddress)
		if err != nil {
			return err
		}
		if err := pol.ReverseTarget(tgt); err != nil {
			return invalidf("reverse exposure %s: target %s %v", r.Name, tgt, err)
		}
		inside := false
		for _, s := range remote {
			if netip.MustParsePrefix(s).Contains(tgt) {
				inside = true
			}
		}
		// A target outside the tunnel's selectors would leave the gateway unencrypted.
		if !inside {
			return invalidf("reverse exposure %s: target %s is not inside a remote subnet of tunnel %s", r.Name, tgt, r.Tunnel)
		}
		if err := checkPorts("reverse exposure "+r.Name, r.Ports); err != nil {
			return err
		}
	}
	if cfg.MSSClamp.MSS < 0 || cfg.MSSClamp.MSS > 65495 || (cfg.MSSClamp.MSS > 0 && cfg.MSSClamp.MSS < 536) {
		return invalidf("mssClamp.mss %d out of range (0 or 536-65495)", cfg.MSSClamp.MSS)
	}
	return nil
}

func checkProposals(tunnel string, kind cryptofloor.Kind, ps []string) error {
	if len(ps) == 0 {
		return invalidf("%s %s: no proposals", tunnel, kind)
	}
	for _, p := range ps {
		if len(p) > maxProposalLen || !reProposal.MatchString(p) {
			return invalidf("%s %s: proposal %q must match %s", tunnel, kind, p, reProposal)
		}
		if err := cryptofloor.Check(kind, p); err != nil {
			return invalidf("%s %s: proposal %q: %v", tunnel, kind, p, err)
		}
	}
	return nil
}

func sortStrings(s []string) { sort.Strings(s) }

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
