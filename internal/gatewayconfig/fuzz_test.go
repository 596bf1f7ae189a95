package gatewayconfig

import (
	"errors"
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
	refusedProposals := 0
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
			if s, err := RenderSecrets(cfg, map[string]string{tunnel: psk, "branch": "k"}); err == nil {
				sec = s
			}
		}
		if ch != nil {
			checkWithCharon(t, ch, cfg, text, sec, &refusedProposals)
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
