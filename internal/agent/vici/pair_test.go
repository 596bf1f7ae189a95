package vici

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	govici "github.com/strongswan/govici/vici"

	"bnerd.net/vpn-operator/internal/agent/downcause"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// pair is two real charons (kernel-libipsec) in network namespaces joined by a veth: the
// gateway, configured by the Syncer from the production renderer's swanctl.conf, and a
// client whose swanctl.conf each test writes by hand and loads with swanctl, as the
// client's administrator would.
type pair struct {
	t            *testing.T
	dir          string
	gns, pns     string
	gsock, psock string
	cfg          *gatewayconfig.Config
	loader       *Syncer
	causes       *downcause.Tracker
	clock        *fakeClock
	// procs are the charons by name ("gateway", "client").
	procs map[string]*exec.Cmd
}

const (
	pairGW   = "10.9.1.2"
	pairPeer = "10.9.1.1"
	pairPSK  = "pair-test-key-0123456789-abcdef"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func needCharons(t *testing.T) {
	testenv.NeedRoot(t, "needs root (network namespaces, charon)")
	for _, b := range []string{"charon-systemd", "swanctl", "ip"} {
		if _, err := exec.LookPath(b); err != nil {
			testenv.SkipDataplane(t, "needs "+b+" (hack/install-deps.sh)")
		}
	}
	if _, err := os.Stat("/usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so"); err != nil {
		testenv.SkipDataplane(t, "needs strongSwan's kernel-libipsec plugin (libcharon-extra-plugins)")
	}
}

func pairRun(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return string(out)
}

// newPair starts both charons. tunnels is the number of tunnels the gateway renders
// (t1, t2, ...), each to its own client identity and subnet.
func newPair(t *testing.T, tunnels int, mutate func(*gatewayconfig.Tunnel)) *pair {
	return newPairWith(t, tunnels, mutate, "")
}

// newPairWith also adds clientSettings to the client's strongswan.conf (its charon
// section).
func newPairWith(t *testing.T, tunnels int, mutate func(*gatewayconfig.Tunnel), clientSettings string) *pair {
	return newPairFrom(t, pairOptions{tunnels: tunnels, mutate: mutate, clientSettings: clientSettings})
}

// pairOptions shape a pair: the gateway's tunnels (each changed by mutate), and settings
// added to each charon's strongswan.conf (a second charon section, which extends the
// rendered one and overrides its keys).
type pairOptions struct {
	tunnels                         int
	mutate                          func(*gatewayconfig.Tunnel)
	clientSettings, gatewaySettings string
}

// pairSeq numbers the pairs of this test process, so that one test can run several.
var pairSeq atomic.Int32

func newPairFrom(t *testing.T, o pairOptions) *pair {
	tunnels, mutate := o.tunnels, o.mutate
	needCharons(t)
	dir := t.TempDir()
	suffix := fmt.Sprintf("%d", os.Getpid()%100000)
	if n := pairSeq.Add(1); n > 1 {
		suffix += fmt.Sprintf("-%d", n)
	}
	p := &pair{t: t, dir: dir, gns: "tn-g" + suffix, pns: "tn-p" + suffix, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	for _, ns := range []string{p.gns, p.pns} {
		_ = exec.Command("ip", "netns", "del", ns).Run()
		pairRun(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		pairRun(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	pairRun(t, "ip", "link", "add", "net1", "netns", p.gns, "type", "veth", "peer", "name", "wan0", "netns", p.pns)
	pairRun(t, "ip", "-n", p.gns, "addr", "add", pairGW+"/24", "dev", "net1")
	pairRun(t, "ip", "-n", p.pns, "addr", "add", pairPeer+"/24", "dev", "wan0")
	pairRun(t, "ip", "-n", p.gns, "link", "set", "net1", "up")
	pairRun(t, "ip", "-n", p.pns, "link", "set", "wan0", "up")
	// The child SAs' routes need a local address inside the local selector.
	pairRun(t, "ip", "-n", p.gns, "addr", "add", "100.64.7.1/32", "dev", "lo")
	for i := 1; i <= tunnels; i++ {
		pairRun(t, "ip", "-n", p.pns, "addr", "add", fmt.Sprintf("198.51.%d.1/32", 100+i), "dev", "lo")
	}
	p.gsock, p.psock = p.charon(p.gns, "gateway", o.gatewaySettings), p.charon(p.pns, "client", o.clientSettings)

	p.cfg = &gatewayconfig.Config{
		Version: gatewayconfig.FormatVersion, Gateway: gatewayconfig.GatewayRef{Kind: "IPsecGateway", Namespace: "ns", Name: "gw"},
		ServiceCIDR: "100.64.7.0/24", GatewayAddress: "100.64.7.1", PortFixedIP: pairGW,
		// The gateway network as the configuration states it: the gateway's port and
		// its router, never the peer (the pod refuses a peer on the gateway network),
		// although both charons share one link here.
		SubnetCIDR: "10.9.1.2/31", SubnetGatewayIP: "10.9.1.3", FloatingIP: pairGW,
	}
	for i := 1; i <= tunnels; i++ {
		tn := gatewayconfig.Tunnel{Name: fmt.Sprintf("t%d", i), PeerAddress: pairPeer, PeerID: fmt.Sprintf("client%d", i),
			RemoteSubnets: []string{fmt.Sprintf("198.51.%d.0/24", 100+i)}, IKEProposals: []string{"aes128gcm16-prfsha256-x25519"},
			ESPProposals: []string{"aes128gcm16-x25519"}, IKERekeySeconds: 3600, ESPRekeySeconds: 1800, DPDDelaySeconds: 30, DPDAction: "restart",
			PSK: gatewayconfig.SecretKeyRef{Secret: "pair-psk", Key: fmt.Sprintf("t%d", i)}}
		if mutate != nil {
			mutate(&tn)
		}
		p.cfg.Tunnels = append(p.cfg.Tunnels, tn)
	}
	p.causes = &downcause.Tracker{Now: p.clock.Now}
	p.loader = &Syncer{Socket: p.gsock, Causes: p.causes, Now: p.clock.Now, Logf: t.Logf}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	connected := make(chan struct{}, 1)
	go (&Watcher{Dial: DialEvents(p.gsock), Events: []string{"log"}, OnEvent: func(ev govici.Event) { p.causes.Observe(ev) },
		OnConnect: func() { connected <- struct{}{} }}).Run(ctx)
	<-connected
	return p
}

func (p *pair) charon(ns, name, settings string) string {
	t := p.t
	sock := filepath.Join(p.dir, name+".vici")
	conf, err := gatewayconfig.RenderStrongswanConf(gatewayconfig.StrongswanOptions{Mode: gatewayconfig.DataplaneLibipsec, VICISocket: sock, LogFile: filepath.Join(p.dir, name+".log")})
	if err != nil {
		t.Fatal(err)
	}
	// Short retransmissions (the rendered file gives up on a silent peer after about
	// 84 s): about 6 s here. A second charon section extends the first.
	conf += "charon {\n  retransmit_timeout = 1\n  retransmit_tries = 2\n" + settings + "}\n"
	cf := filepath.Join(p.dir, name+".conf")
	if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, "charon-systemd")
	cmd.Env = append(os.Environ(), "STRONGSWAN_CONF="+cf)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if p.procs == nil {
		p.procs = map[string]*exec.Cmd{}
	}
	p.procs[name] = cmd
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(p.dir, name+".log"))
			t.Logf("%s charon log (tail):\n%s", name, tail(string(b), 60))
		}
	})
	for i := 0; i < 200; i++ {
		if s, err := govici.NewSession(govici.WithSocketPath(sock)); err == nil {
			s.Close()
			return sock
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("charon %s does not answer", name)
	return ""
}

func tail(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// client is the client's hand-written swanctl.conf for tunnel i; opts replace its
// defaults (ike, esp, remote_ts, local_ts, psk, unique).
func client(i int, opts map[string]string) string {
	o := map[string]string{
		"ike": "aes128gcm16-prfsha256-x25519", "esp": "aes128gcm16-x25519", "psk": pairPSK,
		"local_ts": fmt.Sprintf("198.51.%d.0/24", 100+i), "remote_ts": "100.64.7.0/24", "unique": "no",
	}
	for k, v := range opts {
		o[k] = v
	}
	return fmt.Sprintf(`connections {
  gw%[1]d {
    version = 2
    local_addrs = %[2]s
    remote_addrs = %[3]s
    proposals = %[4]s
    unique = %[8]s
    local {
      auth = psk
      id = client%[1]d
    }
    remote {
      auth = psk
      id = %[3]s
    }
    children {
      gw%[1]d {
        local_ts = %[6]s
        remote_ts = %[7]s
        esp_proposals = %[5]s
      }
    }
  }
}
secrets {
  ike-gw%[1]d {
    id-1 = client%[1]d
    id-2 = %[3]s
    secret = "%[9]s"
  }
}
`, i, pairPeer, pairGW, o["ike"], o["esp"], o["local_ts"], o["remote_ts"], o["unique"], o["psk"])
}

// loadClient loads the client's configuration (replacing what it had) with swanctl.
func (p *pair) loadClient(conf string) {
	p.t.Helper()
	f := filepath.Join(p.dir, "client-swanctl.conf")
	if err := os.WriteFile(f, []byte(conf), 0o600); err != nil {
		p.t.Fatal(err)
	}
	uri := "unix://" + p.psock
	pairRun(p.t, "ip", "netns", "exec", p.pns, "swanctl", "--load-creds", "--clear", "--noprompt", "--file", f, "--uri", uri)
	pairRun(p.t, "ip", "netns", "exec", p.pns, "swanctl", "--load-conns", "--file", f, "--uri", uri)
}

func (p *pair) rendered() (string, string) {
	p.t.Helper()
	sw, err := gatewayconfig.RenderSwanctl(p.cfg)
	if err != nil {
		p.t.Fatal(err)
	}
	psks := map[string]string{}
	for _, tn := range p.cfg.Tunnels {
		psks[tn.Name] = pairPSK
	}
	sec, err := gatewayconfig.RenderSecrets(p.cfg, psks)
	if err != nil {
		p.t.Fatal(err)
	}
	return sw, sec
}

func (p *pair) apply() Result {
	p.t.Helper()
	sw, sec := p.rendered()
	res, err := p.loader.Apply(context.Background(), sw, sec)
	if err != nil {
		p.t.Fatalf("apply: %v", err)
	}
	return res
}

func (p *pair) names() []string {
	var n []string
	for _, tn := range p.cfg.Tunnels {
		n = append(n, tn.Name)
	}
	return n
}

func (p *pair) sas() map[string][]IKESA {
	p.t.Helper()
	sas, err := ListSAsOn(p.gsock)(context.Background(), p.names())
	if err != nil {
		p.t.Fatalf("list-sas: %v", err)
	}
	return sas
}

// until polls cond (real time) for up to limit.
func (p *pair) until(what string, limit time.Duration, cond func() bool) {
	p.t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.t.Fatalf("never happened: %s", what)
}

func (p *pair) up(name string) bool {
	return Summarize(p.sas()[name], name).Up
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
