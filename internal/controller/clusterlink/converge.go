package clusterlink

import (
	"context"
	"fmt"
	"slices"

	ctrl "sigs.k8s.io/controller-runtime"

	v1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/conditions"
	"bnerd.net/vpn-operator/internal/openstack"
)

// converge runs the phases in order; each sets its own condition. A phase that cannot
// complete stops the phases that depend on it, except that the forward route and the
// reverse routes are independent of each other.
func (r *Reconciler) converge(ctx context.Context, lc *linkCtx) (ctrl.Result, error) {
	before := slices.Clone(lc.link.Status.Conditions)
	defer transitionEvents(lc, before)
	link := lc.link

	if errs := link.Spec.Validate(); len(errs) > 0 {
		lc.set.False(v1.ConditionValidated, v1.ReasonInvalidSpec, errs.ToAggregate().Error())
		return ctrl.Result{}, nil
	}
	lc.set.True(v1.ConditionValidated, v1.ReasonValid, "the spec passed validation")

	if lc.cross {
		if link.Annotations[v1.AnnotationCustomerAPIAccess] != "none" {
			lc.set.False(v1.ConditionTenantIsolationAttested, v1.ReasonNotAttested, fmt.Sprintf(
				"a cross-tenant link needs the annotation %s: \"none\", set by a platform admin who attests that the customer has no OpenStack API access of their own; no OpenStack call is made until then",
				v1.AnnotationCustomerAPIAccess))
			r.waiting(lc, v1.ConditionTenantIsolationAttested, v1.ConditionCredentialsResolved)
			return ctrl.Result{}, nil
		}
		lc.set.True(v1.ConditionTenantIsolationAttested, v1.ReasonAttested, "a platform admin attested that the customer has no OpenStack API access of their own")

		cr := r.customerCredential(ctx, lc)
		if !cr.ok() {
			lc.set.False(v1.ConditionCredentialsResolved, cr.reason, cr.message)
			r.waiting(lc, v1.ConditionCredentialsResolved, v1.ConditionTransitNetworkShared)
			if cr.err != nil {
				return ctrl.Result{}, cr.err // transient: back off
			}
			return ctrl.Result{RequeueAfter: cr.requeue}, nil
		}
		// A leg built in one project is never driven with a credential of another.
		if pinned := link.Status.CustomerProjectID; (pinned != "" && pinned != cr.project) || (pinned == "" && link.Status.LegPortID != "") {
			msg := fmt.Sprintf("secret %s: the credential authenticates into project %s, but this link's leg was built in project %q; restore the credential of that project",
				lc.secret, cr.project, pinned)
			lc.set.False(v1.ConditionCredentialsResolved, v1.ReasonCredentialsProjectChanged, msg)
			r.waiting(lc, v1.ConditionCredentialsResolved, v1.ConditionTransitNetworkShared)
			return r.resync(), nil
		}
		lc.set.True(v1.ConditionCredentialsResolved, v1.ReasonResolved,
			fmt.Sprintf("secret %s authenticates into project %s with a member-scoped application credential", lc.secret, cr.project))
		link.Status.CustomerProjectID = cr.project
		lc.leg, lc.projectID = cr.clients, cr.project
	} else {
		lc.leg, lc.projectID = r.d.Operator, r.d.OperatorProjectID
	}

	if c := conditions.Get(link.Status.Conditions, v1.ConditionLegAttached); c != nil && c.Reason == v1.ReasonTransitIPMismatch {
		// Terminal by design: the link stays dark until a human recreates it. The route
		// via the old address is re-checked, in case removing it failed before.
		if err := r.removeForwardRoutes(ctx, lc, link.Status.TransitIP); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, nil
	}

	tn, err := r.transitNetwork(ctx)
	if err != nil {
		cond, reason := v1.ConditionTransitIPAllocated, v1.ReasonTransitIPAllocationFailed
		if lc.cross {
			cond, reason = v1.ConditionTransitNetworkShared, v1.ReasonEnsureNetworkSharedFailed
		}
		lc.set.False(cond, reason, lc.opPrefix()+err.Error())
		return r.failed(err)
	}

	rt, err := lc.leg.Networking.ResolveRouter(ctx, link.Spec.ServiceClusterRouter)
	if err != nil {
		lc.set.False(v1.ConditionLegAttached, v1.ReasonRouterResolveFailed,
			fmt.Sprintf("%sresolving router %q: %s", lc.legPrefix(), link.Spec.ServiceClusterRouter, err.Error()))
		r.waiting(lc, v1.ConditionLegAttached, v1.ConditionTransitNetworkShared, v1.ConditionTransitIPAllocated, v1.ConditionRouteInstalled, v1.ConditionReverseRoutesInstalled)
		return r.failed(err)
	}
	lc.router = rt
	link.Status.RouterID = rt.ID

	if lc.cross {
		if res, ok, err := r.ensureShared(ctx, lc, tn); !ok {
			r.waiting(lc, v1.ConditionTransitNetworkShared, v1.ConditionTransitIPAllocated, v1.ConditionLegAttached)
			return res, err
		}
	}

	if res, ok, err := r.ensureTransitIP(ctx, lc, tn); !ok {
		r.waiting(lc, v1.ConditionTransitIPAllocated, v1.ConditionLegAttached, v1.ConditionRouteInstalled, v1.ConditionReverseRoutesInstalled)
		return res, err
	}
	if res, ok, err := r.ensureLeg(ctx, lc, tn); !ok {
		return res, err
	}

	fres, ferr := r.ensureForwardRoute(ctx, lc)
	rres, rerr := r.ensureReverseRoutes(ctx, lc, tn)
	if ferr != nil || rerr != nil {
		if ferr != nil {
			return ctrl.Result{}, ferr
		}
		return ctrl.Result{}, rerr
	}
	if fres.RequeueAfter > 0 {
		return fres, nil
	}
	if rres.RequeueAfter > 0 {
		return rres, nil
	}
	return r.resync(), nil
}

// waiting marks the phases after a blocked one that have never been evaluated, so
// Ready names the blocking phase rather than a phase that was not reached.
func (r *Reconciler) waiting(lc *linkCtx, blocked string, next ...string) {
	for _, t := range next {
		if t == blocked {
			continue
		}
		if conditions.Get(lc.link.Status.Conditions, t) == nil {
			lc.set.Unknown(t, v1.ReasonNotReady, "waiting for "+blocked)
		}
	}
}

// failed turns an OpenStack failure into the controller's answer: a transient one
// backs off, a refusal waits for the resync (a human has to change something).
func (r *Reconciler) failed(err error) (ctrl.Result, error) {
	if openstack.IsTransient(err) {
		return ctrl.Result{}, err
	}
	return r.resync(), nil
}
