package clusterlink

import (
	"context"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

// racingNet lets another port take the address of the first leg port create just
// before it reaches Neutron: what a gateway port on the same network, allocated by
// Neutron, can do between the transit IP's allocation and the leg's creation.
type racingNet struct {
	openstack.Networking
	h    *harness
	once sync.Once
	took string
}

func (n *racingNet) CreatePort(ctx context.Context, o openstack.CreatePortOpts) (*openstack.Port, error) {
	n.once.Do(func() {
		n.took = o.IPAddress
		n.h.foreignPort(o.IPAddress)
	})
	return n.Networking.CreatePort(ctx, o)
}

// foreignPort puts a port that is no leg (a gateway VM's interface) at ip.
func (h *harness) foreignPort(ip string) openstacksim.Port {
	h.t.Helper()
	p, err := h.sim.AddPort(openstacksim.Port{NetworkID: h.transitNetID(), DeviceID: "vm-1", DeviceOwner: "compute:nova",
		FixedIPs: []openstacksim.FixedIP{{SubnetID: h.transitSubnetID(), IPAddress: ip}}})
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// An allocated transit IP that another port takes before the leg exists is given up
// and a new one allocated, whether the leg's create is refused for it or the address
// is found occupied when the leg is looked for; the foreign port is never touched. A
// pinned transit IP is not moved (TestSameTenantPinHeldByForeignPort).
func TestSameTenantTransitIPTakenBeforeLegIsReallocated(t *testing.T) {
	t.Run("leg create refused", func(t *testing.T) {
		h := newHarness(t)
		race := &racingNet{Networking: h.op.Networking, h: h}
		d := h.deps()
		d.OpenStack = &openstack.Clients{Networking: race, Compute: h.op.Compute, Identity: h.op.Identity}
		h.r = New(d)
		h.newLink("raced", "shoot--services--svc01", svcCIDR)
		// The race is handled, not a failure: the reconcile that meets it comes back
		// soon without an error (no backoff, no error in the controller's metrics and
		// log for what a burst of new gateways makes routine).
		for range 5 {
			res, err := h.reconcile("raced")
			if race.took == "" {
				continue
			}
			if err != nil || res.RequeueAfter <= 0 {
				t.Fatalf("the reconcile that met the race returned %+v, %v; want a requeue and no error", res, err)
			}
			break
		}
		l := h.untilReady("raced")
		if race.took == "" || l.Status.TransitIP == race.took {
			t.Fatalf("transit IP %s; the raced address was %q", l.Status.TransitIP, race.took)
		}
		if ps := h.portsAt(race.took); len(ps) != 1 || ps[0].DeviceOwner != "compute:nova" {
			t.Fatalf("the foreign port at %s was touched: %+v", race.took, ps)
		}
		if len(h.linkPorts(l)) != 1 || len(h.rec.find("raced", "TransitIPTaken")) != 1 {
			t.Fatalf("%d legs, %d TransitIPTaken Events", len(h.linkPorts(l)), len(h.rec.find("raced", "TransitIPTaken")))
		}
	})
	t.Run("address occupied when the leg is looked for", func(t *testing.T) {
		h := newHarness(t)
		remove := h.sim.Inject(openstacksim.Fault{Method: "POST", PathPattern: "/network/v2.0/ports", Status: 500, Count: 1})
		defer remove()
		h.newLink("occupied", "shoot--services--svc01", svcCIDR)
		if _, err := h.reconcile("occupied"); err == nil {
			t.Fatal("the injected failure did not stop the first reconcile")
		}
		l := h.get("occupied")
		if l.Status.TransitIP == "" || l.Status.LegPortID != "" {
			t.Fatalf("status after the failed create: %+v", l.Status)
		}
		taken := l.Status.TransitIP
		foreign := h.foreignPort(taken)
		l = h.untilReady("occupied")
		if l.Status.TransitIP == taken {
			t.Fatalf("the link kept the taken address %s", taken)
		}
		if p, ok := h.sim.Port(foreign.ID); !ok || len(p.Tags) != 0 {
			t.Fatalf("the foreign port was touched: %+v", p)
		}
		expectCond(t, l, v1alpha1.ConditionTransitIPAllocated, metav1.ConditionTrue, v1alpha1.ReasonTransitIPAllocated, "transit IP "+l.Status.TransitIP)
	})
}
