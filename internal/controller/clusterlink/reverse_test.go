package clusterlink

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

// Every reverse-exposure-bearing gateway of either kind, in any namespace, gets a route
// on the link's router to its service CIDR via its port address; others do not.
func TestReverseRoutesBothKindsAllNamespaces(t *testing.T) {
	h := newHarness(t)
	ipsecGateway(t, "tenant-a", "ipsec", true, "100.64.1.0/24", "10.254.0.101")
	vpnGateway(t, "tenant-b", "vpn", true, "100.64.2.0/24", "10.254.0.102")
	ipsecGateway(t, "tenant-c", "plain", false, "100.64.3.0/24", "10.254.0.103")
	h.newLink("rev", "shoot--services--svc01", svcCIDR)
	l := h.untilReady("rev")
	svc := h.router("shoot--services--svc01")
	if !hasRoute(svc, "100.64.1.0/24", "10.254.0.101") || !hasRoute(svc, "100.64.2.0/24", "10.254.0.102") || hasRoute(svc, "100.64.3.0/24", "10.254.0.103") {
		t.Fatalf("service router routes %v", svc.Routes)
	}
	want := []v1alpha1.ReverseRoute{
		{ServiceCIDR: "100.64.1.0/24", NextHop: "10.254.0.101", GatewayRef: "IPsecGateway/tenant-a/ipsec"},
		{ServiceCIDR: "100.64.2.0/24", NextHop: "10.254.0.102", GatewayRef: "VPNGateway/tenant-b/vpn"},
	}
	if fmt.Sprint(l.Status.ReverseRoutes) != fmt.Sprint(want) {
		t.Fatalf("status.reverseRoutes %v, want %v", l.Status.ReverseRoutes, want)
	}
	expectCond(t, l, v1alpha1.ConditionReverseRoutesInstalled, metav1.ConditionTrue, v1alpha1.ReasonReverseRoutesInstalled, "2 reverse route(s)")
	if hasRoute(h.opRouter(), "100.64.1.0/24", "10.254.0.101") {
		t.Fatal("a reverse route landed on the gateway cluster's router")
	}
}

// Stale entries are pruned: a gateway losing its reverse exposures or deleted, and a
// route the gateway's own cleanup already removed (pruned with no write).
func TestReverseRoutesPruneStale(t *testing.T) {
	h := newHarness(t)
	ipsecGateway(t, "tenant-p", "loses", true, "100.64.1.0/24", "10.254.0.101")
	ipsecGateway(t, "tenant-p", "deleted", true, "100.64.2.0/24", "10.254.0.102")
	ipsecGateway(t, "tenant-p", "swept", true, "100.64.3.0/24", "10.254.0.103")
	h.newLink("prune", "shoot--services--svc01", svcCIDR)
	h.until("prune", "3 reverse routes", func(l *v1alpha1.ClusterLink) bool { return len(l.Status.ReverseRoutes) == 3 })
	svcID := h.router("shoot--services--svc01").ID

	setReverse(t, "tenant-p", "loses", false)
	deleteIPsecGateway(t, "tenant-p", "deleted")
	l := h.until("prune", "1 reverse route", func(l *v1alpha1.ClusterLink) bool { return len(l.Status.ReverseRoutes) == 1 })
	svc := h.router("shoot--services--svc01")
	if hasRoute(svc, "100.64.1.0/24", "10.254.0.101") || hasRoute(svc, "100.64.2.0/24", "10.254.0.102") || !hasRoute(svc, "100.64.3.0/24", "10.254.0.103") {
		t.Fatalf("routes after pruning: %v", svc.Routes)
	}

	// The gateway's own cleanup sweeps its route, then the gateway goes.
	if err := h.sim.RemoveRoute(svcID, "100.64.3.0/24", "10.254.0.103"); err != nil {
		t.Fatal(err)
	}
	deleteIPsecGateway(t, "tenant-p", "swept")
	h.sim.ResetCounters()
	l = h.until("prune", "no reverse routes", func(l *v1alpha1.ClusterLink) bool { return len(l.Status.ReverseRoutes) == 0 })
	if w := h.writes(); w != 0 {
		t.Fatalf("pruning a route someone else removed took %d writes", w)
	}
	expectCond(t, l, v1alpha1.ConditionReverseRoutesInstalled, metav1.ConditionTrue, v1alpha1.ReasonReverseRoutesInstalled, "no gateway this link serves has reverse exposures")
}

// A reverse route removed out of band comes back.
func TestReverseRoutesSelfHeal(t *testing.T) {
	h := newHarness(t)
	ipsecGateway(t, "tenant-h", "gw", true, "100.64.1.0/24", "10.254.0.101")
	h.newLink("rheal", "shoot--services--svc01", svcCIDR)
	h.untilReady("rheal")
	svcID := h.router("shoot--services--svc01").ID
	if err := h.sim.RemoveRoute(svcID, "100.64.1.0/24", "10.254.0.101"); err != nil {
		t.Fatal(err)
	}
	h.untilReady("rheal")
	if !hasRoute(h.router("shoot--services--svc01"), "100.64.1.0/24", "10.254.0.101") {
		t.Fatal("reverse route not restored")
	}
}

// ReverseRoutesInstalled and RouteInstalled are independent of each other.
func TestReverseRoutesIndependentOfForwardRoute(t *testing.T) {
	h := newHarness(t)
	ipsecGateway(t, "tenant-i", "gw", true, "100.64.1.0/24", "10.254.0.101")
	opID := h.opRouter().ID
	svcID := h.router("shoot--services--svc01").ID

	t.Run("forward broken", func(t *testing.T) {
		remove := h.sim.Inject(openstacksim.Fault{Method: "PUT", PathPattern: "/network/v2.0/routers/" + opID + "/add_extraroutes", Status: 400})
		defer remove()
		h.newLink("indep", "shoot--services--svc01", svcCIDR)
		l := h.untilCond("indep", v1alpha1.ConditionRouteInstalled, v1alpha1.ReasonEnsureRouteFailed)
		expectCond(t, l, v1alpha1.ConditionReverseRoutesInstalled, metav1.ConditionTrue, v1alpha1.ReasonReverseRoutesInstalled, "1 reverse route(s)")
		expectCond(t, l, v1alpha1.ConditionLegAttached, metav1.ConditionTrue, v1alpha1.ReasonAttached, "")
	})
	t.Run("reverse broken", func(t *testing.T) {
		h.untilReady("indep")
		if err := h.sim.RemoveRoute(svcID, "100.64.1.0/24", "10.254.0.101"); err != nil {
			t.Fatal(err)
		}
		remove := h.sim.Inject(openstacksim.Fault{Method: "PUT", PathPattern: "/network/v2.0/routers/" + svcID + "/add_extraroutes", Status: 400})
		defer remove()
		l := h.untilCond("indep", v1alpha1.ConditionReverseRoutesInstalled, v1alpha1.ReasonEnsureReverseRoutesFailed)
		expectCond(t, l, v1alpha1.ConditionReverseRoutesInstalled, metav1.ConditionFalse, v1alpha1.ReasonEnsureReverseRoutesFailed, "adding reverse route(s) 100.64.1.0/24 via 10.254.0.101")
		expectCond(t, l, v1alpha1.ConditionRouteInstalled, metav1.ConditionTrue, v1alpha1.ReasonRouteInstalled, svcCIDR)
		if len(l.Status.ReverseRoutes) != 0 {
			t.Fatalf("status claims reverse routes that are not installed: %v", l.Status.ReverseRoutes)
		}
	})
}

// 50 gateways appear, change and disappear; each convergence costs at most one atomic
// add and one atomic remove on the service router, and a converged one nothing.
func TestReverseRoutesFiftyGatewaysBoundedWrites(t *testing.T) {
	h := newHarness(t)
	h.newLink("fifty", "shoot--services--svc01", svcCIDR)
	h.untilReady("fifty")
	const n = 50
	type phase struct {
		name          string
		writes, calls int
	}
	var phases []phase
	routeWrites := func() (int, int) {
		c := h.sim.Counters()
		return c.Writes, c.ByRoute["PUT /network/v2.0/routers/{id}/add_extraroutes"] + c.ByRoute["PUT /network/v2.0/routers/{id}/remove_extraroutes"]
	}
	measureUntil := func(name string, done func(*v1alpha1.ClusterLink) bool, maxWrites int) {
		t.Helper()
		h.sim.ResetCounters()
		h.until("fifty", name, done)
		w, rw := routeWrites()
		phases = append(phases, phase{name, w, rw})
		if w > maxWrites || rw != w {
			t.Fatalf("%s: %d writes (%d route writes), want at most %d route writes", name, w, rw, maxWrites)
		}
	}
	measure := func(name string, want int, maxWrites int) {
		t.Helper()
		measureUntil(name, func(l *v1alpha1.ClusterLink) bool { return len(l.Status.ReverseRoutes) == want }, maxWrites)
	}

	for i := range n {
		ipsecGateway(t, "tenant-50", fmt.Sprintf("gw%02d", i), true, gwCIDR(i), gwIP(i))
	}
	measure("50 gateways appear", n, 1)
	if got := len(h.router("shoot--services--svc01").Routes); got != n {
		t.Fatalf("%d routes on the service router, want %d", got, n)
	}
	newIP := func(i int) string { return fmt.Sprintf("10.254.0.%d", 200+i) }
	for i := range 10 {
		setPortIP(t, "tenant-50", fmt.Sprintf("gw%02d", i), newIP(i))
	}
	// Converged means every changed gateway is recorded with its new next hop.
	measureUntil("10 gateways change their port", func(l *v1alpha1.ClusterLink) bool {
		moved := 0
		for _, rr := range l.Status.ReverseRoutes {
			var i int
			if _, err := fmt.Sscanf(rr.GatewayRef, "IPsecGateway/tenant-50/gw%02d", &i); err == nil && i < 10 && rr.NextHop == newIP(i) {
				moved++
			}
		}
		return len(l.Status.ReverseRoutes) == n && moved == 10
	}, 2)
	svc := h.router("shoot--services--svc01")
	if len(svc.Routes) != n {
		t.Fatalf("%d routes on the service router after the port change, want %d", len(svc.Routes), n)
	}
	for i := range n {
		want, old := gwIP(i), ""
		if i < 10 {
			want, old = newIP(i), gwIP(i)
		}
		if !hasRoute(svc, gwCIDR(i), want) || (old != "" && hasRoute(svc, gwCIDR(i), old)) {
			t.Fatalf("gateway %d: routes %v; want %s via %s only", i, svc.Routes, gwCIDR(i), want)
		}
	}
	measure("converged", n, 0)
	for i := range n {
		deleteIPsecGateway(t, "tenant-50", fmt.Sprintf("gw%02d", i))
	}
	measure("50 gateways disappear", 0, 1)
	if got := h.router("shoot--services--svc01").Routes; len(got) != 0 {
		t.Fatalf("routes left: %v", got)
	}
	var report string
	for _, p := range phases {
		report += fmt.Sprintf("%-32s %d OpenStack writes (%d route writes)\n", p.name, p.writes, p.calls)
	}
	t.Logf("reverse-route convergence:\n%s", report)
	if f := os.Getenv("CLUSTERLINK_BENCH_OUT"); f != "" {
		_ = os.WriteFile(f, []byte(report), 0o644)
	}
}

// The gateway predicate lets only reverse-route-relevant changes fan out.
func TestGatewayPredicate(t *testing.T) {
	p := GatewayPredicate()
	mk := func(reverse bool, cidr, ip string) *v1alpha1.IPsecGateway {
		g := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: "n"}, Spec: gatewaySpec(reverse)}
		g.Status.ServiceCIDR, g.Status.PortFixedIP = cidr, ip
		return g
	}
	with := mk(true, "100.64.1.0/24", "10.254.0.101")
	without := mk(false, "100.64.1.0/24", "10.254.0.101")
	tunnelsOnly := with.DeepCopy()
	tunnelsOnly.Status.TunnelsReady = "1/1"
	moved := with.DeepCopy()
	moved.Status.PortFixedIP = "10.254.0.150"
	deleting := with.DeepCopy()
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	vpn := &v1alpha1.VPNGateway{Spec: v1alpha1.VPNGatewaySpec{GatewaySpec: gatewaySpec(true)}}
	vpn.Status.ServiceCIDR, vpn.Status.PortFixedIP = "100.64.2.0/24", "10.254.0.102"
	cases := []struct {
		name string
		got  bool
		want bool
	}{
		{"create with reverse", p.Create(event.CreateEvent{Object: with}), true},
		{"create without reverse", p.Create(event.CreateEvent{Object: without}), false},
		{"create VPNGateway with reverse", p.Create(event.CreateEvent{Object: vpn}), true},
		{"gains last reverse", p.Update(event.UpdateEvent{ObjectOld: without, ObjectNew: with}), true},
		{"loses last reverse", p.Update(event.UpdateEvent{ObjectOld: with, ObjectNew: without}), true},
		{"tunnel state only", p.Update(event.UpdateEvent{ObjectOld: with, ObjectNew: tunnelsOnly}), false},
		{"port address moved", p.Update(event.UpdateEvent{ObjectOld: with, ObjectNew: moved}), true},
		{"deletion starts", p.Update(event.UpdateEvent{ObjectOld: with, ObjectNew: deleting}), true},
		{"deleted", p.Delete(event.DeleteEvent{Object: deleting}), true},
		{"deleted without reverse", p.Delete(event.DeleteEvent{Object: without}), false},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s: predicate %v, want %v", c.name, c.got, c.want)
		}
	}
}

// With a manager running, a gateway gaining, changing and losing its reverse exposures,
// and being deleted, re-triggers the ClusterLink through the watch alone.
func TestReverseRoutesFanOutWatch(t *testing.T) {
	h := newHarness(t)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  env.Scheme,
		Logger:  testLogger,
		Metrics: metricsserver.Options{BindAddress: "0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	deps := h.deps()
	deps.Client, deps.APIReader = nil, nil
	// A long resync: only the watch can explain a prompt reconvergence.
	deps.Config.ResyncInterval = time.Hour
	r := New(deps)
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	h.newLink("fan-a", "shoot--services--svc01", svcCIDR)
	h.newLink("fan-b", "shoot--services--svc02", "10.252.0.0/16")
	count := func(name string, want int) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%s to carry %d reverse routes", name, want), func() (bool, string) {
			l := h.get(name)
			return len(l.Status.ReverseRoutes) == want && condStatus(l, v1alpha1.ConditionReverseRoutesInstalled) == metav1.ConditionTrue,
				fmt.Sprintf("%v\n%s", l.Status.ReverseRoutes, dumpConds(l))
		})
	}
	count("fan-a", 0)
	count("fan-b", 0)

	ipsecGateway(t, "tenant-fan", "gw", false, "100.64.7.0/24", "10.254.0.107")
	vpnGateway(t, "tenant-fan2", "vgw", true, "100.64.8.0/24", "10.254.0.108")
	count("fan-a", 1)
	count("fan-b", 1)

	setReverse(t, "tenant-fan", "gw", true) // gains its first reverse exposure
	count("fan-a", 2)
	count("fan-b", 2)
	setPortIP(t, "tenant-fan", "gw", "10.254.0.117") // moves
	waitFor(t, "the moved route", func() (bool, string) {
		svc := h.router("shoot--services--svc02")
		return hasRoute(svc, "100.64.7.0/24", "10.254.0.117") && !hasRoute(svc, "100.64.7.0/24", "10.254.0.107"), fmt.Sprint(svc.Routes)
	})
	setReverse(t, "tenant-fan", "gw", false) // loses its last one
	count("fan-a", 1)
	count("fan-b", 1)
	if err := env.Client.Delete(h.ctx, &v1alpha1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-fan2", Name: "vgw"}}); err != nil {
		t.Fatal(err)
	}
	count("fan-a", 0)
	count("fan-b", 0)
	for _, r := range []string{"shoot--services--svc01", "shoot--services--svc02"} {
		if n := len(h.router(r).Routes); n != 0 {
			t.Fatalf("%s keeps %d routes", r, n)
		}
	}
	// The manager deletes too: finalizers are released through the watch.
	h.delete("fan-a")
	waitFor(t, "fan-a to be gone", func() (bool, string) { return h.gone("fan-a"), "still there" })
}

func condStatus(l *v1alpha1.ClusterLink, t string) metav1.ConditionStatus {
	for _, c := range l.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}
