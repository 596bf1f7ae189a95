package clusterlink

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/controller/outcome"
	"bnerd.net/vpn-operator/internal/openstack"
)

// operatorRouter resolves the gateway cluster's own router.
func (r *Reconciler) operatorRouter(ctx context.Context) (*openstack.Router, error) {
	if r.d.Config.Router == "" {
		return nil, fmt.Errorf("no gateway cluster router is configured (IPSEC_ROUTER_ID)")
	}
	// The configured name is resolved once per process, then the router is read by ID
	// (one object, not a filtered list); a router that vanished is resolved again.
	r.netMu.Lock()
	id := r.opRouterID
	r.netMu.Unlock()
	if id != "" {
		rt, err := r.d.Operator.Networking.GetRouter(ctx, id)
		if err == nil || !openstack.IsNotFound(err) {
			if err != nil {
				return nil, fmt.Errorf("reading the gateway cluster's router %s: %w", id, err)
			}
			return rt, nil
		}
	}
	rt, err := r.d.Operator.Networking.ResolveRouter(ctx, r.d.Config.Router)
	if err != nil {
		return nil, fmt.Errorf("resolving the gateway cluster's router %q: %w", r.d.Config.Router, err)
	}
	r.netMu.Lock()
	r.opRouterID = rt.ID
	r.netMu.Unlock()
	return rt, nil
}

// removeForwardRoutes removes every route on the gateway cluster's router whose next
// hop is via (this link's transit IP), touching the router only when one exists.
func (r *Reconciler) removeForwardRoutes(ctx context.Context, lc *linkCtx, via string) error {
	if via == "" {
		return nil
	}
	rt, err := r.operatorRouter(ctx)
	if err != nil {
		if openstack.IsNotFound(err) {
			return nil
		}
		return err
	}
	var drop []openstack.Route
	for _, x := range rt.Routes {
		if x.NextHop == via {
			drop = append(drop, x)
		}
	}
	if len(drop) == 0 {
		return nil
	}
	// Once the leg no longer holds the address, Neutron may have given it to another
	// port, say a gateway's whose own route goes via it: then only this link's route
	// goes. (The router was read first: a route via the address that another port's
	// owner added is on that list only if that port held the address before this
	// check.)
	other, err := r.addressHeldByOther(ctx, lc, via)
	if err != nil {
		return err
	}
	if other != "" {
		drop = slices.DeleteFunc(drop, func(x openstack.Route) bool { return x.Destination != lc.link.Spec.ServiceClusterCIDR })
		if len(drop) == 0 {
			return nil
		}
	}
	if _, err := r.d.Operator.Networking.RemoveRouterRoutes(ctx, rt.ID, drop); err != nil && !openstack.IsNotFound(err) {
		return err
	}
	lc.eventf(corev1.EventTypeNormal, "RouteRemoved", "removed %s from router %s", describeRoutes(drop), rt.Name)
	return nil
}

// addressHeldByOther returns the ID of a port on the transit network that holds addr
// and is not this link's leg ("" when there is none).
func (r *Reconciler) addressHeldByOther(ctx context.Context, lc *linkCtx, addr string) (string, error) {
	tn := lc.tn
	if tn == nil {
		var err error
		if tn, err = r.transitNetwork(ctx); err != nil {
			return "", err
		}
	}
	ports, err := r.d.Operator.Networking.ListPorts(ctx, openstack.ListPortsOpts{NetworkID: tn.network.ID, IPAddress: addr})
	if err != nil {
		return "", err
	}
	own := owner(lc.link)
	for _, p := range ports {
		if !own.OwnedBy(p.Tags) {
			return p.ID, nil
		}
	}
	return "", nil
}

// ensureForwardRoute keeps serviceClusterCIDR via the transit IP on the gateway
// cluster's router, and drops routes via the transit IP to any other destination (a
// changed serviceClusterCIDR).
func (r *Reconciler) ensureForwardRoute(ctx context.Context, lc *linkCtx) (bool, error) {
	link := lc.link
	fail := func(err error) (bool, error) {
		lc.set.False(v1.ConditionRouteInstalled, v1.ReasonEnsureRouteFailed, lc.opPrefix()+outcome.Describe(err))
		return false, err
	}
	rt, err := r.operatorRouter(ctx)
	if err != nil {
		return fail(err)
	}
	want := openstack.Route{Destination: link.Spec.ServiceClusterCIDR, NextHop: link.Status.TransitIP}
	var stale []openstack.Route
	for _, x := range rt.Routes {
		if x.NextHop == want.NextHop && x.Destination != want.Destination {
			stale = append(stale, x)
		}
	}
	if len(stale) > 0 {
		if _, err := r.d.Operator.Networking.RemoveRouterRoutes(ctx, rt.ID, stale); err != nil {
			return fail(err)
		}
		lc.eventf(corev1.EventTypeNormal, "RouteRemoved", "removed stale %s from router %s", describeRoutes(stale), rt.Name)
	}
	if !rt.HasRoute(want) {
		if _, err := r.d.Operator.Networking.AddRouterRoutes(ctx, rt.ID, []openstack.Route{want}); err != nil {
			return fail(err)
		}
		lc.eventf(corev1.EventTypeNormal, "RouteInstalled", "added %s to router %s", describeRoutes([]openstack.Route{want}), rt.Name)
	}
	lc.set.True(v1.ConditionRouteInstalled, v1.ReasonRouteInstalled,
		fmt.Sprintf("%s via %s on router %s", want.Destination, want.NextHop, rt.Name))
	return true, nil
}

func describeRoutes(rs []openstack.Route) string {
	parts := make([]string, 0, len(rs))
	for _, x := range rs {
		parts = append(parts, x.Destination+" via "+x.NextHop)
	}
	return "route(s) " + strings.Join(parts, ", ")
}

// GatewayRef names a gateway in status.reverseRoutes[].gatewayRef.
func GatewayRef(kind, namespace, name string) string { return kind + "/" + namespace + "/" + name }

// reverseTarget is what a gateway contributes to reverse routing, or ok=false when it
// contributes nothing (no reverse exposures, not yet allocated, or being deleted).
func reverseTarget(spec *v1.GatewaySpec, st *v1.GatewayStatus, deleting bool) (openstack.Route, bool) {
	if deleting || len(spec.ReverseExposures) == 0 {
		return openstack.Route{}, false
	}
	pfx, err := netip.ParsePrefix(st.ServiceCIDR)
	if err != nil || !pfx.Addr().Is4() {
		return openstack.Route{}, false
	}
	nh, err := netip.ParseAddr(st.PortFixedIP)
	if err != nil || !nh.Is4() {
		return openstack.Route{}, false
	}
	return openstack.Route{Destination: pfx.Masked().String(), NextHop: nh.String()}, true
}

// desiredReverse lists every gateway of both kinds in every namespace that carries
// reverse exposures, sorted by reference.
func (r *Reconciler) desiredReverse(ctx context.Context) ([]v1.ReverseRoute, error) {
	var out []v1.ReverseRoute
	// Every link reads every gateway on every reconcile: the cache's own objects are
	// read, not copied (nothing here writes to them). With a thousand gateways the
	// copies were most of the operator's CPU and garbage.
	var ipsec v1.IPsecGatewayList
	if err := r.d.Client.List(ctx, &ipsec, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	for i := range ipsec.Items {
		g := &ipsec.Items[i]
		if rt, ok := reverseTarget(&g.Spec, &g.Status, !g.DeletionTimestamp.IsZero()); ok {
			out = append(out, v1.ReverseRoute{ServiceCIDR: rt.Destination, NextHop: rt.NextHop, GatewayRef: GatewayRef("IPsecGateway", g.Namespace, g.Name)})
		}
	}
	var vpn v1.VPNGatewayList
	if err := r.d.Client.List(ctx, &vpn, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	for i := range vpn.Items {
		g := &vpn.Items[i]
		if rt, ok := reverseTarget(&g.Spec.GatewaySpec, &g.Status, !g.DeletionTimestamp.IsZero()); ok {
			out = append(out, v1.ReverseRoute{ServiceCIDR: rt.Destination, NextHop: rt.NextHop, GatewayRef: GatewayRef("VPNGateway", g.Namespace, g.Name)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GatewayRef < out[j].GatewayRef })
	return out, nil
}

func routeOf(x v1.ReverseRoute) openstack.Route {
	return openstack.Route{Destination: x.ServiceCIDR, NextHop: x.NextHop}
}

// ensureReverseRoutes converges, on the service cluster's router, one route per
// reverse-exposure-bearing gateway. Only the difference is written, in at most one
// atomic remove and one atomic add; a converged router costs no write.
func (r *Reconciler) ensureReverseRoutes(ctx context.Context, lc *linkCtx) (bool, error) {
	tn := lc.tn
	link := lc.link
	if !lc.attached {
		lc.set.False(v1.ConditionReverseRoutesInstalled, v1.ReasonEnsureReverseRoutesFailed, "the leg is not attached, so the service cluster's router cannot reach any gateway port")
		return false, nil
	}
	desired, err := r.desiredReverse(ctx)
	if err != nil {
		lc.set.False(v1.ConditionReverseRoutesInstalled, v1.ReasonEnsureReverseRoutesFailed, "listing gateways: "+outcome.Describe(err))
		return false, err
	}
	// A next hop off the transit subnet cannot be routed from the leg; say so rather
	// than let Neutron refuse the whole batch.
	var skipped []string
	usable := desired[:0:0]
	for _, d := range desired {
		if a, err := netip.ParseAddr(d.NextHop); err != nil || !tn.prefix.Contains(a) {
			skipped = append(skipped, d.GatewayRef)
			continue
		}
		usable = append(usable, d)
	}
	desired = usable

	have := map[openstack.Route]bool{}
	for _, x := range lc.router.Routes {
		have[x] = true
	}
	want := map[openstack.Route]bool{}
	var add []openstack.Route
	for _, d := range desired {
		rt := routeOf(d)
		if want[rt] {
			continue
		}
		want[rt] = true
		if !have[rt] {
			add = append(add, rt)
		}
	}
	var remove []openstack.Route
	seen := map[openstack.Route]bool{}
	for _, o := range link.Status.ReverseRoutes {
		rt := routeOf(o)
		if !want[rt] && have[rt] && !seen[rt] {
			remove = append(remove, rt)
			seen[rt] = true
		}
	}

	net := lc.leg.Networking
	var failure error
	if len(remove) > 0 {
		upd, err := net.RemoveRouterRoutes(ctx, lc.router.ID, remove)
		if err != nil {
			failure = fmt.Errorf("removing stale reverse %s: %w", describeRoutes(remove), err)
		} else {
			lc.router = upd
			lc.eventf(corev1.EventTypeNormal, "ReverseRoutesRemoved", "removed reverse %s from router %s", describeRoutes(remove), lc.router.Name)
		}
	}
	addUnanswered := false
	if failure == nil && len(add) > 0 {
		// Persist before programming: the routes about to be added are recorded first,
		// so a crash or a lost status write after the router write cannot leave a route
		// this link no longer knows it owns (one that would outlive its gateway, and
		// block the leg's detach on deletion).
		if err := r.recordReverse(ctx, lc, desired, add); err != nil {
			return false, err
		}
		upd, err := net.AddRouterRoutes(ctx, lc.router.ID, add)
		if err != nil {
			addUnanswered = openstack.StatusCode(err) == 0
			failure = fmt.Errorf("adding reverse %s: %w", describeRoutes(add), err)
		} else {
			lc.router = upd
			lc.eventf(corev1.EventTypeNormal, "ReverseRoutesInstalled", "added reverse %s to router %s", describeRoutes(add), lc.router.Name)
		}
	}

	// Status records what is on the router and ours: every desired route present, and
	// every formerly owned route that could not be removed yet (so deletion finds it).
	now := map[openstack.Route]bool{}
	for _, x := range lc.router.Routes {
		now[x] = true
	}
	if addUnanswered {
		// Without an answer (a timeout, a broken connection) the routes may have been
		// added: they stay on record until a read of the router shows them absent. A
		// refusal is an answer: nothing was added.
		for _, x := range add {
			now[x] = true
		}
	}
	var recorded []v1.ReverseRoute
	for _, d := range desired {
		if now[routeOf(d)] {
			recorded = append(recorded, d)
		}
	}
	for _, o := range link.Status.ReverseRoutes {
		if rt := routeOf(o); !want[rt] && now[rt] {
			recorded = append(recorded, o)
		}
	}
	link.Status.ReverseRoutes = recorded

	if failure != nil {
		lc.set.False(v1.ConditionReverseRoutesInstalled, v1.ReasonEnsureReverseRoutesFailed, lc.legPrefix()+outcome.Describe(failure))
		return false, failure
	}
	msg := "no gateway has reverse exposures"
	if n := len(recorded); n > 0 {
		msg = fmt.Sprintf("%d reverse route(s) on router %s to gateways with reverse exposures", n, lc.router.Name)
	}
	if len(skipped) > 0 {
		msg += "; skipped (port not on the transit subnet): " + strings.Join(skipped, ", ")
	}
	lc.set.True(v1.ConditionReverseRoutesInstalled, v1.ReasonReverseRoutesInstalled, msg)
	return true, nil
}

// recordReverse adds the desired entries for routes (not yet on the router) to
// status.reverseRoutes and writes the status.
func (r *Reconciler) recordReverse(ctx context.Context, lc *linkCtx, desired []v1.ReverseRoute, routes []openstack.Route) error {
	st := &lc.link.Status
	have := map[v1.ReverseRoute]bool{}
	for _, x := range st.ReverseRoutes {
		have[x] = true
	}
	adding := map[openstack.Route]bool{}
	for _, x := range routes {
		adding[x] = true
	}
	changed := false
	for _, d := range desired {
		if adding[routeOf(d)] && !have[d] {
			st.ReverseRoutes = append(st.ReverseRoutes, d)
			have[d] = true
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return r.persist(ctx, lc)
}

// removeReverseRoutes removes the routes status.reverseRoutes records, if present.
func removeReverseRoutes(ctx context.Context, net openstack.Networking, rt *openstack.Router, owned []v1.ReverseRoute) error {
	have := map[openstack.Route]bool{}
	for _, x := range rt.Routes {
		have[x] = true
	}
	var drop []openstack.Route
	for _, o := range owned {
		if x := routeOf(o); have[x] {
			drop = append(drop, x)
			have[x] = false
		}
	}
	if len(drop) == 0 {
		return nil
	}
	_, err := net.RemoveRouterRoutes(ctx, rt.ID, drop)
	return err
}

// linkRequests maps any event onto every ClusterLink: a ClusterLink has no reference to
// the gateways that need its reverse routes, so a change to one fans out to all.
func (r *Reconciler) linkRequests(ctx context.Context, _ client.Object) []ctrl.Request {
	var list v1.ClusterLinkList
	if err := r.d.Client.List(ctx, &list); err != nil {
		return nil
	}
	out := make([]ctrl.Request, 0, len(list.Items))
	for _, l := range list.Items {
		out = append(out, ctrl.Request{NamespacedName: client.ObjectKey{Name: l.Name}})
	}
	return out
}
