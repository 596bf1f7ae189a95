package clusterlink

import (
	"context"
	"maps"
	"strings"

	ctrl "sigs.k8s.io/controller-runtime"

	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	v1 "bnerd.net/vpn-operator/api/v1alpha1"
)

func (r *Reconciler) fanOut() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(r.linkRequests)
}

// reverseKey is the part of a gateway that reverse routing depends on; "" when the
// gateway contributes no reverse route.
func reverseKey(obj client.Object) string {
	return reverseKeyOf(obj, !obj.GetDeletionTimestamp().IsZero())
}

func reverseKeyOf(obj client.Object, deleting bool) string {
	var (
		spec *v1.GatewaySpec
		st   *v1.GatewayStatus
	)
	switch g := obj.(type) {
	case *v1.IPsecGateway:
		spec, st = &g.Spec, &g.Status
	case *v1.VPNGateway:
		spec, st = &g.Spec.GatewaySpec, &g.Status
	default:
		return ""
	}
	rt, ok := reverseTarget(spec, st, deleting)
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
				controllerutil.ContainsFinalizer(o, v1.FinalizerClusterLink) && !controllerutil.ContainsFinalizer(n, v1.FinalizerClusterLink)
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
