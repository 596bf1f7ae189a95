// Package fabric makes an OpenStack cloud's networking carry packets on this machine, the
// way Neutron's agents do on a real one. It reads the cloud's state through the OpenStack
// API (an admin credential, like an agent) and converges network namespaces to it,
// level-triggered, on every pass:
//
//   - each network is a Linux bridge in the fabric namespace;
//   - each router is a namespace with a leg per router interface (the port's MAC and
//     address), a leg on its external network, its extra routes, and nftables NAT: every
//     floating IP 1:1 to its fixed address, everything else SNAT to the router's address;
//   - a port Nova attached to a server that backs one of our nodes appears in that node's
//     network namespace as a veth end with the port's MAC (the hot-plugged NIC), wired to
//     its network; a detach removes it, wherever it is by then (inside a pod);
//   - the security groups of those ports are enforced statefully in the fabric
//     namespace (see securityRules), with Neutron's anti-spoofing;
//   - an upstream namespace ("the internet") holds each external subnet's gateway address.
//
// The simulator (internal/testinfra/openstacksim) keeps records; with this package its records
// carry traffic. Pure parts (Build and the nftables renderers) are in model.go, the kernel
// side in apply.go.
package fabric

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Config configures a Fabric.
type Config struct {
	// Prefix starts every namespace the fabric creates (default "bn-f-").
	Prefix string
	// Servers maps a Nova server ID to the network namespace of the node it backs.
	Servers map[string]string
	// Interval between passes of Run (default 200ms).
	Interval time.Duration
	// Logf receives one line per change the fabric makes (default: discarded).
	Logf func(format string, args ...any)
}

// Fabric converges the kernel to the cloud.
type Fabric struct {
	cfg    Config
	reader *Reader
	k      *kernel

	mu       sync.Mutex
	snap     *Snapshot
	last     *Desired
	lastErr  string
	passes   int
	attached map[string]time.Time
}

// New returns a Fabric reading the cloud through r.
func New(r *Reader, cfg Config) *Fabric {
	if cfg.Prefix == "" {
		cfg.Prefix = "bn-f-"
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 200 * time.Millisecond
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	return &Fabric{cfg: cfg, reader: r, attached: map[string]time.Time{},
		k: &kernel{fabNS: cfg.Prefix + "fab", inetNS: cfg.Prefix + "inet", applied: map[string]string{}}}
}

// FabricNamespace holds the bridges (one per network) and the security-group rules.
func (f *Fabric) FabricNamespace() string { return f.k.fabNS }

// UpstreamNamespace is "the internet" beyond the external networks.
func (f *Fabric) UpstreamNamespace() string { return f.k.inetNS }

// RouterNamespace is the namespace of a router.
func (f *Fabric) RouterNamespace(routerID string) string { return f.cfg.Prefix + "r-" + h8(routerID) }

// Run converges until ctx ends. Errors are logged once per distinct message and retried
// on the next pass.
func (f *Fabric) Run(ctx context.Context) {
	t := time.NewTicker(f.cfg.Interval)
	defer t.Stop()
	for {
		if err := f.Sync(ctx); err != nil && ctx.Err() == nil {
			f.mu.Lock()
			if err.Error() != f.lastErr {
				f.lastErr = err.Error()
				f.cfg.Logf("fabric: %v", err)
			}
			f.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sync reads the cloud once and converges the kernel to it.
func (f *Fabric) Sync(ctx context.Context) error {
	snap, err := f.reader.Read(ctx)
	if err != nil {
		return err
	}
	d, err := Build(snap, f.cfg.Servers, f.cfg.Prefix)
	if err != nil {
		return err
	}
	// nftables rulesets are reloaded only when they change, and also every 25th pass:
	// a table removed out of band comes back within seconds, without an nft process per
	// namespace on every pass.
	if f.passes%25 == 0 {
		f.k.applied = map[string]string{}
	}
	err = f.apply(d)
	f.mu.Lock()
	f.last = d
	f.snap = snap
	f.passes++
	if err == nil {
		f.lastErr = ""
	}
	f.mu.Unlock()
	return err
}

func (f *Fabric) apply(d *Desired) error {
	k := f.k
	if err := k.ensureNS(k.fabNS, "net.bridge.bridge-nf-call-iptables=1"); err != nil {
		return err
	}
	fab, err := handle(k.fabNS)
	if err != nil {
		return err
	}
	defer fab.Close()
	if err := k.ensureBridges(fab, d.Bridges); err != nil {
		return err
	}
	peers := map[string]bool{}
	var errs []error

	// The upstream.
	if len(d.Upstream) > 0 {
		if err := k.ensureNS(k.inetNS, "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0"); err != nil {
			return err
		}
		errs = append(errs, f.wire(fab, k.inetNS, d.Upstream, "upstream", peers))
	}

	// Routers.
	wantNS := map[string]bool{k.fabNS: true, k.inetNS: true}
	for _, r := range d.Routers {
		wantNS[r.Namespace] = true
		if err := k.ensureNS(r.Namespace, "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0",
			"net.ipv4.conf.default.rp_filter=0", "net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.default.send_redirects=0"); err != nil {
			errs = append(errs, err)
			continue
		}
		links := append([]Link(nil), r.Links...)
		if r.Gateway != nil {
			links = append(links, *r.Gateway)
		}
		if err := f.wire(fab, r.Namespace, links, "router="+r.ID, peers); err != nil {
			errs = append(errs, fmt.Errorf("router %s: %w", r.Name, err))
			continue
		}
		h, err := handle(r.Namespace)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if r.Gateway != nil {
			if err := syncExtraAddrs(h, r.Gateway.Name, r.Gateway.Address, r.FloatingIPs); err != nil {
				errs = append(errs, fmt.Errorf("router %s floating IPs: %w", r.Name, err))
			}
		}
		if err := syncRoutes(h, r.Routes, r.DefaultGW); err != nil {
			errs = append(errs, fmt.Errorf("router %s routes: %w", r.Name, err))
		}
		h.Close()
		if err := k.nft(r.Namespace, []string{"ip " + NATTable}, r.NAT); err != nil {
			errs = append(errs, fmt.Errorf("router %s NAT: %w", r.Name, err))
		}
	}

	// NIC stand-ins of attached ports.
	for _, vp := range d.VMPorts {
		peers[vp.Link.Peer] = true
		if !nsExists(vp.Namespace) {
			errs = append(errs, fmt.Errorf("port %s: node namespace %s does not exist", vp.PortID, vp.Namespace))
			continue
		}
		ns, err := netns.GetFromName(vp.Namespace)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		created, err := k.ensureLink(fab, ns, vp.Namespace, vp.Link, "port="+vp.PortID+" server="+vp.ServerID)
		if err == nil && created {
			if h, herr := netlink.NewHandleAt(ns); herr == nil {
				if l, lerr := h.LinkByName(vp.Link.Name); lerr == nil {
					_ = h.LinkSetUp(l)
				}
				h.Close()
			}
			f.mu.Lock()
			f.attached[vp.PortID] = time.Now()
			f.mu.Unlock()
			f.cfg.Logf("fabric: port %s (MAC %s) plugged into %s as %s", vp.PortID, vp.Link.MAC, vp.Namespace, vp.Link.Name)
		}
		ns.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("port %s: %w", vp.PortID, err))
		}
	}

	// Whatever we made that nothing asks for any more.
	links, err := fab.LinkList()
	if err != nil {
		return err
	}
	for _, l := range links {
		name := l.Attrs().Name
		if len(name) > 3 && strings.Contains("bnp bnh bnx", name[:3]) && !peers[name] {
			if err := fab.LinkDel(l); err != nil {
				errs = append(errs, err)
				continue
			}
			what := l.Attrs().Alias
			if strings.HasPrefix(what, "port=") {
				f.cfg.Logf("fabric: %s unplugged (%s)", name, what)
			}
		}
	}
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), f.cfg.Prefix+"r-") && !wantNS[e.Name()] {
			if err := k.deleteNS(e.Name()); err != nil {
				errs = append(errs, err)
			} else {
				f.cfg.Logf("fabric: router namespace %s removed", e.Name())
			}
		}
	}

	if err := k.nft(k.fabNS, []string{"bridge " + MarkTable, "inet " + SecurityTable}, d.Security); err != nil {
		errs = append(errs, fmt.Errorf("security groups: %w", err))
	}
	return errors.Join(errs...)
}

// wire makes every link's pair between the fabric and namespace ns and configures the
// ns side; links of ns starting with "bn" that are not asked for are removed.
func (f *Fabric) wire(fab *netlink.Handle, ns string, links []Link, alias string, peers map[string]bool) error {
	target, err := netns.GetFromName(ns)
	if err != nil {
		return err
	}
	defer target.Close()
	h, err := netlink.NewHandleAt(target)
	if err != nil {
		return err
	}
	defer h.Close()
	want := map[string]bool{}
	var errs []error
	for _, l := range links {
		peers[l.Peer] = true
		want[l.Name] = true
		if _, err := f.k.ensureLink(fab, target, ns, l, alias); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := configure(h, l); err != nil {
			errs = append(errs, err)
		}
	}
	have, err := h.LinkList()
	if err != nil {
		return err
	}
	for _, l := range have {
		n := l.Attrs().Name
		if (strings.HasPrefix(n, "bnq") || strings.HasPrefix(n, "bng") || strings.HasPrefix(n, "bnu")) && !want[n] {
			errs = append(errs, h.LinkDel(l))
		}
	}
	return errors.Join(errs...)
}

// Bridge returns the bridge (in FabricNamespace) of a network, by name or ID, as of the
// last pass.
func (f *Fabric) Bridge(network string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.snap == nil {
		return "", false
	}
	for _, n := range f.snap.Networks {
		if n.ID == network || n.Name == network {
			return bridgeName(n.ID), true
		}
	}
	return "", false
}

// Desired returns the last desired state computed (nil before the first pass).
func (f *Fabric) Desired() *Desired {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// PlugHost connects namespace ns to a network's segment as a plain host (not a Neutron
// port: no security group applies): ifName with addr (prefix form) and a default route
// via the network's subnet gateway. The network is found by name or ID; it must have been
// seen by a pass.
func (f *Fabric) PlugHost(network, ns, ifName, addr string) error {
	f.mu.Lock()
	d := f.last
	f.mu.Unlock()
	if d == nil {
		return errors.New("fabric: no pass yet")
	}
	snap, err := f.reader.Read(context.Background())
	if err != nil {
		return err
	}
	var bridge, gw string
	for _, n := range snap.Networks {
		if n.ID == network || n.Name == network {
			bridge = bridgeName(n.ID)
			for _, sn := range snap.Subnets {
				if sn.NetworkID == n.ID && sn.GatewayIP != "" {
					gw = sn.GatewayIP
				}
			}
		}
	}
	if bridge == "" {
		return fmt.Errorf("fabric: network %q not found", network)
	}
	return f.plug(ns, Link{Name: ifName, Peer: "bnw" + h8(ns+"/"+ifName), Bridge: bridge, MAC: macFor(ns + "/" + ifName), Address: addr}, gw)
}

// PlugUpstream connects namespace ns to the upstream namespace over a point-to-point
// segment: ifName gets hostAddr, the upstream side upstreamAddr (both prefix form), and
// ns routes everything via the upstream.
func (f *Fabric) PlugUpstream(ns, ifName, hostAddr, upstreamAddr string) error {
	k := f.k
	if err := k.ensureNS(k.inetNS, "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0"); err != nil {
		return err
	}
	up, err := handle(k.inetNS)
	if err != nil {
		return err
	}
	defer up.Close()
	target, err := netns.GetFromName(ns)
	if err != nil {
		return err
	}
	defer target.Close()
	upName := "bny" + h8(ns+"/"+ifName)
	if _, err := up.LinkByName(upName); err != nil {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: upName}, PeerName: ifName, PeerNamespace: netlink.NsFd(int(target))}
		if err := up.LinkAdd(veth); err != nil {
			return fmt.Errorf("upstream link for %s: %w", ns, err)
		}
	}
	if err := configure(up, Link{Name: upName, Address: upstreamAddr}); err != nil {
		return err
	}
	h, err := netlink.NewHandleAt(target)
	if err != nil {
		return err
	}
	defer h.Close()
	if err := configure(h, Link{Name: ifName, Address: hostAddr}); err != nil {
		return err
	}
	gw, _, _ := strings.Cut(upstreamAddr, "/")
	return defaultRoute(h, gw)
}

func (f *Fabric) plug(ns string, l Link, gw string) error {
	fab, err := handle(f.k.fabNS)
	if err != nil {
		return err
	}
	defer fab.Close()
	target, err := netns.GetFromName(ns)
	if err != nil {
		return err
	}
	defer target.Close()
	if _, err := f.k.ensureLink(fab, target, ns, l, "host="+ns); err != nil {
		return err
	}
	h, err := netlink.NewHandleAt(target)
	if err != nil {
		return err
	}
	defer h.Close()
	if err := configure(h, l); err != nil {
		return err
	}
	if gw == "" {
		return nil
	}
	return defaultRoute(h, gw)
}

// AttachedAt reports when the fabric plugged a port's NIC stand-in (zero if it did not).
func (f *Fabric) AttachedAt(portID string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attached[portID]
}

// Close removes every namespace the fabric made (bridges, routers, upstream); the NIC
// stand-ins die with their fabric ends, wherever the node ends are.
func (f *Fabric) Close() error {
	var errs []error
	entries, _ := os.ReadDir(netnsDir)
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), f.cfg.Prefix) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, n := range names {
		errs = append(errs, f.k.deleteNS(n))
	}
	return errors.Join(errs...)
}
