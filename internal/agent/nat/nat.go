// Package nat programs the gateway's NAT and fail-closed guard into one nftables table
// owned by the agent. Rules are fixed; exposures are elements of maps, so per-packet
// cost stays flat as exposures grow and an exposure change is a handful of element
// updates in one atomic transaction.
package nat

import (
	"context"
	"fmt"
	"sort"
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
	// Not verifiable on kernels without ESP; see docs/dataplane.md.
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
	ChainGuard       = "guard"
)

// Options configure the Programmer.
type Options struct {
	Table           string
	Guard           GuardMode
	TunnelInterface string
	// TunnelMTU bounds the MSS of SYNs arriving from the tunnel when the config does not
	// pin an MSS (libipsec's TUN defaults to 1400).
	TunnelMTU int
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
	for _, r := range o.TunnelInterface {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("tunnel interface %q has characters outside [a-z0-9._-]", o.TunnelInterface)
		}
	}
	if len(o.TunnelInterface) > 15 {
		return fmt.Errorf("tunnel interface %q is longer than 15 characters", o.TunnelInterface)
	}
	if o.TunnelMTU < 576 || o.TunnelMTU > 65535 {
		return fmt.Errorf("tunnel MTU %d out of range", o.TunnelMTU)
	}
	return nil
}

// Sync converges the table to m in one transaction. When only map and set elements
// differ from the last successful sync, the transaction touches only those elements;
// otherwise (first run, changed rule parameters, after Invalidate) it rewrites chains,
// sets and maps atomically.
func (p *Programmer) Sync(ctx context.Context, m *gatewayconfig.NAT) (full bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rules := p.ruleText(m)
	tx := p.nft.NewTransaction()
	if p.applied == nil || p.rules != strings.Join(rules, "\n") {
		full = true
		p.fullTx(tx, m, rules)
	} else {
		p.incrementalTx(tx, p.applied, m)
	}
	if tx.NumOperations() == 0 {
		return false, nil
	}
	if err := p.nft.Run(ctx, tx); err != nil {
		// The next sync starts from scratch: our view of the table is unknown now.
		p.applied = nil
		return full, fmt.Errorf("nftables transaction (%d operations): %w", tx.NumOperations(), err)
	}
	p.applied = m
	p.rules = strings.Join(rules, "\n")
	return full, nil
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
	return fmt.Sprintf("iifname %q", p.opts.TunnelInterface)
}

func (p *Programmer) notFromTunnel() string {
	if p.opts.Guard == GuardXFRM {
		return "meta ipsec missing"
	}
	return fmt.Sprintf("iifname != %q", p.opts.TunnelInterface)
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

	add(ChainPrerouting, fmt.Sprintf("%s ip saddr %s dnat ip to ip daddr . meta l4proto . th dport map @%s", p.fromTunnel(), peers, MapExposurePorts))
	add(ChainPrerouting, fmt.Sprintf("%s ip saddr %s dnat ip to ip daddr map @%s", p.fromTunnel(), peers, MapExposureAll))
	add(ChainPrerouting, fmt.Sprintf("%s dnat ip to ip daddr . meta l4proto . th dport map @%s", p.notFromTunnel(), MapReversePorts))
	add(ChainPrerouting, fmt.Sprintf("%s dnat ip to ip daddr map @%s", p.notFromTunnel(), MapReverseAll))

	// Reverse exposures reach the client from .1 (inside the child SA's local selector);
	// exposure targets see the port's fixed IP, which they can route back to.
	add(ChainPostrouting, fmt.Sprintf("ct status dnat ip daddr %s snat ip to %s", peers, m.ReverseSNATAddress))
	add(ChainPostrouting, fmt.Sprintf("ct status dnat ip saddr %s snat ip to %s", peers, m.ForwardSNATAddress))

	if m.MSSClamp.Enabled {
		add(ChainForward, "tcp flags & (syn|rst) == syn tcp option maxseg size set rt mtu")
		mss := p.mss(m)
		add(ChainForward, fmt.Sprintf("%s tcp flags & (syn|rst) == syn tcp option maxseg size > %d tcp option maxseg size set %d", p.fromTunnel(), mss, mss))
	}
	if p.opts.Guard == GuardInterface {
		add(ChainForward, fmt.Sprintf("ip daddr %s oifname != %q counter drop", peers, p.opts.TunnelInterface))
		add(ChainOutput, fmt.Sprintf("ip daddr %s oifname != %q counter drop", peers, p.opts.TunnelInterface))
		add(ChainGuard, fmt.Sprintf("ip daddr %s oifname != %q counter drop", peers, p.opts.TunnelInterface))
	} else {
		// Runs after SNAT, when the route has been re-looked-up with the final source and
		// carries the XFRM bundle if a policy matched.
		add(ChainGuard, fmt.Sprintf("ip daddr %s rt ipsec missing counter drop", peers))
	}
	// Only exposures cross the gateway: anything else from the client's subnets or to
	// them that was not translated is dropped here, so it can never leave in the clear
	// through a router that does not know it belongs in a tunnel.
	add(ChainForward, fmt.Sprintf("ip saddr %s ct status & dnat == 0 counter drop", peers))
	add(ChainForward, fmt.Sprintf("ip daddr %s ct status & dnat == 0 counter drop", peers))
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

func (p *Programmer) incrementalTx(tx *knftables.Transaction, old, m *gatewayconfig.NAT) {
	oldE := map[string]elem{}
	for _, e := range elements(old) {
		oldE[e.id()] = e
	}
	newE := map[string]elem{}
	for _, e := range elements(m) {
		newE[e.id()] = e
	}
	// Deletions first: a changed element is deleted and re-added in the same transaction.
	var ids []string
	for id := range oldE {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		o := oldE[id]
		if n, ok := newE[id]; !ok || strings.Join(n.value, ",") != strings.Join(o.value, ",") {
			tx.Delete(&knftables.Element{Map: o.mapName, Key: o.key})
		}
	}
	ids = ids[:0]
	for id := range newE {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		n := newE[id]
		if o, ok := oldE[id]; !ok || strings.Join(n.value, ",") != strings.Join(o.value, ",") {
			tx.Add(n.element())
		}
	}
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
			tx.Delete(&knftables.Element{Set: SetPeerSubnets, Key: []string{s}})
		}
	}
	for _, s := range m.PeerSubnets {
		if !oldS[s] {
			tx.Add(&knftables.Element{Set: SetPeerSubnets, Key: []string{s}})
		}
	}
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
	for _, n := range []string{MapExposurePorts, MapExposureAll, MapReversePorts, MapReverseAll} {
		ex.Elements[n] = 0
	}
	for _, e := range elements(p.applied) {
		ex.Elements[e.mapName]++
	}
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
