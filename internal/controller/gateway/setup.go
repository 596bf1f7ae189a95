package gateway

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/conditions"
	"bnerd.net/vpn-operator/internal/controller/namedwatch"
	"bnerd.net/vpn-operator/internal/gatewaypod"
	"bnerd.net/vpn-operator/internal/operatorconfig"
	"bnerd.net/vpn-operator/internal/render"
)

// indexPSKSecret indexes gateways by the names of the Secrets their tunnels read, so a
// rotated key reaches exactly the gateways that use it.
const indexPSKSecret = "ipsec.bnerd.net/psk-secret"

// The operator's RBAC, generated into config/rbac by `make generate` and compared with
// the reviewed list in cmd/bnerd-vpn-operator/rbac_test.go. Only the verbs the code
// uses: objects are created and updated, never patched; deleted only where the code
// deletes (a RoleBinding whose roleRef changed, a NetworkPolicy switched off, a Secret
// of an earlier release). Leader election's Lease is granted by the chart's Role in the
// operator's namespace. The gateway pod's own Role is narrower (see render.Role); the
// operator may create it because it holds every permission that Role grants.
//
// Gateways: the finalizer is added and removed by a merge patch, and the status written
// by server-side apply (a patch of the status subresource); neither is ever updated.
// get on the status subresource is not used by the operator: it holds it because the
// gateway pod's Role grants it (Kubernetes lets the operator create a Role only with
// permissions it holds itself).
//
// +kubebuilder:rbac:groups=ipsec.bnerd.net,resources=ipsecgateways;vpngateways,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=ipsec.bnerd.net,resources=ipsecgateways/status;vpngateways/status,verbs=get;patch
// +kubebuilder:rbac:groups=ipsec.bnerd.net,resources=ipsecgateways/finalizers;vpngateways/finalizers;clusterlinks/finalizers,verbs=update
// Secrets: the operator writes only a WireGuard gateway's key Secret
// (<name>-gateway-wireguard: create, update on rotation, delete when the gateway stops
// using WireGuard); it never writes or reads a tenant's pre-shared key Secret beyond get.
// It holds get, list and watch because Kubernetes lets it create the gateway pod's Role
// (get, list and watch on the Secrets the tunnels name) only if it holds those itself;
// it uses get to check a key's presence and length without caching it, and list/watch
// only name by name, metadata only (namedwatch); delete also removes the Secret of
// rendered keys earlier releases wrote.
//
// +kubebuilder:rbac:groups="",resources=configmaps;serviceaccounts,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=nodes;namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=list
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=k8s.cni.cncf.io,resources=network-attachment-definitions,verbs=get;list;watch;create;update

// SetupWithManager registers, per kind (IPsecGateway and VPNGateway), the phases'
// controller, the health controller and the pod binding, all backed by this reconciler
// and its one allocator.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.fillFromManager(mgr)
	if err := r.addRunnables(mgr); err != nil {
		return err
	}
	_, nadErr := mgr.GetRESTMapper().RESTMapping(render.NADGVK.GroupKind(), render.NADGVK.Version)
	for _, kind := range v1alpha1.GatewayKinds {
		for _, setup := range []func(ctrl.Manager, string) error{
			r.indexFields,
			func(mgr ctrl.Manager, kind string) error { return r.setupPhases(mgr, kind, nadErr) },
			r.setupHealth,
			r.setupBind,
		} {
			if err := setup(mgr, kind); err != nil {
				return err
			}
		}
	}
	return nil
}

// fillFromManager fills the Deps left zero from the manager, and the configuration's
// defaults.
func (r *Reconciler) fillFromManager(mgr ctrl.Manager) {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if c := mgr.GetClient(); reflect.TypeOf(c).Comparable() && r.Client == c {
		// Read in place only what the client would read: a client of a test's own
		// (one that fails or lags on purpose) is always asked. (Comparing interfaces
		// panics only when both hold the same uncomparable type, which the check
		// rules out.)
		r.stores = storesOf(mgr)
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder("bnerd-vpn-operator")
	}
	if r.Log.GetSink() == nil {
		r.Log = mgr.GetLogger().WithName("gateway")
	}
	if r.Config.ResyncInterval <= 0 {
		r.Config.ResyncInterval = operatorconfig.DefaultResyncInterval
	}
	if r.Config.MaxConcurrentReconciles <= 0 {
		r.Config.MaxConcurrentReconciles = 1
	}
}

// addRunnables adds the Secret follower and, when liveness detection is on, the
// liveness monitor.
func (r *Reconciler) addRunnables(mgr ctrl.Manager) error {
	meta, err := metadata.NewForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	r.secrets = namedwatch.New(meta, namedwatch.SecretsResource, "Secret")
	if err := mgr.Add(r.secrets); err != nil {
		return err
	}
	if r.Config.GatewayLivenessTimeout > 0 {
		if err := mgr.Add(&livenessMonitor{r: r, elected: mgr.Elected()}); err != nil {
			return err
		}
	}
	return nil
}

// indexFields indexes kind's gateways by the Secrets they name and by whether they
// route subnets.
func (r *Reconciler) indexFields(mgr ctrl.Manager, kind string) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), v1alpha1.NewGateway(kind), indexPSKSecret, func(o client.Object) []string {
		g, err := viewOf(o)
		if err != nil {
			return nil
		}
		return pskSecretNames(g.spec)
	}); err != nil {
		return err
	}
	return mgr.GetFieldIndexer().IndexField(context.Background(), v1alpha1.NewGateway(kind), indexRouted, func(o client.Object) []string {
		g, err := viewOf(o)
		if err != nil || len(routedSubnets(g.spec)) == 0 {
			return nil
		}
		return []string{"true"}
	})
}

// setupPhases registers the phases' controller of kind. nadErr: the
// NetworkAttachmentDefinition CRD is not installed (nothing of it owned or watched).
func (r *Reconciler) setupPhases(mgr ctrl.Manager, kind string, nadErr error) error {
	// No Secret is owned or watched through the cache: the Secrets gateways name are
	// followed one by one, metadata only (r.secrets).
	b := ctrl.NewControllerManagedBy(mgr).
		Named(strings.ToLower(kind)).
		For(v1alpha1.NewGateway(kind), builder.WithPredicates(predicate.Or(specOrLifecycleChanged, wireGuardKeyEvents, r.actedOnWrittenByOthers()))).
		Owns(&corev1.ConfigMap{}, ownedChanged).
		Owns(&corev1.ServiceAccount{}, ownedChanged).
		Owns(&rbacv1.Role{}, ownedChanged).
		Owns(&rbacv1.RoleBinding{}, ownedChanged).
		Owns(&appsv1.Deployment{}, ownedChanged).
		Owns(&networkingv1.NetworkPolicy{}, ownedChanged).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.mapNode(kind)), builder.WithPredicates(nodeChanged(r.Config.GatewayPod))).
		Watches(&v1alpha1.ClusterLink{}, handler.EnqueueRequestsFromMapFunc(r.mapAll(kind)), builder.WithPredicates(linkServingChanged)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.mapNamespace(kind)), builder.WithPredicates(labelsChanged)).
		Watches(&v1alpha1.VPNTenantPolicy{}, handler.EnqueueRequestsFromMapFunc(r.mapAll(kind)), builder.WithPredicates(specOrExistenceChanged)).
		Watches(&v1alpha1.IPsecGateway{}, handler.EnqueueRequestsFromMapFunc(r.mapLimitWaiters(kind)), builder.WithPredicates(usageMayHaveShrunk)).
		Watches(&v1alpha1.VPNGateway{}, handler.EnqueueRequestsFromMapFunc(r.mapLimitWaiters(kind)), builder.WithPredicates(usageMayHaveShrunk)).
		WatchesRawSource(r.secrets.Source(handler.EnqueueRequestsFromMapFunc(r.mapSecret(kind)))).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.mapStrandedPod(kind)), builder.WithPredicates(podMoved)).
		WatchesRawSource(source.Channel(r.wake[kind], &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: r.Config.MaxConcurrentReconciles,
			SkipNameValidation:      r.skipNameValidation(),
			RateLimiter:             r.backoff[kind],
		})
	if nadErr == nil {
		nad := &unstructured.Unstructured{}
		nad.SetGroupVersionKind(render.NADGVK)
		b = b.Owns(nad, ownedChanged)
	} else {
		r.Log.Info("WARNING: the NetworkAttachmentDefinition CRD (Multus) is not installed; gateway NADs cannot be created or watched", "error", nadErr.Error())
	}
	return b.Complete(kindReconciler{r: r, kind: kind})
}

// setupHealth registers the health controller of kind: the observations (PodReady,
// TunnelsUp) between the phases' reconciles.
func (r *Reconciler) setupHealth(mgr ctrl.Manager, kind string) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(strings.ToLower(kind)+"-health").
		For(v1alpha1.NewGateway(kind), builder.WithPredicates(healthChanged)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(mapPod(kind))).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: r.Config.MaxConcurrentReconciles,
			SkipNameValidation:      r.skipNameValidation(),
			RateLimiter:             r.healthBackoff[kind],
		}).
		Complete(healthReconciler{r: r, kind: kind})
}

// setupBind registers the binding of new gateway pods (bind.go): woken by a new or
// finished pod and by a gateway whose node changed.
func (r *Reconciler) setupBind(mgr ctrl.Manager, kind string) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(strings.ToLower(kind)+"-bind").
		For(v1alpha1.NewGateway(kind), builder.WithPredicates(pinChanged)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(mapPod(kind)), builder.WithPredicates(podPlacementChanged)).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: r.Config.MaxConcurrentReconciles,
			SkipNameValidation:      r.skipNameValidation(),
		}).
		Complete(newBindReconciler(r, kind))
}

// listGateways lists one kind's gateways, optionally filtered.
func (r *Reconciler) listGateways(ctx context.Context, kind string, opts ...client.ListOption) ([]*gateway, error) {
	l := v1alpha1.NewGatewayList(kind)
	if l == nil {
		return nil, fmt.Errorf("not a gateway kind: %q", kind)
	}
	if err := r.Client.List(ctx, l, opts...); err != nil {
		return nil, err
	}
	var out []*gateway
	err := meta.EachListItem(l, func(o runtime.Object) error {
		g, err := viewOf(o.(client.Object))
		if err == nil {
			out = append(out, g)
		}
		return err
	})
	return out, err
}

func requestOf(g *gateway) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: g.obj.GetNamespace(), Name: g.obj.GetName()}}
}

// mapNode wakes the gateways pinned to a node that changed, and those still waiting for
// a node or stuck on their node's providerID.
func (r *Reconciler) mapNode(kind string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		out, err := r.requestsOf(ctx, kind, func(g readOnlyGateway) bool {
			gen := g.meta.GetGeneration()
			return g.status.NodeName == o.GetName() || g.status.NodeName == "" ||
				!conditions.IsTrue(g.status.Conditions, v1alpha1.ConditionNodeSelected, gen) ||
				!conditions.IsTrue(g.status.Conditions, v1alpha1.ConditionPortAttached, gen)
		})
		if err != nil {
			r.Log.Error(err, "listing gateways for a node change")
			return nil
		}
		return out
	}
}

// mapStrandedPod wakes the phases' reconcile of the gateway a pod belongs to only when the
// pod is bound to a node other than the gateway's (one releaseStrandedPods may have to
// release). A pod on the gateway's own node is the health controller's alone: waking the
// phases for it too would observe the pod twice at once, for nothing.
func (r *Reconciler) mapStrandedPod(kind string) handler.MapFunc {
	toGateway := mapPod(kind)
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		reqs := toGateway(ctx, o)
		if len(reqs) == 0 {
			return nil
		}
		obj := v1alpha1.NewGateway(kind)
		if err := r.Client.Get(ctx, reqs[0].NamespacedName, obj); err != nil {
			return nil // gone: nothing to release for it
		}
		g, err := viewOf(obj)
		if err != nil || podNode(o) == g.status.NodeName {
			return nil
		}
		return reqs
	}
}

// mapSecret wakes the gateways whose tunnels read their keys from the Secret.
func (r *Reconciler) mapSecret(kind string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		gws, err := r.listGateways(ctx, kind, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexPSKSecret: o.GetName()})
		if err != nil {
			r.Log.Error(err, "listing gateways for a Secret change")
			return nil
		}
		out := make([]reconcile.Request, 0, len(gws))
		for _, g := range gws {
			out = append(out, requestOf(g))
		}
		return out
	}
}

// mapAll wakes every gateway of the kind: a ClusterLink change can change whom it
// serves (security-group sources, the exposure check), and a link names no gateway.
func (r *Reconciler) mapAll(kind string) handler.MapFunc {
	return func(ctx context.Context, _ client.Object) []reconcile.Request {
		out, err := r.requestsOf(ctx, kind, func(readOnlyGateway) bool { return true })
		if err != nil {
			r.Log.Error(err, "listing gateways for a ClusterLink change")
			return nil
		}
		return out
	}
}

// mapNamespace wakes the gateways of a namespace whose labels changed (a ClusterLink
// may select them by those labels).
func (r *Reconciler) mapNamespace(kind string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		out, err := r.requestsOf(ctx, kind, func(readOnlyGateway) bool { return true }, client.InNamespace(o.GetName()))
		if err != nil {
			r.Log.Error(err, "listing gateways for a namespace change")
			return nil
		}
		return out
	}
}

// requestsOf names the gateways of kind that want, read in place (eachGateway): the
// mappers that wake many gateways need their names and a look at their status, not a
// copy of each. (A ClusterLink's creation woke all 1,000 gateways of the scale run
// through a list that copied every one of them, a tenth of the operator's allocations.)
func (r *Reconciler) requestsOf(ctx context.Context, kind string, want func(readOnlyGateway) bool, opts ...client.ListOption) ([]reconcile.Request, error) {
	var out []reconcile.Request
	err := r.eachGateway(ctx, func(g readOnlyGateway) {
		if g.kind == kind && want(g) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: g.meta.GetNamespace(), Name: g.meta.GetName()}})
		}
	}, opts...)
	return out, err
}

// mapLimitWaiters wakes the gateways of the kind that wait for room under their
// tenant's limits (Validated=False/TenantLimitExceeded) when another gateway went or
// shrank. Tenants span namespaces, so every waiter is woken: there are few, and each
// counts its tenant again.
func (r *Reconciler) mapLimitWaiters(kind string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		out, err := r.requestsOf(ctx, kind, func(g readOnlyGateway) bool {
			c := conditions.Get(g.status.Conditions, v1alpha1.ConditionValidated)
			return g.meta.GetUID() != o.GetUID() && c != nil && c.Reason == v1alpha1.ReasonTenantLimitExceeded
		})
		if err != nil {
			r.Log.Error(err, "listing gateways for a tenant's usage change")
			return nil
		}
		return out
	}
}

// usageMayHaveShrunk passes the gateway events after which a tenant may hold less: a
// gateway gone, being deleted, or with a changed spec.
var usageMayHaveShrunk = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
			e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return true },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// specOrExistenceChanged passes creations, deletions and spec changes (not status
// writes): a VPNTenantPolicy's status changes with every gateway it counts.
var specOrExistenceChanged = predicate.Funcs{
	UpdateFunc:  func(e event.UpdateEvent) bool { return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// linkServingChanged passes the ClusterLink events that can change whom a link serves
// or with which network: creation, deletion (starting), a spec change, and its
// Validated condition flipping (a refused link serves no one).
var linkServingChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*v1alpha1.ClusterLink)
		n, ok2 := e.ObjectNew.(*v1alpha1.ClusterLink)
		if !ok1 || !ok2 {
			return true
		}
		return o.Generation != n.Generation || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero() ||
			validated(o) != validated(n)
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

func validated(l *v1alpha1.ClusterLink) metav1.ConditionStatus {
	if c := meta.FindStatusCondition(l.Status.Conditions, v1alpha1.ConditionValidated); c != nil {
		return c.Status
	}
	return metav1.ConditionUnknown
}

// labelsChanged passes namespace events whose labels changed (and creations and
// deletions).
var labelsChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		return !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// specOrLifecycleChanged passes the gateway's own events that ask for work: creation,
// a spec change (generation), an annotation change, deletion starting, and our finalizer
// going missing. Status writes (the operator's own, and every tunnel change the status
// agent reports) do not: they would make each write a reconcile, and a refused request a
// second attempt. An annotation change is how a user asks for a reconcile now (what
// OpenStack changed out of band, a detached port say, is no event the operator can watch;
// `kubectl vpn diagnose` prints the command), as on ClusterLinks; the operator itself
// never writes a gateway's annotations. The health controller observes the agent's reports.
// One kind of status write does pass: a change of a field the operator acts on
// to values this process did not write (actedOnWrittenByOthers), which the gateway pod's
// token could have made; the reconcile checks them against the operator's records and
// writes back its own values (StatusForged).
var specOrLifecycleChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld, e.ObjectNew
		if o == nil || n == nil {
			return true
		}
		return o.GetGeneration() != n.GetGeneration() ||
			!maps.Equal(o.GetAnnotations(), n.GetAnnotations()) ||
			o.GetDeletionTimestamp().IsZero() != n.GetDeletionTimestamp().IsZero() ||
			controllerutil.ContainsFinalizer(o, v1alpha1.FinalizerGateway) && !controllerutil.ContainsFinalizer(n, v1alpha1.FinalizerGateway)
	},
}

// actedOn are the status fields the operator programs OpenStack or places the pod by.
type actedOn struct{ serviceCIDR, portFixedIP, portID, nodeName, serverID string }

func actedOnOf(st *v1alpha1.GatewayStatus) actedOn {
	return actedOn{st.ServiceCIDR, st.PortFixedIP, st.PortID, st.NodeName, st.ServerID}
}

// actedOnWrittenByOthers passes an update that changed a status field the operator acts
// on to values this process did not write lately (its own writes of those fields must
// not add a reconcile: a refused request would be tried again at once, before its
// backoff). The values are compared, not the resourceVersion: the watch event of a
// write can arrive before the write's call returns.
func (r *Reconciler) actedOnWrittenByOthers() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld, e.ObjectNew
			if o == nil || n == nil {
				return false
			}
			now := actedOnOf(statusOf(n))
			return now != actedOnOf(statusOf(o)) && !r.wroteActedOn(n.GetUID(), now)
		},
	}
}

// ownedChanged passes the events of an owned object that can ask for work: a change, a
// deletion. Not its creation: the reconcile that created it has already done the rest of
// its pass, and the echo was a second reconcile of every gateway (four OpenStack reads
// each, finding nothing to do), queued behind the first ones while an estate arrived.
// (On a start the gateways' own creation events reconcile each of them.)
var ownedChanged = builder.WithPredicates(predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
})

// podMoved passes the pod events that can strand a gateway pod on a lost node: a pod
// bound to a node (created, or bound later). Status churn of a running pod does not.
var podMoved = predicate.Funcs{
	CreateFunc:  func(e event.CreateEvent) bool { return podNode(e.Object) != "" },
	UpdateFunc:  func(e event.UpdateEvent) bool { return podNode(e.ObjectOld) != podNode(e.ObjectNew) },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// podPlacementChanged passes the pod events that can free a gateway's node or bring a pod
// to bind: a pod created or deleted, bound, finished or marked for deletion.
var podPlacementChanged = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return true },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1.Pod)
		n, ok2 := e.ObjectNew.(*corev1.Pod)
		if !ok1 || !ok2 {
			return true
		}
		return o.Spec.NodeName != n.Spec.NodeName || o.Status.Phase != n.Status.Phase ||
			o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero()
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return true },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// pinChanged passes a gateway's creation and a change of the node it is pinned to.
var pinChanged = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return true },
	UpdateFunc: func(e event.UpdateEvent) bool {
		// statusOf, not viewOf: this sees every status write (the agents' heartbeats),
		// and viewOf copies the whole object.
		return statusOf(e.ObjectOld).NodeName != statusOf(e.ObjectNew).NodeName
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

func podNode(o client.Object) string {
	if p, ok := o.(*corev1.Pod); ok {
		return p.Spec.NodeName
	}
	return ""
}

// nodeChanged passes node events that can change a gateway's placement: not the
// heartbeats that update every node's status all the time. Under a gateway pod shape
// (node selector, tolerations) that is also a change of whether the node fits or keeps
// gateways, which a label or a taint can change.
func nodeChanged(pod gatewaypod.Shape) predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*corev1.Node)
			n, ok2 := e.ObjectNew.(*corev1.Node)
			if !ok1 || !ok2 {
				return true
			}
			return nodeReady(o) != nodeReady(n) ||
				o.Spec.Unschedulable != n.Spec.Unschedulable ||
				o.Spec.ProviderID != n.Spec.ProviderID ||
				controlPlane(o) != controlPlane(n) ||
				o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero() ||
				pod.Fits(o) != pod.Fits(n) || pod.Keeps(o) != pod.Keeps(n)
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// skipNameValidation is the controllers' option: set only when asked, so that otherwise
// the manager's own setting applies (a false here would override a manager that skips).
func (r *Reconciler) skipNameValidation() *bool {
	if r.SkipNameValidation {
		return &r.SkipNameValidation
	}
	return nil
}
