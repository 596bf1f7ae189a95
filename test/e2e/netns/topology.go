package netns

import "strings"

// Topology is a test's network world, declared as data rather than built command by
// command: the suites' worlds differ in their sites and addresses, not in how a veth
// pair, a bridge or a route is made, and a declaration reads as the diagram it stands
// for. Roles are namespace roles (NS); devices are named inside their namespace.
type Topology struct {
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

// Apply builds t in a fixed order, each kind before what may depend on it: namespaces,
// bridges, links (enslaved to their bridge), addresses, routes, tables. The namespaces
// are deleted when the test ends; any step that fails fails the test.
func (e *Env) Apply(t Topology) {
	e.T.Helper()
	e.AddNS(t.Namespaces...)
	for _, b := range t.Bridges {
		e.Must(e.NS(b.Role), "ip", "link", "add", b.Name, "type", "bridge")
		e.Must(e.NS(b.Role), "ip", "link", "set", b.Name, "up")
	}
	for _, l := range t.Links {
		e.Link(l.A, l.ADev, l.B, l.BDev)
		if l.Bridge != "" {
			e.Must(e.NS(l.A), "ip", "link", "set", l.ADev, "master", l.Bridge)
		}
	}
	for _, a := range t.Addrs {
		e.Addr(a.Role, a.Dev, a.CIDR)
	}
	for _, r := range t.Routes {
		e.Must(e.NS(r.Role), "ip", "route", "add", r.Dst, "via", r.Via)
	}
	for _, tb := range t.Tables {
		e.NFT(tb.Role, tb.Rules)
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
