package v1alpha1

import (
	"testing"
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
		{"bad keepalive", func(s *VPNGatewaySpec) { s.WireGuard.Peers[0].PersistentKeepalive = 70000 }, "persistentKeepalive"},
		{"bad listen port", func(s *VPNGatewaySpec) { s.WireGuard.ListenPort = 70000 }, "listenPort"},
		{"reverse exposure behind a peer", func(s *VPNGatewaySpec) { s.ReverseExposures[0].Target.Address = "192.168.10.9" }, ""},
		{"reverse exposure outside the peer", func(s *VPNGatewaySpec) { s.ReverseExposures[0].Target.Address = "10.9.9.9" }, "not inside any peer subnet"},
		{"reverse exposure names no peer", func(s *VPNGatewaySpec) { s.ReverseExposures[0].Tunnel = "nope" }, "spec.reverseExposures[0].tunnel: Not found"},
		{"exposure target behind a peer", func(s *VPNGatewaySpec) { s.Exposures[0].Target.Address = "192.168.10.9" }, "lies in the client's subnet"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := goodWireGuardGateway()
			tc.mutate(&s)
			checkErrs(t, s.Validate(), tc.want)
		})
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
