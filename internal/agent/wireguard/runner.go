package wireguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"bnerd.net/vpn-operator/internal/agent/routing"
	"bnerd.net/vpn-operator/internal/agent/source"
	"bnerd.net/vpn-operator/internal/agent/wgstate"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// Defaults of Options.
const (
	DefaultInterface = "wg0"
	DefaultMTU       = 1420
	// DefaultTable holds the routes of the peers' allowed IPs, looked up by a rule at
	// DefaultPriority: before the port's policy rules (routing.DefaultPriority), whose
	// default route would otherwise send forwarded traffic for the client out of NIC2.
	DefaultTable    = 51820
	DefaultPriority = 210
	// DefaultFirewallMark marks the interface's encrypted packets; a rule at
	// DefaultPriority-2 looks them up in the port's table (routing.DefaultTable), so
	// they leave through NIC2 with the port's address, to fixed and roaming peers alike,
	// and one at DefaultPriority-1 makes them unreachable when that table has no route
	// yet, so they never take the main table's default route onto the pod network.
	DefaultFirewallMark = 0xca6c
)

// Options configure the Runner.
type Options struct {
	Interface string
	// KeyFile holds the gateway's private key (the mounted key Secret); re-read every
	// sync, so a rotated key is applied when the kubelet refreshes the volume.
	KeyFile string
	// StateFile receives wgstate.State after every sync.
	StateFile string
	Mode      Mode
	MTU       int
	Table     int
	Priority  int
	// FirewallMark of the encrypted packets and PortTable, the port's policy table
	// (init-nat's, routing.DefaultTable) they are routed by.
	FirewallMark int
	PortTable    int
	// Interval between syncs (device, key, routes, state); a config change syncs at once.
	Interval time.Duration
	Logf     func(format string, args ...any)
}

// Runner keeps the interface converged.
type Runner struct {
	opts   Options
	client *wgctrl.Client

	cfg     *gatewayconfig.Config
	user    *userspace
	impl    string
	applied time.Time
	// lastEndpoint is the configured endpoint last sent per peer.
	lastEndpoint map[wgtypes.Key]string
	// learned is where each peer's packets last came from; a recreated interface starts
	// with it, so the gateway can reach a roaming peer again without waiting for it.
	learned map[wgtypes.Key]*net.UDPAddr
	// fresh: the interface was just created.
	fresh bool
	// warned suppresses repeating the same complaint every sync.
	warned string
}

// New returns a Runner; it opens wgctrl (kernel netlink where the kernel has WireGuard,
// and the userspace UAPI sockets).
func New(opts Options) (*Runner, error) {
	if opts.Interface == "" {
		opts.Interface = DefaultInterface
	}
	if len(opts.Interface) > 15 || strings.ContainsAny(opts.Interface, "/ \t\n") {
		return nil, fmt.Errorf("interface name %q is not a valid device name", opts.Interface)
	}
	if opts.Mode == "" {
		opts.Mode = ModeAuto
	}
	switch opts.Mode {
	case ModeAuto, ModeKernel, ModeUserspace:
	default:
		return nil, fmt.Errorf("mode %q must be %s, %s or %s", opts.Mode, ModeAuto, ModeKernel, ModeUserspace)
	}
	if opts.MTU == 0 {
		opts.MTU = DefaultMTU
	}
	if opts.Table == 0 {
		opts.Table = DefaultTable
	}
	if opts.Priority == 0 {
		opts.Priority = DefaultPriority
	}
	if opts.FirewallMark == 0 {
		opts.FirewallMark = DefaultFirewallMark
	}
	if opts.PortTable == 0 {
		opts.PortTable = routing.DefaultTable
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	c, err := wgctrl.New()
	if err != nil {
		return nil, fmt.Errorf("wgctrl: %w", err)
	}
	return &Runner{opts: opts, client: c, lastEndpoint: map[wgtypes.Key]string{}, learned: map[wgtypes.Key]*net.UDPAddr{}}, nil
}

// Run syncs on every config snapshot and every Interval until ctx ends. The interface
// stays when it returns (a kernel device keeps forwarding; a userspace one ends with the
// process, and then the guard drops what would have gone through it).
func (r *Runner) Run(ctx context.Context, snaps <-chan source.Snapshot) error {
	defer r.client.Close()
	tick := time.NewTicker(r.opts.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if r.user != nil {
				r.user.close()
			}
			return nil
		case s := <-snaps:
			cfg, err := gatewayconfig.Unmarshal(s.Config)
			if err == nil && (cfg.Protocol != gatewayconfig.ProtocolWireGuard || cfg.WireGuard == nil) {
				err = errors.New("not a WireGuard gateway's config")
			}
			if err != nil {
				r.opts.Logf("config rejected, keeping the current interface: %v", err)
				continue
			}
			r.cfg = cfg
			r.sync()
		case <-tick.C:
			r.sync()
		}
	}
}

func (r *Runner) warn(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if msg != r.warned {
		r.opts.Logf("%s", msg)
		r.warned = msg
	}
}

// readKey reads the private key file. Errors never quote its content.
func (r *Runner) readKey() (wgtypes.Key, error) {
	b, err := os.ReadFile(r.opts.KeyFile)
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("reading the private key file %s: %w", r.opts.KeyFile, err)
	}
	k, err := wgtypes.ParseKey(strings.TrimSpace(string(b)))
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("the private key file %s holds no WireGuard key", r.opts.KeyFile)
	}
	return k, nil
}

// sync converges device, peers and routes, then records the state.
func (r *Runner) sync() {
	if r.cfg == nil {
		return
	}
	if err := r.syncOnce(); err != nil {
		r.warn("sync: %v", err)
		return
	}
	r.warned = ""
}

func (r *Runner) syncOnce() error {
	key, err := r.readKey()
	if err != nil {
		return err
	}
	if pub := key.PublicKey().String(); pub != r.cfg.WireGuard.PublicKey {
		r.warn("the mounted private key belongs to %s, the operator publishes %s: the kubelet has not refreshed the key Secret yet; using the mounted key", pub, r.cfg.WireGuard.PublicKey)
	}
	want, err := FromConfig(r.cfg, key)
	if err != nil {
		return err
	}
	want.FirewallMark = r.opts.FirewallMark
	link, err := r.ensureLink()
	if err != nil {
		return err
	}
	if err := r.ensureRules(); err != nil {
		return err
	}
	if r.fresh {
		for i, p := range want.Peers {
			if p.Endpoint == nil && r.learned[p.PublicKey] != nil {
				want.Peers[i].Endpoint = r.learned[p.PublicKey]
			}
		}
	}
	dev, err := r.client.Device(r.opts.Interface)
	if err != nil {
		return fmt.Errorf("reading %s: %w", r.opts.Interface, err)
	}
	if r.applied.IsZero() && dev.PrivateKey == key {
		// A restarted agent on a device it configured before: when its key was applied
		// is in the last state file.
		r.applied = r.previousApplication(dev.PublicKey)
	}
	// The reach-out's first initiation goes only once the port's table routes it: sent
	// earlier it is unreachable (ensureRules), and WireGuard tries again only after
	// REKEY_TIMEOUT (5 s), which a restarted pod paid when its wireguard container came up
	// before init-nat had routed the port. The next sync (Interval) reaches out.
	if routed, err := r.portRouted(); err != nil {
		return err
	} else if routed {
		want = ReachOut(dev, want)
	}
	if changes, ok := Changes(dev, want, r.lastEndpoint); ok {
		// The key's application is stamped before the device is configured: a peer may
		// complete a handshake with the new key while ConfigureDevice is still returning,
		// and a stamp taken afterwards would hide that handshake until the next one, two
		// minutes later (seen: a restored roaming peer handshook 0.4 ms before the stamp).
		configuring := time.Now()
		if err := r.client.ConfigureDevice(r.opts.Interface, changes); err != nil {
			return fmt.Errorf("configuring %s: %w", r.opts.Interface, err)
		}
		if changes.PrivateKey != nil {
			r.applied = configuring
		}
		for _, p := range changes.Peers {
			if p.Remove {
				delete(r.lastEndpoint, p.PublicKey)
			} else if p.Endpoint != nil {
				r.lastEndpoint[p.PublicKey] = p.Endpoint.String()
			}
		}
		r.opts.Logf("%s configured: %s", r.opts.Interface, describe(changes, want))
		if dev, err = r.client.Device(r.opts.Interface); err != nil {
			return fmt.Errorf("reading %s: %w", r.opts.Interface, err)
		}
	}
	r.fresh = false
	for _, p := range dev.Peers {
		if p.Endpoint != nil {
			r.learned[p.PublicKey] = p.Endpoint
		}
	}
	if err := r.routes(link, want); err != nil {
		return err
	}
	return r.writeState(dev, want)
}

// ensureLink returns the interface, creating it when missing (or when wireguard-go shut
// its device down because the TUN device was deleted), and keeps it up.
func (r *Runner) ensureLink() (netlink.Link, error) {
	link, err := netlink.LinkByName(r.opts.Interface)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		link = nil
	case err != nil:
		return nil, err
	}
	if r.user != nil && (link == nil || r.user.closed()) {
		r.user.close()
		r.user = nil
		if link != nil {
			_ = netlink.LinkDel(link)
			link = nil
		}
	}
	if link == nil {
		user, impl, err := createLink(r.opts.Interface, r.opts.MTU, r.opts.Mode, r.opts.Logf)
		if err != nil {
			return nil, err
		}
		r.user, r.impl, r.fresh = user, impl, true
		r.lastEndpoint = map[wgtypes.Key]string{}
		r.applied = time.Now()
		r.opts.Logf("created %s (%s WireGuard)", r.opts.Interface, impl)
		if link, err = netlink.LinkByName(r.opts.Interface); err != nil {
			return nil, err
		}
	} else if r.impl == "" {
		r.impl = ImplKernel
		if r.user != nil {
			r.impl = ImplUserspace
		}
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		if err := netlink.LinkSetUp(link); err != nil {
			return nil, fmt.Errorf("setting %s up: %w", r.opts.Interface, err)
		}
	}
	return link, nil
}

// routes routes every allowed IP into the interface in the table, removes the table's
// other routes, and keeps the rule that looks the table up.
func (r *Runner) routes(link netlink.Link, want Desired) error {
	table := r.opts.Table
	wanted := map[netip.Prefix]bool{}
	for _, p := range want.Peers {
		for _, a := range p.AllowedIPs {
			wanted[a] = true
			dst := ipNets([]netip.Prefix{a})[0]
			rt := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: &dst, Table: table, Scope: netlink.SCOPE_LINK}
			if err := netlink.RouteReplace(rt); err != nil {
				return fmt.Errorf("route %s dev %s table %d: %w", a, r.opts.Interface, table, err)
			}
		}
	}
	have, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return err
	}
	for _, rt := range have {
		if rt.Dst == nil {
			continue
		}
		a, _ := netip.AddrFromSlice(rt.Dst.IP)
		bits, _ := rt.Dst.Mask.Size()
		if !wanted[netip.PrefixFrom(a.Unmap(), bits)] || rt.LinkIndex != link.Attrs().Index {
			rt := rt
			if err := netlink.RouteDel(&rt); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("removing route %s: %w", rt.Dst, err)
			}
		}
	}
	return nil
}

// portRouted reports whether the port's table (init-nat's) has a route, so the
// interface's encrypted packets can leave through NIC2.
func (r *Runner) portRouted() (bool, error) {
	rs, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: r.opts.PortTable}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return false, fmt.Errorf("reading the port's table %d: %w", r.opts.PortTable, err)
	}
	return len(rs) > 0, nil
}

// ensureRules installs the policy rules, before the device is configured: the encrypted
// packets first, out of the port by their mark, and unreachable while the port's table
// (init-nat's) has no route yet; then everything else to the peers' networks into the
// interface. Without the unreachable rule a handshake sent before init-nat's first run
// took the main table's default route: seen on the node world, a handshake initiation on
// the pod network when the wireguard container started before init-nat.
func (r *Runner) ensureRules() error {
	rules, err := netlink.RuleList(netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	for _, want := range []struct {
		prio, table, mark int
		typ               uint8
	}{
		{r.opts.Priority - 2, r.opts.PortTable, r.opts.FirewallMark, unix.RTN_UNICAST},
		{r.opts.Priority - 1, 0, r.opts.FirewallMark, unix.RTN_UNREACHABLE},
		{r.opts.Priority, r.opts.Table, 0, unix.RTN_UNICAST},
	} {
		// The listing does not carry a rule's type (netlink's RuleList leaves it
		// unset); priority, table and mark tell the three apart.
		found := false
		for _, ru := range rules {
			if ru.Table == want.table && ru.Priority == want.prio && int(ru.Mark) == want.mark {
				found = true
			}
		}
		if found {
			continue
		}
		ru := netlink.NewRule()
		ru.Table, ru.Priority, ru.Family, ru.Type = want.table, want.prio, netlink.FAMILY_V4, want.typ
		if want.mark != 0 {
			ru.Mark = uint32(want.mark)
		}
		if err := netlink.RuleAdd(ru); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("rule priority %d (table %d, type %d): %w", want.prio, want.table, want.typ, err)
		}
	}
	return nil
}

// writeState records the device for the status agent and the exporter. A handshake
// older than the current key's application is not reported: it was made with a key the
// interface no longer has.
func (r *Runner) writeState(dev *wgtypes.Device, want Desired) error {
	if r.opts.StateFile == "" {
		return nil
	}
	names := map[wgtypes.Key]string{}
	for _, p := range want.Peers {
		names[p.PublicKey] = p.Name
	}
	st := wgstate.State{
		UpdatedAt: time.Now().UTC(), Interface: r.opts.Interface, Implementation: r.impl,
		PublicKey: dev.PublicKey.String(), KeyAppliedAt: r.applied.UTC(), ListenPort: dev.ListenPort,
		Peers: []wgstate.Peer{},
	}
	for _, p := range dev.Peers {
		name, ok := names[p.PublicKey]
		if !ok {
			continue
		}
		sp := wgstate.Peer{Name: name, PublicKey: p.PublicKey.String(), ReceiveBytes: p.ReceiveBytes, TransmitBytes: p.TransmitBytes}
		if p.Endpoint != nil {
			sp.Endpoint = p.Endpoint.String()
		}
		if !p.LastHandshakeTime.IsZero() && !p.LastHandshakeTime.Before(r.applied) {
			sp.LatestHandshake = p.LastHandshakeTime.UTC()
		}
		st.Peers = append(st.Peers, sp)
	}
	return wgstate.Write(r.opts.StateFile, st)
}

// previousApplication returns when the last state file says the key pub was applied, or
// the zero time (every handshake counts).
func (r *Runner) previousApplication(pub wgtypes.Key) time.Time {
	if r.opts.StateFile == "" {
		return time.Time{}
	}
	st, _ := wgstate.Read(r.opts.StateFile, time.Now())
	if st.PublicKey == pub.String() {
		return st.KeyAppliedAt
	}
	return time.Time{}
}

// describe summarises a configuration change for the log (public keys only).
func describe(c wgtypes.Config, d Desired) string {
	names := map[wgtypes.Key]string{}
	for _, p := range d.Peers {
		names[p.PublicKey] = p.Name
	}
	var parts []string
	if c.PrivateKey != nil {
		parts = append(parts, "private key set (public "+c.PrivateKey.PublicKey().String()+")")
	}
	if c.ListenPort != nil {
		parts = append(parts, fmt.Sprintf("listen port %d", *c.ListenPort))
	}
	for _, p := range c.Peers {
		name := names[p.PublicKey]
		switch {
		case p.Remove:
			parts = append(parts, "peer "+p.PublicKey.String()+" removed")
		case p.UpdateOnly:
			parts = append(parts, "peer "+name+" updated")
		default:
			parts = append(parts, "peer "+name+" added")
		}
	}
	return strings.Join(parts, "; ")
}
