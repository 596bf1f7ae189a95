package fuzz

import (
	"encoding/json"
	"net/netip"
	"testing"

	v1 "bnerd.net/vpn-operator/api/v1alpha1"
)

func goodGateway() v1.GatewaySpec {
	return v1.GatewaySpec{
		Tunnels: []v1.Tunnel{{
			Name:         "hq",
			Peer:         v1.Peer{Address: "198.51.100.7", Subnets: []string{"192.168.10.0/24"}},
			PreSharedKey: v1.SecretKeyRef{Name: "hq-psk", Key: "psk"},
			IKE:          v1.IKEOptions{Proposals: []string{"aes256gcm16-prfsha384-ecp384"}, Lifetime: "4h"},
			ESP:          v1.ESPOptions{Proposals: []string{"aes256gcm16-ecp384"}, Lifetime: "1h"},
			DPD:          v1.DPDOptions{Delay: "30s", Action: "restart"},
		}},
		Exposures: []v1.Exposure{{
			Name:   "web",
			Target: v1.Target{Address: "10.250.0.20", Ports: []v1.PortSpec{{Port: 443, Protocol: v1.ProtocolTCP}}},
		}},
		ReverseExposures: []v1.ReverseExposure{{
			Name: "erp", Tunnel: "hq",
			Target: v1.Target{Address: "192.168.10.5", Ports: []v1.PortSpec{{Port: 8443}}},
		}},
	}
}

// FuzzGatewayValidate feeds arbitrary JSON-decoded specs to Validate: it must never
// panic, and whatever it accepts must have every pinned virtual IP inside its range.
func FuzzGatewayValidate(f *testing.F) {
	good, _ := json.Marshal(goodGateway())
	f.Add(good)
	f.Add([]byte(`{"tunnels":[{"name":"a","peer":{"address":"1.2.3.4","subnets":["10.0.0.0/8"]},"preSharedKey":{"name":"s"}}],"exposures":[{"name":"e","virtualIP":"100.64.0.1","target":{"address":"x"}}]}`))
	f.Add([]byte(`{"tunnels":[],"reverseExposures":[{"name":"r","tunnel":"","virtualIP":"::1"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var s v1.GatewaySpec
		if err := json.Unmarshal(data, &s); err != nil {
			return
		}
		if len(s.Validate()) != 0 {
			return
		}
		for _, e := range s.Exposures {
			if e.VirtualIP == "" {
				continue
			}
			a, err := netip.ParseAddr(e.VirtualIP)
			if err != nil || !a.Is4() {
				t.Fatalf("accepted exposure pin %q that is no IPv4 address", e.VirtualIP)
			}
			if o := a.As4()[3]; o < v1.ExposureFirstOctet || o > v1.ExposureLastOctet {
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
			if o := a.As4()[3]; o < v1.ReverseFirstOctet {
				t.Fatalf("accepted reverse pin %s outside range", r.VirtualIP)
			}
		}
	})
}
