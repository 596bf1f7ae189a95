package gateway

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/render"
)

// routedSpec has an snat tunnel (hq) and a routed one (br).
func routedSpec() v1alpha1.GatewaySpec {
	s := spec(true)
	s.Tunnels = append(s.Tunnels, v1alpha1.Tunnel{
		Name: "br", Mode: v1alpha1.TunnelModeRouted,
		Peer:         v1alpha1.Peer{Address: "192.0.2.50", Subnets: []string{"192.168.30.0/24"}},
		PreSharedKey: v1alpha1.SecretKeyRef{Name: "hq-psk", Key: "psk"},
	})
	return s
}

func (h *harness) pairs(gw *v1alpha1.IPsecGateway) []string {
	h.t.Helper()
	port, ok := h.sim.Port(gw.Status.PortID)
	if !ok {
		h.t.Fatalf("port %s not found", gw.Status.PortID)
	}
	var out []string
	for _, p := range port.AllowedAddressPairs {
		out = append(out, p.IPAddress)
	}
	slices.Sort(out)
	return out
}

func (h *harness) routeDests(gw *v1alpha1.IPsecGateway) []string {
	var out []string
	for _, r := range routesVia(h.operatorRouter(), gw.Status.PortFixedIP) {
		out = append(out, r.Destination)
	}
	slices.Sort(out)
	return out
}

// A routed tunnel's subnet is routed to the gateway's port on the operator's router and
// allowed on the port; the security group admits the internal sources; the gateway's
// config marks the tunnel routed with the internal sources in its selectors. Leaving
// routed mode removes exactly that, and so does deleting the gateway.
func TestRoutedTunnel(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("rt", routedSpec())
	gw := h.waitConverged("rt")
	want := []string{"192.168.30.0/24", gw.Status.ServiceCIDR}
	slices.Sort(want)
	if got := h.pairs(gw); !slices.Equal(got, want) {
		t.Fatalf("pairs %v, want %v", got, want)
	}
	if got := h.routeDests(gw); !slices.Equal(got, want) {
		t.Fatalf("routes via the port %v, want %v", got, want)
	}
	if c := condOf(gw.Status.Conditions, v1alpha1.ConditionRoutingReady); !strings.Contains(c, "True/RoutingReady") || !strings.Contains(c, "192.168.30.0/24") {
		t.Fatalf("RoutingReady: %s", c)
	}
	rules := h.ingressRules(gw.Status.SecurityGroupID)
	if !slices.Contains(rules, "any from 10.250.0.0/16") {
		t.Fatalf("the internal sources are not admitted: %v", rules)
	}

	var cm corev1.ConfigMap
	mustGet(t, h, client.ObjectKey{Namespace: h.ns, Name: render.ConfigMapName("rt")}, &cm)
	cfg, err := gatewayconfig.Unmarshal([]byte(cm.Data[gatewayconfig.ConfigMapKeyConfig]))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.RoutedSubnets(), []string{"192.168.30.0/24"}) || !slices.Equal(cfg.InternalSources, []string{"10.250.0.0/16"}) {
		t.Fatalf("config routed %v internal %v", cfg.RoutedSubnets(), cfg.InternalSources)
	}
	// The agent renders the connections from gateway.json (the ConfigMap carries nothing
	// else), as here.
	sw, err := gatewayconfig.RenderSwanctl(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sw, "local_ts = "+gw.Status.ServiceCIDR+",10.250.0.0/16") {
		t.Fatalf("the routed child does not cover the internal sources:\n%s", sw)
	}

	// Leaving routed mode: the subnet's route and pair go, the reverse exposures' stay.
	h.mutate("rt", func(s *v1alpha1.GatewaySpec) { s.Tunnels[1].Mode = v1alpha1.TunnelModeSNAT })
	h.waitConverged("rt")
	gw = h.get("rt")
	if got := h.pairs(gw); !slices.Equal(got, []string{gw.Status.ServiceCIDR}) {
		t.Fatalf("pairs after leaving routed mode %v", got)
	}
	if got := h.routeDests(gw); !slices.Equal(got, []string{gw.Status.ServiceCIDR}) {
		t.Fatalf("routes after leaving routed mode %v", got)
	}
	if rules := h.ingressRules(gw.Status.SecurityGroupID); slices.Contains(rules, "any from 10.250.0.0/16") {
		t.Fatalf("the routed rule outlived routed mode: %v", rules)
	}

	// Routed again, then deleted: nothing routed to the old port remains.
	h.mutate("rt", func(s *v1alpha1.GatewaySpec) { s.Tunnels[1].Mode = v1alpha1.TunnelModeRouted })
	h.waitConverged("rt")
	gw = h.get("rt")
	if got := h.routeDests(gw); !slices.Equal(got, want) {
		t.Fatalf("routes after re-entering routed mode %v, want %v", got, want)
	}
	if err := env.Client.Delete(h.ctx, gw); err != nil {
		t.Fatal(err)
	}
	eventually(t, "gateway gone", func() (bool, string) {
		err := env.Client.Get(h.ctx, client.ObjectKeyFromObject(gw), &v1alpha1.IPsecGateway{})
		return err != nil, "still there"
	})
	if got := h.routeDests(gw); len(got) != 0 {
		t.Fatalf("routes left after deletion: %v", got)
	}
	for _, r := range h.operatorRouter().Routes {
		if r.Destination == "192.168.30.0/24" {
			t.Fatalf("route to the routed subnet left after deletion: %+v", r)
		}
	}
}

// A routed subnet that would capture another network is refused with the reason, before
// anything is routed: the pool (already by the address policy at Validated, as any
// client network in the pool), a linked service cluster, another gateway's routed subnet
// (the older gateway keeps it), the internal sources.
func TestRoutedSubnetConflicts(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("first", routedSpec())
	first := h.waitConverged("first")

	link := &v1alpha1.ClusterLink{ObjectMeta: metav1.ObjectMeta{Name: "rt-conflict-" + h.ns},
		Spec: v1alpha1.ClusterLinkSpec{ServiceClusterRouter: "shoot--services--svc01", ServiceClusterCIDR: "10.77.0.0/16"}}
	if err := env.Client.Create(h.ctx, link); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(h.ctx, link) })

	for _, tc := range []struct {
		name, subnet, want string
		cond, reason       string
	}{
		{"other", "192.168.30.128/25", "overlaps a route on the gateway cluster's router that this gateway did not install", v1alpha1.ConditionRoutingReady, v1alpha1.ReasonRoutedSubnetConflict},
		{"pool", "100.64.200.0/24", "overlaps the service-CIDR pool", v1alpha1.ConditionValidated, v1alpha1.ReasonInvalidSpec},
		{"link", "10.77.3.0/24", "overlaps the service cluster of a ClusterLink", v1alpha1.ConditionRoutingReady, v1alpha1.ReasonRoutedSubnetConflict},
		{"fabric", "10.250.8.0/24", "overlaps the internal source CIDR 10.250.0.0/16", v1alpha1.ConditionRoutingReady, v1alpha1.ReasonRoutedSubnetConflict},
	} {
		s := spec(false)
		s.Tunnels[0].Mode = v1alpha1.TunnelModeRouted
		s.Tunnels[0].Peer.Subnets = []string{tc.subnet}
		h.create(tc.name, s)
		gw := h.waitCond(tc.name, tc.cond, metav1.ConditionFalse, tc.reason)
		if c := condOf(gw.Status.Conditions, tc.cond); !strings.Contains(c, tc.want) {
			t.Errorf("%s: %s, want it to say %q", tc.name, c, tc.want)
		}
		if tc.cond == v1alpha1.ConditionValidated {
			// Refused before OpenStack: no port, so neither a pair nor a route.
			if gw.Status.PortID != "" {
				t.Errorf("%s: a port was created for a refused spec: %s", tc.name, gw.Status.PortID)
			}
			continue
		}
		if got := h.routeDests(gw); len(got) != 0 {
			t.Errorf("%s: routes installed despite the conflict: %v", tc.name, got)
		}
		if got := h.pairs(gw); len(got) != 0 {
			t.Errorf("%s: pairs installed despite the conflict: %v", tc.name, got)
		}
	}
	// The older gateway is untouched.
	if got := h.routeDests(first); !slices.Contains(got, "192.168.30.0/24") {
		t.Fatalf("the older gateway lost its route: %v", got)
	}
	if f := h.get("first"); !converged(f.Status.Conditions, f.Generation) {
		b, _ := json.Marshal(f.Status.Conditions)
		t.Fatalf("the older gateway is no longer converged: %s", b)
	}
}
