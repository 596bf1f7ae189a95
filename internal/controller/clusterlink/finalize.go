package clusterlink

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/controller/outcome"
	"bnerd.net/vpn-operator/internal/controller/skeleton"
	"bnerd.net/vpn-operator/internal/openstack"
)

// finalize unwinds a deleting link in reverse order and releases the finalizer only
// when nothing is left behind, or when a human abandoned the customer side.
func (r *Reconciler) finalize(ctx context.Context, lc *linkCtx) error {
	link := lc.link
	if !controllerutil.ContainsFinalizer(link, v1alpha1.FinalizerClusterLink) {
		return nil
	}
	before := slices.Clone(link.Status.Conditions)
	done, err := r.unwind(ctx, lc)
	transitionEvents(lc, before)
	if done {
		lc.events.Emit(r.Recorder, link)
		if uerr := skeleton.RemoveFinalizer(ctx, r.Client, link, v1alpha1.FinalizerClusterLink); uerr != nil {
			return uerr
		}
		r.forgetLink(link.UID)
		if r.secrets != nil {
			r.secrets.Set(secretOwner(link.Name), nil, nil)
		}
		r.fresh.Forget(link.UID)
		lc.log.Info("ClusterLink unwound; finalizer released")
		r.wakeWaiting(ctx, link.UID)
		return nil
	}
	lc.set.False(v1alpha1.ConditionReady, v1alpha1.ReasonDeleting, "deletion is waiting: see the other conditions")
	if werr := r.writeStatus(ctx, lc); werr != nil { // the actions' Events were sent
		if err == nil {
			err = werr
		}
		return err
	}
	lc.events.Emit(r.Recorder, link)
	return err
}

// wakeBuffer bounds the wake-up queue; a wake-up that does not fit is dropped (the
// resync still comes).
const wakeBuffer = 256

// wakeWaiting reconciles again every other link that is not Ready: one may wait for the
// router this link's leg held (Neutron allows one leg per router on the transit subnet)
// or for its pinned transit IP, and would otherwise wait for the resync.
func (r *Reconciler) wakeWaiting(ctx context.Context, gone types.UID) {
	var list v1alpha1.ClusterLinkList
	if err := r.Client.List(ctx, &list); err != nil {
		log.FromContext(ctx).Info("listing ClusterLinks to wake after a deletion failed", "error", err.Error())
		return
	}
	for i := range list.Items {
		l := &list.Items[i]
		if l.UID == gone || meta.IsStatusConditionTrue(l.Status.Conditions, v1alpha1.ConditionReady) {
			continue
		}
		select {
		case r.wake <- event.GenericEvent{Object: l}:
		default:
		}
	}
}

// unwind removes what the link built, in reverse order. done=false with a nil error
// cannot happen: every stop says why, as an error outcome classifies.
func (r *Reconciler) unwind(ctx context.Context, lc *linkCtx) (bool, error) {
	link := lc.link
	st := &link.Status

	// 1. The gateway route goes first, always, on the operator's credential: it cuts
	// the data path whatever happens to the customer side.
	if err := r.removeForwardRoutes(ctx, lc); err != nil {
		lc.set.False(v1alpha1.ConditionRouteInstalled, v1alpha1.ReasonEnsureRouteFailed, lc.opPrefix()+"removing the gateway route: "+outcome.Describe(err))
		return false, r.heldRetry(err)
	}
	if st.TransitIP != "" {
		lc.set.False(v1alpha1.ConditionRouteInstalled, v1alpha1.ReasonDeleting, "the gateway route was removed: the link is being deleted")
	}

	if st.LegPortID == "" && st.TransitIP == "" && len(st.ReverseRoutes) == 0 && !(lc.cross && st.CustomerProjectID != "") {
		// Nothing was ever built (for example an unattested or invalid link). A
		// cross-tenant link with its project on record may have created a leg whose
		// address it never recorded: that one is looked for by tag below.
		return true, nil
	}

	if lc.cross {
		if ok, done, err := r.unwindCredential(ctx, lc); !ok {
			return done, err
		}
	} else {
		lc.legClients, lc.projectID = r.OpenStack, r.OperatorProjectID
	}

	// 2. Reverse routes, the attachment, the port: on the credential of the leg's project.
	if err := r.unwindLeg(ctx, lc); err != nil {
		lc.set.False(v1alpha1.ConditionLegAttached, v1alpha1.ReasonEnsureRouterHasPortFailed, lc.legPrefix()+"unwinding the leg: "+outcome.Describe(err))
		return false, r.heldRetry(err)
	}
	return true, nil
}

// unwindCredential gets a cross-tenant link's customer clients for the cleanup: only a
// credential into the project the leg was built in. Without one the finalizer is held
// (ok=false, with the phase's answer), unless the link is annotated to abandon the
// customer-side resources (done=true).
func (r *Reconciler) unwindCredential(ctx context.Context, lc *linkCtx) (ok, done bool, err error) {
	link, st := lc.link, &lc.link.Status
	cr := r.customerCredential(ctx, lc)
	reason, msg := cr.reason, cr.message
	if cr.ok() {
		if pinned := st.CustomerProjectID; pinned != "" && pinned != cr.project {
			reason = v1alpha1.ReasonCredentialsProjectMismatch
			msg = fmt.Sprintf("secret %s: the credential authenticates into project %s, but this link's leg was built in project %s; it is never used to clean up another project",
				lc.secret, cr.project, pinned)
		}
	}
	if reason == "" {
		lc.legClients, lc.projectID = cr.clients, cr.project
		return true, false, nil
	}
	if link.Annotations[v1alpha1.AnnotationAbandonCustomerResources] == "true" {
		r.abandon(lc, reason)
		return false, true, nil
	}
	held := v1alpha1.ReasonCredentialsUnavailable
	if reason == v1alpha1.ReasonCredentialsProjectMismatch {
		held = reason
	} else {
		msg = reason + ": " + msg
	}
	lc.set.False(v1alpha1.ConditionCredentialsResolved, held, fmt.Sprintf(
		"the customer side cannot be cleaned up, so the finalizer is held: %s; fix the Secret, or annotate the ClusterLink %s=true to leave the customer-side resources behind",
		msg, v1alpha1.AnnotationAbandonCustomerResources))
	requeue := cr.requeue
	if requeue == 0 {
		requeue = CredentialRequeue
	}
	if cr.err != nil {
		return false, false, cr.err // transient: back off
	}
	return false, false, outcome.Wait(requeue, "the customer credential is unavailable")
}

// heldRetry paces a deletion that OpenStack refused: a held finalizer is looked at
// again every CredentialRequeue (a human is likely fixing it right now), not only at
// the resync; a transient failure backs off as usual.
func (r *Reconciler) heldRetry(err error) error {
	if outcome.IsTerminal(err) {
		return outcome.Wait(CredentialRequeue, "%s", err.Error())
	}
	return err
}

func (r *Reconciler) unwindLeg(ctx context.Context, lc *linkCtx) error {
	link := lc.link
	st := &link.Status
	net := lc.legClients.Networking

	var rt *openstack.Router
	var err error
	if st.RouterID != "" {
		rt, err = net.GetRouter(ctx, st.RouterID)
	} else {
		rt, err = net.ResolveRouter(ctx, link.Spec.ServiceClusterRouter)
	}
	switch {
	case err == nil:
	case openstack.IsNotFound(err):
		rt = nil
	default:
		return fmt.Errorf("reading router %s: %w", link.Spec.ServiceClusterRouter, err)
	}
	if rt != nil {
		if err := removeReverseRoutes(ctx, net, rt, st.ReverseRoutes); err != nil {
			return fmt.Errorf("removing reverse routes from router %s: %w", rt.Name, err)
		}
	}
	if len(st.ReverseRoutes) > 0 {
		lc.eventf(corev1.EventTypeNormal, "ReverseRoutesRemoved", "removed %d reverse route(s)", len(st.ReverseRoutes))
	}
	st.ReverseRoutes = nil

	port, err := ownLegPort(ctx, lc)
	if err != nil {
		return err
	}
	if port != nil {
		if port.DeviceOwner == OwnerRouterInterface && port.DeviceID != "" {
			if err := net.RemoveRouterInterface(ctx, port.DeviceID, port.ID); err != nil && !openstack.IsNotFound(err) {
				return fmt.Errorf("detaching leg port %s from router %s: %w", port.ID, port.DeviceID, err)
			}
			lc.eventf(corev1.EventTypeNormal, "LegDetached", "detached leg port %s from router %s", port.ID, port.DeviceID)
		}
		if err := net.DeletePort(ctx, port.ID); err != nil && !openstack.IsNotFound(err) {
			return fmt.Errorf("deleting leg port %s: %w", port.ID, err)
		}
		lc.eventf(corev1.EventTypeNormal, "LegPortDeleted", "deleted leg port %s", port.ID)
	}
	st.LegPortID = ""
	return nil
}

// abandon records, as a Warning Event and a log line, exactly what stays behind in the
// customer's project when a human released a link whose customer side is unreachable.
func (r *Reconciler) abandon(lc *linkCtx, reason string) {
	st := lc.link.Status
	port := "leg port (ID unknown)"
	if st.LegPortID != "" {
		port = "leg port " + st.LegPortID
	}
	if st.TransitIP != "" {
		port += " at transit IP " + st.TransitIP
	}
	router := "router " + lc.link.Spec.ServiceClusterRouter
	if st.RouterID != "" && st.RouterID != lc.link.Spec.ServiceClusterRouter {
		router += " (" + st.RouterID + ")"
	}
	routes := "none"
	if len(st.ReverseRoutes) > 0 {
		var parts []string
		for _, x := range st.ReverseRoutes {
			parts = append(parts, x.ServiceCIDR+" via "+x.NextHop+" ("+x.GatewayRef+")")
		}
		routes = strings.Join(parts, ", ")
	}
	project := st.CustomerProjectID
	if project == "" {
		project = lc.link.Spec.CustomerProjectID
	}
	note := fmt.Sprintf("%s=true: releasing the finalizer without cleaning the customer side (credential unavailable: %s); left behind in project %s: %s, its attachment to %s, reverse routes: %s",
		v1alpha1.AnnotationAbandonCustomerResources, reason, project, port, router, routes)
	lc.eventf(corev1.EventTypeWarning, "CustomerResourcesAbandoned", "%s", note)
	lc.log.Info("abandoning customer-side resources", "project", project, "legPortID", st.LegPortID,
		"transitIP", st.TransitIP, "router", lc.link.Spec.ServiceClusterRouter, "routerID", st.RouterID, "reverseRoutes", routes)
}

// ownLegPort is the link's leg port for its cleanup: the one status names while it
// carries the link's tags, else any with them (in any network: a leg is looked for
// wherever a crash may have left it).
func ownLegPort(ctx context.Context, lc *linkCtx) (*openstack.Port, error) {
	st, net, own := &lc.link.Status, lc.legClients.Networking, owner(lc.link)
	if p, err := openstack.Recorded(ctx, own, st.LegPortID, net.GetPort, openstack.PortTags); err != nil {
		return nil, fmt.Errorf("reading leg port %s: %w", st.LegPortID, err)
	} else if p != nil {
		return p, nil
	}
	ps, err := net.ListPorts(ctx, openstack.ListPortsOpts{Tags: own.Selector()})
	if err != nil {
		return nil, fmt.Errorf("looking up the leg port by tag: %w", err)
	}
	if len(ps) > 0 {
		return &ps[0], nil
	}
	return nil, nil
}
