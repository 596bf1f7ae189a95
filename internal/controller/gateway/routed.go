package gateway

import (
	"context"
	"fmt"
	"net/netip"
	"sort"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/conditions"
	"bnerd.net/vpn-operator/internal/linkselect"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/tenancy"
)

// +kubebuilder:rbac:groups=ipsec.bnerd.net,resources=clusterlinks,verbs=get;list;watch

// routedRefusal explains why a routed tunnel's subnets cannot be routed to this
// gateway: the reason and message, or "" when they can. A subnet must lie in the
// tenant's routed-subnet ranges (RoutedSubnetNotAllowed), and must not overlap anything
// a route on the shared router would capture (RoutedSubnetConflict):
//   - the service CIDR pool (every gateway's virtual IPs) and the fabric's internal
//     sources (they would be routed into the tunnel);
//   - the external network and the router's attached subnets (the router's own
//     networks), and any route on the router this gateway did not install (the
//     platform's own, a ClusterLink's, another gateway's);
//   - a linked service cluster, an exposure-target range (the operator-wide allow-list
//     and every tenant policy's), and every gateway's peer address and WireGuard
//     endpoint (their IKE and WireGuard traffic crosses the router);
//   - another gateway's routed subnet: of two gateways claiming overlapping subnets,
//     the one that routes it keeps it, else the older.
//
// (The gateway network's subnet is refused earlier, by PortReady.) Messages name this
// gateway's own subnets and what kind of thing they overlap; the ranges other tenants
// use go to the operator's log only.
func (r *Reconciler) routedRefusal(ctx context.Context, g *gateway, routed []string, rt *openstack.Router) (reason, msg string, err error) {
	var mine []netip.Prefix
	for _, s := range routed {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return v1alpha1.ReasonRoutedSubnetConflict, fmt.Sprintf("routed subnet %q is not a network", s), nil
		}
		mine = append(mine, p.Masked())
	}
	for _, m := range mine {
		if !g.policy.RoutedAllowed(m) {
			if len(g.policy.RoutedSubnets) == 0 {
				return v1alpha1.ReasonRoutedModeNotAllowed, fmt.Sprintf("routed subnet %s: routed mode is off under %s (it names no routed-subnet ranges); a platform admin allows ranges in the tenant's policy, or the tunnel uses mode snat", m, g.policy.Describe()), nil
			}
			return v1alpha1.ReasonRoutedModeNotAllowed, fmt.Sprintf("routed subnet %s lies outside the routed-subnet ranges %s allows (%s)", m, g.policy.Describe(), prefixList(g.policy.RoutedSubnets)), nil
		}
	}
	set := routedSet{mine: mine, log: logr.FromContextOrDiscard(ctx)}
	// In this order: the first conflict found is the one the condition names.
	checks := []func() (string, error){
		func() (string, error) { return r.routedVsOperatorRanges(g, set), nil },
		func() (string, error) { return r.routedVsRouter(ctx, g, rt, set) },
		func() (string, error) { return r.routedVsClusterLinks(ctx, set) },
		func() (string, error) { return r.routedVsExposureTargets(ctx, set) },
		func() (string, error) { return r.routedVsGateways(ctx, g, set) },
	}
	for _, check := range checks {
		msg, err := check()
		if err != nil {
			return "", "", err
		}
		if msg != "" {
			return v1alpha1.ReasonRoutedSubnetConflict, msg, nil
		}
	}
	return "", "", nil
}

// routedSet is a gateway's routed subnets under check, with the log for what a
// tenant-facing message leaves out.
type routedSet struct {
	mine []netip.Prefix
	log  logr.Logger
}

// overlap names the routed subnet that overlaps p, if one does.
func (s routedSet) overlap(p netip.Prefix) (netip.Prefix, bool) {
	for _, m := range s.mine {
		if m.Overlaps(p) {
			return m, true
		}
	}
	return netip.Prefix{}, false
}

// detail logs what a tenant-facing message leaves out.
func (s routedSet) detail(m netip.Prefix, what string, other any) {
	s.log.Info("routed subnet refused", "subnet", m.String(), "overlaps", what, "with", fmt.Sprint(other))
}

// routedVsOperatorRanges: the service CIDR pool and the internal source CIDRs.
func (r *Reconciler) routedVsOperatorRanges(g *gateway, set routedSet) string {
	if m, ok := set.overlap(r.Config.ServiceCIDRPool); ok && r.Config.ServiceCIDRPool.IsValid() {
		return fmt.Sprintf("routed subnet %s overlaps the service CIDR pool %s, where every gateway's virtual IPs live", m, r.Config.ServiceCIDRPool)
	}
	for _, in := range r.internalSources(g) {
		if m, ok := set.overlap(in); ok {
			return fmt.Sprintf("routed subnet %s overlaps the internal source CIDR %s: the fabric's own network would be routed into the tunnel", m, in)
		}
	}
	return ""
}

// routedVsRouter: the router's own networks (the external network, its attached
// subnets) and every route on it this gateway did not install.
func (r *Reconciler) routedVsRouter(ctx context.Context, g *gateway, rt *openstack.Router, set routedSet) (string, error) {
	nets, err := r.routerNetworks(ctx, rt)
	if err != nil {
		return "", err
	}
	for _, n := range nets {
		if m, ok := set.overlap(n); ok {
			set.detail(m, "a network of the router", n)
			return fmt.Sprintf("routed subnet %s overlaps a network attached to the gateway cluster's router or the external network: routing it to a tunnel would take the router's own traffic", m), nil
		}
	}
	if rt == nil {
		return "", nil
	}
	for _, x := range rt.Routes {
		if x.NextHop == g.status.PortFixedIP {
			continue
		}
		if p, err := netip.ParsePrefix(x.Destination); err == nil {
			if m, ok := set.overlap(p); ok {
				set.detail(m, "a route the gateway did not install", x)
				return fmt.Sprintf("routed subnet %s overlaps a route on the gateway cluster's router that this gateway did not install; the operator never replaces a route it did not make (a route left by this gateway's former port must be removed by hand)", m), nil
			}
		}
	}
	return "", nil
}

// routedVsClusterLinks: the service cluster of every active ClusterLink.
func (r *Reconciler) routedVsClusterLinks(ctx context.Context, set routedSet) (string, error) {
	var links v1alpha1.ClusterLinkList
	if err := r.apiReader().List(ctx, &links); err != nil {
		return "", fmt.Errorf("listing ClusterLinks to check routed subnets: %w", err)
	}
	for i := range links.Items {
		l := &links.Items[i]
		if !linkselect.Active(l) {
			continue // a refused or deleting link routes nothing
		}
		if p, ok := linkselect.CIDR(l); ok {
			if m, ok := set.overlap(p); ok {
				// The link may serve another tenant: its name and range go to the log.
				set.detail(m, "a ClusterLink's service cluster", l.Name+" "+p.String())
				return fmt.Sprintf("routed subnet %s overlaps the service cluster of a ClusterLink: the router routes that network to the service cluster already", m), nil
			}
		}
	}
	return "", nil
}

// routedVsExposureTargets: the operator-wide exposure-target allow-list and every
// tenant policy's.
func (r *Reconciler) routedVsExposureTargets(ctx context.Context, set routedSet) (string, error) {
	targets := append([]netip.Prefix(nil), r.Config.ExposureTargetCIDRs...)
	var policies v1alpha1.VPNTenantPolicyList
	if err := r.Client.List(ctx, &policies); err != nil {
		return "", fmt.Errorf("listing VPNTenantPolicies to check routed subnets: %w", err)
	}
	for i := range policies.Items {
		targets = append(targets, tenancy.FromSpec(policies.Items[i].Name, "", &policies.Items[i].Spec).ExposureTargets...)
	}
	for _, t := range targets {
		if m, ok := set.overlap(t); ok {
			set.detail(m, "an exposure-target range", t)
			return fmt.Sprintf("routed subnet %s overlaps a range the platform allows as exposure targets: routing it to a tunnel would take the traffic of exposures", m), nil
		}
	}
	return "", nil
}

// routedClaim is one gateway's part in the routed-subnet check.
type routedClaim struct {
	who     string
	ns      string
	created int64
	uid     string
	subnets []string
	peers   []string
	routed  bool
}

// routedVsGateways: every gateway's peer addresses and WireGuard endpoints, this one's
// too, then the routed subnets of the gateways that keep theirs before this one.
func (r *Reconciler) routedVsGateways(ctx context.Context, g *gateway, set routedSet) (string, error) {
	gws, err := v1alpha1.ListGateways(ctx, r.apiReader())
	if err != nil {
		return "", fmt.Errorf("checking routed subnets: %w", err)
	}
	var claims []routedClaim
	for _, o := range gws {
		spec, st := o.GetGatewaySpec(), o.GetGatewayStatus()
		claims = append(claims, routedClaim{v1alpha1.DescribeGateway(o), o.GetNamespace(), o.GetCreationTimestamp().UnixNano(), string(o.GetUID()),
			routedSubnets(spec), peerAddresses(spec, o.GetWireGuard()), routesNow(st, o.GetGeneration())})
	}
	if msg := routedVsPeers(claims, set); msg != "" {
		return msg, nil
	}
	return routedVsClaims(g, claims, set), nil
}

// routedVsPeers: a peer's IKE (or WireGuard) traffic to its gateway's floating IP
// crosses the router, and must not be routed into a tunnel.
func routedVsPeers(claims []routedClaim, set routedSet) string {
	for _, c := range claims {
		for _, a := range c.peers {
			if ip, err := netip.ParseAddr(a); err == nil {
				if m, ok := set.overlap(netip.PrefixFrom(ip, 32)); ok {
					set.detail(m, "a gateway's peer address or WireGuard endpoint", c.who+" "+a)
					return fmt.Sprintf("routed subnet %s holds the peer address or WireGuard endpoint of a gateway: its IKE or WireGuard traffic would be routed into this tunnel", m)
				}
			}
		}
	}
	return ""
}

// routedVsClaims: the routed subnets of the other gateways that keep theirs before
// this one. The gateway that routes the subnet now keeps it; between two that do not
// (or, after a race, both do), the older (creation time, then UID: creation times have
// whole seconds).
func routedVsClaims(g *gateway, claims []routedClaim, set routedSet) string {
	sort.Slice(claims, func(i, j int) bool {
		if claims[i].created != claims[j].created {
			return claims[i].created < claims[j].created
		}
		return claims[i].uid < claims[j].uid
	})
	self := string(g.obj.GetUID())
	created := g.obj.GetCreationTimestamp().UnixNano()
	mineRouted := routesNow(g.status, g.obj.GetGeneration())
	for _, c := range claims {
		if c.uid == self {
			continue
		}
		older := c.created < created || (c.created == created && c.uid < self)
		if c.routed != mineRouted {
			older = c.routed
		}
		if !older {
			continue
		}
		for _, s := range c.subnets {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				continue
			}
			m, ok := set.overlap(p)
			if !ok {
				continue
			}
			set.detail(m, "another gateway's routed subnet", c.who+" "+p.String())
			// A gateway of this namespace is the tenant's own and may be named; another
			// namespace's is another tenant's.
			if c.ns == g.obj.GetNamespace() {
				return fmt.Sprintf("routed subnet %s overlaps %s, routed to %s (the gateway that routes it first keeps it)", m, p, c.who)
			}
			return fmt.Sprintf("routed subnet %s overlaps a subnet routed to a gateway in another namespace (the gateway that routes it first keeps it)", m)
		}
	}
	return ""
}

// peerAddresses lists a gateway's tunnels' peer addresses, or (wg set) its WireGuard
// peers' fixed endpoints.
func peerAddresses(spec *v1alpha1.GatewaySpec, wg *v1alpha1.WireGuardSpec) []string {
	var out []string
	for _, t := range spec.Tunnels {
		out = append(out, t.Peer.Address)
	}
	if wg != nil {
		for _, p := range wg.Peers {
			if p.Endpoint != nil {
				out = append(out, p.Endpoint.Address)
			}
		}
	}
	return out
}

// routerNetworks are the subnets attached to the operator's router (its interfaces and
// its external gateway) and the external network's subnets. Subnet CIDRs never change,
// so each is read once per process.
func (r *Reconciler) routerNetworks(ctx context.Context, rt *openstack.Router) ([]netip.Prefix, error) {
	var ids []string
	if rt != nil {
		ports, err := r.net().ListPorts(ctx, openstack.ListPortsOpts{DeviceID: rt.ID})
		if err != nil {
			return nil, fmt.Errorf("listing the router's ports: %w", err)
		}
		for _, p := range ports {
			for _, ip := range p.FixedIPs {
				ids = append(ids, ip.SubnetID)
			}
		}
	}
	var out []netip.Prefix
	if r.Config.ExternalNetwork != "" {
		ext, err := r.externalNetworkID(ctx)
		if err != nil {
			return nil, err
		}
		subs, err := r.net().ListSubnets(ctx, ext)
		if err != nil {
			return nil, fmt.Errorf("listing the external network's subnets: %w", err)
		}
		for _, s := range subs {
			if p, err := netip.ParsePrefix(s.CIDR); err == nil {
				out = append(out, p.Masked())
			}
		}
	}
	for _, id := range ids {
		p, err := r.subnetCIDR(ctx, id)
		if err != nil {
			return nil, err
		}
		if p.IsValid() {
			out = append(out, p)
		}
	}
	return out, nil
}

// subnetCIDR reads a subnet's CIDR, once per process.
func (r *Reconciler) subnetCIDR(ctx context.Context, id string) (netip.Prefix, error) {
	r.resolveMu.Lock()
	p, ok := r.subnets[id]
	r.resolveMu.Unlock()
	if ok {
		return p, nil
	}
	sn, err := r.net().GetSubnet(ctx, id)
	if openstack.IsNotFound(err) {
		return netip.Prefix{}, nil
	}
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("reading subnet %s: %w", id, err)
	}
	p, _ = netip.ParsePrefix(sn.CIDR)
	p = p.Masked()
	r.resolveMu.Lock()
	if r.subnets == nil {
		r.subnets = map[string]netip.Prefix{}
	}
	r.subnets[id] = p
	r.resolveMu.Unlock()
	return p, nil
}

// routesNow: the gateway's RoutingReady is True for its current generation with its
// routed destinations in place (not NotRequired).
func routesNow(st *v1alpha1.GatewayStatus, gen int64) bool {
	c := conditions.Get(st.Conditions, v1alpha1.ConditionRoutingReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == gen && c.Reason != v1alpha1.ReasonNotRequired
}
