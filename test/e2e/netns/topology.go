package netns

import (
	"os/exec"
	"strings"
	"testing"
)

// Topology is a test's network world, declared as data rather than built command by
// command: the suites' worlds differ in their sites and addresses, not in how a veth
// pair, a bridge or a route is made, and a declaration reads as the diagram it stands
// for. Roles are namespace roles (NS); devices are named inside their namespace.
type Topology struct {
	// Gone are devices deleted before anything is built: a world changed mid-test
	// applies a second Topology whose Gone names what the change replaces (a veth's
	// peer goes with it).
	Gone []Device
	// Namespaces are created first, in this order (AddNS: loopback up, IPv6 off,
	// forwarding on).
	Namespaces []string
	Bridges    []Bridge
	Links      []Link
	Addrs      []Addr
	Routes     []Route
	// Tables are nftables rule sets (nft -f syntax), loaded last: a table may name any
	// device of its namespace.
	Tables []Table
}

// Bridge is a bridge device in a role's namespace, brought up when made.
type Bridge struct{ Role, Name string }

// Device is a device of a role's namespace.
type Device struct{ Role, Name string }

// Link is a veth pair between two namespaces, both ends up (ADev in A, BDev in B).
type Link struct {
	A, ADev, B, BDev string
	// Bridge, when set, is a bridge in A's namespace that ADev joins (a port of a
	// router's LAN or of the internet).
	Bridge string
}

// Addr is an address (with its prefix length) on a device of a role.
type Addr struct{ Role, Dev, CIDR string }

// Route sends Dst ("default" or a prefix) of a role via a next hop.
type Route struct{ Role, Dst, Via string }

// Table is an nftables rule set loaded in a role's namespace.
type Table struct{ Role, Rules string }

// Apply builds t in a fixed order, each kind before what may depend on it: devices
// gone, namespaces, bridges, links (enslaved to their bridge), addresses, routes,
// tables. The namespaces are deleted when the environment's test ends; any step that
// fails fails it.
func (e *Env) Apply(t Topology) {
	e.T.Helper()
	e.ApplyT(e.T, t)
}

// ApplyT is Apply failing t instead of the environment's test: a step that changes one
// site's world in its own subtest (several sites at once, each on its goroutine).
func (e *Env) ApplyT(t testing.TB, topo Topology) {
	t.Helper()
	must := func(role string, args ...string) {
		t.Helper()
		e.MustT(t, e.NS(role), args...)
	}
	for _, d := range topo.Gone {
		must(d.Role, "ip", "link", "del", d.Name)
	}
	for _, r := range topo.Namespaces {
		ns := e.NS(r)
		e.MustT(t, "", "ip", "netns", "add", ns)
		e.T.Cleanup(func() { _, _ = e.Sh("", "ip", "netns", "del", ns) })
		must(r, "ip", "link", "set", "lo", "up")
		must(r, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv4.ip_forward=1")
	}
	for _, b := range topo.Bridges {
		must(b.Role, "ip", "link", "add", b.Name, "type", "bridge")
		must(b.Role, "ip", "link", "set", b.Name, "up")
	}
	for _, l := range topo.Links {
		e.MustT(t, "", "ip", "link", "add", l.ADev, "netns", e.NS(l.A), "type", "veth", "peer", "name", l.BDev, "netns", e.NS(l.B))
		must(l.A, "ip", "link", "set", l.ADev, "up")
		must(l.B, "ip", "link", "set", l.BDev, "up")
		if l.Bridge != "" {
			must(l.A, "ip", "link", "set", l.ADev, "master", l.Bridge)
		}
	}
	for _, a := range topo.Addrs {
		must(a.Role, "ip", "addr", "add", a.CIDR, "dev", a.Dev)
	}
	for _, r := range topo.Routes {
		must(r.Role, "ip", "route", "add", r.Dst, "via", r.Via)
	}
	for _, tb := range topo.Tables {
		cmd := exec.Command("ip", "netns", "exec", e.NS(tb.Role), "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(tb.Rules)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nft in %s: %v\n%s", tb.Role, err, out)
		}
	}
}

// FloatingIPNAT is the cloud router's floating IP: 1:1 NAT to the gateway port's fixed
// IP, inbound on any device and outbound on wanDev only (what leaves towards the fabric
// keeps the port's address, as behind a cloud's router).
func FloatingIPNAT(floatingIP, fixedIP, wanDev string) string {
	return `table ip fip {
  chain pre { type nat hook prerouting priority dstnat; policy accept;
    ip daddr ` + floatingIP + ` dnat to ` + fixedIP + `
  }
  chain post { type nat hook postrouting priority srcnat; policy accept;
    oifname "` + wanDev + `" ip saddr ` + fixedIP + ` snat to ` + floatingIP + `
  }
}`
}

// SiteGuard is a client site's own fail-closed rule: nothing for dsts (the tunnel's
// remote networks) is forwarded out of its wan0 in the clear, so a capture on the
// internet side measures the gateway alone, not the site's strongSwan between SAs. With
// kernel IPsec (xfrm) the plaintext packet passes the forward hook on its way to wan0 and
// is encrypted after it, so there the rule spares what has an XFRM bundle.
func SiteGuard(xfrm bool, dsts ...string) string {
	daddr := dsts[0]
	if len(dsts) > 1 {
		daddr = "{ " + strings.Join(dsts, ", ") + " }"
	}
	verdict := "drop"
	if xfrm {
		verdict = "rt ipsec missing drop"
	}
	return `table ip site_guard {
  chain forward_guard { type filter hook forward priority filter; policy accept;
    oifname "wan0" ip daddr ` + daddr + ` ` + verdict + `
  }
}`
}
