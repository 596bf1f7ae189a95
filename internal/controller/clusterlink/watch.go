package clusterlink

import (
	"context"
	"maps"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// FanOutDelay is how long a gateway change waits before it reaches the ClusterLinks:
// every change within it (1,000 gateways appearing, an estate reconciled after a
// restart) is one reconcile of each link, not one per gateway; a reverse route reaches
// the service clusters' routers that much later.
const FanOutDelay = 5 * time.Second

// fanOut maps a change of a gateway, a namespace's labels or another link onto the
// ClusterLinks, after FanOutDelay. A link already queued by the fan-out is not queued
// again until that reconcile starts: it will read the cache after this change. (The
// workqueue would keep the earlier turn anyway, but client-go counts every delayed add
// as a retry, and 1,000 arriving gateways made 14,000 of them for about 250 reconciles.)
//
// A gateway gaining its reverse route (the common event while an estate arrives) does
// not wake an Aggregate link whose pool route is on its router already: that one route
// reaches the new gateway too, and the link would only read its routers to write nothing.
// Every other change (a loss, a deletion, a moved route) wakes every link.
func (r *Reconciler) fanOut() handler.EventHandler {
	later := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], gain bool) {
		var list v1alpha1.ClusterLinkList
		if err := r.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
			return
		}
		for i := range list.Items {
			l := &list.Items[i]
			if gain && r.reverseMode(l) == v1alpha1.ReverseRouteAggregate && r.aggregateRoutedNow(l.UID) {
				continue
			}
			if !r.fanOutQueue(l.Name) {
				continue
			}
			q.AddAfter(reconcile.Request{NamespacedName: client.ObjectKey{Name: l.Name}}, r.fanOutDelay)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			later(ctx, q, reverseKey(e.Object) != "") // a gateway's; a namespace or link has none
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			later(ctx, q, reverseKey(e.ObjectOld) == "" && reverseKey(e.ObjectNew) != "")
		},
		DeleteFunc: func(ctx context.Context, _ event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			later(ctx, q, false)
		},
		GenericFunc: func(ctx context.Context, _ event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			later(ctx, q, false)
		},
	}
}

// fanOutQueue marks link queued by the fan-out; false when it already was and that
// reconcile has not started.
func (r *Reconciler) fanOutQueue(link string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fanOutQueued[link] {
		return false
	}
	r.fanOutQueued[link] = true
	return true
}

// fanOutStarted: a reconcile of link starts (for any reason) and reads the cache as it
// is now, so the next change queues the link again.
func (r *Reconciler) fanOutStarted(link string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.fanOutQueued, link)
}

// aggregateRoutedNow says whether the Aggregate link uid's last reverse-route pass left
// its pool route in place.
func (r *Reconciler) aggregateRoutedNow(uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.aggregateRouted[uid]
}

// setAggregateRouted records it. A pass clears it before it lists the gateways and sets
// it only once the route is in place, so a gain the handler skips is either one that
// pass's list saw or one the installed route reaches: no wake-up is lost between the two.
func (r *Reconciler) setAggregateRouted(uid types.UID, routed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if routed {
		r.aggregateRouted[uid] = true
	} else {
		delete(r.aggregateRouted, uid)
	}
}

// reverseKey is the part of a gateway that reverse routing depends on; "" when the
// gateway contributes no reverse route.
func reverseKey(obj client.Object) string {
	return reverseKeyOf(obj, !obj.GetDeletionTimestamp().IsZero())
}

func reverseKeyOf(obj client.Object, deleting bool) string {
	g, ok := obj.(v1alpha1.Gateway)
	if !ok {
		return ""
	}
	rt, ok := reverseTarget(g.GetGatewaySpec(), g.GetGatewayStatus(), deleting)
	if !ok {
		return ""
	}
	return rt.Destination + " via " + rt.NextHop
}

// GatewayPredicate lets through only gateway events that change the reverse-route set:
// a gateway gaining or losing its last reverse exposure, its service CIDR or port
// address changing, or its deletion. Everything else (tunnel state, conditions)
// would fan out to every ClusterLink for nothing.
func GatewayPredicate() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return reverseKey(e.Object) != "" },
		// The final object of a delete may already carry its deletion timestamp; what
		// matters is whether it contributed a route before.
		DeleteFunc: func(e event.DeleteEvent) bool { return reverseKeyOf(e.Object, false) != "" },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return reverseKey(e.ObjectOld) != reverseKey(e.ObjectNew)
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

func gatewayPredicate() builder.WatchesOption { return builder.WithPredicates(GatewayPredicate()) }

// linkChanged passes the ClusterLink events that ask for work: creation, a spec change
// (generation), an annotation change (attestation, abandonment), the start of deletion
// and a removed finalizer. The reconciler's own status writes do not, so a refusal is
// tried once per change, not once more for the write that reported it.
func linkChanged() builder.ForOption {
	return builder.WithPredicates(predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld, e.ObjectNew
			if o == nil || n == nil {
				return true
			}
			return o.GetGeneration() != n.GetGeneration() ||
				!maps.Equal(o.GetAnnotations(), n.GetAnnotations()) ||
				o.GetDeletionTimestamp().IsZero() != n.GetDeletionTimestamp().IsZero() ||
				controllerutil.ContainsFinalizer(o, v1alpha1.FinalizerClusterLink) && !controllerutil.ContainsFinalizer(n, v1alpha1.FinalizerClusterLink)
		},
	})
}

// credentialLink maps a change of a followed credential Secret (clusterlink-<name>)
// onto its link.
func credentialLink(_ context.Context, o client.Object) []ctrl.Request {
	name, ok := strings.CutPrefix(o.GetName(), SecretNamePrefix)
	if !ok || name == "" {
		return nil
	}
	return []ctrl.Request{{NamespacedName: client.ObjectKey{Name: name}}}
}

// namespaceLabelsChanged passes the namespace events that can change which gateways a
// link serves: a namespace created or deleted, or its labels changed.
func namespaceLabelsChanged() builder.WatchesOption {
	return builder.WithPredicates(predicate.Funcs{
		UpdateFunc:  func(e event.UpdateEvent) bool { return !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels()) },
		GenericFunc: func(event.GenericEvent) bool { return false },
	})
}

// linkSpecOrLifecycle passes the ClusterLink events that can change another link's
// overlap check or selection: creation, deletion, a spec change.
func linkSpecOrLifecycle() builder.WatchesOption {
	return builder.WithPredicates(predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
				e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	})
}
