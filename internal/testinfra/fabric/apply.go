package fabric

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// routeProto marks the routes the fabric installs (extra routes), so stale ones are
// recognised and removed and routes of anyone else never are.
const routeProto = netlink.RouteProtocol(0x62) // "b"

const netnsDir = "/var/run/netns"

// kernel programs Desired into network namespaces. Only this file touches the kernel.
type kernel struct {
	fabNS  string
	inetNS string
	// applied remembers nftables texts last loaded per namespace, so an unchanged ruleset
	// is not reloaded on every pass.
	applied map[string]string
}

func (k *kernel) run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func nsExists(name string) bool {
	_, err := os.Stat(filepath.Join(netnsDir, name))
	return err == nil
}

// ensureNS creates a namespace with loopback up and sysctls set, once.
func (k *kernel) ensureNS(name string, sysctls ...string) error {
	if nsExists(name) {
		return nil
	}
	if err := k.run("ip", "netns", "add", name); err != nil {
		return err
	}
	args := append([]string{"ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"}, sysctls...)
	if err := k.run(args...); err != nil {
		return err
	}
	return k.run("ip", "-n", name, "link", "set", "lo", "up")
}

func (k *kernel) deleteNS(name string) error {
	if !nsExists(name) {
		return nil
	}
	return k.run("ip", "netns", "del", name)
}

// handle opens a netlink handle in namespace name; the caller closes it. The namespace's
// own descriptor is closed here: the handle's sockets keep the namespace, and every
// caller dropped it (the fabric's applies leaked one per call, about 20,000 over a
// product e2e run, until fork failed with "too many open files").
func handle(name string) (*netlink.Handle, error) {
	ns, err := netns.GetFromName(name)
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %w", name, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("netlink in %s: %w", name, err)
	}
	return h, nil
}

// nft loads text into namespace ns as one transaction that replaces the named tables.
func (k *kernel) nft(ns string, tables []string, text string) error {
	key := ns + "\x00" + strings.Join(tables, ",")
	if k.applied[key] == text {
		return nil
	}
	var b strings.Builder
	for _, t := range tables {
		fmt.Fprintf(&b, "table %s\ndelete table %s\n", t, t)
	}
	b.WriteString(text)
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft in %s: %w: %s", ns, err, strings.TrimSpace(string(out)))
	}
	k.applied[key] = text
	return nil
}

// ensureBridges makes one bridge per network in the fabric namespace and removes ours
// that no network asks for any more.
func (k *kernel) ensureBridges(h *netlink.Handle, bridges map[string]string) error {
	want := map[string]bool{}
	for _, name := range bridges {
		want[name] = true
		l, err := h.LinkByName(name)
		if err != nil {
			br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}
			if err := h.LinkAdd(br); err != nil {
				return fmt.Errorf("bridge %s: %w", name, err)
			}
			if l, err = h.LinkByName(name); err != nil {
				return err
			}
		}
		if l.Attrs().OperState != netlink.OperUp && l.Attrs().Flags&net.FlagUp == 0 {
			if err := h.LinkSetUp(l); err != nil {
				return err
			}
		}
	}
	links, err := h.LinkList()
	if err != nil {
		return err
	}
	for _, l := range links {
		if _, ok := l.(*netlink.Bridge); ok && strings.HasPrefix(l.Attrs().Name, "bnb") && !want[l.Attrs().Name] {
			if err := h.LinkDel(l); err != nil {
				return err
			}
		}
	}
	return nil
}

// ensureLink makes the veth pair of l: Peer on its bridge in the fabric namespace, Name
// (with l.MAC) in the namespace target. alias tags the fabric end; a fabric end whose
// alias differs is replaced (a port that moved to another server). It reports whether it
// created the pair.
func (k *kernel) ensureLink(fab *netlink.Handle, target netns.NsHandle, targetName string, l Link, alias string) (bool, error) {
	if p, err := fab.LinkByName(l.Peer); err == nil {
		if p.Attrs().Alias == alias {
			return false, k.enslave(fab, p, l.Bridge)
		}
		if err := fab.LinkDel(p); err != nil {
			return false, fmt.Errorf("replacing %s: %w", l.Peer, err)
		}
	}
	// A leftover in the target (its fabric end is gone) would block the name.
	if th, err := netlink.NewHandleAt(target); err == nil {
		if old, err := th.LinkByName(l.Name); err == nil {
			_ = th.LinkDel(old)
		}
		th.Close()
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: l.Peer}, PeerName: l.Name, PeerNamespace: netlink.NsFd(int(target))}
	if l.MAC != "" {
		mac, err := parseMAC(l.MAC)
		if err != nil {
			return false, fmt.Errorf("link %s: MAC %q: %w", l.Name, l.MAC, err)
		}
		veth.PeerHardwareAddr = mac
	}
	if err := fab.LinkAdd(veth); err != nil {
		return false, fmt.Errorf("veth %s/%s (%s): %w", l.Peer, l.Name, targetName, err)
	}
	p, err := fab.LinkByName(l.Peer)
	if err != nil {
		return false, err
	}
	if err := fab.LinkSetAlias(p, alias); err != nil {
		return false, err
	}
	return true, k.enslave(fab, p, l.Bridge)
}

func (k *kernel) enslave(fab *netlink.Handle, p netlink.Link, bridge string) error {
	br, err := fab.LinkByName(bridge)
	if err != nil {
		return fmt.Errorf("bridge %s: %w", bridge, err)
	}
	if p.Attrs().MasterIndex != br.Attrs().Index {
		if err := fab.LinkSetMasterByIndex(p, br.Attrs().Index); err != nil {
			return err
		}
	}
	if p.Attrs().Flags&net.FlagUp == 0 {
		return fab.LinkSetUp(p)
	}
	return nil
}

// configure sets the address of Name in its namespace and brings it up.
func configure(h *netlink.Handle, l Link) error {
	link, err := h.LinkByName(l.Name)
	if err != nil {
		return fmt.Errorf("%s: %w", l.Name, err)
	}
	if l.Address != "" {
		a, err := netlink.ParseAddr(l.Address)
		if err != nil {
			return err
		}
		if err := h.AddrReplace(link, a); err != nil {
			return fmt.Errorf("address %s on %s: %w", l.Address, l.Name, err)
		}
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		return h.LinkSetUp(link)
	}
	return nil
}

// syncAddrs makes the /32s on link exactly want (keeping its primary address).
func syncExtraAddrs(h *netlink.Handle, name, primary string, want []string) error {
	link, err := h.LinkByName(name)
	if err != nil {
		return err
	}
	have, err := h.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	wanted := map[string]bool{}
	for _, w := range want {
		wanted[w] = true
	}
	present := map[string]bool{}
	for _, a := range have {
		s := a.IPNet.String()
		present[s] = true
		if s != primary && !wanted[s] {
			if err := h.AddrDel(link, &a); err != nil {
				return err
			}
		}
	}
	for _, w := range want {
		if present[w] {
			continue
		}
		a, err := netlink.ParseAddr(w)
		if err != nil {
			return err
		}
		if err := h.AddrAdd(link, a); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("address %s on %s: %w", w, name, err)
		}
	}
	return nil
}

// syncRoutes makes the router's extra routes (and its default route) exactly those asked
// for; only routes carrying the fabric's protocol mark are ever removed.
func syncRoutes(h *netlink.Handle, routes []Route, defaultGW string) error {
	type key struct{ dst, via string }
	want := map[key]bool{}
	for _, r := range routes {
		want[key{r.DestinationCIDR, r.NextHop}] = true
	}
	if defaultGW != "" {
		want[key{"0.0.0.0/0", defaultGW}] = true
	}
	have, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: routeProto}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return err
	}
	for _, r := range have {
		dst := "0.0.0.0/0"
		if r.Dst != nil {
			dst = r.Dst.String()
		}
		if !want[key{dst, r.Gw.String()}] {
			rr := r
			if err := h.RouteDel(&rr); err != nil && !errors.Is(err, unix.ESRCH) {
				return err
			}
		}
	}
	keys := make([]key, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].dst < keys[j].dst })
	var errs []error
	for _, k := range keys {
		_, dst, err := net.ParseCIDR(k.dst)
		if err != nil {
			errs = append(errs, fmt.Errorf("route %s: %w", k.dst, err))
			continue
		}
		gw := net.ParseIP(k.via)
		if gw == nil {
			errs = append(errs, fmt.Errorf("route %s: next hop %q", k.dst, k.via))
			continue
		}
		// A next hop the router has no leg for cannot be installed; Neutron would
		// have refused the route, so it is reported and skipped.
		if err := h.RouteReplace(&netlink.Route{Dst: dst, Gw: gw, Protocol: routeProto}); err != nil {
			errs = append(errs, fmt.Errorf("route %s via %s: %w", k.dst, k.via, err))
		}
	}
	return errors.Join(errs...)
}

// defaultRoute points the namespace's default route at gw.
func defaultRoute(h *netlink.Handle, gw string) error {
	ip := net.ParseIP(gw)
	if ip == nil {
		return fmt.Errorf("gateway %q is not an address", gw)
	}
	_, all, _ := net.ParseCIDR("0.0.0.0/0")
	if err := h.RouteReplace(&netlink.Route{Dst: all, Gw: ip}); err != nil {
		return fmt.Errorf("default route via %s: %w", gw, err)
	}
	return nil
}
