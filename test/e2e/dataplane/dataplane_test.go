// Package dataplane is the gateway dataplane end-to-end test: real charon daemons in
// network namespaces, configured by the agent over VICI from the operator's renderers,
// with nftables NAT, the fail-closed guard and packet captures. The same test code runs
// in two modes:
//
//   - host (TestDataplane on the test machine): charon with kernel-libipsec (these
//     machines' kernels have no ESP), the interface guard, the agent reading files;
//   - kernel (TestDataplaneKernelVM boots a VM with Debian's stock kernel and runs
//     TestDataplane inside it): kernel XFRM, `--guard=xfrm`, and the gateway pod's real
//     containers started with the argument sets render.Deployment produces, reading the
//     ConfigMap through the API server with the pod's ServiceAccount token.
//
// It needs root and the Debian packages hack/install-deps.sh installs (the kernel mode
// also qemu, which hack/vm/image.sh installs); without them it skips and says why, and
// under BNERD_REQUIRE_DATAPLANE=1 it fails instead.
package dataplane

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/nat"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
	"bnerd.net/vpn-operator/test/e2e/netns"
)

// Addresses: TEST-NET and CGNAT space only, all inside namespaces this test creates.
const (
	clientAddr  = "198.51.100.10"
	clientNet   = "198.51.100.0/24"
	peerLAN     = "198.51.100.1"
	peerWAN     = "192.0.2.2"
	routerWAN   = "192.0.2.1"
	floatingIP  = "192.0.2.100"
	routerLAN   = "203.0.113.1"
	portFixedIP = "203.0.113.5"
	// The exposures' target lives on a network of its own behind the router, as a
	// service cluster's does: the gateway network itself is never an exposure target.
	backendAddr = "198.18.0.20"
	backendGW   = "198.18.0.1"
	fabricAddr  = "203.0.113.30"
	serviceCIDR = "100.64.7.0/24"
	psk         = "e2e-psk-not-a-real-secret-0123456789"
)

// innerFilter matches packets carrying an address that must only ever travel inside the
// tunnel on the link between the sites.
const innerFilter = "net 198.51.100.0/24 or net 100.64.0.0/10 or net 203.0.113.0/24 or net 198.18.0.0/24"

type env struct {
	// The namespaces, processes, logs and captures (netns: its T is the running
	// (sub)test's, see run); CleanupSignal is SIGKILL.
	*netns.Env
	bin struct{ agent, helper string }
	gw  *gatewayconfig.Config
	obj *v1alpha1.IPsecGateway
	// kernel: kernel XFRM, --guard=xfrm, the pod's containers with the API source.
	kernel bool
	api    *podAPI
	// statusArgs start the host mode's status agent with its loader (TestTunnelLifecycle).
	statusArgs []string
	// keys are the tunnels' pre-shared keys by tunnel name (nil: t1's psk).
	keys map[string]string
}

// psks returns the tunnels' pre-shared keys by tunnel name.
func (e *env) psks() map[string]string {
	if e.keys != nil {
		return e.keys
	}
	return map[string]string{"t1": psk}
}

// run runs a subtest with e's helpers failing that subtest (not its parent). The steps
// build on each other, so a failed one ends the test: what follows would only time out.
func (e *env) run(t *testing.T, name string, f func(t *testing.T)) {
	if !t.Run(name, func(t *testing.T) {
		parent := e.T
		e.T = t
		defer func() { e.T = parent }()
		f(t)
	}) {
		t.FailNow()
	}
}

// sleep waits d times the environment's factor.
func (e *env) sleep(d time.Duration) { time.Sleep(netns.Scaled(d)) }

func requirements(t testing.TB) {
	netns.Require(t, "charon-systemd", "swanctl", "curl", "ping")
	if !kernelMode() {
		if _, err := os.Stat("/usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so"); err != nil {
			testenv.SkipDataplane(t, "dataplane e2e needs strongSwan's kernel-libipsec plugin (libcharon-extra-plugins)")
		}
	}
}

func gatewayObject() *v1alpha1.IPsecGateway {
	return &v1alpha1.IPsecGateway{
		Spec: v1alpha1.GatewaySpec{
			Tunnels: []v1alpha1.Tunnel{{
				Name:         "t1",
				Peer:         v1alpha1.Peer{Address: peerWAN, Subnets: []string{clientNet}},
				PreSharedKey: v1alpha1.SecretKeyRef{Name: "psk", Key: "psk"},
				IKE:          v1alpha1.IKEOptions{Proposals: []string{"aes128gcm16-prfsha256-x25519"}, Lifetime: "1h"},
				ESP:          v1alpha1.ESPOptions{Proposals: []string{"aes128gcm16-x25519"}, Lifetime: "30m"},
				DPD:          v1alpha1.DPDOptions{Delay: "5s", Action: "restart"},
			}},
			Exposures: []v1alpha1.Exposure{
				{Name: "web", Target: v1alpha1.Target{Address: backendAddr, Ports: []v1alpha1.PortSpec{{Port: 8443, Protocol: v1alpha1.ProtocolTCP}}}},
				{Name: "stream", Target: v1alpha1.Target{Address: backendAddr, Ports: []v1alpha1.PortSpec{{Port: 9000, Protocol: v1alpha1.ProtocolTCP}}}},
				{Name: "backend-all", Target: v1alpha1.Target{Address: backendAddr}, AllowPlaintext: true},
			},
			ReverseExposures: []v1alpha1.ReverseExposure{
				{Name: "client-svc", Tunnel: "t1", Target: v1alpha1.Target{Address: clientAddr, Ports: []v1alpha1.PortSpec{{Port: 8080, Protocol: v1alpha1.ProtocolTCP}}}},
				{Name: "client-all", Tunnel: "t1", Target: v1alpha1.Target{Address: clientAddr}},
			},
		},
		Status: v1alpha1.GatewayStatus{
			ServiceCIDR: serviceCIDR, ServiceCIDRGatewayAddress: "100.64.7.1", FloatingIP: floatingIP,
			PortFixedIP: portFixedIP, SubnetCIDR: "203.0.113.0/24", SubnetGatewayIP: routerLAN,
			Exposures: []v1alpha1.AllocatedAddress{
				{Name: "web", VirtualIP: "100.64.7.10"}, {Name: "stream", VirtualIP: "100.64.7.11"}, {Name: "backend-all", VirtualIP: "100.64.7.12"},
			},
			ReverseExposures: []v1alpha1.AllocatedAddress{{Name: "client-svc", VirtualIP: "100.64.7.200"}, {Name: "client-all", VirtualIP: "100.64.7.201"}},
		},
	}
}

// render produces the gateway's configuration as the operator renders it and hands it
// to the agent: as files with the keys beside them (host mode), or as the ConfigMap
// through the API server with the tenant's PSK Secret, which the pod's agent reads
// itself (kernel mode).
func (e *env) render() {
	e.T.Helper()
	cfg, err := gatewayconfig.Build(gatewayconfig.Input{Kind: v1alpha1.KindIPsecGateway, Namespace: "tenant", Name: "e2e", Spec: &e.obj.Spec, Status: &e.obj.Status})
	if err != nil {
		e.T.Fatalf("Build: %v", err)
	}
	js, err := gatewayconfig.Marshal(cfg)
	if err != nil {
		e.T.Fatal(err)
	}
	sw, err := gatewayconfig.RenderSwanctl(cfg)
	if err != nil {
		e.T.Fatal(err)
	}
	sec, err := gatewayconfig.RenderSecrets(cfg, e.psks())
	if err != nil {
		e.T.Fatal(err)
	}
	e.gw = cfg
	if e.kernel {
		e.api.publish(e.T, cfg, e.psks())
		return
	}
	cdir := filepath.Join(e.Dir, "config")
	_ = os.MkdirAll(cdir, 0o755)
	// secrets and swanctl first: the config file is what the NAT role keys on
	for _, f := range []struct{ name, content string }{{gatewayconfig.SecretKeySecrets, sec}, {gatewayconfig.ConfigMapKeySwanctl, sw}, {gatewayconfig.ConfigMapKeyConfig, string(js)}} {
		writeAtomic(e.T, filepath.Join(cdir, f.name), f.content)
	}
}

func writeAtomic(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// topology: the client site (client host c behind its box p, whose WAN link ends at the
// cloud router r), the gateway's port and a fabric host on r's LAN br0, the backend's
// network behind r.
func (e *env) topology() {
	e.Apply(netns.Topology{
		Namespaces: []string{"c", "p", "r", "g", "b", "f"},
		Bridges:    []netns.Bridge{{Role: "r", Name: "br0"}},
		Links: []netns.Link{
			{A: "c", ADev: "c0", B: "p", BDev: "lan0"},
			{A: "p", ADev: "wan0", B: "r", BDev: "wan0"},
			{A: "r", ADev: "to-g", B: "g", BDev: "net1", Bridge: "br0"},
			{A: "r", ADev: "to-f", B: "f", BDev: "f0", Bridge: "br0"},
			{A: "r", ADev: "to-b", B: "b", BDev: "b0"},
		},
		Addrs: []netns.Addr{
			{Role: "c", Dev: "c0", CIDR: clientAddr + "/24"},
			{Role: "p", Dev: "lan0", CIDR: peerLAN + "/24"},
			{Role: "p", Dev: "wan0", CIDR: peerWAN + "/24"},
			{Role: "r", Dev: "wan0", CIDR: routerWAN + "/24"},
			{Role: "r", Dev: "wan0", CIDR: floatingIP + "/32"},
			{Role: "r", Dev: "br0", CIDR: routerLAN + "/24"},
			{Role: "g", Dev: "net1", CIDR: portFixedIP + "/32"}, // static IPAM hands out a bare /32
			{Role: "r", Dev: "to-b", CIDR: backendGW + "/24"},
			{Role: "b", Dev: "b0", CIDR: backendAddr + "/24"},
			{Role: "f", Dev: "f0", CIDR: fabricAddr + "/24"},
		},
		Routes: []netns.Route{
			{Role: "c", Dst: "default", Via: peerLAN},
			{Role: "b", Dst: "default", Via: backendGW},
			{Role: "f", Dst: "default", Via: routerLAN},
			// The client's router sends everything else to the internet, and the internet
			// knows the client's subnet: a plaintext leak from the gateway would reach the
			// wire.
			{Role: "p", Dst: "default", Via: routerWAN},
			{Role: "r", Dst: clientNet, Via: peerWAN},
			// The cloud router: the service CIDR is routed to the gateway's port, and the
			// floating IP is 1:1 NAT to the port's fixed IP.
			{Role: "r", Dst: serviceCIDR, Via: portFixedIP},
		},
		Tables: []netns.Table{
			{Role: "r", Rules: netns.FloatingIPNAT(floatingIP, portFixedIP, "wan0")},
			// The client site guards its own side, so the capture between the sites
			// measures ours.
			{Role: "p", Rules: netns.SiteGuard(e.kernel, "100.64.0.0/10")},
		},
	})
}

func (e *env) dataplane() gatewayconfig.DataplaneMode {
	if e.kernel {
		return gatewayconfig.DataplaneKernel
	}
	return gatewayconfig.DataplaneLibipsec
}

// gwCharon is the name of the gateway's charon process.
func (e *env) gwCharon() string {
	if e.kernel {
		return render.ContainerStrongswan
	}
	return "charon-g"
}

// startCharon runs charon in role's namespace. The peer and the host-mode gateway get a
// strongswan.conf from the production renderer; the kernel-mode gateway is the pod's
// strongswan container (the agent's charon role with the rendered arguments), listening
// on the pod's run mount (Sockets).
func (e *env) startCharon(role string) {
	e.T.Helper()
	if role != "g" || !e.kernel {
		e.StartCharon(role, e.dataplane())
		return
	}
	_ = os.Remove(e.Sock(role))
	e.startContainer(render.ContainerStrongswan)
	e.WaitCharon(role)
}

// The client site's peer: written by hand, as the client's own administrator would; a
// new IKE SA with the gateway replaces the old one.
func (e *env) configurePeer() {
	o := defaultPeer()
	o.unique = true
	e.configurePeerWith(o)
}

const metricsAddr = "127.0.0.1:9903"

// agents are the gateway's agent processes besides charon: in host mode the NAT role, a
// stand-alone loader and the exporter reading files; in kernel mode the pod's init-nat,
// status-agent (which also loads charon) and ipsec-exporter containers.
func (e *env) agents() []string {
	if e.kernel {
		return []string{render.ContainerInitNAT, render.ContainerStatus, render.ContainerExporter}
	}
	return []string{"init-nat", "loader", "ipsec-exporter"}
}

func (e *env) startAgent(name string) {
	e.T.Helper()
	if e.kernel {
		e.startContainer(name)
		return
	}
	cfg := filepath.Join(e.Dir, "config", gatewayconfig.ConfigMapKeyConfig)
	switch name {
	case "init-nat":
		e.Start(name, e.NS("g"), nil, e.bin.agent, "init-nat", "--config-file", cfg, "--interface", "net1",
			"--tunnel-interface", "ipsec0", "--state-file", filepath.Join(e.Dir, "nat-state.json"))
	case "loader":
		e.Start(name, e.NS("g"), nil, e.bin.agent, "strongswan-loader", "--config-file", cfg, "--vici-socket", e.Sock("g"), "--interval", "1s")
	case "ipsec-exporter":
		e.Start(name, e.NS("g"), nil, e.bin.agent, "ipsec-exporter", "--config-file", cfg,
			"--vici-socket", e.Sock("g"), "--listen", metricsAddr, "--nat-state-file", filepath.Join(e.Dir, "nat-state.json"))
	default:
		e.T.Fatalf("no agent %s", name)
	}
}

func (e *env) startAgents() {
	for _, a := range e.agents() {
		e.startAgent(a)
	}
}

func (e *env) stopAgents() {
	for _, a := range e.agents() {
		e.Stop(a, syscall.SIGTERM)
	}
}

var reUniqueID = regexp.MustCompile(`t1: #(\d+), ESTABLISHED`)

// ikeID returns the gateway's established IKE SA unique ID for t1 with an installed
// child SA, or "".
func (e *env) ikeID() string {
	out, err := e.Swanctl("g", "--list-sas", "--ike", "t1")
	if err != nil || !strings.Contains(out, "INSTALLED") {
		return ""
	}
	if m := reUniqueID.FindStringSubmatch(out); m != nil {
		return m[1]
	}
	return ""
}

func readPcap(t testing.TB, file string, filter ...string) []string {
	args := append([]string{"-nr", file, "-v"}, filter...)
	out, err := exec.Command("tcpdump", args...).Output()
	if err != nil {
		t.Fatalf("reading %s: %v", file, err)
	}
	// One record per packet: -v continues a packet on indented lines.
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		switch {
		case strings.TrimSpace(l) == "":
		case (strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t")) && len(lines) > 0:
			lines[len(lines)-1] += " " + strings.TrimSpace(l)
		default:
			lines = append(lines, l)
		}
	}
	return lines
}

// wire is what a capture between the sites held.
type wire struct {
	all, esp, other, inner []string
}

// readWire classifies a capture of the link between the sites. While charon is dead the
// gateway's kernel answers arriving ESP-in-UDP with ICMP port unreachable; those quote
// only the outer header and are allowed.
func readWire(t testing.TB, file string) wire {
	return wire{
		all:   readPcap(t, file, "ip"),
		esp:   readPcap(t, file, "udp port 4500 and udp[8:4] != 0"),
		other: readPcap(t, file, "ip and not (udp port 500 or udp port 4500) and not (icmp[0] = 3 and icmp[17] = 17 and (icmp[30:2] = 4500 or icmp[30:2] = 500))"),
		inner: readPcap(t, file, innerFilter),
	}
}

// buildBinaries builds the gateway agent and the test helper (inside the VM: finds them
// on the share).
func (e *env) buildBinaries() {
	const agent, helper = "./cmd/vpn-gateway-agent", "./test/e2e/dataplane/testhelper"
	bins := e.Build(agent, helper)
	e.bin.agent, e.bin.helper = bins[agent], bins[helper]
}

// newEnv builds the topology, starts both charons, the agents and the services, and
// waits for the SA. The capture of the link between the sites runs from before the
// agents start; it is taken in the router's namespace, which does no IPsec (an IPsec
// endpoint shows decrypted inbound packets a second time with kernel IPsec).
func newEnv(t testing.TB) (*env, string, func() string) {
	requirements(t)
	e := newBareEnv(t, "bdp", gatewayObject(), kernelMode())
	e.buildBinaries()
	e.topology()
	// Runs before the namespaces are deleted (cleanups run last-registered first).
	t.Cleanup(func() {
		if t.Failed() {
			e.diagnose()
		}
	})
	if e.kernel {
		e.api = connectPodAPI(t, e)
	}
	e.render()

	e.startCharon("p")
	e.configurePeer()
	e.startCharon("g")
	outer := e.Capture("outer", "r", "wan0", 256)
	e.startAgents()

	e.Start("backend-https", e.NS("b"), nil, e.bin.helper, "https", backendAddr+":8443")
	e.Start("backend-sink", e.NS("b"), nil, e.bin.helper, "sink", backendAddr+":9000")
	e.Start("client-http", e.NS("c"), nil, e.bin.helper, "http", clientAddr+":8080")

	var firstID string
	e.Eventually("SA t1 established with an installed child SA", func() bool { firstID = e.ikeID(); return firstID != "" })
	t.Logf("SA up, IKE SA #%s (%s dataplane)", firstID, e.dataplane())
	return e, firstID, outer
}

// newBareEnv is the suite's env on a fresh netns.Env (namespaces named tag...), before any
// namespace or process: the processes left at the end are killed.
func newBareEnv(t testing.TB, tag string, obj *v1alpha1.IPsecGateway, kernel bool) *env {
	e := &env{Env: netns.New(t, tag), obj: obj, kernel: kernel}
	e.CleanupSignal = syscall.SIGKILL
	if kernel {
		e.Sockets = map[string]string{"g": render.RunMountPath + "/charon.vici"}
	}
	return e
}

// diagnose writes the gateway's and the peer's kernel state next to the logs.
func (e *env) diagnose() {
	var b strings.Builder
	for _, role := range []string{"g", "p", "r"} {
		for _, c := range [][]string{
			{"ip", "-d", "addr"}, {"ip", "rule"}, {"ip", "route", "show", "table", "all"},
			{"ip", "-s", "xfrm", "state"}, {"ip", "-s", "xfrm", "policy"}, {"cat", "/proc/net/xfrm_stat"}, {"nft", "list", "ruleset"},
			{"cat", "/proc/net/nf_conntrack"},
		} {
			out, _ := e.Sh(e.NS(role), c...)
			fmt.Fprintf(&b, "### %s: %s\n%s\n", role, strings.Join(c, " "), out)
		}
	}
	for _, role := range []string{"g", "p"} {
		out, _ := e.Swanctl(role, "--list-sas")
		fmt.Fprintf(&b, "### %s: swanctl --list-sas\n%s\n", role, out)
	}
	_ = os.WriteFile(filepath.Join(e.Dir, "diagnose.txt"), []byte(b.String()), 0o644)
}

// guardDrops sums the packet counters of the guard's rules in the gateway's table.
// A rewritten table restarts them from zero.
func (e *env) guardDrops() uint64 {
	out, _ := e.Sh(e.NS("g"), "nft", "list", "table", "ip", nat.DefaultTable)
	var n uint64
	for _, m := range reGuardCounter.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseUint(m[1], 10, 64)
		n += v
	}
	return n
}

var reGuardCounter = regexp.MustCompile(`counter packets (\d+) bytes \d+ drop comment "fail-closed guard"`)

// metric scrapes the exporter and returns series' value (-1 when absent).
func (e *env) metric(series string) float64 {
	out, _ := e.Sh(e.NS("g"), "curl", "-s", "--max-time", "5", "http://"+metricsAddr+"/metrics")
	return netns.MetricValue(out, series)
}

const guardMetric = "bnerd_gateway_guard_dropped_packets_total"

// probe reports whether one ping from the client crosses the tunnel to the plaintext
// exposure and back.
func (e *env) probe() bool {
	_, err := e.Sh(e.NS("c"), "ping", "-n", "-q", "-c", "1", "-W", "2", "100.64.7.12")
	return err == nil
}

func (e *env) streamArgs() (secs, rate string) {
	if e.kernel {
		// Emulated ESP runs at a few Mbit/s; the stream still spans the agent restart.
		return "20", "100000"
	}
	return "12", "2000000"
}

func TestDataplane(t *testing.T) {
	e, firstID, outer := newEnv(t)
	dir := e.Dir
	e.run(t, "exposure reaches the TLS backend with the port's fixed IP as source", func(t *testing.T) {
		syn := e.Capture("syn-gw", "g", "net1", 128)
		synClient := e.Capture("syn-client", "c", "c0", 128)
		var body string
		e.Eventually("HTTPS through 100.64.7.10", func() bool { body = e.Curl("c", "https://100.64.7.10:8443/"); return body != "" })
		if body != "backend saw "+portFixedIP {
			t.Errorf("backend answered %q, want the SNAT source %s", body, portFixedIP)
		}
		synFile, synClientFile := syn(), synClient()
		// The SYN leaving for the backend (with kernel IPsec the port's capture also shows
		// the decrypted SYN as it arrived, before the clamp).
		checkMSS(t, readPcap(t, synFile, "tcp[tcpflags] & tcp-syn != 0 and dst host "+backendAddr+" and dst port 8443"), 1360)
		checkMSS(t, readPcap(t, synClientFile, "tcp[tcpflags] & tcp-syn != 0 and src port 8443"), 1360)
	})

	e.run(t, "reverse exposure lands on the client service from .1", func(t *testing.T) {
		syn := e.Capture("syn-reverse", "c", "c0", 128)
		var body string
		e.Eventually("HTTP through 100.64.7.200", func() bool { body = e.Curl("f", "http://100.64.7.200:8080/"); return body != "" })
		if body != "client saw 100.64.7.1" {
			t.Errorf("client service answered %q, want source 100.64.7.1", body)
		}
		// The fabric's SYN entered the tunnel clamped to its MTU.
		checkMSS(t, readPcap(t, syn(), "tcp[tcpflags] == tcp-syn and dst port 8080"), 1360)
	})

	e.run(t, "exposure added and agents restarted under a running stream", func(t *testing.T) {
		secs, rate := e.streamArgs()
		e.Start("sender", e.NS("c"), nil, e.bin.helper, "send", "100.64.7.11:9000", secs, rate)
		e.obj.Spec.Exposures = append(e.obj.Spec.Exposures, v1alpha1.Exposure{Name: "web-b", Target: v1alpha1.Target{Address: backendAddr, Ports: []v1alpha1.PortSpec{{Port: 8443, Protocol: v1alpha1.ProtocolTCP}}}})
		e.obj.Status.Exposures = append(e.obj.Status.Exposures, v1alpha1.AllocatedAddress{Name: "web-b", VirtualIP: "100.64.7.13"})
		e.sleep(2 * time.Second)
		e.render()
		e.Eventually("new exposure 100.64.7.13 reachable", func() bool { return e.Curl("c", "https://100.64.7.13:8443/") == "backend saw "+portFixedIP })
		if !strings.Contains(e.Log("init-nat"), "full=false") {
			t.Errorf("exposure change did not take the incremental path:\n%s", e.Log("init-nat"))
		}
		e.stopAgents()
		e.sleep(time.Second)
		e.startAgents()
		if err := e.Wait("sender"); err != nil {
			t.Fatalf("sender failed: %v\n%s", err, e.Log("sender"))
		}
		sent := strings.TrimSpace(e.Log("sender"))
		n := strings.TrimPrefix(sent, "sent ")
		e.Eventually("sink reports the stream", func() bool { return strings.Contains(e.Log("backend-sink"), "sink received") })
		if want := "sink received " + n + " ok=true"; !strings.Contains(e.Log("backend-sink"), want) {
			t.Errorf("stream damaged: sender %q, sink %q", sent, e.Log("backend-sink"))
		}
		if id := e.ikeID(); id != firstID {
			t.Errorf("IKE SA changed from #%s to #%s across an exposure change and agent restart", firstID, id)
		}
	})

	e.run(t, "drifted table is repaired", func(t *testing.T) {
		e.Must(e.NS("g"), "nft", "delete", "table", "ip", nat.DefaultTable)
		e.Eventually("table restored", func() bool {
			out, err := e.Sh(e.NS("g"), "nft", "list", "chain", "ip", nat.DefaultTable, "guard")
			return err == nil && strings.Contains(out, "drop")
		})
	})

	e.run(t, "no plaintext on the wire through every SA and process event", func(t *testing.T) {
		e.Start("ping-fabric", e.NS("f"), nil, "ping", "-n", "-i", "0.2", "100.64.7.201")
		e.Start("ping-client", e.NS("c"), nil, "ping", "-n", "-i", "0.2", "100.64.7.12")
		defer e.Stop("ping-fabric", syscall.SIGINT)
		defer e.Stop("ping-client", syscall.SIGINT)
		e.sleep(time.Second)
		for _, w := range e.windows() {
			e.window(t, w)
		}
		if !strings.Contains(e.Log("ping-fabric"), "bytes from 100.64.7.201") {
			t.Errorf("fabric pings never crossed the tunnel:\n%s", e.Log("ping-fabric"))
		}
	})

	e.run(t, "status agent writes the tunnel state into the object on the API server", func(t *testing.T) {
		if e.kernel {
			// The pod's status-agent container has been running all along, with the
			// pod's ServiceAccount token and Role.
			e.api.checkStatus(t, e)
			return
		}
		api, err := testenv.Start()
		if err != nil {
			if err == testenv.ErrNoControlPlane && !testenv.Required() {
				t.Skip(err)
			}
			t.Fatal(err)
		}
		defer func() { _ = api.Stop() }()
		ctx := context.Background()
		if err := api.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}); err != nil {
			t.Fatal(err)
		}
		obj := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "e2e"}, Spec: storedSpec(e.obj.Spec)}
		obj.Spec.Tunnels[0].PreSharedKey.Name = "psk"
		if err := api.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		kubeconfig, err := api.WriteKubeConfig(dir)
		if err != nil {
			t.Fatal(err)
		}
		// The status agent runs in the host namespace: it reaches the API server on
		// loopback and charon through its VICI socket file, as in the pod.
		e.Start("status-agent", "", nil, e.bin.agent, "status-agent", "--config-file", filepath.Join(dir, "config", gatewayconfig.ConfigMapKeyConfig),
			"--vici-socket", e.Sock("g"), "--kubeconfig", kubeconfig, "--interval", "1s")
		defer e.Stop("status-agent", syscall.SIGTERM)
		var got v1alpha1.GatewayStatus
		e.Eventually("status agent reports the tunnel up", func() bool {
			cur := &v1alpha1.IPsecGateway{}
			if err := api.Client.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
				return false
			}
			got = cur.Status
			return got.TunnelsReady == "1/1"
		})
		if len(got.Tunnels) != 1 || got.Tunnels[0].Name != "t1" || got.Tunnels[0].State != "Up" || got.Tunnels[0].ChildSAs < 1 || got.Tunnels[0].EstablishedAt == nil ||
			got.Tunnels[0].LastTransitionTime == nil {
			t.Errorf("tunnel state in status: %+v", got.Tunnels)
		}
		// The heartbeat the operator reads the report's age from.
		if got.TunnelsObservedTime == nil || time.Since(got.TunnelsObservedTime.Time) > time.Minute {
			t.Errorf("no current heartbeat in status: %v", got.TunnelsObservedTime)
		}
	})

	e.run(t, "exporter reports the tunnel up with growing byte counters", func(t *testing.T) {
		scrape := func() string {
			out, _ := e.Sh(e.NS("g"), "curl", "-s", "--max-time", "5", "http://"+metricsAddr+"/metrics")
			return out
		}
		var m1 string
		e.Eventually("tunnel up in the metrics", func() bool { m1 = scrape(); return strings.Contains(m1, `bnerd_ipsec_tunnel_up{tunnel="t1"} 1`) })
		in := `bnerd_ipsec_bytes_total{direction="in",tunnel="t1"}`
		b1 := netns.MetricValue(m1, in)
		var m2 string
		e.Eventually("bytes in grow with traffic through the tunnel", func() bool {
			e.Must(e.NS("c"), "ping", "-n", "-c", "5", "-i", "0.2", "100.64.7.12")
			m2 = scrape()
			return netns.MetricValue(m2, in) > b1
		})
		for _, m := range []string{"bnerd_gateway_nat_apply_duration_seconds", guardMetric} {
			if !strings.Contains(m2, m) {
				t.Errorf("%s missing:\n%s", m, m2)
			}
		}
	})

	w := readWire(t, outer())
	t.Logf("link between the sites, whole run: %d IPv4 packets, %d ESP-in-UDP, %d other, %d with inner addresses", len(w.all), len(w.esp), len(w.other), len(w.inner))
	if len(w.other) != 0 || len(w.inner) != 0 {
		t.Errorf("the link between the sites carried non-IKE/ESP or inner-address packets:\n%s\n%s", strings.Join(netns.First(w.other, 10), "\n"), strings.Join(netns.First(w.inner, 10), "\n"))
	}
	if len(w.esp) < 100 {
		t.Errorf("only %d ESP-in-UDP packets between the sites; traffic did not use the tunnel", len(w.esp))
	}

	// Last, because it lets plaintext out on purpose: the capture above has ended.
	e.run(t, "negative control: without the guard and the tunnel the capture sees plaintext", func(t *testing.T) {
		e.negativeControl(t)
	})
}

var reMSS = regexp.MustCompile(`mss (\d+)`)

func checkMSS(t *testing.T, lines []string, max int) {
	t.Helper()
	seen := 0
	for _, l := range lines {
		for _, m := range reMSS.FindAllStringSubmatch(l, -1) {
			seen++
			if v, _ := strconv.Atoi(m[1]); v > max {
				t.Errorf("SYN with MSS %d > %d: %s", v, max, l)
			}
		}
	}
	if seen == 0 {
		t.Errorf("no SYN with an MSS option captured:\n%s", strings.Join(lines, "\n"))
	}
}
