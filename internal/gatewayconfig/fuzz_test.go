package gatewayconfig

import (
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// FuzzRenderSwanctl feeds arbitrary names, IDs, proposals and subnets through Validate
// and the renderers. Whatever is accepted must parse back into exactly the expected
// sections and keys, with each value intact: no input may add a section, a key or a
// list element. Where charon can run (root, strongSwan installed; required under
// BNERD_REQUIRE_DATAPLANE=1), every accepted rendering is also loaded into a real charon
// with swanctl, which must parse it and hold exactly the rendered connections, children,
// identities and keys.
func FuzzRenderSwanctl(f *testing.F) {
	ch, why := startCharon(f)
	if ch == nil {
		f.Logf("strongSwan check not run: %s", why)
	}
	f.Add("hq", "vpn.acme.example", "aes256gcm16-prfsha384-ecp384", "192.168.10.0/24", "web", "psk")
	f.Add("a\n}\nb {", "x = y", "aes,modp", "10.0.0.0/8 # c", "e\"x", "\x00")
	f.Add("hq", "id\"\n  secret = 1", "aes256", "192.168.10.0/24", "web", "\" }\nsecrets {")
	f.Add("hq", "a#b", "aes256-sha256", "192.168.10.0/24,10.1.0.0/16", "w", "")
	f.Fuzz(func(t *testing.T, tunnel, peerID, proposal, subnet, exposure, psk string) {
		in := sampleInput()
		in.Spec.Tunnels[0].Name = tunnel
		in.Spec.Tunnels[0].Peer.ID = peerID
		in.Spec.Tunnels[0].IKE.Proposals = []string{proposal}
		in.Spec.Tunnels[0].Peer.Subnets = []string{subnet}
		in.Spec.ReverseExposures[0].Tunnel = tunnel
		in.Spec.Exposures[0].Name = exposure
		in.Status.Exposures[0].Name = exposure
		cfg, err := Build(in)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrIncomplete) {
				t.Fatalf("unclassified error: %v", err)
			}
			return
		}
		text, err := RenderSwanctl(cfg)
		if err != nil {
			t.Fatalf("validated config did not render: %v", err)
		}
		root, err := ParseSettings(text)
		if err != nil {
			t.Fatalf("rendered swanctl.conf does not parse: %v\n%s", err, text)
		}
		if got, want := root.Paths(), expectedSwanctlPaths(cfg); !reflect.DeepEqual(got, want) {
			t.Fatalf("structure changed by input:\n got %v\nwant %v", got, want)
		}
		conn := root.Sub("connections").Sub(tunnel)
		if conn == nil {
			t.Fatalf("connection %q missing", tunnel)
		}
		if id, _ := conn.Sub("remote").Get("id"); id != peerID {
			t.Fatalf("peer ID altered: %q != %q", id, peerID)
		}
		if p, _ := conn.Get("proposals"); p != proposal {
			t.Fatalf("proposal altered: %q", p)
		}
		if strings.Count(text, "{") != strings.Count(text, "}") {
			t.Fatal("unbalanced braces")
		}
		sec := ""
		if psk != "" {
			if s, err := RenderSecrets(cfg, map[string]string{tunnel: psk, "branch": "branch key of twenty bytes"}); err == nil {
				sec = s
			}
		}
		if ch != nil {
			checkWithCharon(t, ch, cfg, text, sec)
		}
		if sec == "" {
			return
		}
		parsed, err := ParseSecrets(sec)
		if err != nil {
			t.Fatalf("secrets do not parse: %v", err)
		}
		if len(parsed) != 2 || string(parsed[0].Secret) != psk || len(parsed[0].Owners) != 2 || parsed[0].Owners[1] != peerID {
			t.Fatalf("secrets altered by input: %+v", parsed)
		}
	})
}

// FuzzAgentConfigAddresses is the gateway agent's own check of a config read from the
// ConfigMap (Unmarshal validates): whatever addresses a hand-edited or hostile config
// carries, an accepted one never targets or routes a special-purpose range (the cloud's
// metadata service above all), the gateway network's subnet, or the service-CIDR pool
// outside the gateway's own exposures. The rules are restated here independently.
func FuzzAgentConfigAddresses(f *testing.F) {
	base, err := Marshal(mustBuild(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Add("10.250.0.20", "172.16.5.0/24", "172.16.5.9", "")
	f.Add("169.254.169.254", "169.254.0.0/16", "169.254.169.254", "")
	f.Add("127.0.0.1", "0.0.0.0/1", "0.0.0.1", "100.64.0.0/16")
	f.Add("100.64.9.10", "100.64.9.0/24", "100.64.9.5", "100.64.0.0/16")
	f.Add("10.254.0.9", "224.0.0.0/8", "224.0.0.1", "100.64.3.0/24")
	// One field wrong at a time, so each check is exercised on its own.
	f.Add("169.254.169.254", "172.16.5.0/24", "172.16.5.9", "")
	f.Add("100.64.9.10", "172.16.5.0/24", "172.16.5.9", "100.64.0.0/16")
	f.Add("10.250.0.20", "127.0.0.0/8", "172.16.5.9", "")
	f.Add("10.250.0.20", "100.64.0.0/24", "100.64.0.9", "100.64.0.0/16")
	f.Add("10.250.0.20", "172.16.5.0/24", "0.0.0.5", "")
	f.Add("10.250.0.20", "172.16.5.0/24", "240.0.0.1", "")
	f.Add("172.16.5.20", "0.0.0.0/1", "10.99.0.9", "")
	f.Add("10.250.0.20", "160.0.0.0/3", "172.16.5.9", "")
	special := []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/8"), netip.MustParsePrefix("127.0.0.0/8"),
		netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("224.0.0.0/4"),
		netip.MustParsePrefix("240.0.0.0/4"),
	}
	f.Fuzz(func(t *testing.T, target, subnet, reverseTarget, pool string) {
		var cfg Config
		if err := json.Unmarshal(base, &cfg); err != nil {
			t.Fatal(err)
		}
		cfg.Exposures[0].TargetAddress = target
		cfg.Tunnels[1].RemoteSubnets = []string{subnet}
		cfg.ReverseExposures[1].TargetAddress = reverseTarget
		cfg.ServiceCIDRPool = pool
		data, err := json.Marshal(&cfg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Unmarshal(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("unclassified error: %v", err)
			}
			return
		}
		gwNet := netip.MustParsePrefix(got.SubnetCIDR)
		svc := netip.MustParsePrefix(got.ServiceCIDR)
		poolP := svc
		if got.ServiceCIDRPool != "" {
			poolP = netip.MustParsePrefix(got.ServiceCIDRPool)
		}
		for _, e := range got.Exposures {
			a := netip.MustParseAddr(e.TargetAddress)
			for _, s := range append(special, gwNet, poolP) {
				if s.Contains(a) {
					t.Fatalf("accepted exposure target %s in %s", a, s)
				}
			}
		}
		for _, r := range got.ReverseExposures {
			a := netip.MustParseAddr(r.TargetAddress)
			for _, s := range append(special, gwNet, poolP) {
				if s.Contains(a) {
					t.Fatalf("accepted reverse target %s in %s", a, s)
				}
			}
		}
		for _, tn := range got.Tunnels {
			for _, sn := range tn.RemoteSubnets {
				p := netip.MustParsePrefix(sn)
				for _, s := range append(special, gwNet, poolP) {
					if s.Overlaps(p) {
						t.Fatalf("accepted client subnet %s overlapping %s", p, s)
					}
				}
			}
		}
	})
}
