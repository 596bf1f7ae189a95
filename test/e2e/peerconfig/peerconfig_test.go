// Package peerconfig proves `kubectl vpn peer-config --format strongswan`: the client's
// side it writes, loaded unchanged into a real charon, brings a tunnel up with a gateway
// configured by the operator's own renderers and agent (charon with kernel-libipsec in
// network namespaces, the floating IP's 1:1 NAT on a router namespace), and traffic from
// the client's network reaches an exposure's virtual IP through it.
//
// It needs root and the Debian packages hack/install-deps.sh installs; without them it
// skips and says why (BNERD_REQUIRE_DATAPLANE=1 makes that a failure).
package peerconfig

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	pc "bnerd.net/vpn-operator/internal/kubectlvpn/peerconfig"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
	"bnerd.net/vpn-operator/test/e2e/netns"
)

// Addresses: TEST-NET and CGNAT space inside namespaces this test creates only.
const (
	clientAddr  = "198.51.100.10"
	clientNet   = "198.51.100.0/24"
	peerLAN     = "198.51.100.1"
	peerWAN     = "192.0.2.2"
	routerWAN   = "192.0.2.1"
	floatingIP  = "192.0.2.100"
	routerLAN   = "203.0.113.1"
	portFixedIP = "203.0.113.5"
	// The exposure's target lives on a network of its own behind the router, as a
	// service cluster's does: the gateway network itself is never an exposure target.
	backendAddr = "198.18.0.20"
	backendGW   = "198.18.0.1"
	serviceCIDR = "100.64.7.0/24"
	exposureVIP = "100.64.7.10"
	peerID      = "client.example.net"
	psk         = "peerconfig-e2e-psk-not-a-real-secret"
)

// env is one test's namespaces (test/e2e/netns) and the agent built for it.
type env struct {
	*netns.Env
	agent string
}

// newEnv builds the agent and, when a wait fails, shows the tails of both charons' logs.
func newEnv(t *testing.T, tag string) *env {
	e := &env{Env: netns.New(t, tag)}
	e.Diagnose = func() string {
		return "charon-g:\n" + netns.Tail(e.CharonLog("g"), 40) + "\ncharon-p:\n" + netns.Tail(e.CharonLog("p"), 40)
	}
	return e
}

func requirements(t *testing.T) {
	netns.Require(t, "charon-systemd", "swanctl", "ping")
	if _, err := os.Stat("/usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so"); err != nil {
		testenv.SkipDataplane(t, "the peer-config e2e needs strongSwan's kernel-libipsec plugin (libcharon-extra-plugins)")
	}
}

// gateway is the custom resource as the operator has converged it, with the API's
// default proposals and an FQDN peer identity.
func gateway() *v1alpha1.IPsecGateway {
	g := &v1alpha1.IPsecGateway{Spec: v1alpha1.GatewaySpec{
		Tunnels: []v1alpha1.Tunnel{{
			Name:         "hq",
			Peer:         v1alpha1.Peer{Address: peerWAN, ID: peerID, Subnets: []string{clientNet}},
			PreSharedKey: v1alpha1.SecretKeyRef{Name: "hq-psk", Key: "psk"},
			DPD:          v1alpha1.DPDOptions{Delay: "5s"},
		}},
		Exposures: []v1alpha1.Exposure{{Name: "backend", Target: v1alpha1.Target{Address: backendAddr}, AllowPlaintext: true}},
	}}
	g.Namespace, g.Name = "tenant", "e2e"
	g.Status = v1alpha1.GatewayStatus{
		ServiceCIDR: serviceCIDR, ServiceCIDRGatewayAddress: "100.64.7.1", FloatingIP: floatingIP,
		PortFixedIP: portFixedIP, SubnetCIDR: "203.0.113.0/24", SubnetGatewayIP: routerLAN,
		Exposures: []v1alpha1.AllocatedAddress{{Name: "backend", VirtualIP: exposureVIP}},
	}
	return g
}

// topology: the client site (its client host c behind its box p), the internet router r
// with the floating IP's 1:1 NAT, the gateway's port on r's LAN and the backend's network.
func (e *env) topology() {
	e.Apply(netns.Topology{
		Namespaces: []string{"c", "p", "r", "g", "b"},
		Bridges:    []netns.Bridge{{Role: "r", Name: "br0"}},
		Links: []netns.Link{
			{A: "c", ADev: "c0", B: "p", BDev: "lan0"},
			{A: "p", ADev: "wan0", B: "r", BDev: "wan0"},
			{A: "r", ADev: "to-g", B: "g", BDev: "net1", Bridge: "br0"},
			{A: "r", ADev: "to-b", B: "b", BDev: "b0"},
		},
		Addrs: []netns.Addr{
			{Role: "c", Dev: "c0", CIDR: clientAddr + "/24"},
			{Role: "p", Dev: "lan0", CIDR: peerLAN + "/24"},
			{Role: "p", Dev: "wan0", CIDR: peerWAN + "/24"},
			{Role: "r", Dev: "wan0", CIDR: routerWAN + "/24"},
			{Role: "r", Dev: "wan0", CIDR: floatingIP + "/32"},
			{Role: "r", Dev: "br0", CIDR: routerLAN + "/24"},
			{Role: "g", Dev: "net1", CIDR: portFixedIP + "/32"},
			{Role: "r", Dev: "to-b", CIDR: backendGW + "/24"},
			{Role: "b", Dev: "b0", CIDR: backendAddr + "/24"},
		},
		Routes: []netns.Route{
			{Role: "c", Dst: "default", Via: peerLAN},
			{Role: "b", Dst: "default", Via: backendGW},
			{Role: "p", Dst: "default", Via: routerWAN},
			{Role: "r", Dst: clientNet, Via: peerWAN},
			{Role: "r", Dst: serviceCIDR, Via: portFixedIP},
		},
		Tables: []netns.Table{{Role: "r", Rules: netns.FloatingIPNAT(floatingIP, portFixedIP, "wan0")}},
	})
}

// writeGatewayFiles renders the gateway's config as the operator does, with the key
// beside it (the agent's file mode); the agent picks a change up by itself.
func (e *env) writeGatewayFiles(g *v1alpha1.IPsecGateway) string {
	e.T.Helper()
	cfg, err := gatewayconfig.Build(gatewayconfig.Input{Kind: v1alpha1.KindIPsecGateway, Namespace: g.Namespace, Name: g.Name, Spec: &g.Spec, Status: &g.Status})
	if err != nil {
		e.T.Fatal(err)
	}
	js, _ := gatewayconfig.Marshal(cfg)
	sec, err := gatewayconfig.RenderSecrets(cfg, map[string]string{"hq": psk})
	if err != nil {
		e.T.Fatal(err)
	}
	d := filepath.Join(e.Dir, "config")
	_ = os.MkdirAll(d, 0o755)
	// The key first: the config is what the roles key on.
	for _, f := range []struct{ name, content string }{{gatewayconfig.SecretKeySecrets, sec}, {gatewayconfig.ConfigMapKeyConfig, string(js)}} {
		tmp := filepath.Join(d, "."+f.name)
		if err := os.WriteFile(tmp, []byte(f.content), 0o600); err != nil {
			e.T.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(d, f.name)); err != nil {
			e.T.Fatal(err)
		}
	}
	return filepath.Join(d, gatewayconfig.ConfigMapKeyConfig)
}

// gatewaySide renders the gateway's files as the operator does and runs the agent's
// NAT and loader roles on them, as in the gateway pod (the loader renders swanctl.conf
// from gateway.json itself).
func (e *env) gatewaySide(g *v1alpha1.IPsecGateway) {
	e.T.Helper()
	file := e.writeGatewayFiles(g)
	e.Start("init-nat", e.NS("g"), nil, e.agent, "init-nat", "--config-file", file, "--interface", "net1", "--tunnel-interface", "ipsec0", "--state-file", filepath.Join(e.Dir, "nat.json"))
	e.Start("loader", e.NS("g"), nil, e.agent, "strongswan-loader", "--config-file", file, "--vici-socket", e.Sock("g"), "--interval", "1s")
}

var rePackets = regexp.MustCompile(`(?m)^\s+(?:in|out)\s+[0-9a-f]+,\s+\d+ bytes,\s+(\d+) packets`)

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

func TestStrongSwanPeerConfigBringsTheTunnelUp(t *testing.T) {
	requirements(t)
	e := newEnv(t, "opc")
	e.agent = e.Build("./cmd/vpn-gateway-agent")["./cmd/vpn-gateway-agent"]
	e.topology()
	g := gateway()

	// The client's side exactly as `kubectl vpn peer-config --format strongswan
	// --include-secret` prints it.
	client, err := pc.Render(pc.Input{Kind: v1alpha1.KindIPsecGateway, Namespace: g.Namespace, Name: g.Name,
		Spec: &g.Spec, Status: &g.Status, Tunnel: "hq", PSK: psk}, pc.FormatStrongSwan)
	if err != nil {
		t.Fatal(err)
	}
	clientFile := filepath.Join(e.Dir, "client-swanctl.conf")
	if err := os.WriteFile(clientFile, []byte(client), 0o600); err != nil {
		t.Fatal(err)
	}
	e.StartCharon("p", gatewayconfig.DataplaneLibipsec)
	if out, err := e.Swanctl("p", "--load-all", "--noprompt", "--file", clientFile); err != nil {
		t.Fatalf("the client's charon refuses the generated swanctl.conf: %v\n%s\n%s", err, out, client)
	}

	e.StartCharon("g", gatewayconfig.DataplaneLibipsec)
	e.gatewaySide(g)

	var sas string
	e.Eventually("tunnel hq established with an installed child SA on the gateway", func() bool {
		sas, _ = e.Swanctl("g", "--list-sas", "--ike", "hq")
		return strings.Contains(sas, "ESTABLISHED") && strings.Contains(sas, "INSTALLED")
	})
	t.Logf("gateway SAs:\n%s", sas)
	// The identities and selectors the generated side negotiated are the gateway's.
	for _, want := range []string{peerID, serviceCIDR, clientNet} {
		if !strings.Contains(sas, want) {
			t.Errorf("gateway SA does not show %s:\n%s", want, sas)
		}
	}
	clientSAs, _ := e.Swanctl("p", "--list-sas")
	if !strings.Contains(clientSAs, "bnerd-hq") || !strings.Contains(clientSAs, "INSTALLED") {
		t.Errorf("client SAs:\n%s", clientSAs)
	}

	// Traffic from the client's network reaches the exposure's virtual IP through it.
	e.Eventually("ping from the client's network to the exposure "+exposureVIP, func() bool {
		_, err := e.Sh(e.NS("c"), "ping", "-c", "1", "-W", "2", exposureVIP)
		return err == nil
	})
	out, err := e.Sh(e.NS("c"), "ping", "-c", "3", "-i", "0.3", "-W", "2", exposureVIP)
	if err != nil || !strings.Contains(out, "3 received") {
		t.Errorf("ping through the tunnel: %v\n%s", err, out)
	}
	// And it did go through the tunnel: the client's charon counted ESP for it.
	clientSAs, _ = e.Swanctl("p", "--list-sas")
	m := rePackets.FindAllStringSubmatch(clientSAs, -1)
	if len(m) != 2 || atoi(m[0][1]) < 3 || atoi(m[1][1]) < 3 {
		t.Errorf("the client's child SA did not carry the pings (want at least 3 packets each way):\n%s", clientSAs)
	}
}
