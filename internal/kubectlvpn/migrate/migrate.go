// Package migrate turns an existing VM gateway's strongSwan configuration (swanctl.conf,
// or the legacy ipsec.conf with ipsec.secrets) into an IPsecGateway manifest that pins
// the VM's floating IP, and lists every setting it could not carry over with the reason.
// It is a pure builder: text in, objects and a report out.
//
// What carries over: each IKEv2 PSK connection to a static IPv4 peer becomes a tunnel
// (peer address and identity, the peer's networks, IKE and ESP proposals, lifetimes,
// DPD); connections to the same peer become one tunnel. What cannot: our side's own
// traffic selectors (the operator's tunnels carry the gateway's service CIDR, and each
// service becomes an exposure with a virtual IP), certificates and EAP, IKEv1, virtual
// IP pools, and the knobs the operator renders itself.
package migrate

import (
	"bnerd.net/vpn-operator/internal/cryptofloor"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// Format of the input.
type Format string

const (
	FormatAuto    Format = "auto"
	FormatSwanctl Format = "swanctl"
	FormatIPsec   Format = "ipsec"
)

// Options of a migration.
type Options struct {
	// Name and Namespace of the IPsecGateway to write.
	Name, Namespace string
	// FloatingIP pins spec.endpoint.floatingIP. Empty: inferred from the VM's IKE
	// identity or address when that is a public IPv4 address, else none.
	FloatingIP string
	// IncludeSecrets writes the pre-shared keys found into Secret manifests; otherwise
	// the report names the Secrets to create and no key is output anywhere.
	IncludeSecrets bool
}

// Input is the configuration to migrate.
type Input struct {
	Path   string // for the report
	Text   string
	Format Format
	// Secrets is ipsec.secrets content (ipsec.conf input); swanctl.conf carries its own.
	Secrets string
}

// Dropped is one setting that was not carried over.
type Dropped struct {
	Setting string // as named in the input
	Value   string
	Reason  string
}

// Tunnel says where a tunnel of the manifest came from.
type Tunnel struct {
	Name        string
	From        []string // connections merged into it
	Peer        string
	Subnets     []string
	PSKFound    bool
	SecretName  string
	PSKFromWhat string
}

// Result of a migration.
type Result struct {
	Gateway *v1alpha1.IPsecGateway
	// Secrets holds one Secret per tunnel whose key was found, with the key, only with
	// Options.IncludeSecrets.
	Secrets []*corev1.Secret
	Tunnels []Tunnel
	Dropped []Dropped
	// Notes are facts about what was carried (inferred values, changes the client must
	// make).
	Notes []string
	// FloatingIPSource says where spec.endpoint.floatingIP came from ("" when unset).
	FloatingIPSource string
	// keys are the keys read (as written and decoded): Report's last check.
	keys []string
}

// ErrNothingToMigrate means no connection could become a tunnel.
var ErrNothingToMigrate = errors.New("no connection could be carried over")

var (
	reProposal = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	reDuration = regexp.MustCompile(`^[0-9]{1,6}[smhd]?$`)
	reLabel    = regexp.MustCompile(`[^a-z0-9-]+`)
	reIKEID    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.@:_-]*$`)
)

// DetectFormat tells swanctl.conf from ipsec.conf by content, falling back to the name.
func DetectFormat(path, text string) Format {
	for _, l := range strings.Split(text, "\n") {
		t := strings.TrimSpace(stripComment(l))
		switch {
		case strings.HasPrefix(t, "connections") && strings.Contains(t, "{"), t == "connections":
			return FormatSwanctl
		case strings.HasPrefix(t, "conn ") && !strings.Contains(t, "{"):
			return FormatIPsec
		}
	}
	if strings.Contains(filepath.Base(path), "swanctl") {
		return FormatSwanctl
	}
	return FormatIPsec
}

// tunnelDraft collects one tunnel before it is checked.
type tunnelDraft struct {
	t       v1alpha1.Tunnel
	origin  Tunnel
	localID string
}

// Migrate converts in according to opts.
func Migrate(in Input, opts Options) (*Result, error) {
	if opts.Name == "" || opts.Namespace == "" {
		return nil, fmt.Errorf("the gateway's name and namespace are required")
	}
	if opts.FloatingIP != "" {
		if a, err := netip.ParseAddr(opts.FloatingIP); err != nil || !a.Is4() {
			return nil, fmt.Errorf("--floating-ip %q is not an IPv4 address", opts.FloatingIP)
		}
	}
	f := in.Format
	if f == "" || f == FormatAuto {
		f = DetectFormat(in.Path, in.Text)
	}
	res := &Result{}
	var conns []conn
	var secrets []secret
	var problems []string
	switch f {
	case FormatSwanctl:
		root, p := parseSwanctl(in.Text)
		problems = p
		conns = swanctlConns(root)
		secrets = swanctlSecrets(root)
		for _, s := range root.sections {
			switch s.name {
			case "connections", "secrets":
			case "authorities", "pools":
				res.drop(s.name+" { ... }", "", "only connections and secrets are migrated; authorities, pools and other sections have no counterpart")
			default:
				// Not a section swanctl.conf knows: its name is not shown (it may be
				// a stray piece of a key).
				res.drop(fmt.Sprintf("the section at line %d", s.line), "", "only connections and secrets are migrated; authorities, pools and other sections have no counterpart")
			}
		}
	case FormatIPsec:
		conns, problems = parseIPsecConf(in.Text)
		if in.Secrets != "" {
			s, p := parseIPsecSecrets(in.Secrets)
			secrets, problems = s, append(problems, p...)
		}
	default:
		return nil, fmt.Errorf("unknown format %q (swanctl or ipsec)", f)
	}
	for _, p := range problems {
		res.drop(p, "", "not read")
	}
	for _, s := range secrets {
		res.keys = append(res.keys, s.raw, string(s.value))
	}
	if len(conns) == 0 {
		return res, fmt.Errorf("%w: %s has no connections", ErrNothingToMigrate, in.Path)
	}

	var drafts []*tunnelDraft
	for _, c := range conns {
		if d := res.convert(c); d != nil {
			drafts = append(drafts, d)
		}
	}
	drafts = res.merge(drafts)
	drafts = res.disjoint(drafts)
	if len(drafts) == 0 {
		return res, fmt.Errorf("%w: every connection of %s needs something the gateway does not do (see the list)", ErrNothingToMigrate, in.Path)
	}
	if len(drafts) > 16 {
		for _, d := range drafts[16:] {
			res.drop(strings.Join(d.origin.From, ", "), "", "a gateway carries at most 16 tunnels; migrate the rest into a second gateway")
		}
		drafts = drafts[:16]
	}

	gw := &v1alpha1.IPsecGateway{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.KindIPsecGateway},
		ObjectMeta: metav1.ObjectMeta{Name: opts.Name, Namespace: opts.Namespace},
	}
	fip, src := opts.FloatingIP, "--floating-ip"
	if fip == "" {
		fip, src = res.inferFloatingIP(drafts, conns)
	}
	if fip != "" {
		gw.Spec.Endpoint = &v1alpha1.Endpoint{FloatingIP: fip}
		res.FloatingIPSource = src
	} else {
		res.Notes = append(res.Notes, "No floating IP pinned (none given with --floating-ip and none inferred): the operator allocates a new address, and every client must change its remote gateway address. Give the VM's floating IP with --floating-ip to keep it.")
	}
	for _, d := range drafts {
		if d.localID != "" && d.localID != fip {
			res.Notes = append(res.Notes, fmt.Sprintf("Tunnel %s: the VM identified itself as %q; the gateway's IKE identity is its floating IP %s, so the client must change the remote identity it expects.", d.t.Name, d.localID, orText(fip, "(a new address)")))
		}
	}

	names := map[string]bool{}
	for _, d := range drafts {
		d.t.Name = uniqueName(d.t.Name, names)
		d.origin.Name = d.t.Name
		sec := fmt.Sprintf("%s-%s-psk", opts.Name, d.t.Name)
		if len(sec) > 253 {
			sec = sec[:253]
		}
		d.t.PreSharedKey = v1alpha1.SecretKeyRef{Name: sec, Key: "psk"}
		d.origin.SecretName = sec
		if key, where := findPSK(secrets, d); key != nil {
			d.origin.PSKFound, d.origin.PSKFromWhat = true, where
			if opts.IncludeSecrets {
				res.Secrets = append(res.Secrets, &corev1.Secret{
					TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
					ObjectMeta: metav1.ObjectMeta{Name: sec, Namespace: opts.Namespace},
					Type:       corev1.SecretTypeOpaque,
					Data:       map[string][]byte{"psk": key},
				})
			}
		}
		gw.Spec.Tunnels = append(gw.Spec.Tunnels, d.t)
		res.Tunnels = append(res.Tunnels, d.origin)
	}
	res.Gateway = gw
	if errs := gw.Spec.Validate(); len(errs) > 0 {
		return res, fmt.Errorf("the manifest would be refused: %v", errs.ToAggregate())
	}
	return res, nil
}

func orText(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// drop records a setting not carried over. The value of a setting that may hold key
// material (a misplaced secrets section, a key-like name) is not recorded.
func (r *Result) drop(setting, value, reason string) {
	if mayHoldKey(setting) {
		value = ""
	}
	r.Dropped = append(r.Dropped, Dropped{Setting: setting, Value: value, Reason: reason})
}

// reKeyLike matches a setting name (a part of its path) that may carry key material.
var reKeyLike = regexp.MustCompile(`(?i)secret|psk|passw|passphrase|private|token|^pin$|key$`)

// mayHoldKey tells whether a setting path names, or lies in, something that can hold a
// key: "connections.hq.secrets.ike.secret", "conn hq: leftpsk", "connections.hq.psk".
func mayHoldKey(path string) bool {
	for _, part := range strings.FieldsFunc(path, func(r rune) bool { return r == '.' || r == ':' || r == ' ' }) {
		if reKeyLike.MatchString(part) {
			return true
		}
	}
	return false
}

// sanitize makes a DNS label of at most 32 characters from a connection name.
func sanitize(name string) string {
	s := strings.Trim(reLabel.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if len(s) > 32 {
		s = strings.Trim(s[:32], "-")
	}
	if s == "" {
		s = "tunnel"
	}
	return s
}

func uniqueName(name string, used map[string]bool) string {
	n := name
	for i := 2; used[n]; i++ {
		suffix := fmt.Sprintf("-%d", i)
		base := name
		if len(base)+len(suffix) > 32 {
			base = base[:32-len(suffix)]
		}
		n = base + suffix
	}
	used[n] = true
	return n
}

func isPublicIPv4(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is4() && !a.IsPrivate() && !a.IsLoopback() && !a.IsLinkLocalUnicast() && !a.IsUnspecified() &&
		!netip.MustParsePrefix("100.64.0.0/10").Contains(a)
}

// inferFloatingIP takes the VM's public IKE identity, or its public local address: on
// OpenStack the VM's own address is the port's fixed IP and its identity usually the
// floating IP.
func (r *Result) inferFloatingIP(drafts []*tunnelDraft, conns []conn) (string, string) {
	for _, d := range drafts {
		if isPublicIPv4(d.localID) {
			return d.localID, "the VM's IKE identity of tunnel " + d.t.Name
		}
	}
	for _, c := range conns {
		key := "local_addrs"
		if c.legacy {
			key = "left"
		}
		if v, ok := get(c.settings, key); ok && isPublicIPv4(v) {
			return v, c.where + " " + key
		}
	}
	return "", ""
}

// findPSK finds the key for a tunnel: an entry naming the peer's identity or address, or
// one without identities.
func findPSK(secrets []secret, d *tunnelDraft) ([]byte, string) {
	want := []string{d.t.Peer.Address}
	if d.t.Peer.ID != "" {
		want = append(want, d.t.Peer.ID)
	}
	var wildcard *secret
	for i := range secrets {
		s := &secrets[i]
		if len(s.ids) == 0 || (len(s.ids) == 1 && (s.ids[0] == "%any" || s.ids[0] == "0.0.0.0")) {
			if wildcard == nil {
				wildcard = s
			}
			continue
		}
		for _, id := range s.ids {
			for _, w := range want {
				if id == w {
					return s.value, s.where
				}
			}
		}
	}
	if wildcard != nil {
		return wildcard.value, wildcard.where + " (no identities: applies to every peer)"
	}
	return nil, ""
}

func splitList(v string) []string {
	var out []string
	for _, x := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }) {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// proposals converts a proposal list; ipsec.conf's strict marker "!" is the gateway's
// behaviour anyway (it offers exactly its list).
func (r *Result) proposals(kind cryptofloor.Kind, path, v string) ([]string, bool) {
	var out []string
	below := 0
	for _, p := range splitList(v) {
		p = strings.TrimSuffix(p, "!")
		if p == "default" {
			r.drop(path, v, "the keyword \"default\" means strongSwan's built-in proposals; the gateway's defaults ("+defaultsText(kind)+") apply instead: check the client supports them")
			return nil, false
		}
		if !reProposal.MatchString(p) || len(p) > 128 {
			r.drop(path, v, fmt.Sprintf("proposal %q is not in the notation the API accepts", p))
			return nil, false
		}
		if err := cryptofloor.Check(kind, p); err != nil {
			r.drop(path, p, fmt.Sprintf("below the gateway's crypto floor: %v", err))
			below++
			continue
		}
		out = append(out, p)
	}
	if len(out) > 8 {
		r.drop(path, v, "the API takes at most 8 proposals; the first 8 are kept")
		out = out[:8]
	}
	if len(out) == 0 {
		if below > 0 {
			r.drop(path, v, "no proposal meets the crypto floor: the gateway's defaults ("+defaultsText(kind)+") apply instead; the client must be reconfigured to one of them")
		}
		return nil, false
	}
	return out, true
}

// defaultsText names the gateway's default proposals of kind for a report.
func defaultsText(kind cryptofloor.Kind) string {
	if kind == cryptofloor.ESP {
		return "ESP " + strings.Join(gatewayconfig.DefaultESPProposals, ", ")
	}
	return "IKE " + strings.Join(gatewayconfig.DefaultIKEProposals, ", ")
}

func (r *Result) duration(path, v string) (string, bool) {
	if reDuration.MatchString(v) {
		return v, true
	}
	r.drop(path, v, "not a lifetime the API accepts (digits with an optional s, m, h or d); the gateway's default applies")
	return "", false
}

func dpdAction(v string) (string, bool) {
	switch v {
	case "restart", "clear", "trap":
		return v, true
	case "hold":
		return "trap", true
	}
	return "", false
}

// remoteSubnets checks the peer's traffic selectors.
func (r *Result) remoteSubnets(path, v string) ([]string, bool) {
	var out []string
	for _, s := range splitList(v) {
		if strings.Contains(s, "[") {
			r.drop(path, v, "protocol/port-restricted traffic selectors have no counterpart: the gateway's tunnels carry every protocol, and exposures restrict ports")
			return nil, false
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			if a, err2 := netip.ParseAddr(s); err2 == nil && a.Is4() {
				p = netip.PrefixFrom(a, 32)
			} else {
				r.drop(path, v, fmt.Sprintf("%q is not an IPv4 network", s))
				return nil, false
			}
		}
		if !p.Addr().Is4() {
			r.drop(path, v, "IPv6 traffic selectors are not supported by the gateway")
			return nil, false
		}
		if p.Masked() != p {
			r.Notes = append(r.Notes, fmt.Sprintf("%s: %s has host bits set; carried as %s", path, s, p.Masked()))
		}
		out = append(out, p.Masked().String())
	}
	return out, len(out) > 0
}

// merge folds drafts for the same peer (address and identity) into one tunnel: the
// gateway keys pre-shared keys and connections by the peer's identity, so two tunnels
// to one peer cannot exist, and the legacy one-conn-per-subnet-pair layout is one tunnel
// with several subnets.
func (r *Result) merge(drafts []*tunnelDraft) []*tunnelDraft {
	var out []*tunnelDraft
	for _, d := range drafts {
		id := d.t.Peer.ID
		if id == "" {
			id = d.t.Peer.Address
		}
		var into *tunnelDraft
		for _, o := range out {
			oid := o.t.Peer.ID
			if oid == "" {
				oid = o.t.Peer.Address
			}
			if oid == id {
				into = o
			}
		}
		if into == nil {
			out = append(out, d)
			continue
		}
		if into.t.Peer.Address != d.t.Peer.Address {
			r.drop(strings.Join(d.origin.From, ", "), d.t.Peer.Address, fmt.Sprintf("a second peer address for identity %s (already %s in tunnel %s): a tunnel has one peer address", id, into.t.Peer.Address, into.t.Name))
			continue
		}
		for _, s := range d.t.Peer.Subnets {
			if !contains(into.t.Peer.Subnets, s) {
				into.t.Peer.Subnets = append(into.t.Peer.Subnets, s)
			}
		}
		if strings.Join(d.t.IKE.Proposals, ",") != strings.Join(into.t.IKE.Proposals, ",") ||
			strings.Join(d.t.ESP.Proposals, ",") != strings.Join(into.t.ESP.Proposals, ",") ||
			d.t.IKE.Lifetime != into.t.IKE.Lifetime || d.t.ESP.Lifetime != into.t.ESP.Lifetime {
			r.Notes = append(r.Notes, fmt.Sprintf("%s merged into tunnel %s (same peer); its proposals or lifetimes differ, and tunnel %s keeps those of %s",
				strings.Join(d.origin.From, ", "), into.t.Name, into.t.Name, into.origin.From[0]))
		}
		into.origin.From = append(into.origin.From, d.origin.From...)
		into.origin.Subnets = into.t.Peer.Subnets
	}
	var kept []*tunnelDraft
	for _, d := range out {
		// A network that holds the peer's own address (0.0.0.0/0 of a route-based VM
		// setup, say) would send the tunnel's own IKE traffic into the tunnel; the
		// gateway refuses it.
		peer := netip.MustParseAddr(d.t.Peer.Address)
		var sn []string
		for _, s := range d.t.Peer.Subnets {
			if netip.MustParsePrefix(s).Contains(peer) {
				r.drop(strings.Join(d.origin.From, ", ")+" remote network", s, fmt.Sprintf("contains the peer's own address %s; list the client's real networks instead (a route-based VM tunnel with 0.0.0.0/0 selectors has no counterpart)", peer))
				continue
			}
			sn = append(sn, s)
		}
		if len(sn) == 0 {
			r.drop(strings.Join(d.origin.From, ", "), "", "not migrated: no client network left")
			continue
		}
		sort.Strings(sn)
		d.t.Peer.Subnets, d.origin.Subnets = sn, sn
		kept = append(kept, d)
	}
	return kept
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// disjoint keeps each client network in the first tunnel that names it: the gateway must
// know which tunnel carries a packet, so networks of two tunnels may not overlap (a VM's
// redundant pair of tunnels to the same networks has no counterpart; the gateway has no
// standby either).
func (r *Result) disjoint(drafts []*tunnelDraft) []*tunnelDraft {
	type owned struct {
		p      netip.Prefix
		tunnel string
	}
	var seen []owned
	var kept []*tunnelDraft
	for _, d := range drafts {
		var sn []string
		for _, s := range d.t.Peer.Subnets {
			p := netip.MustParsePrefix(s)
			clash := ""
			for _, o := range seen {
				if o.p.Overlaps(p) {
					clash = o.tunnel
				}
			}
			if clash != "" {
				r.drop(strings.Join(d.origin.From, ", ")+" remote network", s, "overlaps a network of tunnel "+clash+": a client network can be reached through one tunnel only")
				continue
			}
			sn = append(sn, s)
		}
		for _, s := range sn {
			seen = append(seen, owned{netip.MustParsePrefix(s), d.t.Name})
		}
		if len(sn) == 0 {
			r.drop(strings.Join(d.origin.From, ", "), "", "not migrated: every client network is already carried by another tunnel")
			continue
		}
		d.t.Peer.Subnets, d.origin.Subnets = sn, sn
		kept = append(kept, d)
	}
	return kept
}
