package clusterlink

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/conditions"
	"bnerd.net/vpn-operator/internal/controller/outcome"
	"bnerd.net/vpn-operator/internal/controller/skeleton"
	"bnerd.net/vpn-operator/internal/linkselect"
	"bnerd.net/vpn-operator/internal/openstack"
)

// phases are the steps of one link's reconcile, in order (see skeleton.Phase); the
// cross-tenant checks only on a cross-tenant link. A phase that stops marks the
// conditions it Blocks, never evaluated before, "waiting for" it. Some conditions are
// checked by several phases; each stands in Ready's summary at the phase completing it.
// The allocations (the transit IP, the leg port's ID) are persisted inside the phases,
// between the step that decides them and the one that builds with them.
func (r *Reconciler) phases(lc *linkCtx) []skeleton.Phase[*linkCtx] {
	all := []skeleton.Phase[*linkCtx]{
		{Cond: v1alpha1.ConditionValidated, Run: r.ensureValidated},
		{Cond: v1alpha1.ConditionTenantIsolationAttested, Blocks: []string{v1alpha1.ConditionCredentialsResolved}, Run: r.ensureAttested},
		{Cond: v1alpha1.ConditionCredentialsResolved, Blocks: []string{v1alpha1.ConditionTransitNetworkShared}, Run: r.ensureCredentials},
		{Cond: v1alpha1.ConditionLegAttached, Run: r.ensureNotMismatched},
		{Cond: v1alpha1.ConditionTransitIPAllocated, Run: r.ensureTransitNetwork},
		{Cond: v1alpha1.ConditionTransitIPAllocated, Run: r.ensureTransitNotSharedWithAll},
		{Cond: v1alpha1.ConditionLegAttached, Blocks: []string{v1alpha1.ConditionTransitNetworkShared, v1alpha1.ConditionTransitIPAllocated, v1alpha1.ConditionRouteInstalled, v1alpha1.ConditionReverseRoutesInstalled}, Run: r.ensureRouter},
		{Cond: v1alpha1.ConditionTransitNetworkShared, Blocks: []string{v1alpha1.ConditionTransitIPAllocated, v1alpha1.ConditionLegAttached}, Run: r.ensureShared},
		{Cond: v1alpha1.ConditionTransitIPAllocated, Blocks: []string{v1alpha1.ConditionLegAttached, v1alpha1.ConditionRouteInstalled, v1alpha1.ConditionReverseRoutesInstalled}, Run: r.ensureTransitIP},
		{Cond: v1alpha1.ConditionLegAttached, Run: r.ensureLeg},
		// The forward route and the reverse routes do not depend on each other.
		{Cond: v1alpha1.ConditionRouteInstalled, Independent: true, Run: r.ensureForwardRoute},
		{Cond: v1alpha1.ConditionReverseRoutesInstalled, Run: r.ensureReverseRoutes},
	}
	if lc.cross {
		return all
	}
	return slices.DeleteFunc(all, func(p skeleton.Phase[*linkCtx]) bool { return slices.Contains(crossTenantConditions, p.Cond) })
}

// crossTenantConditions are the conditions of the phases only a cross-tenant link runs.
var crossTenantConditions = []string{v1alpha1.ConditionTenantIsolationAttested, v1alpha1.ConditionCredentialsResolved, v1alpha1.ConditionTransitNetworkShared}

// converge runs the phases in order. The error says how the reconcile ended (nil:
// converged), for outcome to answer controller-runtime with.
func (r *Reconciler) converge(ctx context.Context, lc *linkCtx) error {
	before := slices.Clone(lc.link.Status.Conditions)
	defer transitionEvents(lc, before)
	if !lc.cross {
		lc.legClients, lc.projectID = r.OpenStack, r.OperatorProjectID
	}
	runErr, perr := skeleton.Runner[*linkCtx]{Persist: r.persist, Waiting: r.waiting}.Run(ctx, lc, r.phases(lc))
	if perr != nil {
		return perr
	}
	return runErr
}

func (r *Reconciler) ensureValidated(ctx context.Context, lc *linkCtx) (bool, error) {
	if errs := lc.link.Spec.Validate(); len(errs) > 0 {
		lc.set.False(v1alpha1.ConditionValidated, v1alpha1.ReasonInvalidSpec, errs.ToAggregate().Error())
		return false, nil
	}
	msg, err := r.cidrOverlap(ctx, lc.link)
	if err != nil {
		lc.set.False(v1alpha1.ConditionValidated, v1alpha1.ReasonInvalidSpec, "listing ClusterLinks: "+outcome.Describe(err))
		return false, err
	}
	if msg != "" {
		lc.set.False(v1alpha1.ConditionValidated, v1alpha1.ReasonServiceClusterCIDROverlap, msg)
		return false, nil
	}
	lc.set.True(v1alpha1.ConditionValidated, v1alpha1.ReasonValid, "the spec passed validation")
	return true, nil
}

// cidrOverlap says why serviceClusterCIDR may not be routed ("" when it may): it
// overlaps the service-CIDR pool (gateways' virtual IPs), an older link's
// serviceClusterCIDR (two links would claim the same destination on one router, and a
// gateway's exposure into it could not be told apart; the older link keeps it), or a
// gateway's routed-mode subnet (routedOverlap). The transit subnet is checked once it
// is resolved (ensureTransitNetwork).
func (r *Reconciler) cidrOverlap(ctx context.Context, link *v1alpha1.ClusterLink) (string, error) {
	cidr, ok := linkselect.CIDR(link)
	if !ok {
		return "", nil
	}
	if pool := r.Config.ServiceCIDRPool; pool.IsValid() && pool.Overlaps(cidr) {
		return fmt.Sprintf("serviceClusterCIDR %s overlaps the service-CIDR pool %s, where the gateways' virtual IPs live; route the service cluster's own network", cidr, pool), nil
	}
	var list v1alpha1.ClusterLinkList
	if err := r.Client.List(ctx, &list); err != nil {
		return "", err
	}
	for i := range list.Items {
		o := &list.Items[i]
		if o.UID == link.UID || !o.DeletionTimestamp.IsZero() || len(o.Spec.Validate()) > 0 {
			continue
		}
		oc, ok := linkselect.CIDR(o)
		if !ok || !oc.Overlaps(cidr) || !older(o, link) {
			continue
		}
		return fmt.Sprintf("serviceClusterCIDR %s overlaps %s of ClusterLink %s, which is older and keeps it; give each service cluster its own network", cidr, oc, o.Name), nil
	}
	return r.routedOverlap(ctx, link, cidr)
}

// routedOverlap: a gateway's routed-mode subnet is a route on the same router, so a
// link whose network overlaps one routed now, or claimed by a gateway older than the
// link, is refused (the gateway reconciler refuses routed subnets overlapping an
// active link, so the one that was there first keeps it either way).
func (r *Reconciler) routedOverlap(ctx context.Context, link *v1alpha1.ClusterLink, cidr netip.Prefix) (string, error) {
	check := func(kind, ns, name string, created metav1.Time, spec *v1alpha1.GatewaySpec, st *v1alpha1.GatewayStatus, gen int64) string {
		c := conditions.Get(st.Conditions, v1alpha1.ConditionRoutingReady)
		routesNow := c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == gen && c.Reason != v1alpha1.ReasonNotRequired
		if !routesNow && !created.Before(&link.CreationTimestamp) {
			return ""
		}
		for _, t := range spec.Tunnels {
			if t.Mode != v1alpha1.TunnelModeRouted {
				continue
			}
			for _, s := range t.Peer.Subnets {
				if p, err := netip.ParsePrefix(s); err == nil && p.Overlaps(cidr) {
					return fmt.Sprintf("serviceClusterCIDR %s overlaps %s, a routed-mode subnet of %s %s/%s, which was there first and keeps it", cidr, p, kind, ns, name)
				}
			}
		}
		return ""
	}
	// The cache's own objects are read, not copied (nothing here writes to them): the
	// copies of a thousand gateways per link reconcile were a fifth of the operator's CPU.
	gws, err := v1alpha1.ListGateways(ctx, r.Client, client.UnsafeDisableDeepCopy)
	if err != nil {
		return "", err
	}
	for _, g := range gws {
		if msg := check(g.GatewayKind(), g.GetNamespace(), g.GetName(), g.GetCreationTimestamp(), g.GetGatewaySpec(), g.GetGatewayStatus(), g.GetGeneration()); msg != "" {
			return msg, nil
		}
	}
	return "", nil
}

// older orders links by creation, then by name.
func older(a, b *v1alpha1.ClusterLink) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

func (r *Reconciler) ensureAttested(_ context.Context, lc *linkCtx) (bool, error) {
	if lc.link.Annotations[v1alpha1.AnnotationCustomerAPIAccess] != "none" {
		lc.set.False(v1alpha1.ConditionTenantIsolationAttested, v1alpha1.ReasonNotAttested, fmt.Sprintf(
			"a cross-tenant link needs the annotation %s: \"none\", set by a platform admin who attests that the customer has no OpenStack API access of their own; no OpenStack call is made until then",
			v1alpha1.AnnotationCustomerAPIAccess))
		return false, nil
	}
	lc.set.True(v1alpha1.ConditionTenantIsolationAttested, v1alpha1.ReasonAttested, "a platform admin attested that the customer has no OpenStack API access of their own")
	return true, nil
}

// ensureCredentials resolves the customer credential and pins the project the leg is
// built in.
func (r *Reconciler) ensureCredentials(ctx context.Context, lc *linkCtx) (bool, error) {
	link := lc.link
	cr := r.customerCredential(ctx, lc)
	if !cr.ok() {
		lc.set.False(v1alpha1.ConditionCredentialsResolved, cr.reason, cr.message)
		if cr.err != nil {
			return false, cr.err // transient: back off
		}
		return false, outcome.Wait(cr.requeue, "%s", cr.message)
	}
	// A leg built in one project is never driven with a credential of another.
	if pinned := link.Status.CustomerProjectID; (pinned != "" && pinned != cr.project) || (pinned == "" && link.Status.LegPortID != "") {
		msg := fmt.Sprintf("secret %s: the credential authenticates into project %s, but this link's leg was built in project %q; restore the credential of that project",
			lc.secret, cr.project, pinned)
		lc.set.False(v1alpha1.ConditionCredentialsResolved, v1alpha1.ReasonCredentialsProjectChanged, msg)
		return false, nil
	}
	lc.set.True(v1alpha1.ConditionCredentialsResolved, v1alpha1.ReasonResolved,
		fmt.Sprintf("secret %s authenticates into project %s with a member-scoped application credential", lc.secret, cr.project))
	link.Status.CustomerProjectID = cr.project
	lc.legClients, lc.projectID = cr.clients, cr.project
	return true, nil
}

// ensureNotMismatched keeps a TransitIPMismatch link dark: terminal by design until a
// human recreates it. The route via the old address is re-checked, in case removing it
// failed before.
func (r *Reconciler) ensureNotMismatched(ctx context.Context, lc *linkCtx) (bool, error) {
	c := conditions.Get(lc.link.Status.Conditions, v1alpha1.ConditionLegAttached)
	if c == nil || c.Reason != v1alpha1.ReasonTransitIPMismatch {
		return true, nil
	}
	if err := r.removeForwardRoutes(ctx, lc); err != nil {
		return false, err
	}
	return false, nil
}

// ensureTransitNetwork resolves the transit network (once per process).
func (r *Reconciler) ensureTransitNetwork(ctx context.Context, lc *linkCtx) (bool, error) {
	tn, err := r.transitNetwork(ctx)
	if err != nil {
		cond, reason := v1alpha1.ConditionTransitIPAllocated, v1alpha1.ReasonTransitIPAllocationFailed
		if lc.cross {
			cond, reason = v1alpha1.ConditionTransitNetworkShared, v1alpha1.ReasonEnsureNetworkSharedFailed
		}
		lc.set.False(cond, reason, lc.opPrefix()+outcome.Describe(err))
		return false, err
	}
	lc.tn = tn
	if cidr, ok := linkselect.CIDR(lc.link); ok && tn.prefix.Overlaps(cidr) {
		lc.set.False(v1alpha1.ConditionValidated, v1alpha1.ReasonServiceClusterCIDROverlap, fmt.Sprintf(
			"serviceClusterCIDR %s overlaps the transit subnet %s, where the legs and the gateways' ports live", cidr, tn.prefix))
		return false, nil
	}
	return true, nil
}

// ensureTransitNotSharedWithAll refuses to build or change anything while the transit
// network is shared with every project of the cloud (its shared flag, or an RBAC
// policy with target *): any tenant could then put a port on it and reach every linked
// service cluster through the gateway router. The share is read on every reconcile (an
// admin may add or remove it at any time); what the link already built is left as it
// is, and deleting a link still unwinds it.
func (r *Reconciler) ensureTransitNotSharedWithAll(ctx context.Context, lc *linkCtx) (bool, error) {
	cond, failReason := v1alpha1.ConditionTransitIPAllocated, v1alpha1.ReasonTransitIPAllocationFailed
	if lc.cross {
		cond, failReason = v1alpha1.ConditionTransitNetworkShared, v1alpha1.ReasonEnsureNetworkSharedFailed
	}
	share, err := openstack.ReadNetworkShare(ctx, r.OpenStack.Networking, lc.tn.network.ID)
	if err != nil {
		lc.set.False(cond, failReason, lc.opPrefix()+"reading how the transit network is shared: "+outcome.Describe(err))
		return false, err
	}
	if share.EveryProject() {
		lc.set.False(cond, v1alpha1.ReasonTransitNetworkSharedWithAllProjects, fmt.Sprintf(
			"%sthe transit network is shared with every project of the cloud: %s. Any tenant could put a port on it and reach every linked service cluster through the gateway router, so this link builds and changes nothing until an OpenStack admin removes that share (customers get per-project shares from their ClusterLinks); what it built before is left as it is",
			lc.opPrefix(), share.How()))
		return false, nil
	}
	return true, nil
}

// ensureRouter resolves spec.serviceClusterRouter on every reconcile, with the leg's
// credential; on a cross-tenant link before anything is shared.
func (r *Reconciler) ensureRouter(ctx context.Context, lc *linkCtx) (bool, error) {
	rt, err := lc.legClients.Networking.ResolveRouter(ctx, lc.link.Spec.ServiceClusterRouter)
	if err != nil {
		lc.set.False(v1alpha1.ConditionLegAttached, v1alpha1.ReasonRouterResolveFailed,
			fmt.Sprintf("%sresolving router %q: %s", lc.legPrefix(), lc.link.Spec.ServiceClusterRouter, outcome.Describe(err)))
		return false, err
	}
	lc.router = rt
	lc.link.Status.RouterID = rt.ID
	return true, nil
}

// waiting marks the phases after a blocked one that have never been evaluated, so
// Ready names the blocking phase rather than a phase that was not reached.
func (r *Reconciler) waiting(lc *linkCtx, blocked string, next []string) {
	skeleton.MarkWaiting(lc.set, blocked, next)
}
