package gateway

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

func testNode(name string, ready bool, since time.Time, mutate ...func(*corev1.Node)) corev1.Node {
	st := corev1.ConditionTrue
	if !ready {
		st = corev1.ConditionFalse
	}
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: st, LastTransitionTime: metav1.NewTime(since)}}}}
	for _, m := range mutate {
		m(&n)
	}
	return n
}

func TestSelectNodeStickyWithGrace(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	grace := 10 * time.Second
	since := func(n *corev1.Node) time.Time { return n.Status.Conditions[0].LastTransitionTime.Time }
	deleting := func(n *corev1.Node) { t := metav1.NewTime(now); n.DeletionTimestamp = &t }
	cordoned := func(n *corev1.Node) { n.Spec.Unschedulable = true }
	for _, tc := range []struct {
		name    string
		nodes   []corev1.Node
		current string
		want    string
		grace   time.Duration
	}{
		{"first eligible by name", []corev1.Node{testNode("b", true, now), testNode("a", true, now)}, "", "a", 0},
		{"Ready current kept over an earlier name", []corev1.Node{testNode("a", true, now), testNode("b", true, now)}, "b", "b", 0},
		{"cordoned current kept", []corev1.Node{testNode("a", true, now), testNode("b", true, now, cordoned)}, "b", "b", 0},
		{"not Ready for less than the grace: kept", []corev1.Node{testNode("a", true, now), testNode("b", false, now.Add(-3*time.Second))}, "b", "b", 7 * time.Second},
		{"not Ready for the whole grace: moved", []corev1.Node{testNode("a", true, now), testNode("b", false, now.Add(-10*time.Second))}, "b", "a", 0},
		{"being deleted: moved at once", []corev1.Node{testNode("a", true, now), testNode("b", true, now, deleting)}, "b", "a", 0},
		{"gone: moved at once", []corev1.Node{testNode("a", true, now)}, "b", "a", 0},
		{"nothing eligible", []corev1.Node{testNode("a", false, now.Add(-time.Hour)), testNode("c", true, now, cordoned)}, "", "", 0},
	} {
		p := SelectNode(tc.nodes, tc.current, grace, now, since)
		if p.Node != tc.want || p.Grace != tc.grace {
			t.Errorf("%s: got %q (grace %s), want %q (grace %s)", tc.name, p.Node, p.Grace, tc.want, tc.grace)
		}
	}
	// Without a grace period a node that is not Ready is left at once.
	if p := SelectNode([]corev1.Node{testNode("a", true, now), testNode("b", false, now)}, "b", 0, now, since); p.Node != "a" {
		t.Errorf("grace 0: got %q", p.Node)
	}
}

// detaches counts the Nova detach requests in the simulator's log.
func (h *harness) detaches() int {
	n := 0
	for _, rec := range h.sim.RequestLog() {
		if rec.Method == "DELETE" && strings.Contains(rec.Path, "/os-interface/") {
			n++
		}
	}
	return n
}

// A node flapping between Ready and NotReady faster than the grace period keeps its
// gateway: no detach, no new pod. A node that stays NotReady loses it once the grace
// period is over, and getting Ready again later does not bring it back (sticky).
func TestFlappingNodeDoesNotBounceTheGateway(t *testing.T) {
	h := newHarness(t)
	h.cfg.NodeNotReadyGrace = 4 * time.Second
	h.node("node-b", "openstack:///"+serverB, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("flap", spec(false))
	gw := h.waitConverged("flap")
	if gw.Status.NodeName != "node-b" {
		t.Fatalf("placed on %s", gw.Status.NodeName)
	}
	h.node("node-a", "openstack:///"+serverA, true, nil)
	var dep appsv1.Deployment
	mustGet(t, h, client.ObjectKey{Namespace: h.ns, Name: render.DeploymentName("flap")}, &dep)
	gen := dep.Generation
	h.quiesce("flap")
	h.sim.ResetCounters()

	for i := 0; i < 4; i++ {
		h.setReady("node-b", false)
		time.Sleep(700 * time.Millisecond)
		h.setReady("node-b", true)
		time.Sleep(700 * time.Millisecond)
	}
	h.quiesce("flap")
	gw = h.get("flap")
	mustGet(t, h, client.ObjectKey{Namespace: h.ns, Name: render.DeploymentName("flap")}, &dep)
	if gw.Status.NodeName != "node-b" || h.detaches() != 0 || dep.Generation != gen {
		t.Fatalf("a flapping node bounced the gateway: node %s, %d detaches, Deployment generation %d -> %d",
			gw.Status.NodeName, h.detaches(), gen, dep.Generation)
	}

	// Down for good: moved after the grace period, and only once.
	h.setReady("node-b", false)
	eventually(t, "a move while the grace period runs is not expected", func() (bool, string) {
		gw = h.get("flap")
		c := condOf(gw.Status.Conditions, v1alpha1.ConditionNodeSelected)
		return strings.Contains(c, "not Ready since") || gw.Status.NodeName == "node-a", c
	})
	eventually(t, "moved to node-a after the grace period", func() (bool, string) {
		gw = h.get("flap")
		return gw.Status.NodeName == "node-a" && converged(gw.Status.Conditions, gw.Generation), gw.Status.NodeName + " " + condOf(gw.Status.Conditions, v1alpha1.ConditionReady)
	})
	h.setReady("node-b", true)
	h.quiesce("flap")
	if gw = h.get("flap"); gw.Status.NodeName != "node-a" || h.detaches() != 1 {
		t.Fatalf("after node-b recovered: node %s, %d detaches (want node-a, 1)", gw.Status.NodeName, h.detaches())
	}
}

// A deleted node is left at once, whatever the grace period.
func TestDeletedNodeIsLeftAtOnce(t *testing.T) {
	h := newHarness(t)
	h.cfg.NodeNotReadyGrace = time.Hour
	h.node("node-b", "openstack:///"+serverB, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("gone", spec(false))
	h.waitConverged("gone")
	h.node("node-a", "openstack:///"+serverA, true, nil)
	if err := env.Client.Delete(h.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "moved to node-a", func() (bool, string) {
		gw := h.get("gone")
		port, _ := h.sim.Port(gw.Status.PortID)
		return gw.Status.NodeName == "node-a" && port.DeviceID == serverA && converged(gw.Status.Conditions, gw.Generation),
			fmt.Sprintf("%s, port on %s, %s", gw.Status.NodeName, port.DeviceID, condOf(gw.Status.Conditions, v1alpha1.ConditionReady))
	})
}

// The gateway's pod on a lost node never finishes terminating (its kubelet is gone), and
// the Deployment's Recreate waits for it: once the gateway moved, the operator deletes
// it without a grace period. A pod on a Ready node is left to its kubelet.
func TestStrandedPodReleasedWhenTheNodeIsLost(t *testing.T) {
	h := newHarness(t)
	h.cfg.NodeNotReadyGrace = time.Second
	h.node("node-b", "openstack:///"+serverB, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	gw := h.create("lost", spec(false))
	h.waitConverged("lost")
	h.node("node-c", "openstack:///"+serverC, true, nil)
	ref := render.Gateway{Kind: v1alpha1.KindIPsecGateway, Namespace: h.ns, Name: "lost", UID: gw.UID}
	pod := func(name, node string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name, Labels: render.Labels(ref)},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "gateway"}}}}
		if err := env.Client.Create(h.ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stranded := pod("lost-gateway-old", "node-b")
	kept := pod("lost-gateway-elsewhere", "node-c")

	h.setReady("node-b", false)
	eventually(t, "moved off node-b and the pod there released", func() (bool, string) {
		g := h.get("lost")
		err := env.Client.Get(h.ctx, client.ObjectKeyFromObject(stranded), &corev1.Pod{})
		return g.Status.NodeName == "node-c" && apierrors.IsNotFound(err), fmt.Sprintf("node %s, pod: %v", g.Status.NodeName, err)
	})
	h.quiesce("lost")
	if err := env.Client.Get(h.ctx, client.ObjectKeyFromObject(kept), &corev1.Pod{}); err != nil {
		t.Fatalf("the pod on a Ready node was touched: %v", err)
	}
	if h.events.count("StrandedPodDeleted") != 1 {
		t.Fatalf("StrandedPodDeleted events: %d", h.events.count("StrandedPodDeleted"))
	}
}

// count is the number of recorded Events with this reason.
func (r *countingRecorder) count(reason string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if strings.Contains(e, " "+reason+" ") {
			n++
		}
	}
	return n
}

// New gateways spread over the eligible nodes (the fewest gateways first), a node at
// its maximum takes no more, and a node to avoid is left even by its own gateway.
func TestSelectNodeSpreads(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	since := func(n *corev1.Node) time.Time { return n.Status.Conditions[0].LastTransitionTime.Time }
	nodes := func() []corev1.Node {
		return []corev1.Node{testNode("a", true, now), testNode("b", true, now), testNode("c", true, now)}
	}
	for _, tc := range []struct {
		name    string
		current string
		spread  Spread
		want    string
		full    bool
	}{
		{"the least loaded", "", Spread{Load: map[string]int{"a": 3, "b": 1, "c": 2}}, "b", false},
		{"equal load: by name", "", Spread{Load: map[string]int{"a": 1, "b": 1, "c": 1}}, "a", false},
		{"a full node is skipped", "", Spread{Load: map[string]int{"a": 2, "b": 2, "c": 1}, Max: 1}, "", true},
		{"room on one", "", Spread{Load: map[string]int{"a": 2, "b": 2, "c": 1}, Max: 2}, "c", false},
		{"the current node stays at its maximum", "a", Spread{Load: map[string]int{"a": 5}, Max: 2}, "a", false},
		{"an avoided current node is left", "a", Spread{Load: map[string]int{"b": 1}, Avoid: map[string]bool{"a": true}}, "c", false},
		{"every node avoided", "", Spread{Avoid: map[string]bool{"a": true, "b": true, "c": true}}, "", true},
	} {
		p := SelectNode(nodes(), tc.current, 0, now, since, tc.spread)
		if p.Node != tc.want || p.Full != tc.full {
			t.Errorf("%s: got %q (full %v), want %q (full %v)", tc.name, p.Node, p.Full, tc.want, tc.full)
		}
	}
}

// Placement on the real API server and the simulator: three gateways on three nodes
// land on three nodes; a node whose Nova refuses the attach (its NIC slots full) is
// given up for that gateway, which goes to another node; the node limit leaves a new
// gateway waiting with the reason.
func TestPlacementSpreadsAndFallsBack(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.node("node-b", "openstack:///"+serverB, true, nil)
	h.node("node-c", "openstack:///"+serverC, true, nil)
	h.psk("hq-psk", testPSK)
	h.cfg.NodeMaxGateways = 1
	h.start()
	seen := map[string]bool{}
	for i := range 3 {
		s := spec(false)
		s.Tunnels[0].Peer.Address = fmt.Sprintf("198.51.100.%d", 60+i)
		name := fmt.Sprintf("p%d", i)
		h.create(name, s)
		gw := h.waitConverged(name)
		if seen[gw.Status.NodeName] {
			t.Fatalf("%s placed on %s, which already holds a gateway", name, gw.Status.NodeName)
		}
		seen[gw.Status.NodeName] = true
	}
	s := spec(false)
	s.Tunnels[0].Peer.Address = "198.51.100.70"
	h.create("p3", s)
	gw := h.waitCond("p3", v1alpha1.ConditionNodeSelected, metav1.ConditionFalse, v1alpha1.ReasonNoEligibleNode)
	if c := condOf(gw.Status.Conditions, v1alpha1.ConditionNodeSelected); !strings.Contains(c, "maximum of 1 gateways") {
		t.Fatalf("NodeSelected: %s", c)
	}

	// Nova refuses attaches to node-a's server: a gateway that would go there goes on.
	if err := env.Client.Delete(h.ctx, h.get("p3")); err != nil {
		t.Fatal(err)
	}
	h.waitGone("p3")
	var onA string
	for i := range 3 {
		if g := h.get(fmt.Sprintf("p%d", i)); g.Status.NodeName == "node-a" {
			onA = g.Name
		}
	}
	if err := env.Client.Delete(h.ctx, h.get(onA)); err != nil {
		t.Fatal(err)
	}
	h.waitGone(onA)
	remove := h.sim.Inject(openstacksim.Fault{Method: "POST", PathPattern: "re:/servers/" + serverA + "/os-interface$", Status: 409})
	defer remove()
	h.cfg.NodeMaxGateways = 2
	h.start()
	s = spec(false)
	s.Tunnels[0].Peer.Address = "198.51.100.71"
	h.create("fallback", s)
	gw = h.waitConverged("fallback")
	if gw.Status.NodeName == "node-a" {
		t.Fatal("the gateway stayed on the node whose attach failed")
	}
	if !h.events.await("attaching the port to node node-a failed") {
		t.Fatalf("no event says the attach to node-a failed: %v", h.events.events)
	}
}
