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
	DefaultInterface = "wg0,wg1"
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
	// Interface names the devices of the two key slots, comma-separated ("wg0,wg1", the
	// default); the config says which slot serves which key (gatewayconfig.
	// WireGuardInterfaceOf). One name X stands for "X,X1". Tests running several gateways
	// in one mount namespace give each its own names: wireguard-go's control sockets are
	// named after the device.
	Interface string
	// KeyFile holds the gateway's current private key (the mounted key Secret);
	// PreviousKeyFile, during a key rotation's overlap, the previous one (absent
	// otherwise). Both are re-read every sync, so a rotation is followed when the kubelet
	// refreshes the volumes; the config says which public key each device serves, and a
	// device whose key is not mounted yet waits for it.
	KeyFile         string
	PreviousKeyFile string
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

// Runner keeps the interfaces converged: the current key's, and during a key rotation's
// overlap the previous key's, each on its key slot's device and port.
type Runner struct {
	opts   Options
	client *wgctrl.Client
	// names are the key slots' device names.
	names [2]string

	cfg  *gatewayconfig.Config
	devs map[string]*wgDevice
	// learned is where each peer's packets last came from; a recreated interface starts
	// with it, so the gateway can reach a roaming peer again without waiting for it.
	learned map[wgtypes.Key]*net.UDPAddr
	// warned holds the complaints of the last sync, warnings this one's: a complaint is
	// logged when it appears, not again every sync while it lasts.
	warned, warnings map[string]bool
}

// wgDevice is one WireGuard interface the runner created.
type wgDevice struct {
	name    string
	user    *userspace
	impl    string
	applied time.Time
	// lastEndpoint is the configured endpoint last sent per peer.
	lastEndpoint map[wgtypes.Key]string
	// fresh: the interface was just created.
	fresh bool
}

func (d *wgDevice) close() {
	if d.user != nil {
		d.user.close()
		d.user = nil
	}
}

// New returns a Runner; it opens wgctrl (kernel netlink where the kernel has WireGuard,
// and the userspace UAPI sockets).
func New(opts Options) (*Runner, error) {
	if opts.Interface == "" {
		opts.Interface = DefaultInterface
	}
	first, second, _ := strings.Cut(opts.Interface, ",")
	if second == "" {
		second = first + "1"
	}
	names := [2]string{first, second}
	for _, n := range names {
		if n == "" || len(n) > 15 || strings.ContainsAny(n, ",/ \t\n") {
			return nil, fmt.Errorf("interface name %q is not a valid device name", n)
		}
	}
	if names[0] == names[1] {
		return nil, fmt.Errorf("the two key slots need two device names, not %q twice", names[0])
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
	return &Runner{opts: opts, client: c, names: names, devs: map[string]*wgDevice{}, learned: map[wgtypes.Key]*net.UDPAddr{}}, nil
}

// Run syncs on every config snapshot and every Interval until ctx ends. The interface
// stays when it returns (a kernel device keeps forwarding; a userspace one ends with the
// process, and then the guard drops what would have gone through it).
func (r *Runner) Run(ctx context.Context, snaps <-chan source.Snapshot) error {
	defer r.client.Close()
	tick := time.NewTicker(r.opts.Interval)
	defer tick.Stop()
	// During a key rotation's overlap a client that switches keys is answered through the
	// old key's device until a sync moves its routes: sync more often then.
	overlap := time.NewTicker(OverlapInterval)
	defer overlap.Stop()
	for {
		select {
		case <-ctx.Done():
			for _, d := range r.devs {
				d.close()
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
		case <-overlap.C:
			if len(r.devs) > 1 {
				r.sync()
			}
		}
	}
}

// OverlapInterval is how often the runner syncs while two keys are served: a client
// that switched to the new key waits at most this long for its answers to leave through
// the new key's device.
const OverlapInterval = 200 * time.Millisecond

func (r *Runner) warn(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if r.warnings == nil {
		r.warnings = map[string]bool{}
	}
	r.warnings[msg] = true
	if !r.warned[msg] {
		r.opts.Logf("%s", msg)
	}
}

// readKey reads a private key file. Errors never quote its content.
func readKey(path string) (wgtypes.Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("reading the private key file %s: %w", path, err)
	}
	k, err := wgtypes.ParseKey(strings.TrimSpace(string(b)))
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("the private key file %s holds no WireGuard key", path)
	}
	return k, nil
}

// readKeys returns the mounted private keys by their public keys, and the current
// file's key. The current file must hold a key; the previous one is there only during
// an overlap.
func (r *Runner) readKeys() (map[string]wgtypes.Key, wgtypes.Key, error) {
	cur, err := readKey(r.opts.KeyFile)
	if err != nil {
		return nil, cur, err
	}
	keys := map[string]wgtypes.Key{cur.PublicKey().String(): cur}
	if r.opts.PreviousKeyFile != "" {
		if _, err := os.Stat(r.opts.PreviousKeyFile); err == nil {
			// A previous key that cannot be read costs only its own device: the current
			// key is served regardless.
			if prev, err := readKey(r.opts.PreviousKeyFile); err != nil {
				r.warn("%v", err)
			} else {
				keys[prev.PublicKey().String()] = prev
			}
		}
	}
	return keys, cur, nil
}

// served is a key the config asks a device to serve.
type served struct {
	iface   string
	pub     string
	port    int32
	current bool
}

// servedKeys are the config's keys, the current one first, each on its key slot's
// device.
func servedKeys(wg *gatewayconfig.WireGuard, names [2]string) []served {
	device := func(slotIface string) string {
		if slotIface == gatewayconfig.WireGuardInterfaceOf(1) {
			return names[1]
		}
		return names[0]
	}
	out := []served{{iface: device(wg.CurrentInterface()), pub: wg.PublicKey, port: wg.ListenPort, current: true}}
	if p := wg.Previous; p != nil {
		out = append(out, served{iface: device(p.Interface), pub: p.PublicKey, port: p.ListenPort})
	}
	return out
}

// sync converges device, peers and routes, then records the state.
func (r *Runner) sync() {
	if r.cfg == nil {
		return
	}
	r.warnings = map[string]bool{}
	if err := r.syncOnce(); err != nil {
		r.warn("sync: %v", err)
	}
	r.warned = r.warnings
}

func (r *Runner) syncOnce() error {
	keys, mounted, err := r.readKeys()
	if err != nil {
		return err
	}
	wants := servedKeys(r.cfg.WireGuard, r.names)
	// A device serves the key the config names for it, once the kubelet has mounted it;
	// until then (a rotation's new key) the device waits, and the other keeps serving.
	// When no served key is mounted at all (the key Secret was replaced), the current
	// device takes the mounted key: a gateway with a key beats one with none.
	var waiting []string
	have := 0
	for _, w := range wants {
		if _, ok := keys[w.pub]; ok {
			have++
		}
	}
	if err := r.ensureRules(); err != nil {
		return err
	}
	routed, err := r.portRouted()
	if err != nil {
		return err
	}
	var active []*activeDevice
	for _, w := range wants {
		key, ok := keys[w.pub]
		if !ok && w.current && have == 0 {
			r.warn("the mounted private key belongs to %s, the operator publishes %s: the kubelet has not refreshed the key Secret yet; using the mounted key", mounted.PublicKey(), w.pub)
			key, ok = mounted, true
		}
		if !ok {
			waiting = append(waiting, fmt.Sprintf("%s (key %s)", w.iface, w.pub))
			continue
		}
		a, err := r.syncDevice(w, key, routed)
		if err != nil {
			return err
		}
		active = append(active, a)
	}
	for _, name := range r.names {
		if !serves(active, name) {
			r.removeDevice(name)
		}
	}
	if len(waiting) > 0 {
		r.warn("waiting for the kubelet to mount the private key of %s", strings.Join(waiting, ", "))
	}
	if len(active) == 0 {
		return errors.New("no served key is mounted")
	}
	if err := r.routes(active); err != nil {
		return err
	}
	return r.writeState(active)
}

// activeDevice is a device configured in this sync, as last read.
type activeDevice struct {
	*wgDevice
	link    netlink.Link
	dev     *wgtypes.Device
	want    Desired
	current bool
}

func serves(active []*activeDevice, name string) bool {
	for _, a := range active {
		if a.name == name {
			return true
		}
	}
	return false
}

// syncDevice converges one device to serve key on w's port for every peer.
func (r *Runner) syncDevice(w served, key wgtypes.Key, routed bool) (*activeDevice, error) {
	want, err := FromConfig(r.cfg, key)
	if err != nil {
		return nil, err
	}
	want.ListenPort = int(w.port)
	want.FirewallMark = r.opts.FirewallMark
	d, link, err := r.ensureLink(w.iface)
	if err != nil {
		return nil, err
	}
	if d.fresh {
		for i, p := range want.Peers {
			if p.Endpoint == nil && r.learned[p.PublicKey] != nil {
				want.Peers[i].Endpoint = r.learned[p.PublicKey]
			}
		}
	}
	dev, err := r.client.Device(d.name)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", d.name, err)
	}
	if d.applied.IsZero() && dev.PrivateKey == key {
		// A restarted agent on a device it configured before: when its key was applied
		// is in the last state file.
		d.applied = r.previousApplication(d.name, dev.PublicKey)
	}
	// The reach-out's first initiation goes only once the port's table routes it: sent
	// earlier it is unreachable (ensureRules), and WireGuard tries again only after
	// REKEY_TIMEOUT (5 s), which a restarted pod paid when its wireguard container came up
	// before init-nat had routed the port. The next sync (Interval) reaches out.
	if routed {
		want = ReachOut(dev, want)
	}
	if changes, ok := Changes(dev, want, d.lastEndpoint); ok {
		// The key's application is stamped before the device is configured: a peer may
		// complete a handshake with the new key while ConfigureDevice is still returning,
		// and a stamp taken afterwards would hide that handshake until the next one, two
		// minutes later (seen: a restored roaming peer handshook 0.4 ms before the stamp).
		configuring := time.Now()
		if err := r.client.ConfigureDevice(d.name, changes); err != nil {
			return nil, fmt.Errorf("configuring %s: %w", d.name, err)
		}
		if changes.PrivateKey != nil {
			d.applied = configuring
		}
		for _, p := range changes.Peers {
			if p.Remove {
				delete(d.lastEndpoint, p.PublicKey)
			} else if p.Endpoint != nil {
				d.lastEndpoint[p.PublicKey] = p.Endpoint.String()
			}
		}
		r.opts.Logf("%s configured: %s", d.name, describe(changes, want))
		if dev, err = r.client.Device(d.name); err != nil {
			return nil, fmt.Errorf("reading %s: %w", d.name, err)
		}
	}
	d.fresh = false
	for _, p := range dev.Peers {
		if p.Endpoint != nil {
			r.learned[p.PublicKey] = p.Endpoint
		}
	}
	return &activeDevice{wgDevice: d, link: link, dev: dev, want: want, current: w.current}, nil
}

// removeDevice deletes a key slot's device no key is served on any more (a retired
// key's, or one a restarted agent's kernel left behind): its peers' sessions end with it.
func (r *Runner) removeDevice(name string) {
	if d := r.devs[name]; d != nil {
		d.close()
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		delete(r.devs, name)
		return
	}
	if err := netlink.LinkDel(l); err != nil {
		r.warn("removing %s: %v", name, err)
		return
	}
	delete(r.devs, name)
	r.opts.Logf("removed %s: no key is served on it any more", name)
}

// ensureLink returns the named interface, creating it when missing (or when wireguard-go
// shut its device down because the TUN device was deleted), and keeps it up.
func (r *Runner) ensureLink(name string) (*wgDevice, netlink.Link, error) {
	d := r.devs[name]
	if d == nil {
		d = &wgDevice{name: name, lastEndpoint: map[wgtypes.Key]string{}}
		r.devs[name] = d
	}
	link, err := netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		link = nil
	case err != nil:
		return nil, nil, err
	}
	if d.user != nil && (link == nil || d.user.closed()) {
		d.close()
		if link != nil {
			_ = netlink.LinkDel(link)
			link = nil
		}
	}
	if link == nil {
		user, impl, err := createLink(name, r.opts.MTU, r.opts.Mode, r.opts.Logf)
		if err != nil {
			return nil, nil, err
		}
		d.user, d.impl, d.fresh = user, impl, true
		d.lastEndpoint = map[wgtypes.Key]string{}
		d.applied = time.Now()
		r.opts.Logf("created %s (%s WireGuard)", name, impl)
		if link, err = netlink.LinkByName(name); err != nil {
			return nil, nil, err
		}
	} else if d.impl == "" {
		d.impl = ImplKernel
		if d.user != nil {
			d.impl = ImplUserspace
		}
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		if err := netlink.LinkSetUp(link); err != nil {
			return nil, nil, fmt.Errorf("setting %s up: %w", name, err)
		}
	}
	return d, link, nil
}

// routes routes every peer's allowed IPs into a device in the table, removes the
// table's other routes, and keeps the rule that looks the table up. A peer goes through
// the device it completed its latest handshake with: during a key rotation's overlap a
// client that switched to the new key is answered through the new key's device, one
// that has not through the previous key's; with no handshake yet, the current key's.
func (r *Runner) routes(active []*activeDevice) error {
	table := r.opts.Table
	via := routeDevices(active)
	type dst struct {
		pfx  netip.Prefix
		link int
	}
	wanted := map[dst]bool{}
	for _, p := range active[0].want.Peers {
		a := via[p.PublicKey]
		for _, pfx := range p.AllowedIPs {
			wanted[dst{pfx, a.link.Attrs().Index}] = true
			n := ipNets([]netip.Prefix{pfx})[0]
			rt := &netlink.Route{LinkIndex: a.link.Attrs().Index, Dst: &n, Table: table, Scope: netlink.SCOPE_LINK}
			if err := netlink.RouteReplace(rt); err != nil {
				return fmt.Errorf("route %s dev %s table %d: %w", pfx, a.name, table, err)
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
		if !wanted[dst{netip.PrefixFrom(a.Unmap(), bits), rt.LinkIndex}] {
			rt := rt
			if err := netlink.RouteDel(&rt); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("removing route %s: %w", rt.Dst, err)
			}
		}
	}
	return nil
}

// routeDevices picks each peer's device: the one with its latest handshake, the
// current key's when it has none on any.
func routeDevices(active []*activeDevice) map[wgtypes.Key]*activeDevice {
	first := active[0]
	for _, a := range active {
		if a.current {
			first = a
		}
	}
	out := map[wgtypes.Key]*activeDevice{}
	latest := map[wgtypes.Key]time.Time{}
	for _, p := range first.want.Peers {
		out[p.PublicKey] = first
	}
	for _, a := range active {
		for _, p := range a.dev.Peers {
			if _, ok := out[p.PublicKey]; !ok || p.LastHandshakeTime.IsZero() {
				continue
			}
			if p.LastHandshakeTime.After(latest[p.PublicKey]) {
				latest[p.PublicKey], out[p.PublicKey] = p.LastHandshakeTime, a
			}
		}
	}
	return out
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

// writeState records the devices for the status agent and the exporter: the current
// key's (or, while its key is not mounted yet, the previous key's) at the top, the
// previous key's beside it during an overlap. A handshake older than a device's key
// application is not reported: it was made with a key the device no longer has.
func (r *Runner) writeState(active []*activeDevice) error {
	if r.opts.StateFile == "" {
		return nil
	}
	var top, prev *activeDevice
	for _, a := range active {
		if a.current {
			top = a
		}
	}
	for _, a := range active {
		if top == nil {
			top = a
		} else if a != top {
			prev = a
		}
	}
	st := wgstate.State{UpdatedAt: time.Now().UTC(), Implementation: top.impl, Device: deviceState(top)}
	if prev != nil {
		p := deviceState(prev)
		st.Previous = &p
	}
	return wgstate.Write(r.opts.StateFile, st)
}

func deviceState(a *activeDevice) wgstate.Device {
	names := map[wgtypes.Key]string{}
	for _, p := range a.want.Peers {
		names[p.PublicKey] = p.Name
	}
	ds := wgstate.Device{
		Interface: a.name, PublicKey: a.dev.PublicKey.String(), KeyAppliedAt: a.applied.UTC(),
		ListenPort: a.dev.ListenPort, Peers: []wgstate.Peer{},
	}
	for _, p := range a.dev.Peers {
		name, ok := names[p.PublicKey]
		if !ok {
			continue
		}
		sp := wgstate.Peer{Name: name, PublicKey: p.PublicKey.String(), ReceiveBytes: p.ReceiveBytes, TransmitBytes: p.TransmitBytes}
		if p.Endpoint != nil {
			sp.Endpoint = p.Endpoint.String()
		}
		if !p.LastHandshakeTime.IsZero() && !p.LastHandshakeTime.Before(a.applied) {
			sp.LatestHandshake = p.LastHandshakeTime.UTC()
		}
		ds.Peers = append(ds.Peers, sp)
	}
	return ds
}

// previousApplication returns when the last state file says the key pub was applied on
// the device name, or the zero time (every handshake counts).
func (r *Runner) previousApplication(name string, pub wgtypes.Key) time.Time {
	if r.opts.StateFile == "" {
		return time.Time{}
	}
	st, _ := wgstate.Read(r.opts.StateFile, time.Now())
	for _, d := range st.Devices() {
		if d.Interface == name && d.PublicKey == pub.String() {
			return d.KeyAppliedAt
		}
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
