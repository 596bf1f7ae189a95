package gateway

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/status"
	"bnerd.net/vpn-operator/internal/agent/vici"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testinfra/crash"
)

// What a kubelet and a status agent would write, for envtest (which runs neither): a
// Pod of the gateway with the statuses a kubelet reports, its Warning events, and the
// status agent's report through the agent's own writer.

func (h *harness) podName(gw string) string { return render.DeploymentName(gw) + "-6d9f7c5b8-x2x4q" }

// pod creates the gateway's pod on node (as the Deployment's ReplicaSet would) and gives
// it st (as the kubelet would). It replaces a pod left by an earlier step.
func (h *harness) pod(gw, node string, st corev1.PodStatus) *corev1.Pod {
	h.t.Helper()
	name := h.podName(gw)
	old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name}}
	if err := env.Client.Get(h.ctx, client.ObjectKeyFromObject(old), old); err == nil {
		if old.Spec.NodeName == node {
			old.Status = st
			if err := env.Client.Status().Update(h.ctx, old); err != nil {
				h.t.Fatal(err)
			}
			return old
		}
		zero := int64(0)
		if err := env.Client.Delete(h.ctx, old, &client.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			h.t.Fatal(err)
		}
		eventually(h.t, "old pod gone", func() (bool, string) {
			err := env.Client.Get(h.ctx, client.ObjectKeyFromObject(old), &corev1.Pod{})
			return err != nil, "still there"
		})
	}
	ref := render.Gateway{Kind: v1alpha1.KindIPsecGateway, Namespace: h.ns, Name: gw}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name, Labels: render.Labels(ref)},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{
			{Name: render.ContainerStrongswan, Image: "gateway"}, {Name: render.ContainerStatus, Image: "agent"},
		}},
	}
	if err := env.Client.Create(h.ctx, p); err != nil {
		h.t.Fatal(err)
	}
	p.Status = st
	if err := env.Client.Status().Update(h.ctx, p); err != nil {
		h.t.Fatal(err)
	}
	return p
}

func podCond(t corev1.PodConditionType, ok bool, reason, msg string) corev1.PodCondition {
	s := corev1.ConditionFalse
	if ok {
		s = corev1.ConditionTrue
	}
	return corev1.PodCondition{Type: t, Status: s, Reason: reason, Message: msg, LastTransitionTime: metav1.Now()}
}

func running(name string, started time.Time) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, Ready: true, Image: "x", ImageID: "x", ContainerID: "containerd://" + name,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}}}
}

// runningReady is a pod whose containers (the status agent since started) run and pass
// their probes.
func runningReady(started time.Time) corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &metav1.Time{Time: started},
		Conditions: []corev1.PodCondition{podCond(corev1.PodScheduled, true, "", ""), podCond(corev1.PodInitialized, true, "", ""),
			podCond(corev1.ContainersReady, true, "", ""), podCond(corev1.PodReady, true, "", "")},
		ContainerStatuses: []corev1.ContainerStatus{running(render.ContainerStrongswan, started), running(render.ContainerStatus, started)}}
}

// sandboxEvent is the Warning the kubelet records when the CNI ADD fails.
func (h *harness) sandboxEvent(p *corev1.Pod, msg string) {
	h.t.Helper()
	e := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: p.Namespace, Name: fmt.Sprintf("%s.%x", p.Name, time.Now().UnixNano())},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID, APIVersion: "v1"},
		Reason:         "FailedCreatePodSandBox", Message: msg, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "kubelet", Host: p.Spec.NodeName},
		FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1,
	}
	if err := env.Client.Create(h.ctx, e); err != nil {
		h.t.Fatal(err)
	}
}

// report writes tunnel states through the status agent's own writer, as the agent of
// the running pod would: states maps tunnel name to Up, Connecting or Down.
func (h *harness) report(w *status.Writer, states map[string]string) {
	h.t.Helper()
	sas := map[string][]vici.IKESA{}
	var names []string
	for name, st := range states {
		names = append(names, name)
		switch st {
		case status.StateUp:
			// charon reports the SA's age: it grows with the clock.
			sas[name] = []vici.IKESA{{Name: name, State: "ESTABLISHED", EstablishedSeconds: int64(time.Since(upSince) / time.Second), Children: []vici.ChildSA{{Name: name, State: "INSTALLED"}}}}
		case status.StateConnecting:
			sas[name] = []vici.IKESA{{Name: name, State: "CONNECTING"}}
		}
	}
	// A Down tunnel carries the cause charon saw, as the status agent reports it.
	notes := func(name string) status.Note {
		if states[name] == status.StateDown {
			return status.Note{Reason: "AuthenticationFailed", Message: "the peer rejected our authentication"}
		}
		return status.Note{}
	}
	tunnels, ready := status.Compute(names, sas, notes, time.Now())
	if _, err := w.Write(h.ctx, tunnels, ready); err != nil {
		h.t.Fatal(err)
	}
}

// upSince is when the tests' IKE SAs were established.
var upSince = time.Now().Add(-30 * time.Second)

func (h *harness) agent(gw string) *status.Writer {
	return &status.Writer{Client: env.Client, Kind: v1alpha1.KindIPsecGateway, Namespace: h.ns, Name: gw}
}

// waitHealth waits for PodReady or TunnelsUp (typ) with reason (and a message
// containing each of msg), and returns the gateway.
func (h *harness) waitHealth(name, typ, reason string, msg ...string) *v1alpha1.IPsecGateway {
	h.t.Helper()
	var gw *v1alpha1.IPsecGateway
	eventually(h.t, fmt.Sprintf("%s %s/%s %q", name, typ, reason, msg), func() (bool, string) {
		gw = h.get(name)
		c := condition(gw, typ)
		ok := c != nil && c.Reason == reason && c.ObservedGeneration == gw.Generation
		for _, m := range msg {
			ok = ok && strings.Contains(c.Message, m)
		}
		return ok,
			condOf(gw.Status.Conditions, typ) + " | " + condOf(gw.Status.Conditions, v1alpha1.ConditionReady)
	})
	return gw
}

func condition(gw *v1alpha1.IPsecGateway, typ string) *metav1.Condition {
	for i := range gw.Status.Conditions {
		if gw.Status.Conditions[i].Type == typ {
			return &gw.Status.Conditions[i]
		}
	}
	return nil
}

func expectReady(t *testing.T, gw *v1alpha1.IPsecGateway, st metav1.ConditionStatus, reason, msgPart string) {
	t.Helper()
	c := condition(gw, v1alpha1.ConditionReady)
	if c == nil || c.Status != st || c.Reason != reason || !strings.Contains(c.Message, msgPart) {
		t.Fatalf("Ready: %s, want %s/%s containing %q", condOf(gw.Status.Conditions, v1alpha1.ConditionReady), st, reason, msgPart)
	}
}

// The gateway pod as a kubelet reports it, each state read into PodReady and Ready:
// unschedulable, a sandbox the host-device plugin cannot create (the CNI error of a
// wrong node, only in the pod's events), a crash loop, the pod on another node than the
// port's, running but unready, and ready. Ready says each time that the OpenStack and
// Kubernetes objects are converged but the pod is not.
func TestPodReadings(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.node("node-b", "openstack:///"+serverB, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("pods", spec(false))
	gw := h.waitConverged("pods")
	gw = h.waitHealth("pods", v1alpha1.ConditionPodReady, v1alpha1.ReasonPodNotFound)
	expectReady(t, gw, metav1.ConditionFalse, v1alpha1.ReasonPodNotFound,
		"the OpenStack and Kubernetes objects are converged, but PodReady is False: no pod of Deployment pods-gateway exists")
	if c := condition(gw, v1alpha1.ConditionTunnelsUp); c == nil || c.Status != metav1.ConditionUnknown || c.Reason != v1alpha1.ReasonTunnelsNotReported {
		t.Fatalf("without a pod the tunnels are not known: %s", condOf(gw.Status.Conditions, v1alpha1.ConditionTunnelsUp))
	}
	if gw.Status.TunnelSummary != "?/1" {
		t.Fatalf("tunnelSummary %q without a report, want ?/1", gw.Status.TunnelSummary)
	}

	// Unschedulable.
	h.pod("pods", "", corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
		podCond(corev1.PodScheduled, false, "Unschedulable", "0/2 nodes are available: 2 Insufficient memory."),
	}})
	gw = h.waitHealth("pods", v1alpha1.ConditionPodReady, v1alpha1.ReasonPodPending, "not scheduled")
	expectReady(t, gw, metav1.ConditionFalse, v1alpha1.ReasonPodPending, "not scheduled: Unschedulable: 0/2 nodes are available: 2 Insufficient memory.")

	// Scheduled, the sandbox cannot be created: the host-device plugin finds no
	// interface with the port's MAC on this node. The kubelet says so only in an Event.
	creating := corev1.PodStatus{Phase: corev1.PodPending,
		Conditions: []corev1.PodCondition{podCond(corev1.PodScheduled, true, "", ""), podCond(corev1.PodReady, false, "ContainersNotReady", "containers with unready status: [strongswan status-agent]")},
		ContainerStatuses: []corev1.ContainerStatus{
			{Name: render.ContainerStrongswan, Image: "x", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}},
			{Name: render.ContainerStatus, Image: "x", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}},
		}}
	p := h.pod("pods", "node-a", creating)
	h.sandboxEvent(p, `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "0b6f3b2c8a9d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7": plugin type="multus" name="multus-cni-network" failed (add): [`+h.ns+`/`+p.Name+`/net1]: error adding container to network "pods-nic2": failed to find host device: failed to find physical interface`)
	// The kubelet acknowledges the pod (its start time); the Pending recheck would find
	// the event without that, PendingRecheck later.
	creating.StartTime = &metav1.Time{Time: time.Now().Truncate(time.Second)}
	p = h.pod("pods", "node-a", creating)
	gw = h.waitHealth("pods", v1alpha1.ConditionPodReady, v1alpha1.ReasonPodNetworkFailed)
	msg := condOf(gw.Status.Conditions, v1alpha1.ConditionPodReady)
	if !strings.Contains(msg, "failed to find host device: failed to find physical interface") || !strings.Contains(msg, "on node node-a") ||
		strings.Contains(msg, "0b6f3b2c8a9d") {
		t.Fatalf("PodNetworkFailed must quote the plugin's error without the sandbox ID: %s", msg)
	}
	expectReady(t, gw, metav1.ConditionFalse, v1alpha1.ReasonPodNetworkFailed, "converged, but PodReady is False")

	// Running, the strongswan container crash-looping.
	started := time.Now().Add(-time.Minute).Truncate(time.Second)
	crash := runningReady(started)
	crash.Conditions[3] = podCond(corev1.PodReady, false, "ContainersNotReady", "containers with unready status: [strongswan]")
	crash.ContainerStatuses[0] = corev1.ContainerStatus{Name: render.ContainerStrongswan, Image: "x", RestartCount: 5,
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 2m40s restarting failed container"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}}
	h.pod("pods", "node-a", crash)
	gw = h.waitHealth("pods", v1alpha1.ConditionPodReady, v1alpha1.ReasonPodCrashLooping)
	if msg := condOf(gw.Status.Conditions, v1alpha1.ConditionPodReady); !strings.Contains(msg, "container strongswan is in CrashLoopBackOff after 5 restarts; it last exited with code 1 (Error)") {
		t.Fatalf("crash loop: %s", msg)
	}

	// Running but not ready.
	unready := runningReady(started)
	unready.Conditions[2] = podCond(corev1.ContainersReady, false, "ContainersNotReady", "containers with unready status: [strongswan]")
	unready.Conditions[3] = podCond(corev1.PodReady, false, "ContainersNotReady", "containers with unready status: [strongswan]")
	h.pod("pods", "node-a", unready)
	gw = h.waitHealth("pods", v1alpha1.ConditionPodReady, v1alpha1.ReasonPodNotReady)
	if msg := condOf(gw.Status.Conditions, v1alpha1.ConditionPodReady); !strings.Contains(msg, "runs but is not ready: containers with unready status: [strongswan]") {
		t.Fatalf("not ready: %s", msg)
	}

	// The pod on another node than the one holding the port.
	h.pod("pods", "node-b", runningReady(started))
	gw = h.waitHealth("pods", v1alpha1.ConditionPodReady, v1alpha1.ReasonPodOnWrongNode)
	if msg := condOf(gw.Status.Conditions, v1alpha1.ConditionPodReady); !strings.Contains(msg, "runs on node node-b, but the gateway's port is attached to node node-a's server") {
		t.Fatalf("wrong node: %s", msg)
	}

	// Ready on the right node; the tunnels are still unknown, so Ready is Unknown.
	h.pod("pods", "node-a", runningReady(started))
	gw = h.waitHealth("pods", v1alpha1.ConditionPodReady, v1alpha1.ReasonPodReady)
	expectReady(t, gw, metav1.ConditionUnknown, v1alpha1.ReasonTunnelsNotReported, "converged, but TunnelsUp is Unknown: the status agent of pod")

	if n := h.healthReconciles.Load(); n < 6 {
		t.Fatalf("%d health reconciles for six pod states", n)
	}
	// Every change was an Event: a pod starting up is news (Normal), a pod that cannot
	// run is a Warning.
	for _, want := range []string{"Normal " + v1alpha1.ReasonPodNotFound, "Normal " + v1alpha1.ReasonPodPending,
		"Warning " + v1alpha1.ReasonPodNetworkFailed, "Warning " + v1alpha1.ReasonPodCrashLooping, "Warning " + v1alpha1.ReasonPodOnWrongNode,
		"Normal " + v1alpha1.ReasonPodReady} {
		if !awaitTrue(func() bool { return h.hasEvent(want) }) {
			t.Errorf("no %q Event", want)
		}
	}
}

// The tunnels as the status agent reports them: Ready only with every tunnel up; a
// tunnel down names itself with since when; a report older than the pod's status agent
// is not current; a silent agent makes TunnelsUp and Ready Unknown after the stated
// time, through one requeue at the deadline (no polling), and a heartbeat brings it back.
func TestTunnelsFromTheStatusAgent(t *testing.T) {
	h := newHarness(t)
	h.cfg.StatusAgentStaleAfter = 3 * time.Second
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	s := spec(false)
	s.Tunnels = append(s.Tunnels, v1alpha1.Tunnel{Name: "branch", Peer: v1alpha1.Peer{Address: "198.51.100.8", Subnets: []string{"192.168.20.0/24"}},
		PreSharedKey: v1alpha1.SecretKeyRef{Name: "hq-psk", Key: "psk"}})
	h.create("tun", s)
	h.waitConverged("tun")

	// A report written before the current pod's status agent started is an earlier
	// pod's: not current.
	agent := h.agent("tun")
	h.report(agent, map[string]string{"hq": status.StateUp, "branch": status.StateUp})
	started := time.Now().Add(5 * time.Second).Truncate(time.Second)
	h.pod("tun", "node-a", runningReady(started))
	gw := h.waitHealth("tun", v1alpha1.ConditionTunnelsUp, v1alpha1.ReasonTunnelsNotReported, "has not reported yet")
	if msg := condOf(gw.Status.Conditions, v1alpha1.ConditionTunnelsUp); !strings.Contains(msg, "has not reported yet; its last report (2/2 up at") || gw.Status.TunnelSummary != "?/2" {
		t.Fatalf("an earlier pod's report must not read as current: %s, summary %s", msg, gw.Status.TunnelSummary)
	}

	// The current agent reports one tunnel down.
	h.pod("tun", "node-a", runningReady(time.Now().Add(-time.Minute).Truncate(time.Second)))
	agent = h.agent("tun")
	h.report(agent, map[string]string{"hq": status.StateUp, "branch": status.StateDown})
	gw = h.waitHealth("tun", v1alpha1.ConditionTunnelsUp, v1alpha1.ReasonTunnelsDown)
	msg := condOf(gw.Status.Conditions, v1alpha1.ConditionTunnelsUp)
	if !strings.Contains(msg, "1/2 tunnels up; not up: branch Down since ") || !strings.Contains(msg, "(AuthenticationFailed: the peer rejected our authentication)") || gw.Status.TunnelSummary != "1/2" {
		t.Fatalf("TunnelsDown must name the tunnel, since when and why: %s, summary %s", msg, gw.Status.TunnelSummary)
	}
	expectReady(t, gw, metav1.ConditionFalse, v1alpha1.ReasonTunnelsDown, "the OpenStack and Kubernetes objects are converged, but TunnelsUp is False: 1/2 tunnels up")

	// Every tunnel up: Ready.
	h.report(agent, map[string]string{"hq": status.StateUp, "branch": status.StateUp})
	gw = h.waitHealth("tun", v1alpha1.ConditionTunnelsUp, v1alpha1.ReasonTunnelsUp)
	expectReady(t, gw, metav1.ConditionTrue, v1alpha1.ReasonReconciled, "every tunnel is up")
	if gw.Status.TunnelSummary != "2/2" {
		t.Fatalf("summary %s", gw.Status.TunnelSummary)
	}

	// The agent falls silent: after the stale-after time the report is not current.
	gw = h.waitHealth("tun", v1alpha1.ConditionTunnelsUp, v1alpha1.ReasonStatusAgentSilent)
	observed := gw.Status.TunnelsObservedTime.Time
	if msg := condOf(gw.Status.Conditions, v1alpha1.ConditionTunnelsUp); !strings.Contains(msg, "more than 3s ago; its last report (2/2 up at") {
		t.Fatalf("silent agent: %s", msg)
	}
	if gw.Status.TunnelSummary != "?/2" {
		t.Fatalf("a stale report still shows %q as current", gw.Status.TunnelSummary)
	}
	expectReady(t, gw, metav1.ConditionUnknown, v1alpha1.ReasonStatusAgentSilent, "converged, but TunnelsUp is Unknown")
	if row := strings.Join(strings.Fields(h.kubectlGet("tun", "-o", "wide")), " "); !strings.Contains(row, "tun Unknown StatusAgentSilent PodReady ?/2") {
		t.Fatalf("kubectl get shows a silent agent's gateway as %q", row)
	}
	if c := condition(gw, v1alpha1.ConditionTunnelsUp); c.LastTransitionTime.Time.Before(observed.Add(3 * time.Second).Truncate(time.Second)) {
		t.Fatalf("TunnelsUp turned Unknown at %s, before the report (%s) was 3s old", c.LastTransitionTime, observed)
	}
	// Nothing polls a silent gateway: no reconcile of either controller while nothing
	// changes.
	h.quiesce("tun")
	health, phases, writes := h.healthReconciles.Load(), h.reconciles.Load(), h.writes.Load()
	time.Sleep(4 * time.Second)
	if d := h.healthReconciles.Load() - health; d != 0 {
		t.Fatalf("%d health reconciles of a gateway whose agent is silent: a poll loop", d)
	}
	if d, w := h.reconciles.Load()-phases, h.writes.Load()-writes; d != 0 || w != 0 {
		t.Fatalf("%d phase reconciles, %d writes while nothing changed", d, w)
	}

	// A heartbeat alone (nothing changed) brings the report back.
	agent.Heartbeat = time.Nanosecond
	h.report(agent, map[string]string{"hq": status.StateUp, "branch": status.StateUp})
	gw = h.waitHealth("tun", v1alpha1.ConditionTunnelsUp, v1alpha1.ReasonTunnelsUp)
	expectReady(t, gw, metav1.ConditionTrue, v1alpha1.ReasonReconciled, "")
}

// While the report is current, a heartbeat costs the operator nothing: no reconcile of
// the phases, no health reconcile, no write; the one stale check per report is
// scheduled at the deadline.
func TestHeartbeatsCostNothing(t *testing.T) {
	h := newHarness(t)
	h.cfg.StatusAgentStaleAfter = time.Hour
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("hb", spec(false))
	h.waitConverged("hb")
	h.pod("hb", "node-a", runningReady(time.Now().Add(-time.Minute).Truncate(time.Second)))
	agent := h.agent("hb")
	h.report(agent, map[string]string{"hq": status.StateUp})
	h.waitHealth("hb", v1alpha1.ConditionTunnelsUp, v1alpha1.ReasonTunnelsUp)
	h.quiesce("hb")
	health, phases, writes := h.healthReconciles.Load(), h.reconciles.Load(), h.writes.Load()
	agent.Heartbeat = time.Nanosecond
	for i := 0; i < 5; i++ {
		before := h.get("hb").Status.TunnelsObservedTime
		time.Sleep(1100 * time.Millisecond) // the heartbeat has whole seconds
		h.report(agent, map[string]string{"hq": status.StateUp})
		if after := h.get("hb").Status.TunnelsObservedTime; !after.After(before.Time) {
			t.Fatalf("heartbeat %d not written: %s then %s", i, before, after)
		}
	}
	h.quiesce("hb")
	if d := h.healthReconciles.Load() - health; d != 0 {
		t.Fatalf("5 heartbeats caused %d health reconciles", d)
	}
	if d, w := h.reconciles.Load()-phases, h.writes.Load()-writes; d != 0 || w != 0 {
		t.Fatalf("5 heartbeats caused %d phase reconciles and %d operator writes", d, w)
	}
}

// A steady gateway whose agent heartbeats every second with a stale-after time of 3 s:
// the report never reads stale, the operator writes nothing, the phases are not
// reconciled, and the health controller runs about once per stale-after period (the
// deadline requeue), not once per heartbeat. The counts are logged for
// docs/benchmarks.md.
func TestHealthSteadyState(t *testing.T) {
	h := newHarness(t)
	h.cfg.StatusAgentStaleAfter = 6 * time.Second
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("steady", spec(false))
	h.waitConverged("steady")
	h.pod("steady", "node-a", runningReady(time.Now().Add(-time.Minute).Truncate(time.Second)))
	agent := h.agent("steady")
	agent.Heartbeat = time.Second
	h.report(agent, map[string]string{"hq": status.StateUp})
	gw := h.waitCond("steady", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReconciled)
	since := condition(gw, v1alpha1.ConditionTunnelsUp).LastTransitionTime
	h.quiesce("steady")
	health, phases, writes := h.healthReconciles.Load(), h.reconciles.Load(), h.writes.Load()
	start := time.Now()
	beats := 0
	for time.Since(start) < 15*time.Second {
		time.Sleep(time.Second)
		h.report(agent, map[string]string{"hq": status.StateUp})
		beats++
	}
	elapsed := time.Since(start)
	gw = h.get("steady")
	if c := condition(gw, v1alpha1.ConditionTunnelsUp); c.Reason != v1alpha1.ReasonTunnelsUp || !c.LastTransitionTime.Equal(&since) {
		t.Fatalf("a heartbeating agent's report was read as not current at some point: %s (since %s)", condOf(gw.Status.Conditions, v1alpha1.ConditionTunnelsUp), c.LastTransitionTime)
	}
	dh, dp, dw := h.healthReconciles.Load()-health, h.reconciles.Load()-phases, h.writes.Load()-writes
	if dp != 0 || dw != 0 {
		t.Fatalf("%d phase reconciles and %d operator writes for %d heartbeats", dp, dw, beats)
	}
	t.Logf("%.1f s, %d heartbeats (1 s), stale-after 6 s: %d health reconciles, 0 phase reconciles, 0 operator writes", elapsed.Seconds(), beats, dh)
}

// A write of the observations between a phase reconcile's read and its status write is
// no conflict: the phase's result and the fresh observation both land.
func TestObservationWriteInBetween(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	r := h.directReconciler(&crash.Point{})
	h.r = r
	h.create("between", spec(false))
	converge(t, h, r, "between", false)
	key := types.NamespacedName{Namespace: h.ns, Name: "between"}

	// The phases' reconcile reads the gateway...
	obj := &v1alpha1.IPsecGateway{}
	if err := env.Client.Get(h.ctx, key, obj); err != nil {
		t.Fatal(err)
	}
	g, _ := viewOf(obj)
	// ...the pod turns up and the health reconcile writes PodReady...
	h.pod("between", "node-a", runningReady(time.Now().Add(-time.Minute).Truncate(time.Second)))
	if _, err := (healthReconciler{r: r, kind: v1alpha1.KindIPsecGateway}).Reconcile(h.ctx, ctrlRequest(key)); err != nil {
		t.Fatal(err)
	}
	if c := condition(h.get("between"), v1alpha1.ConditionPodReady); c == nil || c.Reason != v1alpha1.ReasonPodReady {
		t.Fatalf("health reconcile did not record the pod: %v", c)
	}
	// ...then the phase writes what it decided on its older read.
	g.status.ServiceCIDRGatewayAddress = "" // a change the phase made
	r.summarize(g)
	if err := r.persist(h.ctx, g); err != nil {
		t.Fatalf("a write of the observations in between failed the phase's write: %v", err)
	}
	got := h.get("between")
	if got.Status.ServiceCIDRGatewayAddress != "" {
		t.Fatal("the phase's update was lost")
	}
	if c := condition(got, v1alpha1.ConditionPodReady); c == nil || c.Reason != v1alpha1.ReasonPodReady {
		t.Fatalf("the observation was overwritten with the stale one: %s", condOf(got.Status.Conditions, v1alpha1.ConditionPodReady))
	}
	// A change of anything else in between still fails the write.
	stale := h.get("between")
	gs, _ := viewOf(stale)
	fresh := h.get("between")
	fresh.Status.ServiceCIDRGatewayAddress = "100.64.0.1"
	if err := env.Client.Status().Update(h.ctx, fresh); err != nil {
		t.Fatal(err)
	}
	gs.status.FloatingIP = "203.0.113.99"
	if err := r.persist(h.ctx, gs); err == nil {
		t.Fatal("a write based on a stale read of the phases' fields succeeded")
	}
}

// kubectl get shows Ready, its reason, the pod and the tunnels for a healthy gateway,
// one whose pod is Pending and one whose tunnel is down (the real kubectl against the
// real API server).
func TestPrinterColumns(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.node("node-b", "openstack:///"+serverB, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("healthy", spec(false))
	h.create("pending", spec(false))
	h.create("down", spec(false))
	for _, n := range []string{"healthy", "pending", "down"} {
		h.waitConverged(n)
	}
	started := time.Now().Add(-time.Minute).Truncate(time.Second)
	h.pod("healthy", h.get("healthy").Status.NodeName, runningReady(started))
	h.report(h.agent("healthy"), map[string]string{"hq": status.StateUp})
	h.pod("down", h.get("down").Status.NodeName, runningReady(started))
	h.report(h.agent("down"), map[string]string{"hq": status.StateDown})
	node := h.get("pending").Status.NodeName
	h.pod("pending", node, corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{podCond(corev1.PodScheduled, true, "", "")},
		ContainerStatuses: []corev1.ContainerStatus{{Name: render.ContainerStrongswan, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}})
	h.waitCond("healthy", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReconciled)
	h.waitHealth("pending", v1alpha1.ConditionPodReady, v1alpha1.ReasonPodPending)
	h.waitHealth("down", v1alpha1.ConditionTunnelsUp, v1alpha1.ReasonTunnelsDown)

	out := h.kubectlGet()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines", len(lines))
	}
	header := strings.Fields(lines[0])
	if strings.Join(header[:6], " ") != "NAME READY REASON POD TUNNELS UP" {
		t.Fatalf("columns %v", header)
	}
	rows := map[string][]string{}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		rows[f[0]] = f
	}
	if got := strings.Join(rows["healthy"][1:5], " "); got != "True Reconciled PodReady 1/1" {
		t.Errorf("healthy row: %s", got)
	}
	if got := strings.Join(rows["pending"][1:5], " "); got != "False PodPending PodPending ?/1" {
		t.Errorf("pending row: %s", got)
	}
	if got := strings.Join(rows["down"][1:5], " "); got != "False TunnelsDown PodReady 0/1" {
		t.Errorf("down row: %s", got)
	}
}

// hasEvent reports whether an Event starts with prefix ("<type> <reason>").
func (h *harness) hasEvent(prefix string) bool {
	h.events.mu.Lock()
	defer h.events.mu.Unlock()
	for _, e := range h.events.events {
		if strings.HasPrefix(e, prefix+" ") {
			return true
		}
	}
	return false
}

// kubectlGet runs the real kubectl's `get ipsecgw` on the harness's namespace.
func (h *harness) kubectlGet(args ...string) string {
	h.t.Helper()
	kubeconfig, err := env.WriteKubeConfig(h.t.TempDir())
	if err != nil {
		h.t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(env.BinDir, "kubectl"), append([]string{"--kubeconfig", kubeconfig, "get", "ipsecgw", "-n", h.ns}, args...)...).CombinedOutput()
	if err != nil {
		h.t.Fatalf("kubectl: %v\n%s", err, out)
	}
	h.t.Logf("kubectl get ipsecgw %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

func ctrlRequest(key types.NamespacedName) reconcile.Request {
	return reconcile.Request{NamespacedName: key}
}
