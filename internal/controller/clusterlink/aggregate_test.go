package clusterlink

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

const (
	addRoutes    = "PUT /network/v2.0/routers/{id}/add_extraroutes"
	removeRoutes = "PUT /network/v2.0/routers/{id}/remove_extraroutes"
)

func aggregate(l *v1alpha1.ClusterLink) { l.Spec.ReverseRouteMode = v1alpha1.ReverseRouteAggregate }

// reverseRoutesOn lists the routes of the named router into the service-CIDR pool.
func (h *harness) reverseRoutesOn(router string) []string {
	var out []string
	for _, x := range h.router(router).Routes {
		if strings.HasPrefix(x.Destination, "100.64.") {
			out = append(out, x.Destination+" via "+x.NextHop)
		}
	}
	return out
}

// An Aggregate link puts one route on the service cluster's router, the pool via the
// gateway cluster's router on the transit network, whatever the number of gateways; a
// gateway arriving costs the router nothing; the route goes when the last gateway with
// reverse exposures does.
func TestReverseRoutesAggregateOneRoute(t *testing.T) {
	h := newHarness(t)
	for i := 1; i <= 3; i++ {
		ipsecGateway(t, "tenant-agg", fmt.Sprintf("gw%d", i), true, fmt.Sprintf("100.64.%d.0/24", i), fmt.Sprintf("10.254.0.%d", 100+i))
	}
	ipsecGateway(t, "tenant-agg", "plain", false, "100.64.9.0/24", "10.254.0.109")
	h.newLink("agg", "shoot--services--svc01", svcCIDR, aggregate)
	l := h.untilReady("agg")
	if got := h.reverseRoutesOn("shoot--services--svc01"); fmt.Sprint(got) != "[100.64.0.0/16 via 10.254.0.1]" {
		t.Fatalf("service router's routes into the pool: %v, want the pool via the gateway cluster's router (10.254.0.1)", got)
	}
	want := []v1alpha1.ReverseRoute{{ServiceCIDR: "100.64.0.0/16", NextHop: "10.254.0.1", GatewayRef: v1alpha1.AggregateGatewayRef}}
	if fmt.Sprint(l.Status.ReverseRoutes) != fmt.Sprint(want) || l.Status.ReverseRouteMode != v1alpha1.ReverseRouteAggregate {
		t.Fatalf("status.reverseRoutes %v (mode %q), want %v (Aggregate)", l.Status.ReverseRoutes, l.Status.ReverseRouteMode, want)
	}
	expectCond(t, l, v1alpha1.ConditionReverseRoutesInstalled, metav1.ConditionTrue, v1alpha1.ReasonReverseRoutesInstalled,
		"the service-CIDR pool 100.64.0.0/16 via the gateway cluster's router (10.254.0.1) on router shoot--services--svc01 reaches the gateways with reverse exposures this link serves")

	// More gateways: a reconcile (the fan-out skips it, see TestFanOutSkipsGainsTheRouteReaches)
	// writes the router nothing.
	h.sim.ResetCounters()
	for i := 4; i <= 8; i++ {
		ipsecGateway(t, "tenant-agg", fmt.Sprintf("gw%d", i), true, fmt.Sprintf("100.64.%d.0/24", i), fmt.Sprintf("10.254.0.%d", 100+i))
	}
	h.until("agg", "reconciled with 8 gateways", func(l *v1alpha1.ClusterLink) bool { return len(l.Status.ReverseRoutes) == 1 })
	if c := h.sim.Counters(); c.ByRoute[addRoutes]+c.ByRoute[removeRoutes] != 0 {
		t.Fatalf("five more gateways wrote the router: %v", c.ByRoute)
	}
	// Nor is every gateway port listed to check the gateways' status: no status field
	// reaches an Aggregate link's route.
	if c := h.sim.Counters(); c.ByRoute["GET /network/v2.0/ports"] != 0 {
		t.Fatalf("an Aggregate link listed the gateway ports %d times: %v", c.ByRoute["GET /network/v2.0/ports"], c.ByRoute)
	}

	// No gateway with reverse exposures left: the route goes.
	for i := 1; i <= 8; i++ {
		setReverse(t, "tenant-agg", fmt.Sprintf("gw%d", i), false)
	}
	l = h.until("agg", "no reverse routes", func(l *v1alpha1.ClusterLink) bool { return len(l.Status.ReverseRoutes) == 0 })
	if got := h.reverseRoutesOn("shoot--services--svc01"); len(got) != 0 {
		t.Fatalf("routes into the pool left on the service router: %v", got)
	}
	expectCond(t, l, v1alpha1.ConditionReverseRoutesInstalled, metav1.ConditionTrue, v1alpha1.ReasonReverseRoutesInstalled, "no gateway this link serves has reverse exposures")
}

// Switching a link between the modes adds the new routes before it removes the old
// ones, so the service cluster never loses its way to the gateways; deletion removes
// the aggregate route.
func TestReverseRoutesModeSwitchAddsBeforeRemoving(t *testing.T) {
	h := newHarness(t)
	for i := 1; i <= 3; i++ {
		ipsecGateway(t, "tenant-sw", fmt.Sprintf("gw%d", i), true, fmt.Sprintf("100.64.%d.0/24", i), fmt.Sprintf("10.254.0.%d", 100+i))
	}
	h.newLink("sw", "shoot--services--svc01", svcCIDR)
	l := h.untilReady("sw")
	if len(l.Status.ReverseRoutes) != 3 || l.Status.ReverseRouteMode != v1alpha1.ReverseRoutePerGateway {
		t.Fatalf("per gateway: %v (mode %q)", l.Status.ReverseRoutes, l.Status.ReverseRouteMode)
	}
	svcID := h.router("shoot--services--svc01").ID
	order := func() []string {
		var out []string
		for _, r := range h.sim.RequestLog() {
			if (r.Route == addRoutes || r.Route == removeRoutes) && strings.Contains(r.Path, svcID) {
				out = append(out, strings.TrimSuffix(strings.TrimPrefix(r.Route, "PUT /network/v2.0/routers/{id}/"), "_extraroutes"))
			}
		}
		return out
	}

	h.sim.ResetCounters()
	h.update("sw", aggregate)
	l = h.until("sw", "Aggregate", func(l *v1alpha1.ClusterLink) bool {
		return l.Status.ReverseRouteMode == v1alpha1.ReverseRouteAggregate && len(l.Status.ReverseRoutes) == 1
	})
	if got := fmt.Sprint(order()); got != "[add remove]" {
		t.Fatalf("router writes of the switch to Aggregate: %s, want [add remove]", got)
	}
	if got := h.reverseRoutesOn("shoot--services--svc01"); fmt.Sprint(got) != "[100.64.0.0/16 via 10.254.0.1]" {
		t.Fatalf("after the switch: %v", got)
	}

	h.sim.ResetCounters()
	h.update("sw", func(l *v1alpha1.ClusterLink) { l.Spec.ReverseRouteMode = v1alpha1.ReverseRoutePerGateway })
	h.until("sw", "PerGateway", func(l *v1alpha1.ClusterLink) bool {
		return l.Status.ReverseRouteMode == v1alpha1.ReverseRoutePerGateway && len(l.Status.ReverseRoutes) == 3
	})
	if got := fmt.Sprint(order()); got != "[add remove]" {
		t.Fatalf("router writes of the switch back: %s, want [add remove]", got)
	}
	if got := h.reverseRoutesOn("shoot--services--svc01"); len(got) != 3 {
		t.Fatalf("after the switch back: %v", got)
	}

	h.update("sw", aggregate)
	h.until("sw", "Aggregate again", func(l *v1alpha1.ClusterLink) bool { return len(l.Status.ReverseRoutes) == 1 })
	h.delete("sw")
	h.until("sw", "gone", nil)
	if got := h.reverseRoutesOn("shoot--services--svc01"); len(got) != 0 {
		t.Fatalf("routes into the pool after deletion: %v", got)
	}
}

// A router at the cloud's max_routes: the per-gateway batch is refused as a whole, the
// condition names the cap, nothing of it stays on the router or in the status; the
// Aggregate mode fits.
func TestReverseRoutesRouteLimit(t *testing.T) {
	h := newHarness(t, func(s *openstacksim.Seed) { s.MaxRoutes = 3 })
	for i := 1; i <= 4; i++ {
		ipsecGateway(t, "tenant-cap", fmt.Sprintf("gw%d", i), true, fmt.Sprintf("100.64.%d.0/24", i), fmt.Sprintf("10.254.0.%d", 100+i))
	}
	h.newLink("cap", "shoot--services--svc01", svcCIDR)
	l := h.untilCond("cap", v1alpha1.ConditionReverseRoutesInstalled, v1alpha1.ReasonRouteLimitExceeded)
	c := expectCond(t, l, v1alpha1.ConditionReverseRoutesInstalled, metav1.ConditionFalse, v1alpha1.ReasonRouteLimitExceeded, "router shoot--services--svc01 cannot take 4 more route(s)")
	for _, want := range []string{"maximum 3", "max_routes", "reverseRouteMode: Aggregate", "nothing of the batch was added"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("condition message %q does not say %q", c.Message, want)
		}
	}
	if got := h.reverseRoutesOn("shoot--services--svc01"); len(got) != 0 {
		t.Fatalf("a refused batch left routes behind: %v", got)
	}
	if len(l.Status.ReverseRoutes) != 0 {
		t.Fatalf("status records refused routes: %v", l.Status.ReverseRoutes)
	}
	expectCond(t, l, v1alpha1.ConditionRouteInstalled, metav1.ConditionTrue, v1alpha1.ReasonRouteInstalled, svcCIDR)

	h.update("cap", aggregate)
	l = h.untilReady("cap")
	if got := h.reverseRoutesOn("shoot--services--svc01"); fmt.Sprint(got) != "[100.64.0.0/16 via 10.254.0.1]" {
		t.Fatalf("Aggregate under the cap: %v", got)
	}
}

// The operator's default applies to a same-tenant link that sets no mode; a
// cross-tenant link routes per gateway whatever the default, and may not ask for
// Aggregate (refused at admission).
func TestReverseRouteModeDefaultAndCrossTenant(t *testing.T) {
	h := newHarness(t)
	h.cfg.ClusterLinkReverseRouteMode = v1alpha1.ReverseRouteAggregate
	h.r = New(h.deps())
	ipsecGateway(t, "tenant-def", "gw", true, "100.64.1.0/24", "10.254.0.101")
	h.newLink("def", "shoot--services--svc01", svcCIDR)
	l := h.untilReady("def")
	if l.Status.ReverseRouteMode != v1alpha1.ReverseRouteAggregate || len(l.Status.ReverseRoutes) != 1 || l.Status.ReverseRoutes[0].GatewayRef != v1alpha1.AggregateGatewayRef {
		t.Fatalf("operator default Aggregate: mode %q, routes %v", l.Status.ReverseRouteMode, l.Status.ReverseRoutes)
	}

	bad := &v1alpha1.ClusterLink{ObjectMeta: metav1.ObjectMeta{Name: "cross-agg"},
		Spec: v1alpha1.ClusterLinkSpec{ServiceClusterRouter: "shoot--diehl--diehl01", ServiceClusterCIDR: freshCIDR(), ReverseRouteMode: v1alpha1.ReverseRouteAggregate}}
	crossTenant(projDiehl)(bad)
	err := env.Client.Create(h.ctx, bad)
	if err == nil || !strings.Contains(err.Error(), "reverseRouteMode Aggregate is for same-tenant links only") {
		t.Fatalf("cross-tenant link asking for Aggregate: %v, want refused at admission", err)
	}
	if got := h.r.reverseMode(bad); got != v1alpha1.ReverseRoutePerGateway {
		t.Fatalf("a cross-tenant link's mode with the operator default Aggregate: %s", got)
	}
}

// A gateway gaining its reverse route does not wake an Aggregate link whose pool route is
// in place (that route reaches it already); it wakes a per-gateway link, and every other
// change (a loss, a deletion, a namespace) wakes both. Once the Aggregate link's last
// gateway is gone and its route with it, a gain wakes it again.
func TestFanOutSkipsGainsTheRouteReaches(t *testing.T) {
	h := newHarness(t)
	gw := ipsecGateway(t, "tenant-fo", "gw1", true, "100.64.1.0/24", "10.254.0.101")
	h.newLink("fo-agg", "shoot--services--svc01", svcCIDR, aggregate)
	h.newLink("fo-per", "shoot--services--svc02", "10.252.0.0/16")
	h.untilReady("fo-agg")
	h.untilReady("fo-per")

	h.r.fanOutDelay = 0 // AddAfter(0) adds at once, so the queue shows what was woken
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	fo := h.r.fanOut()
	woken := func() string {
		var out []string
		for q.Len() > 0 {
			req, _ := q.Get()
			h.r.fanOutStarted(req.Name) // what Reconcile does first
			q.Done(req)
			if strings.HasPrefix(req.Name, "fo-") {
				out = append(out, req.Name)
			}
		}
		sort.Strings(out)
		return strings.Join(out, ",")
	}
	var current v1alpha1.IPsecGateway
	if err := env.Client.Get(h.ctx, client.ObjectKeyFromObject(gw), &current); err != nil {
		t.Fatal(err)
	}
	before := current.DeepCopy()
	before.Status.ServiceCIDR, before.Status.PortFixedIP = "", "" // no reverse route yet
	lost := current.DeepCopy()
	lost.Spec.ReverseExposures = nil
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-fo"}}

	for _, c := range []struct {
		what string
		fire func()
		want string
	}{
		{"a gateway created with its reverse route", func() { fo.Create(h.ctx, event.CreateEvent{Object: &current}, q) }, "fo-per"},
		{"a gateway gaining its reverse route", func() { fo.Update(h.ctx, event.UpdateEvent{ObjectOld: before, ObjectNew: &current}, q) }, "fo-per"},
		{"a gateway losing it", func() { fo.Update(h.ctx, event.UpdateEvent{ObjectOld: &current, ObjectNew: lost}, q) }, "fo-agg,fo-per"},
		{"a gateway deleted", func() { fo.Delete(h.ctx, event.DeleteEvent{Object: &current}, q) }, "fo-agg,fo-per"},
		{"a namespace created", func() { fo.Create(h.ctx, event.CreateEvent{Object: ns}, q) }, "fo-agg,fo-per"},
	} {
		c.fire()
		if got := woken(); got != c.want {
			t.Errorf("%s woke [%s], want [%s]", c.what, got, c.want)
		}
	}

	// The last gateway goes: the Aggregate link's route goes, and a gain wakes it again.
	setReverse(t, "tenant-fo", "gw1", false)
	h.until("fo-agg", "no reverse routes", func(l *v1alpha1.ClusterLink) bool { return len(l.Status.ReverseRoutes) == 0 })
	fo.Update(h.ctx, event.UpdateEvent{ObjectOld: before, ObjectNew: &current}, q)
	if got := woken(); got != "fo-agg,fo-per" {
		t.Errorf("a gain with the Aggregate link's route gone woke [%s], want [fo-agg,fo-per]", got)
	}

	// Changes before a queued link's reconcile starts add it once; once it has started,
	// the next change adds it again.
	cq := &countingQueue{TypedRateLimitingInterface: q, adds: map[string]int{}}
	for range 3 {
		fo.Delete(h.ctx, event.DeleteEvent{Object: &current}, cq)
	}
	if got := cq.adds["fo-per"]; got != 1 {
		t.Errorf("three changes before the reconcile queued fo-per %d times, want 1", got)
	}
	woken()
	fo.Delete(h.ctx, event.DeleteEvent{Object: &current}, cq)
	if got := cq.adds["fo-per"]; got != 2 {
		t.Errorf("a change after the reconcile started: fo-per queued %d times in all, want 2", got)
	}
}

// countingQueue counts the delayed adds per link.
type countingQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	adds map[string]int
}

func (q *countingQueue) AddAfter(req reconcile.Request, d time.Duration) {
	q.adds[req.Name]++
	q.TypedRateLimitingInterface.AddAfter(req, d)
}
