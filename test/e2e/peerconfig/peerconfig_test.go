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
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	pc "bnerd.net/vpn-operator/internal/kubectlvpn/peerconfig"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
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

type env struct {
	t      *testing.T
	dir    string
	prefix string
	agent  string
	procs  map[string]*exec.Cmd
}

func (e *env) ns(role string) string { return e.prefix + role }

func (e *env) sh(ns string, args ...string) (string, error) {
	if ns != "" {
		args = append([]string{"ip", "netns", "exec", ns}, args...)
	}
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	return string(out), err
}

func (e *env) must(ns string, args ...string) string {
	e.t.Helper()
	out, err := e.sh(ns, args...)
	if err != nil {
		e.t.Fatalf("%s: %v: %v\n%s", ns, args, err, out)
	}
	return out
}

func (e *env) start(name, ns string, environ []string, args ...string) {
	e.t.Helper()
	logf, err := os.Create(filepath.Join(e.dir, name+".log"))
	if err != nil {
		e.t.Fatal(err)
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), environ...)
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("starting %s: %v", name, err)
	}
	e.procs[name] = cmd
}

func (e *env) stopAll() {
	for name, cmd := range e.procs {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		delete(e.procs, name)
	}
}

func (e *env) logOf(name string) string {
	b, _ := os.ReadFile(filepath.Join(e.dir, name+".log"))
	return string(b)
}

func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	for i := 0; i < 600; i++ {
		if cond() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.t.Fatalf("never happened: %s\ncharon-g:\n%s\ncharon-p:\n%s", what, tail(e.logOf("charon-g-file")), tail(e.logOf("charon-p-file")))
}

func tail(s string) string {
	l := strings.Split(s, "\n")
	if len(l) > 40 {
		l = l[len(l)-40:]
	}
	return strings.Join(l, "\n")
}

func requirements(t *testing.T) {
	testenv.NeedRoot(t, "the peer-config e2e needs root (network namespaces, nftables, charon)")
	for _, b := range []string{"charon-systemd", "swanctl", "nft", "ip", "ping", "go"} {
		if _, err := exec.LookPath(b); err != nil {
			testenv.SkipDataplane(t, "the peer-config e2e needs "+b+"; run hack/install-deps.sh")
		}
	}
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

func (e *env) topology() {
	for _, r := range []string{"c", "p", "r", "g", "b"} {
		e.must("", "ip", "netns", "add", e.ns(r))
		e.t.Cleanup(func() { _, _ = e.sh("", "ip", "netns", "del", e.ns(r)) })
		e.must(e.ns(r), "ip", "link", "set", "lo", "up")
		e.must(e.ns(r), "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv4.ip_forward=1")
	}
	link := func(a, an, b, bn string) {
		e.must("", "ip", "link", "add", an, "netns", e.ns(a), "type", "veth", "peer", "name", bn, "netns", e.ns(b))
		e.must(e.ns(a), "ip", "link", "set", an, "up")
		e.must(e.ns(b), "ip", "link", "set", bn, "up")
	}
	link("c", "c0", "p", "lan0")
	link("p", "wan0", "r", "wan0")
	e.must(e.ns("r"), "ip", "link", "add", "br0", "type", "bridge")
	e.must(e.ns("r"), "ip", "link", "set", "br0", "up")
	link("r", "to-g", "g", "net1")
	e.must(e.ns("r"), "ip", "link", "set", "to-g", "master", "br0")
	link("r", "to-b", "b", "b0")
	addr := func(role, dev, a string) { e.must(e.ns(role), "ip", "addr", "add", a, "dev", dev) }
	addr("c", "c0", clientAddr+"/24")
	addr("p", "lan0", peerLAN+"/24")
	addr("p", "wan0", peerWAN+"/24")
	addr("r", "wan0", routerWAN+"/24")
	addr("r", "wan0", floatingIP+"/32")
	addr("r", "br0", routerLAN+"/24")
	addr("g", "net1", portFixedIP+"/32")
	addr("r", "to-b", backendGW+"/24")
	addr("b", "b0", backendAddr+"/24")
	e.must(e.ns("c"), "ip", "route", "add", "default", "via", peerLAN)
	e.must(e.ns("b"), "ip", "route", "add", "default", "via", backendGW)
	e.must(e.ns("p"), "ip", "route", "add", "default", "via", routerWAN)
	e.must(e.ns("r"), "ip", "route", "add", clientNet, "via", peerWAN)
	e.must(e.ns("r"), "ip", "route", "add", serviceCIDR, "via", portFixedIP)
	cmd := exec.Command("ip", "netns", "exec", e.ns("r"), "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(`table ip fip {
  chain pre { type nat hook prerouting priority dstnat; policy accept;
    ip daddr ` + floatingIP + ` dnat to ` + portFixedIP + `
  }
  chain post { type nat hook postrouting priority srcnat; policy accept;
    oifname "wan0" ip saddr ` + portFixedIP + ` snat to ` + floatingIP + `
  }
}`)
	if out, err := cmd.CombinedOutput(); err != nil {
		e.t.Fatalf("router NAT: %v %s", err, out)
	}
}

func (e *env) sock(role string) string { return filepath.Join(e.dir, role, "charon.vici") }

func (e *env) swanctl(role string, args ...string) (string, error) {
	return e.sh(e.ns(role), append([]string{"swanctl"}, append(args, "--uri", "unix://"+e.sock(role))...)...)
}

func (e *env) startCharon(role string) {
	e.t.Helper()
	d := filepath.Join(e.dir, role)
	_ = os.MkdirAll(d, 0o755)
	conf, err := gatewayconfig.RenderStrongswanConf(gatewayconfig.StrongswanOptions{Mode: gatewayconfig.DataplaneLibipsec, VICISocket: e.sock(role), LogFile: filepath.Join(e.dir, "charon-"+role+"-file.log")})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "strongswan.conf"), []byte(conf), 0o644); err != nil {
		e.t.Fatal(err)
	}
	e.start("charon-"+role, e.ns(role), []string{"STRONGSWAN_CONF=" + filepath.Join(d, "strongswan.conf")}, "charon-systemd")
	e.eventually("charon in "+role+" answers", func() bool { _, err := e.swanctl(role, "--stats"); return err == nil })
}

// writeGatewayFiles renders the gateway's config as the operator does, with the key
// beside it (the agent's file mode); the agent picks a change up by itself.
func (e *env) writeGatewayFiles(g *v1alpha1.IPsecGateway) string {
	e.t.Helper()
	cfg, err := gatewayconfig.Build(gatewayconfig.Input{Kind: v1alpha1.KindIPsecGateway, Namespace: g.Namespace, Name: g.Name, Spec: &g.Spec, Status: &g.Status})
	if err != nil {
		e.t.Fatal(err)
	}
	js, _ := gatewayconfig.Marshal(cfg)
	sec, err := gatewayconfig.RenderSecrets(cfg, map[string]string{"hq": psk})
	if err != nil {
		e.t.Fatal(err)
	}
	d := filepath.Join(e.dir, "config")
	_ = os.MkdirAll(d, 0o755)
	// The key first: the config is what the roles key on.
	for _, f := range []struct{ name, content string }{{gatewayconfig.SecretKeySecrets, sec}, {gatewayconfig.ConfigMapKeyConfig, string(js)}} {
		tmp := filepath.Join(d, "."+f.name)
		if err := os.WriteFile(tmp, []byte(f.content), 0o600); err != nil {
			e.t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(d, f.name)); err != nil {
			e.t.Fatal(err)
		}
	}
	return filepath.Join(d, gatewayconfig.ConfigMapKeyConfig)
}

// gatewaySide renders the gateway's files as the operator does and runs the agent's
// NAT and loader roles on them, as in the gateway pod (the loader renders swanctl.conf
// from gateway.json itself).
func (e *env) gatewaySide(g *v1alpha1.IPsecGateway) {
	e.t.Helper()
	file := e.writeGatewayFiles(g)
	e.start("init-nat", e.ns("g"), nil, e.agent, "init-nat", "--config-file", file, "--interface", "net1", "--tunnel-interface", "ipsec0", "--state-file", filepath.Join(e.dir, "nat.json"))
	e.start("loader", e.ns("g"), nil, e.agent, "strongswan-loader", "--config-file", file, "--vici-socket", e.sock("g"), "--interval", "1s")
}

func buildAgent(t *testing.T, dir string) string {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("locating module: %v", err)
	}
	out := filepath.Join(dir, "vpn-gateway-agent")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/vpn-gateway-agent")
	cmd.Dir = strings.TrimSpace(string(root))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

var rePackets = regexp.MustCompile(`(?m)^\s+(?:in|out)\s+[0-9a-f]+,\s+\d+ bytes,\s+(\d+) packets`)

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

func TestStrongSwanPeerConfigBringsTheTunnelUp(t *testing.T) {
	requirements(t)
	dir, err := os.MkdirTemp("", "bnerd-peerconfig-")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, 0o755)
	rnd := make([]byte, 2)
	_, _ = rand.Read(rnd)
	e := &env{t: t, dir: dir, prefix: "opc" + hex.EncodeToString(rnd) + "-", procs: map[string]*exec.Cmd{}}
	t.Cleanup(func() {
		e.stopAll()
		if t.Failed() {
			t.Logf("logs kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	e.agent = buildAgent(t, dir)
	e.topology()
	g := gateway()

	// The client's side exactly as `kubectl vpn peer-config --format strongswan
	// --include-secret` prints it.
	client, err := pc.Render(pc.Input{Kind: v1alpha1.KindIPsecGateway, Namespace: g.Namespace, Name: g.Name,
		Spec: &g.Spec, Status: &g.Status, Tunnel: "hq", PSK: psk}, pc.FormatStrongSwan)
	if err != nil {
		t.Fatal(err)
	}
	clientFile := filepath.Join(dir, "client-swanctl.conf")
	if err := os.WriteFile(clientFile, []byte(client), 0o600); err != nil {
		t.Fatal(err)
	}
	e.startCharon("p")
	if out, err := e.swanctl("p", "--load-all", "--noprompt", "--file", clientFile); err != nil {
		t.Fatalf("the client's charon refuses the generated swanctl.conf: %v\n%s\n%s", err, out, client)
	}

	e.startCharon("g")
	e.gatewaySide(g)

	var sas string
	e.eventually("tunnel hq established with an installed child SA on the gateway", func() bool {
		sas, _ = e.swanctl("g", "--list-sas", "--ike", "hq")
		return strings.Contains(sas, "ESTABLISHED") && strings.Contains(sas, "INSTALLED")
	})
	t.Logf("gateway SAs:\n%s", sas)
	// The identities and selectors the generated side negotiated are the gateway's.
	for _, want := range []string{peerID, serviceCIDR, clientNet} {
		if !strings.Contains(sas, want) {
			t.Errorf("gateway SA does not show %s:\n%s", want, sas)
		}
	}
	clientSAs, _ := e.swanctl("p", "--list-sas")
	if !strings.Contains(clientSAs, "bnerd-hq") || !strings.Contains(clientSAs, "INSTALLED") {
		t.Errorf("client SAs:\n%s", clientSAs)
	}

	// Traffic from the client's network reaches the exposure's virtual IP through it.
	e.eventually("ping from the client's network to the exposure "+exposureVIP, func() bool {
		_, err := e.sh(e.ns("c"), "ping", "-c", "1", "-W", "2", exposureVIP)
		return err == nil
	})
	out, err := e.sh(e.ns("c"), "ping", "-c", "3", "-i", "0.3", "-W", "2", exposureVIP)
	if err != nil || !strings.Contains(out, "3 received") {
		t.Errorf("ping through the tunnel: %v\n%s", err, out)
	}
	// And it did go through the tunnel: the client's charon counted ESP for it.
	clientSAs, _ = e.swanctl("p", "--list-sas")
	m := rePackets.FindAllStringSubmatch(clientSAs, -1)
	if len(m) != 2 || atoi(m[0][1]) < 3 || atoi(m[1][1]) < 3 {
		t.Errorf("the client's child SA did not carry the pings (want at least 3 packets each way):\n%s", clientSAs)
	}
}
