// Package nat programs the gateway's NAT and fail-closed guard into one nftables table
// owned by the agent. Rules are fixed; exposures are elements of maps, so per-packet
// cost stays flat as exposures grow and an exposure change is a handful of element
// updates in one atomic transaction.
package nat

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/knftables"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// GuardMode selects how the guard recognises traffic that will leave encrypted.
type GuardMode string

const (
	// GuardInterface: the tunnel is a device (libipsec's ipsec0); anything to a peer
	// subnet leaving by another device is dropped. Verified end to end in tests.
	GuardInterface GuardMode = "interface"
	// GuardXFRM: the kernel's policy-based IPsec; after source NAT, anything to a peer
	// subnet whose route carries no XFRM transformation (`rt ipsec missing`) is dropped.
	// Verified end to end in the kernel dataplane VM test (docs/dataplane.md).
	GuardXFRM GuardMode = "xfrm"
)

// Object names inside the table.
const (
	DefaultTable     = "bnerd-gw"
	SetPeerSubnets   = "peer_subnets"
	MapExposurePorts = "exposure_ports"
	MapExposureAll   = "exposure_all"
	MapReversePorts  = "reverse_ports"
	MapReverseAll    = "reverse_all"
	ChainPrerouting  = "prerouting"
	ChainPostrouting = "postrouting"
	ChainForward     = "forward"
	ChainOutput      = "output"
	ChainInput       = "input"
	ChainGuard       = "guard"
	// GuardComment marks the fail-closed guard's drop rules.
	GuardComment = "fail-closed guard"
	// InputComment marks the rule that keeps the client off the pod itself.
	InputComment = "client to the pod"
	// UntrustedComment marks the rule that drops traffic from other ports of the
	// gateway network.
	UntrustedComment = "another port of the gateway network"
)

// Options configure the Programmer.
type Options struct {
	Table string
	Guard GuardMode
	// TunnelInterface is the tunnel device, or several separated by commas (a WireGuard
	// gateway's two key slots, "wg0,wg1": during a key rotation both carry traffic);
	// the guard admits the client subnets through any of them.
	TunnelInterface string
	// TunnelMTU bounds the MSS of SYNs arriving from the tunnel when the config does not
	// pin an MSS (libipsec's TUN defaults to 1400).
	TunnelMTU int
	// PortInterface, when set, is the only device IKE and ESP may leave by (NIC2): the
	// guard drops them on any other, so a tunnel can never be negotiated or carried over
	// the pod network and the node's address, whatever order the pod's containers start
	// or restart in.
	PortInterface string
}

// Programmer owns the table. Safe for concurrent use.
type Programmer struct {
	nft  knftables.Interface
	opts Options

	mu      sync.Mutex
	applied *gatewayconfig.NAT
	rules   string
}

// New returns a Programmer for the running system's nftables.
func New(opts Options) (*Programmer, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	nft, err := knftables.New(knftables.IPv4Family, opts.Table)
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	return &Programmer{nft: nft, opts: opts}, nil
}

// NewWithInterface is New with a given knftables.Interface (tests use knftables.NewFake).
func NewWithInterface(nft knftables.Interface, opts Options) (*Programmer, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Programmer{nft: nft, opts: opts}, nil
}

func (o Options) withDefaults() Options {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if o.Guard == "" {
		o.Guard = GuardInterface
	}
	if o.Guard == GuardInterface && o.TunnelInterface == "" {
		o.TunnelInterface = "ipsec0"
	}
	if o.TunnelMTU == 0 {
		o.TunnelMTU = 1400
	}
	return o
}

func (o Options) validate() error {
	if o.Guard != GuardInterface && o.Guard != GuardXFRM {
		return fmt.Errorf("guard mode %q must be %s or %s", o.Guard, GuardInterface, GuardXFRM)
	}
	if o.Guard == GuardInterface && len(SplitInterfaces(o.TunnelInterface)) == 0 {
		return fmt.Errorf("tunnel interface %q names no device", o.TunnelInterface)
	}
	names := map[string]string{"port": o.PortInterface}
	for i, name := range SplitInterfaces(o.TunnelInterface) {
		names[fmt.Sprintf("tunnel %d", i+1)] = name
	}
	for what, name := range names {
		for _, r := range name {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
				return fmt.Errorf("%s interface %q has characters outside [a-z0-9._-]", what, name)
			}
		}
		if len(name) > 15 {
			return fmt.Errorf("%s interface %q is longer than 15 characters", what, name)
		}
	}
	if o.TunnelMTU < 576 || o.TunnelMTU > 65535 {
		return fmt.Errorf("tunnel MTU %d out of range", o.TunnelMTU)
	}
	return nil
}

// Sync converges the table to m in one transaction, through knftables (the nft CLI),
// like kube-proxy. When only map and set elements differ from the last successful sync,
// the transaction touches only those elements; otherwise (first run, changed rule
// parameters, after Invalidate) it rewrites chains, sets and maps atomically.
func (p *Programmer) Sync(ctx context.Context, m *gatewayconfig.NAT) (full bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rules := p.ruleText(m)
	joined := strings.Join(rules, "\n")
	if p.applied != nil && p.rules == joined {
		ops := elementOps(p.applied, m)
		if len(ops) == 0 {
			return false, nil
		}
		tx := p.nft.NewTransaction()
		for _, op := range ops {
			if op.del {
				tx.Delete(op.element())
			} else {
				tx.Add(op.element())
			}
		}
		if err := p.nft.Run(ctx, tx); err != nil {
			// The next sync starts from scratch: our view of the table is unknown now.
			p.applied = nil
			return false, fmt.Errorf("nftables element transaction (%d operations): %w", len(ops), err)
		}
		p.applied = m
		return false, nil
	}
	tx := p.nft.NewTransaction()
	p.fullTx(tx, m, rules)
	if err := p.nft.Run(ctx, tx); err != nil {
		p.applied = nil
		return true, fmt.Errorf("nftables transaction (%d operations): %w", tx.NumOperations(), err)
	}
	p.applied = m
	p.rules = joined
	return true, nil
}

// Invalidate forces the next Sync to rewrite everything (after drift was detected).
func (p *Programmer) Invalidate() {
	p.mu.Lock()
	p.applied = nil
	p.mu.Unlock()
}

// Applied returns the last model synced successfully, or nil.
func (p *Programmer) Applied() *gatewayconfig.NAT {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.applied
}

func (p *Programmer) fromTunnel() string {
	if p.opts.Guard == GuardXFRM {
		return "meta ipsec exists"
	}
	return "iifname " + p.tunnelNames()
}

func (p *Programmer) notFromTunnel() string {
	if p.opts.Guard == GuardXFRM {
		return "meta ipsec missing"
	}
	return "iifname != " + p.tunnelNames()
}

// tunnelNames is the tunnel device quoted, or the anonymous set of the devices.
func (p *Programmer) tunnelNames() string { return TunnelMatch(p.opts.TunnelInterface) }

// TunnelMatch is how the rules name a tunnel interface list (Options.TunnelInterface):
// one device quoted, several as an anonymous set.
func TunnelMatch(list string) string {
	names := SplitInterfaces(list)
	if len(names) == 1 {
		return strconv.Quote(names[0])
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = strconv.Quote(n)
	}
	return "{ " + strings.Join(quoted, ", ") + " }"
}

// SplitInterfaces returns the device names of a comma-separated list, in order.
func SplitInterfaces(list string) []string {
	var out []string
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

func (p *Programmer) mss(m *gatewayconfig.NAT) int {
	if m.MSSClamp.MSS > 0 {
		return int(m.MSSClamp.MSS)
	}
	return p.opts.TunnelMTU - 40
}

type chainSpec struct {
	name     string
	typ      knftables.BaseChainType
	hook     knftables.BaseChainHook
	priority knftables.BaseChainPriority
}

func (p *Programmer) chains() []chainSpec {
	cs := []chainSpec{
		{ChainPrerouting, knftables.NATType, knftables.PreroutingHook, knftables.DNATPriority},
		{ChainPostrouting, knftables.NATType, knftables.PostroutingHook, knftables.SNATPriority},
		{ChainForward, knftables.FilterType, knftables.ForwardHook, knftables.FilterPriority},
		{ChainGuard, knftables.FilterType, knftables.PostroutingHook, knftables.SNATPriority + "+10"},
		{ChainInput, knftables.FilterType, knftables.InputHook, knftables.FilterPriority},
	}
	if p.opts.Guard == GuardInterface {
		cs = append(cs, chainSpec{ChainOutput, knftables.FilterType, knftables.OutputHook, knftables.FilterPriority})
	}
	return cs
}

// ruleText returns every rule as "<chain>\t<rule>", in order. Only rule parameters (not
// exposures) appear here, so it changes only when a full sync is needed.
func (p *Programmer) ruleText(m *gatewayconfig.NAT) []string {
	var out []string
	add := func(chain, rule string) { out = append(out, chain+"\t"+rule) }
	peers := "@" + SetPeerSubnets

	if len(m.UntrustedSources) > 0 {
		// Before any translation: nothing from another port of the gateway network is
		// reverse-DNATed, forwarded to a routed client or accepted by the pod; traffic to
		// the port's own address (IKE, ICMP errors) is left to the security group.
		add(ChainPrerouting, fmt.Sprintf("ip saddr { %s } ip saddr != %s ip daddr != %s counter drop comment %q",
			strings.Join(m.UntrustedSources, ", "), m.ForwardSNATAddress, m.ForwardSNATAddress, UntrustedComment))
	}
	add(ChainPrerouting, fmt.Sprintf("%s ip saddr %s dnat ip to ip daddr . meta l4proto . th dport map @%s", p.fromTunnel(), peers, MapExposurePorts))
	add(ChainPrerouting, fmt.Sprintf("%s ip saddr %s dnat ip to ip daddr map @%s", p.fromTunnel(), peers, MapExposureAll))
	add(ChainPrerouting, fmt.Sprintf("%s dnat ip to ip daddr . meta l4proto . th dport map @%s", p.notFromTunnel(), MapReversePorts))
	add(ChainPrerouting, fmt.Sprintf("%s dnat ip to ip daddr map @%s", p.notFromTunnel(), MapReverseAll))

	// Routed-mode tunnels keep their real addresses both ways (see routedRules).
	routed := routedRules(m, p.fromTunnel())
	out = append(out, routed.postrouting...)
	// Reverse exposures reach the client from .1 (inside the child SA's local selector);
	// exposure targets see the port's fixed IP, which they can route back to.
	add(ChainPostrouting, fmt.Sprintf("ct status dnat ip daddr %s snat ip to %s", peers, m.ReverseSNATAddress))
	add(ChainPostrouting, fmt.Sprintf("ct status dnat ip saddr %s snat ip to %s", peers, m.ForwardSNATAddress))

	if m.MSSClamp.Enabled {
		add(ChainForward, "tcp flags & (syn|rst) == syn tcp option maxseg size set rt mtu")
		mss := p.mss(m)
		// Both directions: SYNs arriving from the tunnel, and SYNs about to enter it. The
		// second matters with kernel IPsec, where the forward hook sees the plain route
		// (the XFRM bundle is attached only after source NAT), so `rt mtu` does not know
		// the tunnel's overhead.
		add(ChainForward, fmt.Sprintf("%s tcp flags & (syn|rst) == syn tcp option maxseg size > %d tcp option maxseg size set %d", p.fromTunnel(), mss, mss))
		add(ChainForward, fmt.Sprintf("ip daddr %s tcp flags & (syn|rst) == syn tcp option maxseg size > %d tcp option maxseg size set %d", peers, mss, mss))
	}
	// Guard rules carry GuardComment: the drift check sums their counters, which is the
	// guard's drop count the exporter publishes.
	if p.opts.Guard == GuardInterface {
		add(ChainForward, fmt.Sprintf("ip daddr %s oifname != %s counter drop comment %q", peers, p.tunnelNames(), GuardComment))
		add(ChainOutput, fmt.Sprintf("ip daddr %s oifname != %s counter drop comment %q", peers, p.tunnelNames(), GuardComment))
		add(ChainGuard, fmt.Sprintf("ip daddr %s oifname != %s counter drop comment %q", peers, p.tunnelNames(), GuardComment))
	} else {
		// Runs after SNAT, when the route has been re-looked-up with the final source and
		// carries the XFRM bundle if a policy matched.
		add(ChainGuard, fmt.Sprintf("ip daddr %s rt ipsec missing counter drop comment %q", peers, GuardComment))
	}
	out = append(out, routed.forward...)
	if p.opts.PortInterface != "" {
		// IKE (UDP 500, NAT-T 4500) and ESP leave only through the dedicated port.
		add(ChainGuard, fmt.Sprintf("udp sport { 500, 4500 } oifname != %q counter drop", p.opts.PortInterface))
		add(ChainGuard, fmt.Sprintf("udp dport { 500, 4500 } oifname != %q counter drop", p.opts.PortInterface))
		add(ChainGuard, fmt.Sprintf("meta l4proto esp oifname != %q counter drop", p.opts.PortInterface))
	}
	// Only exposures (and routed-mode traffic above) cross the gateway: anything else
	// from the client's subnets or to them that was not translated is dropped here, so it
	// can never leave in the clear through a router that does not know it belongs in a
	// tunnel.
	add(ChainForward, fmt.Sprintf("ip saddr %s ct status & dnat == 0 counter drop", peers))
	add(ChainForward, fmt.Sprintf("ip daddr %s ct status & dnat == 0 counter drop", peers))
	// The client reaches our services through the exposures, never the gateway pod
	// itself: a new connection from the client's subnets to one of the pod's own
	// addresses (the metrics port, the service CIDR's .1, the port's address) is dropped.
	// IKE and ESP come from the peer's address, which lies outside its subnets.
	add(ChainInput, fmt.Sprintf("ip saddr %s ct state new counter drop comment %q", peers, InputComment))
	return out
}

func (p *Programmer) fullTx(tx *knftables.Transaction, m *gatewayconfig.NAT, rules []string) {
	comment := "owned by vpn-gateway-agent; edits are reverted"
	tx.Add(&knftables.Table{Comment: &comment})
	for _, c := range p.chains() {
		typ, hook, prio := c.typ, c.hook, c.priority
		tx.Add(&knftables.Chain{Name: c.name, Type: &typ, Hook: &hook, Priority: &prio})
		tx.Flush(&knftables.Chain{Name: c.name})
	}
	// An output chain left from an earlier interface-mode run must not outlive the mode.
	if p.opts.Guard != GuardInterface {
		tx.Add(&knftables.Chain{Name: ChainOutput})
		tx.Flush(&knftables.Chain{Name: ChainOutput})
	}
	tx.Add(&knftables.Set{Name: SetPeerSubnets, Type: "ipv4_addr", Flags: []knftables.SetFlag{knftables.IntervalFlag}})
	for _, name := range []string{MapExposurePorts, MapReversePorts} {
		tx.Add(&knftables.Map{Name: name, Type: "ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service"})
	}
	for _, name := range []string{MapExposureAll, MapReverseAll} {
		tx.Add(&knftables.Map{Name: name, Type: "ipv4_addr : ipv4_addr"})
	}
	tx.Flush(&knftables.Set{Name: SetPeerSubnets})
	for _, name := range []string{MapExposurePorts, MapReversePorts, MapExposureAll, MapReverseAll} {
		tx.Flush(&knftables.Map{Name: name})
	}
	for _, s := range m.PeerSubnets {
		tx.Add(&knftables.Element{Set: SetPeerSubnets, Key: []string{s}})
	}
	for _, e := range elements(m) {
		tx.Add(e.element())
	}
	for _, r := range rules {
		chain, rule, _ := strings.Cut(r, "\t")
		tx.Add(&knftables.Rule{Chain: chain, Rule: rule})
	}
}

type elem struct {
	mapName string
	key     []string
	value   []string
	owner   string
}

func (e elem) id() string { return e.mapName + "|" + strings.Join(e.key, " . ") }

func (e elem) element() *knftables.Element {
	el := &knftables.Element{Map: e.mapName, Key: e.key, Value: e.value}
	if e.owner != "" {
		c := e.owner
		el.Comment = &c
	}
	return el
}

func elements(m *gatewayconfig.NAT) []elem {
	var out []elem
	for _, pm := range m.ExposurePorts {
		out = append(out, elem{MapExposurePorts, pm.Key(), pm.Value(), pm.Owner})
	}
	for _, pm := range m.ReversePorts {
		out = append(out, elem{MapReversePorts, pm.Key(), pm.Value(), pm.Owner})
	}
	for _, am := range m.ExposureAll {
		out = append(out, elem{MapExposureAll, []string{am.VirtualIP}, []string{am.Target}, am.Owner})
	}
	for _, am := range m.ReverseAll {
		out = append(out, elem{MapReverseAll, []string{am.VirtualIP}, []string{am.Target}, am.Owner})
	}
	return out
}

// elemOp is one element added to or deleted from a map (value set) or from the peer
// subnet set (mapName SetPeerSubnets, no value). Deletions carry only the key.
type elemOp struct {
	del bool
	elem
}

func (o elemOp) element() *knftables.Element {
	if o.mapName == SetPeerSubnets {
		return &knftables.Element{Set: SetPeerSubnets, Key: o.key}
	}
	if o.del {
		return &knftables.Element{Map: o.mapName, Key: o.key}
	}
	return o.elem.element()
}

// entryKey and entryVal identify a map element and its value without rendering them:
// diffing runs on every sync and must stay cheap at tens of thousands of elements.
type entryKey struct {
	mapName    string
	vip, proto string
	port       int32
}

type entryVal struct {
	target string
	port   int32
}

type entry struct {
	key   entryKey
	val   entryVal
	owner string
}

func entries(m *gatewayconfig.NAT) []entry {
	out := make([]entry, 0, len(m.ExposurePorts)+len(m.ReversePorts)+len(m.ExposureAll)+len(m.ReverseAll))
	for _, pm := range m.ExposurePorts {
		out = append(out, entry{entryKey{MapExposurePorts, pm.VirtualIP, pm.Protocol, pm.Port}, entryVal{pm.Target, pm.TargetPort}, pm.Owner})
	}
	for _, pm := range m.ReversePorts {
		out = append(out, entry{entryKey{MapReversePorts, pm.VirtualIP, pm.Protocol, pm.Port}, entryVal{pm.Target, pm.TargetPort}, pm.Owner})
	}
	for _, am := range m.ExposureAll {
		out = append(out, entry{entryKey{mapName: MapExposureAll, vip: am.VirtualIP}, entryVal{target: am.Target}, am.Owner})
	}
	for _, am := range m.ReverseAll {
		out = append(out, entry{entryKey{mapName: MapReverseAll, vip: am.VirtualIP}, entryVal{target: am.Target}, am.Owner})
	}
	return out
}

// elem renders e in nft notation, as elements() does.
func (e entry) elem() elem {
	if e.key.mapName == MapExposurePorts || e.key.mapName == MapReversePorts {
		return elem{e.key.mapName,
			[]string{e.key.vip, e.key.proto, strconv.Itoa(int(e.key.port))},
			[]string{e.val.target, strconv.Itoa(int(e.val.port))}, e.owner}
	}
	return elem{e.key.mapName, []string{e.key.vip}, []string{e.val.target}, e.owner}
}

// elementOps returns the element changes from old to m: map deletions, map additions,
// peer subnet deletions, peer subnet additions, each sorted. A changed map element is
// deleted and re-added, so unchanged elements are never touched.
func elementOps(old, m *gatewayconfig.NAT) []elemOp {
	oldE := entries(old)
	idx := make(map[entryKey]int, len(oldE))
	for i, e := range oldE {
		idx[e.key] = i
	}
	seen := make([]bool, len(oldE))
	var dels, adds []elemOp
	newE := entries(m)
	newIdx := make(map[entryKey]int, len(newE))
	for i, e := range newE {
		newIdx[e.key] = i
	}
	for i, n := range newE {
		if newIdx[n.key] != i {
			continue // a later duplicate wins
		}
		j, ok := idx[n.key]
		if ok {
			seen[j] = true
		}
		if !ok || oldE[j].val != n.val {
			adds = append(adds, elemOp{elem: n.elem()})
		}
		if ok && oldE[j].val != n.val {
			o := oldE[j].elem()
			dels = append(dels, elemOp{del: true, elem: elem{mapName: o.mapName, key: o.key}})
		}
	}
	for i, o := range oldE {
		if !seen[i] && idx[o.key] == i {
			e := o.elem()
			dels = append(dels, elemOp{del: true, elem: elem{mapName: e.mapName, key: e.key}})
		}
	}
	sortOps(dels)
	sortOps(adds)
	ops := append(dels, adds...)

	oldS := map[string]bool{}
	for _, s := range old.PeerSubnets {
		oldS[s] = true
	}
	newS := map[string]bool{}
	for _, s := range m.PeerSubnets {
		newS[s] = true
	}
	for _, s := range old.PeerSubnets {
		if !newS[s] {
			ops = append(ops, elemOp{del: true, elem: elem{mapName: SetPeerSubnets, key: []string{s}}})
		}
	}
	for _, s := range m.PeerSubnets {
		if !oldS[s] {
			ops = append(ops, elemOp{elem: elem{mapName: SetPeerSubnets, key: []string{s}}})
		}
	}
	return ops
}

func sortOps(ops []elemOp) {
	sort.Slice(ops, func(i, j int) bool { return ops[i].id() < ops[j].id() })
}

// Expected describes what a drift check should find in the kernel after the last sync.
type Expected struct {
	Chains   map[string]int
	Elements map[string]int
}

// Expected returns the rule count per chain and element count per set/map of the last
// successful sync, or false before the first one.
func (p *Programmer) Expected() (Expected, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.applied == nil {
		return Expected{}, false
	}
	ex := Expected{Chains: map[string]int{}, Elements: map[string]int{}}
	for _, c := range p.chains() {
		ex.Chains[c.name] = 0
	}
	for _, r := range strings.Split(p.rules, "\n") {
		chain, _, _ := strings.Cut(r, "\t")
		ex.Chains[chain]++
	}
	ex.Elements[SetPeerSubnets] = len(p.applied.PeerSubnets)
	ex.Elements[MapExposurePorts] = len(p.applied.ExposurePorts)
	ex.Elements[MapReversePorts] = len(p.applied.ReversePorts)
	ex.Elements[MapExposureAll] = len(p.applied.ExposureAll)
	ex.Elements[MapReverseAll] = len(p.applied.ReverseAll)
	return ex, true
}

// Table returns the table name.
func (p *Programmer) Table() string { return p.opts.Table }

// Timed runs Sync and reports its duration, for metrics.
func (p *Programmer) Timed(ctx context.Context, m *gatewayconfig.NAT) (time.Duration, bool, error) {
	start := time.Now()
	full, err := p.Sync(ctx, m)
	return time.Since(start), full, err
}
