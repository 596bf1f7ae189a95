package v1alpha1_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// Test peers' public keys (valid Curve25519 encodings).
const (
	peerKeyA = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg="
	peerKeyB = "TrMvSoP4jYQlY6RIzBgbssQqY3vxI2Pi+y71lOWWXX0="
)

func goodWireGuardSpec() v1alpha1.VPNGatewaySpec {
	g := goodGatewaySpec()
	g.Tunnels = nil
	return v1alpha1.VPNGatewaySpec{GatewaySpec: g, Protocol: v1alpha1.VPNProtocolWireGuard, WireGuard: &v1alpha1.WireGuardSpec{
		Peers: []v1alpha1.WireGuardPeer{{
			Name: "hq", PublicKey: peerKeyA, AllowedIPs: []string{"192.168.10.0/24"},
			Endpoint: &v1alpha1.WireGuardEndpoint{Address: "198.51.100.7"},
		}},
	}}
}

// TestWireGuardAdmission creates VPNGateways with protocol wireguard on the real API
// server: the good one is accepted with its defaults, each bad one refused with its
// message.
func TestWireGuardAdmission(t *testing.T) {
	testenv.Need(t)
	ctx := context.Background()
	cases := []struct {
		name   string
		mutate func(s *v1alpha1.VPNGatewaySpec)
		want   string
	}{
		{"good", func(s *v1alpha1.VPNGatewaySpec) {}, ""},
		{"roaming peer with keepalive", func(s *v1alpha1.VPNGatewaySpec) {
			s.WireGuard.Peers[0].Endpoint = nil
			s.WireGuard.Peers[0].PersistentKeepalive = 25
		}, ""},
		{"tunnels beside peers", func(s *v1alpha1.VPNGatewaySpec) { s.Tunnels = goodGatewaySpec().Tunnels }, "protocol wireguard needs spec.wireguard (its peers) and no spec.tunnels"},
		{"peers with protocol ipsec", func(s *v1alpha1.VPNGatewaySpec) {
			s.Protocol = v1alpha1.VPNProtocolIPsec
			s.Tunnels = goodGatewaySpec().Tunnels
		}, "protocol ipsec needs spec.tunnels and no spec.wireguard"},
		{"no peers", func(s *v1alpha1.VPNGatewaySpec) { s.WireGuard.Peers = []v1alpha1.WireGuardPeer{} }, "spec.wireguard.peers"},
		{"key not a key", func(s *v1alpha1.VPNGatewaySpec) { s.WireGuard.Peers[0].PublicKey = "hq\n}" }, "spec.wireguard.peers[0].publicKey"},
		{"duplicate keys", func(s *v1alpha1.VPNGatewaySpec) {
			s.WireGuard.Peers = append(s.WireGuard.Peers, v1alpha1.WireGuardPeer{Name: "br", PublicKey: peerKeyA, AllowedIPs: []string{"192.168.20.0/24"}})
		}, "peer public keys must be unique"},
		{"allowed IP with host bits", func(s *v1alpha1.VPNGatewaySpec) { s.WireGuard.Peers[0].AllowedIPs = []string{"192.168.10.1/24"} }, "each allowed IP must be an IPv4 network"},
		{"endpoint not an address", func(s *v1alpha1.VPNGatewaySpec) { s.WireGuard.Peers[0].Endpoint.Address = "peer.example" }, "endpoint.address must be an IPv4 address"},
		{"endpoint is the metadata service", func(s *v1alpha1.VPNGatewaySpec) { s.WireGuard.Peers[0].Endpoint.Address = "169.254.169.254" }, "endpoint.address must not be a special-purpose address"},
		{"endpoint is loopback", func(s *v1alpha1.VPNGatewaySpec) { s.WireGuard.Peers[0].Endpoint.Address = "127.0.0.2" }, "endpoint.address must not be a special-purpose address"},
		{"endpoint is unspecified", func(s *v1alpha1.VPNGatewaySpec) { s.WireGuard.Peers[0].Endpoint.Address = "0.0.0.0" }, "endpoint.address must not be a special-purpose address"},
		{"endpoint is multicast", func(s *v1alpha1.VPNGatewaySpec) { s.WireGuard.Peers[0].Endpoint.Address = "224.0.0.9" }, "endpoint.address must not be a special-purpose address"},
		{"endpoint in private space", func(s *v1alpha1.VPNGatewaySpec) { s.WireGuard.Peers[0].Endpoint.Address = "172.16.5.5" }, ""},
		{"listen port out of range", func(s *v1alpha1.VPNGatewaySpec) { s.WireGuard.ListenPort = 70000 }, "spec.wireguard.listenPort"},
		{"reverse exposure behind a peer", func(s *v1alpha1.VPNGatewaySpec) {}, ""},
		{"reverse exposure names no peer", func(s *v1alpha1.VPNGatewaySpec) { s.ReverseExposures[0].Tunnel = "x" }, "a peer listed in spec.wireguard.peers"},
		{"second peer", func(s *v1alpha1.VPNGatewaySpec) {
			s.WireGuard.Peers = append(s.WireGuard.Peers, v1alpha1.WireGuardPeer{Name: "br", PublicKey: peerKeyB, AllowedIPs: []string{"192.168.20.0/24"}})
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gw := &v1alpha1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Name: name("wg"), Namespace: ns}, Spec: goodWireGuardSpec()}
			tc.mutate(&gw.Spec)
			err := env.Client.Create(ctx, gw)
			expectAdmission(t, err, tc.want)
			if err != nil || tc.name != "good" {
				return
			}
			if gw.Spec.WireGuard.ListenPort != 51820 || gw.Spec.WireGuard.Peers[0].Endpoint.Port != 51820 {
				t.Fatalf("defaults not applied: %+v", gw.Spec.WireGuard)
			}
		})
	}
}

// The WireGuard and routed-mode examples are accepted by the real API server and by
// Validate.
func TestNewExamplesAdmitted(t *testing.T) {
	testenv.Need(t)
	ctx := context.Background()
	for _, tc := range []struct {
		file string
		obj  client.Object
	}{
		{"vpngateway-wireguard.yaml", &v1alpha1.VPNGateway{}},
		{"ipsecgateway-routed.yaml", &v1alpha1.IPsecGateway{}},
	} {
		b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "examples", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(b, tc.obj); err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		tc.obj.SetNamespace(ns)
		tc.obj.SetName(name("example"))
		if err := env.Client.Create(ctx, tc.obj); err != nil {
			t.Fatalf("%s refused: %v", tc.file, err)
		}
		var errs field.ErrorList
		switch o := tc.obj.(type) {
		case *v1alpha1.VPNGateway:
			errs = o.Spec.Validate()
		case *v1alpha1.IPsecGateway:
			errs = o.Spec.Validate()
		}
		if len(errs) != 0 {
			t.Errorf("%s: %v", tc.file, errs.ToAggregate())
		}
	}
}
