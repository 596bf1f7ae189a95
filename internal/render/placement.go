package render

import (
	corev1 "k8s.io/api/core/v1"
)

// SchedulerName names the operator as the scheduler of gateway pods. The default
// scheduler leaves a pod naming another scheduler alone, so a gateway pod waits unbound
// until the operator binds it to the gateway's node (pods/binding), which it does only
// once no earlier pod of the gateway is left on that node. A pod created with its node
// already set (spec.nodeName) is started by the kubelet at once: the ReplicaSet replaces
// a deleted pod while the old one is still terminating, and the new sandbox then asks
// for the dedicated port's interface before the old sandbox has handed it back; the
// host-device plugin fails and the kubelet retries the sandbox only after its back-off.
const SchedulerName = "bnerd-vpn-operator"

// nodeNameField is the one field a node selector term may match besides labels: the
// node's name, which is what the gateway is pinned to (a node's hostname label need not
// equal its name).
const nodeNameField = "metadata.name"

// pinTo makes the pod template wait for the operator's binding and admits it on node only:
// the kubelet refuses a pod whose required node affinity its node does not match, so a
// pod bound anywhere else by anyone never starts.
func pinTo(spec *corev1.PodSpec, node string) {
	spec.SchedulerName = SchedulerName
	spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{
					Key: nodeNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{node},
				}},
			}},
		},
	}}
}

// PinnedNode is the node a gateway pod (or pod template) is pinned to: its nodeName when
// set (a bound pod, or a template rendered before the operator bound its pods), else the
// one node its required node affinity names the way pinTo writes it; "" when neither.
func PinnedNode(spec *corev1.PodSpec) string {
	if spec.NodeName != "" {
		return spec.NodeName
	}
	a := spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchExpressions) != 0 || len(terms[0].MatchFields) != 1 {
		return ""
	}
	f := terms[0].MatchFields[0]
	if f.Key != nodeNameField || f.Operator != corev1.NodeSelectorOpIn || len(f.Values) != 1 {
		return ""
	}
	return f.Values[0]
}
