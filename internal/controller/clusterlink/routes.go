package clusterlink

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/controller/outcome"
	"bnerd.net/vpn-operator/internal/linkselect"
	"bnerd.net/vpn-operator/internal/openstack"
)

// operatorRouter resolves the gateway cluster's own router.
func (r *Reconciler) operatorRouter(ctx context.Context) (*openstack.Router, error) {
	if r.Config.Router == "" {
		return nil, fmt.Errorf("no gateway cluster router is configured (IPSEC_ROUTER_ID)")
	}
	// The configured name is resolved once per process, then the router is read by ID
	// (one object, not a filtered list); a router that vanished is resolved again.
	r.netMu.Lock()
	id := r.opRouterID
	r.netMu.Unlock()
	if id != "" {
		rt, err := r.OpenStack.Networking.GetRouter(ctx, id)
		if err == nil || !openstack.IsNotFound(err) {
			if err != nil {
				return nil, fmt.Errorf("reading the gateway cluster's router %s: %w", id, err)
			}
			return rt, nil
		}
	}
	rt, err := r.OpenStack.Networking.ResolveRouter(ctx, r.Config.Router)
	if err != nil {
		return nil, fmt.Errorf("resolving the gateway cluster's router %q: %w", r.Config.Router, err)
	}
	r.netMu.Lock()
	r.opRouterID = rt.ID
	r.netMu.Unlock()
	return rt, nil
}

// forwardPair is the one forward route the link's spec and status ask for.
func forwardPair(link *v1alpha1.ClusterLink) (openstack.Route, bool) {
	if link.Status.TransitIP == "" || link.Spec.ServiceClusterCIDR == "" {
		return openstack.Route{}, false
	}
	return openstack.Route{Destination: link.Spec.ServiceClusterCIDR, NextHop: link.Status.TransitIP}, true
}

// ownedForward lists the forward routes this link owns as exact (destination, next
// hop) pairs: the ones status.forwardRoutes records, and the one its spec and status
// ask for (so a route installed before the record existed, or by a release that kept
// no record, is not stranded). Never "every route via the transit IP": once the leg has
// let its address go, Neutron may hand it to a gateway's port, whose own route goes
// via that address to a destination no link ever names (the service-CIDR pool, which a
// serviceClusterCIDR may not overlap).
func ownedForward(link *v1alpha1.ClusterLink) []openstack.Route {
	seen := map[openstack.Route]bool{}
	var out []openstack.Route
	for _, x := range link.Status.ForwardRoutes {
		rt := openstack.Route{Destination: x.Destination, NextHop: x.NextHop}
		if !seen[rt] {
			seen[rt] = true
			out = append(out, rt)
		}
	}
	if rt, ok := forwardPair(link); ok && !seen[rt] {
		out = append(out, rt)
	}
	return out
}

func recordOf(rs []openstack.Route) []v1alpha1.Route {
	if len(rs) == 0 {
		return nil
	}
	out := make([]v1alpha1.Route, 0, len(rs))
	for _, x := range rs {
		out = append(out, v1alpha1.Route{Destination: x.Destination, NextHop: x.NextHop})
	}
	return out
}

// removeForwardRoutes removes the forward routes this link owns (ownedForward) from the
// gateway cluster's router, in one atomic call, touching the router only when one of
// them is there, and clears the record.
func (r *Reconciler) removeForwardRoutes(ctx context.Context, lc *linkCtx) error {
	owned := ownedForward(lc.link)
	if len(owned) == 0 {
		return nil
	}
	rt, err := r.operatorRouter(ctx)
	if err != nil {
		if openstack.IsNotFound(err) {
			lc.link.Status.ForwardRoutes = nil
			return nil
		}
		return err
	}
	var drop []openstack.Route
	for _, x := range owned {
		if rt.HasRoute(x) {
			drop = append(drop, x)
		}
	}
	if len(drop) > 0 {
		if _, err := r.OpenStack.Networking.RemoveRouterRoutes(ctx, rt.ID, drop); err != nil && !openstack.IsNotFound(err) {
			return err
		}
		lc.eventf(corev1.EventTypeNormal, "RouteRemoved", "removed %s from router %s", describeRoutes(drop), rt.Name)
	}
	lc.link.Status.ForwardRoutes = nil
	return nil
}

// ensureForwardRoute keeps serviceClusterCIDR via the transit IP on the gateway
// cluster's router. A route it recorded to another destination (a changed
// serviceClusterCIDR) is removed, as that exact pair and nothing else. The route is
// recorded in status.forwardRoutes before it is added.
func (r *Reconciler) ensureForwardRoute(ctx context.Context, lc *linkCtx) (bool, error) {
	link := lc.link
	fail := func(err error) (bool, error) {
		lc.set.False(v1alpha1.ConditionRouteInstalled, v1alpha1.ReasonEnsureRouteFailed, lc.opPrefix()+outcome.Describe(err))
		return false, err
	}
	rt, err := r.operatorRouter(ctx)
	if err != nil {
		return fail(err)
	}
	want, _ := forwardPair(link)
	var stale []openstack.Route
	for _, x := range link.Status.ForwardRoutes {
		rec := openstack.Route{Destination: x.Destination, NextHop: x.NextHop}
		switch {
		case rec == want:
		case rt.HasRoute(rec):
			stale = append(stale, rec)
		}
	}
	if len(stale) > 0 {
		if _, err := r.OpenStack.Networking.RemoveRouterRoutes(ctx, rt.ID, stale); err != nil {
			link.Status.ForwardRoutes = recordOf(append(stale, want))
			return fail(err)
		}
		lc.eventf(corev1.EventTypeNormal, "RouteRemoved", "removed stale %s from router %s", describeRoutes(stale), rt.Name)
	}
	link.Status.ForwardRoutes = recordOf([]openstack.Route{want})
	if !rt.HasRoute(want) {
		// Persist before programming: a crash after the add leaves a route the link
		// knows it owns.
		if err := r.persist(ctx, lc); err != nil {
			return false, err
		}
		if _, err := r.OpenStack.Networking.AddRouterRoutes(ctx, rt.ID, []openstack.Route{want}); err != nil {
			return fail(err)
		}
		lc.eventf(corev1.EventTypeNormal, "RouteInstalled", "added %s to router %s", describeRoutes([]openstack.Route{want}), rt.Name)
	}
	lc.set.True(v1alpha1.ConditionRouteInstalled, v1alpha1.ReasonRouteInstalled,
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
func reverseTarget(spec *v1alpha1.GatewaySpec, st *v1alpha1.GatewayStatus, deleting bool) (openstack.Route, bool) {
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

// desiredReverse lists every gateway of both kinds that carries reverse exposures and
// that link serves (linkselect: its gatewaySelector, or the specification's
// estate-wide default for a same-tenant link, or the customer project's namespaces for
// a cross-tenant one), sorted by reference. A gateway's status is not taken as it is
// (the gateway pod's token may write it): its route is desired only when the service
// CIDR is a /24 of the pool that the gateway's dedicated port records as its
// allocation, and the next hop is that port's address. The others are returned in
// unverified, one line each.
//
// verify=false skips that check (and its list of every gateway port, one OpenStack read
// of the whole estate's ports): an Aggregate link only counts the gateways it serves,
// and its one route's destination and next hop come from the operator's configuration,
// never from a gateway's status.
func (r *Reconciler) desiredReverse(ctx context.Context, link *v1alpha1.ClusterLink, verify bool) (out []v1alpha1.ReverseRoute, unverified []string, err error) {
	var nsList corev1.NamespaceList
	if err := r.Client.List(ctx, &nsList); err != nil {
		return nil, nil, err
	}
	nsLabels := make(map[string]map[string]string, len(nsList.Items))
	for _, n := range nsList.Items {
		nsLabels[n.Name] = n.Labels
	}
	var uids []types.UID
	// Every link reads every gateway on every reconcile: the cache's own objects are
	// read, not copied (nothing here writes to them). With a thousand gateways the
	// copies were most of the operator's CPU and garbage.
	consider := func(kind string, obj client.Object, spec *v1alpha1.GatewaySpec, st *v1alpha1.GatewayStatus) error {
		rt, ok := reverseTarget(spec, st, !obj.GetDeletionTimestamp().IsZero())
		if !ok {
			return nil
		}
		serves, err := linkselect.Selects(link, nsLabels[obj.GetNamespace()], obj.GetLabels())
		if err != nil || !serves {
			return err
		}
		out = append(out, v1alpha1.ReverseRoute{ServiceCIDR: rt.Destination, NextHop: rt.NextHop, GatewayRef: GatewayRef(kind, obj.GetNamespace(), obj.GetName())})
		uids = append(uids, obj.GetUID())
		return nil
	}
	gws, err := v1alpha1.ListGateways(ctx, r.Client, client.UnsafeDisableDeepCopy)
	if err != nil {
		return nil, nil, err
	}
	for _, g := range gws {
		if err := consider(g.GatewayKind(), g, g.GetGatewaySpec(), g.GetGatewayStatus()); err != nil {
			return nil, nil, err
		}
	}
	if verify && len(out) > 0 {
		ports, err := r.gatewayPorts(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("listing the gateway ports to verify the gateways' status: %w", err)
		}
		kept := out[:0]
		for i, d := range out {
			if why := r.unverifiedReverse(d, ports[uids[i]]); why != "" {
				unverified = append(unverified, d.GatewayRef+": "+why)
				continue
			}
			kept = append(kept, d)
		}
		out = kept
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GatewayRef < out[j].GatewayRef })
	sort.Strings(unverified)
	return out, unverified, nil
}

// gatewayPort is what the operator recorded on a gateway's dedicated port.
type gatewayPort struct {
	serviceCIDR string
	addresses   []string
}

// gatewayPorts reads the dedicated ports of every gateway (in the operator's project,
// tagged with the gateway's UID by the gateway reconciler), by gateway UID.
func (r *Reconciler) gatewayPorts(ctx context.Context) (map[types.UID][]gatewayPort, error) {
	ports, err := r.OpenStack.Networking.ListPorts(ctx, openstack.ListPortsOpts{Tags: []string{openstack.TagManaged}})
	if err != nil {
		return nil, err
	}
	out := map[types.UID][]gatewayPort{}
	for _, p := range ports {
		o, ok := openstack.OwnerFromTags(p.Tags)
		if !ok || !v1alpha1.IsGatewayKind(o.Kind) {
			continue
		}
		gp := gatewayPort{serviceCIDR: openstack.ServiceCIDRTag(p.Tags)}
		for _, ip := range p.FixedIPs {
			gp.addresses = append(gp.addresses, ip.IPAddress)
		}
		out[types.UID(o.UID)] = append(out[types.UID(o.UID)], gp)
	}
	return out, nil
}

// unverifiedReverse says why a gateway's reverse route is not one the operator made
// ("" when it is).
func (r *Reconciler) unverifiedReverse(d v1alpha1.ReverseRoute, ports []gatewayPort) string {
	if pool := r.Config.ServiceCIDRPool; pool.IsValid() {
		p, err := netip.ParsePrefix(d.ServiceCIDR)
		if err != nil || p.Bits() != 24 || !pool.Contains(p.Addr()) {
			return fmt.Sprintf("status.serviceCIDR %s is not a /24 of the service CIDR pool %s", d.ServiceCIDR, pool)
		}
	}
	if len(ports) == 0 {
		return "no port tagged for the gateway records its service CIDR and address"
	}
	for _, p := range ports {
		// A port made by an earlier release has no record until the gateway reconciler's
		// first pass over it (on start): its own address is still required, so the route
		// cannot lead anywhere but the gateway, and the pool check above holds.
		if (p.serviceCIDR == d.ServiceCIDR || p.serviceCIDR == "") && slices.Contains(p.addresses, d.NextHop) {
			return ""
		}
	}
	return fmt.Sprintf("status names %s via %s, which the gateway's tagged port does not record", d.ServiceCIDR, d.NextHop)
}

func routeOf(x v1alpha1.ReverseRoute) openstack.Route {
	return openstack.Route{Destination: x.ServiceCIDR, NextHop: x.NextHop}
}

// reverseMode is the reverse-route mode link runs in: a cross-tenant link always routes
// per gateway (one route to the whole pool would lead a customer's router to every
// gateway of the estate); a same-tenant one follows its spec, else the operator's default.
func (r *Reconciler) reverseMode(link *v1alpha1.ClusterLink) string {
	switch {
	case link.Spec.CredentialsSecretRef != nil:
		return v1alpha1.ReverseRoutePerGateway
	case link.Spec.ReverseRouteMode != "":
		return link.Spec.ReverseRouteMode
	case r.Config.ClusterLinkReverseRouteMode != "":
		return r.Config.ClusterLinkReverseRouteMode
	}
	return v1alpha1.ReverseRoutePerGateway
}

// operatorRouterTransitIP is the gateway cluster's router's address on the transit
// subnet: the next hop of an Aggregate link's route to the pool (that router carries a
// route per reverse-exposure gateway to the gateway's port). Resolved once per router ID:
// a router's interface on the transit subnet is part of the estate's fixed plumbing.
func (r *Reconciler) operatorRouterTransitIP(ctx context.Context, tn *transitNet) (string, error) {
	// The router as resolved by this process, not read again: it carries a route per
	// reverse-exposure gateway, a large object to read on every reconcile of every link.
	r.netMu.Lock()
	ip, forID, id := r.opRouterTransitIP, r.opRouterTransitFor, r.opRouterID
	r.netMu.Unlock()
	if ip != "" && forID == id {
		return ip, nil
	}
	rt, err := r.operatorRouter(ctx)
	if err != nil {
		return "", err
	}
	ports, err := r.OpenStack.Networking.ListPorts(ctx, openstack.ListPortsOpts{DeviceID: rt.ID, NetworkID: tn.network.ID})
	if err != nil {
		return "", fmt.Errorf("listing the gateway cluster's router's ports on the transit network: %w", err)
	}
	for _, p := range ports {
		for _, f := range p.FixedIPs {
			if a, err := netip.ParseAddr(f.IPAddress); err == nil && tn.prefix.Contains(a) {
				r.netMu.Lock()
				r.opRouterTransitIP, r.opRouterTransitFor = a.String(), rt.ID
				r.netMu.Unlock()
				return a.String(), nil
			}
		}
	}
	return "", fmt.Errorf("the gateway cluster's router %s has no interface on the transit subnet %s, which reverseRouteMode Aggregate routes the pool through", rt.Name, tn.prefix)
}

// ensureReverseRoutes converges, on the service cluster's router, the routes to the
// reverse-exposure-bearing gateways the link serves: one per gateway (PerGateway), or
// one to the whole service-CIDR pool via the gateway cluster's router while at least
// one such gateway exists (Aggregate). Only the difference is written, in at most one
// atomic add and one atomic remove (adds first, so a mode switch never leaves the
// router without a way to the gateways); a converged router costs no write.
func (r *Reconciler) ensureReverseRoutes(ctx context.Context, lc *linkCtx) (bool, error) {
	tn := lc.tn
	link := lc.link
	mode := r.reverseMode(link)
	link.Status.ReverseRouteMode = mode
	r.setAggregateRouted(link.UID, false) // before the gateways are listed: see setAggregateRouted
	if !lc.attached {
		lc.set.False(v1alpha1.ConditionReverseRoutesInstalled, v1alpha1.ReasonEnsureReverseRoutesFailed, "the leg is not attached, so the service cluster's router cannot reach any gateway port")
		return false, nil
	}
	desired, unverified, err := r.desiredReverse(ctx, link, mode != v1alpha1.ReverseRouteAggregate)
	for _, u := range unverified {
		lc.eventf(corev1.EventTypeWarning, v1alpha1.ReasonStatusForged, "not routing gateway %s", u)
	}
	if err != nil {
		lc.set.False(v1alpha1.ConditionReverseRoutesInstalled, v1alpha1.ReasonEnsureReverseRoutesFailed, "listing gateways: "+outcome.Describe(err))
		return false, err
	}
	desired, skipped := onTransitSubnet(desired, tn.prefix)
	if mode == v1alpha1.ReverseRouteAggregate && len(desired) > 0 {
		agg, err := r.aggregateReverse(ctx, tn)
		if err != nil {
			lc.set.False(v1alpha1.ConditionReverseRoutesInstalled, v1alpha1.ReasonEnsureReverseRoutesFailed, "reverseRouteMode Aggregate: "+outcome.Describe(err))
			return false, err
		}
		desired = []v1alpha1.ReverseRoute{agg}
	}

	add, remove, want := reverseDiff(lc.router.Routes, desired, link.Status.ReverseRoutes)
	res := r.writeReverse(ctx, lc, desired, add, remove)
	if res.persistErr != nil {
		return false, res.persistErr
	}
	failure, full := res.failure, res.full
	recorded := recordedReverse(lc.router.Routes, desired, link.Status.ReverseRoutes, want, add, res.addUnanswered)
	link.Status.ReverseRoutes = recorded

	if full {
		hint := "raise the cloud's max_routes, or set spec.reverseRouteMode: Aggregate (one route for the whole service-CIDR pool)"
		if lc.cross {
			hint = "raise the cloud's max_routes, or serve fewer gateways with this link (a cross-tenant link routes each gateway it serves)"
		}
		lc.set.False(v1alpha1.ConditionReverseRoutesInstalled, v1alpha1.ReasonRouteLimitExceeded, fmt.Sprintf(
			"%srouter %s cannot take %d more route(s) beside its %d: %s; nothing of the batch was added; %s",
			lc.legPrefix(), lc.router.Name, len(add), len(lc.router.Routes), outcome.Describe(failure), hint))
		return false, failure
	}
	if failure != nil {
		lc.set.False(v1alpha1.ConditionReverseRoutesInstalled, v1alpha1.ReasonEnsureReverseRoutesFailed, lc.legPrefix()+outcome.Describe(failure))
		return false, failure
	}
	r.setAggregateRouted(link.UID, mode == v1alpha1.ReverseRouteAggregate && len(recorded) > 0)
	lc.set.True(v1alpha1.ConditionReverseRoutesInstalled, v1alpha1.ReasonReverseRoutesInstalled,
		reverseRoutesMessage(lc, mode, recorded, skipped, unverified))
	return true, nil
}

// onTransitSubnet keeps the reverse routes whose next hop lies on the transit subnet:
// another cannot be routed from the leg, and is named (skipped) rather than left for
// Neutron to refuse the whole batch.
func onTransitSubnet(desired []v1alpha1.ReverseRoute, transit netip.Prefix) (usable []v1alpha1.ReverseRoute, skipped []string) {
	usable = desired[:0:0]
	for _, d := range desired {
		if a, err := netip.ParseAddr(d.NextHop); err != nil || !transit.Contains(a) {
			skipped = append(skipped, d.GatewayRef)
			continue
		}
		usable = append(usable, d)
	}
	return usable, skipped
}

// aggregateReverse is an Aggregate link's one reverse route: the whole service-CIDR
// pool via the gateway cluster's router on the transit network.
func (r *Reconciler) aggregateReverse(ctx context.Context, tn *transitNet) (v1alpha1.ReverseRoute, error) {
	pool := r.Config.ServiceCIDRPool
	nh, err := r.operatorRouterTransitIP(ctx, tn)
	if err == nil && !pool.IsValid() {
		err = fmt.Errorf("no service-CIDR pool is configured (IPSEC_SERVICE_CIDR_POOL)")
	}
	if err != nil {
		return v1alpha1.ReverseRoute{}, err
	}
	return v1alpha1.ReverseRoute{ServiceCIDR: pool.Masked().String(), NextHop: nh, GatewayRef: v1alpha1.AggregateGatewayRef}, nil
}

// reverseRoutesMessage says what the router carries for the link, whom it serves, and
// which gateways were left out and why.
//
// An Aggregate link's message does not count the gateways: a gateway gaining its reverse
// route does not wake a link whose pool route reaches it already (fanOut), so a count
// would go stale.
func reverseRoutesMessage(lc *linkCtx, mode string, recorded []v1alpha1.ReverseRoute, skipped, unverified []string) string {
	msg := "no gateway this link serves has reverse exposures"
	switch n := len(recorded); {
	case n > 0 && mode == v1alpha1.ReverseRouteAggregate:
		msg = fmt.Sprintf("the service-CIDR pool %s via the gateway cluster's router (%s) on router %s reaches the gateways with reverse exposures this link serves (reverseRouteMode Aggregate)", recorded[0].ServiceCIDR, recorded[0].NextHop, lc.router.Name)
	case n > 0:
		msg = fmt.Sprintf("%d reverse route(s) on router %s to the gateways with reverse exposures this link serves", n, lc.router.Name)
	}
	msg += " (it serves " + linkselect.Describe(lc.link) + ")"
	if len(skipped) > 0 {
		msg += "; skipped (port not on the transit subnet): " + strings.Join(skipped, ", ")
	}
	if len(unverified) > 0 {
		msg += "; not routed (status differs from the operator's record of the gateway's port, " + v1alpha1.ReasonStatusForged + "): " + strings.Join(unverified, "; ")
	}
	return msg
}

// reverseDiff is what the router lacks of desired (add), and what of the routes the
// link owns (status.reverseRoutes) is on the router but no longer desired (remove).
func reverseDiff(onRouter []openstack.Route, desired, owned []v1alpha1.ReverseRoute) (add, remove []openstack.Route, want map[openstack.Route]bool) {
	have := map[openstack.Route]bool{}
	for _, x := range onRouter {
		have[x] = true
	}
	want = map[openstack.Route]bool{}
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
	seen := map[openstack.Route]bool{}
	for _, o := range owned {
		rt := routeOf(o)
		if !want[rt] && have[rt] && !seen[rt] {
			remove = append(remove, rt)
			seen[rt] = true
		}
	}
	return add, remove, want
}

// reverseWrite is how writeReverse ended.
type reverseWrite struct {
	failure       error // a router write failed (the condition says so)
	persistErr    error // recording the routes before adding them failed: nothing was written
	addUnanswered bool  // the add got no answer, so its routes may be there
	full          bool  // Neutron refused the add: the router is at max_routes
}

// writeReverse adds, then removes, on the service cluster's router, with at most one
// atomic call each (a third, the add again, when the router was full beside stale
// routes). lc.router follows every successful write.
func (r *Reconciler) writeReverse(ctx context.Context, lc *linkCtx, desired []v1alpha1.ReverseRoute, add, remove []openstack.Route) (res reverseWrite) {
	net := lc.legClients.Networking
	removed := false
	removeStale := func() error {
		upd, err := net.RemoveRouterRoutes(ctx, lc.router.ID, remove)
		if err != nil {
			return fmt.Errorf("removing stale reverse %s: %w", describeRoutes(remove), err)
		}
		removed = true
		lc.router = upd
		lc.eventf(corev1.EventTypeNormal, "ReverseRoutesRemoved", "removed reverse %s from router %s", describeRoutes(remove), lc.router.Name)
		return nil
	}
	if len(add) > 0 {
		// Persist before programming: the routes about to be added are recorded first,
		// so a crash or a lost status write after the router write cannot leave a route
		// this link no longer knows it owns (one that would outlive its gateway, and
		// block the leg's detach on deletion).
		if err := r.recordReverse(ctx, lc, desired, add); err != nil {
			return reverseWrite{persistErr: err}
		}
		upd, err := net.AddRouterRoutes(ctx, lc.router.ID, add)
		if routesExhausted(err) && len(remove) > 0 {
			// No room for the new routes beside the stale ones: the stale ones go first.
			if rerr := removeStale(); rerr != nil {
				res.failure = rerr
			} else {
				upd, err = net.AddRouterRoutes(ctx, lc.router.ID, add)
			}
		}
		switch {
		case res.failure != nil:
		case err != nil:
			res.addUnanswered = openstack.StatusCode(err) == 0
			res.full = routesExhausted(err)
			res.failure = fmt.Errorf("adding reverse %s: %w", describeRoutes(add), err)
		default:
			lc.router = upd
			lc.eventf(corev1.EventTypeNormal, "ReverseRoutesInstalled", "added reverse %s to router %s", describeRoutes(add), lc.router.Name)
		}
	}
	// Stale routes go whatever became of the adds: removing a route only takes reach
	// away, and a route left to a gone gateway's /24 would lead to whoever gets it next.
	if len(remove) > 0 && !removed {
		if err := removeStale(); err != nil && res.failure == nil {
			res.failure = err
		}
	}
	return res
}

// recordedReverse is status.reverseRoutes after the writes: every desired route on the
// router, and every formerly owned one still there (so deletion finds it).
func recordedReverse(onRouter []openstack.Route, desired, owned []v1alpha1.ReverseRoute, want map[openstack.Route]bool, add []openstack.Route, addUnanswered bool) []v1alpha1.ReverseRoute {
	now := map[openstack.Route]bool{}
	for _, x := range onRouter {
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
	var recorded []v1alpha1.ReverseRoute
	for _, d := range desired {
		if now[routeOf(d)] {
			recorded = append(recorded, d)
		}
	}
	for _, o := range owned {
		if rt := routeOf(o); !want[rt] && now[rt] {
			recorded = append(recorded, o)
		}
	}
	return recorded
}

// routesExhausted reports Neutron's refusal of routes beyond its max_routes.
func routesExhausted(err error) bool {
	return err != nil && openstack.NeutronErrorType(err) == "RoutesExhausted"
}

// recordReverse adds the desired entries for routes (not yet on the router) to
// status.reverseRoutes and writes the status.
func (r *Reconciler) recordReverse(ctx context.Context, lc *linkCtx, desired []v1alpha1.ReverseRoute, routes []openstack.Route) error {
	st := &lc.link.Status
	have := map[v1alpha1.ReverseRoute]bool{}
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
func removeReverseRoutes(ctx context.Context, net openstack.Networking, rt *openstack.Router, owned []v1alpha1.ReverseRoute) error {
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
