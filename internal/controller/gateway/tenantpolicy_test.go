package gateway

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/render"
)

// The tenant boundary (docs/security.md, "The tenant policy"): what the platform's
// VPNTenantPolicy allows and what no policy can allow. Each test reproduces a finding
// of the security review and fails without its control.

// touch asks for a reconcile now (an annotation change; the harness's resync is 30
// minutes).
func (h *harness) touch(ns, name string) {
	h.t.Helper()
	eventually(h.t, "annotate "+name, func() (bool, string) {
		gw := h.getIn(ns, name)
		a := gw.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		a["test/touch"] = fmt.Sprint(len(a["test/touch"]) + 1)
		gw.SetAnnotations(a)
		if err := env.Client.Update(h.ctx, gw); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

func (h *harness) routerHas(r openstack.Route) bool {
	for _, x := range h.operatorRouter().Routes {
		if x.Destination == r.Destination && x.NextHop == r.NextHop {
			return true
		}
	}
	return false
}

func (h *harness) exposuresInConfig(ns, name string) []string {
	h.t.Helper()
	var cm corev1.ConfigMap
	if err := env.Client.Get(h.ctx, client.ObjectKey{Namespace: ns, Name: render.ConfigMapName(name)}, &cm); err != nil {
		h.t.Fatal(err)
	}
	cfg, err := gatewayconfig.Unmarshal([]byte(cm.Data[gatewayconfig.ConfigMapKeyConfig]))
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, e := range cfg.Exposures {
		out = append(out, e.Name)
	}
	return out
}

// waitExposures waits until the gateway's pod configuration holds exactly these
// exposures. (The phase conditions of an unchanged generation can read converged from
// an earlier pass before the workload phase has rewritten the configuration.)
func (h *harness) waitExposures(name string, want ...string) {
	h.t.Helper()
	eventually(h.t, name+"'s exposures in its configuration", func() (bool, string) {
		got := h.exposuresInConfig(h.ns, name)
		return slices.Equal(got, want), fmt.Sprint(got)
	})
}

// C1: routed mode is the platform's to allow. Without routed-subnet ranges in the
// tenant's policy a routed tunnel routes nothing; a subnet outside them is refused; a
// policy narrowed under a running gateway withdraws what it routed (the service CIDR
// of its reverse exposures stays).
func TestRoutedModeNeedsThePolicy(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.policySpec(func(s *v1alpha1.VPNTenantPolicySpec) { s.RoutedSubnets = nil })
	h.start()

	h.create("r", routedSpec())
	gw := h.waitCond("r", v1alpha1.ConditionRoutingReady, metav1.ConditionFalse, v1alpha1.ReasonRoutedModeNotAllowed)
	if c := condOf(gw.Status.Conditions, v1alpha1.ConditionRoutingReady); !strings.Contains(c, "routed mode is off under VPNTenantPolicy "+h.policyName()) {
		t.Fatalf("RoutingReady: %s", c)
	}
	if got := h.routeDests(gw); !slices.Equal(got, []string{gw.Status.ServiceCIDR}) {
		t.Fatalf("routes via the port %v, want the service CIDR only", got)
	}
	if got := h.pairs(gw); !slices.Equal(got, []string{gw.Status.ServiceCIDR}) {
		t.Fatalf("pairs %v, want the service CIDR only", got)
	}

	h.policySpec(func(s *v1alpha1.VPNTenantPolicySpec) { s.RoutedSubnets = []string{"192.168.30.0/24"} })
	gw = h.waitConverged("r")
	want := []string{"192.168.30.0/24", gw.Status.ServiceCIDR}
	slices.Sort(want)
	if got := h.routeDests(gw); !slices.Equal(got, want) {
		t.Fatalf("routes via the port %v, want %v", got, want)
	}

	h.policySpec(func(s *v1alpha1.VPNTenantPolicySpec) { s.RoutedSubnets = []string{"10.99.0.0/16"} })
	gw = h.waitCond("r", v1alpha1.ConditionRoutingReady, metav1.ConditionFalse, v1alpha1.ReasonRoutedModeNotAllowed)
	if c := condOf(gw.Status.Conditions, v1alpha1.ConditionRoutingReady); !strings.Contains(c, "routed subnet 192.168.30.0/24 lies outside the routed-subnet ranges") {
		t.Fatalf("RoutingReady: %s", c)
	}
	if got := h.routeDests(gw); !slices.Equal(got, []string{gw.Status.ServiceCIDR}) {
		t.Fatalf("after the policy narrowed, routes via the port %v: the routed subnet was not withdrawn", got)
	}
	if got := h.pairs(gw); !slices.Equal(got, []string{gw.Status.ServiceCIDR}) {
		t.Fatalf("after the policy narrowed, pairs %v: the routed subnet was not withdrawn", got)
	}
}

// C1: a routed subnet the policy allows is still refused when routing it would take
// the shared router's own traffic or someone else's: another tenant's peer address,
// the external network, a subnet attached to the router, a route the gateway did not
// install (never replaced or removed), an exposure-target range. A gateway that enters
// a conflict (a foreign route appears) withdraws what it routed. No message names the
// other tenant.
func TestRoutedSubnetCannotTakeTheRouter(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	// The fabric is half of the node network here, so the other half is a subnet
	// attached to the router that is no internal source.
	h.cfg.InternalSourceCIDRs = []netip.Prefix{netip.MustParsePrefix("10.250.0.0/17")}
	h.policySpec(func(s *v1alpha1.VPNTenantPolicySpec) {
		s.RoutedSubnets = append(s.RoutedSubnets, "198.51.100.0/24", "203.0.113.0/24")
	})
	nsB := h.ns + "-b"
	h.otherTenant(nsB, &v1alpha1.VPNTenantPolicySpec{ExposureTargets: []string{"10.60.0.0/16"}})
	rt := h.operatorRouter()
	// The manual method's route, via a service cluster's leg (an address the simulator
	// hands no gateway port: ports get the lowest free ones).
	manual := openstack.Route{Destination: "10.251.0.0/16", NextHop: "10.254.0.250"}
	if _, err := h.os.Networking.AddRouterRoutes(h.ctx, rt.ID, []openstack.Route{manual}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = h.os.Networking.RemoveRouterRoutes(h.ctx, rt.ID, []openstack.Route{manual}) })
	h.start()

	b := spec(false)
	b.Exposures = nil
	b.Tunnels[0].Peer.Address = "198.51.100.77"
	if err := env.Client.Create(h.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: "hq-psk"}, Data: map[string][]byte{"psk": []byte(testPSK)}}); err != nil {
		t.Fatal(err)
	}
	h.createIn(nsB, "victim", b)

	for i, tc := range []struct {
		name, subnet, want string
	}{
		{"peer", "198.51.100.64/26", "holds the peer address or WireGuard endpoint of a gateway"},
		{"external", "203.0.113.0/28", "attached to the gateway cluster's router or the external network"},
		{"attached", "10.250.200.0/24", "attached to the gateway cluster's router or the external network"},
		{"manual", "10.251.0.0/16", "a route on the gateway cluster's router that this gateway did not install"},
		{"targets", "10.60.1.0/24", "a range the platform allows as exposure targets"},
	} {
		s := spec(false)
		s.Tunnels[0].Mode = v1alpha1.TunnelModeRouted
		s.Tunnels[0].Peer.Address = fmt.Sprintf("192.0.2.%d", 10+i)
		s.Tunnels[0].Peer.Subnets = []string{tc.subnet}
		h.create(tc.name, s)
		gw := h.waitCond(tc.name, v1alpha1.ConditionRoutingReady, metav1.ConditionFalse, v1alpha1.ReasonRoutedSubnetConflict)
		c := condOf(gw.Status.Conditions, v1alpha1.ConditionRoutingReady)
		if !strings.Contains(c, tc.want) {
			t.Errorf("%s: %s, want it to say %q", tc.name, c, tc.want)
		}
		if strings.Contains(c, nsB) || strings.Contains(c, "victim") || strings.Contains(c, "10.254.0.250") {
			t.Errorf("%s: the refusal names another tenant's objects: %s", tc.name, c)
		}
		if got := h.routeDests(gw); len(got) != 0 {
			t.Errorf("%s: routes installed despite the conflict: %v", tc.name, got)
		}
	}
	if !h.routerHas(manual) {
		t.Fatal("the platform's own route was removed")
	}

	// Entering a conflict withdraws: a routed gateway converged, then a foreign route
	// over its subnet appears.
	w := routedSpec()
	w.Tunnels[1].Peer.Subnets = []string{"10.70.0.0/24"}
	h.create("w", w)
	gw := h.waitConverged("w")
	foreign := openstack.Route{Destination: "10.70.0.0/16", NextHop: "10.254.0.251"}
	if _, err := h.os.Networking.AddRouterRoutes(h.ctx, rt.ID, []openstack.Route{foreign}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = h.os.Networking.RemoveRouterRoutes(h.ctx, rt.ID, []openstack.Route{foreign}) })
	h.touch(h.ns, "w")
	gw = h.waitCond("w", v1alpha1.ConditionRoutingReady, metav1.ConditionFalse, v1alpha1.ReasonRoutedSubnetConflict)
	if got := h.routeDests(gw); !slices.Equal(got, []string{gw.Status.ServiceCIDR}) {
		t.Fatalf("routes via the port after the conflict %v: the routed subnet was not withdrawn", got)
	}
	if got := h.pairs(gw); !slices.Equal(got, []string{gw.Status.ServiceCIDR}) {
		t.Fatalf("pairs after the conflict %v: the routed subnet was not withdrawn", got)
	}
	if !h.routerHas(foreign) {
		t.Fatal("the foreign route was removed")
	}
}

// H3 and H1: exposure targets are bound to the tenant. Under the strict defaults only
// linked clusters; the policy's ranges add to them; a target in another gateway's
// routed subnet is refused whatever the policy says; a policy narrowed under a running
// gateway withdraws the exposure from its pod's configuration.
func TestExposureTargetsFollowThePolicy(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	nsB := h.ns + "-b"
	h.otherTenant(nsB, &v1alpha1.VPNTenantPolicySpec{RoutedSubnets: []string{"192.168.60.0/24"}})
	h.policySpec(nil) // the strict defaults for h.ns
	h.start()

	h.create("e", spec(false))
	gw := h.waitCond("e", v1alpha1.ConditionValidated, metav1.ConditionFalse, v1alpha1.ReasonExposureTargetNotAllowed)
	if c := condOf(gw.Status.Conditions, v1alpha1.ConditionValidated); !strings.Contains(c, "the strict defaults (no VPNTenantPolicy selects namespace "+h.ns+")") {
		t.Fatalf("Validated: %s", c)
	}
	if gw.Status.PortID != "" {
		t.Fatal("a port was created for a refused gateway")
	}
	// A linked cluster serving the gateway is always a target.
	h.clusterLink("exp-"+h.ns, "10.250.0.0/16", "", nil)
	h.waitConverged("e")
	h.waitExposures("e", "portal")
	if err := env.Client.Delete(h.ctx, &v1alpha1.ClusterLink{ObjectMeta: metav1.ObjectMeta{Name: "exp-" + h.ns}}); err != nil {
		t.Fatal(err)
	}
	h.waitCond("e", v1alpha1.ConditionValidated, metav1.ConditionFalse, v1alpha1.ReasonExposureTargetNotAllowed)
	eventually(t, "the refused exposure withdrawn from the running gateway", func() (bool, string) {
		got := h.exposuresInConfig(h.ns, "e")
		return len(got) == 0, fmt.Sprint(got)
	})
	// The policy's ranges.
	h.policySpec(func(s *v1alpha1.VPNTenantPolicySpec) {})
	h.waitConverged("e")
	h.waitExposures("e", "portal")

	// Another tenant's routed client network.
	b := spec(false)
	b.Exposures = nil
	b.Tunnels[0].Mode = v1alpha1.TunnelModeRouted
	b.Tunnels[0].Peer.Address = "198.51.100.78"
	b.Tunnels[0].Peer.Subnets = []string{"192.168.60.0/24"}
	if err := env.Client.Create(h.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: "hq-psk"}, Data: map[string][]byte{"psk": []byte(testPSK)}}); err != nil {
		t.Fatal(err)
	}
	h.createIn(nsB, "routed-b", b)
	h.waitCondIn(nsB, "routed-b", v1alpha1.ConditionRoutingReady, metav1.ConditionTrue, "")
	h.policySpec(func(s *v1alpha1.VPNTenantPolicySpec) { s.ExposureTargets = append(s.ExposureTargets, "192.168.0.0/16") })
	x := spec(false)
	x.Tunnels[0].Peer.Address = "198.51.100.79"
	x.Exposures[0].Target.Address = "192.168.60.5"
	h.create("x", x)
	gw = h.waitCond("x", v1alpha1.ConditionValidated, metav1.ConditionFalse, v1alpha1.ReasonExposureTargetNotAllowed)
	c := condOf(gw.Status.Conditions, v1alpha1.ConditionValidated)
	if !strings.Contains(c, "lies in a subnet routed to another gateway") {
		t.Fatalf("Validated: %s", c)
	}
	if strings.Contains(c, nsB) || strings.Contains(c, "routed-b") {
		t.Fatalf("the refusal names the other tenant: %s", c)
	}
}

// M1: a tenant's gateways count against its limits. A gateway past a limit is refused
// before anything is built; a change that would pass a limit is refused for the
// changed gateway only; room made by a deletion admits the waiting gateway at once.
func TestTenantLimits(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	two, three := int32(2), int32(3)
	h.policySpec(func(s *v1alpha1.VPNTenantPolicySpec) { s.Limits.Gateways, s.Limits.Tunnels = &two, &three })
	h.start()
	one := func(i int) v1alpha1.GatewaySpec {
		s := spec(false)
		s.Tunnels[0].Peer.Address = fmt.Sprintf("198.51.100.%d", 20+i)
		return s
	}
	h.create("g1", one(1))
	h.waitConverged("g1")
	h.create("g2", one(2))
	h.waitConverged("g2")
	h.create("g3", one(3))
	gw := h.waitCond("g3", v1alpha1.ConditionValidated, metav1.ConditionFalse, v1alpha1.ReasonTenantLimitExceeded)
	if c := condOf(gw.Status.Conditions, v1alpha1.ConditionValidated); !strings.Contains(c, "gateways (3 of 2)") || !strings.Contains(c, "VPNTenantPolicy "+h.policyName()) {
		t.Fatalf("Validated: %s", c)
	}
	if gw.Status.PortID != "" {
		t.Fatal("a port was created for a gateway past the limit")
	}

	// g1 grows past the tunnel limit: g1's change is refused, g2 is untouched.
	h.mutate("g1", func(s *v1alpha1.GatewaySpec) {
		for i := range 2 {
			s.Tunnels = append(s.Tunnels, v1alpha1.Tunnel{Name: fmt.Sprintf("t%d", i), Peer: v1alpha1.Peer{Address: fmt.Sprintf("198.51.100.%d", 40+i), Subnets: []string{fmt.Sprintf("192.168.%d.0/24", 40+i)}},
				PreSharedKey: v1alpha1.SecretKeyRef{Name: "hq-psk", Key: "psk"}})
		}
	})
	gw = h.waitCond("g1", v1alpha1.ConditionValidated, metav1.ConditionFalse, v1alpha1.ReasonTenantLimitExceeded)
	if c := condOf(gw.Status.Conditions, v1alpha1.ConditionValidated); !strings.Contains(c, "tunnels (4 of 3)") {
		t.Fatalf("Validated: %s", c)
	}
	if g2 := h.get("g2"); !converged(g2.Status.Conditions, g2.Generation) {
		t.Fatalf("g2 lost its admission to g1's change: %s", condOf(g2.Status.Conditions, v1alpha1.ConditionValidated))
	}
	h.mutate("g1", func(s *v1alpha1.GatewaySpec) { s.Tunnels = s.Tunnels[:1] })
	h.waitConverged("g1")

	// Room made: g3 goes on without anything else asking for it.
	if err := env.Client.Delete(h.ctx, h.get("g2")); err != nil {
		t.Fatal(err)
	}
	h.waitGone("g2")
	h.waitConverged("g3")
}

// Two policies selecting one namespace: neither applies, the gateway goes no further,
// and its condition does not name the policies (one may be another tenant's).
func TestTenantPolicyConflict(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("c", spec(false))
	h.waitConverged("c")
	other := &v1alpha1.VPNTenantPolicy{ObjectMeta: metav1.ObjectMeta{Name: "acme-corp-" + h.ns},
		Spec: v1alpha1.VPNTenantPolicySpec{NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: h.ns}}}}
	if err := env.Client.Create(h.ctx, other); err != nil {
		t.Fatal(err)
	}
	h.touch(h.ns, "c")
	gw := h.waitCond("c", v1alpha1.ConditionValidated, metav1.ConditionFalse, v1alpha1.ReasonTenantPolicyConflict)
	c := condOf(gw.Status.Conditions, v1alpha1.ConditionValidated)
	if !strings.Contains(c, "selected by 2 VPNTenantPolicies") || strings.Contains(c, "acme-corp") {
		t.Fatalf("Validated: %s", c)
	}
	if err := env.Client.Delete(h.ctx, other); err != nil {
		t.Fatal(err)
	}
	h.waitConverged("c")
}

// M2: a pinned floating IP is bound to its tenant. A pin the policy does not list is
// refused before OpenStack; an adopted address carries the gateway's tag while it holds
// it, and no other gateway takes it in the moment it is unassociated (another tenant
// whose policy wrongly lists it too is refused: reserved); released on deletion
// (untagged, not deleted), it is free for the other; another gateway's own allocated
// address is never pinned.
func TestFloatingIPPinsBoundToTheirTenant(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	nsB := h.ns + "-b"
	h.otherTenant(nsB, &v1alpha1.VPNTenantPolicySpec{FloatingIPs: []string{pinnedFIP}})
	if err := env.Client.Create(h.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: "hq-psk"}, Data: map[string][]byte{"psk": []byte(testPSK)}}); err != nil {
		t.Fatal(err)
	}
	pub, _ := h.sim.NetworkByName("public")
	pre, err := h.os.Networking.CreateFloatingIP(h.ctx, openstack.CreateFloatingIPOpts{FloatingNetworkID: pub.ID, FloatingIPAddress: pinnedFIP})
	if err != nil {
		t.Fatal(err)
	}
	h.start()

	// Not in the policy.
	np := spec(false)
	np.Endpoint = &v1alpha1.Endpoint{FloatingIP: "203.0.113.88"}
	h.create("np", np)
	h.waitCond("np", v1alpha1.ConditionValidated, metav1.ConditionFalse, v1alpha1.ReasonFloatingIPNotAllowed)

	a := spec(false)
	a.Endpoint = &v1alpha1.Endpoint{FloatingIP: pinnedFIP}
	h.create("a", a)
	gwA := h.waitConverged("a")
	fip := func() *openstack.FloatingIP {
		f, err := h.os.Networking.GetFloatingIP(h.ctx, pre.ID)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	if by := openstack.PinnedBy(fip().Tags); by != string(gwA.UID) {
		t.Fatalf("the adopted address is tagged %q, want gateway a's UID", by)
	}

	b := spec(false)
	b.Exposures = nil
	b.Tunnels[0].Peer.Address = "198.51.100.90"
	b.Endpoint = &v1alpha1.Endpoint{FloatingIP: pinnedFIP}
	h.createIn(nsB, "thief", b)
	h.waitCondIn(nsB, "thief", v1alpha1.ConditionFloatingIPReady, metav1.ConditionFalse, v1alpha1.ReasonFloatingIPReserved)
	// The migration window: the address is unassociated for a moment.
	if _, err := h.os.Networking.DisassociateFloatingIP(h.ctx, pre.ID); err != nil {
		t.Fatal(err)
	}
	h.touch(nsB, "thief")
	gwB := h.waitCondIn(nsB, "thief", v1alpha1.ConditionFloatingIPReady, metav1.ConditionFalse, v1alpha1.ReasonFloatingIPReserved)
	if c := condOf(gwB.Status.Conditions, v1alpha1.ConditionFloatingIPReady); strings.Contains(c, h.ns) || strings.Contains(c, string(gwA.UID)) {
		t.Fatalf("the refusal names the holder: %s", c)
	}
	if f := fip(); f.PortID != "" && f.PortID == gwB.Status.PortID {
		t.Fatal("the other tenant took the pinned address")
	}
	// a takes its address back.
	h.touch(h.ns, "a")
	h.waitConverged("a")

	// Released on deletion: untagged and unassociated, not deleted; then b may have it.
	if err := env.Client.Delete(h.ctx, h.get("a")); err != nil {
		t.Fatal(err)
	}
	h.waitGone("a")
	if f := fip(); openstack.PinnedBy(f.Tags) != "" || f.PortID != "" {
		t.Fatalf("after a's deletion the address is tagged %q and associated with %q", openstack.PinnedBy(f.Tags), f.PortID)
	}
	h.touch(nsB, "thief")
	gwB = h.waitCondIn(nsB, "thief", v1alpha1.ConditionFloatingIPReady, metav1.ConditionTrue, "")
	if by := openstack.PinnedBy(fip().Tags); by != string(gwB.UID) {
		t.Fatalf("the address is tagged %q after b adopted it", by)
	}

	// Another gateway's own (allocated) address, unassociated, is not pinned either.
	h.create("alloc", spec(false))
	gwAlloc := h.waitConverged("alloc")
	if _, err := h.os.Networking.DisassociateFloatingIP(h.ctx, gwAlloc.Status.FloatingIPID); err != nil {
		t.Fatal(err)
	}
	h.policySpec(func(s *v1alpha1.VPNTenantPolicySpec) {
		s.FloatingIPs = append(s.FloatingIPs, gwAlloc.Status.FloatingIP)
	})
	steal := spec(false)
	steal.Tunnels[0].Peer.Address = "198.51.100.91"
	steal.Endpoint = &v1alpha1.Endpoint{FloatingIP: gwAlloc.Status.FloatingIP}
	h.create("steal", steal)
	h.waitCond("steal", v1alpha1.ConditionFloatingIPReady, metav1.ConditionFalse, v1alpha1.ReasonFloatingIPReserved)
}
