// Package routed is the routed-mode end-to-end test in network namespaces: one IPsec
// gateway (real charon with kernel-libipsec, configured by the agent from the operator's
// rendered config, the agent's NAT and interface guard) with a routed tunnel to site A
// and an snat tunnel to site B, each site's strongSwan configured by hand. The cloud
// router routes site A's subnet to the gateway's port, as the operator's router route
// does in routed mode.
package routed

import (
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/nat"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
	"bnerd.net/vpn-operator/test/e2e/netns"
)

// Addresses: TEST-NET, benchmarking and CGNAT space, only inside the test's namespaces.
const (
	clientA    = "198.51.100.10" // behind the routed tunnel
	netA       = "198.51.100.0/24"
	lanA       = "198.51.100.1"
	wanA       = "192.0.2.2"
	clientB    = "198.18.0.10" // behind the snat tunnel
	netB       = "198.18.0.0/24"
	lanB       = "198.18.0.1"
	wanB       = "192.0.2.3"
	routerWAN  = "192.0.2.1"
	floatingIP = "192.0.2.100"
	routerLAN  = "203.0.113.1"
	fabricNet  = "203.0.113.0/24"
	// internalLibipsec is the operator's internal source CIDR on the host: the port and
	// the fabric host, not all of the fabric. (charon's libipsec backend installs a child
	// SA only if it finds a local address in each local selector, so it must hold the
	// port.) internalKernel, in the kernel VM, holds only the fabric host: the kernel
	// backend has no such need.
	internalLibipsec = "203.0.113.0/27"
	internalKernel   = "203.0.113.16/28"
	outsideAddr      = "203.0.113.40" // a fabric address outside the internal sources
	portFixedIP      = "203.0.113.5"
	// The exposure's target lives on a network of its own behind the router, as a
	// service cluster's does: the gateway network itself is never an exposure target.
	backendAddr = "198.18.1.20"
	backendGW   = "198.18.1.1"
	backendNet  = "198.18.1.0/24"
	fabricAddr  = "203.0.113.30"
	serviceCIDR = "100.64.7.0/24"
	pskA        = "e2e-routed-psk-a-not-a-real-secret-0123"
	pskB        = "e2e-routed-psk-b-not-a-real-secret-4567"
)

type world struct {
	*netns.Env
	agent, helper string
}

// kernelMode: the test runs in the kernel VM (TestRoutedModeKernelVM): charon's kernel
// backend (XFRM) everywhere and init-nat's xfrm guard.
func kernelMode() bool { return netns.Kernel() }

func internalSource() string {
	if kernelMode() {
		return internalKernel
	}
	return internalLibipsec
}

func gatewayObject() (*v1alpha1.GatewaySpec, *v1alpha1.GatewayStatus) {
	tun := func(name, peer, subnet string, mode v1alpha1.TunnelMode) v1alpha1.Tunnel {
		return v1alpha1.Tunnel{
			Name: name, Mode: mode,
			Peer:         v1alpha1.Peer{Address: peer, Subnets: []string{subnet}},
			PreSharedKey: v1alpha1.SecretKeyRef{Name: "psk-" + name, Key: "psk"},
			IKE:          v1alpha1.IKEOptions{Proposals: []string{"aes128gcm16-prfsha256-x25519"}, Lifetime: "1h"},
			ESP:          v1alpha1.ESPOptions{Proposals: []string{"aes128gcm16-x25519"}, Lifetime: "30m"},
			DPD:          v1alpha1.DPDOptions{Delay: "5s", Action: "restart"},
		}
	}
	spec := &v1alpha1.GatewaySpec{
		Tunnels: []v1alpha1.Tunnel{tun("a", wanA, netA, v1alpha1.TunnelModeRouted), tun("b", wanB, netB, v1alpha1.TunnelModeSNAT)},
		Exposures: []v1alpha1.Exposure{
			{Name: "web", Target: v1alpha1.Target{Address: backendAddr, Ports: []v1alpha1.PortSpec{{Port: 8443, Protocol: v1alpha1.ProtocolTCP}}}},
		},
		ReverseExposures: []v1alpha1.ReverseExposure{
			{Name: "svc-b", Tunnel: "b", Target: v1alpha1.Target{Address: clientB, Ports: []v1alpha1.PortSpec{{Port: 8080, Protocol: v1alpha1.ProtocolTCP}}}},
			{Name: "svc-a", Tunnel: "a", Target: v1alpha1.Target{Address: clientA, Ports: []v1alpha1.PortSpec{{Port: 8080, Protocol: v1alpha1.ProtocolTCP}}}},
		},
	}
	st := &v1alpha1.GatewayStatus{
		ServiceCIDR: serviceCIDR, ServiceCIDRGatewayAddress: "100.64.7.1", FloatingIP: floatingIP,
		PortFixedIP: portFixedIP, SubnetCIDR: fabricNet, SubnetGatewayIP: routerLAN,
		Exposures:        []v1alpha1.AllocatedAddress{{Name: "web", VirtualIP: "100.64.7.10"}},
		ReverseExposures: []v1alpha1.AllocatedAddress{{Name: "svc-b", VirtualIP: "100.64.7.200"}, {Name: "svc-a", VirtualIP: "100.64.7.201"}},
	}
	return spec, st
}

// render writes the ConfigMap and Secret content as the operator renders them, with
// part of the fabric subnet as the operator's internal source CIDR.
func (w *world) render() string {
	w.T.Helper()
	spec, st := gatewayObject()
	cfg, err := gatewayconfig.Build(gatewayconfig.Input{Kind: v1alpha1.KindIPsecGateway, Namespace: "tenant", Name: "e2e",
		Spec: spec, Status: st, InternalSources: []netip.Prefix{netip.MustParsePrefix(internalSource())}})
	if err != nil {
		w.T.Fatalf("Build: %v", err)
	}
	js, err := gatewayconfig.Marshal(cfg)
	if err != nil {
		w.T.Fatal(err)
	}
	sw, err := gatewayconfig.RenderSwanctl(cfg)
	if err != nil {
		w.T.Fatal(err)
	}
	sec, err := gatewayconfig.RenderSecrets(cfg, map[string]string{"a": pskA, "b": pskB})
	if err != nil {
		w.T.Fatal(err)
	}
	dir := filepath.Join(w.Dir, "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		w.T.Fatal(err)
	}
	for name, content := range map[string]string{gatewayconfig.SecretKeySecrets: sec, gatewayconfig.ConfigMapKeySwanctl: sw, gatewayconfig.ConfigMapKeyConfig: string(js)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			w.T.Fatal(err)
		}
	}
	return filepath.Join(dir, gatewayconfig.ConfigMapKeyConfig)
}

// topology: two client sites (client host c<x> behind its box p<x>) on the internet
// bridge wbr of the cloud router r, the gateway's port and a fabric host on r's LAN br0,
// the backend's network behind r.
func (w *world) topology() {
	// Each site guards its own side, so the WAN captures measure the gateway.
	guard := netns.SiteGuard(kernelMode(), "100.64.0.0/10", fabricNet, backendNet)
	w.Apply(netns.Topology{
		Namespaces: []string{"ca", "pa", "cb", "pb", "r", "g", "b", "f"},
		Bridges:    []netns.Bridge{{Role: "r", Name: "wbr"}, {Role: "r", Name: "br0"}},
		Links: []netns.Link{
			{A: "ca", ADev: "c0", B: "pa", BDev: "lan0"},
			{A: "cb", ADev: "c0", B: "pb", BDev: "lan0"},
			{A: "r", ADev: "to-pa", B: "pa", BDev: "wan0", Bridge: "wbr"},
			{A: "r", ADev: "to-pb", B: "pb", BDev: "wan0", Bridge: "wbr"},
			{A: "r", ADev: "to-g", B: "g", BDev: "net1", Bridge: "br0"},
			{A: "r", ADev: "to-f", B: "f", BDev: "f0", Bridge: "br0"},
			{A: "r", ADev: "to-b", B: "b", BDev: "b0"},
		},
		Addrs: []netns.Addr{
			{Role: "ca", Dev: "c0", CIDR: clientA + "/24"},
			{Role: "pa", Dev: "lan0", CIDR: lanA + "/24"},
			{Role: "pa", Dev: "wan0", CIDR: wanA + "/24"},
			{Role: "cb", Dev: "c0", CIDR: clientB + "/24"},
			{Role: "pb", Dev: "lan0", CIDR: lanB + "/24"},
			{Role: "pb", Dev: "wan0", CIDR: wanB + "/24"},
			{Role: "r", Dev: "wbr", CIDR: routerWAN + "/24"},
			{Role: "r", Dev: "wbr", CIDR: floatingIP + "/32"},
			{Role: "r", Dev: "br0", CIDR: routerLAN + "/24"},
			{Role: "r", Dev: "br0", CIDR: outsideAddr + "/24"},
			{Role: "g", Dev: "net1", CIDR: portFixedIP + "/32"},
			{Role: "r", Dev: "to-b", CIDR: backendGW + "/24"},
			{Role: "b", Dev: "b0", CIDR: backendAddr + "/24"},
			{Role: "f", Dev: "f0", CIDR: fabricAddr + "/24"},
		},
		Routes: []netns.Route{
			{Role: "ca", Dst: "default", Via: lanA},
			{Role: "cb", Dst: "default", Via: lanB},
			{Role: "pa", Dst: "default", Via: routerWAN},
			{Role: "pb", Dst: "default", Via: routerWAN},
			{Role: "b", Dst: "default", Via: backendGW},
			{Role: "f", Dst: "default", Via: routerLAN},
			// The cloud router: the service CIDR and (routed mode) site A's subnet via the
			// gateway's port, the floating IP 1:1. Site B's subnet is known on the
			// internet side: a plaintext leak towards it would cross site B's WAN.
			{Role: "r", Dst: serviceCIDR, Via: portFixedIP},
			{Role: "r", Dst: netA, Via: portFixedIP},
			{Role: "r", Dst: netB, Via: wanB},
		},
		Tables: []netns.Table{
			{Role: "r", Rules: netns.FloatingIPNAT(floatingIP, portFixedIP, "wbr")},
			{Role: "pa", Rules: guard},
			{Role: "pb", Rules: guard},
		},
	})
}

// mode is charon's kernel backend: XFRM in the kernel VM, libipsec on the host.
func mode() gatewayconfig.DataplaneMode {
	if kernelMode() {
		return gatewayconfig.DataplaneKernel
	}
	return gatewayconfig.DataplaneLibipsec
}

// configureSite loads a site's own strongSwan configuration, written by hand as its
// administrator would: the routed site's remote selector covers the fabric's real
// addresses too.
func (w *world) configureSite(role, wan, lan, remoteTS, psk string) {
	w.T.Helper()
	err := w.LoadSite(role, netns.SiteSwanctl{LocalAddrs: wan, RemoteAddrs: floatingIP, Encap: true,
		IKE: "aes128gcm16-prfsha256-x25519", ESP: "aes128gcm16-x25519", DPDDelay: "5s", DPDAction: "clear",
		LocalID: wan, RemoteID: floatingIP, LocalTS: lan, RemoteTS: remoteTS, PSK: psk})
	if err != nil {
		w.T.Fatal(err)
	}
}

var reInstalled = regexp.MustCompile(`(?m)^\s+\S+: #\d+, reqid \d+, INSTALLED`)

func (w *world) established(tunnel string) bool {
	out, err := w.Swanctl("g", "--list-sas", "--ike", tunnel)
	return err == nil && reInstalled.MatchString(out)
}

func TestRoutedMode(t *testing.T) {
	netns.Require(t, "charon-systemd", "swanctl", "curl", "ping")
	if _, err := os.Stat("/usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so"); err != nil && !kernelMode() {
		testenv.SkipDataplane(t, "needs strongSwan's kernel-libipsec plugin (libcharon-extra-plugins)")
	}
	e := netns.New(t, "brt")
	bins := e.Build("./cmd/vpn-gateway-agent", "./test/e2e/dataplane/testhelper")
	w := &world{Env: e, agent: bins["./cmd/vpn-gateway-agent"], helper: bins["./test/e2e/dataplane/testhelper"]}
	w.topology()
	cfg := w.render()
	w.StartCharon("pa", mode())
	w.configureSite("pa", wanA, netA, serviceCIDR+","+internalSource(), pskA)
	w.StartCharon("pb", mode())
	w.configureSite("pb", wanB, netB, serviceCIDR, pskB)
	w.StartCharon("g", mode())
	// Each site's WAN link, captured on the internet router's side of it: a namespace
	// that does no IPsec (on an IPsec endpoint the kernel shows each decrypted inbound
	// packet a second time, which looks exactly like a leak).
	wans := []func() string{w.Capture("wan-a", "r", "to-pa", 256), w.Capture("wan-b", "r", "to-pb", 256)}
	guard := []string{"--tunnel-interface", "ipsec0"}
	if kernelMode() {
		guard = []string{"--guard", "xfrm"}
	}
	w.Start("init-nat", w.NS("g"), nil, append(append([]string{w.agent, "init-nat", "--config-file", cfg, "--interface", "net1"}, guard...),
		"--state-file", filepath.Join(w.Dir, "nat-state.json"))...)
	w.Start("loader", w.NS("g"), nil, w.agent, "strongswan-loader", "--config-file", cfg, "--vici-socket", w.Sock("g"), "--interval", "1s")
	w.Start("backend", w.NS("b"), nil, w.helper, "https", backendAddr+":8443")
	w.Start("fabric", w.NS("f"), nil, w.helper, "https", fabricAddr+":8443")
	w.Start("client-a", w.NS("ca"), nil, w.helper, "http", clientA+":8080")
	w.Start("client-b", w.NS("cb"), nil, w.helper, "http", clientB+":8080")
	w.Eventually("both tunnels established", func() bool { return w.established("a") && w.established("b") })

	t.Run("a fabric host reaches the routed client by its real address and is seen by its own", func(t *testing.T) {
		var body string
		w.Eventually("fabric -> client A", func() bool { body = w.Curl("f", "http://"+clientA+":8080/"); return body != "" })
		if body != "client saw "+fabricAddr {
			t.Errorf("client A answered %q, want the fabric host's real address %s", body, fabricAddr)
		}
	})
	t.Run("the routed client reaches a fabric host by its real address and is seen by its own", func(t *testing.T) {
		var body string
		w.Eventually("client A -> fabric", func() bool { body = w.Curl("ca", "https://"+fabricAddr+":8443/"); return body != "" })
		if body != "backend saw "+clientA {
			t.Errorf("the fabric host answered %q, want client A's real address %s", body, clientA)
		}
	})
	t.Run("an exposure from the routed tunnel keeps the client's address", func(t *testing.T) {
		if body := w.Curl("ca", "https://100.64.7.10:8443/"); body != "backend saw "+clientA {
			t.Errorf("backend answered %q, want %s (no SNAT in routed mode)", body, clientA)
		}
	})
	t.Run("the snat tunnel on the same gateway still SNATs", func(t *testing.T) {
		var body string
		w.Eventually("client B -> exposure", func() bool { body = w.Curl("cb", "https://100.64.7.10:8443/"); return body != "" })
		if body != "backend saw "+portFixedIP {
			t.Errorf("backend answered %q, want the port's fixed IP %s", body, portFixedIP)
		}
		w.Eventually("fabric -> reverse exposure B", func() bool { body = w.Curl("f", "http://100.64.7.200:8080/"); return body != "" })
		if body != "client saw 100.64.7.1" {
			t.Errorf("client B answered %q, want the gateway's .1", body)
		}
		// The snat client reaches nothing by its real address.
		if body := w.Curl("cb", "https://"+fabricAddr+":8443/"); body != "" {
			t.Errorf("client B reached a fabric host by its real address: %q", body)
		}
	})
	t.Run("a reverse exposure into the routed tunnel shows the fabric's real source", func(t *testing.T) {
		if body := w.Curl("f", "http://100.64.7.201:8080/"); body != "client saw "+fabricAddr {
			t.Errorf("client A answered %q, want %s", body, fabricAddr)
		}
	})
	t.Run("a fabric host outside the internal sources does not reach the routed client", func(t *testing.T) {
		before := untranslatedDrops(t, w)
		// A second address of the cloud router: routed to the gateway like any fabric
		// host's, but no internal source.
		if out, err := w.Sh(w.NS("r"), "ping", "-n", "-c", "2", "-W", "1", "-I", outsideAddr, clientA); err == nil {
			t.Errorf("%s reached client A by its real address:\n%s", outsideAddr, out)
		}
		if after := untranslatedDrops(t, w); after <= before {
			t.Errorf("the gateway's drop of untranslated traffic did not count it (%d -> %d)", before, after)
		}
	})
	t.Run("no plaintext while charon is killed", func(t *testing.T) {
		if kernelMode() {
			// A killed charon leaves its SAs in the kernel (the pod's charon role clears
			// them on restart; TestDataplane covers that): nothing here would be proven.
			t.Log("kernel mode: covered by the IPsec dataplane's own kernel run")
			return
		}
		w.Start("ping-a", w.NS("f"), nil, "ping", "-n", "-i", "0.2", clientA)
		w.Start("ping-b", w.NS("f"), nil, "ping", "-n", "-i", "0.2", "100.64.7.200")
		time.Sleep(time.Second)
		w.Stop("charon-g", syscall.SIGKILL)
		time.Sleep(3 * time.Second) // ipsec0 and table 220 are gone; the guard alone holds
		w.StartCharon("g", mode())
		w.Eventually("both tunnels back", func() bool { return w.established("a") && w.established("b") })
		time.Sleep(time.Second)
		w.Stop("ping-a", syscall.SIGINT)
		w.Stop("ping-b", syscall.SIGINT)
		guard := w.Must(w.NS("g"), "nft", "list", "chain", "ip", nat.DefaultTable, "forward")
		if !regexp.MustCompile(`oifname != "ipsec0" counter packets [1-9]`).MatchString(guard) {
			t.Errorf("the guard dropped nothing while charon was dead:\n%s", guard)
		}
		if !strings.Contains(w.Log("ping-a"), "bytes from "+clientA) {
			t.Errorf("the fabric's pings to client A never crossed the tunnel:\n%s", w.Log("ping-a"))
		}
	})

	for _, stop := range wans {
		file := stop()
		all := netns.ReadPcap(t, file, "ip")
		bad := netns.ReadPcap(t, file, "ip and not (udp port 500 or udp port 4500) and not (icmp[0] = 3 and icmp[17] = 17 and (icmp[30:2] = 4500 or icmp[30:2] = 500)) and not (igmp and src host "+routerWAN+")")
		inner := netns.ReadPcap(t, file, "net "+netA+" or net "+netB+" or net 100.64.0.0/10 or net "+fabricNet+" or net "+backendNet)
		esp := netns.ReadPcap(t, file, "udp port 4500 and udp[8:4] != 0")
		t.Logf("%s: %d IPv4 packets, %d ESP-in-UDP, %d other, %d with inner addresses", filepath.Base(file), len(all), len(esp), len(bad), len(inner))
		if len(bad) != 0 || len(inner) != 0 {
			t.Errorf("%s carried more than IKE and ESP:\n%s\n%s", filepath.Base(file), strings.Join(netns.First(bad, 10), "\n"), strings.Join(netns.First(inner, 10), "\n"))
		}
		if len(esp) < 10 {
			t.Errorf("only %d ESP-in-UDP packets in %s: traffic did not use the tunnel", len(esp), filepath.Base(file))
		}
	}
}

var reUntranslated = regexp.MustCompile(`ip daddr @peer_subnets ct status (?:& dnat == 0|! dnat) counter packets (\d+)`)

// untranslatedDrops reads the forward chain's counter of traffic to the clients that was
// neither an exposure nor routed-mode traffic between the internal sources and a routed
// subnet.
func untranslatedDrops(t *testing.T, w *world) int {
	t.Helper()
	out := w.Must(w.NS("g"), "nft", "list", "chain", "ip", nat.DefaultTable, "forward")
	m := reUntranslated.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no untranslated-traffic drop rule:\n%s", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
