package routing

import (
	"net"
	"testing"

	"github.com/vishvananda/netlink"

	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

func TestApplyIdempotent(t *testing.T) {
	testenv.InNewNetns(t, func() {
		la := netlink.NewLinkAttrs()
		la.Name = "net1"
		// veth rather than dummy: the dummy module is not always available
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "net1-peer"}); err != nil {
			t.Error(err)
			return
		}
		l, _ := netlink.LinkByName("net1")
		_ = netlink.LinkSetUp(l)
		if pl, err := netlink.LinkByName("net1-peer"); err == nil {
			_ = netlink.LinkSetUp(pl)
		}
		lo, _ := netlink.LinkByName("lo")
		_ = netlink.LinkSetUp(lo)
		_ = netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("203.0.113.5"), Mask: net.CIDRMask(32, 32)}})
		p := Params{
			Interface: "net1", TunnelInterface: "ipsec0", PortFixedIP: "203.0.113.5", SubnetCIDR: "203.0.113.0/24",
			SubnetGatewayIP: "203.0.113.1", PeerAddresses: []string{"192.0.2.2"}, ServiceGatewayAddress: "100.64.7.1",
		}
		if ok, err := InPlace(p.PortFixedIP, 0); err != nil || ok {
			t.Errorf("InPlace before Apply: %v %v", ok, err)
		}
		for i := 0; i < 2; i++ {
			if err := Apply(p); err != nil {
				t.Errorf("apply %d: %v", i, err)
				return
			}
		}
		if ok, err := InPlace(p.PortFixedIP, 0); err != nil || !ok {
			t.Errorf("InPlace after Apply: %v %v", ok, err)
		}
		if ok, _ := InPlace("203.0.113.6", 0); ok {
			t.Error("InPlace for another address")
		}
		rules, _ := netlink.RuleListFiltered(netlink.FAMILY_V4, &netlink.Rule{Table: 100}, netlink.RT_FILTER_TABLE)
		if len(rules) != 4 {
			t.Errorf("want 4 rules in table 100 after two applies, got %d: %v", len(rules), rules)
		}
		for _, r := range rules {
			if r.Priority <= 220 {
				t.Errorf("rule %v sorts before charon's table 220", r)
			}
		}
		routes, _ := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: 100}, netlink.RT_FILTER_TABLE)
		if len(routes) != 2 {
			t.Errorf("want connected + default route in table 100, got %v", routes)
		}
		// a peer removed from the config loses its rule
		p.PeerAddresses = nil
		if err := Apply(p); err != nil {
			t.Error(err)
		}
		rules, _ = netlink.RuleListFiltered(netlink.FAMILY_V4, &netlink.Rule{Table: 100}, netlink.RT_FILTER_TABLE)
		if len(rules) != 3 {
			t.Errorf("stale peer rule kept: %v", rules)
		}
		// a reply sourced from the port's address is routed via the subnet gateway on net1
		got, err := netlink.RouteGetWithOptions(net.ParseIP("198.18.0.1"), &netlink.RouteGetOptions{SrcAddr: net.ParseIP("203.0.113.5")})
		if err != nil || len(got) != 1 || !got[0].Gw.Equal(net.ParseIP("203.0.113.1")) || got[0].LinkIndex != l.Attrs().Index {
			t.Errorf("route from the port address: %v %v", got, err)
		}
	})
}

// Forwarding is switched on per device over netlink, without writing /proc/sys (read-only
// in a container), and only for devices that exist.
func TestEnsureForwarding(t *testing.T) {
	testenv.InNewNetns(t, func() {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "net1"}, PeerName: "net1-peer"}); err != nil {
			t.Error(err)
			return
		}
		if on, err := forwardingOn("net1"); err != nil || on {
			t.Errorf("a new namespace's device forwards already (%v, %v): the test would prove nothing", on, err)
			return
		}
		if err := EnsureForwarding("net1", "ipsec0"); err != nil {
			t.Errorf("EnsureForwarding: %v", err)
			return
		}
		if on, err := forwardingOn("net1"); err != nil || !on {
			t.Errorf("net1 forwarding after EnsureForwarding: %v %v", on, err)
		}
		if on, _ := forwardingOn("net1-peer"); on {
			t.Error("a device not named was changed")
		}
	})
}

// A WireGuard gateway's two key slots are two tunnel devices: traffic decrypted on
// either is routed by the port's table, by rules of one priority.
func TestEveryTunnelDeviceGetsARule(t *testing.T) {
	p := Params{Interface: "net1", TunnelInterface: "wg0, wg1", PortFixedIP: "203.0.113.5", Priority: DefaultPriority}
	rs, err := p.rules()
	if err != nil {
		t.Fatal(err)
	}
	iifs := map[string]int{}
	for _, r := range rs {
		if r.iif != "" {
			iifs[r.iif] = r.prio
		}
	}
	if len(iifs) != 3 || iifs["net1"] != DefaultPriority+1 || iifs["wg0"] != DefaultPriority+2 || iifs["wg1"] != DefaultPriority+2 {
		t.Errorf("input-device rules %v, want net1 at %d and wg0, wg1 at %d", iifs, DefaultPriority+1, DefaultPriority+2)
	}
}
