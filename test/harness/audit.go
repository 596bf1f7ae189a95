package harness

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

// This file audits the simulator's objects against what the operator's objects say should
// exist: after a soak, nothing may be leaked (an OpenStack object or route nobody owns),
// nothing duplicated, and nothing a deleted object made may remain. The caller describes
// the live objects (from their Kubernetes status, BuildAuditInput) and how to read an
// owner from tags. The invariants are the operator's, so they live here with the test
// harness; the simulator stays a plain OpenStack fake that hands out a copy of its
// objects.

// Snapshot is what existed at one moment, by ID; an audit ignores what its baseline
// already held (the seeded estate, hand-made objects), unless an owner has tagged it
// since.
type Snapshot struct {
	Ports, FloatingIPs, SecurityGroups map[string]bool
	// Routes per router ID.
	Routes map[string]map[openstacksim.Route]bool
}

// TakeSnapshot records the objects of o by ID, as the baseline of a later audit.
func TakeSnapshot(o openstacksim.Objects) *Snapshot {
	snap := &Snapshot{Ports: map[string]bool{}, FloatingIPs: map[string]bool{}, SecurityGroups: map[string]bool{}, Routes: map[string]map[openstacksim.Route]bool{}}
	for id := range o.Ports {
		snap.Ports[id] = true
	}
	for id := range o.FloatingIPs {
		snap.FloatingIPs[id] = true
	}
	for id := range o.SecurityGroups {
		snap.SecurityGroups[id] = true
	}
	for id, r := range o.Routers {
		m := map[openstacksim.Route]bool{}
		for _, x := range r.Routes {
			m[x] = true
		}
		snap.Routes[id] = m
	}
	return snap
}

// AuditGateway is one live gateway as its status describes it.
type AuditGateway struct {
	// Owner is what the gateway's OpenStack objects are tagged with (its UID).
	Owner string
	// Name is for messages.
	Name        string
	ServiceCIDR string
	// VirtualIPs are the addresses of every exposure and reverse exposure.
	VirtualIPs []string
	PortID     string
	// ServerID is the server of the node the gateway is pinned to: its port is attached
	// there. Empty: not checked.
	ServerID string
	// Reverse: the gateway has reverse exposures, so its service CIDR is routed to its
	// port's address (an allowed-address pair, a route on the gateway cluster's router
	// and a reverse route on every linked service cluster's router).
	Reverse bool
}

// AuditLink is one live ClusterLink as its status describes it.
type AuditLink struct {
	Owner              string
	Name               string
	TransitIP          string
	LegPortID          string
	RouterID           string // the service cluster's router
	ServiceClusterCIDR string
	// Serves lists the owners of the gateways the link serves (its gatewaySelector, or
	// the default for its kind): only their reverse routes belong on its router. Nil:
	// every gateway.
	Serves []string
}

// serves reports whether the link routes to the gateway with that owner.
func (l *AuditLink) serves(owner string) bool {
	return l.Serves == nil || slices.Contains(l.Serves, owner)
}

// AuditInput is everything an audit compares the state with.
type AuditInput struct {
	// Baseline is a snapshot taken before the operator ran.
	Baseline *Snapshot
	// OwnerOf reads an object's owner from its tags; ok=false when it names none.
	OwnerOf func(tags []string) (owner string, ok bool)
	// GatewayRouterID is the gateway cluster's own router.
	GatewayRouterID string
	Gateways        []AuditGateway
	Links           []AuditLink
	// Deleted are the owners deleted during the run (their objects are gone from the
	// API server): nothing of theirs may remain.
	Deleted []string
}

// AuditReport lists every finding, one line each.
type AuditReport struct {
	LeakedPorts, LeakedFloatingIPs, LeakedSecurityGroups []string
	LeakedRoutes, LeakedAttachments, LeakedAddressPairs  []string
	DuplicateServiceCIDRs, DuplicateVirtualIPs           []string
	DuplicateTransitIPs                                  []string
	// DeletedLeftovers name objects still tagged for a deleted owner (also counted as
	// leaks above).
	DeletedLeftovers []string
	// Missing is a live object's footprint that is absent (a port, an attachment, a
	// route the status promises).
	Missing []string
	// Checked counts what was looked at, so a report of nothing can be told apart from
	// an audit of nothing.
	Checked struct{ Ports, FloatingIPs, SecurityGroups, Routes, Gateways, Links int }
}

// Problems is every finding, prefixed with its category; empty when the state is clean.
func (r AuditReport) Problems() []string {
	var out []string
	add := func(cat string, items []string) {
		for _, x := range items {
			out = append(out, cat+": "+x)
		}
	}
	add("leaked port", r.LeakedPorts)
	add("leaked floating IP", r.LeakedFloatingIPs)
	add("leaked security group", r.LeakedSecurityGroups)
	add("leaked route", r.LeakedRoutes)
	add("leaked attachment", r.LeakedAttachments)
	add("leaked address pair", r.LeakedAddressPairs)
	add("duplicate service CIDR", r.DuplicateServiceCIDRs)
	add("duplicate virtual IP", r.DuplicateVirtualIPs)
	add("duplicate transit IP", r.DuplicateTransitIPs)
	add("deleted object's leftover", r.DeletedLeftovers)
	add("missing", r.Missing)
	return out
}

func (r AuditReport) String() string {
	p := r.Problems()
	if len(p) == 0 {
		return fmt.Sprintf("clean (%d ports, %d floating IPs, %d security groups, %d routes; %d gateways, %d links)",
			r.Checked.Ports, r.Checked.FloatingIPs, r.Checked.SecurityGroups, r.Checked.Routes, r.Checked.Gateways, r.Checked.Links)
	}
	return fmt.Sprintf("%d problem(s):\n  %s", len(p), strings.Join(p, "\n  "))
}

// Audit compares the simulator's objects (one moment's copy, openstacksim.Server.Objects) with
// in.
func Audit(o openstacksim.Objects, in AuditInput) AuditReport {
	var rep AuditReport
	base := in.Baseline
	if base == nil {
		base = &Snapshot{}
	}
	ownerOf := in.OwnerOf
	if ownerOf == nil {
		ownerOf = func([]string) (string, bool) { return "", false }
	}
	gws := map[string]*AuditGateway{}
	for i := range in.Gateways {
		gws[in.Gateways[i].Owner] = &in.Gateways[i]
	}
	links := map[string]*AuditLink{}
	for i := range in.Links {
		links[in.Links[i].Owner] = &in.Links[i]
	}
	deleted := map[string]bool{}
	for _, d := range in.Deleted {
		deleted[d] = true
	}
	rep.Checked.Gateways, rep.Checked.Links = len(gws), len(links)

	// unowned files an object that no live owner explains under its category.
	unowned := func(list *[]string, what, owner string, tagged bool) {
		switch {
		case !tagged:
			*list = append(*list, what+" carries no owner tag")
		case deleted[owner]:
			*list = append(*list, what+" belongs to deleted owner "+owner)
			rep.DeletedLeftovers = append(rep.DeletedLeftovers, what+" (owner "+owner+")")
		default:
			*list = append(*list, what+" belongs to unknown owner "+owner)
		}
	}

	// Ports, their attachments and address pairs.
	gwPorts := map[string][]*openstacksim.Port{}
	linkPorts := map[string][]*openstacksim.Port{}
	for _, id := range sortedKeys(o.Ports) {
		p := o.Ports[id]
		owner, tagged := ownerOf(p.Tags)
		if base.Ports[id] && !tagged {
			continue
		}
		rep.Checked.Ports++
		what := describePort(p)
		switch {
		case tagged && gws[owner] != nil:
			gwPorts[owner] = append(gwPorts[owner], p)
		case tagged && links[owner] != nil:
			linkPorts[owner] = append(linkPorts[owner], p)
		default:
			unowned(&rep.LeakedPorts, what, owner, tagged)
			if p.DeviceID != "" && strings.HasPrefix(p.DeviceOwner, "compute:") {
				rep.LeakedAttachments = append(rep.LeakedAttachments, what+" is attached to server "+p.DeviceID+" with no live owner")
			}
		}
	}
	portIP := map[string]string{} // owner -> its port's address
	for _, owner := range sortedKeys(gws) {
		g := gws[owner]
		ps := gwPorts[owner]
		if len(ps) == 0 {
			rep.Missing = append(rep.Missing, "gateway "+g.Name+" has no port")
			continue
		}
		keep := ps[0]
		for _, p := range ps {
			if p.ID == g.PortID {
				keep = p
			}
		}
		for _, p := range ps {
			if p != keep {
				rep.LeakedPorts = append(rep.LeakedPorts, describePort(p)+" is a second port of gateway "+g.Name)
			}
		}
		if g.PortID != "" && keep.ID != g.PortID {
			rep.Missing = append(rep.Missing, "gateway "+g.Name+": status names port "+g.PortID+", which is gone")
		}
		if len(keep.FixedIPs) > 0 {
			portIP[owner] = keep.FixedIPs[0].IPAddress
		}
		if g.ServerID != "" {
			switch {
			case keep.DeviceID == "":
				rep.Missing = append(rep.Missing, "gateway "+g.Name+": port "+keep.ID+" is not attached (want server "+g.ServerID+")")
			case keep.DeviceID != g.ServerID:
				rep.LeakedAttachments = append(rep.LeakedAttachments, "gateway "+g.Name+": port "+keep.ID+" is attached to server "+keep.DeviceID+", not its node's server "+g.ServerID)
			}
		}
		for _, ap := range keep.AllowedAddressPairs {
			if !g.Reverse || ap.IPAddress != g.ServiceCIDR {
				rep.LeakedAddressPairs = append(rep.LeakedAddressPairs, "gateway "+g.Name+": port "+keep.ID+" allows "+ap.IPAddress)
			}
		}
		if g.Reverse && !hasPairFor(keep, g.ServiceCIDR) {
			rep.Missing = append(rep.Missing, "gateway "+g.Name+": port "+keep.ID+" lacks the address pair for "+g.ServiceCIDR)
		}
	}
	for _, owner := range sortedKeys(links) {
		l := links[owner]
		ps := linkPorts[owner]
		if len(ps) == 0 {
			rep.Missing = append(rep.Missing, "ClusterLink "+l.Name+" has no leg port")
			continue
		}
		keep := ps[0]
		for _, p := range ps {
			if p.ID == l.LegPortID {
				keep = p
			}
		}
		for _, p := range ps {
			if p != keep {
				rep.LeakedPorts = append(rep.LeakedPorts, describePort(p)+" is a second leg of ClusterLink "+l.Name)
			}
		}
		if l.RouterID != "" && (keep.DeviceID != l.RouterID || keep.DeviceOwner != openstacksim.OwnerRouterInterface) {
			rep.Missing = append(rep.Missing, "ClusterLink "+l.Name+": leg "+keep.ID+" is not attached to router "+l.RouterID+" (device "+keep.DeviceID+")")
		}
		if l.TransitIP != "" && !portHasIP(keep, l.TransitIP) {
			rep.Missing = append(rep.Missing, "ClusterLink "+l.Name+": leg "+keep.ID+" does not hold transit IP "+l.TransitIP)
		}
	}

	// Floating IPs.
	gwFIPs := map[string]int{}
	for _, id := range sortedKeys(o.FloatingIPs) {
		f := o.FloatingIPs[id]
		owner, tagged := ownerOf(f.Tags)
		if base.FloatingIPs[id] && !tagged {
			continue
		}
		rep.Checked.FloatingIPs++
		what := "floating IP " + f.FloatingIPAddress + " (" + f.ID + ")"
		if g := gws[owner]; tagged && g != nil {
			gwFIPs[owner]++
			if gwFIPs[owner] > 1 {
				rep.LeakedFloatingIPs = append(rep.LeakedFloatingIPs, what+" is a second floating IP of gateway "+g.Name)
			}
			continue
		}
		unowned(&rep.LeakedFloatingIPs, what, owner, tagged)
	}

	// Security groups.
	gwSGs := map[string]int{}
	for _, id := range sortedKeys(o.SecurityGroups) {
		g := o.SecurityGroups[id]
		owner, tagged := ownerOf(g.Tags)
		if base.SecurityGroups[id] && !tagged {
			continue
		}
		if !tagged && g.Name == "default" {
			continue // a project's default group, made by Neutron on first use
		}
		rep.Checked.SecurityGroups++
		what := "security group " + g.Name + " (" + g.ID + ")"
		if gw := gws[owner]; tagged && gw != nil {
			gwSGs[owner]++
			if gwSGs[owner] > 1 {
				rep.LeakedSecurityGroups = append(rep.LeakedSecurityGroups, what+" is a second group of gateway "+gw.Name)
			}
			continue
		}
		unowned(&rep.LeakedSecurityGroups, what, owner, tagged)
	}

	// Routes: each one added since the baseline is explained by a live owner, or leaked.
	linkRouters := map[string][]*AuditLink{}
	for _, owner := range sortedKeys(links) {
		l := links[owner]
		if l.RouterID != "" {
			linkRouters[l.RouterID] = append(linkRouters[l.RouterID], l)
		}
	}
	reverseRoute := map[openstacksim.Route]string{} // /24 via port address -> gateway name
	reverseOwner := map[openstacksim.Route]string{}
	for _, owner := range sortedKeys(gws) {
		g := gws[owner]
		if g.Reverse && portIP[owner] != "" {
			reverseRoute[openstacksim.Route{Destination: g.ServiceCIDR, NextHop: portIP[owner]}] = g.Name
			reverseOwner[openstacksim.Route{Destination: g.ServiceCIDR, NextHop: portIP[owner]}] = owner
		}
	}
	// servedOn: a reverse route belongs on a link's router only when a link there serves
	// its gateway (a route to another tenant's gateway is a leak, not an explanation).
	servedOn := func(rid string, x openstacksim.Route) bool {
		for _, l := range linkRouters[rid] {
			if reverseRoute[x] != "" && l.serves(reverseOwner[x]) {
				return true
			}
		}
		return false
	}
	forwardRoute := map[openstacksim.Route]string{}
	for _, owner := range sortedKeys(links) {
		l := links[owner]
		if l.TransitIP != "" {
			forwardRoute[openstacksim.Route{Destination: l.ServiceClusterCIDR, NextHop: l.TransitIP}] = l.Name
		}
	}
	for _, rid := range sortedKeys(o.Routers) {
		r := o.Routers[rid]
		have := map[openstacksim.Route]bool{}
		byDest := map[string][]string{}
		for _, x := range r.Routes {
			have[x] = true
			if base.Routes[rid][x] {
				continue
			}
			rep.Checked.Routes++
			byDest[x.Destination] = append(byDest[x.Destination], x.NextHop)
			what := fmt.Sprintf("%s via %s on router %s", x.Destination, x.NextHop, r.Name)
			switch {
			case rid == in.GatewayRouterID && reverseRoute[x] != "":
			case rid == in.GatewayRouterID && forwardRoute[x] != "":
			case servedOn(rid, x):
			default:
				rep.LeakedRoutes = append(rep.LeakedRoutes, what+" is explained by no live gateway or ClusterLink")
			}
		}
		for _, d := range sortedKeys(byDest) {
			if hops := byDest[d]; len(hops) > 1 {
				sort.Strings(hops)
				rep.DuplicateServiceCIDRs = append(rep.DuplicateServiceCIDRs, fmt.Sprintf("%s is routed %d times on router %s (via %s)", d, len(hops), r.Name, strings.Join(hops, ", ")))
			}
		}
		// What must be there.
		if rid == in.GatewayRouterID {
			for _, x := range sortedRoutes(reverseRoute) {
				if !have[x] {
					rep.Missing = append(rep.Missing, fmt.Sprintf("gateway %s: route %s via %s on the gateway router", reverseRoute[x], x.Destination, x.NextHop))
				}
			}
			for _, x := range sortedRoutes(forwardRoute) {
				if !have[x] {
					rep.Missing = append(rep.Missing, fmt.Sprintf("ClusterLink %s: forward route %s via %s", forwardRoute[x], x.Destination, x.NextHop))
				}
			}
		}
		for _, l := range linkRouters[rid] {
			for _, x := range sortedRoutes(reverseRoute) {
				if !have[x] && l.serves(reverseOwner[x]) {
					rep.Missing = append(rep.Missing, fmt.Sprintf("ClusterLink %s: reverse route %s via %s (gateway %s) on router %s", l.Name, x.Destination, x.NextHop, reverseRoute[x], r.Name))
				}
			}
		}
	}

	// Duplicates among the live objects' own claims.
	cidrs := map[string][]string{}
	vips := map[string][]string{}
	for _, owner := range sortedKeys(gws) {
		g := gws[owner]
		if g.ServiceCIDR != "" {
			cidrs[g.ServiceCIDR] = append(cidrs[g.ServiceCIDR], g.Name)
		}
		pfx, perr := netip.ParsePrefix(g.ServiceCIDR)
		for _, v := range g.VirtualIPs {
			vips[v] = append(vips[v], g.Name)
			if a, err := netip.ParseAddr(v); perr == nil && (err != nil || !pfx.Contains(a)) {
				rep.DuplicateVirtualIPs = append(rep.DuplicateVirtualIPs, fmt.Sprintf("gateway %s: virtual IP %s lies outside its service CIDR %s", g.Name, v, g.ServiceCIDR))
			}
		}
	}
	for _, c := range sortedKeys(cidrs) {
		if who := cidrs[c]; len(who) > 1 {
			rep.DuplicateServiceCIDRs = append(rep.DuplicateServiceCIDRs, c+" is held by "+strings.Join(who, ", "))
		}
	}
	for _, v := range sortedKeys(vips) {
		if who := vips[v]; len(who) > 1 {
			rep.DuplicateVirtualIPs = append(rep.DuplicateVirtualIPs, v+" is held "+fmt.Sprint(len(who))+" times (by "+strings.Join(who, ", ")+")")
		}
	}
	transit := map[string][]string{}
	for _, owner := range sortedKeys(links) {
		if l := links[owner]; l.TransitIP != "" {
			transit[l.TransitIP] = append(transit[l.TransitIP], l.Name)
		}
	}
	for _, a := range sortedKeys(transit) {
		if who := transit[a]; len(who) > 1 {
			rep.DuplicateTransitIPs = append(rep.DuplicateTransitIPs, a+" is held by "+strings.Join(who, ", "))
		}
	}
	return rep
}

func describePort(p *openstacksim.Port) string {
	ip := ""
	if len(p.FixedIPs) > 0 {
		ip = " at " + p.FixedIPs[0].IPAddress
	}
	return "port " + p.ID + " (" + p.Name + ip + ")"
}

func hasPairFor(p *openstacksim.Port, ip string) bool {
	for _, ap := range p.AllowedAddressPairs {
		if ap.IPAddress == ip {
			return true
		}
	}
	return false
}

func portHasIP(p *openstacksim.Port, ip string) bool {
	for _, f := range p.FixedIPs {
		if f.IPAddress == ip {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedRoutes(m map[openstacksim.Route]string) []openstacksim.Route {
	out := make([]openstacksim.Route, 0, len(m))
	for r := range m {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Destination != out[j].Destination {
			return out[i].Destination < out[j].Destination
		}
		return out[i].NextHop < out[j].NextHop
	})
	return out
}
