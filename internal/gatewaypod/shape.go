// Package gatewaypod is the platform's shape of every gateway pod: resources per
// container, priority class, node selector and tolerations, image pull secrets and pull
// policy, extra labels and annotations. It is the operator's configuration (the chart's
// gatewayPods values, IPSEC_GATEWAY_POD), never a field of a gateway object, so tenants
// cannot change it. The renderers apply it to the IPsec and the WireGuard pod alike; the
// node choice honours its node selector and tolerations, because a gateway pod is pinned
// to its node and never meets the scheduler.
package gatewaypod

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Containers are the gateway pods' container names a resources entry may name: the
// IPsec pod runs init-nat, strongswan, status-agent and ipsec-exporter; the WireGuard pod
// wireguard in place of strongswan. internal/render's tests keep this list and its
// containers the same.
var Containers = []string{"init-nat", "strongswan", "wireguard", "status-agent", "ipsec-exporter"}

// Shape is how every gateway pod is shaped beyond what the operator itself decides.
type Shape struct {
	// Resources per container name (Containers). A container without an entry gets its
	// default (Default); an empty entry leaves that container without requests or limits.
	Resources map[string]corev1.ResourceRequirements `json:"resources,omitempty"`
	// PriorityClassName of the gateway pods (the PriorityClass must exist).
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// NodeSelector: the labels a gateway's node must carry. The operator chooses the node
	// and pins the pod to it, so this narrows the operator's choice; it is not put on the
	// pod, where it could only make a pinned pod fail.
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Tolerations are put on the pod (a NoExecute taint evicts a pod that does not
	// tolerate it, pinned or not) and narrow the node choice: a node whose NoSchedule or
	// NoExecute taint they do not tolerate gets no new gateway.
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// ImagePullSecrets name Secrets in each gateway's namespace.
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	// ImagePullPolicy of every container; empty: Kubernetes' default.
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// Labels and Annotations are added to every gateway pod; the operator's own keys are
	// refused (Validate).
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// The default resources. Every container gets requests and a memory limit, so a gateway
// pod is Burstable, never BestEffort (the first pods the kubelet evicts under memory
// pressure). No CPU limit: a throttled charon or wireguard delays keepalives and
// rekeys and drops packets; the requests keep the share the node owes it. Requests stay
// small because a pinned pod bypasses the scheduler: the kubelet admits it only if its
// requests fit the node, and a gateway node carries many gateways. The memory figures
// follow the peak resident memory measured idle and under a throughput run
// (docs/benchmarks.md, "Gateway pod resources"): the Go agent roles about 32 MiB, charon
// 13 MiB carrying 260 Mbit/s with libipsec, the wireguard role 38 MiB idle and 109 MiB
// carrying 400 Mbit/s with wireguard-go. CPU was not measured.
func Default() map[string]corev1.ResourceRequirements {
	r := func(cpu, mem, limit string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(limit)},
		}
	}
	return map[string]corev1.ResourceRequirements{
		"init-nat":       r("5m", "40Mi", "128Mi"),
		"strongswan":     r("50m", "32Mi", "256Mi"),
		"wireguard":      r("50m", "48Mi", "256Mi"),
		"status-agent":   r("5m", "40Mi", "128Mi"),
		"ipsec-exporter": r("5m", "40Mi", "128Mi"),
	}
}

// DefaultShape is the shape with the default resources and nothing else.
func DefaultShape() Shape { return Shape{Resources: Default()} }

// Parse reads a shape from JSON (the chart's gatewayPods values as IPSEC_GATEWAY_POD):
// unknown keys are refused, containers without a resources entry keep their default, and
// the result is validated. An empty string is the default shape.
func Parse(js string) (Shape, error) {
	s := Shape{}
	if strings.TrimSpace(js) != "" {
		dec := json.NewDecoder(strings.NewReader(js))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return Shape{}, fmt.Errorf("gateway pod shape: %w", err)
		}
		if dec.More() {
			return Shape{}, errors.New("gateway pod shape: more than one JSON value")
		}
	}
	res := Default()
	maps.Copy(res, s.Resources)
	s.Resources = res
	return s, s.Validate()
}

// reserved label and annotation keys: the operator's own (they select and identify the
// gateway's pods, its port and its networks) and Multus', whose networks annotation the
// operator writes.
func reservedKey(k string) bool {
	switch k {
	case "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/component":
		return true
	}
	return strings.HasPrefix(k, "ipsec.bnerd.net/") || strings.Contains(k, ".ipsec.bnerd.net/") || strings.HasPrefix(k, "k8s.v1.cni.cncf.io/")
}

// Validate refuses what the API server would refuse on the Deployment or what would
// take over the operator's own keys, naming the value.
func (s Shape) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	for _, name := range sortedKeys(s.Resources) {
		if !slices.Contains(Containers, name) {
			bad("resources: %q is not a gateway container (%s)", name, strings.Join(Containers, ", "))
			continue
		}
		r := s.Resources[name]
		for res, limit := range r.Limits {
			if req, ok := r.Requests[res]; ok && req.Cmp(limit) > 0 {
				bad("resources.%s: the %s request %s is above its limit %s", name, res, req.String(), limit.String())
			}
		}
		for res, q := range r.Requests {
			if q.Sign() < 0 {
				bad("resources.%s: negative %s request", name, res)
			}
		}
		for res, q := range r.Limits {
			if q.Sign() < 0 {
				bad("resources.%s: negative %s limit", name, res)
			}
		}
	}
	if s.PriorityClassName != "" {
		for _, m := range validation.IsDNS1123Subdomain(s.PriorityClassName) {
			bad("priorityClassName %q: %s", s.PriorityClassName, m)
		}
	}
	for _, k := range sortedKeys(s.NodeSelector) {
		for _, m := range validation.IsQualifiedName(k) {
			bad("nodeSelector key %q: %s", k, m)
		}
		for _, m := range validation.IsValidLabelValue(s.NodeSelector[k]) {
			bad("nodeSelector %s value %q: %s", k, s.NodeSelector[k], m)
		}
	}
	for i, t := range s.Tolerations {
		switch t.Operator {
		case "", corev1.TolerationOpEqual:
			if t.Key == "" {
				bad("tolerations[%d]: an empty key needs operator Exists", i)
			}
		case corev1.TolerationOpExists:
			if t.Value != "" {
				bad("tolerations[%d]: operator Exists takes no value", i)
			}
		default:
			bad("tolerations[%d]: operator %q is neither Equal nor Exists", i, t.Operator)
		}
		switch t.Effect {
		case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			bad("tolerations[%d]: effect %q is not NoSchedule, PreferNoSchedule or NoExecute", i, t.Effect)
		}
		if t.Key != "" {
			for _, m := range validation.IsQualifiedName(t.Key) {
				bad("tolerations[%d] key %q: %s", i, t.Key, m)
			}
		}
		if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
			bad("tolerations[%d]: tolerationSeconds applies to effect NoExecute only", i)
		}
	}
	for i, p := range s.ImagePullSecrets {
		if p.Name == "" {
			bad("imagePullSecrets[%d]: no name", i)
			continue
		}
		for _, m := range validation.IsDNS1123Subdomain(p.Name) {
			bad("imagePullSecrets[%d] %q: %s", i, p.Name, m)
		}
	}
	switch s.ImagePullPolicy {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		bad("imagePullPolicy %q is not Always, IfNotPresent or Never", s.ImagePullPolicy)
	}
	for _, k := range sortedKeys(s.Labels) {
		if reservedKey(k) {
			bad("labels: %q is the operator's own key", k)
		}
		for _, m := range validation.IsQualifiedName(k) {
			bad("labels key %q: %s", k, m)
		}
		for _, m := range validation.IsValidLabelValue(s.Labels[k]) {
			bad("labels %s value %q: %s", k, s.Labels[k], m)
		}
	}
	for _, k := range sortedKeys(s.Annotations) {
		if reservedKey(k) {
			bad("annotations: %q is the operator's own key", k)
		}
		for _, m := range validation.IsQualifiedName(strings.ToLower(k)) {
			bad("annotations key %q: %s", k, m)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("gateway pod shape: %w", errors.Join(errs...))
	}
	return nil
}

// Fits reports whether a new gateway may be placed on n: n carries every label of the
// node selector, and the tolerations tolerate each of its NoSchedule and NoExecute taints.
func (s Shape) Fits(n *corev1.Node) bool {
	for k, v := range s.NodeSelector {
		if got, ok := n.Labels[k]; !ok || got != v {
			return false
		}
	}
	for i := range n.Spec.Taints {
		if !s.tolerates(&n.Spec.Taints[i], corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute) {
			return false
		}
	}
	return true
}

// Keeps reports whether a gateway may stay on n, its current node: n still carries the
// node selector's labels, and no NoExecute taint that would evict the pod is untolerated.
// A NoSchedule taint does not move a running gateway, as it does not evict a pod.
func (s Shape) Keeps(n *corev1.Node) bool {
	for k, v := range s.NodeSelector {
		if got, ok := n.Labels[k]; !ok || got != v {
			return false
		}
	}
	for i := range n.Spec.Taints {
		if !s.tolerates(&n.Spec.Taints[i], corev1.TaintEffectNoExecute) {
			return false
		}
	}
	return true
}

// tolerates: the taint's effect is not among effects, or it is one of the node
// lifecycle's condition taints (node.kubernetes.io/not-ready, unreachable, unschedulable,
// memory-pressure, ...), which say what the node's conditions and spec say and which the
// node choice judges from those itself (with its not-Ready grace), or a toleration
// matches it.
func (s Shape) tolerates(t *corev1.Taint, effects ...corev1.TaintEffect) bool {
	if !slices.Contains(effects, t.Effect) || strings.HasPrefix(t.Key, "node.kubernetes.io/") {
		return true
	}
	for _, tol := range s.Tolerations {
		if tol.Effect != "" && tol.Effect != t.Effect {
			continue
		}
		if tol.Key != "" && tol.Key != t.Key {
			continue
		}
		switch tol.Operator {
		case corev1.TolerationOpExists:
			return true
		case "", corev1.TolerationOpEqual:
			if tol.Value == t.Value {
				return true
			}
		}
	}
	return false
}

// Describe names the node constraints for a message ("" when there are none).
func (s Shape) Describe() string {
	var parts []string
	if len(s.NodeSelector) > 0 {
		var sel []string
		for _, k := range sortedKeys(s.NodeSelector) {
			sel = append(sel, k+"="+s.NodeSelector[k])
		}
		parts = append(parts, "carries the gateway pods' node selector "+strings.Join(sel, ","))
	}
	parts = append(parts, "has no NoSchedule or NoExecute taint the gateway pods' tolerations do not tolerate")
	return strings.Join(parts, " and ")
}

// Hash is a digest of the shape as the renderers apply it. It is recorded on the pod
// template (AnnotationShape), so that a value removed from the shape, which a comparison
// of the set fields alone cannot see, still changes the template.
func (s Shape) Hash() string {
	if s.Resources == nil {
		s.Resources = Default() // as Apply applies it
	}
	b, _ := json.Marshal(s) // maps marshal in key order
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// AnnotationShape on the gateway pod template records Hash.
const AnnotationShape = "ipsec.bnerd.net/pod-shape"

// Apply shapes a gateway pod template: resources of each container it has, priority class,
// tolerations, pull secrets and policy, the extra labels and annotations (never over the
// operator's own, which Validate keeps out anyway) and the shape's hash. A shape without
// resources (the zero Shape) applies the default ones: no gateway container is left
// without requests by omission.
func (s Shape) Apply(t *corev1.PodTemplateSpec) {
	if s.Resources == nil {
		s.Resources = Default()
	}
	for i := range t.Spec.Containers {
		c := &t.Spec.Containers[i]
		if r, ok := s.Resources[c.Name]; ok {
			c.Resources = *r.DeepCopy()
		}
		c.ImagePullPolicy = s.ImagePullPolicy
	}
	t.Spec.PriorityClassName = s.PriorityClassName
	t.Spec.Tolerations = nil
	for _, tol := range s.Tolerations {
		t.Spec.Tolerations = append(t.Spec.Tolerations, *tol.DeepCopy())
	}
	t.Spec.ImagePullSecrets = slices.Clone(s.ImagePullSecrets)
	if len(s.Labels) > 0 && t.Labels == nil {
		t.Labels = map[string]string{}
	}
	for k, v := range s.Labels {
		if _, own := t.Labels[k]; !own {
			t.Labels[k] = v
		}
	}
	if t.Annotations == nil {
		t.Annotations = map[string]string{}
	}
	for k, v := range s.Annotations {
		if _, own := t.Annotations[k]; !own {
			t.Annotations[k] = v
		}
	}
	t.Annotations[AnnotationShape] = s.Hash()
}

// JSON is the shape as IPSEC_GATEWAY_POD takes it.
func (s Shape) JSON() string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSpace(b.String())
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
