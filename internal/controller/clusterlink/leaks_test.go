package clusterlink

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

// Regressions found by the chaos soak (test/soak).

// A link's unwind runs again after a failed finalizer release (or an operator restart);
// by then Neutron may have handed its freed transit IP to a gateway's port, whose route
// to its service CIDR goes via that address. The link removes its own route via the
// address, never the gateway's.
func TestUnwindSparesAnotherOwnersRouteViaAReusedTransitIP(t *testing.T) {
	h := newHarness(t)
	h.newLink("reused", "shoot--services--svc01", svcCIDR)
	l := h.untilReady("reused")
	x := l.Status.TransitIP
	opID := h.opRouter().ID

	// The leg is gone (the first unwind, or by hand) and a gateway's port took its
	// address and routed its service CIDR via it.
	if err := h.sim.DeletePort(l.Status.LegPortID); err != nil {
		t.Fatal(err)
	}
	gw := openstack.Owner{Kind: "IPsecGateway", Namespace: "tenant-x", Name: "gw", UID: "6f0c1b7e-0000-4000-8000-000000000001"}
	if _, err := h.sim.AddPort(openstacksim.Port{NetworkID: h.transitNetID(), Name: "gateway", Tags: gw.Tags(),
		FixedIPs: []openstacksim.FixedIP{{SubnetID: h.transitSubnetID(), IPAddress: x}}}); err != nil {
		t.Fatal(err)
	}
	if err := h.sim.AddRoute(opID, "100.64.7.0/24", x); err != nil {
		t.Fatal(err)
	}

	h.delete("reused")
	h.until("reused", "gone", nil)
	op := h.opRouter()
	if hasRoute(op, svcCIDR, x) {
		t.Errorf("the link's own route %s via %s survived its deletion", svcCIDR, x)
	}
	if !hasRoute(op, "100.64.7.0/24", x) {
		t.Errorf("the link's deletion removed the gateway's route 100.64.7.0/24 via %s (routes now %v)", x, op.Routes)
	}
}

// Reverse routes are recorded in status before they are added to the router: when the
// status write of a reconcile is lost, no route is on the router that the link does not
// know it owns (it would outlive its gateway and block the leg's detach).
func TestReverseRoutesRecordedBeforeTheRouterWrite(t *testing.T) {
	h := newHarness(t)
	h.newLink("record", "shoot--services--svc01", svcCIDR)
	h.untilReady("record")
	ipsecGateway(t, "tenant-rec", "gw", true, gwCIDR(1), gwIP(1))

	// One reconcile whose status writes are all lost.
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	lost := interceptor.NewClient(wc, interceptor.Funcs{
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			return errors.New("status write lost")
		},
	})
	deps := h.deps()
	deps.Client = lost
	if _, err := New(deps).Reconcile(h.ctx, reconcileRequest("record")); err == nil {
		t.Fatal("a reconcile whose status writes fail reported success")
	}

	// The gateway goes before the link is reconciled again.
	deleteIPsecGateway(t, "tenant-rec", "gw")
	h.until("record", "no reverse routes", func(l *v1alpha1.ClusterLink) bool {
		return len(l.Status.ReverseRoutes) == 0 && conditionTrue(l, v1alpha1.ConditionReady)
	})
	if svc := h.router("shoot--services--svc01"); hasRoute(svc, gwCIDR(1), gwIP(1)) {
		t.Fatalf("route %s via %s outlived its gateway on the service router (routes %v)", gwCIDR(1), gwIP(1), svc.Routes)
	}
	// And the link can be deleted: nothing blocks the leg's detach.
	h.delete("record")
	h.until("record", "gone", nil)
}

func reconcileRequest(name string) ctrl.Request {
	return ctrl.Request{NamespacedName: types.NamespacedName{Name: name}}
}

func conditionTrue(l *v1alpha1.ClusterLink, t string) bool {
	return meta.IsStatusConditionTrue(l.Status.Conditions, t)
}

// A transit IP is the operator's bookkeeping, not a reservation in Neutron: when the
// leg's creation fails, a gateway port created meanwhile may get the address. A link
// whose leg was never built there allocates another address instead of waiting for a
// human.
func TestTransitIPTakenBeforeTheLegWasBuiltIsReallocated(t *testing.T) {
	h := newHarness(t)
	remove := h.sim.Inject(openstacksim.Fault{Method: "POST", PathPattern: "/network/v2.0/ports", Status: 500, Count: 1})
	h.newLink("taken", "shoot--services--svc01", svcCIDR)
	l := h.until("taken", "a transit IP without a leg", func(l *v1alpha1.ClusterLink) bool { return l.Status.TransitIP != "" })
	remove()
	x := l.Status.TransitIP
	if l.Status.LegPortID != "" {
		t.Fatalf("the leg was built although its creation failed: %s", l.Status.LegPortID)
	}
	gw := openstack.Owner{Kind: "IPsecGateway", Namespace: "tenant-x", Name: "gw", UID: "6f0c1b7e-0000-4000-8000-000000000002"}
	taker, err := h.sim.AddPort(openstacksim.Port{NetworkID: h.transitNetID(), Name: "gateway", Tags: gw.Tags(),
		FixedIPs: []openstacksim.FixedIP{{SubnetID: h.transitSubnetID(), IPAddress: x}}})
	if err != nil {
		t.Fatal(err)
	}

	l = h.untilReady("taken")
	if l.Status.TransitIP == x || l.Status.TransitIP == "" {
		t.Fatalf("transit IP %q after %s was taken", l.Status.TransitIP, x)
	}
	if p, ok := h.sim.Port(taker.ID); !ok || p.FixedIPs[0].IPAddress != x {
		t.Fatal("the other port was touched")
	}
	if !hasRoute(h.opRouter(), svcCIDR, l.Status.TransitIP) {
		t.Fatalf("no forward route via the new transit IP %s", l.Status.TransitIP)
	}
	if len(h.rec.find("taken", "TransitIPTaken")) != 1 {
		t.Fatal("no TransitIPTaken event")
	}
}

// A link created on a router whose previous link is still unwinding is refused by
// Neutron (one leg per router on the transit subnet) and waits; when the previous link
// is gone, it is reconciled at once instead of at the next resync (an hour here). This
// is also how a link is "recreated" after TransitIPMismatch.
func TestLinkWaitingForARouterIsWokenWhenThePreviousLinkIsGone(t *testing.T) {
	h := newHarness(t)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Logger: testLogger, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	deps := h.deps()
	deps.Client, deps.APIReader = nil, nil
	deps.Config.ResyncInterval = time.Hour
	deps.SkipNameValidation = true
	if err := New(deps).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	router := "shoot--services--svc03"
	h.newLink("first", router, svcCIDR)
	waitFor(t, "first Ready", func() (bool, string) {
		l := h.get("first")
		return conditionTrue(l, v1alpha1.ConditionReady), dumpConds(l)
	})

	rt := h.router(router)
	remove := h.sim.Inject(openstacksim.Fault{Method: "PUT", PathPattern: "/network/v2.0/routers/" + rt.ID + "/remove_router_interface", Status: 503})
	h.delete("first")
	h.newLink("second", router, svcCIDR)
	waitFor(t, "second refused by Neutron", func() (bool, string) {
		l := h.get("second")
		c := meta.FindStatusCondition(l.Status.Conditions, v1alpha1.ConditionLegAttached)
		return c != nil && c.Reason == v1alpha1.ReasonEnsureRouterHasPortFailed, dumpConds(l)
	})
	remove()
	waitFor(t, "first gone", func() (bool, string) { return h.gone("first"), "" })
	waitFor(t, "second Ready", func() (bool, string) {
		l := h.get("second")
		return conditionTrue(l, v1alpha1.ConditionReady), dumpConds(l)
	})
}

// A cross-tenant leg without a pin takes Neutron's address, so the only trace of its
// creation is its tags (and the project on record). When the status write after the
// create is lost, deleting the link still finds and removes the leg.
func TestCrossTenantLegWithLostStatusIsRemovedOnDeletion(t *testing.T) {
	h := newHarness(t)
	h.secret("lost", "diehl", nil)
	h.newLink("lost", "shoot--diehl--diehl01", "10.234.0.0/16", crossTenant(projDiehl))
	// Every status write that records the leg is lost; the writes before it are not.
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	flaky := interceptor.NewClient(wc, interceptor.Funcs{
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			if b, _ := json.Marshal(obj); strings.Contains(string(b), `"legPortID"`) {
				return errors.New("status write lost")
			}
			return c.SubResource(sub).Apply(ctx, obj, opts...)
		},
	})
	deps := h.deps()
	deps.Client = flaky
	if _, err := New(deps).Reconcile(h.ctx, reconcileRequest("lost")); err == nil {
		t.Fatal("the reconcile whose leg record was lost reported success")
	}
	l := h.get("lost")
	if len(h.linkPorts(l)) != 1 || l.Status.LegPortID != "" || l.Status.TransitIP != "" {
		t.Fatalf("want one leg in Neutron and none on record: ports %d, status %+v", len(h.linkPorts(l)), l.Status)
	}

	h.delete("lost")
	h.until("lost", "gone", nil)
	if ports := h.linkPorts(l); len(ports) != 0 {
		t.Fatalf("the deleted link's leg %s was left behind", ports[0].ID)
	}
}
