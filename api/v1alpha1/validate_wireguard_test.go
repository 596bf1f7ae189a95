package v1alpha1

import (
	"net/netip"
	"strings"
	"testing"

	"bnerd.net/vpn-operator/internal/addrpolicy"
)

// Public keys of test peers (valid Curve25519 encodings, never used as secrets).
const (
	testPeerKeyA = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg="
	testPeerKeyB = "TrMvSoP4jYQlY6RIzBgbssQqY3vxI2Pi+y71lOWWXX0="
)

func goodWireGuard() *WireGuardSpec {
	return &WireGuardSpec{
		ListenPort: 51820,
		Peers: []WireGuardPeer{{
			Name:       "hq",
			PublicKey:  testPeerKeyA,
			AllowedIPs: []string{"192.168.10.0/24"},
			Endpoint:   &WireGuardEndpoint{Address: "198.51.100.7", Port: 51820},
		}},
	}
}

func goodWireGuardGateway() VPNGatewaySpec {
	g := goodGateway()
	g.Tunnels = nil
	return VPNGatewaySpec{GatewaySpec: g, Protocol: VPNProtocolWireGuard, WireGuard: goodWireGuard()}
}

func TestWireGuardValidate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(s *VPNGatewaySpec)
		want   string
	}{
		{"good", func(s *VPNGatewaySpec) {}, ""},
		{"roaming peer", func(s *VPNGatewaySpec) { s.WireGuard.Peers[0].Endpoint = nil }, ""},
		{"second peer", func(s *VPNGatewaySpec) {
			s.WireGuard.Peers = append(s.WireGuard.Peers, WireGuardPeer{Name: "branch", PublicKey: testPeerKeyB, AllowedIPs: []string{"192.168.20.0/24"}, PersistentKeepalive: 25})
		}, ""},
		{"no wireguard", func(s *VPNGatewaySpec) { s.WireGuard = nil }, "needs spec.wireguard"},
		{"no peers", func(s *VPNGatewaySpec) { s.WireGuard.Peers = nil }, "name at least one peer"},
		{"tunnels beside peers", func(s *VPNGatewaySpec) { s.Tunnels = goodGateway().Tunnels }, "not spec.tunnels"},
		{"key not base64", func(s *VPNGatewaySpec) { s.WireGuard.Peers[0].PublicKey = "not-a-key" }, "must be a WireGuard key"},
		{"key of 31 bytes", func(s *VPNGatewaySpec) {
			s.WireGuard.Peers[0].PublicKey = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8A=="
		}, "must be a WireGuard key"},
		{"duplicate key", func(s *VPNGatewaySpec) {
			s.WireGuard.Peers = append(s.WireGuard.Peers, WireGuardPeer{Name: "branch", PublicKey: testPeerKeyA, AllowedIPs: []string{"192.168.20.0/24"}})
		}, "WireGuard tells peers apart by their key"},
		{"duplicate name", func(s *VPNGatewaySpec) {
			s.WireGuard.Peers = append(s.WireGuard.Peers, WireGuardPeer{Name: "hq", PublicKey: testPeerKeyB, AllowedIPs: []string{"192.168.20.0/24"}})
		}, "Duplicate value"},
		{"overlapping allowed IPs", func(s *VPNGatewaySpec) {
			s.WireGuard.Peers = append(s.WireGuard.Peers, WireGuardPeer{Name: "branch", PublicKey: testPeerKeyB, AllowedIPs: []string{"192.168.10.128/25"}})
		}, "WireGuard routes each address to exactly one peer"},
		{"allowed IPs host bits", func(s *VPNGatewaySpec) { s.WireGuard.Peers[0].AllowedIPs = []string{"192.168.10.1/24"} }, "host bits"},
		{"allowed IPs default route", func(s *VPNGatewaySpec) { s.WireGuard.Peers[0].AllowedIPs = []string{"0.0.0.0/0"} }, "would send everything"},
		{"endpoint inside allowed IPs", func(s *VPNGatewaySpec) { s.WireGuard.Peers[0].Endpoint.Address = "192.168.10.1" }, "contains the peer's own endpoint"},
		{"endpoint not IPv4", func(s *VPNGatewaySpec) { s.WireGuard.Peers[0].Endpoint.Address = "2001:db8::1" }, "must be an IPv4 address"},
		{"endpoint is the metadata service", func(s *VPNGatewaySpec) { s.WireGuard.Peers[0].Endpoint.Address = "169.254.169.254" }, "is a special-purpose address"},
		{"bad keepalive", func(s *VPNGatewaySpec) { s.WireGuard.Peers[0].PersistentKeepalive = 70000 }, "persistentKeepalive"},
		{"bad listen port", func(s *VPNGatewaySpec) { s.WireGuard.ListenPort = 70000 }, "listenPort"},
		{"reverse exposure behind a peer", func(s *VPNGatewaySpec) { s.ReverseExposures[0].Target.Address = "192.168.10.9" }, ""},
		{"reverse exposure outside the peer", func(s *VPNGatewaySpec) { s.ReverseExposures[0].Target.Address = "10.9.9.9" }, "not inside any peer subnet"},
		{"reverse exposure names no peer", func(s *VPNGatewaySpec) { s.ReverseExposures[0].Tunnel = "nope" }, "spec.reverseExposures[0].tunnel: Not found"},
		{"exposure target behind a peer", func(s *VPNGatewaySpec) { s.Exposures[0].Target.Address = "192.168.10.9" }, "lies in the client's subnet"},
		{"allowed IPs at the metadata service", func(s *VPNGatewaySpec) { s.WireGuard.Peers[0].AllowedIPs = []string{"169.254.169.254/32"} }, "special-purpose range"},
		{"allowed IPs over loopback", func(s *VPNGatewaySpec) { s.WireGuard.Peers[0].AllowedIPs = []string{"127.0.0.0/8"} }, "special-purpose range"},
		{"exposure target at the metadata service", func(s *VPNGatewaySpec) { s.Exposures[0].Target.Address = "169.254.169.254" }, "special-purpose address"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := goodWireGuardGateway()
			tc.mutate(&s)
			checkErrs(t, s.Validate(), tc.want)
		})
	}
}

// The operator's address policy reaches a WireGuard gateway's peers as it reaches
// tunnels' subnets.
func TestWireGuardValidateAddresses(t *testing.T) {
	pol := addrpolicy.Policy{ServiceCIDRPool: netip.MustParsePrefix("100.64.0.0/16")}
	wg := goodWireGuard()
	if errs := wg.ValidateAddresses(pol); len(errs) != 0 {
		t.Fatalf("good peers refused: %v", errs.ToAggregate())
	}
	wg.Peers[0].AllowedIPs = []string{"192.168.10.0/24", "100.64.9.0/24"}
	errs := wg.ValidateAddresses(pol)
	if got := errs.ToAggregate(); got == nil || !strings.Contains(got.Error(), "spec.wireguard.peers[0].allowedIPs[1]") || !strings.Contains(got.Error(), "overlaps the service-CIDR pool") {
		t.Fatalf("an allowed IP in the pool: %v", got)
	}
	if errs := (*WireGuardSpec)(nil).ValidateAddresses(pol); len(errs) != 0 {
		t.Fatalf("no WireGuard section: %v", errs)
	}
}

func TestWireGuardDefaults(t *testing.T) {
	if got := WireGuardListenPort(nil); got != 51820 {
		t.Fatalf("listen port default %d", got)
	}
	if got := WireGuardListenPort(&WireGuardSpec{ListenPort: 443}); got != 443 {
		t.Fatalf("listen port %d", got)
	}
	if got := WireGuardEndpointPort(&WireGuardEndpoint{Address: "198.51.100.7"}); got != 51820 {
		t.Fatalf("endpoint port default %d", got)
	}
}

// The two key slots' ports: the listen port and the one after it, the one before it at
// the top of the range, never the same.
func TestWireGuardKeyPort(t *testing.T) {
	for _, c := range []struct{ listen, slot0, slot1 int32 }{{0, 51820, 51821}, {51820, 51820, 51821}, {1, 1, 2}, {65535, 65535, 65534}} {
		wg := &WireGuardSpec{ListenPort: c.listen}
		if a, b := WireGuardKeyPort(wg, 0), WireGuardKeyPort(wg, 1); a != c.slot0 || b != c.slot1 {
			t.Errorf("listen port %d: slots %d and %d, want %d and %d", c.listen, a, b, c.slot0, c.slot1)
		}
	}
}
