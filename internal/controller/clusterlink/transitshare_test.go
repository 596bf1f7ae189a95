package clusterlink

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// A transit network shared with every project (its shared flag, or an RBAC policy with
// target *) is refused on every link that depends on it, same-tenant and cross-tenant:
// the condition names how it is shared and the admin's command that undoes it, nothing
// is built, shared or changed in OpenStack, what exists stays, deleting a link still
// unwinds it, and removing the share lets the links converge.
func TestTransitNetworkSharedWithAllProjects(t *testing.T) {
	h := newHarness(t)
	net := h.transitNetID()
	h.newLink("before", "shoot--services--svc01", svcCIDR)
	before := h.untilReady("before")

	// An admin runs `openstack network set --share`.
	if err := h.sim.SetNetworkShared(net, true); err != nil {
		t.Fatal(err)
	}
	h.newLink("during", "shoot--services--svc02", "10.252.0.0/16")
	h.secret("cross", "diehl", nil)
	h.newLink("cross", diehlRouter, diehlCIDR, crossTenant(projDiehl))
	h.sim.ResetCounters()
	for _, n := range []string{"before", "during", "cross"} {
		res, err := h.reconcile(n)
		if err != nil || res.RequeueAfter != h.cfg.ResyncInterval {
			t.Fatalf("%s: a refusal waits for the resync: %v %v", n, res, err)
		}
	}
	for n, cond := range map[string]string{"before": v1alpha1.ConditionTransitIPAllocated, "during": v1alpha1.ConditionTransitIPAllocated, "cross": v1alpha1.ConditionTransitNetworkShared} {
		l := h.untilCond(n, cond, v1alpha1.ReasonTransitNetworkSharedWithAllProjects)
		prefix := ""
		if n == "cross" {
			prefix = "operator credential: "
		}
		c := expectCond(t, l, cond, metav1.ConditionFalse, v1alpha1.ReasonTransitNetworkSharedWithAllProjects,
			prefix+"the transit network is shared with every project of the cloud: network "+net+" has shared=True (remove it: openstack network set --no-share "+net+")")
		if !strings.Contains(c.Message, "builds and changes nothing") {
			t.Errorf("%s: the message must say what the operator does: %s", n, c.Message)
		}
		expectCond(t, l, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonTransitNetworkSharedWithAllProjects, cond+": ")
		if len(h.rec.find(n, v1alpha1.ReasonTransitNetworkSharedWithAllProjects)) == 0 {
			t.Errorf("%s: no Warning Event for the refusal", n)
		}
	}
	if w := h.writes(); w != 0 {
		t.Fatalf("%d OpenStack writes while the transit network is shared with everyone: %v", w, h.sim.Counters().ByRoute)
	}
	if len(h.linkPorts(h.get("during"))) != 0 || len(h.sharesFor(projDiehl)) != 0 || len(h.linkPorts(h.get("cross"))) != 0 {
		t.Fatal("a refused link built a leg or shared the network")
	}
	// What the first link built stays (taking it away is a human's decision).
	if _, ok := h.sim.Port(before.Status.LegPortID); !ok || !hasRoute(h.opRouter(), svcCIDR, before.Status.TransitIP) {
		t.Fatal("the refusal tore down an existing link's leg or route")
	}

	// The wildcard RBAC form of the same thing, once the flag is gone.
	if err := h.sim.SetNetworkShared(net, false); err != nil {
		t.Fatal(err)
	}
	pol, err := h.sim.AddRBACPolicy(net, "*")
	if err != nil {
		t.Fatal(err)
	}
	h.reconcile("during")
	expectCond(t, h.get("during"), v1alpha1.ConditionTransitIPAllocated, metav1.ConditionFalse, v1alpha1.ReasonTransitNetworkSharedWithAllProjects,
		"the transit network is shared with every project of the cloud: RBAC policy "+pol.ID+" shares network "+net+" with every project, target * (remove it: openstack network rbac delete "+pol.ID+")")

	// Deleting a link still unwinds it: that only takes reach away.
	h.delete("before")
	h.until("before", "gone", nil)
	if hasRoute(h.opRouter(), svcCIDR, before.Status.TransitIP) {
		t.Fatal("deleting a link while the network is shared left its route")
	}

	// The admin removes the share: the links converge.
	if err := h.sim.DeleteRBACPolicy(pol.ID); err != nil {
		t.Fatal(err)
	}
	h.untilReady("during")
	h.untilReady("cross")
	if len(h.sharesFor(projDiehl)) != 1 {
		t.Fatalf("the cross-tenant link shares per project once the wildcard is gone: %v", h.sharesFor(projDiehl))
	}
}
