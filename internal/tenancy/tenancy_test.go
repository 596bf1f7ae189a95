package tenancy

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

func member(uid string, age int, tunnels int32, admitted, established bool) Member {
	return Member{Ref: uid, UID: types.UID(uid), Created: metav1.NewTime(time.Unix(int64(1000-age), 0)),
		Usage: v1alpha1.TenantUsage{Gateways: 1, Tunnels: tunnels}, Admitted: admitted, Established: established}
}

func refusedUIDs(r []Refusal) map[types.UID]bool {
	out := map[types.UID]bool{}
	for _, x := range r {
		out[x.UID] = true
	}
	return out
}

// The limits admit the admitted first, then established gateways whose change waits,
// then new ones: a refused edit never lets a newer gateway take its place, and a change
// of one gateway never pushes out another that was admitted.
func TestAdmitOrder(t *testing.T) {
	limits := v1alpha1.TenantUsage{Gateways: 2, Tunnels: 3, RoutedSubnets: 1, Exposures: 1, ReverseExposurePorts: 1}
	// g1 (oldest) grew to 3 tunnels; g2 admitted with 1; g3 new with 1.
	total, refused := Admit(limits, []Member{
		member("g1", 30, 3, false, true),
		member("g2", 20, 1, true, true),
		member("g3", 10, 1, false, false),
	})
	r := refusedUIDs(refused)
	if !r["g1"] || r["g2"] || !r["g3"] {
		t.Fatalf("refused %v, want g1 (its change) and g3 (no room while g1 holds its place)", refused)
	}
	if total.Tunnels != 4 || total.Gateways != 2 {
		t.Fatalf("total %+v: the refused established g1 still holds what it has", total)
	}
	// g1 back to 1 tunnel: it fits again, g3 still does not.
	_, refused = Admit(limits, []Member{
		member("g1", 30, 1, false, true),
		member("g2", 20, 1, true, true),
		member("g3", 10, 1, false, false),
	})
	if r := refusedUIDs(refused); r["g1"] || r["g2"] || !r["g3"] {
		t.Fatalf("refused %v, want only g3", refused)
	}
	// A gateway that never got in, older than an established one whose change waits,
	// does not take the established one's place.
	_, refused = Admit(limits, []Member{
		member("waiting", 40, 1, false, false),
		member("g1", 30, 1, false, true),
		member("g2", 20, 1, true, true),
	})
	if r := refusedUIDs(refused); !r["waiting"] || r["g1"] || r["g2"] {
		t.Fatalf("refused %v, want only the gateway that never got in", refused)
	}
	// Two new gateways, room for one: the older.
	_, refused = Admit(v1alpha1.TenantUsage{Gateways: 1, Tunnels: 9}, []Member{
		member("young", 1, 1, false, false),
		member("old", 5, 1, false, false),
	})
	if r := refusedUIDs(refused); !r["young"] || r["old"] {
		t.Fatalf("refused %v, want the younger", refused)
	}
	// A refused new gateway takes nothing from the ones after it.
	_, refused = Admit(v1alpha1.TenantUsage{Gateways: 5, Tunnels: 3}, []Member{
		member("big", 5, 9, false, false),
		member("small", 1, 1, false, false),
	})
	if r := refusedUIDs(refused); !r["big"] || r["small"] {
		t.Fatalf("refused %v, want only the big one", refused)
	}
}

func TestUsageOf(t *testing.T) {
	s := &v1alpha1.GatewaySpec{
		Tunnels:          []v1alpha1.Tunnel{{Name: "a", Mode: v1alpha1.TunnelModeRouted, Peer: v1alpha1.Peer{Subnets: []string{"10.1.0.0/24", "10.2.0.0/24"}}}, {Name: "b"}},
		Exposures:        []v1alpha1.Exposure{{Name: "x"}, {Name: "y"}, {Name: "z"}},
		ReverseExposures: []v1alpha1.ReverseExposure{{Name: "r", Target: v1alpha1.Target{Ports: []v1alpha1.PortSpec{{Port: 1}, {Port: 2}}}}, {Name: "all"}},
	}
	if u := UsageOf(s, nil); u != (v1alpha1.TenantUsage{Gateways: 1, Tunnels: 2, RoutedSubnets: 2, Exposures: 3, ReverseExposurePorts: 3}) {
		t.Fatalf("usage %+v", u)
	}
	wg := &v1alpha1.WireGuardSpec{Peers: []v1alpha1.WireGuardPeer{{Name: "p"}}}
	if u := UsageOf(&v1alpha1.GatewaySpec{}, wg); u.Tunnels != 1 {
		t.Fatalf("a WireGuard peer counts as a tunnel: %+v", u)
	}
}

func TestPolicyResolution(t *testing.T) {
	pol := func(name string, sel map[string]string) v1alpha1.VPNTenantPolicy {
		return v1alpha1.VPNTenantPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.VPNTenantPolicySpec{
			NamespaceSelector: metav1.LabelSelector{MatchLabels: sel}, RoutedSubnets: []string{"10.40.0.0/16"}}}
	}
	all := []v1alpha1.VPNTenantPolicy{pol("acme", map[string]string{v1alpha1.LabelTenant: "acme"}), pol("b", map[string]string{"x": "y"}), pol("empty", nil)}
	if p := For(all, "n", map[string]string{v1alpha1.LabelTenant: "acme"}); p.Name != "acme" || len(p.RoutedSubnets) != 1 || p.Limits.Gateways != v1alpha1.DefaultTenantGateways {
		t.Fatalf("%+v", p)
	}
	if p := For(all, "n", map[string]string{"other": "1"}); p.Name != "" || len(p.RoutedSubnets) != 0 || p.Describe() != "the strict defaults (no VPNTenantPolicy selects namespace n)" {
		t.Fatalf("a policy with an empty selector must select nothing; got %+v", p)
	}
	if p := For(all, "n", map[string]string{v1alpha1.LabelTenant: "acme", "x": "y"}); p.Conflicting != 2 {
		t.Fatalf("two policies: %+v", p)
	}
}
