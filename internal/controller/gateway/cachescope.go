package gateway

import (
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"bnerd.net/vpn-operator/internal/render"
)

// CacheScope is what the manager's cache holds of the kinds a gateway owns or reads by
// label: only the operator's own objects. Without it the operator would keep every
// ConfigMap, ServiceAccount, Role, RoleBinding, Deployment and NetworkPolicy of the
// cluster in memory (the Owns watches are cluster-wide), and in a provider's cluster
// those outnumber a gateway's by far. Every object a gateway owns carries
// render.Labels, managed-by among them; one that exists under a gateway's object name
// without that label is read past the cache when its create finds it (readOrCreate),
// so it is refused or taken back exactly as before.
//
// The NetworkAttachmentDefinitions stay cached whole: a scope needs the kind's REST
// mapping when the manager starts, and the operator starts (and says so) without Multus;
// a cluster has few of them.
func CacheScope() map[client.Object]cache.ByObject {
	ours := cache.ByObject{Label: ownedObjectSelector()}
	return map[client.Object]cache.ByObject{
		// The gateway reconciler (to release a pod stranded on a lost node) and the
		// health controllers (PodReady) read gateway pods: those, not every pod.
		&corev1.Pod{}: {Label: GatewayPodSelector()},
		// The gateways' liveness Leases (the same labels), not the nodes' or anyone else's.
		&coordinationv1.Lease{}:       {Label: GatewayPodSelector()},
		&corev1.ConfigMap{}:           ours,
		&corev1.ServiceAccount{}:      ours,
		&rbacv1.Role{}:                ours,
		&rbacv1.RoleBinding{}:         ours,
		&appsv1.Deployment{}:          {Label: ownedObjectSelector(), Transform: withoutPodTemplate},
		&networkingv1.NetworkPolicy{}: ours,
	}
}

// withoutPodTemplate is a gateway Deployment as the cache keeps it: without its pod
// template (and, as every cached kind, without managed fields). The template is most
// of a Deployment and the largest part of the operator's heap at scale (a tenth of it at
// 1,000 gateways), yet the operator needs it only to compare a Deployment that changed
// with the rendering; it reads that one whole from the API server (wholeDeployment).
// A cached Deployment is never written back as it is: the operator writes the
// rendering's spec over it, and a paced restart's completion reads it whole before it
// updates its annotations. Cache transforms replace the manager's default one, so this
// one strips the managed fields too.
func withoutPodTemplate(obj any) (any, error) {
	obj, err := stripManagedFields(obj)
	if d, ok := obj.(*appsv1.Deployment); ok {
		d.Spec.Template = corev1.PodTemplateSpec{}
	}
	return obj, err
}

var stripManagedFields = cache.TransformStripManagedFields()

// ownedObjectSelector selects the objects the operator made for gateways.
func ownedObjectSelector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{render.LabelManagedBy: render.ManagedBy})
}
