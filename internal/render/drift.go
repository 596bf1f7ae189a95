package render

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// AnnotationRendering, on the gateway Deployment, is a hash of the Deployment spec the
// operator rendered for it. It tells the operator's own changes (a new image, node or
// pod shape: the hash differs) from changes made by others to the live Deployment
// (same hash, different spec), which are drift, reverted and reported.
const AnnotationRendering = "ipsec.bnerd.net/rendering"

// RenderingHash is the value of AnnotationRendering for d: a hash of d's spec as
// rendered (before the API server's defaults).
func RenderingHash(d *appsv1.Deployment) (string, error) {
	js, err := json.Marshal(d.Spec)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(js)
	return hex.EncodeToString(sum[:8]), nil
}

// StampRendering records d's RenderingHash in its AnnotationRendering and returns it.
func StampRendering(d *appsv1.Deployment) (string, error) {
	h, err := RenderingHash(d)
	if err != nil {
		return "", err
	}
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	d.Annotations[AnnotationRendering] = h
	return h, nil
}

// securityAnnotationPrefixes are pod annotations that weaken a container's confinement
// where the kubelet still honours them (AppArmor's beta annotation): one the rendering
// does not carry is drift, although other additions to the template's metadata (a
// rollout restart's timestamp, another tool's label) are tolerated.
var securityAnnotationPrefixes = []string{
	"container.apparmor.security.beta.kubernetes.io/",
	"seccomp.security.alpha.kubernetes.io/",
}

// DeploymentDrift names the fields in which the live Deployment spec differs from
// stored, the rendered spec as the API server stores it (its defaults filled in: a
// server-side dry run of the rendering gives it). The empty result means no drift.
//
// Everything is compared exactly except the pod template's labels and annotations, of
// which live may carry more than the rendering (except the security annotations), and
// the selector, which is immutable.
func DeploymentDrift(stored, live appsv1.DeploymentSpec) []string {
	var out []string
	check := func(name string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			out = append(out, name)
		}
	}
	check("replicas", stored.Replicas, live.Replicas)
	check("strategy", stored.Strategy, live.Strategy)
	check("minReadySeconds", stored.MinReadySeconds, live.MinReadySeconds)
	check("revisionHistoryLimit", stored.RevisionHistoryLimit, live.RevisionHistoryLimit)
	check("progressDeadlineSeconds", stored.ProgressDeadlineSeconds, live.ProgressDeadlineSeconds)
	check("paused", stored.Paused, live.Paused)
	out = append(out, metadataDrift("template labels", stored.Template.Labels, live.Template.Labels, nil)...)
	out = append(out, metadataDrift("template annotations", stored.Template.Annotations, live.Template.Annotations, securityAnnotationPrefixes)...)
	return append(out, PodDrift(stored.Template.Spec, live.Template.Spec)...)
}

// metadataDrift: every key of want with its value in live, and no key of live with one
// of the strict prefixes that want lacks.
func metadataDrift(name string, want, live map[string]string, strict []string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if v, ok := live[k]; !ok || v != want[k] {
			out = append(out, fmt.Sprintf("%s[%s]", name, k))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(live)) {
		if _, ok := want[k]; ok {
			continue
		}
		for _, p := range strict {
			if strings.HasPrefix(k, p) {
				out = append(out, fmt.Sprintf("%s[%s] added", name, k))
				break
			}
		}
	}
	return out
}

// PodDrift names the fields in which the live pod spec differs from stored (the
// rendering as the API server stores it): every pod-level field, and every field of
// every container and init container, matched by name ("containers[strongswan].lifecycle",
// "initContainers[debug] added"). Nil and empty lists and maps count as equal, as the
// API server stores them; nothing else is normalised.
func PodDrift(stored, live corev1.PodSpec) []string {
	s, l := podFields(stored), podFields(live)
	var out []string
	for _, k := range unionKeys(s, l) {
		switch k {
		case "containers", "initContainers":
			out = append(out, containersDrift(k, s[k], l[k])...)
		default:
			if !reflect.DeepEqual(s[k], l[k]) {
				out = append(out, k)
			}
		}
	}
	return out
}

func containersDrift(list string, stored, live any) []string {
	s, l := byName(stored), byName(live)
	var out []string
	for _, n := range l.names {
		if _, ok := s.fields[n]; !ok {
			out = append(out, fmt.Sprintf("%s[%s] added", list, n))
		}
	}
	for _, n := range s.names {
		if _, ok := l.fields[n]; !ok {
			out = append(out, fmt.Sprintf("%s[%s] removed", list, n))
		}
	}
	if len(out) == 0 && !slices.Equal(s.names, l.names) {
		// Init containers run in order, and a container's position is part of the spec.
		out = append(out, list+" order")
	}
	for _, n := range s.names {
		lc, ok := l.fields[n]
		if !ok {
			continue
		}
		sc := s.fields[n]
		for _, k := range unionKeys(sc, lc) {
			if !reflect.DeepEqual(sc[k], lc[k]) {
				out = append(out, fmt.Sprintf("%s[%s].%s", list, n, k))
			}
		}
	}
	return out
}

type namedFields struct {
	names  []string
	fields map[string]map[string]any
}

// byName indexes an unstructured container list by name. Two containers of the same
// name cannot pass the API server's validation; should they appear, the second one
// gets a name of its own so it is still compared.
func byName(v any) namedFields {
	out := namedFields{fields: map[string]map[string]any{}}
	list, _ := v.([]any)
	for i, c := range list {
		m, _ := c.(map[string]any)
		n, _ := m["name"].(string)
		if _, dup := out.fields[n]; dup {
			n = fmt.Sprintf("%s#%d", n, i)
		}
		out.names = append(out.names, n)
		out.fields[n] = m
	}
	return out
}

// podFields is ps as the API server would serialise it: omitted empty values are
// absent, so nil and empty lists compare equal.
func podFields(ps corev1.PodSpec) map[string]any {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&ps)
	if err != nil {
		// A typed PodSpec always converts; should it not, every field counts as
		// drift rather than none.
		return map[string]any{"unconvertible": err.Error()}
	}
	return m
}

func unionKeys(a, b map[string]any) []string {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	return slices.Sorted(maps.Keys(keys))
}

// Annotations on the gateway Deployment that a paced restart (internal/rollout) keeps
// across restarts of the operator: when the restart to a new rendering was admitted, and
// how many tunnels were up before it (the restart is complete when as many are up again).
// Both are removed when the restart is complete.
const (
	AnnotationRolloutStarted = "ipsec.bnerd.net/rollout-started"
	AnnotationRolloutTunnels = "ipsec.bnerd.net/rollout-tunnels-up"
)

// deploymentLevel are the fields DeploymentDrift names that live outside the pod
// template: changing them replaces no pod.
var deploymentLevel = map[string]bool{
	"replicas": true, "strategy": true, "minReadySeconds": true, "revisionHistoryLimit": true,
	"progressDeadlineSeconds": true, "paused": true,
}

// RestartsPod reports whether applying a change of the named fields (DeploymentDrift's
// result) replaces the pod: any change of the pod template does.
func RestartsPod(drift []string) bool {
	for _, f := range drift {
		if !deploymentLevel[f] {
			return true
		}
	}
	return false
}

// Moves reports whether the rendering moves the pod: another node, or another dedicated
// port (its MAC). Such a change is never paced: the old pod cannot carry the tunnels.
func Moves(stored, live appsv1.DeploymentSpec) bool {
	return PinnedNode(&stored.Template.Spec) != PinnedNode(&live.Template.Spec) ||
		stored.Template.Annotations[AnnotationPortMAC] != live.Template.Annotations[AnnotationPortMAC]
}
