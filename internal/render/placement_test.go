package render

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

func TestPinnedNode(t *testing.T) {
	var pinned corev1.PodSpec
	pinTo(&pinned, "node-a")
	other := pinned.DeepCopy()
	other.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Key = "metadata.namespace"
	two := pinned.DeepCopy()
	two.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values = []string{"node-a", "node-b"}
	notIn := pinned.DeepCopy()
	notIn.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Operator = corev1.NodeSelectorOpNotIn
	bound := pinned.DeepCopy()
	bound.NodeName = "node-b"
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
		want string
	}{
		{"rendered", pinned, "node-a"},
		{"bound: the node the pod runs on", *bound, "node-b"},
		{"an earlier release's template: nodeName", corev1.PodSpec{NodeName: "node-c"}, "node-c"},
		{"no pin", corev1.PodSpec{}, ""},
		{"another field", *other, ""},
		{"two nodes", *two, ""},
		{"NotIn", *notIn, ""},
	} {
		if got := PinnedNode(&tc.spec); got != tc.want {
			t.Errorf("%s: PinnedNode %q, want %q", tc.name, got, tc.want)
		}
	}
}

// An upgrade from a template pinned by nodeName to one the operator binds is not a move
// (it is paced like any other rendering change); another node is.
func TestMovesAcrossPinStyles(t *testing.T) {
	old := appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{NodeName: "node-a"}}}
	same := appsv1.DeploymentSpec{}
	pinTo(&same.Template.Spec, "node-a")
	moved := appsv1.DeploymentSpec{}
	pinTo(&moved.Template.Spec, "node-b")
	if Moves(old, same) {
		t.Error("nodeName node-a -> bound to node-a counted as a move")
	}
	if !Moves(old, moved) || !Moves(same, moved) {
		t.Error("node-a -> node-b not counted as a move")
	}
}
