package gateway

import (
	"context"
	"fmt"
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
// subnet that would capture someone else's traffic is refused before anything changes.
func (r *Reconciler) ensureRouting(ctx context.Context, g *gateway) (bool, error) {
	log := logr.FromContextOrDiscard(ctx)
	fail := func(err error) (bool, error) {
		r.condFailed(g, v1alpha1.ConditionRoutingReady, v1alpha1.ReasonRoutingFailed, err)
		return false, err
	}
	cidr, fixed := g.status.ServiceCIDR, g.status.PortFixedIP
	routed := routedSubnets(g.spec)
	if len(routed) > 0 {
		conflict, err := r.routedConflict(ctx, g, routed)
		if err != nil {
			return fail(err)
		}
		if conflict != "" {
			r.condFalse(g, v1alpha1.ConditionRoutingReady, v1alpha1.ReasonRoutedSubnetConflict, conflict)
			return false, nil
		}
	}
	want := routedDestinations(g)
	wanted := map[string]bool{}
	for _, d := range want {
		wanted[d] = true
	}
	var stalePairs []string
	for _, ap := range g.port.AllowedAddressPairs {
		if !wanted[ap.IPAddress] {
			stalePairs = append(stalePairs, ap.IPAddress)
		}
	}
	if len(want) == 0 && len(stalePairs) == 0 {
		r.condTrue(g, v1alpha1.ConditionRoutingReady, v1alpha1.ReasonNotRequired, "no reverse exposures and no routed tunnels: nothing is routed to the gateway")
		return true, nil
	}

	routerID := ""
	if r.Config.Router != "" || len(want) > 0 {
		var err error
		if routerID, err = r.operatorRouterID(ctx); err != nil {
			return fail(err)
		}
	}
	// Pairs first: the port must accept a destination before the router sends it there.
	var missing []openstack.AddressPair
	for _, d := range want {
		if !hasPair(g.port, d) {
			missing = append(missing, openstack.AddressPair{IPAddress: d})
		}
	}
	if len(missing) > 0 {
		p, err := r.net().UpdatePortAllowedAddressPairs(ctx, g.port.ID, append(append([]openstack.AddressPair(nil), g.port.AllowedAddressPairs...), missing...))
		if err != nil {
			return fail(err)
		}
		g.port = p
	}
	if routerID != "" {
		rt, err := r.net().GetRouter(ctx, routerID)
		if err != nil {
			return fail(err)
		}
		var stale, add []openstack.Route
		for _, x := range rt.Routes {
			switch {
			case x.NextHop == fixed && !wanted[x.Destination]:
				// A tunnel left routed mode, or the reverse exposures are gone.
				stale = append(stale, x)
			case wanted[x.Destination] && x.NextHop != fixed:
				// A replaced port left a route via its old address (the destination is
				// this gateway's: the service CIDR is allocated to it, a routed subnet
				// passed the conflict check).
				stale = append(stale, x)
			case x.Destination == cidr && x.NextHop != fixed:
				stale = append(stale, x)
			}
		}
		for _, d := range want {
			if rx := (openstack.Route{Destination: d, NextHop: fixed}); !rt.HasRoute(rx) {
				add = append(add, rx)
			}
		}
		if len(stale) > 0 {
			log.Info("removing routes the gateway no longer needs", "router", routerID, "routes", fmt.Sprint(stale))
			if _, err := r.net().RemoveRouterRoutes(ctx, routerID, stale); err != nil && !openstack.IsNotFound(err) {
				return fail(err)
			}
		}
		if len(add) > 0 {
			if _, err := r.net().AddRouterRoutes(ctx, routerID, add); err != nil {
				return fail(err)
			}
		}
	}
	// Pairs last off: a route is gone before its pair.
	if len(stalePairs) > 0 {
		keep := []openstack.AddressPair{}
		for _, ap := range g.port.AllowedAddressPairs {
			if wanted[ap.IPAddress] {
				keep = append(keep, ap)
			}
		}
		p, err := r.net().UpdatePortAllowedAddressPairs(ctx, g.port.ID, keep)
		if err != nil {
			return fail(err)
		}
		g.port = p
	}
	if len(want) == 0 {
		r.condTrue(g, v1alpha1.ConditionRoutingReady, v1alpha1.ReasonNotRequired, "no reverse exposures and no routed tunnels: nothing is routed to the gateway")
		return true, nil
	}

	msg := fmt.Sprintf("%s routed via %s on router %s and allowed on port %s", strings.Join(want, ", "), fixed, routerID, g.port.ID)
	if len(want) == 1 {
		msg = fmt.Sprintf("%s is routed via %s on router %s and allowed on port %s", want[0], fixed, routerID, g.port.ID)
	}
	if len(r.Config.InternalSourceCIDRs) == 0 {
		what := "reverse exposures"
		if len(routed) > 0 {
			what = "routed tunnels"
			if len(g.spec.ReverseExposures) > 0 {
				what = "reverse exposures and routed tunnels"
			}
		}
		log.Info("WARNING: the gateway has " + what + " but no internal source CIDRs are configured (IPSEC_INTERNAL_SOURCE_CIDRS): its security group does not admit fabric-side initiators, so they are routed but unreachable")
		r.condTrue(g, v1alpha1.ConditionRoutingReady, v1alpha1.ReasonInternalSourcesMissing,
			msg+"; but the security-group half is missing: no internal source CIDRs are configured (IPSEC_INTERNAL_SOURCE_CIDRS), so the gateway's security group admits no fabric-side initiator"+
				map[bool]string{true: " and the gateway forwards nothing between the fabric and the routed subnets", false: ""}[len(routed) > 0])
		return true, nil
	}
	r.condTrue(g, v1alpha1.ConditionRoutingReady, v1alpha1.ReasonRoutingReady, msg)
	return true, nil
}
