package v1alpha1

import (
	"encoding/json"
	"slices"
	"sort"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WithoutAgentFields clears exactly the fields GatewayAgentStatusFields names (the
// operator excludes that list from its writes, the status agent applies it): a status
// with every field set loses those JSON keys and no other.
func TestWithoutAgentFieldsClearsTheAgentsFields(t *testing.T) {
	now := metav1.Now()
	full := GatewayStatus{
		Tunnels: []TunnelState{{Name: "hq"}}, TunnelsReady: "1/1", TunnelsObservedTime: &now,
		InterfacePublicKey: "k", ServiceCIDR: "100.64.1.0/24", FloatingIP: "192.0.2.1", NodeName: "n",
	}
	keys := func(s GatewayStatus) []string {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		var out []string
		for k := range m {
			out = append(out, k)
		}
		sort.Strings(out)
		return out
	}
	before, after := keys(full), keys(full.WithoutAgentFields())
	var cleared []string
	for _, k := range before {
		if !slices.Contains(after, k) {
			cleared = append(cleared, k)
		}
	}
	want := slices.Sorted(slices.Values(GatewayAgentStatusFields))
	if !slices.Equal(cleared, want) {
		t.Fatalf("WithoutAgentFields cleared %v, the agent's fields are %v", cleared, want)
	}
	if len(after) != 3 {
		t.Fatalf("the operator's fields were touched: %v", after)
	}
}

// Both kinds answer through the accessor; a VPNGateway reads as WireGuard only with
// protocol wireguard, with an empty section when the section is missing.
func TestGatewayAccessor(t *testing.T) {
	ip := &IPsecGateway{Spec: GatewaySpec{Tunnels: []Tunnel{{Name: "a"}}}}
	vpn := &VPNGateway{Spec: VPNGatewaySpec{Protocol: VPNProtocolIPsec}}
	wg := &VPNGateway{Spec: VPNGatewaySpec{Protocol: VPNProtocolWireGuard}}
	for _, c := range []struct {
		g    Gateway
		kind string
		wg   bool
	}{{ip, KindIPsecGateway, false}, {vpn, KindVPNGateway, false}, {wg, KindVPNGateway, true}} {
		if c.g.GatewayKind() != c.kind || (c.g.GetWireGuard() != nil) != c.wg {
			t.Errorf("%T: kind %s wireguard %v", c.g, c.g.GatewayKind(), c.g.GetWireGuard() != nil)
		}
		if NewGateway(c.kind).GatewayKind() != c.kind || NewGatewayList(c.kind) == nil {
			t.Errorf("%s: no new object or list", c.kind)
		}
	}
	if ip.GetGatewaySpec() != &ip.Spec || vpn.GetGatewaySpec() != &vpn.Spec.GatewaySpec || wg.GetGatewayStatus() != &wg.Status {
		t.Error("the accessors do not point into the object")
	}
	if NewGateway("ClusterLink") != nil || NewGatewayList("ClusterLink") != nil || IsGatewayKind("ClusterLink") {
		t.Error("a ClusterLink taken for a gateway")
	}
	if got := GatewayConditionTypesFor(true); got[1] != ConditionWireGuardKeyReady || len(got) != len(GatewayPhaseConditionTypes)+1 {
		t.Errorf("WireGuard conditions %v", got)
	}
}
