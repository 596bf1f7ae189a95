package fuzz

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

func goodGateway() v1alpha1.GatewaySpec {
	return v1alpha1.GatewaySpec{
		Tunnels: []v1alpha1.Tunnel{{
			Name:         "hq",
			Peer:         v1alpha1.Peer{Address: "198.51.100.7", Subnets: []string{"192.168.10.0/24"}},
			PreSharedKey: v1alpha1.SecretKeyRef{Name: "hq-psk", Key: "psk"},
			IKE:          v1alpha1.IKEOptions{Proposals: []string{"aes256gcm16-prfsha384-ecp384"}, Lifetime: "4h"},
			ESP:          v1alpha1.ESPOptions{Proposals: []string{"aes256gcm16-ecp384"}, Lifetime: "1h"},
			DPD:          v1alpha1.DPDOptions{Delay: "30s", Action: "restart"},
		}},
		Exposures: []v1alpha1.Exposure{{
			Name:   "web",
			Target: v1alpha1.Target{Address: "10.250.0.20", Ports: []v1alpha1.PortSpec{{Port: 443, Protocol: v1alpha1.ProtocolTCP}}},
		}},
		ReverseExposures: []v1alpha1.ReverseExposure{{
			Name: "erp", Tunnel: "hq",
			Target: v1alpha1.Target{Address: "192.168.10.5", Ports: []v1alpha1.PortSpec{{Port: 8443}}},
		}},
	}
}

// Written out here rather than taken from the packages under test, so the fuzzer checks
// Validate against an independent statement of the rules.
var (
	specialRanges = []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/8"), netip.MustParsePrefix("127.0.0.0/8"),
		netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("224.0.0.0/4"),
		netip.MustParsePrefix("240.0.0.0/4"),
	}
	weakAlgorithms = []string{"null", "des", "3des", "md5", "sha1", "modp768", "modp1024", "modp1536"}
)

// FuzzGatewayValidate feeds arbitrary JSON-decoded specs to Validate: it must never
// panic, and whatever it accepts must have every pinned virtual IP inside its range, no
// target at a special-purpose address (the cloud's metadata service above all), no
// client network overlapping one, and no proposal naming an algorithm below the floor.
func FuzzGatewayValidate(f *testing.F) {
	good, _ := json.Marshal(goodGateway())
	f.Add(good)
	f.Add([]byte(`{"tunnels":[{"name":"a","peer":{"address":"1.2.3.4","subnets":["10.0.0.0/8"]},"preSharedKey":{"name":"s"}}],"exposures":[{"name":"e","virtualIP":"100.64.0.1","target":{"address":"x"}}]}`))
	f.Add([]byte(`{"tunnels":[],"reverseExposures":[{"name":"r","tunnel":"","virtualIP":"::1"}]}`))
	f.Add([]byte(`{"tunnels":[{"name":"a","peer":{"address":"1.2.3.4","subnets":["169.254.0.0/16"]},"preSharedKey":{"name":"s"}}],"exposures":[{"name":"e","target":{"address":"169.254.169.254","ports":[{"port":443}]}}],"reverseExposures":[{"name":"r","tunnel":"a","target":{"address":"169.254.169.254"}}]}`))
	f.Add([]byte(`{"tunnels":[{"name":"a","peer":{"address":"1.2.3.4","subnets":["10.0.0.0/8"]},"preSharedKey":{"name":"s"},"ike":{"proposals":["3des-sha1-modp1024"]},"esp":{"proposals":["aes256-md5"]}}],"exposures":[{"name":"e","target":{"address":"127.0.0.1"}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var s v1alpha1.GatewaySpec
		if err := json.Unmarshal(data, &s); err != nil {
			return
		}
		if len(s.Validate()) != 0 {
			return
		}
		special := func(a netip.Addr) bool {
			for _, p := range specialRanges {
				if p.Contains(a) {
					return true
				}
			}
			return false
		}
		for _, tn := range s.Tunnels {
			for _, sn := range tn.Peer.Subnets {
				p, err := netip.ParsePrefix(sn)
				if err != nil {
					t.Fatalf("accepted client subnet %q that is no prefix", sn)
				}
				for _, r := range specialRanges {
					if r.Overlaps(p) {
						t.Fatalf("accepted client subnet %s overlapping special-purpose %s", p, r)
					}
				}
			}
			for _, pr := range append(append([]string(nil), tn.IKE.Proposals...), tn.ESP.Proposals...) {
				for _, tok := range strings.Split(pr, "-") {
					if slices.Contains(weakAlgorithms, tok) {
						t.Fatalf("accepted proposal %q naming %s", pr, tok)
					}
				}
			}
		}
		for _, e := range s.Exposures {
			if a, err := netip.ParseAddr(e.Target.Address); err != nil || special(a) {
				t.Fatalf("accepted exposure target %q", e.Target.Address)
			}
		}
		for _, r := range s.ReverseExposures {
			if a, err := netip.ParseAddr(r.Target.Address); err != nil || special(a) {
				t.Fatalf("accepted reverse exposure target %q", r.Target.Address)
			}
		}
		for _, e := range s.Exposures {
			if e.VirtualIP == "" {
				continue
			}
			a, err := netip.ParseAddr(e.VirtualIP)
			if err != nil || !a.Is4() {
				t.Fatalf("accepted exposure pin %q that is no IPv4 address", e.VirtualIP)
			}
			if o := a.As4()[3]; o < v1alpha1.ExposureFirstOctet || o > v1alpha1.ExposureLastOctet {
				t.Fatalf("accepted exposure pin %s outside range", e.VirtualIP)
			}
		}
		for _, r := range s.ReverseExposures {
			if r.VirtualIP == "" {
				continue
			}
			a, err := netip.ParseAddr(r.VirtualIP)
			if err != nil || !a.Is4() {
				t.Fatalf("accepted reverse pin %q that is no IPv4 address", r.VirtualIP)
			}
			if o := a.As4()[3]; o < v1alpha1.ReverseFirstOctet {
				t.Fatalf("accepted reverse pin %s outside range", r.VirtualIP)
			}
		}
	})
}
