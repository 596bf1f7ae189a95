package gateway

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/render"
)

// A gateway's new pod is bound to the gateway's node only once the pod before it has left
// that node (the old sandbox handed the port's interface back); pods that are not the
// Deployment's, or are pinned elsewhere, are never bound. envtest runs no ReplicaSet
// controller and no kubelet: the test creates the ReplicaSet and its pods as the
// controller would, and holds the old pod in Terminating with a finalizer, as a kubelet
// still stopping its sandbox does.
func TestNewPodBoundOnlyOnceTheOldOneLeftTheNode(t *testing.T) {
	h := newHarness(t)
	h.node("node-b", "openstack:///"+serverB, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("bind", spec(false))
	h.waitConverged("bind")
	node := h.get("bind").Status.NodeName

	var dep appsv1.Deployment
	if err := env.Client.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: render.DeploymentName("bind")}, &dep); err != nil {
		t.Fatal(err)
	}
	if dep.Spec.Template.Spec.NodeName != "" || dep.Spec.Template.Spec.SchedulerName != render.SchedulerName || render.PinnedNode(&dep.Spec.Template.Spec) != node {
		t.Fatalf("template not pinned for the operator's binding: nodeName %q scheduler %q pinned %q", dep.Spec.Template.Spec.NodeName, dep.Spec.Template.Spec.SchedulerName, render.PinnedNode(&dep.Spec.Template.Spec))
	}
	yes := true
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: dep.Name + "-7d4b9c", Labels: dep.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID, Controller: &yes}}},
		Spec: appsv1.ReplicaSetSpec{Selector: dep.Spec.Selector, Template: dep.Spec.Template},
	}
	if err := env.Client.Create(h.ctx, rs); err != nil {
		t.Fatal(err)
	}
	ownedBy := func(o client.Object) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: o.GetObjectKind().GroupVersionKind().Kind, Name: o.GetName(), UID: o.GetUID(), Controller: &yes}}
	}
	rs.Kind = "ReplicaSet"
	// A ReplicaSet of the same name shape that the Deployment does not own.
	foreign := rs.DeepCopy()
	foreign.ObjectMeta = metav1.ObjectMeta{Namespace: h.ns, Name: dep.Name + "-f0r6ed", Labels: dep.Spec.Template.Labels}
	if err := env.Client.Create(h.ctx, foreign); err != nil {
		t.Fatal(err)
	}
	foreign.Kind = "ReplicaSet"
	mk := func(name string, owners []metav1.OwnerReference, spec corev1.PodSpec, finalizers ...string) *corev1.Pod {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name, Labels: dep.Spec.Template.Labels,
			OwnerReferences: owners, Finalizers: finalizers}, Spec: spec}
		if err := env.Client.Create(h.ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	boundSpec := *dep.Spec.Template.Spec.DeepCopy()
	boundSpec.NodeName = node
	const hold = "test.bnerd.net/sandbox-not-stopped"
	old := mk("bind-gateway-old", ownedBy(rs), boundSpec, hold)
	if err := env.Client.Delete(h.ctx, old); err != nil {
		t.Fatal(err)
	}
	// The foreign pods first: older than the replacement, they are looked at first.
	unowned := mk("bind-gateway-unowned", nil, *dep.Spec.Template.Spec.DeepCopy())
	forged := mk("bind-gateway-forged", ownedBy(foreign), *dep.Spec.Template.Spec.DeepCopy())
	time.Sleep(1100 * time.Millisecond) // creation timestamps have a resolution of a second
	replacement := mk("bind-gateway-new", ownedBy(rs), *dep.Spec.Template.Spec.DeepCopy())
	elsewhere := dep.Spec.Template.Spec.DeepCopy()
	elsewhere.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values = []string{"node-z"}
	wrongNode := mk("bind-gateway-elsewhere", ownedBy(rs), *elsewhere)

	nodeOf := func(p *corev1.Pod) string {
		var cur corev1.Pod
		if err := env.Client.Get(h.ctx, client.ObjectKeyFromObject(p), &cur); err != nil {
			return "error: " + err.Error()
		}
		return cur.Spec.NodeName
	}
	// While the old pod terminates, the health condition names it; the replacement is
	// not bound (looked at again after the operator has seen both pods for a while).
	eventually(t, "PodReady says what the pod waits for", func() (bool, string) {
		c := meta.FindStatusCondition(h.get("bind").Status.Conditions, v1alpha1.ConditionPodReady)
		want := fmt.Sprintf("waiting for pod %s to terminate", old.Name)
		return c != nil && strings.Contains(c.Message, want), fmt.Sprintf("%+v", c)
	})
	time.Sleep(2 * time.Second)
	if n := nodeOf(replacement); n != "" {
		t.Fatalf("the replacement was bound to %s while the old pod still held the node", n)
	}

	// The old pod's kubelet finishes: the replacement is bound to the gateway's node.
	if err := env.Client.Get(h.ctx, client.ObjectKeyFromObject(old), old); err != nil {
		t.Fatal(err)
	}
	old.Finalizers = nil
	if err := env.Client.Update(h.ctx, old); err != nil {
		t.Fatal(err)
	}
	// The kubelet's last word on a pod it has stopped: a deletion without grace.
	if err := env.Client.Delete(h.ctx, old, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	eventually(t, "the replacement bound once the old pod is gone", func() (bool, string) {
		err := env.Client.Get(h.ctx, client.ObjectKeyFromObject(old), &corev1.Pod{})
		return apierrors.IsNotFound(err) && nodeOf(replacement) == node, fmt.Sprintf("old: %v, replacement on %q", err, nodeOf(replacement))
	})
	// Settled: nothing else was bound, the bound pod now holds the node.
	h.quiesce("bind")
	for _, p := range []*corev1.Pod{unowned, forged, wrongNode} {
		if n := nodeOf(p); n != "" {
			t.Errorf("pod %s bound to %q: only the Deployment's pods pinned to the gateway's node are bound", p.Name, n)
		}
	}
}

// laggingCache is the operator's cache before the Deployment's watch event arrived: it
// has every object but the Deployments.
type laggingCache struct{ client.Client }

func (c laggingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*appsv1.Deployment); ok {
		return apierrors.NewNotFound(appsv1.Resource("deployments"), key.Name)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// A pod's event can reach the operator before its Deployment's (they come by two
// watches): the pod is still recognised as the gateway's, by reading the Deployment
// around the cache, instead of waiting for a pod event that never comes. A pod whose
// Deployment does not exist at all stays unrecognised.
func TestPodRecognisedWhenTheCacheLacksTheDeployment(t *testing.T) {
	h := newHarness(t)
	gw := h.create("lag", spec(false))
	yes := true
	labels := map[string]string{"app": "lag"}
	template := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}}}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: render.DeploymentName(gw.Name),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "IPsecGateway", Name: gw.Name, UID: gw.UID, Controller: &yes}}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template},
	}
	if err := env.Client.Create(h.ctx, dep); err != nil {
		t.Fatal(err)
	}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: dep.Name + "-5c8d7",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID, Controller: &yes}}},
		Spec: appsv1.ReplicaSetSpec{Selector: dep.Spec.Selector, Template: template},
	}
	if err := env.Client.Create(h.ctx, rs); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: rs.Name + "-x7k2p",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &yes}}}}
	g, err := viewOf(gw)
	if err != nil {
		t.Fatal(err)
	}

	b := newBindReconciler(&Reconciler{Deps: Deps{Client: laggingCache{env.Client}, APIReader: env.Client}}, v1alpha1.KindIPsecGateway)
	if ok, err := b.ownedByDeployment(h.ctx, g, pod); err != nil || !ok {
		t.Fatalf("the Deployment's pod, with the Deployment not yet in the cache: owned %v, error %v; want owned", ok, err)
	}
	// Control: the Deployment in neither the cache nor the API server.
	b = newBindReconciler(&Reconciler{Deps: Deps{Client: laggingCache{env.Client}, APIReader: laggingCache{env.Client}}}, v1alpha1.KindIPsecGateway)
	if ok, err := b.ownedByDeployment(h.ctx, g, pod); err != nil || ok {
		t.Fatalf("a pod whose Deployment does not exist: owned %v, error %v; want not owned, no error", ok, err)
	}
}
