package v1alpha1

import (
	"net/netip"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bnerd.net/vpn-operator/internal/addrpolicy"
)

func goodGateway() GatewaySpec {
	return GatewaySpec{
		Tunnels: []Tunnel{{
			Name:         "hq",
			Peer:         Peer{Address: "198.51.100.7", Subnets: []string{"192.168.10.0/24"}},
			PreSharedKey: SecretKeyRef{Name: "hq-psk", Key: "psk"},
			IKE:          IKEOptions{Proposals: []string{"aes256gcm16-prfsha384-ecp384"}, Lifetime: "4h"},
			ESP:          ESPOptions{Proposals: []string{"aes256gcm16-ecp384"}, Lifetime: "1h"},
			DPD:          DPDOptions{Delay: "30s", Action: "restart"},
		}},
		Exposures: []Exposure{{
			Name:   "web",
			Target: Target{Address: "10.250.0.20", Ports: []PortSpec{{Port: 443, Protocol: ProtocolTCP}}},
		}},
		ReverseExposures: []ReverseExposure{{
			Name: "erp", Tunnel: "hq",
			Target: Target{Address: "192.168.10.5", Ports: []PortSpec{{Port: 8443}}},
		}},
	}
}

func TestGatewayValidate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(s *GatewaySpec)
		want   string // substring of the error; empty = valid
	}{
		{"good", func(s *GatewaySpec) {}, ""},
		{"pinned virtual IPs in range", func(s *GatewaySpec) {
			s.Exposures[0].VirtualIP = "100.64.3.10"
			s.ReverseExposures[0].VirtualIP = "100.64.3.254"
		}, ""},
		{"no tunnels", func(s *GatewaySpec) { s.Tunnels = nil }, "at least one tunnel"},
		{"routed mode", func(s *GatewaySpec) { s.Tunnels[0].Mode = TunnelModeRouted }, ""},
		{"unknown mode", func(s *GatewaySpec) { s.Tunnels[0].Mode = "bridge" }, "Unsupported value"},
		{"duplicate tunnel", func(s *GatewaySpec) { s.Tunnels = append(s.Tunnels, s.Tunnels[0]) }, "Duplicate value"},
		{"bad tunnel name", func(s *GatewaySpec) { s.Tunnels[0].Name = "Bad_Name" }, "DNS label"},
		{"bad peer address", func(s *GatewaySpec) { s.Tunnels[0].Peer.Address = "2001:db8::1" }, "IPv4 address"},
		{"injecting peer id", func(s *GatewaySpec) { s.Tunnels[0].Peer.ID = "x }\nsecrets {" }, "FQDN"},
		{"peer is the metadata service", func(s *GatewaySpec) { s.Tunnels[0].Peer.Address = "169.254.169.254" }, "spec.tunnels[0].peer.address: Invalid value: \"169.254.169.254\": is a special-purpose address"},
		{"peer is loopback", func(s *GatewaySpec) { s.Tunnels[0].Peer.Address = "127.0.0.1" }, "loopback"},
		{"no subnets", func(s *GatewaySpec) { s.Tunnels[0].Peer.Subnets = nil }, "at least one of the client's networks"},
		{"subnet host bits", func(s *GatewaySpec) { s.Tunnels[0].Peer.Subnets = []string{"192.168.10.1/24"} }, "did you mean 192.168.10.0/24"},
		{"overlapping subnets in one tunnel", func(s *GatewaySpec) {
			s.Tunnels[0].Peer.Subnets = []string{"192.168.0.0/16", "192.168.10.0/24"}
		}, "overlaps 192.168.0.0/16"},
		{"overlapping subnets across tunnels", func(s *GatewaySpec) {
			t2 := s.Tunnels[0]
			t2.Name = "branch"
			t2.Peer.Subnets = []string{"192.168.10.128/25"}
			s.Tunnels = append(s.Tunnels, t2)
		}, "could not tell which tunnel"},
		{"two tunnels with one peer identity", func(s *GatewaySpec) {
			t2 := s.Tunnels[0]
			t2.Name = "branch"
			t2.Peer.Subnets = []string{"192.168.20.0/24"}
			s.Tunnels = append(s.Tunnels, t2)
		}, "also the identity of tunnel"},
		{"two tunnels to one peer address with distinct identities", func(s *GatewaySpec) {
			t2 := s.Tunnels[0]
			t2.Name = "branch"
			t2.Peer.ID = "branch.example.org"
			t2.Peer.Subnets = []string{"192.168.20.0/24"}
			s.Tunnels = append(s.Tunnels, t2)
		}, ""},
		{"peer address inside its own subnets", func(s *GatewaySpec) { s.Tunnels[0].Peer.Subnets = []string{"198.51.100.0/24"} }, "peer's own address"},
		{"missing psk ref", func(s *GatewaySpec) { s.Tunnels[0].PreSharedKey.Name = "" }, "pre-shared key"},
		{"bad proposal", func(s *GatewaySpec) { s.Tunnels[0].IKE.Proposals = []string{"aes256;include /etc"} }, "strongSwan proposal"},
		{"bad lifetime", func(s *GatewaySpec) { s.Tunnels[0].ESP.Lifetime = "1 hour" }, "number of seconds"},
		{"bad floating ip", func(s *GatewaySpec) { s.Endpoint = &Endpoint{FloatingIP: "203.0.113"} }, "IPv4 address"},
		{"exposure pin on .1", func(s *GatewaySpec) { s.Exposures[0].VirtualIP = "100.64.3.1" }, "reserved as the gateway's SNAT source"},
		{"reverse pin on .1", func(s *GatewaySpec) { s.ReverseExposures[0].VirtualIP = "100.64.3.1" }, "reserved as the gateway's SNAT source"},
		{"exposure pin in reverse range", func(s *GatewaySpec) { s.Exposures[0].VirtualIP = "100.64.3.200" }, ".10-.199"},
		{"exposure pin below range", func(s *GatewaySpec) { s.Exposures[0].VirtualIP = "100.64.3.9" }, ".10-.199"},
		{"reverse pin in forward range", func(s *GatewaySpec) { s.ReverseExposures[0].VirtualIP = "100.64.3.150" }, ".200-.254"},
		{"reverse pin on broadcast", func(s *GatewaySpec) { s.ReverseExposures[0].VirtualIP = "100.64.3.255" }, ".200-.254"},
		{"pins in two /24s", func(s *GatewaySpec) {
			s.Exposures[0].VirtualIP = "100.64.3.10"
			s.ReverseExposures[0].VirtualIP = "100.64.4.200"
		}, "a gateway has one service CIDR"},
		{"duplicate pins", func(s *GatewaySpec) {
			e := s.Exposures[0]
			e.Name = "web2"
			s.Exposures[0].VirtualIP, e.VirtualIP = "100.64.3.10", "100.64.3.10"
			s.Exposures = append(s.Exposures, e)
		}, "already pinned at spec.exposures[0].virtualIP"},
		{"duplicate exposure", func(s *GatewaySpec) { s.Exposures = append(s.Exposures, s.Exposures[0]) }, "Duplicate value"},
		{"exposure target inside client subnet", func(s *GatewaySpec) { s.Exposures[0].Target.Address = "192.168.10.9" }, "use reverseExposures"},
		{"port zero", func(s *GatewaySpec) { s.Exposures[0].Target.Ports[0].Port = 0 }, "between 1 and 65535"},
		{"port too high", func(s *GatewaySpec) { s.Exposures[0].Target.Ports[0].Port = 70000 }, "between 1 and 65535"},
		{"duplicate port", func(s *GatewaySpec) {
			s.Exposures[0].Target.Ports = append(s.Exposures[0].Target.Ports, PortSpec{Port: 443})
		}, "443/TCP"},
		{"bad protocol", func(s *GatewaySpec) { s.Exposures[0].Target.Ports[0].Protocol = "SCTP" }, "Unsupported value"},
		{"reverse exposure names unknown tunnel", func(s *GatewaySpec) { s.ReverseExposures[0].Tunnel = "nope" }, "spec.reverseExposures[0].tunnel: Not found"},
		{"reverse target outside tunnel subnets", func(s *GatewaySpec) { s.ReverseExposures[0].Target.Address = "10.9.9.9" }, "not inside any peer subnet"},
		{"duplicate reverse exposure", func(s *GatewaySpec) { s.ReverseExposures = append(s.ReverseExposures, s.ReverseExposures[0]) }, "Duplicate value"},
		// Special-purpose addresses, as targets and as client networks.
		{"exposure targets the metadata service", func(s *GatewaySpec) { s.Exposures[0].Target.Address = "169.254.169.254" }, "metadata service 169.254.169.254"},
		{"exposure targets link-local", func(s *GatewaySpec) { s.Exposures[0].Target.Address = "169.254.1.1" }, "link-local"},
		{"exposure targets loopback", func(s *GatewaySpec) { s.Exposures[0].Target.Address = "127.0.0.1" }, "loopback"},
		{"exposure targets this network", func(s *GatewaySpec) { s.Exposures[0].Target.Address = "0.0.0.0" }, "this network"},
		{"exposure targets multicast", func(s *GatewaySpec) { s.Exposures[0].Target.Address = "239.1.2.3" }, "multicast"},
		{"exposure targets broadcast", func(s *GatewaySpec) { s.Exposures[0].Target.Address = "255.255.255.255" }, "reserved"},
		{"reverse exposure targets link-local", func(s *GatewaySpec) {
			s.Tunnels[0].Peer.Subnets = []string{"169.254.0.0/24"}
			s.ReverseExposures[0].Target.Address = "169.254.0.5"
		}, "spec.reverseExposures[0].target.address: Invalid value: \"169.254.0.5\": is a special-purpose address"},
		{"client subnet is link-local", func(s *GatewaySpec) { s.Tunnels[0].Peer.Subnets = []string{"169.254.169.0/24"} }, "overlaps a special-purpose range: link-local"},
		{"client subnet covers the metadata service", func(s *GatewaySpec) { s.Tunnels[0].Peer.Subnets = []string{"128.0.0.0/1"} }, "metadata service 169.254.169.254"},
		{"client subnet inside loopback", func(s *GatewaySpec) { s.Tunnels[0].Peer.Subnets = []string{"127.1.0.0/16"} }, "loopback"},
		// The crypto floor.
		{"IKE 3DES", func(s *GatewaySpec) { s.Tunnels[0].IKE.Proposals = []string{"3des-sha256-modp2048"} }, `"3des" is below the crypto floor`},
		{"IKE SHA-1", func(s *GatewaySpec) { s.Tunnels[0].IKE.Proposals = []string{"aes256-sha1-modp2048"} }, `"sha1" is below the crypto floor`},
		{"IKE MD5", func(s *GatewaySpec) { s.Tunnels[0].IKE.Proposals = []string{"aes256-md5-modp2048"} }, `"md5" is below the crypto floor`},
		{"IKE modp1024", func(s *GatewaySpec) { s.Tunnels[0].IKE.Proposals = []string{"aes256-sha256-modp1024"} }, `"modp1024" is below the crypto floor`},
		{"IKE modp768", func(s *GatewaySpec) { s.Tunnels[0].IKE.Proposals = []string{"aes256-sha256-modp768"} }, `"modp768" is below the crypto floor`},
		{"IKE null", func(s *GatewaySpec) { s.Tunnels[0].IKE.Proposals = []string{"null-sha256-modp2048"} }, `"null" is below the crypto floor`},
		{"ESP DES", func(s *GatewaySpec) { s.Tunnels[0].ESP.Proposals = []string{"des-sha256"} }, `"des" is below the crypto floor`},
		{"ESP SHA-1", func(s *GatewaySpec) { s.Tunnels[0].ESP.Proposals = []string{"aes128-sha1"} }, `"sha1" is below the crypto floor`},
		{"IKE without DH", func(s *GatewaySpec) { s.Tunnels[0].IKE.Proposals = []string{"aes256-sha256"} }, "needs a Diffie-Hellman group"},
		{"IKE AEAD without PRF", func(s *GatewaySpec) { s.Tunnels[0].IKE.Proposals = []string{"aes256gcm16-ecp384"} }, "needs a PRF"},
		{"AES without integrity", func(s *GatewaySpec) { s.Tunnels[0].ESP.Proposals = []string{"aes256-ecp384"} }, "without an integrity algorithm"},
		{"AEAD mixed with CBC", func(s *GatewaySpec) { s.Tunnels[0].ESP.Proposals = []string{"aes256gcm16-aes256-sha256"} }, "mixes AEAD and non-AEAD"},
		{"ESP PRF", func(s *GatewaySpec) { s.Tunnels[0].ESP.Proposals = []string{"aes256gcm16-prfsha256"} }, "only IKE proposals carry"},
		{"unknown algorithm", func(s *GatewaySpec) { s.Tunnels[0].ESP.Proposals = []string{"camellia256-sha256"} }, `"camellia256" is not an allowed ESP algorithm`},
		{"ESP without PFS is allowed", func(s *GatewaySpec) { s.Tunnels[0].ESP.Proposals = []string{"aes256-sha256"} }, ""},
		{"textbook strongSwan", func(s *GatewaySpec) {
			s.Tunnels[0].IKE.Proposals = []string{"aes256-sha256-modp2048"}
			s.Tunnels[0].ESP.Proposals = []string{"aes256-sha256-modp2048"}
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := goodGateway()
			tc.mutate(&s)
			errs := s.Validate()
			if tc.want == "" {
				if len(errs) != 0 {
					t.Fatalf("want valid, got %v", errs.ToAggregate())
				}
				return
			}
			if len(errs) == 0 {
				t.Fatalf("want an error containing %q, got none", tc.want)
			}
			if got := errs.ToAggregate().Error(); !strings.Contains(got, tc.want) {
				t.Fatalf("error %q does not contain %q", got, tc.want)
			}
		})
	}
}

func TestVPNGatewayProtocol(t *testing.T) {
	s := VPNGatewaySpec{GatewaySpec: goodGateway()}
	if errs := s.Validate(); len(errs) != 0 {
		t.Fatalf("default protocol must be valid: %v", errs)
	}
	s.Protocol = VPNProtocolIPsec
	if errs := s.Validate(); len(errs) != 0 {
		t.Fatalf("ipsec must be valid: %v", errs)
	}
	s.WireGuard = goodWireGuard()
	checkErrs(t, s.Validate(), "only a gateway with protocol wireguard takes spec.wireguard")
	s.Protocol = VPNProtocolWireGuard
	checkErrs(t, s.Validate(), "takes its peers from spec.wireguard.peers, not spec.tunnels")
	s.Protocol = "openvpn"
	checkErrs(t, s.Validate(), "Unsupported value")
}

func TestPlaintextExposures(t *testing.T) {
	s := goodGateway()
	if errs := s.PlaintextExposures(); len(errs) != 0 {
		t.Fatalf("HTTPS must pass: %v", errs)
	}
	s.Exposures = append(s.Exposures,
		Exposure{Name: "http", Target: Target{Address: "10.250.0.21", Ports: []PortSpec{{Port: 80}}}},
		Exposure{Name: "ldap", Target: Target{Address: "10.250.0.22", Ports: []PortSpec{{Port: 636}, {Port: 389}}}},
		Exposure{Name: "all", Target: Target{Address: "10.250.0.23"}},
		Exposure{Name: "optin", AllowPlaintext: true, Target: Target{Address: "10.250.0.24", Ports: []PortSpec{{Port: 80}}}},
	)
	errs := s.PlaintextExposures()
	got := errs.ToAggregate().Error()
	for _, want := range []string{`"http" port 80 is HTTP`, `"ldap" port 389 is LDAP`, `"all" forwards every port`} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in %q", want, got)
		}
	}
	if strings.Contains(got, "optin") || strings.Contains(got, "636") {
		t.Errorf("opt-in exposure or TLS port flagged: %q", got)
	}
	if len(errs) != 3 {
		t.Errorf("want 3 findings, got %d", len(errs))
	}
}

func TestClusterLinkValidate(t *testing.T) {
	ref := &SecretRef{Name: "clusterlink-x", Namespace: "bnerd-vpn-clusterlinks"}
	cases := []struct {
		name string
		spec ClusterLinkSpec
		want string
	}{
		{"same tenant", ClusterLinkSpec{ServiceClusterRouter: "r", ServiceClusterCIDR: "10.251.0.0/16"}, ""},
		{"pinned transit ip", ClusterLinkSpec{ServiceClusterRouter: "r", ServiceClusterCIDR: "10.251.0.0/16", TransitIP: "10.254.0.3"}, ""},
		{"cross tenant", ClusterLinkSpec{ServiceClusterRouter: "r", ServiceClusterCIDR: "10.234.0.0/16", CredentialsSecretRef: ref, CustomerProjectID: "abc"}, ""},
		{"no router", ClusterLinkSpec{ServiceClusterCIDR: "10.251.0.0/16"}, "router"},
		{"bad cidr", ClusterLinkSpec{ServiceClusterRouter: "r", ServiceClusterCIDR: "10.251.0.1/16"}, "host bits"},
		{"transit ip on .1", ClusterLinkSpec{ServiceClusterRouter: "r", ServiceClusterCIDR: "10.251.0.0/16", TransitIP: "10.254.0.1"}, "router leg"},
		{"transit ip on .2", ClusterLinkSpec{ServiceClusterRouter: "r", ServiceClusterCIDR: "10.251.0.0/16", TransitIP: "10.254.0.2"}, "DHCP"},
		{"secret without project", ClusterLinkSpec{ServiceClusterRouter: "r", ServiceClusterCIDR: "10.234.0.0/16", CredentialsSecretRef: ref}, "must name the customer project"},
		{"project without secret", ClusterLinkSpec{ServiceClusterRouter: "r", ServiceClusterCIDR: "10.234.0.0/16", CustomerProjectID: "abc"}, "only a cross-tenant link"},
		{"a /8 is the widest", ClusterLinkSpec{ServiceClusterRouter: "r", ServiceClusterCIDR: "10.0.0.0/8"}, ""},
		{"wider than /8", ClusterLinkSpec{ServiceClusterRouter: "r", ServiceClusterCIDR: "10.0.0.0/7"}, "must be /8 or narrower"},
		{"default route", ClusterLinkSpec{ServiceClusterRouter: "r", ServiceClusterCIDR: "0.0.0.0/0"}, "must be /8 or narrower"},
		{"link-local", ClusterLinkSpec{ServiceClusterRouter: "r", ServiceClusterCIDR: "169.254.0.0/16"}, "special-purpose range: link-local"},
		{"loopback", ClusterLinkSpec{ServiceClusterRouter: "r", ServiceClusterCIDR: "127.0.0.0/8"}, "loopback"},
		{"selector", ClusterLinkSpec{ServiceClusterRouter: "r", ServiceClusterCIDR: "10.251.0.0/16", GatewaySelector: &GatewaySelector{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "acme"}}}}, ""},
		{"bad selector", ClusterLinkSpec{ServiceClusterRouter: "r", ServiceClusterCIDR: "10.251.0.0/16", GatewaySelector: &GatewaySelector{
			Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x", Operator: "Sometimes"}}}}}, "spec.gatewaySelector.selector"},
		{"cross-tenant gateway labels only", ClusterLinkSpec{ServiceClusterRouter: "r", ServiceClusterCIDR: "10.251.0.0/16",
			CredentialsSecretRef: &SecretRef{Name: "clusterlink-x", Namespace: "bnerd-vpn-clusterlinks"}, CustomerProjectID: "c0ffee",
			GatewaySelector: &GatewaySelector{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"link": "acme"}}}}, "spec.gatewaySelector.namespaceSelector"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.spec.Validate()
			checkErrs(t, errs, tc.want)
		})
	}
}

func checkErrs(t *testing.T, errs field.ErrorList, want string) {
	t.Helper()
	if want == "" {
		if len(errs) != 0 {
			t.Fatalf("want valid, got %v", errs.ToAggregate())
		}
		return
	}
	if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), want) {
		t.Fatalf("want an error containing %q, got %v", want, errs.ToAggregate())
	}
}

// The operator's address policy: the pool, the gateway network's subnet and the
// exposure-target allow-list.
func TestGatewayValidateAddresses(t *testing.T) {
	pol := addrpolicy.Policy{
		ServiceCIDRPool: netip.MustParsePrefix("100.64.0.0/16"),
		GatewaySubnet:   netip.MustParsePrefix("10.254.0.0/24"),
	}
	allow := pol
	allow.ExposureTargets = []netip.Prefix{netip.MustParsePrefix("10.250.0.0/16")}
	cases := []struct {
		name   string
		pol    addrpolicy.Policy
		mutate func(s *GatewaySpec)
		want   string
	}{
		{"good", pol, func(s *GatewaySpec) {}, ""},
		{"good inside the allow-list", allow, func(s *GatewaySpec) {}, ""},
		{"exposure target outside the allow-list", allow, func(s *GatewaySpec) { s.Exposures[0].Target.Address = "10.251.0.7" }, "outside the operator's allowed exposure targets [10.250.0.0/16]"},
		{"exposure target in the pool", pol, func(s *GatewaySpec) { s.Exposures[0].Target.Address = "100.64.9.10" }, "lies in the service-CIDR pool 100.64.0.0/16"},
		{"exposure target on the gateway network", pol, func(s *GatewaySpec) { s.Exposures[0].Target.Address = "10.254.0.7" }, "lies in the gateway network's subnet 10.254.0.0/24"},
		{"reverse target in the pool", pol, func(s *GatewaySpec) {
			s.Tunnels[0].Peer.Subnets = []string{"100.64.9.0/24"}
			s.ReverseExposures[0].Target.Address = "100.64.9.5"
		}, "spec.reverseExposures[0].target.address"},
		{"client subnet overlaps the pool", pol, func(s *GatewaySpec) { s.Tunnels[0].Peer.Subnets = []string{"100.64.0.0/10"} }, "overlaps the service-CIDR pool"},
		{"no pool known", addrpolicy.Policy{}, func(s *GatewaySpec) { s.Exposures[0].Target.Address = "100.64.9.10" }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := goodGateway()
			tc.mutate(&s)
			errs := s.ValidateAddresses(tc.pol)
			if tc.want == "" {
				if len(errs) != 0 {
					t.Fatalf("want valid, got %v", errs.ToAggregate())
				}
				return
			}
			if got := errs.ToAggregate(); got == nil || !strings.Contains(got.Error(), tc.want) {
				t.Fatalf("error %v does not contain %q", got, tc.want)
			}
		})
	}
}

// The operator's own ranges are judged by ValidatePeerAddresses (security review L6).
func TestValidatePeerAddresses(t *testing.T) {
	pol := addrpolicy.Policy{
		ServiceCIDRPool: netip.MustParsePrefix("100.64.0.0/16"),
		GatewaySubnet:   netip.MustParsePrefix("10.254.0.0/24"),
		InternalSources: []netip.Prefix{netip.MustParsePrefix("10.250.0.0/16")},
	}
	s := goodGateway()
	if errs := s.ValidatePeerAddresses(pol, nil); len(errs) != 0 {
		t.Fatalf("a public peer refused: %v", errs.ToAggregate())
	}
	for addr, want := range map[string]string{
		"100.64.7.7": "service-CIDR pool", "10.254.0.9": "gateway network", "10.250.1.1": "internal source network",
	} {
		s.Tunnels[0].Peer.Address = addr
		if errs := s.ValidatePeerAddresses(pol, nil); errs.ToAggregate() == nil || !strings.Contains(errs.ToAggregate().Error(), "spec.tunnels[0].peer.address") || !strings.Contains(errs.ToAggregate().Error(), want) {
			t.Errorf("peer %s: %v", addr, errs.ToAggregate())
		}
	}
	wg := &WireGuardSpec{Peers: []WireGuardPeer{{Name: "a"}, {Name: "b", Endpoint: &WireGuardEndpoint{Address: "10.250.9.9"}}}}
	errs := (&GatewaySpec{}).ValidatePeerAddresses(pol, wg)
	if errs.ToAggregate() == nil || !strings.Contains(errs.ToAggregate().Error(), "spec.wireguard.peers[1].endpoint.address") {
		t.Errorf("WireGuard endpoint: %v", errs.ToAggregate())
	}
	wg.Peers[1].Endpoint.Address = "192.168.3.3"
	if errs := (&GatewaySpec{}).ValidatePeerAddresses(pol, wg); len(errs) != 0 {
		t.Errorf("a private endpoint refused: %v", errs.ToAggregate())
	}
}
