package gateway

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
)

// needsRouting: reverse exposures need the service CIDR routed to the port (routed-mode
// tunnels will too, once implemented).
func needsRouting(g *gateway) bool { return len(g.spec.ReverseExposures) > 0 }

func hasPair(p *openstack.Port, ip string) bool {
	for _, ap := range p.AllowedAddressPairs {
		if ap.IPAddress == ip {
			return true
		}
	}
	return false
}

// ensureRouting programs (or removes) the allowed-address pair for the service CIDR on
// the port and the route to it via the port on the operator's router. The pair goes on
// before the route and comes off after it, so "pair absent" proves "route absent" and a
// gateway without reverse exposures costs no router read.
func (r *Reconciler) ensureRouting(ctx context.Context, g *gateway) (bool, error) {
	log := logr.FromContextOrDiscard(ctx)
	fail := func(err error) (bool, error) {
		r.condFailed(g, v1alpha1.ConditionRoutingReady, v1alpha1.ReasonRoutingFailed, err)
		return false, err
	}
	cidr, fixed := g.status.ServiceCIDR, g.status.PortFixedIP
	want := openstack.Route{Destination: cidr, NextHop: fixed}

	if !needsRouting(g) {
		if hasPair(g.port, cidr) {
			if r.Config.Router != "" {
				routerID, err := r.operatorRouterID(ctx)
				if err != nil {
					return fail(err)
				}
				rt, err := r.net().GetRouter(ctx, routerID)
				if err != nil {
					return fail(err)
				}
				if stale := routesTo(rt, cidr); len(stale) > 0 {
					if _, err := r.net().RemoveRouterRoutes(ctx, routerID, stale); err != nil && !openstack.IsNotFound(err) {
						return fail(err)
					}
				}
			}
			p, err := r.net().UpdatePortAllowedAddressPairs(ctx, g.port.ID, withoutPair(g.port.AllowedAddressPairs, cidr))
			if err != nil {
				return fail(err)
			}
			g.port = p
		}
		r.condTrue(g, v1alpha1.ConditionRoutingReady, v1alpha1.ReasonNotRequired, "no reverse exposures: nothing is routed to the service CIDR")
		return true, nil
	}

	routerID, err := r.operatorRouterID(ctx)
	if err != nil {
		return fail(err)
	}
	if !hasPair(g.port, cidr) {
		pairs := append(append([]openstack.AddressPair(nil), g.port.AllowedAddressPairs...), openstack.AddressPair{IPAddress: cidr})
		p, err := r.net().UpdatePortAllowedAddressPairs(ctx, g.port.ID, pairs)
		if err != nil {
			return fail(err)
		}
		g.port = p
	}
	rt, err := r.net().GetRouter(ctx, routerID)
	if err != nil {
		return fail(err)
	}
	var stale []openstack.Route
	for _, x := range routesTo(rt, cidr) {
		if x != want {
			stale = append(stale, x)
		}
	}
	if len(stale) > 0 {
		// A replaced port left a route via its old address.
		if _, err := r.net().RemoveRouterRoutes(ctx, routerID, stale); err != nil {
			return fail(err)
		}
	}
	if !rt.HasRoute(want) {
		if _, err := r.net().AddRouterRoutes(ctx, routerID, []openstack.Route{want}); err != nil {
			return fail(err)
		}
	}
	msg := fmt.Sprintf("%s is routed via %s on router %s and allowed on port %s", cidr, fixed, routerID, g.port.ID)
	if len(r.Config.InternalSourceCIDRs) == 0 {
		log.Info("WARNING: the gateway has reverse exposures but no internal source CIDRs are configured (IPSEC_INTERNAL_SOURCE_CIDRS): its security group does not admit fabric-side initiators, so reverse exposures are routed but unreachable")
		r.condTrue(g, v1alpha1.ConditionRoutingReady, v1alpha1.ReasonInternalSourcesMissing,
			msg+"; but the security-group half is missing: no internal source CIDRs are configured (IPSEC_INTERNAL_SOURCE_CIDRS), so the gateway's security group admits no fabric-side initiator")
		return true, nil
	}
	r.condTrue(g, v1alpha1.ConditionRoutingReady, v1alpha1.ReasonRoutingReady, msg)
	return true, nil
}

func routesTo(rt *openstack.Router, dest string) []openstack.Route {
	var out []openstack.Route
	for _, x := range rt.Routes {
		if x.Destination == dest {
			out = append(out, x)
		}
	}
	return out
}

func withoutPair(pairs []openstack.AddressPair, ip string) []openstack.AddressPair {
	out := []openstack.AddressPair{}
	for _, p := range pairs {
		if p.IPAddress != ip {
			out = append(out, p)
		}
	}
	return out
}
