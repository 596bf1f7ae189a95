package fabric

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"
)

// Device-owner prefixes Neutron uses.
const (
	ownerRouterInterface = "network:router_interface"
	ownerComputePrefix   = "compute:"
)

// Link is one veth pair: Name lives in the wired namespace (a router, a node, the
// upstream), Peer in the fabric namespace on Bridge.
type Link struct {
	Name    string
	Peer    string
	Bridge  string
	MAC     string
	Address string // prefix form, "10.254.0.1/24"; empty for a node's NIC stand-in
}

// Desired is the fabric the snapshot asks for. It is a pure function of the snapshot and
// the server-to-node map, so it can be compared and tested without touching the kernel.
type Desired struct {
	// Bridges by network ID: one bridge per network (the L2 segment).
	Bridges map[string]string
	Routers []RouterNS
	// VMPorts are ports Nova attached to a server that runs one of our nodes: the NIC
	// stand-in appears in that node's namespace.
	VMPorts []VMPort
	// Upstream is the namespace beyond the external networks (the internet): one leg per
	// external subnet, at the subnet's gateway address.
	Upstream []Link
	// Security is the nftables ruleset of the fabric namespace that enforces the
	// security groups of the VM ports.
	Security string
}

type RouterNS struct {
	ID, Name  string
	Namespace string
	Links     []Link
	// Gateway is the leg on the external network; nil without external_gateway_info.
	Gateway   *Link
	DefaultGW string
	// Routes are the router's extra routes (destination -> next hop).
	Routes []Route
	// FloatingIPs are added to the gateway leg as /32s so the router answers ARP for them.
	FloatingIPs []string
	NAT         string

	natPairs [][2]string
}

type VMPort struct {
	PortID, ServerID string
	Namespace        string // the node's network namespace
	Link             Link
}

// Names derived from IDs: interface names are limited to 15 characters, and every name
// starts with "bn" so nothing collides with anyone else's interfaces.
func h8(id string) string {
	s := sha256.Sum256([]byte(id))
	return hex.EncodeToString(s[:])[:8]
}

func bridgeName(networkID string) string { return "bnb" + h8(networkID) }
func fabPeer(portID string) string       { return "bnp" + h8(portID) }
func routerLink(portID string) string    { return "bnq" + h8(portID) }
func gatewayLink(routerID string) string { return "bng" + h8(routerID) }
func gatewayPeer(routerID string) string { return "bnh" + h8(routerID) }
func upstreamLink(subnetID string) string {
	return "bnu" + h8(subnetID)
}
func upstreamPeer(subnetID string) string { return "bnx" + h8(subnetID) }

// NICName is the name the NIC stand-in of a port has in its node's namespace.
func NICName(portID string) string { return "bnv" + h8(portID) }

// macFor derives a stable locally administered MAC for a leg Neutron gives none.
func macFor(id string) string {
	s := sha256.Sum256([]byte("mac:" + id))
	return fmt.Sprintf("fa:16:3e:%02x:%02x:%02x", s[0], s[1], s[2])
}

// Build computes the desired fabric. servers maps a Nova server ID to the network
// namespace of the node it backs; prefix names the fabric's namespaces.
func Build(s *Snapshot, servers map[string]string, prefix string) (*Desired, error) {
	d := &Desired{Bridges: map[string]string{}}
	subnets := map[string]Subnet{}
	for _, sn := range s.Subnets {
		if sn.IPVersion == 0 || sn.IPVersion == 4 {
			subnets[sn.ID] = sn
		}
	}
	external := map[string]bool{}
	for _, n := range s.Networks {
		d.Bridges[n.ID] = bridgeName(n.ID)
		external[n.ID] = n.External
	}
	prefixed := func(fip FixedIP) (string, error) {
		sn, ok := subnets[fip.SubnetID]
		if !ok {
			return "", fmt.Errorf("subnet %s of address %s is unknown", fip.SubnetID, fip.IPAddress)
		}
		p, err := netip.ParsePrefix(sn.CIDR)
		if err != nil {
			return "", fmt.Errorf("subnet %s: %w", sn.ID, err)
		}
		return fmt.Sprintf("%s/%d", fip.IPAddress, p.Bits()), nil
	}

	// The upstream: one leg per external IPv4 subnet with a gateway address.
	for _, n := range s.Networks {
		if !n.External {
			continue
		}
		for _, sn := range s.Subnets {
			if sn.NetworkID != n.ID || sn.GatewayIP == "" || (sn.IPVersion != 0 && sn.IPVersion != 4) {
				continue
			}
			addr, err := prefixed(FixedIP{SubnetID: sn.ID, IPAddress: sn.GatewayIP})
			if err != nil {
				return nil, err
			}
			d.Upstream = append(d.Upstream, Link{Name: upstreamLink(sn.ID), Peer: upstreamPeer(sn.ID),
				Bridge: d.Bridges[n.ID], MAC: macFor("upstream:" + sn.ID), Address: addr})
		}
	}

	routers := map[string]*RouterNS{}
	var order []string
	for _, r := range s.Routers {
		rn := &RouterNS{ID: r.ID, Name: r.Name, Namespace: prefix + "r-" + h8(r.ID)}
		if gi := r.GatewayInfo; gi != nil && gi.NetworkID != "" && len(gi.ExternalFixedIPs) > 0 {
			addr, err := prefixed(gi.ExternalFixedIPs[0])
			if err != nil {
				return nil, fmt.Errorf("router %s gateway: %w", r.Name, err)
			}
			rn.Gateway = &Link{Name: gatewayLink(r.ID), Peer: gatewayPeer(r.ID), Bridge: d.Bridges[gi.NetworkID],
				MAC: macFor("gw:" + r.ID), Address: addr}
			rn.DefaultGW = subnets[gi.ExternalFixedIPs[0].SubnetID].GatewayIP
		}
		for _, rt := range r.Routes {
			rn.Routes = append(rn.Routes, rt)
		}
		sort.Slice(rn.Routes, func(i, j int) bool { return rn.Routes[i].DestinationCIDR < rn.Routes[j].DestinationCIDR })
		routers[r.ID] = rn
		order = append(order, r.ID)
	}

	portByID := map[string]Port{}
	for _, p := range s.Ports {
		portByID[p.ID] = p
		switch {
		case p.DeviceOwner == ownerRouterInterface:
			rn := routers[p.DeviceID]
			if rn == nil || len(p.FixedIPs) == 0 {
				continue
			}
			addr, err := prefixed(p.FixedIPs[0])
			if err != nil {
				return nil, fmt.Errorf("router %s interface %s: %w", rn.Name, p.ID, err)
			}
			rn.Links = append(rn.Links, Link{Name: routerLink(p.ID), Peer: fabPeer(p.ID), Bridge: d.Bridges[p.NetworkID],
				MAC: p.MACAddress, Address: addr})
		case strings.HasPrefix(p.DeviceOwner, ownerComputePrefix) && p.DeviceID != "":
			ns, ok := servers[p.DeviceID]
			if !ok {
				continue
			}
			d.VMPorts = append(d.VMPorts, VMPort{PortID: p.ID, ServerID: p.DeviceID, Namespace: ns,
				Link: Link{Name: NICName(p.ID), Peer: fabPeer(p.ID), Bridge: d.Bridges[p.NetworkID], MAC: p.MACAddress}})
		}
	}
	sort.Slice(d.VMPorts, func(i, j int) bool { return d.VMPorts[i].PortID < d.VMPorts[j].PortID })

	// Floating IPs: 1:1 NAT on the router that holds the fixed address's subnet.
	for _, f := range s.FloatingIPs {
		if f.PortID == "" || f.FixedIP == "" {
			continue
		}
		rn := routers[f.RouterID]
		if rn == nil {
			rn = routerFor(routers, order, f.FixedIP)
		}
		if rn == nil || rn.Gateway == nil {
			continue
		}
		rn.FloatingIPs = append(rn.FloatingIPs, f.FloatingIP+"/32")
		rn.natPairs = append(rn.natPairs, [2]string{f.FloatingIP, f.FixedIP})
	}
	for _, id := range order {
		rn := routers[id]
		sort.Slice(rn.Links, func(i, j int) bool { return rn.Links[i].Name < rn.Links[j].Name })
		sort.Strings(rn.FloatingIPs)
		snat := false
		for _, r := range s.Routers {
			if r.ID == id && r.GatewayInfo != nil && (r.GatewayInfo.EnableSNAT == nil || *r.GatewayInfo.EnableSNAT) {
				snat = true
			}
		}
		rn.NAT = routerNAT(rn, snat)
		d.Routers = append(d.Routers, *rn)
	}

	sec, err := securityRules(s, d.VMPorts, portByID)
	if err != nil {
		return nil, err
	}
	d.Security = sec
	return d, nil
}

// routerFor finds the router with an interface on a subnet containing addr.
func routerFor(routers map[string]*RouterNS, order []string, addr string) *RouterNS {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return nil
	}
	for _, id := range order {
		for _, l := range routers[id].Links {
			if p, err := netip.ParsePrefix(l.Address); err == nil && p.Masked().Contains(a) {
				return routers[id]
			}
		}
	}
	return nil
}

// NATTable is the nftables table each router namespace owns.
const NATTable = "bn-router"

// routerNAT renders the router's NAT: each floating IP 1:1 to its fixed address, and
// (enable_snat) everything else leaving by the gateway leg to the router's own address.
func routerNAT(rn *RouterNS, snat bool) string {
	if rn.Gateway == nil {
		return ""
	}
	var b strings.Builder
	gwIP, _, _ := strings.Cut(rn.Gateway.Address, "/")
	pairs := append([][2]string(nil), rn.natPairs...)
	sort.Slice(pairs, func(i, j int) bool { return pairs[i][0] < pairs[j][0] })
	fmt.Fprintf(&b, "table ip %s {\n", NATTable)
	b.WriteString("  chain prerouting {\n    type nat hook prerouting priority dstnat; policy accept;\n")
	for _, p := range pairs {
		fmt.Fprintf(&b, "    ip daddr %s dnat to %s\n", p[0], p[1])
	}
	b.WriteString("  }\n  chain postrouting {\n    type nat hook postrouting priority srcnat; policy accept;\n")
	for _, p := range pairs {
		fmt.Fprintf(&b, "    oifname %q ip saddr %s snat to %s\n", rn.Gateway.Name, p[1], p[0])
	}
	if snat {
		fmt.Fprintf(&b, "    oifname %q ip saddr != %s snat to %s\n", rn.Gateway.Name, gwIP, gwIP)
	}
	b.WriteString("  }\n}\n")
	return b.String()
}

// Tables of the fabric namespace that enforce security groups.
const (
	MarkTable     = "bn-sg-mark"
	SecurityTable = "bn-sg"
)

// securityRules renders the security groups of every VM port with port security.
// Neutron's groups are stateful, and the kernel here has no bridge-level conntrack: so a
// bridge-family chain marks each frame with the VM port it leaves from (high half) and
// the one it goes to (low half), and br_netfilter's IPv4 forward hook, where conntrack
// exists, filters by mark. Egress also drops sources other than the port's fixed IPs and
// allowed address pairs (Neutron's anti-spoofing).
func securityRules(s *Snapshot, vmPorts []VMPort, ports map[string]Port) (string, error) {
	groups := map[string]SecurityGroup{}
	for _, g := range s.SecurityGroups {
		groups[g.ID] = g
	}
	// Remote-group members: every fixed IPv4 address of a port in the group.
	members := map[string][]string{}
	for _, p := range s.Ports {
		for _, g := range p.SecurityGroups {
			for _, f := range p.FixedIPs {
				if a, err := netip.ParseAddr(f.IPAddress); err == nil && a.Is4() {
					members[g] = append(members[g], f.IPAddress)
				}
			}
		}
	}
	var marks, dispatch, chains strings.Builder
	sets := map[string]bool{}
	idx := 0
	for _, vp := range vmPorts {
		p := ports[vp.PortID]
		if p.PortSecurityEnabled != nil && !*p.PortSecurityEnabled {
			continue
		}
		idx++
		if idx > 0xffff {
			return "", fmt.Errorf("more than 65535 VM ports")
		}
		fmt.Fprintf(&marks, "    oifname %q meta mark set meta mark & 0xffff0000 | 0x%x\n", vp.Link.Peer, idx)
		fmt.Fprintf(&marks, "    iifname %q meta mark set meta mark & 0x0000ffff | 0x%x\n", vp.Link.Peer, idx<<16)
		fmt.Fprintf(&dispatch, "    meta mark & 0xffff0000 == 0x%x jump from-%s\n", idx<<16, h8(p.ID))
		fmt.Fprintf(&dispatch, "    meta mark & 0x0000ffff == 0x%x jump to-%s\n", idx, h8(p.ID))

		var allowed []string
		for _, f := range p.FixedIPs {
			if a, err := netip.ParseAddr(f.IPAddress); err == nil && a.Is4() {
				allowed = append(allowed, f.IPAddress)
			}
		}
		for _, a := range p.AllowedAddressPairs {
			if pfx, err := parseAddrOrPrefix(a.IPAddress); err == nil && pfx.Addr().Is4() {
				allowed = append(allowed, pfx.String())
			}
		}
		sort.Strings(allowed)
		var in, out []string
		sgs := append([]string(nil), p.SecurityGroups...)
		sort.Strings(sgs)
		for _, gid := range sgs {
			g, ok := groups[gid]
			if !ok {
				continue
			}
			for _, r := range g.Rules {
				if r.EtherType != "" && r.EtherType != "IPv4" {
					continue
				}
				match, err := ruleMatch(r, r.Direction == "egress")
				if err != nil {
					return "", fmt.Errorf("security group %s: %w", g.Name, err)
				}
				if r.RemoteGroupID != "" {
					set := "g-" + h8(r.RemoteGroupID)
					sets[r.RemoteGroupID] = true
					peer := "saddr"
					if r.Direction == "egress" {
						peer = "daddr"
					}
					match = strings.TrimSpace(fmt.Sprintf("ip %s @%s %s", peer, set, match))
				}
				line := strings.TrimSpace(match + " return")
				if r.Direction == "egress" {
					out = append(out, line)
				} else {
					in = append(in, line)
				}
			}
		}
		sort.Strings(in)
		sort.Strings(out)
		in, out = dedup(in), dedup(out)
		fmt.Fprintf(&chains, "  chain from-%s {\n", h8(p.ID))
		if len(allowed) > 0 {
			fmt.Fprintf(&chains, "    ip saddr != { %s } counter drop\n", strings.Join(allowed, ", "))
		} else {
			chains.WriteString("    meta nfproto ipv4 counter drop\n")
		}
		chains.WriteString("    ct state established,related return\n")
		for _, l := range out {
			fmt.Fprintf(&chains, "    %s\n", l)
		}
		chains.WriteString("    counter drop\n  }\n")
		fmt.Fprintf(&chains, "  chain to-%s {\n", h8(p.ID))
		chains.WriteString("    ct state established,related return\n")
		for _, l := range in {
			fmt.Fprintf(&chains, "    %s\n", l)
		}
		chains.WriteString("    counter drop\n  }\n")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "table bridge %s {\n  chain forward {\n    type filter hook forward priority -200; policy accept;\n%s  }\n}\n", MarkTable, marks.String())
	fmt.Fprintf(&b, "table inet %s {\n", SecurityTable)
	var setIDs []string
	for id := range sets {
		setIDs = append(setIDs, id)
	}
	sort.Strings(setIDs)
	for _, id := range setIDs {
		fmt.Fprintf(&b, "  set g-%s {\n    type ipv4_addr\n", h8(id))
		if m := dedup(sortedCopy(members[id])); len(m) > 0 {
			fmt.Fprintf(&b, "    elements = { %s }\n", strings.Join(m, ", "))
		}
		b.WriteString("  }\n")
	}
	fmt.Fprintf(&b, "  chain forward {\n    type filter hook forward priority filter; policy accept;\n%s  }\n%s}\n", dispatch.String(), chains.String())
	return b.String(), nil
}

// ruleMatch renders a rule's protocol, ports and remote prefix as nftables matches (an
// empty string matches everything).
func ruleMatch(r SecurityGroupRule, egress bool) (string, error) {
	var parts []string
	if r.RemoteIPPrefix != "" {
		p, err := parseAddrOrPrefix(r.RemoteIPPrefix)
		if err != nil {
			return "", fmt.Errorf("remote prefix %q: %w", r.RemoteIPPrefix, err)
		}
		if p.Bits() > 0 {
			dir := "saddr"
			if egress {
				dir = "daddr"
			}
			parts = append(parts, fmt.Sprintf("ip %s %s", dir, p))
		}
	}
	proto := strings.ToLower(r.Protocol)
	switch proto {
	case "", "any", "0":
	case "tcp", "6", "udp", "17":
		name := map[string]string{"6": "tcp", "17": "udp"}[proto]
		if name == "" {
			name = proto
		}
		if r.PortRangeMin > 0 {
			ports := strconv.Itoa(r.PortRangeMin)
			if r.PortRangeMax > r.PortRangeMin {
				ports += "-" + strconv.Itoa(r.PortRangeMax)
			}
			parts = append(parts, fmt.Sprintf("%s dport %s", name, ports))
		} else {
			parts = append(parts, "meta l4proto "+name)
		}
	case "icmp", "1":
		parts = append(parts, "meta l4proto icmp")
		if r.PortRangeMin > 0 {
			parts = append(parts, fmt.Sprintf("icmp type %d", r.PortRangeMin))
		}
	default:
		n, err := strconv.Atoi(proto)
		if err != nil || n < 0 || n > 255 {
			return "", fmt.Errorf("protocol %q is not supported", r.Protocol)
		}
		parts = append(parts, fmt.Sprintf("meta l4proto %d", n))
	}
	return strings.Join(parts, " "), nil
}

func parseAddrOrPrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

func dedup(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// parseMAC validates a MAC before it reaches netlink.
func parseMAC(s string) (net.HardwareAddr, error) { return net.ParseMAC(s) }
