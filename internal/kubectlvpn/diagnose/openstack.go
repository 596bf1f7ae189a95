package diagnose

import (
	"fmt"
	"slices"
	"strings"

	"bnerd.net/vpn-operator/internal/openstack"
)

func (r *run) nudge() string {
	return fmt.Sprintf(reconcileNudge, strings.ToLower(r.g.kind), r.g.obj.GetName(), r.g.obj.GetNamespace())
}

// unreadable reports a check that could not be made.
func (r *run) unreadable(id, title string, err error) {
	r.add(Check{ID: id, Title: title, Status: Skipped, Detail: "could not read from OpenStack: " + err.Error()})
}

func (r *run) checkOpenStack() {
	st := r.g.status
	os := r.src.OpenStack
	if r.src.SkipOpenStack {
		r.add(Check{ID: "openstack", Title: "OpenStack objects", Status: Skipped, Detail: "not checked, on request", Requested: true})
		return
	}
	if os == nil {
		why := r.src.OpenStackSkipReason
		if why == "" {
			why = "no OpenStack credential"
		}
		r.add(Check{ID: "openstack", Title: "OpenStack objects", Status: Skipped, Detail: why})
		return
	}
	if st.PortID == "" {
		r.add(Check{ID: "openstack", Title: "OpenStack objects", Status: Skipped, Detail: "status.portID is not set yet (see the conditions)"})
		return
	}
	ctx := r.ctx
	port, err := os.GetPort(ctx, st.PortID)
	switch {
	case openstack.IsNotFound(err):
		r.add(Check{ID: "openstack.port", Title: "Gateway port exists", Status: Fail,
			Detail:  fmt.Sprintf("port %s (status.portID) does not exist in OpenStack: it was deleted out of band", st.PortID),
			Fix:     "Let the operator create a new port now: " + r.nudge() + " (a new port has a new MAC address, so the gateway pod restarts).",
			Runbook: anchor(FindingPortMissing)})
		return
	case err != nil:
		r.unreadable("openstack.port", "Gateway port exists", err)
		return
	}
	r.port = port
	if fixed := port.FixedIPOn(""); fixed != st.PortFixedIP || !strings.EqualFold(port.MACAddress, st.PortMACAddress) {
		r.add(Check{ID: "openstack.port", Title: "Gateway port exists", Status: Fail,
			Detail:  fmt.Sprintf("port %s has %s / %s, status says %s / %s", port.ID, fixed, port.MACAddress, st.PortFixedIP, st.PortMACAddress),
			Fix:     "The port was changed out of band; " + r.nudge(),
			Runbook: anchor(FindingPortMissing)})
	} else {
		r.add(Check{ID: "openstack.port", Title: "Gateway port exists", Status: Pass, Detail: fmt.Sprintf("%s, %s, %s", port.ID, fixed, port.MACAddress)})
	}

	// The Nova attachment: the port must be bound to the pinned node's server.
	r.checkAttachment(port)
	r.checkSecurityGroup(port)
	r.checkFloatingIP(port)
	r.checkRouting(port)
	r.checkTransit(port)
}

func (r *run) checkAttachment(port *openstack.Port) {
	st := r.g.status
	const id, title = "openstack.attachment", "Port attached to the node's server"
	if st.ServerID == "" {
		r.add(Check{ID: id, Title: title, Status: Skipped, Detail: "status.serverID is not set yet (see PortAttached)"})
		return
	}
	switch {
	case port.DeviceID == "":
		r.add(Check{ID: id, Title: title, Status: Fail,
			Detail:  fmt.Sprintf("port %s is attached to no server (status.serverID %s, node %s): it was detached out of band, and the gateway pod has lost its second interface", port.ID, st.ServerID, st.NodeName),
			Fix:     "Let the operator attach it again now: " + r.nudge() + " (PortAttached reads Unknown/Attaching until Nova has finished); once PortAttached is True again, delete the gateway pod so it starts with the interface (kubectl delete pod -n " + r.g.obj.GetNamespace() + " -l " + selectorString(r.g) + ").",
			Runbook: anchor(FindingPortDetached)})
		return
	case port.DeviceID != st.ServerID:
		r.add(Check{ID: id, Title: title, Status: Fail,
			Detail:  fmt.Sprintf("port %s is attached to server %s, not %s (node %s)", port.ID, port.DeviceID, st.ServerID, st.NodeName),
			Fix:     "Let the operator move it back: " + r.nudge(),
			Runbook: anchor(FindingPortDetached)})
		return
	}
	ifaces, err := r.src.OpenStack.ListServerInterfaces(r.ctx, st.ServerID)
	if err != nil {
		r.unreadable(id, title, err)
		return
	}
	if !slices.ContainsFunc(ifaces, func(i openstack.ServerInterface) bool { return i.PortID == port.ID }) {
		r.add(Check{ID: id, Title: title, Status: Fail,
			Detail:  fmt.Sprintf("Neutron says port %s is on server %s, but Nova does not list it among the server's interfaces", port.ID, st.ServerID),
			Fix:     "Let the operator re-attach it: " + r.nudge(),
			Runbook: anchor(FindingPortDetached)})
		return
	}
	r.add(Check{ID: id, Title: title, Status: Pass, Detail: fmt.Sprintf("server %s (node %s)", st.ServerID, st.NodeName)})
}

func (r *run) checkSecurityGroup(port *openstack.Port) {
	st := r.g.status
	const id = "openstack.securitygroup"
	title := "Security group admits each peer's IKE"
	if r.g.isWireGuard() {
		title = "Security group admits each peer's WireGuard handshake"
	}
	if st.SecurityGroupID == "" {
		r.add(Check{ID: id, Title: title, Status: Skipped, Detail: "status.securityGroupID is not set yet"})
		return
	}
	if len(port.SecurityGroups) != 1 || port.SecurityGroups[0] != st.SecurityGroupID {
		r.add(Check{ID: id, Title: title, Status: Fail,
			Detail:  fmt.Sprintf("port %s uses security groups %v, want only the gateway's %s", port.ID, port.SecurityGroups, st.SecurityGroupID),
			Fix:     "Let the operator restore them: " + r.nudge(),
			Runbook: anchor(FindingPortSecGroups)})
		return
	}
	sg, err := r.src.OpenStack.GetSecurityGroup(r.ctx, st.SecurityGroupID)
	if openstack.IsNotFound(err) {
		r.add(Check{ID: id, Title: title, Status: Fail,
			Detail:  fmt.Sprintf("security group %s (status.securityGroupID) does not exist", st.SecurityGroupID),
			Fix:     "Let the operator create it again: " + r.nudge(),
			Runbook: anchor(FindingSecGroupMissing)})
		return
	}
	if err != nil {
		r.unreadable(id, title, err)
		return
	}
	if r.g.isWireGuard() {
		r.checkWireGuardRules(id, title, sg)
		return
	}
	var missing []string
	for _, t := range r.g.spec.Tunnels {
		for _, p := range []int{500, 4500} {
			if !slices.ContainsFunc(sg.Rules, func(rule openstack.SecurityGroupRule) bool {
				return rule.Direction == openstack.DirectionIngress && rule.EtherType == openstack.EtherTypeIPv4 &&
					rule.Protocol == openstack.ProtocolUDP && rule.PortRangeMin == p && rule.PortRangeMax == p &&
					rule.RemoteIPPrefix == t.Peer.Address+"/32"
			}) {
				missing = append(missing, fmt.Sprintf("udp/%d from %s/32 (tunnel %s)", p, t.Peer.Address, t.Name))
			}
		}
	}
	if len(missing) > 0 {
		r.add(Check{ID: id, Title: title, Status: Fail,
			Detail:  fmt.Sprintf("security group %s lacks ingress %s: the peer's IKE packets are dropped before the gateway", sg.ID, strings.Join(missing, ", ")),
			Fix:     "Let the operator add the rules again: " + r.nudge(),
			Runbook: anchor(FindingIKERuleMissing)})
		return
	}
	r.add(Check{ID: id, Title: title, Status: Pass, Detail: fmt.Sprintf("%s: udp/500 and udp/4500 from every peer", sg.ID)})
}

func (r *run) checkFloatingIP(port *openstack.Port) {
	st := r.g.status
	const id, title = "openstack.floatingip", "Floating IP on the gateway port"
	if st.FloatingIPID == "" {
		r.add(Check{ID: id, Title: title, Status: Skipped, Detail: "status.floatingIPID is not set yet (see FloatingIPReady)"})
		return
	}
	fip, err := r.src.OpenStack.GetFloatingIP(r.ctx, st.FloatingIPID)
	switch {
	case openstack.IsNotFound(err):
		r.add(Check{ID: id, Title: title, Status: Fail,
			Detail:  fmt.Sprintf("floating IP %s (%s) does not exist any more: every peer's %s goes to an address nobody holds", st.FloatingIPID, st.FloatingIP, r.g.handshakeWord()),
			Fix:     "An allocated address is allocated again (a new address: every client must change its remote gateway); a pinned one must be recreated first. Then " + r.nudge(),
			Runbook: anchor(FindingFloatingIPMoved)})
		return
	case err != nil:
		r.unreadable(id, title, err)
		return
	}
	if fip.PortID != port.ID || fip.FloatingIPAddress != st.FloatingIP {
		where := "no port"
		if fip.PortID != "" {
			where = "port " + fip.PortID
		}
		r.add(Check{ID: id, Title: title, Status: Fail,
			Detail:  fmt.Sprintf("floating IP %s is associated with %s, not the gateway's port %s", fip.FloatingIPAddress, where, port.ID),
			Fix:     "If something else took it, disassociate it there (openstack floating ip unset --port " + fip.FloatingIPAddress + "); then " + r.nudge(),
			Runbook: anchor(FindingFloatingIPMoved)})
		return
	}
	r.add(Check{ID: id, Title: title, Status: Pass, Detail: fmt.Sprintf("%s -> %s", fip.FloatingIPAddress, port.FixedIPOn(""))})
}

func (r *run) checkRouting(port *openstack.Port) {
	st := r.g.status
	const id, title = "openstack.routing", "Route to the service CIDR for reverse exposures"
	if len(r.g.spec.ReverseExposures) == 0 {
		r.add(Check{ID: id, Title: title, Status: Pass, Detail: "no reverse exposures: nothing is routed"})
		return
	}
	if st.ServiceCIDR == "" || st.PortFixedIP == "" {
		r.add(Check{ID: id, Title: title, Status: Skipped, Detail: "status.serviceCIDR or status.portFixedIP is not set yet"})
		return
	}
	if !slices.ContainsFunc(port.AllowedAddressPairs, func(p openstack.AddressPair) bool { return p.IPAddress == st.ServiceCIDR }) {
		r.add(Check{ID: id, Title: title, Status: Fail,
			Detail:  fmt.Sprintf("port %s has no allowed address pair %s: Neutron drops the reverse exposures' traffic", port.ID, st.ServiceCIDR),
			Fix:     "Let the operator add it again: " + r.nudge(),
			Runbook: anchor(FindingAddressPair)})
		return
	}
	want := openstack.Route{Destination: st.ServiceCIDR, NextHop: st.PortFixedIP}
	var routers []openstack.Router
	if r.src.Router != "" {
		rt, err := r.src.OpenStack.ResolveRouter(r.ctx, r.src.Router)
		if err != nil {
			r.unreadable(id, title, err)
			return
		}
		routers = []openstack.Router{*rt}
	} else {
		rs, err := r.src.OpenStack.ListRouters(r.ctx, port.ProjectID)
		if err != nil {
			r.unreadable(id, title, err)
			return
		}
		routers = rs
	}
	for _, rt := range routers {
		if rt.HasRoute(want) {
			r.add(Check{ID: id, Title: title, Status: Pass, Detail: fmt.Sprintf("router %s: %s via %s", orName(rt), want.Destination, want.NextHop)})
			return
		}
	}
	where := "on router " + r.src.Router
	if r.src.Router == "" {
		var names []string
		for _, rt := range routers {
			names = append(names, orName(rt))
		}
		where = "on any router of the project (" + strings.Join(names, ", ") + ")"
	}
	r.add(Check{ID: id, Title: title, Status: Fail,
		Detail:  fmt.Sprintf("no route %s via %s %s: our side's traffic to the reverse exposures is not routed to the gateway", want.Destination, want.NextHop, where),
		Fix:     "Let the operator add it again: " + r.nudge() + ". Never add it by hand with openstack router set --route: see the append caveat in the manual-method runbook.",
		Runbook: anchor(FindingRouteMissing)})
}

func orName(r openstack.Router) string {
	if r.Name != "" {
		return r.Name
	}
	return r.ID
}

// checkTransit looks for the one thing that must never be: the gateway network shared
// with every project (network --share, or a wildcard RBAC rule). It reads the network
// the way the operator does (openstack.ReadNetworkShare), which refuses every ClusterLink
// on such a network (TransitNetworkSharedWithAllProjects); this check names it per gateway.
func (r *run) checkTransit(port *openstack.Port) {
	const id, title = "openstack.transit", "Transit network not shared with every project"
	share, err := openstack.ReadNetworkShare(r.ctx, r.src.OpenStack, port.NetworkID)
	if err != nil {
		r.unreadable(id, title, err)
		return
	}
	net := share.Network
	switch {
	case share.Flag:
		r.add(Check{ID: id, Title: title, Status: Fail,
			Detail:  fmt.Sprintf("network %s (%s) has shared=True: every project of the cloud can create ports on it and reach every linked cluster through the gateway router", orText(net.Name, net.ID), net.ID),
			Fix:     "An OpenStack admin removes it: openstack network set --no-share " + net.ID + "; customers get per-project RBAC shares from their ClusterLinks.",
			Runbook: anchor(FindingTransitShared)})
	case len(share.Wildcard) > 0:
		p := share.Wildcard[0]
		r.add(Check{ID: id, Title: title, Status: Fail,
			Detail:  fmt.Sprintf("RBAC policy %s shares network %s with every project (target *)", p.ID, net.ID),
			Fix:     "An OpenStack admin deletes it: openstack network rbac delete " + p.ID,
			Runbook: anchor(FindingTransitShared)})
	default:
		r.add(Check{ID: id, Title: title, Status: Pass, Detail: fmt.Sprintf("%s: %d per-project shares", orText(net.Name, net.ID), len(share.PerProject))})
	}
}

func orText(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
