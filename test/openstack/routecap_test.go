package realopenstack

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/realstack"
)

// neutronMaxRoutes is Neutron's default max_routes, which both real releases here run
// with (TestConformanceMaxRoutes shows the 31st route refused).
const neutronMaxRoutes = 30

// A service cluster's router with more reverse-exposure gateways to carry than the real
// Neutron's max_routes leaves room for: the router already holds 29 routes of its own
// (not the operator's), and two gateways would need 31. Per gateway, Neutron refuses the
// link's batch whole; the link says so (RouteLimitExceeded, naming the maximum) and
// neither the router nor the link's status keeps anything of the batch; the router's
// own routes are untouched. Switched to Aggregate, the link's one route fits (30) and
// the link is Ready; deleted, it leaves the router as it found it.
func TestReverseRoutesAtTheCap(t *testing.T) { forReleases(t, reverseRoutesAtTheCap) }

func reverseRoutesAtTheCap(t *testing.T, rel realstack.Release) {
	r := newRig(t, rel)
	r.psk("hq-psk", "correct horse battery staple")
	r.createGateway("cap-a", true)
	r.createGateway("cap-b", true)
	r.gatewayReady("cap-a")
	r.gatewayReady("cap-b")

	// The router's own routes, via an address of its node subnet (10.251.0.0/16, the
	// estate's), up to one below the cap.
	const svc = "shoot--services--svc01"
	rt := r.router(r.os, svc)
	var own []openstack.Route
	for i := 0; len(rt.Routes)+len(own) < neutronMaxRoutes-1; i++ {
		own = append(own, openstack.Route{Destination: fmt.Sprintf("172.31.%d.0/24", 100+i), NextHop: "10.251.0.250"})
	}
	if _, err := r.os.Networking.AddRouterRoutes(r.ctx, rt.ID, own); err != nil {
		t.Fatalf("filling %s to %d routes: %v", svc, neutronMaxRoutes-1, err)
	}
	t.Cleanup(func() {
		if _, err := r.os.Networking.RemoveRouterRoutes(context.Background(), rt.ID, own); err != nil {
			t.Errorf("removing the router's own routes: %v", err)
		}
	})
	before := r.router(r.os, svc).Routes
	if len(before) != neutronMaxRoutes-1 {
		t.Fatalf("%s holds %d routes, want %d", svc, len(before), neutronMaxRoutes-1)
	}
	keepsOwn := func(now []openstack.Route) bool {
		for _, x := range before {
			if !slices.Contains(now, x) {
				return false
			}
		}
		return true
	}

	link := &v1alpha1.ClusterLink{ObjectMeta: metav1.ObjectMeta{Name: r.linkName("cap")},
		Spec: v1alpha1.ClusterLinkSpec{ServiceClusterRouter: svc, ServiceClusterCIDR: "10.251.0.0/16",
			ReverseRouteMode: v1alpha1.ReverseRoutePerGateway}}
	if err := env.Client.Create(r.ctx, link); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.deleteAndWait(link) })

	var l v1alpha1.ClusterLink
	eventually(t, "the per-gateway batch refused at the cap", func() (bool, string) {
		if err := env.Client.Get(r.ctx, client.ObjectKey{Name: link.Name}, &l); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(l.Status.Conditions, v1alpha1.ConditionReverseRoutesInstalled)
		return c != nil && c.Reason == v1alpha1.ReasonRouteLimitExceeded, condString(l.Status.Conditions)
	})
	c := meta.FindStatusCondition(l.Status.Conditions, v1alpha1.ConditionReverseRoutesInstalled)
	t.Logf("at the cap: %s=%s/%s: %s", c.Type, c.Status, c.Reason, c.Message)
	if c.Status != metav1.ConditionFalse || meta.IsStatusConditionTrue(l.Status.Conditions, v1alpha1.ConditionReady) {
		t.Errorf("at the cap the link reports %s", condString(l.Status.Conditions))
	}
	for _, want := range []string{fmt.Sprintf("cannot take 2 more route(s) beside its %d", neutronMaxRoutes-1),
		fmt.Sprintf("maximum %d", neutronMaxRoutes), "max_routes", "reverseRouteMode: Aggregate", "nothing of the batch was added"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("condition message %q does not say %q", c.Message, want)
		}
	}
	if now := r.router(r.os, svc).Routes; len(now) != len(before) || !keepsOwn(now) {
		t.Errorf("after the refusal %s holds %s, want its own %d routes alone", svc, fmtRoutes(r.router(r.os, svc)), len(before))
	}
	if len(l.Status.ReverseRoutes) != 0 {
		t.Errorf("the status records routes of the refused batch: %v", l.Status.ReverseRoutes)
	}

	// Aggregate: one route for the pool, which fits.
	if err := env.Client.Get(r.ctx, types.NamespacedName{Name: link.Name}, &l); err != nil {
		t.Fatal(err)
	}
	l.Spec.ReverseRouteMode = v1alpha1.ReverseRouteAggregate
	if err := env.Client.Update(r.ctx, &l); err != nil {
		t.Fatal(err)
	}
	pool := r.cfg.ServiceCIDRPool.String()
	eventually(t, "the Aggregate link Ready with its one route at the cap", func() (bool, string) {
		var got v1alpha1.ClusterLink
		if err := env.Client.Get(r.ctx, client.ObjectKey{Name: link.Name}, &got); err != nil {
			return false, err.Error()
		}
		now := r.router(r.os, svc).Routes
		agg := slices.ContainsFunc(now, func(x openstack.Route) bool { return x.Destination == pool })
		ok := meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady) && len(now) == neutronMaxRoutes &&
			agg && keepsOwn(now) && len(got.Status.ReverseRoutes) == 1 && got.Status.ReverseRoutes[0].GatewayRef == v1alpha1.AggregateGatewayRef
		return ok, fmt.Sprintf("%d routes on the router, status %v, %s", len(now), got.Status.ReverseRoutes, condString(got.Status.Conditions))
	})

	r.deleteAndWait(link)
	if now := r.router(r.os, svc).Routes; len(now) != len(before) || !keepsOwn(now) {
		t.Errorf("after the link's deletion %s holds %s, want its own %d routes alone", svc, fmtRoutes(r.router(r.os, svc)), len(before))
	}
}
