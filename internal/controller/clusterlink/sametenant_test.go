package clusterlink

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

const svcCIDR = "10.251.0.0/16"

// The reconcile steps 1-4: .3 allocated, leg port tagged and attached, route on the
// gateway cluster's router, Ready; Events on each change.
func TestSameTenantLinksFromDot3(t *testing.T) {
	h := newHarness(t)
	h.newLink("svc01-link", "shoot--services--svc01", svcCIDR)
	l := h.untilReady("svc01-link")

	if l.Status.TransitIP != "10.254.0.3" {
		t.Fatalf("transit IP %s, want 10.254.0.3 (.1 router leg and .2 DHCP skipped)", l.Status.TransitIP)
	}
	expectCond(t, l, v1alpha1.ConditionValidated, metav1.ConditionTrue, v1alpha1.ReasonValid, "")
	expectCond(t, l, v1alpha1.ConditionTransitIPAllocated, metav1.ConditionTrue, v1alpha1.ReasonTransitIPAllocated, "transit IP 10.254.0.3")
	expectCond(t, l, v1alpha1.ConditionLegAttached, metav1.ConditionTrue, v1alpha1.ReasonAttached, "leg port "+l.Status.LegPortID)
	expectCond(t, l, v1alpha1.ConditionRouteInstalled, metav1.ConditionTrue, v1alpha1.ReasonRouteInstalled, svcCIDR+" via 10.254.0.3")
	expectCond(t, l, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReconciled, "")
	for _, c := range []string{v1alpha1.ConditionTenantIsolationAttested, v1alpha1.ConditionCredentialsResolved, v1alpha1.ConditionTransitNetworkShared} {
		expectNoCond(t, l, c)
	}
	svc := h.router("shoot--services--svc01")
	if l.Status.RouterID != svc.ID {
		t.Fatalf("status.routerID %s, want %s", l.Status.RouterID, svc.ID)
	}
	p, ok := h.sim.Port(l.Status.LegPortID)
	if !ok || p.DeviceID != svc.ID || p.NetworkID != h.transitNetID() || p.FixedIPs[0].IPAddress != "10.254.0.3" {
		t.Fatalf("leg port %+v not attached to %s at .3 on the transit network", p, svc.ID)
	}
	if !(openstack.Owner{Kind: OwnerKind, Name: l.Name, UID: string(l.UID)}).OwnedBy(p.Tags) {
		t.Fatalf("leg port tags %v do not name the ClusterLink", p.Tags)
	}
	if !hasRoute(h.opRouter(), svcCIDR, "10.254.0.3") {
		t.Fatalf("gateway router routes %v lack %s via .3", h.opRouter().Routes, svcCIDR)
	}
	for _, reason := range []string{"TransitIPAllocated", "LegPortCreated", "LegAttached", "RouteInstalled"} {
		if len(h.rec.find("svc01-link", reason)) == 0 {
			t.Errorf("no %s Event", reason)
		}
	}
}

// A converged link costs zero writes, to OpenStack and to the API server.
func TestSameTenantConvergedIsFree(t *testing.T) {
	h := newHarness(t)
	h.newLink("free-link", "shoot--services--svc01", svcCIDR)
	l := h.untilReady("free-link")
	h.sim.ResetCounters()
	for range 3 {
		if _, err := h.reconcile("free-link"); err != nil {
			t.Fatal(err)
		}
	}
	c := h.sim.Counters()
	if c.Writes != 0 || c.Tokens != 0 {
		t.Fatalf("converged reconciles wrote to OpenStack: %+v", c)
	}
	// Per reconcile exactly: the transit network and its RBAC rules (is it shared with
	// every project?), the leg port by ID, the service cluster's router and the gateway
	// cluster's router by name. The transit network is resolved once per process.
	want := map[string]int{"GET /network/v2.0/networks/{id}": 3, "GET /network/v2.0/rbac-policies": 3,
		"GET /network/v2.0/ports/{id}": 3, "GET /network/v2.0/routers": 3, "GET /network/v2.0/routers/{id}": 3}
	if c.Reads != 15 || !maps.Equal(c.ByRoute, want) {
		t.Fatalf("3 converged reconciles made %d OpenStack reads %v, want %v", c.Reads, c.ByRoute, want)
	}
	if after := h.get("free-link"); after.ResourceVersion != l.ResourceVersion {
		t.Fatalf("converged reconciles wrote the ClusterLink (resourceVersion %s -> %s)", l.ResourceVersion, after.ResourceVersion)
	}
}

// Addresses occupied on the network and addresses claimed by another ClusterLink are
// skipped.
func TestSameTenantSkipsOccupiedAndClaimed(t *testing.T) {
	h := newHarness(t)
	if _, err := h.sim.AddPort(openstacksim.Port{NetworkID: h.transitNetID(), Name: "someone", FixedIPs: []openstacksim.FixedIP{{IPAddress: "10.254.0.3"}}}); err != nil {
		t.Fatal(err)
	}
	// A link pinned to .4 that cannot progress (its router does not exist) still
	// claims .4 through its spec.
	h.newLink("claimer", "no-such-router", "10.252.0.0/16", pin("10.254.0.4"))
	h.untilCond("claimer", v1alpha1.ConditionLegAttached, v1alpha1.ReasonRouterResolveFailed)
	h.newLink("skipper", "shoot--services--svc01", svcCIDR)
	l := h.untilReady("skipper")
	if l.Status.TransitIP != "10.254.0.5" {
		t.Fatalf("transit IP %s, want 10.254.0.5 (.3 occupied, .4 claimed)", l.Status.TransitIP)
	}
}

// spec.transitIP pins the address.
func TestSameTenantPinnedTransitIP(t *testing.T) {
	h := newHarness(t)
	h.newLink("pinned", "shoot--services--svc01", svcCIDR, pin("10.254.0.42"))
	l := h.untilReady("pinned")
	if l.Status.TransitIP != "10.254.0.42" || len(h.portsAt("10.254.0.42")) != 1 || !hasRoute(h.opRouter(), svcCIDR, "10.254.0.42") {
		t.Fatalf("pinned link at %s; ports at .42: %d", l.Status.TransitIP, len(h.portsAt("10.254.0.42")))
	}
}

// A pin claimed by another ClusterLink is refused, and nothing is created.
func TestSameTenantPinClaimedByAnotherLink(t *testing.T) {
	h := newHarness(t)
	h.newLink("first", "shoot--services--svc01", svcCIDR, pin("10.254.0.7"))
	h.untilReady("first")
	h.newLink("second", "shoot--services--svc02", "10.252.0.0/16", pin("10.254.0.7"))
	l := h.untilCond("second", v1alpha1.ConditionTransitIPAllocated, v1alpha1.ReasonTransitIPAllocationFailed)
	expectCond(t, l, v1alpha1.ConditionTransitIPAllocated, metav1.ConditionFalse, v1alpha1.ReasonTransitIPAllocationFailed, "spec.transitIP 10.254.0.7 is already claimed by ClusterLink first")
	if l.Status.TransitIP != "" || len(h.linkPorts(l)) != 0 || len(h.portsAt("10.254.0.7")) != 1 {
		t.Fatalf("second link took something: status %q, own ports %d", l.Status.TransitIP, len(h.linkPorts(l)))
	}
}

// A pin held by a port that is not an adoptable leg is refused.
func TestSameTenantPinHeldByForeignPort(t *testing.T) {
	h := newHarness(t)
	foreign, err := h.sim.AddPort(openstacksim.Port{NetworkID: h.transitNetID(), Name: "vm", FixedIPs: []openstacksim.FixedIP{{IPAddress: "10.254.0.8"}}, DeviceID: "some-vm", DeviceOwner: "compute:nova"})
	if err != nil {
		t.Fatal(err)
	}
	h.newLink("blocked", "shoot--services--svc01", svcCIDR, pin("10.254.0.8"))
	l := h.untilCond("blocked", v1alpha1.ConditionTransitIPAllocated, v1alpha1.ReasonTransitIPAllocationFailed)
	expectCond(t, l, v1alpha1.ConditionTransitIPAllocated, metav1.ConditionFalse, v1alpha1.ReasonTransitIPAllocationFailed, "spec.transitIP 10.254.0.8 is held by port "+foreign.ID)
	if len(h.linkPorts(l)) != 0 || hasRoute(h.opRouter(), svcCIDR, "10.254.0.8") {
		t.Fatal("a blocked link created a port or a route")
	}
}

// The transit IP is in status before any port exists at it.
func TestSameTenantTransitIPPersistedBeforeUse(t *testing.T) {
	h := newHarness(t)
	h.sim.Inject(openstacksim.Fault{Method: "POST", PathPattern: "/network/v2.0/ports", Status: 500})
	h.newLink("persist", "shoot--services--svc01", svcCIDR)
	l := h.untilCond("persist", v1alpha1.ConditionLegAttached, v1alpha1.ReasonEnsureLegPortFailed)
	if l.Status.TransitIP != "10.254.0.3" || len(h.portsAt("10.254.0.3")) != 0 {
		t.Fatalf("status.transitIP %q with %d ports at .3; want the allocation recorded and no port", l.Status.TransitIP, len(h.portsAt("10.254.0.3")))
	}
	expectCond(t, l, v1alpha1.ConditionLegAttached, metav1.ConditionFalse, v1alpha1.ReasonEnsureLegPortFailed, "creating the leg port: ")
	h.sim.ClearFaults()
	l = h.untilReady("persist")
	if l.Status.TransitIP != "10.254.0.3" {
		t.Fatalf("allocation moved to %s", l.Status.TransitIP)
	}
}

// Links created at once, reconciled concurrently, never share a transit IP.
func TestSameTenantConcurrentLinksNeverShare(t *testing.T) {
	h := newHarness(t)
	names := []string{"conc-a", "conc-b", "conc-c", "conc-d"}
	routers := []string{"shoot--services--svc01", "shoot--services--svc02", "shoot--services--svc03", "shoot--services--svc04"}
	for i, n := range names {
		h.newLink(n, routers[i], []string{"10.251.0.0/16", "10.252.0.0/16", "10.253.0.0/16", "10.249.0.0/16"}[i])
	}
	var wg sync.WaitGroup
	for _, n := range names {
		for range 2 { // two workers per link as well: the worst case for the claims
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 4 {
					_, _ = h.reconcile(n)
				}
			}()
		}
	}
	wg.Wait()
	seen := map[string]string{}
	for _, n := range names {
		l := h.untilReady(n)
		if other, dup := seen[l.Status.TransitIP]; dup {
			t.Fatalf("%s and %s share transit IP %s", n, other, l.Status.TransitIP)
		}
		seen[l.Status.TransitIP] = n
		if ps := h.portsAt(l.Status.TransitIP); len(ps) != 1 {
			t.Fatalf("%d ports at %s", len(ps), l.Status.TransitIP)
		}
		if ps := h.linkPorts(l); len(ps) != 1 {
			t.Fatalf("%s owns %d ports, want 1", n, len(ps))
		}
	}
}

// The worked example: svc01's hand-made leg at 10.254.0.3 and its route are taken over
// without recreating anything; deleting the link afterwards deletes the port.
func TestSameTenantAdoptsWorkedExample(t *testing.T) {
	var legID string
	h := newHarness(t, func(s *openstacksim.Seed) {
		for i := range s.Routers {
			switch s.Routers[i].Name {
			case "shoot--services--svc01":
				s.Routers[i].Interfaces = append(s.Routers[i].Interfaces, openstacksim.SeedInterface{Subnet: "vpn-transit-subnet", IP: "10.254.0.3"})
			case "shoot--services--vpn01":
				s.Routers[i].Routes = append(s.Routers[i].Routes, openstacksim.Route{Destination: svcCIDR, NextHop: "10.254.0.3"})
			}
		}
	})
	ps := h.portsAt("10.254.0.3")
	if len(ps) != 1 {
		t.Fatalf("seed: %d ports at .3", len(ps))
	}
	legID = ps[0].ID
	h.sim.ResetCounters()
	h.newLink("svc01", "shoot--services--svc01", svcCIDR, pin("10.254.0.3"))
	l := h.untilReady("svc01")
	if l.Status.LegPortID != legID {
		t.Fatalf("leg port %s, want the hand-made %s", l.Status.LegPortID, legID)
	}
	c := h.sim.Counters()
	if c.ByRoute["POST /network/v2.0/ports"] != 0 || c.ByRoute["PUT /network/v2.0/routers/{id}/add_router_interface"] != 0 || c.ByRoute["PUT /network/v2.0/routers/{id}/add_extraroutes"] != 0 {
		t.Fatalf("adoption recreated something: %v", c.ByRoute)
	}
	p, _ := h.sim.Port(legID)
	if !(openstack.Owner{UID: string(l.UID)}).OwnedBy(p.Tags) {
		t.Fatalf("adopted port not tagged: %v", p.Tags)
	}
	if len(h.rec.find("svc01", "LegPortAdopted")) != 1 {
		t.Fatal("no LegPortAdopted Event")
	}
	h.delete("svc01")
	h.until("svc01", "gone", nil)
	if _, ok := h.sim.Port(legID); ok {
		t.Fatal("the adopted port survived the link's deletion")
	}
	if hasRoute(h.opRouter(), svcCIDR, "10.254.0.3") {
		t.Fatal("the route survived the link's deletion")
	}
}

// Without a pin, a hand-made leg sitting at .3 is adopted too.
func TestSameTenantAdoptsAtDot3WithoutPin(t *testing.T) {
	h := newHarness(t, func(s *openstacksim.Seed) {
		for i := range s.Routers {
			if s.Routers[i].Name == "shoot--services--svc02" {
				s.Routers[i].Interfaces = append(s.Routers[i].Interfaces, openstacksim.SeedInterface{Subnet: "vpn-transit-subnet", IP: "10.254.0.3"})
			}
		}
	})
	legID := h.portsAt("10.254.0.3")[0].ID
	h.newLink("svc02", "shoot--services--svc02", "10.252.0.0/16")
	l := h.untilReady("svc02")
	if l.Status.LegPortID != legID || l.Status.TransitIP != "10.254.0.3" || len(h.portsAt("10.254.0.3")) != 1 {
		t.Fatalf("leg %s at %s; want the hand-made %s at .3", l.Status.LegPortID, l.Status.TransitIP, legID)
	}
}

// serviceClusterRouter may be an ID.
func TestSameTenantRouterByID(t *testing.T) {
	h := newHarness(t)
	id := h.router("shoot--services--svc03").ID
	h.newLink("by-id", id, svcCIDR)
	l := h.untilReady("by-id")
	if l.Status.RouterID != id {
		t.Fatalf("router %s, want %s", l.Status.RouterID, id)
	}
}

// A router that does not resolve leaves nothing behind.
func TestSameTenantRouterResolveFailed(t *testing.T) {
	h := newHarness(t)
	h.newLink("no-router", "shoot--services--nope", svcCIDR)
	l := h.untilCond("no-router", v1alpha1.ConditionLegAttached, v1alpha1.ReasonRouterResolveFailed)
	expectCond(t, l, v1alpha1.ConditionLegAttached, metav1.ConditionFalse, v1alpha1.ReasonRouterResolveFailed, `resolving router "shoot--services--nope": `)
	expectCond(t, l, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonRouterResolveFailed, "LegAttached: ")
	if len(h.linkPorts(l)) != 0 || len(h.opRouter().Routes) != 0 {
		t.Fatal("an unresolvable router still got a port or route")
	}
}

// The phases a failed one blocks read Unknown/NotReady "waiting for" it, and a mark is
// no Event: nothing happened to those phases. Once the failure is fixed, a marked phase's
// first True is as quiet as one from absent; the phase that did fail sends its recovery.
func TestSameTenantWaitingMarksSendNoEvent(t *testing.T) {
	h := newHarness(t)
	const name = "waits-for-router"
	h.newLink(name, "shoot--services--nope", freshCIDR())
	l := h.untilCond(name, v1alpha1.ConditionLegAttached, v1alpha1.ReasonRouterResolveFailed)
	marked := []string{v1alpha1.ConditionTransitIPAllocated, v1alpha1.ConditionRouteInstalled, v1alpha1.ConditionReverseRoutesInstalled}
	for _, c := range marked {
		expectCond(t, l, c, metav1.ConditionUnknown, v1alpha1.ReasonNotReady, "waiting for "+v1alpha1.ConditionLegAttached)
	}
	if ev := h.rec.find(name, v1alpha1.ReasonNotReady); len(ev) != 0 {
		t.Errorf("the waiting marks sent Events: %+v", ev)
	}

	l.Spec.ServiceClusterRouter = "shoot--services--svc02"
	if err := env.Client.Update(h.ctx, l); err != nil {
		t.Fatal(err)
	}
	h.untilReady(name)
	h.rec.mu.Lock()
	events := slices.Clone(h.rec.events)
	h.rec.mu.Unlock()
	recovered := false
	for _, e := range events {
		if e.Object != name {
			continue
		}
		for _, c := range marked {
			if strings.HasPrefix(e.Note, c+" ") {
				t.Errorf("%s sent an Event (a waiting mark, or its first True after one): %+v", c, e)
			}
		}
		if strings.HasPrefix(e.Note, v1alpha1.ConditionLegAttached+" True") {
			recovered = true
		}
	}
	if !recovered {
		t.Errorf("no Event for LegAttached turning True after RouterResolveFailed; Events: %+v", events)
	}
}

// Self-healing: a leg port deleted, a detachment, a route removed out of band all come back.
func TestSameTenantSelfHeals(t *testing.T) {
	h := newHarness(t)
	h.newLink("heal", "shoot--services--svc01", svcCIDR)
	l := h.untilReady("heal")
	svc := h.router("shoot--services--svc01")

	t.Run("route removed", func(t *testing.T) {
		if err := h.sim.RemoveRoute(h.opRouter().ID, svcCIDR, "10.254.0.3"); err != nil {
			t.Fatal(err)
		}
		h.sim.ResetCounters()
		h.untilReady("heal")
		if !hasRoute(h.opRouter(), svcCIDR, "10.254.0.3") {
			t.Fatal("route not restored")
		}
		if c := h.sim.Counters(); c.Writes != 1 || c.ByRoute["PUT /network/v2.0/routers/{id}/add_extraroutes"] != 1 {
			t.Fatalf("restoring one route took %+v", c)
		}
	})
	t.Run("detached", func(t *testing.T) {
		if err := h.sim.SetPortDevice(l.Status.LegPortID, "", ""); err != nil {
			t.Fatal(err)
		}
		h.untilReady("heal")
		if p, _ := h.sim.Port(l.Status.LegPortID); p.DeviceID != svc.ID {
			t.Fatalf("leg not re-attached: device %q", p.DeviceID)
		}
	})
	t.Run("port deleted", func(t *testing.T) {
		if err := h.sim.DeletePort(l.Status.LegPortID); err != nil {
			t.Fatal(err)
		}
		l2 := h.untilReady("heal")
		if l2.Status.LegPortID == l.Status.LegPortID || l2.Status.TransitIP != "10.254.0.3" {
			t.Fatalf("leg %s at %s after the port was deleted", l2.Status.LegPortID, l2.Status.TransitIP)
		}
		p, ok := h.sim.Port(l2.Status.LegPortID)
		if !ok || p.DeviceID != svc.ID || !hasRoute(h.opRouter(), svcCIDR, "10.254.0.3") {
			t.Fatal("recreated leg not attached or routed")
		}
	})
}

// Of two ports with the link's tags (only a lost create response makes a second), the
// leg at the recorded transit IP stays and the unattached other is deleted, as for a
// gateway's port (openstack.Owned). The recorded leg reads as gone once, so the
// reconcile looks the leg up by its tags and finds both.
func TestSameTenantDuplicateLegDeleted(t *testing.T) {
	h := newHarness(t)
	h.newLink("dup", "shoot--services--svc01", svcCIDR)
	l := h.untilReady("dup")
	own := openstack.Owner{Kind: OwnerKind, Name: l.Name, UID: string(l.UID)}
	extra, err := h.sim.AddPort(openstacksim.Port{NetworkID: h.transitNetID(), Name: "lost-create",
		FixedIPs: []openstacksim.FixedIP{{SubnetID: h.transitSubnetID(), IPAddress: "10.254.0.9"}}, Tags: own.Tags()})
	if err != nil {
		t.Fatal(err)
	}
	h.sim.Inject(openstacksim.Fault{Method: "GET", PathPattern: "/network/v2.0/ports/" + l.Status.LegPortID, Status: 404, Count: 1})
	l2 := h.untilReady("dup")
	if l2.Status.LegPortID != l.Status.LegPortID || l2.Status.TransitIP != "10.254.0.3" {
		t.Fatalf("leg %s at %s; want the recorded %s at 10.254.0.3 kept", l2.Status.LegPortID, l2.Status.TransitIP, l.Status.LegPortID)
	}
	if _, ok := h.sim.Port(extra.ID); ok {
		t.Fatalf("the unattached duplicate %s at 10.254.0.9 is still there", extra.ID)
	}
	if p, ok := h.sim.Port(l.Status.LegPortID); !ok || p.DeviceID != h.router("shoot--services--svc01").ID {
		t.Fatalf("the kept leg %+v is not attached to the service cluster's router", p)
	}
}

// A changed serviceClusterCIDR moves the route.
func TestSameTenantCIDRChangeMovesRoute(t *testing.T) {
	h := newHarness(t)
	h.newLink("move", "shoot--services--svc01", svcCIDR)
	h.untilReady("move")
	h.update("move", func(l *v1alpha1.ClusterLink) { l.Spec.ServiceClusterCIDR = "10.240.0.0/16" })
	h.until("move", "route moved", func(l *v1alpha1.ClusterLink) bool {
		return strings.HasPrefix(metaMsg(l, v1alpha1.ConditionRouteInstalled), "10.240.0.0/16")
	})
	rt := h.opRouter()
	if hasRoute(rt, svcCIDR, "10.254.0.3") || !hasRoute(rt, "10.240.0.0/16", "10.254.0.3") {
		t.Fatalf("routes after the CIDR change: %v", rt.Routes)
	}
}

// Validate() failures are Validated=False/InvalidSpec with no OpenStack call.
func TestInvalidSpec(t *testing.T) {
	h := newHarness(t)
	h.sim.ResetCounters()
	h.newLink("invalid", "shoot--services--svc01", svcCIDR, pin("10.254.0.1"))
	l := h.untilCond("invalid", v1alpha1.ConditionValidated, v1alpha1.ReasonInvalidSpec)
	expectCond(t, l, v1alpha1.ConditionValidated, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec, "spec.transitIP: Invalid value")
	expectCond(t, l, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec, "Validated: ")
	if n := h.sim.Counters().Total(); n != 0 {
		t.Fatalf("an invalid link made %d OpenStack calls", n)
	}
	h.delete("invalid")
	h.until("invalid", "gone", nil)
	if n := h.sim.Counters().Total(); n != 0 {
		t.Fatalf("deleting an invalid link made %d OpenStack calls", n)
	}
}

// Deletion: the gateway route, then the reverse routes and the attachment, then the
// port, in that order.
func TestSameTenantDeletionReverseOrder(t *testing.T) {
	h := newHarness(t)
	ipsecGateway(t, "tenant-del", "gw", true, "100.64.9.0/24", "10.254.0.109")
	h.newLink("del", "shoot--services--svc01", svcCIDR)
	l := h.untilReady("del")
	svc := h.router("shoot--services--svc01")
	if !hasRoute(svc, "100.64.9.0/24", "10.254.0.109") {
		t.Fatalf("no reverse route before deletion: %v", svc.Routes)
	}
	h.sim.ResetCounters()
	h.delete("del")
	h.until("del", "gone", nil)
	var order []string
	for _, rec := range h.sim.RequestLog() {
		if rec.Method == "GET" || strings.Contains(rec.Path, "/auth/") {
			continue
		}
		switch {
		case strings.HasSuffix(rec.Path, "remove_extraroutes") && strings.Contains(rec.Path, h.opRouter().ID):
			order = append(order, "gateway-route")
		case strings.HasSuffix(rec.Path, "remove_extraroutes") && strings.Contains(rec.Path, svc.ID):
			order = append(order, "reverse-routes")
		case strings.HasSuffix(rec.Path, "remove_router_interface"):
			order = append(order, "detach")
		case rec.Method == "DELETE" && strings.Contains(rec.Path, "/ports/"):
			order = append(order, "port")
		}
	}
	want := []string{"gateway-route", "reverse-routes", "detach", "port"}
	if !slices.Equal(order, want) {
		t.Fatalf("deletion order %v, want %v", order, want)
	}
	if _, ok := h.sim.Port(l.Status.LegPortID); ok || len(h.opRouter().Routes) != 0 || len(h.router("shoot--services--svc01").Routes) != 0 {
		t.Fatal("deletion left something behind")
	}
}

func metaMsg(l *v1alpha1.ClusterLink, t string) string {
	for _, c := range l.Status.Conditions {
		if c.Type == t {
			return c.Message
		}
	}
	return ""
}
