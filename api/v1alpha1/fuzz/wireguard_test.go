package fuzz

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// Two client keys as `wg pubkey` prints them (any 32 bytes are a Curve25519 public key).
const (
	keyA = "AAsWISw3Qk1YY255hI+apbC7xtHc5/L9CBMeKTQ/SlU="
	keyB = "JTA7RlFcZ3J9iJOeqbS/ytXg6/YBDBciLThDTllkb3o="
)

func goodWireGuardGateway() v1alpha1.VPNGatewaySpec {
	return v1alpha1.VPNGatewaySpec{
		Protocol: v1alpha1.VPNProtocolWireGuard,
		WireGuard: &v1alpha1.WireGuardSpec{
			ListenPort: 51820,
			Peers: []v1alpha1.WireGuardPeer{
				{Name: "hq", PublicKey: keyA, AllowedIPs: []string{"192.168.10.0/24", "192.168.11.0/24"},
					Endpoint: &v1alpha1.WireGuardEndpoint{Address: "198.51.100.7", Port: 51820}, PersistentKeepalive: 25},
				{Name: "roamer", PublicKey: keyB, AllowedIPs: []string{"10.20.0.0/16"}},
			},
		},
		GatewaySpec: v1alpha1.GatewaySpec{
			Exposures: []v1alpha1.Exposure{{
				Name:   "web",
				Target: v1alpha1.Target{Address: "10.250.0.20", Ports: []v1alpha1.PortSpec{{Port: 443, Protocol: v1alpha1.ProtocolTCP}}},
			}},
			ReverseExposures: []v1alpha1.ReverseExposure{{
				Name: "erp", Tunnel: "hq",
				Target: v1alpha1.Target{Address: "192.168.10.5", Ports: []v1alpha1.PortSpec{{Port: 8443}}},
			}},
		},
	}
}

// crdKeyPattern returns the pattern the VPNGateway CRD's schema puts on a WireGuard peer's
// publicKey: the API server refuses what it does not match before Validate runs, and
// Validate repeats the check for objects that predate the schema, so the two must agree.
func crdKeyPattern(f *testing.F) *regexp.Regexp {
	f.Helper()
	raw, err := os.ReadFile("../../../config/crd/ipsec.bnerd.net_vpngateways.yaml")
	if err != nil {
		f.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	var found []string
	for i, l := range lines {
		if strings.TrimSpace(l) != "publicKey:" {
			continue
		}
		// The key's own properties are indented below it, up to the next key at its level.
		indent := len(l) - len(strings.TrimLeft(l, " "))
		for _, m := range lines[i+1:] {
			if strings.TrimSpace(m) != "" && len(m)-len(strings.TrimLeft(m, " ")) <= indent {
				break
			}
			if v, ok := strings.CutPrefix(strings.TrimSpace(m), "pattern: "); ok {
				found = append(found, v)
			}
		}
	}
	if len(found) != 1 {
		f.Fatalf("found %d publicKey patterns in the VPNGateway CRD, want the peers' one: %q", len(found), found)
	}
	return regexp.MustCompile(found[0])
}

// FuzzVPNGatewayValidate feeds arbitrary JSON-decoded VPNGateway specs to Validate. It
// must never panic, never change the spec, and give the same answer twice. With protocol
// ipsec (or none) and no wireguard section it must answer exactly as an IPsecGateway's
// Validate. For every WireGuard peer it must refuse the public key exactly when the CRD's
// pattern does. Whatever it accepts with protocol wireguard must, by rules restated here
// independently: have no IPsec tunnels and at least one peer; listen on a UDP port (the
// default when unset); give each peer a DNS-label name and a key of 32 bytes in canonical
// base64, both unique; keep each endpoint an IPv4 address outside the special-purpose
// ranges with a port in range and no two peers on one endpoint; give each peer allowed IPs
// that are IPv4 networks without host bits, not the default route, outside the
// special-purpose ranges, not holding the peer's own endpoint and overlapping no other
// allowed IP of any peer (WireGuard routes each address to one peer); a keepalive in range;
// no exposure target in a peer's networks, and each reverse exposure's target inside the
// networks of the peer it names.
func FuzzVPNGatewayValidate(f *testing.F) {
	keyPattern := crdKeyPattern(f)
	gs := goodWireGuardGateway()
	if errs := gs.Validate(); len(errs) != 0 {
		f.Fatalf("the good WireGuard gateway is refused: %v", errs)
	}
	good, _ := json.Marshal(gs)
	f.Add(good)
	f.Add([]byte(`{"protocol":"wireguard","wireguard":{"peers":[{"name":"a","publicKey":"` + keyA + `","allowedIPs":["10.0.0.0/8"]}]}}`))
	f.Add([]byte(`{"protocol":"wireguard","wireguard":{"listenPort":-1,"peers":[{"name":"a","publicKey":"` + keyA[:43] + `B","allowedIPs":["169.254.0.0/16"],"endpoint":{"address":"169.254.169.254","port":70000}}]}}`))
	f.Add([]byte(`{"protocol":"ipsec","tunnels":[{"name":"a","peer":{"address":"1.2.3.4","subnets":["10.0.0.0/8"]},"preSharedKey":{"name":"s"}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var s v1alpha1.VPNGatewaySpec
		if err := json.Unmarshal(data, &s); err != nil {
			return
		}
		before := s.DeepCopy()
		errs := s.Validate()
		if !reflect.DeepEqual(before, &s) {
			t.Fatalf("Validate changed the spec:\n%+v\n%+v", before, &s)
		}
		if again := s.Validate(); text(errs) != text(again) {
			t.Fatalf("Validate answered differently twice: %v, then %v", errs, again)
		}
		if (s.Protocol == "" || s.Protocol == v1alpha1.VPNProtocolIPsec) && s.WireGuard == nil {
			ipsec := s.GatewaySpec.Validate()
			if text(errs) != text(ipsec) {
				t.Fatalf("protocol %q answers %v, an IPsecGateway with the same spec %v", s.Protocol, errs, ipsec)
			}
		}
		if s.Protocol == v1alpha1.VPNProtocolWireGuard && s.WireGuard != nil {
			for i, p := range s.WireGuard.Peers {
				path := fmt.Sprintf("spec.wireguard.peers[%d].publicKey", i)
				refused := false
				for _, e := range errs {
					refused = refused || (e.Field == path && e.Type == field.ErrorTypeInvalid)
				}
				if refused == keyPattern.MatchString(p.PublicKey) {
					t.Fatalf("peer key %q: Validate refuses it %v, the CRD pattern %s matches it %v", p.PublicKey, refused, keyPattern, !refused)
				}
			}
		}
		if len(errs) != 0 {
			return
		}
		switch s.Protocol {
		case "", v1alpha1.VPNProtocolIPsec:
			if s.WireGuard != nil {
				t.Fatal("accepted a wireguard section with protocol ipsec")
			}
			return
		case v1alpha1.VPNProtocolWireGuard:
		default:
			t.Fatalf("accepted protocol %q", s.Protocol)
		}
		checkAcceptedWireGuard(t, &s)
	})
}

// TestVPNGatewaySeedCorpus keeps the committed corpus honest: each seed is the good
// gateway with one fault, named for it, or a valid variant named valid-*. A seed meant
// to be refused that Validate accepts would leave its rule unexercised.
func TestVPNGatewaySeedCorpus(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzVPNGatewayValidate", "*"))
	if err != nil || len(files) < 30 {
		t.Fatalf("%d seeds: %v", len(files), err)
	}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
		if len(lines) != 2 || lines[0] != "go test fuzz v1" || !strings.HasPrefix(lines[1], "[]byte(") {
			t.Fatalf("%s is not a one-value corpus entry", file)
		}
		data, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var s v1alpha1.VPNGatewaySpec
		if err := json.Unmarshal([]byte(data), &s); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		errs := s.Validate()
		if valid := strings.HasPrefix(filepath.Base(file), "valid-"); valid != (len(errs) == 0) {
			t.Errorf("%s: Validate says %v", filepath.Base(file), errs)
		}
	}
}

// text is the error list as one string ("" for none).
func text(errs field.ErrorList) string {
	if agg := errs.ToAggregate(); agg != nil {
		return agg.Error()
	}
	return ""
}

func checkAcceptedWireGuard(t *testing.T, s *v1alpha1.VPNGatewaySpec) {
	t.Helper()
	special := func(a netip.Addr) bool {
		for _, p := range specialRanges {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	wg := s.WireGuard
	if wg == nil || len(wg.Peers) == 0 || len(s.Tunnels) != 0 {
		t.Fatalf("accepted a WireGuard gateway with %d tunnels and wireguard %+v", len(s.Tunnels), wg)
	}
	if wg.ListenPort < 0 || wg.ListenPort > 65535 {
		t.Fatalf("accepted listen port %d", wg.ListenPort)
	}
	if p := v1alpha1.WireGuardListenPort(wg); p < 1 || p > 65535 {
		t.Fatalf("effective listen port %d", p)
	}
	label := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	names, keys, endpoints := map[string]bool{}, map[string]bool{}, map[string]bool{}
	type net struct {
		peer string
		p    netip.Prefix
	}
	var nets []net
	for _, p := range wg.Peers {
		if !label.MatchString(p.Name) || len(p.Name) > 32 || names[p.Name] {
			t.Fatalf("accepted peer name %q (unique DNS label of at most 32 characters)", p.Name)
		}
		names[p.Name] = true
		b, err := base64.StdEncoding.DecodeString(p.PublicKey)
		if err != nil || len(b) != 32 || base64.StdEncoding.EncodeToString(b) != p.PublicKey || keys[string(b)] {
			t.Fatalf("accepted peer key %q (unique, 32 bytes in canonical base64)", p.PublicKey)
		}
		keys[string(b)] = true
		if p.PersistentKeepalive < 0 || p.PersistentKeepalive > 65535 {
			t.Fatalf("accepted persistent keepalive %d", p.PersistentKeepalive)
		}
		var ep netip.Addr
		if p.Endpoint != nil {
			a, err := netip.ParseAddr(p.Endpoint.Address)
			if err != nil || !a.Is4() || special(a) {
				t.Fatalf("accepted endpoint address %q", p.Endpoint.Address)
			}
			if p.Endpoint.Port < 0 || p.Endpoint.Port > 65535 {
				t.Fatalf("accepted endpoint port %d", p.Endpoint.Port)
			}
			port := p.Endpoint.Port
			if port == 0 {
				port = v1alpha1.DefaultWireGuardListenPort
			}
			key := netip.AddrPortFrom(a, uint16(port)).String()
			if endpoints[key] {
				t.Fatalf("accepted two peers on endpoint %s", key)
			}
			endpoints[key] = true
			ep = a
		}
		if len(p.AllowedIPs) == 0 {
			t.Fatalf("accepted peer %s without allowed IPs", p.Name)
		}
		for _, sn := range p.AllowedIPs {
			pfx, err := netip.ParsePrefix(sn)
			if err != nil || !pfx.Addr().Is4() || pfx.Masked() != pfx || pfx.Bits() == 0 {
				t.Fatalf("accepted allowed IP %q (an IPv4 network without host bits, not the default route)", sn)
			}
			for _, r := range specialRanges {
				if r.Overlaps(pfx) {
					t.Fatalf("accepted allowed IP %s overlapping special-purpose %s", pfx, r)
				}
			}
			if ep.IsValid() && pfx.Contains(ep) {
				t.Fatalf("accepted allowed IP %s holding the peer's own endpoint %s", pfx, ep)
			}
			for _, o := range nets {
				if o.p.Overlaps(pfx) {
					t.Fatalf("accepted allowed IP %s of peer %s overlapping %s of peer %s", pfx, p.Name, o.p, o.peer)
				}
			}
			nets = append(nets, net{p.Name, pfx})
		}
	}
	for _, e := range s.Exposures {
		a, err := netip.ParseAddr(e.Target.Address)
		if err != nil || special(a) {
			t.Fatalf("accepted exposure target %q", e.Target.Address)
		}
		for _, n := range nets {
			if n.p.Contains(a) {
				t.Fatalf("accepted exposure target %s inside peer %s's network %s", a, n.peer, n.p)
			}
		}
	}
	for _, r := range s.ReverseExposures {
		a, err := netip.ParseAddr(r.Target.Address)
		if err != nil || special(a) {
			t.Fatalf("accepted reverse exposure target %q", r.Target.Address)
		}
		inside := false
		for _, n := range nets {
			inside = inside || (n.peer == r.Tunnel && n.p.Contains(a))
		}
		if !inside {
			t.Fatalf("accepted reverse exposure target %s outside the networks of peer %q", a, r.Tunnel)
		}
	}
}
