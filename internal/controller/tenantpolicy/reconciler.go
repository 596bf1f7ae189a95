// Package tenantpolicy reports each VPNTenantPolicy as the operator applies it: which
// namespaces it selects, whether another policy selects one of them too, and what the
// gateways there hold against its limits. It changes nothing but the policy's status:
// the gateway reconciler enforces the policy (internal/tenancy decides for both).
package tenantpolicy

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/conditions"
	"bnerd.net/vpn-operator/internal/tenancy"
)

// +kubebuilder:rbac:groups=ipsec.bnerd.net,resources=vpntenantpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=ipsec.bnerd.net,resources=vpntenantpolicies/status,verbs=update

// Reconciler writes VPNTenantPolicy status.
type Reconciler struct {
	Client client.Client
	Log    logr.Logger
	// Clock stamps conditions; nil is time.Now.
	Clock conditions.Clock
	// SkipNameValidation lets several managers in one process (tests) register it.
	SkipNameValidation bool
}

// maxListed bounds the namespaces and refused gateways a condition message names; the
// status lists every namespace.
const maxListed = 10

// Reconcile computes one policy's status from the cache.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pol v1alpha1.VPNTenantPolicy
	if err := r.Client.Get(ctx, req.NamespacedName, &pol); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var policies v1alpha1.VPNTenantPolicyList
	if err := r.Client.List(ctx, &policies); err != nil {
		return ctrl.Result{}, err
	}
	var nss corev1.NamespaceList
	if err := r.Client.List(ctx, &nss); err != nil {
		return ctrl.Result{}, err
	}
	st := *pol.Status.DeepCopy()
	st.ObservedGeneration = pol.Generation
	set := conditions.Setter{Conditions: &st.Conditions, Generation: pol.Generation, Now: r.Clock}

	selected, overlaps := selection(&pol, policies.Items, nss.Items)
	st.Namespaces = sortedKeys(selected)
	st.NamespaceCount = int32(len(st.Namespaces))

	// The cache's own objects, not copies: Members only reads them, and with a thousand
	// gateways arriving this reconcile runs back to back, copying the estate each time.
	gws, err := v1alpha1.ListGateways(ctx, r.Client, client.UnsafeDisableDeepCopy)
	if err != nil {
		return ctrl.Result{}, err
	}
	limits := pol.Spec.Limits.Values()
	total, refused := tenancy.Admit(limits, tenancy.Members(gws, selected))
	st.Usage = total
	st.RefusedGateways = int32(len(refused))

	setConditions(set, &pol, len(st.Namespaces), overlaps, refused, tenancy.Summary(total, limits))
	if equality.Semantic.DeepEqual(st, pol.Status) {
		return ctrl.Result{}, nil
	}
	pol.Status = st
	if err := r.Client.Status().Update(ctx, &pol); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{}, nil
}

// selection is the namespaces pol selects and, for each of them that another policy
// selects too, those other policies' names.
func selection(pol *v1alpha1.VPNTenantPolicy, policies []v1alpha1.VPNTenantPolicy, nss []corev1.Namespace) (selected map[string]bool, overlaps map[string][]string) {
	selected, overlaps = map[string]bool{}, map[string][]string{}
	for _, ns := range nss {
		if !tenancy.Selects(pol, ns.Labels) {
			continue
		}
		selected[ns.Name] = true
		for _, other := range tenancy.Selecting(policies, ns.Labels) {
			if other != pol.Name {
				overlaps[ns.Name] = append(overlaps[ns.Name], other)
			}
		}
	}
	return selected, overlaps
}

// setConditions sets Validated, Exclusive, WithinLimits and the Ready that sums them up.
func setConditions(set conditions.Setter, pol *v1alpha1.VPNTenantPolicy, namespaces int, overlaps map[string][]string, refused []tenancy.Refusal, usage string) {
	valid := true
	if errs := pol.Spec.Validate(); len(errs) > 0 {
		valid = false
		set.False(v1alpha1.ConditionValidated, v1alpha1.ReasonInvalidSpec, errs.ToAggregate().Error())
	} else {
		set.True(v1alpha1.ConditionValidated, v1alpha1.ReasonValid, "the spec passed validation")
	}
	exclusive := len(overlaps) == 0
	if exclusive {
		set.True(v1alpha1.ConditionExclusive, v1alpha1.ReasonNoOverlap, fmt.Sprintf("no other VPNTenantPolicy selects the %d namespace(s) this one selects", namespaces))
	} else {
		var parts []string
		for _, ns := range sortedKeys(overlaps) {
			parts = append(parts, fmt.Sprintf("%s (also %s)", ns, strings.Join(overlaps[ns], ", ")))
		}
		set.False(v1alpha1.ConditionExclusive, v1alpha1.ReasonPolicyOverlap, "namespaces selected by another VPNTenantPolicy too, whose gateways are refused (TenantPolicyConflict) until the selectors are disjoint: "+listed(parts))
	}
	if len(refused) == 0 {
		set.True(v1alpha1.ConditionWithinLimits, v1alpha1.ReasonWithinLimits, usage)
	} else {
		var parts []string
		for _, x := range refused {
			parts = append(parts, fmt.Sprintf("%s (%s)", x.Ref, strings.Join(x.Passes, ", ")))
		}
		set.False(v1alpha1.ConditionWithinLimits, v1alpha1.ReasonLimitExceeded, fmt.Sprintf("%d gateway(s) refused, they would pass the limits: %s; admitted: %s", len(refused), listed(parts), usage))
	}
	switch {
	case !valid:
		set.False(v1alpha1.ConditionReady, v1alpha1.ReasonInvalidSpec, "the spec is invalid")
	case !exclusive:
		set.False(v1alpha1.ConditionReady, v1alpha1.ReasonPolicyOverlap, "another VPNTenantPolicy selects some of the same namespaces")
	case len(refused) > 0:
		set.False(v1alpha1.ConditionReady, v1alpha1.ReasonLimitExceeded, fmt.Sprintf("%d gateway(s) refused by the limits", len(refused)))
	default:
		set.True(v1alpha1.ConditionReady, v1alpha1.ReasonReconciled, fmt.Sprintf("applied to %d namespace(s)", namespaces))
	}
}

func listed(parts []string) string {
	if len(parts) > maxListed {
		return strings.Join(parts[:maxListed], "; ") + fmt.Sprintf("; and %d more", len(parts)-maxListed)
	}
	return strings.Join(parts, "; ")
}

// sortedKeys is m's keys in order (nil for an empty map, as the status has always said).
func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// SetupWithManager registers the controller: a policy is recomputed when it changes,
// when any other policy or a namespace's labels change (selection and overlap), and
// when a gateway appears, goes, changes its spec or its admission.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.Log.GetSink() == nil {
		r.Log = mgr.GetLogger().WithName("tenantpolicy")
	}
	all := handler.EnqueueRequestsFromMapFunc(r.mapAll)
	return ctrl.NewControllerManagedBy(mgr).
		Named("vpntenantpolicy").
		For(&v1alpha1.VPNTenantPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.VPNTenantPolicy{}, all, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Namespace{}, all, builder.WithPredicates(nsLabelsChanged)).
		Watches(&v1alpha1.IPsecGateway{}, r.later(), builder.WithPredicates(usageChanged)).
		Watches(&v1alpha1.VPNGateway{}, r.later(), builder.WithPredicates(usageChanged)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1, SkipNameValidation: r.skipNameValidation()}).
		Complete(r)
}

// UsageDelay is how long a gateway change waits before it reaches the policies: the
// changes within it are counted by one reconcile and one status write. A policy's status
// reports usage; admission itself is decided by each gateway's own reconcile, so nothing
// waits on this. (While a thousand gateways arrived, each policy was recomputed back to
// back, reading the whole estate each time.)
const UsageDelay = 2 * time.Second

// later enqueues every policy after UsageDelay; a policy already waiting keeps its turn.
func (r *Reconciler) later() handler.EventHandler {
	add := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		for _, req := range r.mapAll(ctx, nil) {
			q.AddAfter(req, UsageDelay)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, _ event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q)
		},
		UpdateFunc: func(ctx context.Context, _ event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q)
		},
		DeleteFunc: func(ctx context.Context, _ event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q)
		},
	}
}

// mapAll enqueues every policy: there are few, and any of them may count the object.
func (r *Reconciler) mapAll(ctx context.Context, _ client.Object) []reconcile.Request {
	var list v1alpha1.VPNTenantPolicyList
	if err := r.Client.List(ctx, &list); err != nil {
		r.Log.Error(err, "listing VPNTenantPolicies")
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, p := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Name: p.Name}})
	}
	return out
}

var nsLabelsChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		return !equality.Semantic.DeepEqual(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// usageChanged passes gateway creations and deletions, spec changes, and a change of
// the Validated condition (admission); not the status agent's tunnel reports.
var usageChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		if e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() {
			return true
		}
		return validated(e.ObjectOld) != validated(e.ObjectNew)
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

func validated(o client.Object) string {
	g, ok := o.(v1alpha1.Gateway)
	if !ok {
		return ""
	}
	if c := meta.FindStatusCondition(g.GetGatewayStatus().Conditions, v1alpha1.ConditionValidated); c != nil {
		return fmt.Sprintf("%s/%s/%d", c.Status, c.Reason, c.ObservedGeneration)
	}
	return ""
}

// skipNameValidation is the controller's option: set only when asked, so that otherwise
// the manager's own setting applies (a false here would override a manager that skips).
func (r *Reconciler) skipNameValidation() *bool {
	if r.SkipNameValidation {
		return &r.SkipNameValidation
	}
	return nil
}
