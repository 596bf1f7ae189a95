package peerconfig

import (
	"errors"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const testPSK = `golden-psk-"not"-a-real-$ecret`

// acme is a gateway with the API's default proposals, an FQDN peer identity, two client
// subnets, two exposures and a reverse exposure.
func acme() Input {
	return Input{
		Kind: v1alpha1.KindIPsecGateway, Namespace: "tenant-a", Name: "acme", Tunnel: "hq",
		Spec: &v1alpha1.GatewaySpec{
			Tunnels: []v1alpha1.Tunnel{{
				Name:         "hq",
				Peer:         v1alpha1.Peer{Address: "198.51.100.7", ID: "vpn.acme.example", Subnets: []string{"192.168.10.0/24", "192.168.20.0/24"}},
				PreSharedKey: v1alpha1.SecretKeyRef{Name: "hq-psk", Key: "psk"},
			}, {
				Name:         "branch",
				Peer:         v1alpha1.Peer{Address: "203.0.113.9", Subnets: []string{"172.16.5.0/24"}},
				PreSharedKey: v1alpha1.SecretKeyRef{Name: "branch-psk"},
				IKE:          v1alpha1.IKEOptions{Proposals: []string{"aes256gcm16-prfsha384-ecp384", "aes256-sha256-ecp384"}, Lifetime: "8h"},
				ESP:          v1alpha1.ESPOptions{Proposals: []string{"aes256gcm16-ecp384", "aes256-sha256-ecp384"}, Lifetime: "45m"},
				DPD:          v1alpha1.DPDOptions{Delay: "10s", Action: "clear"},
			}},
			Exposures: []v1alpha1.Exposure{
				{Name: "portal", Target: v1alpha1.Target{Address: "10.250.0.20", Ports: []v1alpha1.PortSpec{{Port: 443, Protocol: v1alpha1.ProtocolTCP}}}},
				{Name: "ldaps", Target: v1alpha1.Target{Address: "10.250.0.21", Ports: []v1alpha1.PortSpec{{Port: 636}}}},
			},
			ReverseExposures: []v1alpha1.ReverseExposure{
				{Name: "erp", Tunnel: "hq", Target: v1alpha1.Target{Address: "192.168.10.5", Ports: []v1alpha1.PortSpec{{Port: 8443, Protocol: v1alpha1.ProtocolTCP}}}},
			},
		},
		Status: &v1alpha1.GatewayStatus{
			ServiceCIDR: "100.64.3.0/24", FloatingIP: "192.0.2.44",
			Exposures:        []v1alpha1.AllocatedAddress{{Name: "portal", VirtualIP: "100.64.3.10"}, {Name: "ldaps", VirtualIP: "100.64.3.11"}},
			ReverseExposures: []v1alpha1.AllocatedAddress{{Name: "erp", VirtualIP: "100.64.3.200"}},
		},
	}
}

type golden struct {
	name   string
	in     func() Input
	format Format
}

func goldenCases() []golden {
	withPSK := func(tunnel string) func() Input {
		return func() Input { in := acme(); in.Tunnel = tunnel; in.PSK = testPSK; return in }
	}
	noPSK := func(tunnel string) func() Input {
		return func() Input { in := acme(); in.Tunnel = tunnel; return in }
	}
	var out []golden
	for _, f := range []Format{FormatStrongSwan, FormatLibreswan, FormatFortiGate, FormatCiscoIOSXE, FormatPfSense} {
		out = append(out, golden{"hq-" + string(f), noPSK("hq"), f})
	}
	for _, f := range []Format{FormatStrongSwan, FormatLibreswan, FormatFortiGate, FormatCiscoIOSXE, FormatMikroTik, FormatPfSense} {
		out = append(out, golden{"branch-psk-" + string(f), withPSK("branch"), f})
	}
	out = append(out, golden{"hq-routed-strongswan", func() Input {
		in := acme()
		in.Spec.Tunnels[0].Mode = v1alpha1.TunnelModeRouted
		in.InternalSources = []netip.Prefix{netip.MustParsePrefix("10.254.0.0/24"), netip.MustParsePrefix("10.250.0.0/16")}
		return in
	}, FormatStrongSwan})
	out = append(out, golden{"hq-routed-libreswan", func() Input {
		in := acme()
		in.Spec.Tunnels[0].Mode = v1alpha1.TunnelModeRouted
		in.InternalSources = []netip.Prefix{netip.MustParsePrefix("10.254.0.0/24"), netip.MustParsePrefix("10.250.0.0/16")}
		return in
	}, FormatLibreswan})
	out = append(out, golden{"hq-wireguard", func() Input { return wgAcme() }, FormatWireGuard})
	out = append(out, golden{"laptop-wireguard", func() Input { in := wgAcme(); in.Tunnel = "laptop"; return in }, FormatWireGuard})
	return out
}

// wgAcme is acme as a WireGuard VPNGateway: hq with a fixed endpoint, laptop roaming.
func wgAcme() Input {
	in := acme()
	in.Kind, in.Protocol = v1alpha1.KindVPNGateway, v1alpha1.VPNProtocolWireGuard
	in.Spec.Tunnels = nil
	in.WireGuard = &v1alpha1.WireGuardSpec{ListenPort: 51820, Peers: []v1alpha1.WireGuardPeer{
		{Name: "hq", PublicKey: "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=", AllowedIPs: []string{"192.168.10.0/24", "192.168.20.0/24"},
			Endpoint: &v1alpha1.WireGuardEndpoint{Address: "198.51.100.7", Port: 51820}},
		{Name: "laptop", PublicKey: "TrMvSoP4jYQlY6RIzBgbssQqY3vxI2Pi+y71lOWWXX0=", AllowedIPs: []string{"172.16.5.0/24"}},
	}}
	in.Status.WireGuard = &v1alpha1.WireGuardStatus{PublicKey: "yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk="}
	return in
}

func TestGolden(t *testing.T) {
	for _, g := range goldenCases() {
		t.Run(g.name, func(t *testing.T) {
			got, err := Render(g.in(), g.format)
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join("testdata", g.name+".golden")
			if *update {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from the golden file (run with -update to accept):\n%s", g.name, got)
			}
		})
	}
}

// The pre-shared key appears only when given, and never otherwise.
func TestSecretOnlyWhenIncluded(t *testing.T) {
	for _, f := range []Format{FormatStrongSwan, FormatLibreswan, FormatFortiGate, FormatCiscoIOSXE, FormatMikroTik, FormatPfSense} {
		in := acme()
		in.Tunnel = "branch"
		out, err := Render(in, f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !strings.Contains(out, "Secret tenant-a/branch-psk, key psk") {
			t.Errorf("%s: without the key the output does not say where it is:\n%s", f, out)
		}
		in.PSK = "a-distinctive-key-0451"
		out, err = Render(in, f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		base64 := f == FormatStrongSwan || f == FormatLibreswan
		if !base64 && !strings.Contains(out, "a-distinctive-key-0451") {
			t.Errorf("%s: --include-secret output lacks the key", f)
		}
		if base64 && !strings.Contains(out, "0sYS1kaXN0aW5jdGl2ZS1rZXktMDQ1MQ==") {
			t.Errorf("%s: the key is not written base64-encoded:\n%s", f, out)
		}
	}
}

// IKE proposals of AES-GCM only have no RouterOS equivalent: the output is refused with
// what to change, never a profile that cannot negotiate. The gateway's defaults also
// offer AES-CBC with SHA-2, which RouterOS can express.
func TestNotExpressible(t *testing.T) {
	in := acme()
	in.Spec.Tunnels[0].IKE.Proposals = []string{"aes256gcm16-prfsha384-ecp384"}
	_, err := Render(in, FormatMikroTik)
	if !errors.Is(err, ErrNotExpressible) || !strings.Contains(err.Error(), "aes256gcm16-prfsha384-ecp384") || !strings.Contains(err.Error(), "spec.tunnels[hq].ike.proposals") {
		t.Errorf("mikrotik with AES-GCM only: %v", err)
	}
	if _, err := Render(acme(), FormatMikroTik); err != nil {
		t.Errorf("mikrotik with the default proposals: %v", err)
	}
	in = acme()
	in.Spec.Tunnels[0].IKE.Proposals = []string{"aes256-sha256-x25519"}
	if _, err := Render(in, FormatCiscoIOSXE); !errors.Is(err, ErrNotExpressible) {
		t.Errorf("cisco with curve25519 only: %v", err)
	}
	in = acme()
	in.Spec.Tunnels[0].IKE.Lifetime = "3d"
	if _, err := Render(in, FormatFortiGate); !errors.Is(err, ErrNotExpressible) || !strings.Contains(err.Error(), "172800") {
		t.Errorf("fortigate with a 3d IKE lifetime: %v", err)
	}
	in = acme()
	in.PSK = "what?"
	if _, err := Render(in, FormatCiscoIOSXE); !errors.Is(err, ErrNotExpressible) {
		t.Errorf("cisco with a '?' in the key (the CLI's help key): %v", err)
	}
	in = acme()
	in.Spec.Tunnels[0].ESP.Proposals = []string{"aes256-sha384-ecp384"}
	if _, err := Render(in, FormatMikroTik); !errors.Is(err, ErrNotExpressible) {
		t.Errorf("mikrotik with a SHA-384 ESP proposal: %v", err)
	}
}

func TestWireGuard(t *testing.T) {
	out, err := Render(wgAcme(), FormatWireGuard)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PublicKey = yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=", "Endpoint = 192.0.2.44:51820", "AllowedIPs = 100.64.3.0/24", "ListenPort = 51820", "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg="} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if _, err := Render(acme(), FormatWireGuard); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "IPsec gateway") {
		t.Errorf("wireguard for an IPsec gateway: %v", err)
	}
	if _, err := Render(wgAcme(), FormatStrongSwan); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "--format wireguard") {
		t.Errorf("strongswan for a WireGuard gateway: %v", err)
	}
	// During a rotation's overlap the client is given the new key with its own port, and
	// told that the previous key still serves on the other one and until when.
	in := wgAcme()
	retires := metav1.NewTime(time.Date(2026, 12, 11, 4, 0, 0, 0, time.UTC))
	in.Status.WireGuard.PreviousPublicKey, in.Status.WireGuard.PreviousListenPort = in.Status.WireGuard.PublicKey, 51820
	in.Status.WireGuard.PublicKey, in.Status.WireGuard.ListenPort = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=", 51821
	in.Status.WireGuard.PreviousKeyRetiresAt = &retires
	out, err = Render(in, FormatWireGuard)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PublicKey = xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=", "Endpoint = 192.0.2.44:51821", "# Gateway: 192.0.2.44:51821 (UDP).",
		"previous key yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk= is still served on UDP 51820 until 2026-12-11T04:00:00Z"} {
		if !strings.Contains(out, want) {
			t.Errorf("rotated: lacks %q:\n%s", want, out)
		}
	}
	in = wgAcme()
	in.Status.WireGuard = nil
	if _, err := Render(in, FormatWireGuard); !errors.Is(err, ErrNotReady) {
		t.Errorf("no public key yet: %v", err)
	}
	in = wgAcme()
	in.Tunnel = "nope"
	if _, err := Render(in, FormatWireGuard); err == nil || !strings.Contains(err.Error(), "hq, laptop") {
		t.Errorf("unknown peer: %v", err)
	}
}

func TestRoutedNote(t *testing.T) {
	in := acme()
	in.Spec.Tunnels[0].Mode = v1alpha1.TunnelModeRouted
	out, err := Render(in, FormatFortiGate)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Routed mode") || !strings.Contains(out, "ask the platform team") {
		t.Errorf("a routed tunnel without known internal sources is not flagged:\n%s", out)
	}
}

func TestNotReadyAndUnknownTunnel(t *testing.T) {
	in := acme()
	in.Status.FloatingIP = ""
	if _, err := Render(in, FormatStrongSwan); !errors.Is(err, ErrNotReady) {
		t.Errorf("no floating IP: %v", err)
	}
	in = acme()
	in.Tunnel = "nope"
	if _, err := Render(in, FormatStrongSwan); err == nil || !strings.Contains(err.Error(), "hq, branch") {
		t.Errorf("unknown tunnel: %v", err)
	}
	if _, err := Render(acme(), "openvpn"); err == nil || !strings.Contains(err.Error(), "strongswan|libreswan|fortigate") {
		t.Errorf("unknown format: %v", err)
	}
}

func TestParseProposal(t *testing.T) {
	p, err := ParseProposal("aes256gcm16-aes128gcm16-prfsha384-ecp384-modp3072", false)
	if err != nil || len(p.Enc) != 2 || p.Enc[1].String() != "aes128gcm16" || len(p.DH) != 2 || p.DH[1].Number != 15 || p.PRF[0] != "sha384" {
		t.Errorf("%+v %v", p, err)
	}
	p, err = ParseProposal("aes256-sha256-ecp384", false)
	if err != nil || p.PRF[0] != "sha256" {
		t.Errorf("PRF from integrity: %+v %v", p, err)
	}
	for _, bad := range []struct {
		raw string
		esp bool
	}{{"aes256-sha256", false}, {"aes256gcm16-ecp384", false}, {"aes256-ecp384", true}, {"aes256-sha256-prfsha256", true}, {"rot13-sha1", true}, {"aes256gcm16-aes256-sha256", true}} {
		if _, err := ParseProposal(bad.raw, bad.esp); err == nil {
			t.Errorf("%q (esp %v) accepted", bad.raw, bad.esp)
		}
	}
}

// libreswan cannot write an IKE proposal whose PRF differs from its integrity algorithm,
// nor Brainpool groups; lifetimes above 24 h are refused rather than silently capped.
func TestLibreswanNotExpressible(t *testing.T) {
	in := acme()
	in.Spec.Tunnels[0].IKE.Proposals = []string{"aes256-sha256-ecp256bp"}
	if _, err := Render(in, FormatLibreswan); !errors.Is(err, ErrNotExpressible) || !strings.Contains(err.Error(), "spec.tunnels[hq].ike.proposals") {
		t.Errorf("libreswan with Brainpool only: %v", err)
	}
	in = acme()
	in.Spec.Tunnels[0].IKE.Proposals = []string{"aes256-sha256-prfsha384-ecp384", "aes256gcm16-prfsha384-ecp384"}
	out, err := Render(in, FormatLibreswan)
	if err != nil || !strings.Contains(out, "Left out: IKE proposal aes256-sha256-prfsha384-ecp384 (libreswan uses one algorithm as integrity and PRF)") ||
		!strings.Contains(out, "\tike=aes_gcm256-sha2_384-dh20\n") {
		t.Errorf("a PRF that differs from the integrity algorithm: %v\n%s", err, out)
	}
	in = acme()
	in.Spec.Tunnels[0].IKE.Lifetime = "25h"
	if _, err := Render(in, FormatLibreswan); !errors.Is(err, ErrNotExpressible) || !strings.Contains(err.Error(), "86400") {
		t.Errorf("libreswan with a 25h IKE lifetime: %v", err)
	}
}

// libreswan's esp= cannot mix proposals with and without a DH group: with the gateway's
// default (PFS preferred, then without) the client offers PFS; with no PFS at all, none.
func TestLibreswanPFS(t *testing.T) {
	out, err := Render(acme(), FormatLibreswan)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\tpfs=yes\n", "\tesp=aes_gcm256+aes_gcm128-none-dh20+dh19+dh15+dh14,aes256+aes128-sha2_512+sha2_384+sha2_256-dh20+dh19+dh15+dh14\n",
		"Left out: ESP proposal aes256gcm16-aes128gcm16 (without PFS"} {
		if !strings.Contains(out, want) {
			t.Errorf("default proposals: lacks %q:\n%s", want, out)
		}
	}
	in := acme()
	in.Spec.Tunnels[0].ESP.Proposals = []string{"aes256gcm16", "aes256-sha256"}
	out, err = Render(in, FormatLibreswan)
	if err != nil || !strings.Contains(out, "\tpfs=no\n") || !strings.Contains(out, "\tesp=aes_gcm256,aes256-sha2_256\n") {
		t.Errorf("no PFS: %v\n%s", err, out)
	}
	// The secrets line is recoverable from the output, as the e2e test takes it.
	in = acme()
	in.PSK = "k"
	out, _ = Render(in, FormatLibreswan)
	if s, ok := LibreswanSecrets(out); !ok || s != "@vpn.acme.example 192.0.2.44 : PSK 0saw==\n" {
		t.Errorf("secrets line %q %v", s, ok)
	}
}
