package gateway

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/status"
	"bnerd.net/vpn-operator/internal/render"
)

// What the Deployment controller, the kubelet and the status agent would do, for
// envtest (which runs none of them): the gateway's pod ready with its tunnel up.

// running brings gw's pod up: its status agent started at started, the Deployment's
// current generation rolled out, and (up) the tunnel reported Up since then.
func (h *harness) running(gw string, started time.Time, up bool) {
	h.t.Helper()
	h.pod(gw, "node-a", runningReady(started))
	var d appsv1.Deployment
	key := client.ObjectKey{Namespace: h.ns, Name: render.DeploymentName(gw)}
	mustGet(h.t, h, key, &d)
	d.Status.ObservedGeneration, d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas = d.Generation, 1, 1, 1, 1
	if err := env.Client.Status().Update(h.ctx, &d); err != nil {
		h.t.Fatal(err)
	}
	if up {
		h.report(h.agent(gw), map[string]string{"hq": status.StateUp})
	}
}

// agentImages maps each gateway to the agent image its Deployment runs.
func (h *harness) agentImages(names []string) map[string]string {
	h.t.Helper()
	out := map[string]string{}
	for _, n := range names {
		var d appsv1.Deployment
		mustGet(h.t, h, client.ObjectKey{Namespace: h.ns, Name: render.DeploymentName(n)}, &d)
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name == render.ContainerStatus {
				out[n] = c.Image
			}
		}
	}
	return out
}

func withImage(images map[string]string, image string) []string {
	var out []string
	for n, img := range images {
		if img == image {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// waitCanary waits for the first of names to run image and returns it: the canary of a
// paced rollout (the test then checks that it stays the only one).
func (h *harness) waitCanary(names []string, image string) string {
	h.t.Helper()
	var canary string
	eventually(h.t, "a canary restarts", func() (bool, string) {
		rolled := withImage(h.agentImages(names), image)
		if len(rolled) == 1 {
			canary = rolled[0]
		}
		return len(rolled) >= 1, fmt.Sprint(rolled)
	})
	return canary
}

// readyEstate creates the named gateways and brings each to Ready with its tunnel up.
func (h *harness) readyEstate(names []string) {
	h.t.Helper()
	for _, n := range names {
		h.create(n, spec(false))
	}
	started := time.Now().Add(-time.Minute).Truncate(time.Second)
	for _, n := range names {
		h.waitConverged(n)
		h.running(n, started, true)
	}
	for _, n := range names {
		h.waitHealth(n, v1alpha1.ConditionTunnelsUp, v1alpha1.ReasonTunnelsUp)
		h.waitHealth(n, v1alpha1.ConditionPodUpToDate, v1alpha1.ReasonPodUpToDate)
	}
}

// An operator upgrade that changes the gateway pods restarts them in stages: one canary,
// waited for until its pod is ready and its tunnel is up again; then at most the budget
// at once; the others keep their pods and say they wait. An upgrade that changes nothing
// in the pods restarts none.
func TestUpgradeRestartsGatewaysInStages(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.cfg.GatewayRolloutBudget = "2"
	h.start()
	names := []string{"gw-a", "gw-b", "gw-c", "gw-d"}
	h.readyEstate(names)
	old := h.cfg.AgentImage

	// An operator restart with the same settings touches no pod.
	gens := map[string]int64{}
	for _, n := range names {
		var d appsv1.Deployment
		mustGet(t, h, client.ObjectKey{Namespace: h.ns, Name: render.DeploymentName(n)}, &d)
		gens[n] = d.Generation
	}
	h.start()
	h.quiesce(names[0])
	for _, n := range names {
		var d appsv1.Deployment
		mustGet(t, h, client.ObjectKey{Namespace: h.ns, Name: render.DeploymentName(n)}, &d)
		if d.Generation != gens[n] {
			t.Errorf("an operator restart without a change moved Deployment %s from generation %d to %d", d.Name, gens[n], d.Generation)
		}
	}

	// The upgrade: a new agent image.
	next := old + "-next"
	h.cfg.AgentImage = next
	h.start()
	canary := h.waitCanary(names, next)
	for _, n := range names {
		if n != canary {
			h.waitHealth(n, v1alpha1.ConditionPodUpToDate, v1alpha1.ReasonRolloutWaiting, "waits for a rollout slot")
		}
	}
	h.waitHealth(canary, v1alpha1.ConditionPodUpToDate, v1alpha1.ReasonRolling, "pod ready: true, tunnels up: 1 of the 1 up before")
	h.quiesce(canary)
	if rolled := withImage(h.agentImages(names), next); len(rolled) != 1 {
		t.Fatalf("while the canary restarts, %v run the new image; want only the canary %s", rolled, canary)
	}
	for _, n := range names {
		if gw := h.get(n); condition(gw, v1alpha1.ConditionReady).Status != "True" && n != canary {
			t.Errorf("%s waits for its slot but is not Ready: %v", n, condition(gw, v1alpha1.ConditionReady))
		}
	}

	// The canary's new pod runs but its tunnel is not up again yet: still the canary alone.
	h.running(canary, time.Now().Truncate(time.Second), false)
	h.waitHealth(canary, v1alpha1.ConditionPodUpToDate, v1alpha1.ReasonRolling, "tunnels up: 0 of the 1 up before")
	h.quiesce(canary)
	if rolled := withImage(h.agentImages(names), next); len(rolled) != 1 {
		t.Fatalf("before the canary's tunnel is back, %v run the new image", rolled)
	}
	// Its tunnel is back: the next two (the budget) restart, the last waits.
	h.report(h.agent(canary), map[string]string{"hq": status.StateUp})
	h.waitHealth(canary, v1alpha1.ConditionPodUpToDate, v1alpha1.ReasonPodUpToDate)
	var batch []string
	eventually(t, "the first batch restarts", func() (bool, string) {
		batch = withImage(h.agentImages(names), next)
		return len(batch) == 3, fmt.Sprint(batch)
	})
	h.quiesce(canary)
	if rolled := withImage(h.agentImages(names), next); len(rolled) != 3 {
		t.Fatalf("budget 2 after the canary: %v run the new image, want 3", rolled)
	}
	last := withImage(h.agentImages(names), old)[0]
	h.waitHealth(last, v1alpha1.ConditionPodUpToDate, v1alpha1.ReasonRolloutWaiting)
	for _, n := range batch {
		if n != canary {
			h.running(n, time.Now().Truncate(time.Second), true)
		}
	}
	eventually(t, "the last gateway restarts", func() (bool, string) {
		rolled := withImage(h.agentImages(names), next)
		return len(rolled) == 4, fmt.Sprint(rolled)
	})
	h.running(last, time.Now().Truncate(time.Second), true)
	for _, n := range names {
		h.waitHealth(n, v1alpha1.ConditionPodUpToDate, v1alpha1.ReasonPodUpToDate)
		var d appsv1.Deployment
		mustGet(t, h, client.ObjectKey{Namespace: h.ns, Name: render.DeploymentName(n)}, &d)
		if _, ok := d.Annotations[render.AnnotationRolloutStarted]; ok {
			t.Errorf("Deployment %s still carries %s after its restart completed", d.Name, render.AnnotationRolloutStarted)
		}
	}
}

// A restarted gateway that does not come back within the timeout halts the rollout: the
// gateways not yet restarted keep their pods and say why, the one not back says so with a
// Warning; a gateway whose pod is not ready anyway is not held back; once the canary is
// back (here after an operator restart, which resumes the restart from its Deployment)
// the rollout goes on.
func TestRolloutHaltsOnAGatewayNotBack(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.cfg.GatewayRolloutBudget = "100%"
	h.cfg.GatewayRolloutTimeout = 3 * time.Second
	h.start()
	names := []string{"gw-a", "gw-b", "gw-c"}
	h.readyEstate(names)
	old := h.cfg.AgentImage
	next := old + "-next"
	h.cfg.AgentImage = next
	h.start()
	canary := h.waitCanary(names, next)
	h.waitHealth(canary, v1alpha1.ConditionPodUpToDate, v1alpha1.ReasonRolloutNotBack, "not back within 3s")
	var waiting []string
	for _, n := range names {
		if n != canary {
			waiting = append(waiting, n)
			h.waitHealth(n, v1alpha1.ConditionPodUpToDate, v1alpha1.ReasonRolloutHalted, "the rollout is halted")
		}
	}
	notBack := func(e string) bool { return strings.HasPrefix(e, "Warning "+v1alpha1.ReasonRolloutNotBack) }
	if !slices.ContainsFunc(h.events.awaitOf(h.ns, canary, notBack), notBack) {
		t.Errorf("no Warning %s Event on the canary; its events: %v", v1alpha1.ReasonRolloutNotBack, h.events.of(h.ns, canary))
	}
	// The halt names no other gateway to a tenant.
	for _, n := range waiting {
		if c := condition(h.get(n), v1alpha1.ConditionPodUpToDate); strings.Contains(c.Message, canary) {
			t.Errorf("%s's condition names the gateway the rollout halted on: %s", n, c.Message)
		}
	}
	// A gateway whose pod is not ready is not held back by the halt.
	broken := waiting[0]
	unready := runningReady(time.Now().Add(-time.Minute).Truncate(time.Second))
	unready.Conditions[3].Status = "False"
	h.pod(broken, "node-a", unready)
	h.waitHealth(broken, v1alpha1.ConditionPodReady, v1alpha1.ReasonPodNotReady)
	h.mutate(broken, func(s *v1alpha1.GatewaySpec) { s.Exposures[0].Target.Ports[0].Port = 8443 }) // a reconcile of its phases
	eventually(t, "the unready gateway takes the new rendering despite the halt", func() (bool, string) {
		img := h.agentImages([]string{broken})[broken]
		return img == next, img
	})
	h.quiesce(canary)
	if rolled := withImage(h.agentImages(names), next); len(rolled) != 2 {
		t.Fatalf("halted: %v run the new image, want the canary and the unready gateway only", rolled)
	}

	// The operator restarts; the canary's restart is resumed from its Deployment (still
	// overdue), and comes back: the rollout goes on.
	h.start()
	h.quiesce(canary)
	if rolled := withImage(h.agentImages(names), next); len(rolled) != 2 {
		t.Fatalf("after an operator restart during the halt: %v run the new image", rolled)
	}
	h.running(canary, time.Now().Truncate(time.Second), true)
	h.waitHealth(canary, v1alpha1.ConditionPodUpToDate, v1alpha1.ReasonPodUpToDate)
	eventually(t, "the rollout goes on", func() (bool, string) {
		rolled := withImage(h.agentImages(names), next)
		return len(rolled) == 3, fmt.Sprint(rolled)
	})
}
