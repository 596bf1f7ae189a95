package wireguard

import (
	"net"
	"testing"

	"github.com/vishvananda/netlink"

	"bnerd.net/vpn-operator/internal/agent/routing"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// TestEncryptedPacketsNeverTakeTheMainTable: until init-nat has put the port's default
// route into its table, the interface's marked (encrypted) packets are unreachable, not
// routed by the main table's default route (the pod network); once the port's route is
// there they take it, and only then does the runner reach out to the peers (portRouted).
// Unmarked packets keep the main table. The rules are installed once however often the
// runner syncs.
func TestEncryptedPacketsNeverTakeTheMainTable(t *testing.T) {
	testenv.InNewNetns(t, func() {
		// eth0 stands for the pod network (the main table's default route), net1 for
		// the port (init-nat's table).
		up := func(name, addr string) (netlink.Link, error) {
			la := netlink.NewLinkAttrs()
			la.Name = name
			if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: name + "-peer"}); err != nil {
				return nil, err
			}
			l, _ := netlink.LinkByName(name)
			p, _ := netlink.LinkByName(name + "-peer")
			_ = netlink.LinkSetUp(l)
			_ = netlink.LinkSetUp(p)
			ip, n, _ := net.ParseCIDR(addr)
			return l, netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: n.Mask}})
		}
		eth0, err := up("eth0", "10.77.16.9/24")
		if err != nil {
			t.Error(err)
			return
		}
		net1, err := up("net1", "10.254.0.4/24")
		if err != nil {
			t.Error(err)
			return
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: net.ParseIP("10.77.16.1")}); err != nil {
			t.Error(err)
			return
		}
		r := &Runner{opts: Options{Priority: DefaultPriority, Table: DefaultTable, PortTable: routing.DefaultTable, FirewallMark: DefaultFirewallMark}}
		for range 3 {
			if err := r.ensureRules(); err != nil {
				t.Error(err)
				return
			}
		}
		rules, err := netlink.RuleList(netlink.FAMILY_V4)
		if err != nil {
			t.Error(err)
			return
		}
		ours := 0
		for _, ru := range rules {
			if ru.Priority >= DefaultPriority-2 && ru.Priority <= DefaultPriority {
				ours++
			}
		}
		if ours != 3 {
			t.Errorf("want 3 rules at priorities %d-%d after three syncs, got %d: %v", DefaultPriority-2, DefaultPriority, ours, rules)
		}
		peer := net.ParseIP("192.0.2.8")
		via := func(mark uint32) (string, error) {
			rs, err := netlink.RouteGetWithOptions(peer, &netlink.RouteGetOptions{Mark: mark})
			if err != nil {
				return "", err
			}
			l, _ := netlink.LinkByIndex(rs[0].LinkIndex)
			return l.Attrs().Name, nil
		}
		if routed, err := r.portRouted(); err != nil || routed {
			t.Errorf("portRouted before the port's route: %v, %v; want false (no reach-out yet)", routed, err)
		}
		if dev, err := via(DefaultFirewallMark); err == nil {
			t.Errorf("an encrypted packet to a peer goes out of %s before the port's table has a route: want unreachable", dev)
		}
		if dev, err := via(0); err != nil || dev != "eth0" {
			t.Errorf("an unmarked packet: %s, %v; want the main table's eth0", dev, err)
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: net1.Attrs().Index, Gw: net.ParseIP("10.254.0.1"), Table: routing.DefaultTable}); err != nil {
			t.Error(err)
			return
		}
		if routed, err := r.portRouted(); err != nil || !routed {
			t.Errorf("portRouted with the port's route: %v, %v; want true", routed, err)
		}
		if dev, err := via(DefaultFirewallMark); err != nil || dev != "net1" {
			t.Errorf("an encrypted packet once the port's table has its route: %s, %v; want net1", dev, err)
		}
	})
}
