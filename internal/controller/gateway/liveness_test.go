package gateway

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/status"
	"bnerd.net/vpn-operator/internal/render"
)

func TestFailedNodes(t *testing.T) {
	silent := func(n string) LeaseView { return LeaseView{Node: n, Silent: true} }
	alive := func(n string) LeaseView { return LeaseView{Node: n} }
	for _, tc := range []struct {
		name         string
		views        []LeaseView
		workers      int
		failed, held []string
	}{
		{"every pod on a node silent", []LeaseView{silent("a"), silent("a"), alive("b")}, 3, []string{"a"}, nil},
		{"one pod silent beside a live one: a pod problem, not the node", []LeaseView{silent("a"), alive("a"), alive("b")}, 3, nil, nil},
		{"nothing silent", []LeaseView{alive("a"), alive("b")}, 2, nil, nil},
		{"one of two workers", []LeaseView{silent("a"), alive("b")}, 2, []string{"a"}, nil},
		{"two of three workers at once: held", []LeaseView{silent("a"), silent("b"), alive("c")}, 3, nil, []string{"a", "b"}},
		{"every node silent (the operator's connection): held", []LeaseView{silent("a"), silent("b")}, 2, nil, []string{"a", "b"}},
		{"the only worker: held", []LeaseView{silent("a")}, 1, nil, []string{"a"}},
		{"a pod with no node is not judged", []LeaseView{silent("")}, 2, nil, nil},
	} {
		failed, held := FailedNodes(tc.views, tc.workers)
		if !reflect.DeepEqual(failed, tc.failed) || !reflect.DeepEqual(held, tc.held) {
			t.Errorf("%s: failed %v held %v, want failed %v held %v", tc.name, failed, held, tc.failed, tc.held)
		}
	}
}

// The gateway's pod, which the API server still calls ready, stops renewing its liveness
// Lease (its node powered off: no kubelet reports anything, and the node stays Ready for
// its grace period, an hour here): the gateway moves to the other node after the
// liveness timeout, the port detached from the old node's server first, and the
// stranded pod is deleted. While the pod renews, nothing moves.
func TestSilentGatewayPodMovesTheGatewayBeforeNotReady(t *testing.T) {
	h := newHarness(t)
	// Five renewals' worth (the renewer below renews every second), so a slow API server
	// under a loaded test run does not pass for a silent pod.
	h.cfg.GatewayLivenessTimeout = 5 * time.Second
	h.cfg.NodeNotReadyGrace = time.Hour
	h.node("node-b", "openstack:///"+serverB, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	gw := h.create("silent", spec(false))
	h.waitConverged("silent")
	h.node("node-a", "openstack:///"+serverA, true, nil)

	// The gateway's pod on node-b as its kubelet last reported it: running and ready.
	ref := render.Gateway{Kind: v1alpha1.KindIPsecGateway, Namespace: h.ns, Name: "silent", UID: gw.UID}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "silent-gateway-x1", Labels: render.Labels(ref)},
		Spec: corev1.PodSpec{NodeName: "node-b", Containers: []corev1.Container{{Name: "c", Image: "gateway"}}}}
	if err := env.Client.Create(h.ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := env.Client.Status().Update(h.ctx, pod); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: h.ns, Name: render.LivenessLeaseName("silent")}
	eventually(t, "the operator created the liveness Lease", func() (bool, string) {
		var l coordinationv1.Lease
		err := env.Client.Get(h.ctx, key, &l)
		return err == nil && l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds == 5, fmt.Sprintf("%v %+v", err, l.Spec)
	})

	// The status agent's renewer, as the pod runs it.
	var logs []string
	var mu sync.Mutex
	ctx, stop := context.WithCancel(h.ctx)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		(&status.Renewer{Client: env.Client, Key: key, Holder: pod.Name, Interval: time.Second, Logf: func(f string, a ...any) {
			mu.Lock()
			logs = append(logs, fmt.Sprintf(f, a...))
			mu.Unlock()
		}}).Run(ctx)
	}()
	time.Sleep(3 * h.cfg.GatewayLivenessTimeout)
	if g := h.get("silent"); g.Status.NodeName != "node-b" || h.detaches() != 0 {
		mu.Lock()
		t.Fatalf("moved while its pod renewed the Lease: node %s, %d detaches; renewer: %v", g.Status.NodeName, h.detaches(), logs)
		mu.Unlock()
	}
	var l coordinationv1.Lease
	mustGet(t, h, key, &l)
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != pod.Name || l.Spec.RenewTime == nil {
		t.Fatalf("the Lease as renewed: %+v", l.Spec)
	}

	// The node powers off: the renewals stop, nothing else changes.
	stop()
	<-done
	eventually(t, "moved to node-a, the port on its server, the stranded pod deleted", func() (bool, string) {
		g := h.get("silent")
		port, _ := h.sim.Port(g.Status.PortID)
		err := env.Client.Get(h.ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
		return g.Status.NodeName == "node-a" && port.DeviceID == serverA && apierrors.IsNotFound(err),
			fmt.Sprintf("node %s, port on %s, old pod: %v", g.Status.NodeName, port.DeviceID, err)
	})
	if !h.events.await("stopped renewing their liveness leases") {
		t.Errorf("no Event names the liveness leases as the reason for the move")
	}
	var node corev1.Node
	mustGet(t, h, client.ObjectKey{Name: "node-b"}, &node)
	if !nodeReady(&node) {
		t.Fatalf("node-b is not Ready: the move was not the liveness detection's")
	}
}

// A standby replica observes the Leases before it leads, so when it takes over from a
// leader lost with the node it judges at once: a Lease silent for the timeout is declared
// at its first check as leader. A freshly started process has no observations and gives
// every Lease a full timeout.
func TestStandbyJudgesAtOnceWhenItTakesOver(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.node("node-b", "openstack:///"+serverB, true, nil)
	ref := func(name string) render.Gateway {
		return render.Gateway{Kind: v1alpha1.KindIPsecGateway, Namespace: h.ns, Name: name, UID: "uid-" + types.UID(name)}
	}
	leases := map[string]*coordinationv1.Lease{}
	for _, gw := range []struct{ name, node string }{{"on-a", "node-a"}, {"on-b", "node-b"}} {
		g := ref(gw.name)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: gw.name + "-pod", Labels: render.Labels(g)},
			Spec: corev1.PodSpec{NodeName: gw.node, Containers: []corev1.Container{{Name: "c", Image: "gateway"}}}}
		if err := env.Client.Create(h.ctx, pod); err != nil {
			t.Fatal(err)
		}
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		if err := env.Client.Status().Update(h.ctx, pod); err != nil {
			t.Fatal(err)
		}
		l := render.LivenessLease(g, 6*time.Second)
		l.OwnerReferences = nil
		holder := pod.Name
		l.Spec.HolderIdentity = &holder
		if err := env.Client.Create(h.ctx, l); err != nil {
			t.Fatal(err)
		}
		leases[gw.node] = l
	}
	renew := func(node string) {
		t.Helper()
		l := leases[node]
		now := metav1.NewMicroTime(time.Now())
		l.Spec.RenewTime = &now
		if err := env.Client.Update(h.ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	newMonitor := func(elected chan struct{}) *livenessMonitor {
		cfg := testConfig()
		cfg.GatewayLivenessTimeout = 6 * time.Second
		return &livenessMonitor{r: New(Deps{Client: env.Client, APIReader: env.Client, Config: cfg, Log: h.logs.logger()}), elected: elected}
	}
	check := func(m *livenessMonitor, at time.Time) {
		t.Helper()
		if err := m.check(h.ctx, at); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now()
	standbyElected := make(chan struct{})
	standby := newMonitor(standbyElected)
	check(standby, t0)
	renew("node-b")
	check(standby, t0.Add(7*time.Second))
	if f := standby.r.failedNodeSet(); len(f) != 0 {
		t.Fatalf("a standby declared %v", f)
	}
	close(standbyElected) // the leader went with node-a; this replica leads now
	renew("node-b")
	check(standby, t0.Add(7500*time.Millisecond))
	if f := standby.r.failedNodeSet(); !f["node-a"] || f["node-b"] {
		t.Fatalf("the standby, leading, declared %v; want node-a, which has been silent for longer than the timeout", f)
	}

	// Control: a process that has just started (no observations) waits a full timeout.
	fresh := newMonitor(nil)
	check(fresh, t0.Add(7500*time.Millisecond))
	if f := fresh.r.failedNodeSet(); len(f) != 0 {
		t.Fatalf("a freshly started operator declared %v at its first check", f)
	}
}

// A declared node stays declared (placement avoids it) until its gateway pods renew
// again, it turns Ready after the declaration (a healed partition the node controller had
// marked NotReady), or the quarantine ends; it is declared once.
func TestDeclaredNodeQuarantine(t *testing.T) {
	r := &Reconciler{}
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	readyLongAgo := map[string]time.Time{"a": t0.Add(-time.Hour)}
	if got := r.declareFailed([]string{"a"}, nil, readyLongAgo, nil, t0); !reflect.DeepEqual(got, []string{"a"}) {
		t.Fatalf("declared %v, want [a]", got)
	}
	if got := r.declareFailed([]string{"a"}, nil, readyLongAgo, nil, t0.Add(time.Second)); len(got) != 0 || !r.failedNodeSet()["a"] {
		t.Fatalf("declared again %v, set %v", got, r.failedNodeSet())
	}
	r.declareFailed(nil, nil, readyLongAgo, nil, t0.Add(time.Minute))
	if !r.failedNodeSet()["a"] {
		t.Fatal("released within the quarantine, though Ready only from before the declaration")
	}
	r.declareFailed(nil, nil, map[string]time.Time{"a": t0.Add(50 * time.Second)}, nil, t0.Add(61*time.Second))
	if r.failedNodeSet()["a"] {
		t.Fatal("still declared after it turned Ready again")
	}
	r.declareFailed([]string{"b"}, nil, nil, nil, t0)
	r.declareFailed(nil, map[string]bool{"b": true}, nil, nil, t0.Add(time.Second))
	if r.failedNodeSet()["b"] {
		t.Fatal("still declared after a pod on it renewed")
	}
	r.declareFailed([]string{"c"}, nil, nil, nil, t0)
	r.declareFailed(nil, nil, nil, nil, t0.Add(livenessQuarantine+time.Second))
	if r.failedNodeSet()["c"] {
		t.Fatal("still declared after the quarantine")
	}
}
