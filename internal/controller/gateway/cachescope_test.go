package gateway

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/render"
)

// Every kind a gateway owns, and the pods and Leases it reads, is cached only with the
// operator's label, and the label is on what the renderer makes: a kind left out would be
// cached whole, cluster-wide.
func TestCacheScopeHoldsOnlyTheOperatorsObjects(t *testing.T) {
	scope := CacheScope()
	ref := render.Gateway{Name: "gw", Namespace: "ns", Kind: v1alpha1.KindIPsecGateway, APIVersion: v1alpha1.GroupVersion.String(), UID: "u"}
	for _, obj := range []client.Object{&corev1.ConfigMap{}, &corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{},
		&appsv1.Deployment{}, &networkingv1.NetworkPolicy{}, &corev1.Pod{}, &coordinationv1.Lease{}} {
		var by *cache.ByObject
		for k, v := range scope {
			if reflect.TypeOf(k) == reflect.TypeOf(obj) {
				by = &v
			}
		}
		switch {
		case by == nil:
			t.Errorf("%T: not in the cache scope, cached cluster-wide", obj)
		case by.Label == nil || by.Label.Empty():
			t.Errorf("%T: cached without a selector", obj)
		case !by.Label.Matches(labels.Set(render.Labels(ref))):
			t.Errorf("%T: the selector %s does not match the rendered labels %v", obj, by.Label, render.Labels(ref))
		case by.Label.Matches(labels.Set{render.LabelName: "something-else", render.LabelManagedBy: "Helm"}):
			t.Errorf("%T: the selector %s matches another application's object", obj, by.Label)
		}
	}
}

// A ConfigMap under the gateway's object name that another controller owns, and that
// the operator's cache therefore never sees (it lacks the operator's label), is refused
// as before the cache was scoped, not fought over: the create finds it and reads it.
func TestForeignObjectUnderTheGatewaysNameRefused(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	yes := true
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: render.ConfigMapName("taken"),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "someone", UID: types.UID("00000000-0000-0000-0000-000000000001"), Controller: &yes}}},
		Data: map[string]string{"theirs": "1"}}
	if err := env.Client.Create(h.ctx, foreign); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.create("taken", spec(false))
	gw := h.waitCond("taken", v1alpha1.ConditionWorkloadReady, metav1.ConditionFalse, v1alpha1.ReasonWorkloadFailed)
	if c := condOf(gw.Status.Conditions, v1alpha1.ConditionWorkloadReady); !strings.Contains(c, "not owned by this gateway") {
		t.Fatalf("WorkloadReady: %s; want the refusal naming the foreign object", c)
	}
	var live corev1.ConfigMap
	mustGet(t, h, client.ObjectKeyFromObject(foreign), &live)
	if live.Data["theirs"] != "1" || len(live.OwnerReferences) != 1 || live.OwnerReferences[0].Name != "someone" {
		t.Fatalf("the foreign ConfigMap was changed: %+v %v", live.Data, live.OwnerReferences)
	}
}

// An owned object whose operator label someone removes leaves the operator's cache (a
// deletion to its watch) and is taken back: the label is put on it again, nothing else
// changes, and it is not made twice.
func TestOwnedObjectWithoutTheLabelTakenBack(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("unlabelled", spec(false))
	h.waitConverged("unlabelled")
	for _, obj := range []client.Object{&corev1.ConfigMap{}, &appsv1.Deployment{}} {
		key := client.ObjectKey{Namespace: h.ns, Name: render.DeploymentName("unlabelled")}
		if _, ok := obj.(*corev1.ConfigMap); ok {
			key.Name = render.ConfigMapName("unlabelled")
		}
		mustGet(t, h, key, obj)
		uid, gen := obj.GetUID(), obj.GetGeneration()
		l := obj.GetLabels()
		delete(l, render.LabelManagedBy)
		obj.SetLabels(l)
		if err := env.Client.Update(h.ctx, obj); err != nil {
			t.Fatal(err)
		}
		eventually(t, fmt.Sprintf("%T labelled again", obj), func() (bool, string) {
			if err := env.Client.Get(h.ctx, key, obj); err != nil {
				return false, err.Error()
			}
			return obj.GetLabels()[render.LabelManagedBy] == render.ManagedBy, "labels " + labels.Set(obj.GetLabels()).String()
		})
		if obj.GetUID() != uid || obj.GetGeneration() != gen {
			t.Fatalf("%T: made again or its spec changed (uid %s -> %s, generation %d -> %d)", obj, uid, obj.GetUID(), gen, obj.GetGeneration())
		}
	}
}

// The cache keeps a gateway Deployment without its pod template and managed fields, and
// with everything the operator reads from the cache: its metadata (owner, rendering hash,
// restart annotations), generation, selector and status.
func TestCachedDeploymentHasNoPodTemplate(t *testing.T) {
	var by cache.ByObject
	for k, v := range CacheScope() {
		if _, ok := k.(*appsv1.Deployment); ok {
			by = v
		}
	}
	if by.Transform == nil {
		t.Fatal("the Deployment cache has no transform: it keeps every pod template")
	}
	ref := render.Gateway{Name: "gw", Namespace: "ns", Kind: v1alpha1.KindIPsecGateway, APIVersion: v1alpha1.GroupVersion.String(), UID: "u"}
	d, err := render.Deployment(render.Workload{Gateway: ref, NodeName: "node-a", PortMAC: "fa:16:3e:00:00:01",
		GatewayImage: "example.org/strongswan:1", AgentImage: "example.org/agent:1"})
	if err != nil {
		t.Fatal(err)
	}
	d.Generation = 3
	d.Annotations = map[string]string{render.AnnotationRendering: "h", render.AnnotationRolloutStarted: "2026-12-06T10:00:00Z"}
	d.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "bnerd-vpn-operator"}}
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 3, UpdatedReplicas: 1, Replicas: 1, ReadyReplicas: 1}
	want := d.DeepCopy()
	got, err := by.Transform(d)
	if err != nil {
		t.Fatal(err)
	}
	c := got.(*appsv1.Deployment)
	if !reflect.DeepEqual(c.Spec.Template, corev1.PodTemplateSpec{}) {
		t.Errorf("the cached Deployment keeps its pod template: %d containers", len(c.Spec.Template.Spec.Containers))
	}
	if c.ManagedFields != nil {
		t.Errorf("the cached Deployment keeps its managed fields: %v", c.ManagedFields)
	}
	if !reflect.DeepEqual(c.Annotations, want.Annotations) || !reflect.DeepEqual(c.Labels, want.Labels) ||
		!reflect.DeepEqual(c.OwnerReferences, want.OwnerReferences) || c.Generation != 3 ||
		!reflect.DeepEqual(c.Spec.Selector, want.Spec.Selector) || !reflect.DeepEqual(c.Status, want.Status) {
		t.Errorf("the cached Deployment lost what the operator reads from the cache:\n got %+v\nwant %+v", c.ObjectMeta, want.ObjectMeta)
	}
}
