package gateway

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/go-logr/logr"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
)

func (r *Reconciler) net() openstack.Networking { return r.OpenStack.Networking }

// gatewayNetworkID resolves the configured gateway network once; names are resolved at
// most once per process, IDs are used as they are.
func (r *Reconciler) gatewayNetworkID(ctx context.Context) (string, error) {
	r.resolveMu.Lock()
	defer r.resolveMu.Unlock()
	if r.networkID != "" {
		return r.networkID, nil
	}
	if r.Config.GatewayNetwork == "" {
		return "", fmt.Errorf("no gateway network configured")
	}
	n, err := r.net().ResolveNetwork(ctx, r.Config.GatewayNetwork)
	if err != nil {
		return "", err
	}
	r.networkID = n.ID
	return n.ID, nil
}

func (r *Reconciler) externalNetworkID(ctx context.Context) (string, error) {
	r.resolveMu.Lock()
	defer r.resolveMu.Unlock()
	if r.externalID != "" {
		return r.externalID, nil
	}
	if r.Config.ExternalNetwork == "" {
		return "", fmt.Errorf("no external network configured for floating IPs (IPSEC_EXTERNAL_NETWORK)")
	}
	n, err := r.net().ResolveNetwork(ctx, r.Config.ExternalNetwork)
	if err != nil {
		return "", err
	}
	r.externalID = n.ID
	return n.ID, nil
}

func (r *Reconciler) operatorRouterID(ctx context.Context) (string, error) {
	r.resolveMu.Lock()
	defer r.resolveMu.Unlock()
	if r.routerID != "" {
		return r.routerID, nil
	}
	if r.Config.Router == "" {
		return "", fmt.Errorf("no router configured (IPSEC_ROUTER_ID)")
	}
	rt, err := r.net().ResolveRouter(ctx, r.Config.Router)
	if err != nil {
		return "", err
	}
	r.routerID = rt.ID
	return rt.ID, nil
}

// findOwnedPorts returns the gateway's ports: the one status names (by ID) if it is
// still tagged for this gateway, else every port carrying the gateway's tags.
func (r *Reconciler) findOwnedPorts(ctx context.Context, g *gateway) ([]openstack.Port, error) {
	owner := g.owner()
	p, err := openstack.Recorded(ctx, owner, g.status.PortID, r.net().GetPort, openstack.PortTags)
	switch {
	case err != nil:
		return nil, err
	case p != nil:
		return []openstack.Port{*p}, nil
	}
	return r.net().ListPorts(ctx, openstack.ListPortsOpts{Tags: owner.Selector()})
}

// ensurePort creates or adopts the gateway's dedicated port. It is found by ID or by
// the gateway's tags only, and it is created with its tags in the create request, so a
// crash anywhere leaves at most one port to adopt.
func (r *Reconciler) ensurePort(ctx context.Context, g *gateway) (bool, error) {
	fail := func(err error) (bool, error) {
		r.condFailed(g, v1alpha1.ConditionPortReady, v1alpha1.ReasonPortFailed, err)
		return false, err
	}
	port, err := r.ownedOrNewPort(ctx, g)
	if err != nil {
		return fail(err)
	}
	if cidr := g.status.ServiceCIDR; cidr != "" && openstack.ServiceCIDRTag(port.Tags) != cidr {
		// A port made by an earlier release, or before the allocation: record it now.
		tags, err := r.net().ReplacePortTags(ctx, port.ID, openstack.WithServiceCIDR(port.Tags, cidr))
		if err != nil {
			return fail(fmt.Errorf("recording the service CIDR on port %s: %w", port.ID, err))
		}
		port.Tags = tags
	}
	g.port = port
	if err := r.recordPort(ctx, g, port); err != nil {
		return fail(err)
	}
	if reason, msg := r.gatewayNetworkRefusal(g); reason != "" {
		r.condFalse(g, v1alpha1.ConditionPortReady, reason, msg)
		return false, nil
	}
	r.condTrue(g, v1alpha1.ConditionPortReady, v1alpha1.ReasonPortReady,
		fmt.Sprintf("port %s holds %s on %s", port.ID, g.status.PortFixedIP, g.status.SubnetCIDR))
	return true, nil
}

// ownedOrNewPort is the gateway's port: found by ID or tags, else created with the tags.
// Of two (only a lost create response makes them) the recorded or attached one stays;
// an unattached duplicate goes.
func (r *Reconciler) ownedOrNewPort(ctx context.Context, g *gateway) (*openstack.Port, error) {
	log := logr.FromContextOrDiscard(ctx)
	owner := g.owner()
	found, err := openstack.Owned[openstack.Port]{
		Owner: owner, RecordedID: g.status.PortID, Get: r.net().GetPort, Tags: openstack.PortTags,
		List: func(ctx context.Context) ([]openstack.Port, error) {
			return r.net().ListPorts(ctx, openstack.ListPortsOpts{Tags: owner.Selector()})
		},
		Keep: func(a, b *openstack.Port) bool {
			return a.ID == g.status.PortID || (a.DeviceID != "" && b.DeviceID == "")
		},
		InUse:  func(p *openstack.Port) bool { return p.DeviceID != "" },
		ID:     func(p *openstack.Port) string { return p.ID },
		Delete: r.net().DeletePort,
		Create: func(ctx context.Context) (*openstack.Port, error) {
			netID, err := r.gatewayNetworkID(ctx)
			if err != nil {
				return nil, err
			}
			return r.net().CreatePort(ctx, wantedPort(g, netID))
		},
	}.Ensure(ctx)
	for _, id := range found.Deleted {
		log.Info("deleted a duplicate gateway port", "port", id)
	}
	if err != nil {
		return nil, err
	}
	if found.Created {
		log.Info("created gateway port", "port", found.Object.ID)
	}
	return found.Object, nil
}

// wantedPort is the gateway's dedicated port as it is created on the gateway network.
func wantedPort(g *gateway, networkID string) openstack.CreatePortOpts {
	owner := g.owner()
	return openstack.CreatePortOpts{
		NetworkID:   networkID,
		Name:        openstack.ResourceName(g.kind, owner.Namespace, owner.Name),
		Description: "bnerd-vpn-operator: dedicated port of " + g.String(),
		// The allocation's record (Allocated ran before): see cidrPool.
		Tags: openstack.WithServiceCIDR(owner.Tags(), g.status.ServiceCIDR),
		// No group until the gateway's own is ready: nothing is admitted before. An
		// empty list, not none: Neutron gives a port created without the field its
		// project's default group.
		SecurityGroups: []string{},
	}
}

// recordPort notes the port, its address and its subnet in status. The port's address
// is the port's, whatever status says.
func (r *Reconciler) recordPort(ctx context.Context, g *gateway, port *openstack.Port) error {
	if len(port.FixedIPs) == 0 {
		return fmt.Errorf("port %s has no fixed IP", port.ID)
	}
	fixed := port.FixedIPs[0]
	if g.status.PortID == port.ID && g.status.PortFixedIP != "" && g.status.PortFixedIP != fixed.IPAddress {
		r.statusForged(ctx, g, "portFixedIP", g.status.PortFixedIP, fixed.IPAddress, "the address of port "+port.ID+" tagged for this gateway")
	}
	if g.status.PortID != port.ID || g.status.PortFixedIP != fixed.IPAddress || g.status.SubnetCIDR == "" || g.status.SubnetGatewayIP == "" {
		sn, err := r.net().GetSubnet(ctx, fixed.SubnetID)
		if err != nil {
			return err
		}
		g.status.SubnetCIDR = sn.CIDR
		g.status.SubnetGatewayIP = sn.GatewayIP
	}
	g.status.PortID = port.ID
	g.status.PortFixedIP = fixed.IPAddress
	g.status.PortMACAddress = port.MACAddress
	return nil
}

// gatewayNetworkRefusal judges what could only be judged once the gateway network's
// subnet is known: the client's networks, the peers and the targets must lie outside
// it. It returns PortReady's reason and message, or "" when nothing is refused.
func (r *Reconciler) gatewayNetworkRefusal(g *gateway) (reason, msg string) {
	// The pod routes the gateway network out of NIC2, so traffic for a client address
	// inside it would bypass the tunnel (and the guard would drop it).
	if sub, err := netip.ParsePrefix(g.status.SubnetCIDR); err == nil {
		for _, t := range g.remotes() {
			for _, s := range t.subnets {
				if p, err := netip.ParsePrefix(s); err == nil && p.Overlaps(sub) {
					return v1alpha1.ReasonPeerSubnetOverlap,
						fmt.Sprintf("tunnel %s: the client's subnet %s overlaps the gateway network's subnet %s; the client's networks must lie outside it", t.name, p, sub)
				}
			}
		}
	}
	// Nor may a peer (ensureValidated judged the rest of the operator's ranges).
	if errs := g.validatePeerAddresses(r.addressPolicy(g)); len(errs) > 0 {
		return v1alpha1.ReasonPeerAddressNotAllowed, errs.ToAggregate().Error()
	}
	// Nor may a target: the gateway network holds other gateways' ports, the ClusterLink
	// legs and the routers' interfaces.
	if errs := g.validateAddresses(r.addressPolicy(g)); len(errs) > 0 {
		return v1alpha1.ReasonTargetOnGatewayNetwork, errs.ToAggregate().Error()
	}
	return "", ""
}
