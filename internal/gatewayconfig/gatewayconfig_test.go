package gatewayconfig

import (
	"errors"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite golden files")

func sampleInput() Input {
	return Input{
		Kind:      v1alpha1.KindIPsecGateway,
		Namespace: "tenant-a",
		Name:      "acme",
		Spec: &v1alpha1.GatewaySpec{
			Tunnels: []v1alpha1.Tunnel{
				{
					Name:         "hq",
					Peer:         v1alpha1.Peer{Address: "198.51.100.7", ID: "vpn.acme.example", Subnets: []string{"192.168.10.0/24", "192.168.20.0/24"}},
					PreSharedKey: v1alpha1.SecretKeyRef{Name: "acme-psk", Key: "hq"},
					IKE:          v1alpha1.IKEOptions{Proposals: []string{"aes256gcm16-prfsha384-ecp384"}, Lifetime: "8h"},
					ESP:          v1alpha1.ESPOptions{Lifetime: "45m"},
					DPD:          v1alpha1.DPDOptions{Delay: "10s", Action: "clear"},
				},
				{
					Name:         "branch",
					Peer:         v1alpha1.Peer{Address: "203.0.113.9", Subnets: []string{"172.16.5.0/24"}},
					PreSharedKey: v1alpha1.SecretKeyRef{Name: "acme-psk", Key: "branch"},
				},
			},
			Exposures: []v1alpha1.Exposure{
				{Name: "web", Target: v1alpha1.Target{Address: "10.250.0.20", Ports: []v1alpha1.PortSpec{{Port: 443, Protocol: v1alpha1.ProtocolTCP}, {Port: 443, Protocol: v1alpha1.ProtocolUDP}}}},
				{Name: "ldaps", VirtualIP: "100.64.3.50", Target: v1alpha1.Target{Address: "10.250.0.21", Ports: []v1alpha1.PortSpec{{Port: 636}}}},
				{Name: "vm", Target: v1alpha1.Target{Address: "10.250.0.22"}, AllowPlaintext: true},
			},
			ReverseExposures: []v1alpha1.ReverseExposure{
				{Name: "erp", Tunnel: "hq", Target: v1alpha1.Target{Address: "192.168.10.5", Ports: []v1alpha1.PortSpec{{Port: 8443, Protocol: v1alpha1.ProtocolTCP}}}},
				{Name: "branch-all", Tunnel: "branch", Target: v1alpha1.Target{Address: "172.16.5.9"}},
			},
		},
		Status: &v1alpha1.GatewayStatus{
			ServiceCIDR:               "100.64.3.0/24",
			ServiceCIDRGatewayAddress: "100.64.3.1",
			FloatingIP:                "192.0.2.44",
			PortFixedIP:               "10.254.0.17",
			SubnetCIDR:                "10.254.0.0/24",
			SubnetGatewayIP:           "10.254.0.1",
			Exposures: []v1alpha1.AllocatedAddress{
				{Name: "web", VirtualIP: "100.64.3.10"}, {Name: "ldaps", VirtualIP: "100.64.3.50"}, {Name: "vm", VirtualIP: "100.64.3.11"},
			},
			ReverseExposures: []v1alpha1.AllocatedAddress{
				{Name: "erp", VirtualIP: "100.64.3.200"}, {Name: "branch-all", VirtualIP: "100.64.3.201"},
			},
		},
	}
}

func mustBuild(t testing.TB) *Config {
	t.Helper()
	cfg, err := Build(sampleInput())
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return cfg
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from golden file (run with -update after checking):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestGolden(t *testing.T) {
	cfg := mustBuild(t)
	js, err := Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "gateway.json.golden", string(js))
	sw, err := RenderSwanctl(cfg)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "swanctl.conf.golden", sw)
	sec, err := RenderSecrets(cfg, map[string]string{"hq": "hq-key \"quoted\" }\n{ 20 bytes+", "branch": "branch-key of 20 bytes+"})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "secrets.conf.golden", sec)
	for _, m := range []DataplaneMode{DataplaneKernel, DataplaneLibipsec} {
		opts := StrongswanOptions{Mode: m}
		if m == DataplaneLibipsec {
			opts.VICISocket = "/run/test/charon.vici"
			opts.LogFile = "/run/test/charon.log"
		}
		s, err := RenderStrongswanConf(opts)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "strongswan-"+string(m)+".conf.golden", s)
	}
}

func TestBuildDerivesDefaultsAndVIPs(t *testing.T) {
	cfg := mustBuild(t)
	if cfg.GatewayAddress != "100.64.3.1" {
		t.Errorf("gateway address %s", cfg.GatewayAddress)
	}
	br := cfg.Tunnels[1]
	if br.PeerID != "203.0.113.9" {
		t.Errorf("peer ID should default to the address, got %q", br.PeerID)
	}
	if !reflect.DeepEqual(br.IKEProposals, DefaultIKEProposals) || !reflect.DeepEqual(br.ESPProposals, DefaultESPProposals) {
		t.Errorf("default proposals not applied: %v %v", br.IKEProposals, br.ESPProposals)
	}
	if br.IKERekeySeconds != 4*3600 || br.ESPRekeySeconds != 3600 || br.DPDDelaySeconds != 30 || br.DPDAction != "restart" {
		t.Errorf("default intervals: %+v", br)
	}
	hq := cfg.Tunnels[0]
	if hq.IKERekeySeconds != 8*3600 || hq.ESPRekeySeconds != 45*60 || hq.DPDDelaySeconds != 10 {
		t.Errorf("intervals: %+v", hq)
	}
	if cfg.Exposures[0].VirtualIP != "100.64.3.10" || cfg.Exposures[0].Ports[0] != (Port{"tcp", 443}) || cfg.Exposures[1].Ports[0].Protocol != "tcp" {
		t.Errorf("exposures: %+v", cfg.Exposures)
	}
	if len(cfg.Exposures[2].Ports) != 0 {
		t.Errorf("all-ports exposure got ports %v", cfg.Exposures[2].Ports)
	}
	back, err := Unmarshal(mustMarshal(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, cfg) {
		t.Errorf("round trip differs:\n%+v\n%+v", back, cfg)
	}
}

func mustMarshal(t testing.TB, cfg *Config) []byte {
	b, err := Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBuildErrors(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(in *Input)
		want   error
		substr string
	}{
		{"no floating IP yet", func(in *Input) { in.Status.FloatingIP = "" }, ErrIncomplete, "floatingIP"},
		{"vip not allocated", func(in *Input) { in.Status.Exposures = in.Status.Exposures[:1] }, ErrIncomplete, "ldaps"},
		{"pinned vip not yet in status", func(in *Input) { in.Spec.Exposures[1].VirtualIP = "100.64.3.51" }, ErrIncomplete, "pinned"},
		{"routed subnet inside the internal sources", func(in *Input) {
			in.Spec.Tunnels[1].Mode = v1alpha1.TunnelModeRouted
			in.InternalSources = []netip.Prefix{netip.MustParsePrefix("172.16.0.0/16")}
		}, ErrInvalid, "overlaps internal source"},
		{"bad kind", func(in *Input) { in.Kind = "Pod" }, ErrInvalid, "kind"},
		{"vip .1", func(in *Input) { in.Status.Exposures[0].VirtualIP = "100.64.3.1" }, ErrInvalid, "outside"},
		{"forward vip in reverse range", func(in *Input) { in.Status.Exposures[0].VirtualIP = "100.64.3.210" }, ErrInvalid, "outside"},
		{"reverse vip in forward range", func(in *Input) { in.Status.ReverseExposures[0].VirtualIP = "100.64.3.20" }, ErrInvalid, "outside"},
		{"duplicate vip", func(in *Input) { in.Status.Exposures[0].VirtualIP = "100.64.3.11" }, ErrInvalid, "already used"},
		{"reverse target outside tunnel", func(in *Input) { in.Spec.ReverseExposures[0].Target.Address = "172.16.5.3" }, ErrInvalid, "not inside"},
		{"peer inside its subnets", func(in *Input) { in.Spec.Tunnels[1].Peer.Address = "172.16.5.1" }, ErrInvalid, "inside its remote subnet"},
		// The pod refuses a peer in a range the operator uses itself, as the operator does
		// (security review L6).
		{"peer at the metadata service", func(in *Input) { in.Spec.Tunnels[1].Peer.Address = "169.254.169.254" }, ErrInvalid, "metadata service"},
		{"peer on the gateway network", func(in *Input) { in.Spec.Tunnels[1].Peer.Address = "10.254.0.77" }, ErrInvalid, "gateway network's subnet"},
		{"peer in the internal sources (known to the pod with routed mode)", func(in *Input) {
			in.Spec.Tunnels[1].Mode = v1alpha1.TunnelModeRouted
			in.InternalSources = []netip.Prefix{netip.MustParsePrefix("10.250.0.0/16")}
			in.Spec.Tunnels[1].Peer.Address = "10.250.4.4"
		}, ErrInvalid, "internal source network"},
		{"overlapping subnets", func(in *Input) { in.Spec.Tunnels[1].Peer.Subnets = []string{"192.168.0.0/16"} }, ErrInvalid, "overlap"},
		{"subnet overlaps service cidr", func(in *Input) { in.Spec.Tunnels[1].Peer.Subnets = []string{"100.64.0.0/16"} }, ErrInvalid, "overlaps"},
		{"host bits", func(in *Input) { in.Spec.Tunnels[1].Peer.Subnets = []string{"172.16.5.1/24"} }, ErrInvalid, "host bits"},
		{"injected peer id", func(in *Input) { in.Spec.Tunnels[0].Peer.ID = "a\n}\nconnections {" }, ErrInvalid, "peer ID"},
		{"injected proposal", func(in *Input) { in.Spec.Tunnels[0].IKE.Proposals = []string{"aes256,modp1024"} }, ErrInvalid, "proposal"},
		{"bad lifetime", func(in *Input) { in.Spec.Tunnels[0].ESP.Lifetime = "1w" }, ErrInvalid, "esp.lifetime"},
		{"bad dpd action", func(in *Input) { in.Spec.Tunnels[0].DPD.Action = "hold" }, ErrInvalid, "dpd action"},
		{"service cidr not /24", func(in *Input) { in.Status.ServiceCIDR = "100.64.0.0/16"; in.Status.ServiceCIDRGatewayAddress = "" }, ErrInvalid, "/24"},
		{"shared peer id", func(in *Input) { in.Spec.Tunnels[1].Peer.ID = "vpn.acme.example" }, ErrInvalid, "share peer ID"},
		{"weak IKE proposal", func(in *Input) { in.Spec.Tunnels[0].IKE.Proposals = []string{"aes256-sha1-modp2048"} }, ErrInvalid, `"sha1" is below the crypto floor`},
		{"weak ESP proposal", func(in *Input) { in.Spec.Tunnels[0].ESP.Proposals = []string{"3des-sha256"} }, ErrInvalid, `"3des" is below the crypto floor`},
		{"exposure at the metadata service", func(in *Input) { in.Spec.Exposures[0].Target.Address = "169.254.169.254" }, ErrInvalid, "metadata service"},
		{"exposure at loopback", func(in *Input) { in.Spec.Exposures[0].Target.Address = "127.0.0.1" }, ErrInvalid, "loopback"},
		{"exposure on the gateway network", func(in *Input) { in.Spec.Exposures[0].Target.Address = "10.254.0.33" }, ErrInvalid, "gateway network's subnet"},
		{"exposure at another gateway's VIP", func(in *Input) {
			in.ServiceCIDRPool = netip.MustParsePrefix("100.64.0.0/16")
			in.Spec.Exposures[0].Target.Address = "100.64.9.10"
		}, ErrInvalid, "service-CIDR pool"},
		{"exposure at its own VIP", func(in *Input) { in.Spec.Exposures[0].Target.Address = "100.64.3.11" }, ErrInvalid, "service-CIDR pool 100.64.3.0/24"},
		{"exposure outside the allow-list", func(in *Input) {
			in.ExposureTargetCIDRs = []netip.Prefix{netip.MustParsePrefix("10.250.0.20/32")}
		}, ErrInvalid, "outside the operator's allowed exposure targets"},
		{"client subnet link-local", func(in *Input) {
			in.Spec.Tunnels[1].Peer.Subnets = []string{"169.254.0.0/16"}
			in.Spec.ReverseExposures[1].Target.Address = "169.254.0.9"
		}, ErrInvalid, "link-local"},
		{"service CIDR outside the pool", func(in *Input) { in.ServiceCIDRPool = netip.MustParsePrefix("100.65.0.0/16") }, ErrInvalid, "is not in serviceCIDRPool"},
		{"duplicate port", func(in *Input) {
			in.Spec.Exposures[1].Target.Ports = append(in.Spec.Exposures[1].Target.Ports, v1alpha1.PortSpec{Port: 636, Protocol: v1alpha1.ProtocolTCP})
		}, ErrInvalid, "duplicate port"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := sampleInput()
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
}

func TestUnmarshalRefusesUnknownAndVersions(t *testing.T) {
	js := string(mustMarshal(t, mustBuild(t)))
	if _, err := Unmarshal([]byte(js)); err != nil {
		t.Fatalf("the rendered config is refused: %v", err)
	}
	for _, v := range []string{`"version": 1`, `"version": 3`} {
		if _, err := Unmarshal([]byte(strings.Replace(js, `"version": 2`, v, 1))); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s accepted: %v", v, err)
		}
	}
	if _, err := Unmarshal([]byte(strings.Replace(js, `"version": 2,`, `"version": 2, "extra": true,`, 1))); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown field accepted: %v", err)
	}
	if _, err := Unmarshal([]byte(strings.Replace(js, `"peerID": "vpn.acme.example"`, `"peerID": "x\"\n}"`, 1))); !errors.Is(err, ErrInvalid) {
		t.Errorf("hostile peer ID accepted through the ConfigMap: %v", err)
	}
}

func TestSecretsRoundTripAndNoLeak(t *testing.T) {
	cfg := mustBuild(t)
	psks := map[string]string{"hq": "s3cr3t\"}\n secrets { long enough", "branch": "plain and long enough"}
	text, err := RenderSecrets(cfg, psks)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text, "s3cr3t") || strings.Contains(text, "plain") {
		t.Error("secret appears verbatim; expected base64 encoding")
	}
	got, err := ParseSecrets(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || string(got[0].Secret) != psks["hq"] || string(got[1].Secret) != psks["branch"] {
		t.Fatalf("round trip: %+v", got)
	}
	if !reflect.DeepEqual(got[0].Owners, []string{"192.0.2.44", "vpn.acme.example"}) {
		t.Errorf("owners %v", got[0].Owners)
	}
	_, err = RenderSecrets(cfg, map[string]string{"hq": psks["hq"]})
	if !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "branch") {
		t.Errorf("missing PSK: %v", err)
	}
	// A key below the floor is refused, naming the Secret and key, never the value.
	_, err = RenderSecrets(cfg, map[string]string{"hq": psks["hq"], "branch": "short-psk-0123"})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "Secret acme-psk key branch") || !strings.Contains(err.Error(), "shorter than 20 bytes") || strings.Contains(err.Error(), "short-psk") {
		t.Errorf("short PSK: %v", err)
	}
	// Only the named tunnels are rendered: the agent leaves out a tunnel without a key.
	only, err := RenderSecretsFor(cfg, map[string]string{"hq": psks["hq"]}, []string{"hq"})
	if err != nil {
		t.Fatal(err)
	}
	if keys, err := ParseSecrets(only); err != nil || len(keys) != 1 || keys[0].Section != SecretSectionPrefix+"hq" {
		t.Errorf("subset secrets: %v %+v", err, keys)
	}
	conns, err := RenderSwanctlFor(cfg, []string{"hq"})
	if err != nil {
		t.Fatal(err)
	}
	if root, err := ParseSettings(conns); err != nil || root.Sub("connections").Sub("hq") == nil || root.Sub("connections").Sub("branch") != nil {
		t.Errorf("subset connections: %v\n%s", err, conns)
	}
	if none, err := RenderSwanctlFor(cfg, nil); err != nil || !strings.Contains(none, "connections {\n}") {
		t.Errorf("no connections: %v\n%s", err, none)
	}
	if _, err := RenderSwanctlFor(cfg, []string{"nope"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown tunnel rendered: %v", err)
	}
	sw, _ := RenderSwanctl(cfg)
	if strings.Contains(sw, "secret") {
		t.Error("swanctl.conf mentions a secret")
	}
}

func TestNATModel(t *testing.T) {
	m, err := NATModel(mustBuild(t))
	if err != nil {
		t.Fatal(err)
	}
	want := &NAT{
		PeerSubnets:        []string{"172.16.5.0/24", "192.168.10.0/24", "192.168.20.0/24"},
		ForwardSNATAddress: "10.254.0.17",
		ReverseSNATAddress: "100.64.3.1",
		ExposurePorts: []PortMapping{
			{VirtualIP: "100.64.3.10", Protocol: "tcp", Port: 443, Target: "10.250.0.20", TargetPort: 443, Owner: "web"},
			{VirtualIP: "100.64.3.10", Protocol: "udp", Port: 443, Target: "10.250.0.20", TargetPort: 443, Owner: "web"},
			{VirtualIP: "100.64.3.50", Protocol: "tcp", Port: 636, Target: "10.250.0.21", TargetPort: 636, Owner: "ldaps"},
		},
		ExposureAll:  []AddrMapping{{VirtualIP: "100.64.3.11", Target: "10.250.0.22", Owner: "vm"}},
		ReversePorts: []PortMapping{{VirtualIP: "100.64.3.200", Protocol: "tcp", Port: 8443, Target: "192.168.10.5", TargetPort: 8443, Owner: "erp"}},
		ReverseAll:   []AddrMapping{{VirtualIP: "100.64.3.201", Target: "172.16.5.9", Owner: "branch-all"}},
		MSSClamp:     MSSClamp{Enabled: true},
	}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("NAT model:\n got %+v\nwant %+v", m, want)
	}
}

func TestSwanctlStructure(t *testing.T) {
	cfg := mustBuild(t)
	text, err := RenderSwanctl(cfg)
	if err != nil {
		t.Fatal(err)
	}
	root, err := ParseSettings(text)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := root.Paths(), expectedSwanctlPaths(cfg); !reflect.DeepEqual(got, want) {
		t.Fatalf("paths:\n got %v\nwant %v", got, want)
	}
	hq := root.Sub("connections").Sub("hq")
	checks := map[string]string{"local_addrs": "%any", "remote_addrs": "198.51.100.7", "encap": "yes", "mobike": "no", "unique": "replace", "rekey_time": "28800s", "reauth_time": "86400s", "dpd_delay": "10s"}
	for k, v := range checks {
		if got, _ := hq.Get(k); got != v {
			t.Errorf("hq.%s = %q, want %q", k, got, v)
		}
	}
	if id, _ := hq.Sub("local").Get("id"); id != "192.0.2.44" {
		t.Errorf("local id %q, want the floating IP", id)
	}
	child := hq.Sub("children").Sub("hq")
	for k, v := range map[string]string{"mode": "tunnel", "local_ts": "100.64.3.0/24", "remote_ts": "192.168.10.0/24,192.168.20.0/24", "start_action": "none", "close_action": "none", "dpd_action": "clear", "rekey_time": "2700s"} {
		if got, _ := child.Get(k); got != v {
			t.Errorf("child.%s = %q, want %q", k, got, v)
		}
	}
	shunt := hq.Sub("children").Sub("hq" + FailClosedChildSuffix)
	if m, _ := shunt.Get("mode"); m != "drop" {
		t.Errorf("shunt mode %q", m)
	}
	// Exactly the child's selectors: a wider local selector blocks exposures' forwarded
	// traffic with kernel IPsec (it meets the policy before source NAT).
	if ts, _ := shunt.Get("local_ts"); ts != "100.64.3.0/24" {
		t.Errorf("shunt local_ts %q, want the service CIDR", ts)
	}
}

// expectedSwanctlPaths is the exact key/section layout RenderSwanctl must produce.
func expectedSwanctlPaths(cfg *Config) []string {
	out := []string{"connections{}"}
	for _, t := range cfg.Tunnels {
		c := "connections." + t.Name
		out = append(out, c+"{}")
		for _, k := range []string{"version", "local_addrs", "remote_addrs", "encap", "mobike", "unique", "proposals", "rekey_time", "reauth_time", "dpd_delay"} {
			out = append(out, c+"."+k)
		}
		out = append(out, c+".local{}", c+".local.auth", c+".local.id", c+".remote{}", c+".remote.auth", c+".remote.id", c+".children{}")
		ch := c + ".children." + t.Name
		out = append(out, ch+"{}")
		for _, k := range []string{"mode", "local_ts", "remote_ts", "esp_proposals", "rekey_time", "dpd_action", "start_action", "close_action"} {
			out = append(out, ch+"."+k)
		}
		sh := c + ".children." + t.Name + FailClosedChildSuffix
		out = append(out, sh+"{}", sh+".mode", sh+".local_ts", sh+".remote_ts", sh+".start_action")
	}
	return out
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]int64{"30": 30, "30s": 30, "5m": 300, "4h": 14400, "1d": 86400, "999999d": 999999 * 86400} {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "s", "-1s", "1w", "1.5h", "1234567s", " 1s"} {
		if _, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) accepted", in)
		}
	}
}
