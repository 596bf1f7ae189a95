package gateway

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/go-logr/logr"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
)

// needsRouting: reverse exposures need the service CIDR routed to the port, routed-mode
// tunnels their subnets.
func needsRouting(g *gateway) bool {
	return len(g.spec.ReverseExposures) > 0 || len(routedSubnets(g.spec)) > 0
}

// routedDestinations are the networks routed to the gateway's port, each also an
// allowed-address pair on it: the service CIDR while there are reverse exposures, and
// every routed tunnel's subnets.
func routedDestinations(g *gateway) []string {
	var out []string
	if len(g.spec.ReverseExposures) > 0 {
		out = append(out, g.status.ServiceCIDR)
	}
	return append(out, routedSubnets(g.spec)...)
}

func hasPair(p *openstack.Port, ip string) bool {
	for _, ap := range p.AllowedAddressPairs {
		if ap.IPAddress == ip {
			return true
		}
	}
	return false
}

// ensureRouting programs (or removes) the allowed-address pairs and the routes via the
// port on the operator's router for the service CIDR (reverse exposures) and the subnets
// of routed-mode tunnels. A pair goes on before its route and comes off after it, so "no
// pair" proves "no route" and a gateway without either costs no router read. A routed
// subnet outside the tenant's routed ranges, or one that would capture someone else's
// traffic, is refused, and what the gateway had routed for its routed tunnels is
// withdrawn (the service CIDR of its reverse exposures stays). A route the gateway did
// not install is never removed or replaced.
func (r *Reconciler) ensureRouting(ctx context.Context, g *gateway) (bool, error) {
	fail := func(err error) (bool, error) {
		r.condFailed(g, v1alpha1.ConditionRoutingReady, v1alpha1.ReasonRoutingFailed, err)
		return false, err
	}
	routed := routedSubnets(g.spec)
	want := routedDestinations(g)
	if len(want) == 0 && len(g.port.AllowedAddressPairs) == 0 {
		r.condTrue(g, v1alpha1.ConditionRoutingReady, v1alpha1.ReasonNotRequired, "no reverse exposures and no routed tunnels: nothing is routed to the gateway")
		return true, nil
	}
	rt, routerID, err := r.gatewayRouter(ctx, len(want) > 0)
	if err != nil {
		return fail(err)
	}
	if len(routed) > 0 {
		reason, why, err := r.routedRefusal(ctx, g, routed, rt)
		if err != nil {
			return fail(err)
		}
		if reason != "" {
			// Withdraw the routed subnets; the service CIDR keeps its route while there
			// are reverse exposures.
			keep := want[:0:0]
			if len(g.spec.ReverseExposures) > 0 {
				keep = append(keep, g.status.ServiceCIDR)
			}
			if err := r.convergeRoutes(ctx, g, rt, keep); err != nil {
				return fail(err)
			}
			r.condFalse(g, v1alpha1.ConditionRoutingReady, reason, why)
			return false, nil
		}
	}
	if err := r.convergeRoutes(ctx, g, rt, want); err != nil {
		return fail(err)
	}
	if len(want) == 0 {
		r.condTrue(g, v1alpha1.ConditionRoutingReady, v1alpha1.ReasonNotRequired, "no reverse exposures and no routed tunnels: nothing is routed to the gateway")
		return true, nil
	}

	reason, msg := r.routingReady(ctx, g, want, routerID)
	r.condTrue(g, v1alpha1.ConditionRoutingReady, reason, msg)
	return true, nil
}

// gatewayRouter is the gateway cluster's router, read when one is configured or the
// gateway has destinations to route ("" and nil otherwise).
func (r *Reconciler) gatewayRouter(ctx context.Context, routes bool) (*openstack.Router, string, error) {
	if r.Config.Router == "" && !routes {
		return nil, "", nil
	}
	routerID, err := r.operatorRouterID(ctx)
	if err != nil || routerID == "" {
		return nil, routerID, err
	}
	// Gateways reconciling at the same moment (a burst of new ones, the pass after a
	// restart) share a read that started after each asked: the router carries a route
	// per reverse-exposure gateway, so a read per gateway decoded the whole estate's
	// routes each time. The router is read-only to its sharers.
	rt, err := r.routerReads.Do(ctx, routerID, func(ctx context.Context) (*openstack.Router, error) {
		return r.net().GetRouter(ctx, routerID)
	})
	if err != nil {
		return nil, routerID, err
	}
	return rt, routerID, nil
}

// routingReady is RoutingReady's reason and message once the routes are in place:
// RoutingReady, or InternalSourcesMissing when the security-group half is missing
// (reverse exposures need a reverse source, an internal source CIDR or a ClusterLink
// serving the gateway; routed tunnels an internal source CIDR).
func (r *Reconciler) routingReady(ctx context.Context, g *gateway, want []string, routerID string) (reason, msg string) {
	fixed := g.status.PortFixedIP
	routed := routedSubnets(g.spec)
	msg = fmt.Sprintf("%s routed via %s on router %s and allowed on port %s", strings.Join(want, ", "), fixed, routerID, g.port.ID)
	if len(want) == 1 {
		msg = fmt.Sprintf("%s is routed via %s on router %s and allowed on port %s", want[0], fixed, routerID, g.port.ID)
	}
	internal := r.internalSources(g)
	var unadmitted []string
	if len(g.spec.ReverseExposures) > 0 && len(r.reverseSources(g)) == 0 {
		unadmitted = append(unadmitted, "reverse exposures")
	}
	if len(routed) > 0 && len(internal) == 0 {
		unadmitted = append(unadmitted, "routed tunnels")
	}
	if len(unadmitted) > 0 {
		what := strings.Join(unadmitted, " and ")
		logr.FromContextOrDiscard(ctx).Info("WARNING: the gateway has " + what + " but no internal source CIDRs are configured outside the gateway network (IPSEC_INTERNAL_SOURCE_CIDRS) and no ClusterLink serves it: its security group does not admit fabric-side initiators, so they are routed but unreachable")
		return v1alpha1.ReasonInternalSourcesMissing,
			msg + "; but the security-group half is missing for its " + what + ": no internal source CIDRs are configured outside the gateway network (IPSEC_INTERNAL_SOURCE_CIDRS)" +
				map[bool]string{true: " and no ClusterLink serves this gateway", false: ""}[len(g.spec.ReverseExposures) > 0] +
				", so the gateway's security group admits no fabric-side initiator" +
				map[bool]string{true: " and the gateway forwards nothing between the fabric and the routed subnets", false: ""}[len(routed) > 0 && len(internal) == 0]
	}
	return v1alpha1.ReasonRoutingReady, msg
}

// convergeRoutes makes want the destinations routed via the port (and allowed on it):
// pairs go on before routes and come off after them. Only routes via the port's address
// are removed, and a route to the gateway's own service CIDR via another address (a
// replaced port's: the /24 is allocated to this gateway, and no routed subnet may
// overlap the pool); a route to a routed subnet via another address is never touched
// (routedRefusal reports it as a conflict).
func (r *Reconciler) convergeRoutes(ctx context.Context, g *gateway, rt *openstack.Router, want []string) error {
	wanted := map[string]bool{}
	for _, d := range want {
		wanted[d] = true
	}
	stalePairs := slices.ContainsFunc(g.port.AllowedAddressPairs, func(ap openstack.AddressPair) bool { return !wanted[ap.IPAddress] })
	// Pairs first: the port must accept a destination before the router sends it there.
	var missing []openstack.AddressPair
	for _, d := range want {
		if !hasPair(g.port, d) {
			missing = append(missing, openstack.AddressPair{IPAddress: d})
		}
	}
	if len(missing) > 0 {
		p, err := r.net().UpdatePortAllowedAddressPairs(ctx, g.port.ID, append(slices.Clone(g.port.AllowedAddressPairs), missing...))
		if err != nil {
			return err
		}
		g.port = p
	}
	if rt != nil {
		stale, add := routeDiff(rt, want, g.status.ServiceCIDR, g.status.PortFixedIP)
		if len(stale) > 0 {
			logr.FromContextOrDiscard(ctx).Info("removing routes the gateway no longer needs", "router", rt.ID, "routes", fmt.Sprint(stale))
			if _, err := r.net().RemoveRouterRoutes(ctx, rt.ID, stale); err != nil && !openstack.IsNotFound(err) {
				return err
			}
		}
		if len(add) > 0 {
			if _, err := r.net().AddRouterRoutes(ctx, rt.ID, add); err != nil {
				return err
			}
		}
	}
	// Pairs last off: a route is gone before its pair.
	if stalePairs {
		keep := []openstack.AddressPair{}
		for _, ap := range g.port.AllowedAddressPairs {
			if wanted[ap.IPAddress] {
				keep = append(keep, ap)
			}
		}
		p, err := r.net().UpdatePortAllowedAddressPairs(ctx, g.port.ID, keep)
		if err != nil {
			return err
		}
		g.port = p
	}
	return nil
}

// routeDiff is what the router must lose and gain so that exactly want is routed via the
// gateway's fixed IP: a route via that IP to anything else goes (a tunnel left routed
// mode, the reverse exposures are gone, or a refused subnet is withdrawn), as does a
// route to the gateway's service CIDR via any other hop; routes of others stay.
func routeDiff(rt *openstack.Router, want []string, serviceCIDR, fixedIP string) (stale, add []openstack.Route) {
	wanted := map[string]bool{}
	for _, d := range want {
		wanted[d] = true
	}
	for _, x := range rt.Routes {
		switch {
		case x.NextHop == fixedIP && !wanted[x.Destination]:
			stale = append(stale, x)
		case x.Destination == serviceCIDR && wanted[serviceCIDR] && x.NextHop != fixedIP:
			stale = append(stale, x)
		}
	}
	for _, d := range want {
		if rx := (openstack.Route{Destination: d, NextHop: fixedIP}); !rt.HasRoute(rx) {
			add = append(add, rx)
		}
	}
	return stale, add
}
