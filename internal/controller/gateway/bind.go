package gateway

import (
	"context"
	"fmt"
	"sort"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/render"
)

// The operator is the scheduler of gateway pods (render.SchedulerName): it binds a
// gateway's new pod to the gateway's node only once no earlier pod of the gateway is
// left there, so the new sandbox never asks for the dedicated port's interface while
// the old one still holds it. The kubelet reports a deleted pod finished (Succeeded or
// Failed), and then removes the object, only after it has stopped the pod's sandbox, and
// stopping the sandbox (the CNI DEL) hands the interface back to the node. On the node
// world the binding followed the old pod's finished phase, 0.6-1.6 s after the delete and
// before its removal, with no sandbox failure in four runs of twelve deletes each.
//
// +kubebuilder:rbac:groups="",resources=pods/binding,verbs=create
// +kubebuilder:rbac:groups=apps,resources=replicasets,verbs=get

// bindReconciler binds the pending pods of one kind's gateways. Its key is the gateway:
// every event of one of its pods (a new pod, a pod gone) looks at all of them.
type bindReconciler struct {
	r    *Reconciler
	kind string
	// inFlight remembers, per gateway, the pod bound last until the cache shows it bound
	// (or gone): a reconcile reading the cache before the binding's update arrived would
	// otherwise see no pod on the node and bind a second pending pod.
	mu       sync.Mutex
	inFlight map[types.NamespacedName]types.UID
}

func newBindReconciler(r *Reconciler, kind string) *bindReconciler {
	return &bindReconciler{r: r, kind: kind, inFlight: map[types.NamespacedName]types.UID{}}
}

func (b *bindReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r := b.r
	obj := v1alpha1.NewGateway(b.kind)
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	g, err := viewOf(obj)
	if err != nil || !g.obj.GetDeletionTimestamp().IsZero() {
		return ctrl.Result{}, nil
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(req.Namespace), client.MatchingLabels(render.SelectorLabels(g.ref()))); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the gateway's pods: %w", err)
	}
	var pod *corev1.Pod
	for _, p := range b.candidates(req.NamespacedName, g.status.NodeName, pods.Items) {
		ok, err := b.ownedByDeployment(ctx, g, p)
		if err != nil {
			return ctrl.Result{}, err
		}
		if ok {
			pod = p
			break
		}
	}
	if pod == nil {
		return ctrl.Result{}, nil
	}
	node := g.status.NodeName
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	if err := r.Client.SubResource("binding").Create(ctx, pod, binding); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return ctrl.Result{}, nil // gone, or bound already: its event brings us back
		}
		return ctrl.Result{}, fmt.Errorf("binding pod %s to node %s: %w", pod.Name, node, err)
	}
	b.mu.Lock()
	b.inFlight[req.NamespacedName] = pod.UID
	b.mu.Unlock()
	ctrl.LoggerFrom(ctx).V(1).Info("bound the gateway's pod", "pod", pod.Name, "node", node)
	return ctrl.Result{}, nil
}

// candidates are the gateway's pods that may be bound to node now, oldest first: pending
// pods that wait for the operator, are not being deleted and are pinned to node. There
// are none while a pod holds the node: one bound there that has not finished, terminating
// or not (its sandbox may still hold the interface; a finished pod's kubelet has stopped
// its sandbox), or the one bound last, whose binding the cache does not show yet.
func (b *bindReconciler) candidates(key types.NamespacedName, node string, pods []corev1.Pod) []*corev1.Pod {
	if node == "" {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	last, seen := b.inFlight[key], false
	var candidates []*corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.UID == last {
			seen = true
			if p.Spec.NodeName == "" {
				return nil // bound by us; the cache does not show it yet
			}
		}
		if p.Spec.NodeName == node && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return nil
		}
		if p.Spec.NodeName == "" && p.Spec.SchedulerName == render.SchedulerName && p.DeletionTimestamp.IsZero() &&
			render.PinnedNode(&p.Spec) == node {
			candidates = append(candidates, p)
		}
	}
	if !seen {
		delete(b.inFlight, key)
	}
	sort.Slice(candidates, func(i, j int) bool {
		return candidates[i].CreationTimestamp.Before(&candidates[j].CreationTimestamp)
	})
	return candidates
}

// ownedByDeployment reports whether the pod is the gateway Deployment's: its controller is
// a ReplicaSet whose controller is the Deployment the gateway owns. Anyone who may create
// pods in the namespace can give one the gateway's labels and scheduler name; the operator
// binds only its own.
func (b *bindReconciler) ownedByDeployment(ctx context.Context, g *gateway, pod *corev1.Pod) (bool, error) {
	r := b.r
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != "ReplicaSet" || owner.APIVersion != appsv1.SchemeGroupVersion.String() {
		return false, nil
	}
	// The pod's event can arrive before the Deployment's (two watches; the operator has
	// just created it): a Deployment the cache does not have yet is read directly, or
	// the pod would wait for an event that never comes. A sandbox run on a loaded machine
	// left a gateway's first pod pending for three minutes that way.
	var dep appsv1.Deployment
	key := client.ObjectKey{Namespace: pod.Namespace, Name: render.DeploymentName(g.obj.GetName())}
	err := r.Client.Get(ctx, key, &dep)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, &dep)
	}
	if err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if c := metav1.GetControllerOf(&dep); c == nil || c.UID != g.obj.GetUID() {
		return false, nil
	}
	// ReplicaSets are not cached (the operator reads one per new pod): read it directly.
	var rs appsv1.ReplicaSet
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: owner.Name}, &rs); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	c := metav1.GetControllerOf(&rs)
	return rs.UID == owner.UID && c != nil && c.UID == dep.UID, nil
}

// waitingForBinding says why a pending gateway pod has no node yet: the terminating pod
// it waits for, a pin the gateway has left, or the operator's binding.
func waitingForBinding(g *gateway, pod *corev1.Pod, terminating string) string {
	node := g.status.NodeName
	if pin := render.PinnedNode(&pod.Spec); pin != node {
		return fmt.Sprintf("pinned to node %s, but the gateway's port is attached to node %s's server: the Deployment's rollout replaces it", pin, node)
	}
	if terminating != "" {
		return fmt.Sprintf("waiting for pod %s to terminate and hand the port's interface back on node %s; the operator binds this pod there then", terminating, node)
	}
	return "waiting for the operator to bind it to node " + node
}
