package gateway

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

// Regressions found by the chaos soak (test/soak).

// A gateway that pins its virtual IPs into a /24 another gateway still holds waits with
// Allocated=False; when the holder's deletion releases the /24, the waiter takes it at
// once instead of at the next resync (30 minutes in this harness).
func TestPinnedCIDRReleasedByADeletionIsTakenAtOnce(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	pinned := spec(false)
	pinned.Exposures[0].VirtualIP = "100.64.77.10"
	h.create("old", pinned)
	old := h.waitConverged("old")

	// The old gateway's deletion is held up by a failing cloud for a while.
	remove := h.sim.Inject(openstacksim.Fault{Method: "DELETE", PathPattern: "/network/v2.0/ports/*", Status: 503})
	if err := env.Client.Delete(h.ctx, old); err != nil {
		t.Fatal(err)
	}
	h.create("new", pinned)
	h.waitCond("new", v1alpha1.ConditionAllocated, metav1.ConditionFalse, v1alpha1.ReasonAllocationFailed)

	remove()
	h.waitGone("old")
	gw := h.waitConverged("new")
	if gw.Status.ServiceCIDR != "100.64.77.0/24" {
		t.Fatalf("service CIDR %s, want the pinned 100.64.77.0/24", gw.Status.ServiceCIDR)
	}
}
