package gateway

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/conditions"
	"bnerd.net/vpn-operator/internal/gatewaypod"
	"bnerd.net/vpn-operator/internal/render"
)

func mustShape(t *testing.T, js string) gatewaypod.Shape {
	t.Helper()
	s, err := gatewaypod.Parse(js)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The platform's gateway pod shape reaches the live Deployment through the API server,
// and the reconciler does not fight the result: once converged, further reconciles write
// nothing (no field the API server stores differently is taken for drift). A shape
// changed at an operator restart is applied, including a value removed from it, which a
// comparison of the set fields alone would not see.
func TestGatewayPodShapeApplied(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.cfg.GatewayPod = mustShape(t, `{"priorityClassName":"vpn-gateways",
		"tolerations":[{"key":"dedicated","operator":"Equal","value":"vpn","effect":"NoExecute","tolerationSeconds":60}],
		"imagePullSecrets":[{"name":"regcred"}],"labels":{"team":"net"},"annotations":{"example.com/owner":"platform"},
		"resources":{"strongswan":{"requests":{"cpu":"0.25","memory":"0.5Gi"},"limits":{"memory":"1024Mi"}}}}`)
	h.start()
	h.create("shaped", spec(false))
	h.waitConverged("shaped")
	key := client.ObjectKey{Namespace: h.ns, Name: render.DeploymentName("shaped")}
	var dep appsv1.Deployment
	mustGet(t, h, key, &dep)
	ps := dep.Spec.Template.Spec
	if ps.PriorityClassName != "vpn-gateways" || len(ps.Tolerations) != 1 || ps.Tolerations[0].TolerationSeconds == nil ||
		len(ps.ImagePullSecrets) != 1 || dep.Spec.Template.Labels["team"] != "net" || dep.Spec.Template.Annotations["example.com/owner"] != "platform" {
		t.Fatalf("the live pod template lacks the shape: %+v", dep.Spec.Template)
	}
	for _, c := range ps.Containers {
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("container %s: resources %+v", c.Name, c.Resources)
		}
		// The API server keeps quantities in canonical form; 0.25 and 0.5Gi come back
		// as 250m and 512Mi, which must not look like drift.
		if c.Name == render.ContainerStrongswan && (c.Resources.Requests.Cpu().String() != "250m" || c.Resources.Limits.Memory().String() != "1Gi") {
			t.Errorf("strongswan resources %+v", c.Resources)
		}
	}

	h.quiesce("shaped")
	writes, gen := h.writes.Load(), dep.Generation
	for range 3 {
		if err := h.reconcileOnce("shaped"); err != nil {
			t.Fatal(err)
		}
	}
	mustGet(t, h, key, &dep)
	if w := h.writes.Load() - writes; w != 0 || dep.Generation != gen {
		t.Fatalf("a converged shaped gateway cost %d writes and moved the Deployment from generation %d to %d", w, gen, dep.Generation)
	}

	// The platform drops the priority class and the labels at the next operator start.
	h.cfg.GatewayPod = mustShape(t, `{"imagePullSecrets":[{"name":"regcred"}]}`)
	h.start()
	eventually(t, "the removed values are gone from the pod template", func() (bool, string) {
		mustGet(t, h, key, &dep)
		tpl := dep.Spec.Template
		_, team := tpl.Labels["team"]
		return tpl.Spec.PriorityClassName == "" && !team && len(tpl.Spec.Tolerations) == 0 && len(tpl.Spec.ImagePullSecrets) == 1,
			fmt.Sprintf("priorityClassName %q labels %v tolerations %v", tpl.Spec.PriorityClassName, tpl.Labels, tpl.Spec.Tolerations)
	})
	for _, c := range dep.Spec.Template.Spec.Containers {
		if c.Name == render.ContainerStrongswan && c.Resources.Limits.Memory().String() != "256Mi" {
			t.Errorf("strongswan's memory limit is %s, want its default 256Mi again", c.Resources.Limits.Memory())
		}
	}
}

// A gateway pod is pinned, so the operator's node choice honours the shape: a new gateway
// goes only to a node with the selector's labels whose taints the tolerations tolerate;
// a node that loses the labels loses its gateway; with no such node the condition says
// what it waits for.
func TestGatewayPodShapeNodeChoice(t *testing.T) {
	h := newHarness(t)
	pool := "vpn-" + h.ns
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.node("node-b", "openstack:///"+serverB, true, map[string]string{"pool": pool})
	h.node("node-c", "openstack:///"+serverC, true, map[string]string{"pool": pool})
	taint(t, h, "node-b", corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule})
	h.psk("hq-psk", testPSK)
	h.cfg.GatewayPod = mustShape(t, fmt.Sprintf(`{"nodeSelector":{"pool":%q}}`, pool))
	h.start()
	h.create("placed", spec(false))
	gw := h.waitConverged("placed")
	// node-a lacks the label, node-b has an untolerated taint.
	if gw.Status.NodeName != "node-c" {
		t.Fatalf("placed on %s, want node-c", gw.Status.NodeName)
	}

	// node-c loses the label: the gateway moves, and with node-b still tainted there is
	// nowhere to go.
	var n corev1.Node
	mustGet(t, h, client.ObjectKey{Name: "node-c"}, &n)
	delete(n.Labels, "pool")
	if err := env.Client.Update(h.ctx, &n); err != nil {
		t.Fatal(err)
	}
	gw = h.waitCond("placed", v1alpha1.ConditionNodeSelected, metav1.ConditionFalse, v1alpha1.ReasonNoEligibleNode)
	msg := condMessage(gw.Status.Conditions, v1alpha1.ConditionNodeSelected)
	if !strings.Contains(msg, "pool="+pool) || !strings.Contains(msg, "taint") {
		t.Errorf("NodeSelected says %q; it should name the selector and the taints", msg)
	}

	// Tolerating the taint (an operator restart with a new shape) places it on node-b.
	h.cfg.GatewayPod = mustShape(t, fmt.Sprintf(`{"nodeSelector":{"pool":%q},"tolerations":[{"key":"dedicated","operator":"Exists","effect":"NoSchedule"}]}`, pool))
	h.start()
	eventually(t, "placed on node-b", func() (bool, string) {
		gw = h.get("placed")
		return gw.Status.NodeName == "node-b" && converged(gw.Status.Conditions, gw.Generation), gw.Status.NodeName
	})
}

func taint(t *testing.T, h *harness, node string, tt corev1.Taint) {
	t.Helper()
	var n corev1.Node
	mustGet(t, h, client.ObjectKey{Name: node}, &n)
	n.Spec.Taints = append(n.Spec.Taints, tt)
	if err := env.Client.Update(h.ctx, &n); err != nil {
		t.Fatal(err)
	}
}

func condMessage(conds []metav1.Condition, typ string) string {
	for _, c := range conds {
		if c.Type == typ {
			return c.Message
		}
	}
	return ""
}

// ShapeNodes leaves a new gateway only the nodes that fit the shape, and a placed gateway
// its node while that node keeps it (a NoSchedule taint does not move it).
func TestShapeNodes(t *testing.T) {
	now := time.Now()
	shape := mustShape(t, `{"nodeSelector":{"pool":"vpn"}}`)
	vpn := func(n *corev1.Node) { n.Labels = map[string]string{"pool": "vpn"} }
	tainted := func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: "maintenance", Effect: corev1.TaintEffectNoSchedule}}
	}
	nodes := []corev1.Node{testNode("a", true, now), testNode("b", true, now, vpn, tainted), testNode("c", true, now, vpn)}
	names := func(ns []corev1.Node) string {
		var out []string
		for _, n := range ns {
			out = append(out, n.Name)
		}
		return strings.Join(out, ",")
	}
	if got := names(ShapeNodes(nodes, "", shape)); got != "c" {
		t.Errorf("a new gateway may go to %s, want c", got)
	}
	if got := names(ShapeNodes(nodes, "b", shape)); got != "b,c" {
		t.Errorf("the gateway on b (NoSchedule taint, labels kept) may stay on %s, want b,c", got)
	}
	if p := SelectNode(ShapeNodes(nodes, "a", shape), "a", 0, now, func(*corev1.Node) time.Time { return now }); p.Node != "c" {
		t.Errorf("the gateway on a (no label) goes to %q, want c", p.Node)
	}
}

// A new gateway stopped at a phase shows the phases after it waiting for that one
// (Unknown/NotReady, "waiting for NodeSelected"), not absent, and Ready names the
// blocking phase; nothing announces those marks, and the phases' first True after them
// is as quiet as from absent (the gateway's convergence is Ready=True's Event).
func TestBlockedPhasesWaitForTheBlockingOne(t *testing.T) {
	h := newHarness(t)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("blocked", spec(false)) // no node at all
	gw := h.waitCond("blocked", v1alpha1.ConditionNodeSelected, metav1.ConditionFalse, v1alpha1.ReasonNoEligibleNode)
	for _, typ := range []string{v1alpha1.ConditionPortAttached, v1alpha1.ConditionWorkloadReady} {
		c := conditions.Get(gw.Status.Conditions, typ)
		if c == nil || c.Status != metav1.ConditionUnknown || c.Reason != v1alpha1.ReasonNotReady || c.Message != "waiting for "+v1alpha1.ConditionNodeSelected {
			t.Errorf("%s, want Unknown/NotReady \"waiting for NodeSelected\"", condOf(gw.Status.Conditions, typ))
		}
	}
	if c := conditions.Get(gw.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonNoEligibleNode {
		t.Errorf("%s, want False/NoEligibleNode (the blocking phase's reason)", condOf(gw.Status.Conditions, v1alpha1.ConditionReady))
	}

	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.waitConverged("blocked")
	evs := h.events.awaitOf(h.ns, "blocked", func(e string) bool { return strings.Contains(e, v1alpha1.ConditionNodeSelected+"=True") })
	if !slices.ContainsFunc(evs, func(e string) bool { return strings.Contains(e, v1alpha1.ConditionNodeSelected+"=True") }) {
		t.Errorf("no Event for NodeSelected turning True after its refusal: %v", evs)
	}
	for _, e := range evs {
		if strings.Contains(e, "waiting for "+v1alpha1.ConditionNodeSelected) || strings.Contains(e, v1alpha1.ConditionWorkloadReady+"=True") {
			t.Errorf("an Event about a phase only marked waiting, or about its first True: %s", e)
		}
	}
}
