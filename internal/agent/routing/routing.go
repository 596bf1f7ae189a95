// Package routing installs the gateway pod's source-policy routing on its dedicated port
// (NIC2), so replies and forwarded tunnel traffic leave through that port instead of the
// pod's default interface, where Neutron's anti-spoofing would drop them.
package routing

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Params describe the prelude. All addresses come from the rendered gateway config.
type Params struct {
	// Interface is the dedicated port's device (net1 in the pod).
	Interface string
	// TunnelInterface, when set (libipsec's ipsec0, a WireGuard gateway's wg0,wg1: one
	// device or several separated by commas), also routes decrypted traffic by table
	// Table: it enters on the tunnel device rather than on Interface.
	TunnelInterface string
	PortFixedIP     string
	SubnetCIDR      string
	SubnetGatewayIP string
	// PeerAddresses get `to <peer>/32 lookup Table` so IKE the gateway initiates leaves
	// through the port, not through the pod's default route.
	PeerAddresses []string
	// ServiceGatewayAddress (.1 of the service CIDR) is added as a /32 to the loopback
	// device: it is the local end of every child SA's selectors.
	ServiceGatewayAddress string
	// Table is the policy table (100); Priority the first rule priority. Rules must sort
	// after charon's table-220 rule (priority 220), or the default route of Table would
	// shadow the tunnel routes charon installs there.
	Table    int
	Priority int
}

// Defaults for Params.
const (
	DefaultTable    = 100
	DefaultPriority = 1000
)

type rule struct {
	prio int
	src  netip.Prefix
	dst  netip.Prefix
	iif  string
}

func (p *Params) rules() ([]rule, error) {
	fixed, err := netip.ParseAddr(p.PortFixedIP)
	if err != nil {
		return nil, fmt.Errorf("port fixed IP: %w", err)
	}
	rs := []rule{
		{prio: p.Priority, src: netip.PrefixFrom(fixed, 32)},
		{prio: p.Priority + 1, iif: p.Interface},
	}
	next := p.Priority + 2
	for _, name := range strings.Split(p.TunnelInterface, ",") {
		if name = strings.TrimSpace(name); name != "" {
			rs = append(rs, rule{prio: next, iif: name})
		}
	}
	next++
	peers := append([]string(nil), p.PeerAddresses...)
	sort.Strings(peers)
	for _, a := range peers {
		addr, err := netip.ParseAddr(a)
		if err != nil {
			return nil, fmt.Errorf("peer address: %w", err)
		}
		rs = append(rs, rule{prio: next, dst: netip.PrefixFrom(addr, 32)})
	}
	return rs, nil
}

func toIPNet(p netip.Prefix) *net.IPNet {
	if !p.IsValid() {
		return nil
	}
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}
}

func fromIPNet(n *net.IPNet) netip.Prefix {
	if n == nil {
		return netip.Prefix{}
	}
	a, _ := netip.AddrFromSlice(n.IP.To4())
	ones, _ := n.Mask.Size()
	if ones == 0 && a.IsUnspecified() {
		return netip.Prefix{}
	}
	return netip.PrefixFrom(a, ones)
}

// Apply converges rules, routes and the loopback address. It is idempotent: present
// entries are left alone, stale rules of Table in our priority range are removed.
func Apply(p Params) error {
	if p.Table == 0 {
		p.Table = DefaultTable
	}
	if p.Priority == 0 {
		p.Priority = DefaultPriority
	}
	link, err := netlink.LinkByName(p.Interface)
	if err != nil {
		return fmt.Errorf("port interface %s: %w", p.Interface, err)
	}
	want, err := p.rules()
	if err != nil {
		return err
	}
	existing, err := netlink.RuleListFiltered(netlink.FAMILY_V4, &netlink.Rule{Table: p.Table}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("listing rules: %w", err)
	}
	have := map[rule]bool{}
	for _, r := range existing {
		k := rule{prio: r.Priority, src: fromIPNet(r.Src), dst: fromIPNet(r.Dst), iif: r.IifName}
		have[k] = true
	}
	wanted := map[rule]bool{}
	for _, r := range want {
		wanted[r] = true
		if have[r] {
			continue
		}
		nr := netlink.NewRule()
		nr.Family = netlink.FAMILY_V4
		nr.Table = p.Table
		nr.Priority = r.prio
		nr.Src = toIPNet(r.src)
		nr.Dst = toIPNet(r.dst)
		nr.IifName = r.iif
		if err := netlink.RuleAdd(nr); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("adding rule %+v: %w", r, err)
		}
	}
	for _, r := range existing {
		k := rule{prio: r.Priority, src: fromIPNet(r.Src), dst: fromIPNet(r.Dst), iif: r.IifName}
		if k.prio >= p.Priority && k.prio < p.Priority+100 && !wanted[k] {
			rr := r
			if err := netlink.RuleDel(&rr); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("removing stale rule %+v: %w", k, err)
			}
		}
	}

	subnet, err := netip.ParsePrefix(p.SubnetCIDR)
	if err != nil {
		return fmt.Errorf("subnet CIDR: %w", err)
	}
	gw, err := netip.ParseAddr(p.SubnetGatewayIP)
	if err != nil {
		return fmt.Errorf("subnet gateway: %w", err)
	}
	// The port's address is a bare /32 (static IPAM), so the gateway is off-link until the
	// connected route exists: it must go in before the default route.
	connected := &netlink.Route{
		LinkIndex: link.Attrs().Index, Dst: toIPNet(subnet), Scope: netlink.SCOPE_LINK,
		Table: p.Table, Protocol: unix.RTPROT_STATIC,
	}
	if err := netlink.RouteReplace(connected); err != nil {
		return fmt.Errorf("connected route %s table %d: %w", subnet, p.Table, err)
	}
	def := &netlink.Route{
		LinkIndex: link.Attrs().Index, Dst: &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
		Gw: gw.AsSlice(), Table: p.Table, Protocol: unix.RTPROT_STATIC,
	}
	if err := netlink.RouteReplace(def); err != nil {
		return fmt.Errorf("default route via %s table %d: %w", gw, p.Table, err)
	}

	if p.ServiceGatewayAddress != "" {
		a, err := netip.ParseAddr(p.ServiceGatewayAddress)
		if err != nil {
			return fmt.Errorf("service gateway address: %w", err)
		}
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		addr := &netlink.Addr{IPNet: toIPNet(netip.PrefixFrom(a, 32))}
		if err := netlink.AddrReplace(lo, addr); err != nil {
			return fmt.Errorf("adding %s to lo: %w", a, err)
		}
	}
	return nil
}

// InPlace reports whether the prelude's essentials are installed: the rule sending the
// port's own address to table and a default route in table. It only reads, so a role
// without NET_ADMIN can wait on it (the loader does, before charon may initiate IKE).
func InPlace(portFixedIP string, table int) (bool, error) {
	if table == 0 {
		table = DefaultTable
	}
	fixed, err := netip.ParseAddr(portFixedIP)
	if err != nil {
		return false, fmt.Errorf("port fixed IP: %w", err)
	}
	rules, err := netlink.RuleListFiltered(netlink.FAMILY_V4, &netlink.Rule{Table: table}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return false, fmt.Errorf("listing rules: %w", err)
	}
	ruled := false
	for _, r := range rules {
		if fromIPNet(r.Src) == netip.PrefixFrom(fixed, 32) {
			ruled = true
		}
	}
	if !ruled {
		return false, nil
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return false, fmt.Errorf("listing table %d: %w", table, err)
	}
	for _, r := range routes {
		if r.Dst == nil || fromIPNet(r.Dst) == (netip.Prefix{}) {
			return r.Gw != nil, nil
		}
	}
	return false, nil
}

// HasLocalAddress reports whether addr is assigned to the loopback device (init-nat puts
// .1 of the service CIDR there: the local end of every child SA, whose routes charon
// cannot install before it exists). Read-only, like InPlace.
func HasLocalAddress(addr string) (bool, error) {
	want, err := netip.ParseAddr(addr)
	if err != nil {
		return false, fmt.Errorf("address: %w", err)
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return false, fmt.Errorf("loopback: %w", err)
	}
	addrs, err := netlink.AddrList(lo, netlink.FAMILY_V4)
	if err != nil {
		return false, fmt.Errorf("listing addresses: %w", err)
	}
	for _, a := range addrs {
		if got, ok := netip.AddrFromSlice(a.IP.To4()); ok && got == want {
			return true, nil
		}
	}
	return false, nil
}
