package product

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/testinfra/world"
)

// exampleLink is the ClusterLink of examples/clusterlink.yaml.
const exampleLink = "svc01-link"

// svcRouterReverse lists the routes into the service-CIDR pool on the service cluster's
// router, as the cloud holds them.
func (e *env) svcRouterReverse() []string {
	e.t.Helper()
	r, err := e.w.CloudReader(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	snap, err := r.Read(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, rt := range snap.Routers {
		if rt.Name != "shoot--services--svc01" {
			continue
		}
		for _, x := range rt.Routes {
			if strings.HasPrefix(x.DestinationCIDR, "100.64.") {
				out = append(out, x.DestinationCIDR+" via "+x.NextHop)
			}
		}
	}
	return out
}

// switchReverseMode sets the example link's spec.reverseRouteMode with the reverse
// exposure and the portal under traffic, waits until the link reports the mode Ready
// with want reverse routes, and returns how many requests failed during the switch.
func (e *env) switchReverseMode(mode string, want int) (ok, failed int64) {
	e.t.Helper()
	stop := e.traffic()
	time.Sleep(time.Second) // traffic before the switch
	var l v1alpha1.ClusterLink
	for range 10 {
		if err := e.w.Kube.Get(e.ctx, client.ObjectKey{Name: exampleLink}, &l); err != nil {
			e.t.Fatal(err)
		}
		l.Spec.ReverseRouteMode = mode
		if err := e.w.Kube.Update(e.ctx, &l); err == nil {
			break
		}
	}
	start := time.Now()
	e.waitFor("the link Ready in reverseRouteMode "+mode, time.Minute, func() bool {
		if err := e.w.Kube.Get(e.ctx, client.ObjectKey{Name: exampleLink}, &l); err != nil {
			return false
		}
		return l.Status.ReverseRouteMode == mode && len(l.Status.ReverseRoutes) == want &&
			meta.IsStatusConditionTrue(l.Status.Conditions, v1alpha1.ConditionReady)
	})
	e.figure("reverseRouteMode "+mode+" applied -> link Ready", time.Since(start))
	time.Sleep(2 * time.Second) // traffic after the switch
	return stop()
}

// aggregateLink switches the example link to reverseRouteMode Aggregate: the service
// cluster's router carries one route, the pool via the gateway cluster's router, and the
// service cluster reaches the reverse exposure through that router (in from the transit
// network and out to the gateway's port on it), with the portal and the reverse exposure
// under traffic during the switch. The link stays in Aggregate mode for the security
// group test that follows, which then shows that the gateway's security group, not the
// route set, decides what the service cluster reaches.
func (e *env) aggregateLink(t *testing.T) {
	e.t = t
	gw := e.gateway()
	ok, failed := e.switchReverseMode(v1alpha1.ReverseRouteAggregate, 1)
	t.Logf("FIGURE switch to Aggregate under traffic: %d requests answered, %d failed", ok, failed)
	got := e.svcRouterReverse()
	var l v1alpha1.ClusterLink
	if err := e.w.Kube.Get(e.ctx, client.ObjectKey{Name: exampleLink}, &l); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("[100.64.0.0/16 via %s]", l.Status.ReverseRoutes[0].NextHop)
	if fmt.Sprint(got) != want || l.Status.ReverseRoutes[0].GatewayRef != v1alpha1.AggregateGatewayRef {
		t.Fatalf("service router's routes into the pool %v, status %v; want %s", got, l.Status.ReverseRoutes, want)
	}
	if strings.Contains(fmt.Sprint(got), gw.Status.ServiceCIDR) {
		t.Fatalf("the per-gateway route %s is still on the service router: %v", gw.Status.ServiceCIDR, got)
	}
	if !e.answers(world.ServiceHostNamespace, e.reverseURL(), world.SiteHostBody) {
		t.Fatal("the reverse exposure does not answer the service cluster through the aggregate route")
	}
	if failed != 0 {
		t.Errorf("%d of %d requests failed while the link switched to Aggregate (the new route is added before the old one goes)", failed, ok+failed)
	}
}

// perGatewayLink switches the example link back to the specification's route per
// gateway, under traffic, for the tests after it.
func (e *env) perGatewayLink(t *testing.T) {
	e.t = t
	gw := e.gateway()
	ok, failed := e.switchReverseMode(v1alpha1.ReverseRoutePerGateway, 1)
	t.Logf("FIGURE switch back to PerGateway under traffic: %d requests answered, %d failed", ok, failed)
	got := e.svcRouterReverse()
	if want := fmt.Sprintf("[%s via %s]", gw.Status.ServiceCIDR, gw.Status.PortFixedIP); fmt.Sprint(got) != want {
		t.Fatalf("service router's routes into the pool %v, want %s", got, want)
	}
	if !e.answers(world.ServiceHostNamespace, e.reverseURL(), world.SiteHostBody) {
		t.Fatal("the reverse exposure does not answer the service cluster after the switch back")
	}
	if failed != 0 {
		t.Errorf("%d of %d requests failed while the link switched back to PerGateway", failed, ok+failed)
	}
}
