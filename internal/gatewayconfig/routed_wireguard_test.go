package gatewayconfig

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// Public keys for tests (valid encodings; nobody holds their private halves).
const (
	testGatewayKey = "yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk="
	testPeerKeyA   = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg="
	testPeerKeyB   = "TrMvSoP4jYQlY6RIzBgbssQqY3vxI2Pi+y71lOWWXX0="
)

func routedInput() Input {
	in := sampleInput()
	in.Spec.Tunnels[1].Mode = v1alpha1.TunnelModeRouted
	in.InternalSources = []netip.Prefix{netip.MustParsePrefix("10.254.0.0/24"), netip.MustParsePrefix("10.250.0.0/16")}
	return in
}

func TestRoutedTunnel(t *testing.T) {
	cfg, err := Build(routedInput())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tunnels[1].Mode != ModeRouted || cfg.Tunnels[0].Mode != "" {
		t.Fatalf("modes: %q %q", cfg.Tunnels[0].Mode, cfg.Tunnels[1].Mode)
	}
	if want := []string{"10.254.0.0/24", "10.250.0.0/16"}; !reflect.DeepEqual(cfg.InternalSources, want) {
		t.Fatalf("internal sources %v, want %v", cfg.InternalSources, want)
	}
	sw, err := RenderSwanctl(cfg)
	if err != nil {
		t.Fatal(err)
	}
	root, err := ParseSettings(sw)
	if err != nil {
		t.Fatal(err)
	}
	ts := func(conn string) string {
		v, _ := root.Sub("connections").Sub(conn).Sub("children").Sub(conn).Get("local_ts")
		return v
	}
	// The routed tunnel's child covers the fabric's real addresses; the snat tunnel's
	// only the virtual IPs.
	if got := ts("branch"); got != "100.64.3.0/24,10.254.0.0/24,10.250.0.0/16" {
		t.Errorf("routed local_ts %q", got)
	}
	if got := ts("hq"); got != "100.64.3.0/24" {
		t.Errorf("snat local_ts %q", got)
	}
	m, err := NATModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m.RoutedSubnets, []string{"172.16.5.0/24"}) || !reflect.DeepEqual(m.InternalSources, []string{"10.250.0.0/16", "10.254.0.0/24"}) {
		t.Errorf("NAT model routed %v internal %v", m.RoutedSubnets, m.InternalSources)
	}
	// Round trip through the ConfigMap format.
	back, err := Unmarshal(mustMarshal(t, cfg))
	if err != nil || !reflect.DeepEqual(back, cfg) {
		t.Fatalf("round trip: %v", err)
	}

	// Without routed tunnels nothing of it is rendered: IPsec configs stay as they were.
	plain, err := Build(sampleInput())
	if err != nil {
		t.Fatal(err)
	}
	if plain.InternalSources != nil || strings.Contains(string(mustMarshal(t, plain)), "internalSources") || strings.Contains(string(mustMarshal(t, plain)), "\"mode\"") {
		t.Error("an snat-only config carries routed-mode fields")
	}
}

func TestRoutedTunnelWithoutInternalSources(t *testing.T) {
	in := routedInput()
	in.InternalSources = nil
	cfg, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NATModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Fail closed: the routed subnets are known (no SNAT), but nothing is allowed to
	// reach them by its real address.
	if len(m.InternalSources) != 0 || len(m.RoutedSubnets) != 1 {
		t.Fatalf("model %+v", m)
	}
}

func wireguardInput() Input {
	in := sampleInput()
	in.Kind = v1alpha1.KindVPNGateway
	in.Spec.Tunnels = nil
	in.WireGuard = &v1alpha1.WireGuardSpec{ListenPort: 51820, Peers: []v1alpha1.WireGuardPeer{
		{Name: "hq", PublicKey: testPeerKeyA, AllowedIPs: []string{"192.168.10.0/24", "192.168.20.0/24"}, Endpoint: &v1alpha1.WireGuardEndpoint{Address: "198.51.100.7"}},
		{Name: "branch", PublicKey: testPeerKeyB, AllowedIPs: []string{"172.16.5.0/24"}, PersistentKeepalive: 25},
	}}
	in.Status.WireGuard = &v1alpha1.WireGuardStatus{PublicKey: testGatewayKey}
	return in
}

func TestWireGuardConfig(t *testing.T) {
	cfg, err := Build(wireguardInput())
	if err != nil {
		t.Fatal(err)
	}
	js := mustMarshal(t, cfg)
	golden(t, "gateway-wireguard.json.golden", string(js))
	if cfg.Protocol != ProtocolWireGuard || len(cfg.Tunnels) != 0 {
		t.Fatalf("protocol %q tunnels %d", cfg.Protocol, len(cfg.Tunnels))
	}
	if got := cfg.WireGuard.Peers[0].Endpoint(); got != "198.51.100.7:51820" {
		t.Errorf("endpoint %q", got)
	}
	if got := cfg.WireGuard.Peers[1].Endpoint(); got != "" {
		t.Errorf("roaming peer endpoint %q", got)
	}
	if got := ConnectionNames(cfg); !reflect.DeepEqual(got, []string{"branch", "hq"}) {
		t.Errorf("names %v", got)
	}
	if got := cfg.PeerEndpoints(); !reflect.DeepEqual(got, []string{"198.51.100.7"}) {
		t.Errorf("endpoints %v", got)
	}
	m, err := NATModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The guard's set holds every peer's allowed IPs.
	if want := []string{"172.16.5.0/24", "192.168.10.0/24", "192.168.20.0/24"}; !reflect.DeepEqual(m.PeerSubnets, want) {
		t.Errorf("peer subnets %v, want %v", m.PeerSubnets, want)
	}
	if len(m.ReverseAll) != 1 || len(m.ReversePorts) != 1 {
		t.Errorf("reverse exposures behind WireGuard peers missing: %+v", m)
	}
	back, err := Unmarshal(js)
	if err != nil || !reflect.DeepEqual(back, cfg) {
		t.Fatalf("round trip: %v", err)
	}
	// The private key is never part of the configuration.
	if strings.Contains(strings.ToLower(string(js)), "private") {
		t.Error("config mentions a private key")
	}
}

// testRotatedKey stands for a key a rotation replaced.
const testRotatedKey = "4Bbp0Dk4D9vXkoG6lKSLNt7y1D5emyI4bGJx2mItSX4="

// rotated gives in's status a rotation's overlap: the current key on port cur, prev on
// port old.
func rotated(in *Input, prev string, cur, old int32) {
	in.Status.WireGuard.ListenPort = cur
	in.Status.WireGuard.PreviousPublicKey, in.Status.WireGuard.PreviousListenPort = prev, old
}

// During a key rotation's overlap the config serves the current key on its slot's port
// and device, and the previous key on the other's; the slot follows the published port.
func TestWireGuardConfigRotation(t *testing.T) {
	in := wireguardInput()
	rotated(&in, testRotatedKey, 51821, 51820)
	cfg, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	w := cfg.WireGuard
	if w.ListenPort != 51821 || w.Interface != "wg1" || w.Previous == nil || *w.Previous != (WireGuardKey{PublicKey: testRotatedKey, ListenPort: 51820, Interface: "wg0"}) {
		t.Fatalf("rotated config %+v previous %+v", w, w.Previous)
	}
	// The next rotation goes back to slot 0.
	in = wireguardInput()
	rotated(&in, testRotatedKey, 51820, 51821)
	if cfg, err = Build(in); err != nil || cfg.WireGuard.Interface != "wg0" || cfg.WireGuard.Previous.Interface != "wg1" {
		t.Fatalf("second rotation: %+v %v", cfg.WireGuard, err)
	}
	// A config naming a device that is no key slot's is refused.
	cfg.WireGuard.Previous.Interface = "eth0"
	if err := Validate(cfg); !errors.Is(err, ErrInvalid) {
		t.Errorf("previous key on eth0: %v", err)
	}
}

func TestWireGuardConfigErrors(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(in *Input)
		want   error
		substr string
	}{
		{"no public key yet", func(in *Input) { in.Status.WireGuard = nil }, ErrIncomplete, "status.wireguard.publicKey"},
		{"bad gateway key", func(in *Input) { in.Status.WireGuard.PublicKey = "x" }, ErrInvalid, "public key"},
		{"peer with the gateway's key", func(in *Input) { in.WireGuard.Peers[0].PublicKey = testGatewayKey }, ErrInvalid, "gateway's own public key"},
		{"shared key", func(in *Input) { in.WireGuard.Peers[1].PublicKey = testPeerKeyA }, ErrInvalid, "share a public key"},
		{"injected key", func(in *Input) { in.WireGuard.Peers[0].PublicKey = "a\nb" }, ErrInvalid, "not a WireGuard key"},
		{"overlapping allowed IPs", func(in *Input) { in.WireGuard.Peers[1].AllowedIPs = []string{"192.168.0.0/16"} }, ErrInvalid, "overlap"},
		{"allowed IP over the service CIDR", func(in *Input) { in.WireGuard.Peers[1].AllowedIPs = []string{"100.64.3.0/25"} }, ErrInvalid, "overlaps the service CIDR"},
		{"endpoint inside allowed IPs", func(in *Input) { in.WireGuard.Peers[0].Endpoint.Address = "192.168.10.9" }, ErrInvalid, "inside its allowed IP"},
		{"endpoint at loopback", func(in *Input) { in.WireGuard.Peers[0].Endpoint.Address = "127.0.0.1" }, ErrInvalid, "loopback"},
		{"endpoint in the pool", func(in *Input) { in.WireGuard.Peers[0].Endpoint.Address = "100.64.3.99" }, ErrInvalid, "service-CIDR pool"},
		{"allowed IP at the metadata service", func(in *Input) { in.WireGuard.Peers[1].AllowedIPs = []string{"169.254.169.254/32"} }, ErrInvalid, "special-purpose range"},
		{"allowed IP in the pool", func(in *Input) {
			in.ServiceCIDRPool = netip.MustParsePrefix("100.64.0.0/16")
			in.WireGuard.Peers[1].AllowedIPs = []string{"100.64.9.0/24"}
		}, ErrInvalid, "service-CIDR pool"},
		{"reverse exposure outside the peer", func(in *Input) { in.Spec.ReverseExposures[0].Tunnel = "branch" }, ErrInvalid, "not inside"},
		{"reverse exposure names no peer", func(in *Input) { in.Spec.ReverseExposures[0].Tunnel = "nope" }, ErrInvalid, "unknown tunnel"},
		{"previous key is the current one", func(in *Input) { rotated(in, testGatewayKey, 51821, 51820) }, ErrInvalid, "previous public key is the current one"},
		{"previous key is a peer's", func(in *Input) { rotated(in, testPeerKeyA, 51821, 51820) }, ErrInvalid, "gateway's own public key"},
		{"previous key on the current port", func(in *Input) { rotated(in, testRotatedKey, 51821, 51821) }, ErrInvalid, "the current key's"},
		{"bad previous key", func(in *Input) { rotated(in, "x", 51821, 51820) }, ErrInvalid, "previous public key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := wireguardInput()
			c.mutate(&in)
			_, err := Build(in)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.substr) {
				t.Errorf("error %q does not mention %q", err, c.substr)
			}
		})
	}
	// A hand-made config mixing both protocols is refused by the agent's Unmarshal.
	cfg, err := Build(wireguardInput())
	if err != nil {
		t.Fatal(err)
	}
	mixed := *cfg
	mixed.Tunnels = []Tunnel{{Name: "x"}}
	if err := Validate(&mixed); !errors.Is(err, ErrInvalid) {
		t.Errorf("tunnels beside wireguard: %v", err)
	}
	ipsec, _ := Build(sampleInput())
	ipsec.WireGuard = cfg.WireGuard
	if err := Validate(ipsec); !errors.Is(err, ErrInvalid) {
		t.Errorf("wireguard section without the protocol: %v", err)
	}
}

func TestOutermost(t *testing.T) {
	got := outermost([]string{"10.254.0.0/24", "10.0.0.0/8", "10.0.0.0/8", "192.168.0.0/24", "192.168.1.0/24", "192.168.0.0/23"})
	if want := []string{"10.0.0.0/8", "192.168.0.0/23"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("outermost = %v, want %v", got, want)
	}
}
