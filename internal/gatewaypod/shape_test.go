package gatewaypod

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The defaults leave no gateway container BestEffort: each has CPU and memory requests
// and a memory limit above its request.
func TestDefaultResourcesAreNotBestEffort(t *testing.T) {
	d := Default()
	for _, c := range Containers {
		r, ok := d[c]
		if !ok {
			t.Errorf("container %s has no default resources", c)
			continue
		}
		cpu, mem := r.Requests[corev1.ResourceCPU], r.Requests[corev1.ResourceMemory]
		limit := r.Limits[corev1.ResourceMemory]
		if cpu.IsZero() || mem.IsZero() || limit.IsZero() || limit.Cmp(mem) <= 0 {
			t.Errorf("%s: requests cpu %s memory %s, memory limit %s", c, cpu.String(), mem.String(), limit.String())
		}
	}
	if len(d) != len(Containers) {
		t.Errorf("defaults for %d containers, %d known", len(d), len(Containers))
	}
	if err := DefaultShape().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestParse(t *testing.T) {
	s, err := Parse("")
	if err != nil || s.Hash() != DefaultShape().Hash() {
		t.Fatalf("empty: %v, %+v", err, s)
	}
	// A resources entry replaces that container's default; the others keep theirs.
	s, err = Parse(`{"resources":{"strongswan":{"requests":{"cpu":"200m","memory":"64Mi"},"limits":{"memory":"1Gi"}}},
		"priorityClassName":"gateway-critical","nodeSelector":{"node-role.example/vpn":"true"},
		"tolerations":[{"key":"dedicated","operator":"Equal","value":"vpn","effect":"NoSchedule"}],
		"imagePullSecrets":[{"name":"regcred"}],"imagePullPolicy":"IfNotPresent",
		"labels":{"team":"net"},"annotations":{"example.com/owner":"platform"}}`)
	if err != nil {
		t.Fatal(err)
	}
	if q := s.Resources["strongswan"].Limits[corev1.ResourceMemory]; q.String() != "1Gi" {
		t.Errorf("strongswan limit %s", q.String())
	}
	if q := s.Resources["status-agent"].Requests[corev1.ResourceMemory]; q.Cmp(Default()["status-agent"].Requests[corev1.ResourceMemory]) != 0 {
		t.Errorf("status-agent lost its default: %s", q.String())
	}
	if s.PriorityClassName != "gateway-critical" || len(s.Tolerations) != 1 || s.ImagePullSecrets[0].Name != "regcred" {
		t.Errorf("%+v", s)
	}
	// What the chart passes comes back as it went.
	back, err := Parse(s.JSON())
	if err != nil || back.Hash() != s.Hash() {
		t.Errorf("round trip: %v (%s != %s)", err, back.Hash(), s.Hash())
	}
}

// Bad shapes are refused with the value named.
func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct{ js, want string }{
		{`{"resource":{}}`, `unknown field "resource"`},
		{`{"resources":{"charon":{}}}`, `"charon" is not a gateway container`},
		{`{"resources":{"strongswan":{"requests":{"memory":"2Gi"},"limits":{"memory":"1Gi"}}}}`, "memory request 2Gi is above its limit 1Gi"},
		{`{"resources":{"strongswan":{"requests":{"memory":"lots"}}}}`, "quantities must match"},
		{`{"priorityClassName":"Gateway_Critical"}`, `priorityClassName "Gateway_Critical"`},
		{`{"nodeSelector":{"bad key!":"x"}}`, `nodeSelector key "bad key!"`},
		{`{"tolerations":[{"key":"a","operator":"Exists","value":"b"}]}`, "Exists takes no value"},
		{`{"tolerations":[{"key":"a","effect":"NoWay"}]}`, `effect "NoWay"`},
		{`{"tolerations":[{"operator":"Equal","value":"x"}]}`, "empty key needs operator Exists"},
		{`{"imagePullSecrets":[{"name":""}]}`, "imagePullSecrets[0]: no name"},
		{`{"imagePullPolicy":"Sometimes"}`, `imagePullPolicy "Sometimes"`},
		{`{"labels":{"app.kubernetes.io/name":"x"}}`, `"app.kubernetes.io/name" is the operator's own key`},
		{`{"labels":{"ipsec.bnerd.net/gateway":"x"}}`, "operator's own key"},
		{`{"annotations":{"k8s.v1.cni.cncf.io/networks":"[]"}}`, "operator's own key"},
		{`{"labels":{"team":"not a value!"}}`, `labels team value`},
		{`{} {}`, "more than one JSON value"},
	} {
		_, err := Parse(tc.js)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", tc.js, err, tc.want)
		}
	}
}

func node(labels map[string]string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
}

// A pinned pod never meets the scheduler, so the node choice judges the selector and
// taints itself: new gateways only where both fit, existing ones leave a node that lost
// the labels or gained a NoExecute taint they do not tolerate.
func TestFitsAndKeeps(t *testing.T) {
	vpn := map[string]string{"pool": "vpn"}
	noSched := corev1.Taint{Key: "dedicated", Value: "vpn", Effect: corev1.TaintEffectNoSchedule}
	noExec := corev1.Taint{Key: "maintenance", Effect: corev1.TaintEffectNoExecute}
	prefer := corev1.Taint{Key: "soft", Effect: corev1.TaintEffectPreferNoSchedule}
	notReady := corev1.Taint{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoExecute}
	plain := Shape{}
	shaped := Shape{NodeSelector: vpn, Tolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "vpn", Effect: corev1.TaintEffectNoSchedule}}}
	for _, tc := range []struct {
		name        string
		s           Shape
		n           *corev1.Node
		fits, keeps bool
	}{
		{"plain shape, plain node", plain, node(nil), true, true},
		{"untolerated NoSchedule: no new gateway, the running one stays", plain, node(nil, noSched), false, true},
		{"untolerated NoExecute: neither", plain, node(nil, noExec), false, false},
		{"PreferNoSchedule is a preference only", plain, node(nil, prefer), true, true},
		{"node lifecycle taints are judged by the node choice itself", plain, node(nil, notReady), true, true},
		{"selector without the labels", shaped, node(nil), false, false},
		{"selector with other values", shaped, node(map[string]string{"pool": "web"}), false, false},
		{"selector and toleration match", shaped, node(vpn, noSched), true, true},
		{"toleration does not cover another value", shaped, node(vpn, corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}), false, true},
		{"Exists tolerates any value", Shape{Tolerations: []corev1.Toleration{{Key: "maintenance", Operator: corev1.TolerationOpExists}}}, node(nil, noExec), true, true},
		{"empty key with Exists tolerates everything", Shape{Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}, node(nil, noExec, noSched), true, true},
	} {
		if got := tc.s.Fits(tc.n); got != tc.fits {
			t.Errorf("%s: Fits %v, want %v", tc.name, got, tc.fits)
		}
		if got := tc.s.Keeps(tc.n); got != tc.keeps {
			t.Errorf("%s: Keeps %v, want %v", tc.name, got, tc.keeps)
		}
	}
}

// Apply puts the shape on a pod template; removing a value changes the recorded hash,
// so a comparison of the set fields alone still sees the change.
func TestApply(t *testing.T) {
	tpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app.kubernetes.io/name": "bnerd-vpn-gateway"}, Annotations: map[string]string{"k8s.v1.cni.cncf.io/networks": "[]"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "strongswan"}, {Name: "status-agent"}, {Name: "unknown"}}},
	}
	s := Shape{
		Resources:         map[string]corev1.ResourceRequirements{"strongswan": {Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}},
		PriorityClassName: "gw", Tolerations: []corev1.Toleration{{Key: "a", Operator: corev1.TolerationOpExists}},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "regcred"}}, ImagePullPolicy: corev1.PullAlways,
		Labels: map[string]string{"team": "net"}, Annotations: map[string]string{"example.com/a": "1"},
	}
	got := *tpl.DeepCopy()
	s.Apply(&got)
	if q := got.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; q.String() != "1" {
		t.Errorf("strongswan cpu %s", q.String())
	}
	if len(got.Spec.Containers[1].Resources.Requests) != 0 || len(got.Spec.Containers[2].Resources.Requests) != 0 {
		t.Errorf("containers without an entry in a shape that has resources got some: %+v", got.Spec.Containers)
	}
	if got.Spec.PriorityClassName != "gw" || len(got.Spec.Tolerations) != 1 || got.Spec.ImagePullSecrets[0].Name != "regcred" || got.Spec.Containers[2].ImagePullPolicy != corev1.PullAlways {
		t.Errorf("%+v", got.Spec)
	}
	if got.Labels["team"] != "net" || got.Labels["app.kubernetes.io/name"] != "bnerd-vpn-gateway" || got.Annotations["example.com/a"] != "1" || got.Annotations[AnnotationShape] == "" {
		t.Errorf("labels %v annotations %v", got.Labels, got.Annotations)
	}
	// The zero shape gives the default resources.
	zero := *tpl.DeepCopy()
	Shape{}.Apply(&zero)
	if q := zero.Spec.Containers[1].Resources.Limits[corev1.ResourceMemory]; q.IsZero() {
		t.Errorf("the zero shape left status-agent without a memory limit")
	}
	less := s
	less.PriorityClassName = ""
	if less.Hash() == s.Hash() {
		t.Error("removing the priority class does not change the hash")
	}
}
