package v1alpha1_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/cryptofloor"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

var seq atomic.Int64

func name(prefix string) string { return fmt.Sprintf("%s-%d", prefix, seq.Add(1)) }

const ns = "default"

func goodGatewaySpec() v1alpha1.GatewaySpec {
	return v1alpha1.GatewaySpec{
		Tunnels: []v1alpha1.Tunnel{{
			Name:         "hq",
			Peer:         v1alpha1.Peer{Address: "198.51.100.7", Subnets: []string{"192.168.10.0/24"}},
			PreSharedKey: v1alpha1.SecretKeyRef{Name: "hq-psk"},
		}},
		Exposures: []v1alpha1.Exposure{{
			Name:   "web",
			Target: v1alpha1.Target{Address: "10.250.0.20", Ports: []v1alpha1.PortSpec{{Port: 443}}},
		}},
		ReverseExposures: []v1alpha1.ReverseExposure{{
			Name: "erp", Tunnel: "hq",
			Target: v1alpha1.Target{Address: "192.168.10.5", Ports: []v1alpha1.PortSpec{{Port: 8443}}},
		}},
	}
}

// TestGatewayAdmission creates IPsecGateways on the real API server: the good one is
// accepted (with defaults filled), each bad one is refused with its message.
func TestGatewayAdmission(t *testing.T) {
	testenv.Need(t)
	cases := []struct {
		name   string
		mutate func(s *v1alpha1.GatewaySpec)
		want   string // substring of the API server's refusal; empty = accepted
	}{
		{"good", func(s *v1alpha1.GatewaySpec) {}, ""},
		{"peer address not an IP", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].Peer.Address = "peer.example" }, "peer.address must be an IPv4 address"},
		{"peer address IPv6", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].Peer.Address = "2001:db8::1" }, "peer.address must be an IPv4 address"},
		{"peer subnet not a CIDR", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].Peer.Subnets = []string{"192.168.10.0"} }, "each peer subnet must be an IPv4 network in CIDR notation"},
		{"peer subnet host bits", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].Peer.Subnets = []string{"192.168.10.1/24"} }, "no host bits set"},
		{"no peer subnets", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].Peer.Subnets = nil }, "spec.tunnels[0].peer.subnets: Required value"},
		{"port 0", func(s *v1alpha1.GatewaySpec) { s.Exposures[0].Target.Ports[0].Port = 0 }, "should be greater than or equal to 1"},
		{"port 65536", func(s *v1alpha1.GatewaySpec) { s.Exposures[0].Target.Ports[0].Port = 65536 }, "should be less than or equal to 65535"},
		{"protocol not an enum value", func(s *v1alpha1.GatewaySpec) { s.Exposures[0].Target.Ports[0].Protocol = "SCTP" }, `supported values: "TCP", "UDP"`},
		{"mode not an enum value", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].Mode = "bridge" }, `supported values: "snat", "routed"`},
		{"dpd action not an enum value", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].DPD.Action = "hold" }, `supported values: "restart", "clear", "trap"`},
		{"duplicate tunnel names", func(s *v1alpha1.GatewaySpec) { s.Tunnels = append(s.Tunnels, s.Tunnels[0]) }, "tunnel names must be unique"},
		{"duplicate exposure names", func(s *v1alpha1.GatewaySpec) { s.Exposures = append(s.Exposures, s.Exposures[0]) }, "exposure names must be unique"},
		{"duplicate reverse exposure names", func(s *v1alpha1.GatewaySpec) {
			s.ReverseExposures = append(s.ReverseExposures, s.ReverseExposures[0])
		}, "reverse exposure names must be unique"},
		{"reverse exposure names an unknown tunnel", func(s *v1alpha1.GatewaySpec) { s.ReverseExposures[0].Tunnel = "branch" }, "every reverseExposures[].tunnel must name a tunnel listed in spec.tunnels"},
		{"target address not an IP", func(s *v1alpha1.GatewaySpec) { s.Exposures[0].Target.Address = "10.250.0" }, "target.address must be an IPv4 address"},
		{"virtual IP not an IP", func(s *v1alpha1.GatewaySpec) { s.Exposures[0].VirtualIP = "100.64.3.999" }, "virtualIP must be an IPv4 address"},
		{"reverse virtual IP not an IP", func(s *v1alpha1.GatewaySpec) { s.ReverseExposures[0].VirtualIP = "vip" }, "virtualIP must be an IPv4 address"},
		{"floating IP not an IP", func(s *v1alpha1.GatewaySpec) { s.Endpoint = &v1alpha1.Endpoint{FloatingIP: "203.0.113.300"} }, "endpoint.floatingIP must be an IPv4 address"},
		{"tunnel name not a DNS label", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].Name = "HQ_1" }, "spec.tunnels[0].name: Invalid value"},
		{"no tunnels", func(s *v1alpha1.GatewaySpec) { s.Tunnels = []v1alpha1.Tunnel{}; s.ReverseExposures = nil }, "spec.tunnels is required: an IPsec gateway needs at least one tunnel"},
		{"routed mode", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].Mode = v1alpha1.TunnelModeRouted }, ""},
		{"lifetime not a duration", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].IKE.Lifetime = "4 hours" }, "spec.tunnels[0].ike.lifetime"},
		{"proposal injecting syntax", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].ESP.Proposals = []string{"aes256 }"} }, "spec.tunnels[0].esp.proposals[0]"},
		{"peer id injecting syntax", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].Peer.ID = "hq\n}" }, "spec.tunnels[0].peer.id"},
		// Special-purpose addresses are refused at admission.
		{"exposure targets the metadata service", func(s *v1alpha1.GatewaySpec) { s.Exposures[0].Target.Address = "169.254.169.254" }, "target.address must not be a special-purpose address"},
		{"exposure targets loopback", func(s *v1alpha1.GatewaySpec) { s.Exposures[0].Target.Address = "127.0.0.1" }, "target.address must not be a special-purpose address"},
		{"exposure targets multicast", func(s *v1alpha1.GatewaySpec) { s.Exposures[0].Target.Address = "224.0.0.251" }, "target.address must not be a special-purpose address"},
		{"exposure targets this network", func(s *v1alpha1.GatewaySpec) { s.Exposures[0].Target.Address = "0.1.2.3" }, "target.address must not be a special-purpose address"},
		{"exposure targets broadcast", func(s *v1alpha1.GatewaySpec) { s.Exposures[0].Target.Address = "255.255.255.255" }, "target.address must not be a special-purpose address"},
		{"reverse exposure targets link-local", func(s *v1alpha1.GatewaySpec) { s.ReverseExposures[0].Target.Address = "169.254.10.1" }, "spec.reverseExposures[0].target.address: Invalid value"},
		{"peer subnet is link-local", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].Peer.Subnets = []string{"169.254.0.0/16"} }, "a peer subnet must not overlap a special-purpose range"},
		{"peer subnet covers link-local", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].Peer.Subnets = []string{"128.0.0.0/1"} }, "a peer subnet must not overlap a special-purpose range"},
		{"peer subnet inside loopback", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].Peer.Subnets = []string{"127.9.0.0/16"} }, "a peer subnet must not overlap a special-purpose range"},
		// A peer address in a special-purpose range would have the pod route it out of its
		// port and the security group admit it (security review L6); private and
		// documentation addresses are ordinary peers.
		{"peer is the metadata service", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].Peer.Address = "169.254.169.254" }, "peer.address must not be a special-purpose address"},
		{"peer is loopback", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].Peer.Address = "127.0.0.1" }, "peer.address must not be a special-purpose address"},
		{"peer is unspecified", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].Peer.Address = "0.0.0.0" }, "peer.address must not be a special-purpose address"},
		{"peer is multicast", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].Peer.Address = "239.1.2.3" }, "peer.address must not be a special-purpose address"},
		{"peer is broadcast", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].Peer.Address = "255.255.255.255" }, "peer.address must not be a special-purpose address"},
		{"peer in private space", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].Peer.Address = "10.1.2.3" }, ""},
		{"peer in the operator's pool space (judged by the operator)", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].Peer.Address = "100.64.1.1" }, ""},
		// The crypto floor at admission: the tokens, and a DH group in IKE.
		{"IKE 3DES", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].IKE.Proposals = []string{"3des-sha256-modp2048"} }, "an IKE proposal uses an algorithm below the crypto floor"},
		{"IKE SHA-1", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].IKE.Proposals = []string{"aes256-sha1-modp2048"} }, "an IKE proposal uses an algorithm below the crypto floor"},
		{"IKE modp1024", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].IKE.Proposals = []string{"aes256-sha256-modp1024"} }, "an IKE proposal uses an algorithm below the crypto floor"},
		{"IKE without DH", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].IKE.Proposals = []string{"aes256-sha256"} }, "an IKE proposal needs a Diffie-Hellman group"},
		{"ESP MD5", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].ESP.Proposals = []string{"aes256-md5"} }, "an ESP proposal uses an algorithm below the crypto floor"},
		{"ESP null", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].ESP.Proposals = []string{"null-sha256"} }, "an ESP proposal uses an algorithm below the crypto floor"},
		{"ESP modp768", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].ESP.Proposals = []string{"aes256gcm16-modp768"} }, "an ESP proposal uses an algorithm below the crypto floor"},
		{"textbook strongSwan", func(s *v1alpha1.GatewaySpec) {
			s.Tunnels[0].IKE.Proposals = []string{"aes256-sha256-modp2048"}
			s.Tunnels[0].ESP.Proposals = []string{"aes256-sha256-modp2048"}
		}, ""},
		{"ESP without PFS", func(s *v1alpha1.GatewaySpec) { s.Tunnels[0].ESP.Proposals = []string{"aes256gcm16"} }, ""},
	}
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gw := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Name: name("gw"), Namespace: ns}, Spec: goodGatewaySpec()}
			tc.mutate(&gw.Spec)
			err := env.Client.Create(ctx, gw)
			expectAdmission(t, err, tc.want)
		})
	}
}

func TestGatewayDefaults(t *testing.T) {
	testenv.Need(t)
	ctx := context.Background()
	gw := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Name: name("gw"), Namespace: ns}, Spec: goodGatewaySpec()}
	if err := env.Client.Create(ctx, gw); err != nil {
		t.Fatal(err)
	}
	tun := gw.Spec.Tunnels[0]
	if tun.Mode != v1alpha1.TunnelModeSNAT || tun.PreSharedKey.Key != "psk" || tun.IKE.Lifetime != "4h" ||
		tun.ESP.Lifetime != "1h" || tun.DPD.Delay != "30s" || tun.DPD.Action != "restart" ||
		len(tun.IKE.Proposals) == 0 || len(tun.ESP.Proposals) == 0 {
		t.Fatalf("defaults not applied: %+v", tun)
	}
	if gw.Spec.Exposures[0].Target.Ports[0].Protocol != v1alpha1.ProtocolTCP {
		t.Fatalf("port protocol default not applied: %+v", gw.Spec.Exposures[0].Target.Ports)
	}
}

func TestVPNGatewayAdmission(t *testing.T) {
	testenv.Need(t)
	ctx := context.Background()
	cases := []struct {
		name     string
		protocol v1alpha1.VPNProtocol
		mutate   func(s *v1alpha1.GatewaySpec)
		want     string
	}{
		{"default protocol", "", nil, ""},
		{"wireguard without peers", v1alpha1.VPNProtocolWireGuard, nil, "protocol wireguard needs spec.wireguard (its peers) and no spec.tunnels"},
		{"unknown protocol", "openvpn", nil, `supported values: "ipsec", "wireguard"`},
		{"reverse exposure names an unknown tunnel", "", func(s *v1alpha1.GatewaySpec) { s.ReverseExposures[0].Tunnel = "x" }, "every reverseExposures[].tunnel must name a tunnel"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gw := &v1alpha1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Name: name("vpn"), Namespace: ns},
				Spec: v1alpha1.VPNGatewaySpec{GatewaySpec: goodGatewaySpec(), Protocol: tc.protocol}}
			if tc.mutate != nil {
				tc.mutate(&gw.Spec.GatewaySpec)
			}
			err := env.Client.Create(ctx, gw)
			expectAdmission(t, err, tc.want)
			if err == nil && tc.protocol == "" && gw.Spec.Protocol != v1alpha1.VPNProtocolIPsec {
				t.Fatalf("protocol default = %q, want ipsec", gw.Spec.Protocol)
			}
		})
	}
}

func crossTenant(n string) *v1alpha1.ClusterLink {
	return &v1alpha1.ClusterLink{
		ObjectMeta: metav1.ObjectMeta{Name: n, Annotations: map[string]string{v1alpha1.AnnotationCustomerAPIAccess: "none"}},
		Spec: v1alpha1.ClusterLinkSpec{
			ServiceClusterRouter: "shoot--diehl--diehl01",
			ServiceClusterCIDR:   "10.234.0.0/16",
			CredentialsSecretRef: &v1alpha1.SecretRef{Name: "clusterlink-" + n, Namespace: "bnerd-vpn-clusterlinks"},
			CustomerProjectID:    "c0ffee00c0ffee00c0ffee00c0ffee00",
		},
	}
}

func sameTenant(n string) *v1alpha1.ClusterLink {
	return &v1alpha1.ClusterLink{
		ObjectMeta: metav1.ObjectMeta{Name: n},
		Spec:       v1alpha1.ClusterLinkSpec{ServiceClusterRouter: "shoot--services--svc01", ServiceClusterCIDR: "10.251.0.0/16"},
	}
}

func TestClusterLinkAdmission(t *testing.T) {
	testenv.Need(t)
	ctx := context.Background()
	cases := []struct {
		name string
		obj  func(n string) *v1alpha1.ClusterLink
		want string
	}{
		{"same tenant", sameTenant, ""},
		{"same tenant with pinned transit IP", func(n string) *v1alpha1.ClusterLink {
			l := sameTenant(n)
			l.Spec.TransitIP = "10.254.0.3"
			return l
		}, ""},
		{"cross tenant", crossTenant, ""},
		{"service cluster CIDR not a CIDR", func(n string) *v1alpha1.ClusterLink {
			l := sameTenant(n)
			l.Spec.ServiceClusterCIDR = "10.251.0.0"
			return l
		}, "serviceClusterCIDR must be an IPv4 network in CIDR notation"},
		{"transit IP not an IP", func(n string) *v1alpha1.ClusterLink {
			l := sameTenant(n)
			l.Spec.TransitIP = "10.254.0.3/24"
			return l
		}, "transitIP must be an IPv4 address"},
		{"empty router", func(n string) *v1alpha1.ClusterLink {
			l := sameTenant(n)
			l.Spec.ServiceClusterRouter = ""
			return l
		}, "spec.serviceClusterRouter"},
		{"credentialsSecretRef without customerProjectID", func(n string) *v1alpha1.ClusterLink {
			l := crossTenant(n)
			l.Spec.CustomerProjectID = ""
			return l
		}, "customerProjectID is required when credentialsSecretRef is set"},
		{"customerProjectID without credentialsSecretRef", func(n string) *v1alpha1.ClusterLink {
			l := sameTenant(n)
			l.Spec.CustomerProjectID = "c0ffee"
			return l
		}, "customerProjectID is only allowed on a cross-tenant link"},
		{"service cluster CIDR wider than /8", func(n string) *v1alpha1.ClusterLink {
			l := sameTenant(n)
			l.Spec.ServiceClusterCIDR = "0.0.0.0/0"
			return l
		}, "serviceClusterCIDR must be /8 or narrower"},
		{"service cluster CIDR /8", func(n string) *v1alpha1.ClusterLink {
			l := sameTenant(n)
			l.Spec.ServiceClusterCIDR = "10.0.0.0/8"
			return l
		}, ""},
		{"service cluster CIDR link-local", func(n string) *v1alpha1.ClusterLink {
			l := sameTenant(n)
			l.Spec.ServiceClusterCIDR = "169.254.0.0/16"
			return l
		}, "serviceClusterCIDR must not overlap a special-purpose range"},
		{"gateway selector", func(n string) *v1alpha1.ClusterLink {
			l := crossTenant(n)
			l.Spec.GatewaySelector = &v1alpha1.GatewaySelector{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.LabelCustomerProject: "c0ffee00c0ffee00c0ffee00c0ffee00"}},
				Selector:          &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"prod"}}}},
			}
			return l
		}, ""},
		// M3: a cross-tenant link's selector must name a namespace label.
		{"cross-tenant empty gateway selector", func(n string) *v1alpha1.ClusterLink {
			l := crossTenant(n)
			l.Spec.GatewaySelector = &v1alpha1.GatewaySelector{}
			return l
		}, "a cross-tenant link's gatewaySelector must select namespaces by label"},
		{"cross-tenant gateway-label-only selector", func(n string) *v1alpha1.ClusterLink {
			l := crossTenant(n)
			l.Spec.GatewaySelector = &v1alpha1.GatewaySelector{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"link": "acme"}}}
			return l
		}, "a cross-tenant link's gatewaySelector must select namespaces by label"},
		{"cross-tenant empty namespace selector", func(n string) *v1alpha1.ClusterLink {
			l := crossTenant(n)
			l.Spec.GatewaySelector = &v1alpha1.GatewaySelector{NamespaceSelector: &metav1.LabelSelector{}}
			return l
		}, "a cross-tenant link's gatewaySelector must select namespaces by label"},
		{"same-tenant empty gateway selector", func(n string) *v1alpha1.ClusterLink {
			l := sameTenant(n)
			l.Spec.GatewaySelector = &v1alpha1.GatewaySelector{}
			return l
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := env.Client.Create(ctx, tc.obj(name("link")))
			expectAdmission(t, err, tc.want)
		})
	}
}

// TestClusterLinkTransitions checks the four cross-tenant update rules, plus an
// ordinary update that must still pass.
func TestClusterLinkTransitions(t *testing.T) {
	testenv.Need(t)
	ctx := context.Background()
	cases := []struct {
		name   string
		start  func(n string) *v1alpha1.ClusterLink
		mutate func(l *v1alpha1.ClusterLink)
		want   string
	}{
		{"change customerProjectID", crossTenant, func(l *v1alpha1.ClusterLink) { l.Spec.CustomerProjectID = "deadbeef" },
			"customerProjectID is immutable once set"},
		{"remove customerProjectID", crossTenant, func(l *v1alpha1.ClusterLink) { l.Spec.CustomerProjectID = "" },
			"customerProjectID is immutable once set"},
		{"add credentialsSecretRef", sameTenant, func(l *v1alpha1.ClusterLink) {
			l.Spec.CredentialsSecretRef = &v1alpha1.SecretRef{Name: "clusterlink-" + l.Name, Namespace: "bnerd-vpn-clusterlinks"}
			l.Spec.CustomerProjectID = "c0ffee"
		}, "credentialsSecretRef cannot be added to or removed from an existing ClusterLink"},
		{"remove credentialsSecretRef", crossTenant, func(l *v1alpha1.ClusterLink) {
			l.Spec.CredentialsSecretRef = nil
			l.Spec.CustomerProjectID = ""
		}, "credentialsSecretRef cannot be added to or removed from an existing ClusterLink"},
		{"re-point credentialsSecretRef (schema allows; operator refuses)", crossTenant, func(l *v1alpha1.ClusterLink) {
			l.Spec.CredentialsSecretRef.Name = "other"
		}, ""},
		{"change service cluster CIDR", crossTenant, func(l *v1alpha1.ClusterLink) { l.Spec.ServiceClusterCIDR = "10.235.0.0/16" }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := tc.start(name("link"))
			if err := env.Client.Create(ctx, l); err != nil {
				t.Fatal(err)
			}
			tc.mutate(l)
			expectAdmission(t, env.Client.Update(ctx, l), tc.want)
		})
	}
}

func expectAdmission(t *testing.T, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("want accepted, got %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("want refusal containing %q, got accepted", want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("refusal %q does not contain %q", err.Error(), want)
	}
}

// TestKubectlShowsColumnsAndDescriptions runs the real kubectl against the control
// plane: `get` shows the printer columns and `explain` the field descriptions.
func TestKubectlShowsColumnsAndDescriptions(t *testing.T) {
	testenv.Need(t)
	kubectl := filepath.Join(env.BinDir, "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		// hack/controlplane.sh builds kubectl with the control plane.
		if testenv.Required() {
			t.Fatalf("kubectl not built in %s: %v (and %s=1 requires this test)", env.BinDir, err, testenv.RequireEnv)
		}
		t.Skipf("kubectl not built in %s: %v", env.BinDir, err)
	}
	kc, err := env.WriteKubeConfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	gw := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Name: name("shown"), Namespace: ns}, Spec: goodGatewaySpec()}
	if err := env.Client.Create(ctx, gw); err != nil {
		t.Fatal(err)
	}
	gw.Status.FloatingIP = "203.0.113.10"
	gw.Status.ServiceCIDR = "100.64.3.0/24"
	gw.Status.NodeName = "vpn01-worker-a"
	gw.Status.TunnelsReady = "1/1"
	gw.Status.TunnelSummary = "1/1"
	observed := metav1.Now()
	gw.Status.TunnelsObservedTime = &observed
	gw.Status.Conditions = []metav1.Condition{
		{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonReconciled, LastTransitionTime: observed},
		{Type: v1alpha1.ConditionPodReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPodReady, LastTransitionTime: observed},
	}
	if err := env.Client.Status().Update(ctx, gw); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, sameTenant(name("shown-link"))); err != nil {
		t.Fatal(err)
	}

	run := func(args ...string) string {
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig", kc}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		t.Logf("$ kubectl %s\n%s", strings.Join(args, " "), out)
		// kubectl wraps descriptions; compare with whitespace collapsed.
		return strings.Join(strings.Fields(string(out)), " ")
	}
	out := run("get", "ipsecgw", "-n", ns, gw.Name)
	for _, col := range []string{"READY", "REASON", "POD", "TUNNELS UP", "FLOATING IP", "NODE", "AGE", "True Reconciled PodReady 1/1 203.0.113.10 vpn01-worker-a"} {
		if !strings.Contains(out, col) {
			t.Errorf("kubectl get ipsecgw lacks %q", col)
		}
	}
	out = run("get", "ipsecgw", "-n", ns, gw.Name, "-o", "wide")
	for _, col := range []string{"SERVICE CIDR", "AGENT REPORT", "100.64.3.0/24"} {
		if !strings.Contains(out, col) {
			t.Errorf("kubectl get ipsecgw -o wide lacks %q", col)
		}
	}
	out = run("get", "clink")
	for _, col := range []string{"ROUTER", "CIDR", "TRANSIT IP", "READY", "shoot--services--svc01", "10.251.0.0/16"} {
		if !strings.Contains(out, col) {
			t.Errorf("kubectl get clink lacks %q", col)
		}
	}
	out = run("explain", "ipsecgateway.spec.tunnels.peer")
	for _, want := range []string{"IKE identity", "remote traffic selectors", "UDP 500 and 4500"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl explain lacks %q", want)
		}
	}
	out = run("explain", "clusterlink.spec")
	for _, want := range []string{"customerProjectID", "immutable once set", "clusterlink-<link name>"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl explain clusterlink.spec lacks %q", want)
		}
	}
	out = run("explain", "vpngateway.spec.protocol")
	if !strings.Contains(out, "wireguard") {
		t.Errorf("kubectl explain vpngateway.spec.protocol lacks wireguard")
	}
}

// TestExamplesAreAccepted applies every example manifest of the repository (each one
// object of this API) to the real API server and runs Validate on it, so the examples
// the docs point at can never drift from the schema.
func TestExamplesAreAccepted(t *testing.T) {
	testenv.Need(t)
	ctx := context.Background()
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "examples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var obj client.Object
		switch {
		case strings.Contains(string(data), "\nkind: IPsecGateway"):
			obj = &v1alpha1.IPsecGateway{}
		case strings.Contains(string(data), "\nkind: VPNGateway"):
			obj = &v1alpha1.VPNGateway{}
		case strings.Contains(string(data), "\nkind: ClusterLink"):
			obj = &v1alpha1.ClusterLink{}
		default:
			continue // the simulator's seed, not an API object
		}
		seen++
		t.Run(filepath.Base(f), func(t *testing.T) {
			if err := yaml.Unmarshal(data, obj); err != nil {
				t.Fatal(err)
			}
			var errs field.ErrorList
			switch o := obj.(type) {
			case *v1alpha1.IPsecGateway:
				errs = append(o.Spec.Validate(), o.Spec.PlaintextExposures()...)
			case *v1alpha1.VPNGateway:
				errs = append(o.Spec.Validate(), o.Spec.PlaintextExposures()...)
			case *v1alpha1.ClusterLink:
				errs = o.Spec.Validate()
			}
			if len(errs) > 0 {
				t.Fatalf("Validate: %v", errs.ToAggregate())
			}
			if ns := obj.GetNamespace(); ns != "" {
				if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
					t.Fatal(err)
				}
			}
			if err := env.Client.Create(ctx, obj); err != nil {
				t.Fatalf("the API server refused the example: %v", err)
			}
		})
	}
	if seen < 4 {
		t.Fatalf("found only %d example objects", seen)
	}
}

// The CRD's admission rules for proposals are cryptofloor's own, so admission and
// Validate() agree on the floor.
func TestProposalRulesMatchTheCryptoFloor(t *testing.T) {
	for _, file := range []string{"ipsec.bnerd.net_ipsecgateways.yaml", "ipsec.bnerd.net_vpngateways.yaml"} {
		data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "crd", file))
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if err := yaml.Unmarshal(data, &doc); err != nil {
			t.Fatal(err)
		}
		rules := map[string]bool{}
		var walk func(any)
		walk = func(n any) {
			switch v := n.(type) {
			case map[string]any:
				if r, ok := v["rule"].(string); ok {
					rules[r] = true
				}
				for _, c := range v {
					walk(c)
				}
			case []any:
				for _, c := range v {
					walk(c)
				}
			}
		}
		walk(doc)
		for _, k := range []cryptofloor.Kind{cryptofloor.IKE, cryptofloor.ESP} {
			for _, rule := range cryptofloor.CELRules(k) {
				if !rules[rule] {
					t.Errorf("%s: the %s rule %q is not in the CRD; copy cryptofloor.CELRules into the markers", file, k, rule)
				}
			}
		}
	}
}
