package gateway

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// The security group's wanted ingress, as pure functions of the spec: these tests need
// no API server and no OpenStack (they run in the unit tier).

func ruleStrings(rs []ruleKey) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.String())
	}
	return out
}

func wantRules(t *testing.T, got []ruleKey, want ...ruleKey) {
	t.Helper()
	w := sortedRules(setOf(want))
	if !slices.Equal(got, w) {
		t.Errorf("ingress rules:\n got  %q\n want %q", ruleStrings(got), ruleStrings(w))
	}
}

func setOf(rs []ruleKey) map[ruleKey]bool {
	m := map[ruleKey]bool{}
	for _, r := range rs {
		m[r] = true
	}
	return m
}

func udp(port int, remote string) ruleKey {
	return ruleKey{Protocol: "udp", Min: port, Max: port, Remote: remote}
}

func TestDesiredIngressRules(t *testing.T) {
	internal := []netip.Prefix{netip.MustParsePrefix("10.250.0.0/16")}
	reverse := []netip.Prefix{netip.MustParsePrefix("10.250.0.0/16"), netip.MustParsePrefix("10.251.0.0/16")}
	tunnel := func(addr string, mode v1alpha1.TunnelMode) v1alpha1.Tunnel {
		return v1alpha1.Tunnel{Name: "t-" + addr, Mode: mode, Peer: v1alpha1.Peer{Address: addr, Subnets: []string{"192.168.10.0/24"}}}
	}
	cases := []struct {
		name string
		spec v1alpha1.GatewaySpec
		want []ruleKey
	}{
		{
			name: "IKE and NAT-T from each peer only, never ESP, never from anywhere",
			spec: v1alpha1.GatewaySpec{Tunnels: []v1alpha1.Tunnel{tunnel("203.0.113.10", ""), tunnel("203.0.113.11", "")}},
			want: []ruleKey{udp(500, "203.0.113.10/32"), udp(4500, "203.0.113.10/32"), udp(500, "203.0.113.11/32"), udp(4500, "203.0.113.11/32")},
		},
		{
			name: "a peer address that is not IPv4 admits nothing",
			spec: v1alpha1.GatewaySpec{Tunnels: []v1alpha1.Tunnel{tunnel("2001:db8::1", ""), tunnel("not-an-address", "")}},
			want: nil,
		},
		{
			name: "two tunnels to one peer admit it once",
			spec: v1alpha1.GatewaySpec{Tunnels: []v1alpha1.Tunnel{tunnel("203.0.113.10", ""), {Name: "second", Peer: v1alpha1.Peer{Address: "203.0.113.10"}}}},
			want: []ruleKey{udp(500, "203.0.113.10/32"), udp(4500, "203.0.113.10/32")},
		},
		{
			name: "a routed tunnel admits every protocol from the internal sources",
			spec: v1alpha1.GatewaySpec{Tunnels: []v1alpha1.Tunnel{tunnel("203.0.113.10", v1alpha1.TunnelModeRouted)}},
			want: []ruleKey{udp(500, "203.0.113.10/32"), udp(4500, "203.0.113.10/32"), {Remote: "10.250.0.0/16"}},
		},
		{
			name: "a reverse exposure's ports from each reverse source (TCP unless named); none listed: every protocol",
			spec: v1alpha1.GatewaySpec{ReverseExposures: []v1alpha1.ReverseExposure{
				{Name: "db", Target: v1alpha1.Target{Address: "192.168.10.5", Ports: []v1alpha1.PortSpec{{Port: 5432}, {Port: 53, Protocol: v1alpha1.ProtocolUDP}}}},
				{Name: "all", Target: v1alpha1.Target{Address: "192.168.10.6"}},
			}},
			want: []ruleKey{
				{Protocol: "tcp", Min: 5432, Max: 5432, Remote: "10.250.0.0/16"}, {Protocol: "tcp", Min: 5432, Max: 5432, Remote: "10.251.0.0/16"},
				udp(53, "10.250.0.0/16"), udp(53, "10.251.0.0/16"),
				{Remote: "10.250.0.0/16"}, {Remote: "10.251.0.0/16"},
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wantRules(t, desiredIngressRules(&c.spec, internal, reverse), c.want...)
		})
	}
}

func TestWireGuardIngressRules(t *testing.T) {
	reverse := []netip.Prefix{netip.MustParsePrefix("10.251.0.0/16")}
	peer := func(name, addr string) v1alpha1.WireGuardPeer {
		p := v1alpha1.WireGuardPeer{Name: name, PublicKey: "k"}
		if addr != "" {
			p.Endpoint = &v1alpha1.WireGuardEndpoint{Address: addr}
		}
		return p
	}
	spec := &v1alpha1.GatewaySpec{ReverseExposures: []v1alpha1.ReverseExposure{
		{Name: "db", Target: v1alpha1.Target{Address: "192.168.10.5", Ports: []v1alpha1.PortSpec{{Port: 5432}}}},
	}}
	db := ruleKey{Protocol: "tcp", Min: 5432, Max: 5432, Remote: "10.251.0.0/16"}

	t.Run("fixed endpoints: the listen port from each endpoint only, no IKE", func(t *testing.T) {
		wg := &v1alpha1.WireGuardSpec{Peers: []v1alpha1.WireGuardPeer{peer("a", "198.51.100.7"), peer("b", "198.51.100.8")}}
		got, note := wireGuardIngressRules(spec, wg, []int32{51820}, reverse)
		wantRules(t, got, udp(51820, "198.51.100.7/32"), udp(51820, "198.51.100.8/32"), db)
		if note != "" {
			t.Errorf("a warning with every endpoint fixed: %q", note)
		}
	})
	t.Run("during a key overlap both slots' ports, from each endpoint", func(t *testing.T) {
		wg := &v1alpha1.WireGuardSpec{Peers: []v1alpha1.WireGuardPeer{peer("a", "198.51.100.7")}}
		got, _ := wireGuardIngressRules(spec, wg, []int32{51821, 51820}, reverse)
		wantRules(t, got, udp(51820, "198.51.100.7/32"), udp(51821, "198.51.100.7/32"), db)
	})
	t.Run("a roaming peer opens the ports to everyone, and the note names it", func(t *testing.T) {
		wg := &v1alpha1.WireGuardSpec{Peers: []v1alpha1.WireGuardPeer{peer("site-a", "198.51.100.7"), peer("laptop", "")}}
		got, note := wireGuardIngressRules(spec, wg, []int32{51820, 51821}, reverse)
		wantRules(t, got, udp(51820, "198.51.100.7/32"), udp(51821, "198.51.100.7/32"),
			udp(51820, "0.0.0.0/0"), udp(51821, "0.0.0.0/0"), db)
		for _, w := range []string{"UDP 51820 and 51821 are open to every source", "laptop"} {
			if !strings.Contains(note, w) {
				t.Errorf("note %q lacks %q", note, w)
			}
		}
		if strings.Contains(note, "site-a") {
			t.Errorf("note names the peer with a fixed endpoint: %q", note)
		}
	})
}
