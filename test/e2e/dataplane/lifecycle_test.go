package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/downcause"
	"bnerd.net/vpn-operator/internal/agent/exporter"
	"bnerd.net/vpn-operator/internal/agent/nat"
	"bnerd.net/vpn-operator/internal/agent/vici"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
	"bnerd.net/vpn-operator/test/e2e/netns"
)

// rekeySoakEnv lengthens the host mode's rekeys under traffic in TestTunnelLifecycle (a
// Go duration, "10m"); the default runs in make test.
const rekeySoakEnv = "BNERD_REKEY_SOAK"

// peerOpts are the knobs of the client's hand-written configuration.
type peerOpts struct {
	ike, esp, remoteTS, psk string
	// anyRemote: accept IKE from any address (the client that would take an SA from the
	// gateway's pod network too).
	anyRemote bool
	// unique: a new IKE SA replaces the old one (unique = replace).
	unique bool
}

func defaultPeer() peerOpts {
	return peerOpts{ike: "aes128gcm16-prfsha256-x25519", esp: "aes128gcm16-x25519", remoteTS: serviceCIDR, psk: psk}
}

// configurePeerWith replaces the client's configuration with o, written as the client's
// administrator would, and loads it with swanctl (its SAs are left alone: the client's
// connection has no start action).
func (e *env) configurePeerWith(o peerOpts) {
	e.T.Helper()
	remote := floatingIP
	if o.anyRemote {
		remote = "%any"
	}
	err := e.LoadSite("p", netns.SiteSwanctl{LocalAddrs: peerWAN, RemoteAddrs: remote, Encap: true, UniqueReplace: o.unique,
		IKE: o.ike, ESP: o.esp, DPDDelay: "5s", DPDAction: "clear",
		LocalID: peerWAN, RemoteID: floatingIP, LocalTS: clientNet, RemoteTS: o.remoteTS, PSK: o.psk})
	if err != nil {
		e.T.Fatalf("peer: %v", err)
	}
}

// statusReader reads the gateway object's tunnel state from the API server.
type statusReader func() (v1alpha1.TunnelState, bool)

// lifecycleStatus returns a reader of status.tunnels[t1]: in kernel mode the pod's
// status agent writes it; in host mode the stand-alone loader is replaced by a status
// agent that loads charon itself, as in the pod (--load; the keys from the secrets file
// beside the config, the file mode of the pod's Secret reads), writing to an
// envtest API server.
func (e *env) lifecycleStatus(t *testing.T) statusReader {
	var cl client.Client
	key := client.ObjectKey{Namespace: "tenant", Name: "e2e"}
	if e.kernel {
		cl = e.api.cl
	} else {
		api, err := testenv.Start()
		if err != nil {
			if err == testenv.ErrNoControlPlane && !testenv.Required() {
				t.Skip(err)
			}
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = api.Stop() })
		ctx := context.Background()
		if err := api.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}); err != nil {
			t.Fatal(err)
		}
		obj := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Spec: storedSpec(e.obj.Spec)}
		obj.Spec.Tunnels[0].PreSharedKey.Name = "psk"
		if err := api.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		// The status agent runs in the gateway's namespace, as in the pod: its loader
		// waits for the port's policy routing there. The API server is reached through
		// a forward from the namespace's loopback, as in kernel mode.
		u, err := url.Parse(api.Config.Host)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := inNetns(e.NS("g"), func() (net.Listener, error) { return net.Listen("tcp", apiAddr) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					up, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
					if err != nil {
						_ = c.Close()
						return
					}
					pipe(c, up)
				}()
			}
		}()
		kc, err := clientcmd.Load(api.KubeConfig())
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range kc.Clusters {
			c.Server = "https://" + apiAddr
		}
		kubeconfig := filepath.Join(e.Dir, "status-agent.kubeconfig")
		if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
			t.Fatal(err)
		}
		e.Stop("loader", syscall.SIGTERM)
		cfg := filepath.Join(e.Dir, "config")
		e.statusArgs = []string{e.bin.agent, "status-agent", "--config-file", filepath.Join(cfg, gatewayconfig.ConfigMapKeyConfig),
			"--vici-socket", e.Sock("g"), "--kubeconfig", kubeconfig, "--interval", "1s",
			"--load", "--secrets-file", filepath.Join(cfg, gatewayconfig.SecretKeySecrets)}
		e.Start("status-agent", e.NS("g"), nil, e.statusArgs...)
		t.Cleanup(func() { e.Stop("status-agent", syscall.SIGTERM) })
		cl = api.Client
	}
	return func() (v1alpha1.TunnelState, bool) {
		cur := &v1alpha1.IPsecGateway{}
		if err := cl.Get(context.Background(), key, cur); err != nil {
			return v1alpha1.TunnelState{}, false
		}
		for _, ts := range cur.Status.Tunnels {
			if ts.Name == "t1" {
				return ts, true
			}
		}
		return v1alpha1.TunnelState{}, false
	}
}

// statusAgentLog is the log of the process that runs the loader with the status agent.
func (e *env) statusAgentLog() string {
	if e.kernel {
		return e.Log(render.ContainerStatus)
	}
	return e.Log("status-agent")
}

// sampler reads the tunnel's state from the status every 100 ms and from the exporter
// every scrape interval, each in its own loop, and counts every reading that is not up.
type sampler struct {
	samples, scrapes, statusDown, metricDown atomic.Int64
	firstDown                                atomic.Value
	start                                    time.Time
	took                                     time.Duration
	stop                                     chan struct{}
	wg                                       sync.WaitGroup
}

// scraper reads the exporter from the test process over a kept-alive connection made in
// the gateway's namespace (a curl per sample costs a process start, too slow for 100 ms).
func (e *env) scraper() func(series string) float64 {
	ns := e.NS("g")
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return inNetns(ns, func() (net.Conn, error) { return (&net.Dialer{}).DialContext(ctx, network, addr) })
		},
		MaxIdleConnsPerHost: 1,
	}}
	return func(series string) float64 {
		resp, err := c.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return netns.MetricValue(string(b), series)
	}
}

func (e *env) sample(read statusReader) *sampler { return e.sampleEvery(read, 100*time.Millisecond) }

// sampleEvery scrapes the exporter every scrape.
func (e *env) sampleEvery(read statusReader, scrape time.Duration) *sampler {
	s := &sampler{stop: make(chan struct{}), start: time.Now()}
	every := func(d time.Duration, f func()) {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			tick := time.NewTicker(d)
			defer tick.Stop()
			for {
				select {
				case <-s.stop:
					return
				case <-tick.C:
				}
				f()
			}
		}()
	}
	every(100*time.Millisecond, func() {
		st, ok := read()
		s.samples.Add(1)
		if !ok || st.State != "Up" {
			s.statusDown.Add(1)
			s.firstDown.CompareAndSwap(nil, fmt.Sprintf("status %+v at %s", st, time.Now().Format(time.RFC3339Nano)))
		}
	})
	get := e.scraper()
	every(scrape, func() {
		up := get(`bnerd_ipsec_tunnel_up{tunnel="t1"}`)
		s.scrapes.Add(1)
		// A scrape without the series (a listing that timed out) is not a "down".
		if up == 0 {
			s.metricDown.Add(1)
			s.firstDown.CompareAndSwap(nil, "metric tunnel_up 0 at "+time.Now().Format(time.RFC3339Nano))
		}
	})
	return s
}

func (s *sampler) end() { close(s.stop); s.wg.Wait(); s.took = time.Since(s.start) }

func (s *sampler) check(t *testing.T, what string) {
	t.Helper()
	figure(t.Logf, "%s: %d status reads, %d not Up; %d exporter scrapes in %.0f s (%.1f a second), %d tunnel_up 0", what, s.samples.Load(), s.statusDown.Load(),
		s.scrapes.Load(), s.took.Seconds(), float64(s.scrapes.Load())/s.took.Seconds(), s.metricDown.Load())
	if s.statusDown.Load() != 0 || s.metricDown.Load() != 0 {
		t.Errorf("%s: the tunnel was reported down (first: %v)", what, s.firstDown.Load())
	}
	if s.samples.Load() == 0 || s.scrapes.Load() == 0 {
		t.Errorf("%s: no samples", what)
	}
}

// ikeChild returns the gateway's carrying IKE SA and child SA unique IDs of t1.
func (e *env) ikeChild() (string, string) {
	s, err := vici.Dial(e.Sock("g"))
	if err != nil {
		return "", ""
	}
	defer s.Close()
	sas, err := vici.ListSAs(context.Background(), s, "t1")
	if err != nil {
		return "", ""
	}
	sum := vici.Summarize(sas["t1"], "t1")
	if !sum.Up {
		return "", ""
	}
	for _, c := range sum.Newest.Children {
		if c.Name == "t1" {
			return sum.Newest.UniqueID, c.UniqueID
		}
	}
	return sum.Newest.UniqueID, ""
}

// TestTunnelLifecycle drives the tunnel through what a client sees over its life: rekeys,
// changes of the tunnel's settings, and a client that misconfigures its side in each of
// the common ways, with the client's configuration written by hand in this test. The
// gateway runs as in the pod (the status agent with the loader inside it, the exporter).
// Kernel mode (the VM) runs the parts that touch the kernel's SAs: the changes and the
// rekeys.
func TestTunnelLifecycle(t *testing.T) {
	e, _, outer := newEnv(t)
	e.obj.Spec.Tunnels[0].IKE.Proposals = []string{"aes128gcm16-prfsha256-x25519", "aes256gcm16-prfsha384-x25519"}
	e.obj.Spec.Tunnels[0].ESP.Proposals = []string{"aes128gcm16-x25519", "aes256gcm16-x25519"}
	read := e.lifecycleStatus(t)
	ping := func() func() (sent, lost int) {
		name := fmt.Sprintf("lc-ping-%d", time.Now().UnixNano())
		e.Start(name, e.NS("c"), nil, "ping", "-n", "-i", "0.2", "100.64.7.12")
		return func() (int, int) {
			e.Stop(name, syscall.SIGINT)
			var tx, rx int
			for _, l := range strings.Split(e.Log(name), "\n") {
				if strings.Contains(l, "packets transmitted") {
					_, _ = fmt.Sscanf(strings.TrimSpace(l), "%d packets transmitted, %d received", &tx, &rx)
				}
			}
			return tx, tx - rx
		}
	}

	changePeer := peerOpts{ike: "aes128gcm16-prfsha256-x25519,aes256gcm16-prfsha384-x25519", esp: "aes128gcm16-x25519,aes256gcm16-x25519", remoteTS: serviceCIDR, psk: psk}
	e.run(t, "changed lifetimes and IKE proposals are applied make-before-break", func(t *testing.T) {
		e.configurePeerWith(changePeer)
		// The initial SA was made from the first rendering; the new one must carry the
		// spec with both proposal lists (first a change to the lists, so both sides
		// accept the next one).
		e.render()
		e.Eventually("status Up", func() bool { st, ok := read(); return ok && st.State == "Up" })
		e.Eventually("the SA carries the tunnel", func() bool { id, _ := e.ikeChild(); return id != "" })
		s := e.sample(read)
		stopPing := ping()
		ike0, _ := e.ikeChild()
		e.obj.Spec.Tunnels[0].IKE.Lifetime = "40s"
		e.obj.Spec.Tunnels[0].ESP.Lifetime = "20s"
		e.obj.Spec.Tunnels[0].IKE.Proposals = []string{"aes256gcm16-prfsha384-x25519"}
		e.render()
		e.Eventually("a new IKE SA carries the tunnel", func() bool { id, _ := e.ikeChild(); return id != "" && id != ike0 })
		e.Eventually("the old IKE SA is gone", func() bool {
			out, _ := e.Swanctl("g", "--list-sas", "--ike", "t1")
			return strings.Count("\n"+out, "\nt1: #") == 1 // IKE SAs; child SAs are indented
		})
		e.sleep(2 * time.Second)
		s.end()
		sent, lost := stopPing()
		s.check(t, string(e.dataplane())+" IKE change")
		figure(t.Logf, "%s IKE change (lifetimes, proposals): %d of %d pings lost", e.dataplane(), lost, sent)
		if !strings.Contains(e.statusAgentLog(), "runs on its changed settings") {
			t.Errorf("the loader did not apply the change make-before-break:\n%s", e.statusAgentLog())
		}
	})

	e.run(t, "a changed ESP proposal moves to a new child SA in the same IKE SA", func(t *testing.T) {
		s := e.sample(read)
		stopPing := ping()
		_, child0 := e.ikeChild()
		e.obj.Spec.Tunnels[0].ESP.Proposals = []string{"aes256gcm16-x25519"}
		e.render()
		e.Eventually("a new child SA carries the tunnel", func() bool { _, c := e.ikeChild(); return c != "" && c != child0 })
		e.sleep(2 * time.Second)
		s.end()
		sent, lost := stopPing()
		s.check(t, string(e.dataplane())+" ESP change")
		figure(t.Logf, "%s ESP change: %d of %d pings lost", e.dataplane(), lost, sent)
	})

	// Rekeys under traffic. Host mode (libipsec, quick) rekeys the IKE SA and the child SA
	// every 10 s for 60 s (BNERD_REKEY_SOAK lengthens it: "10m") with the exporter scraped
	// 20 times a second; kernel mode (the VM, under software emulation) keeps the
	// lifetimes of the first step, 40 s and 20 s, for 100 s, scraped 10 times a second.
	soak, ikeLife, espLife, scrapeEvery, minRekeys := 100*time.Second, "40s", "20s", 100*time.Millisecond, 5
	if !e.kernel {
		soak, ikeLife, espLife, scrapeEvery = 60*time.Second, "10s", "10s", 50*time.Millisecond
		if v := os.Getenv(rekeySoakEnv); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatalf("%s: %v", rekeySoakEnv, err)
			}
			soak = d
		}
		minRekeys = int(soak / (10 * time.Second))
	}
	lifetimes := func(ike, esp string) {
		if e.obj.Spec.Tunnels[0].IKE.Lifetime == ike && e.obj.Spec.Tunnels[0].ESP.Lifetime == esp {
			return
		}
		ike0, _ := e.ikeChild()
		e.obj.Spec.Tunnels[0].IKE.Lifetime, e.obj.Spec.Tunnels[0].ESP.Lifetime = ike, esp
		e.render()
		e.Eventually("a new IKE SA with the lifetimes "+ike+"/"+esp+" carries the tunnel", func() bool { id, _ := e.ikeChild(); return id != "" && id != ike0 })
	}
	secs := func(l string) string { return strings.TrimSuffix(l, "s") + " s" }
	e.run(t, fmt.Sprintf("%.0f s of child rekeys every %s and IKE rekeys every %s: never reported down", soak.Seconds(), secs(espLife), secs(ikeLife)), func(t *testing.T) {
		lifetimes(ikeLife, espLife)
		in := `bnerd_ipsec_rekeys_total{tunnel="t1"}`
		r0 := e.metric(in)
		s := e.sampleEvery(read, scrapeEvery)
		stopPing := ping()
		time.Sleep(soak) // wall time: charon's rekey timers are real time
		s.end()
		sent, lost := stopPing()
		rekeys := e.metric(in) - r0
		s.check(t, string(e.dataplane())+" rekeys")
		figure(t.Logf, "%s %.0f s of rekeys: %.0f rekey events, %d of %d pings lost", e.dataplane(), soak.Seconds(), rekeys, lost, sent)
		// Give or take charon's jitter.
		if rekeys < float64(minRekeys) {
			t.Errorf("only %.0f rekeys in %s; the lifetimes were not applied", rekeys, soak)
		}
		lifetimes("40s", "20s")
	})

	// The negative control of the settling that keeps a rekey from reading down: a
	// tunnel that really ends reads down at once.
	e.run(t, "a tunnel the client ends reads down at the next scrape", func(t *testing.T) {
		series := `bnerd_ipsec_tunnel_up{tunnel="t1"}`
		scrape := e.scraper()
		e.Eventually("the exporter reads the tunnel up", func() bool { return scrape(series) == 1 })
		// The client refuses the gateway's next attempts.
		bad := changePeer
		bad.psk = "not-the-gateways-key-0123456789"
		e.configurePeerWith(bad)
		if out, err := e.Swanctl("p", "--terminate", "--ike", "gw"); err != nil {
			t.Fatalf("terminating at the client: %v %s", err, out)
		}
		if e.kernel {
			// The pod's exporter serves the status agent's listing, published every
			// second: the next scrape is the first after a listing taken since.
			ended := time.Now().UnixMilli()
			e.Eventually("the status agent's listing taken after the client ended the tunnel", func() bool {
				var st exporter.IPsecState
				b, err := os.ReadFile(render.IPsecStateFile)
				return err == nil && json.Unmarshal(b, &st) == nil && st.Written > ended
			})
		}
		first, second := scrape(series), scrape(series)
		figure(t.Logf, "%s tunnel ended by the client: tunnel_up %v, then %v", e.dataplane(), first, second)
		if first != 0 && second != 0 {
			t.Errorf("tunnel_up read %v and %v in the two scrapes after the client ended the tunnel, want 0", first, second)
		}
		e.Eventually("status not Up", func() bool { st, ok := read(); return ok && st.State != "Up" })
		e.configurePeerWith(changePeer)
		e.Eventually("status Up again after the client's fix", func() bool { st, ok := read(); return ok && st.State == "Up" })
	})

	e.startOrder(t, read)
	if !e.kernel {
		e.lifecycleCauses(t, read)
	}

	w := readWire(t, outer())
	if len(w.other) != 0 || len(w.inner) != 0 {
		t.Errorf("the link between the sites carried non-IKE/ESP or inner-address packets:\n%s\n%s", strings.Join(netns.First(w.other, 10), "\n"), strings.Join(netns.First(w.inner, 10), "\n"))
	}
}

// lifecycleCauses breaks the client's side in each common way and checks that the
// status and the exporter say why, that refusals are retried politely, and that the
// tunnel comes back once the client is fixed.
func (e *env) lifecycleCauses(t *testing.T, read statusReader) {
	good := defaultPeer()
	good.ike, good.esp = "aes256gcm16-prfsha384-x25519", "aes256gcm16-x25519"
	expect := func(t *testing.T, reason string, state string) v1alpha1.TunnelState {
		t.Helper()
		var st v1alpha1.TunnelState
		e.Eventually("status reason "+reason, func() bool {
			var ok bool
			st, ok = read()
			return ok && st.Reason == reason && (state == "" || st.State == state)
		})
		if st.Message == "" {
			t.Errorf("no message with reason %s: %+v", reason, st)
		}
		series := fmt.Sprintf(`bnerd_ipsec_tunnel_reason{reason=%q,tunnel="t1"}`, reason)
		e.Eventually("exporter label "+reason, func() bool { return e.metric(series) == 1 })
		t.Logf("status: %s %s: %s", st.State, st.Reason, st.Message)
		return st
	}
	restore := func(t *testing.T) {
		t.Helper()
		e.configurePeerWith(good)
		e.Eventually("tunnel Up again after the client's fix", func() bool { st, ok := read(); return ok && st.State == "Up" && st.Reason == "" })
		e.Eventually("traffic again", e.probe)
	}
	// breakPeer reconfigures the client and ends the running SA from its side.
	breakPeer := func(o peerOpts) {
		e.configurePeerWith(o)
		if out, err := e.Swanctl("p", "--terminate", "--ike", "gw"); err != nil {
			e.T.Fatalf("terminating at the client: %v %s", err, out)
		}
	}
	e.run(t, "authentication failure: reported, retried with backoff", func(t *testing.T) {
		bad := good
		bad.psk = "not-the-gateways-key-0123456789"
		log0 := strings.Count(e.statusAgentLog(), "initiated t1")
		start := time.Now()
		breakPeer(bad)
		st := expect(t, downcause.AuthenticationFailed, "Down")
		e.sleep(30 * time.Second)
		attempts := strings.Count(e.statusAgentLog(), "initiated t1") - log0
		figure(t.Logf, "refused peer: %d attempts in %.0fs (a fixed 2 s interval would make %d)", attempts, time.Since(start).Seconds(), int(time.Since(start)/(2*time.Second)))
		// 0, 5, 15, 35 s: at most four attempts in the window (noise only delays them).
		if attempts > 4 {
			t.Errorf("%d attempts in %s: not backing off", attempts, time.Since(start).Round(time.Second))
		}
		if st, _ = read(); !strings.Contains(st.Message, "next attempt at") {
			t.Errorf("the status does not say when the next attempt is due: %+v", st)
		}
		restore(t)
	})
	e.run(t, "no common IKE proposal", func(t *testing.T) {
		bad := good
		bad.ike = "aes256-sha256-modp2048"
		breakPeer(bad)
		expect(t, downcause.NoCommonIKEProposal, "Down")
		restore(t)
	})
	e.run(t, "no common ESP proposal: half-open, recovers", func(t *testing.T) {
		bad := good
		bad.esp = "aes256-sha256-modp2048"
		breakPeer(bad)
		expect(t, downcause.NoCommonESPProposal, "Connecting")
		restore(t)
	})
	e.run(t, "traffic selectors refused: half-open, recovers", func(t *testing.T) {
		bad := good
		bad.remoteTS = "100.64.8.0/24"
		breakPeer(bad)
		expect(t, downcause.TrafficSelectorsRefused, "Connecting")
		restore(t)
	})
	e.run(t, "PFS mismatch at rekey: reported while up, recovers after the child SA expires", func(t *testing.T) {
		bad := good
		bad.esp = "aes256gcm16"
		breakPeer(bad)
		e.Eventually("up without PFS", func() bool { st, ok := read(); return ok && st.State == "Up" })
		ike0, _ := e.ikeChild()
		expect(t, downcause.PFSMismatchAtRekey, "Up")
		e.Eventually("up again on a new IKE SA after the child SA expired", func() bool {
			id, _ := e.ikeChild()
			return id != "" && id != ike0
		})
		// The reason goes with the next successful child SA (a rekey, 20 s away).
		restore(t)
	})
	e.run(t, "peer not responding: reported; the first answer after the fix brings it up", func(t *testing.T) {
		e.NFT("p", `table ip tn_drop {
  chain in { type filter hook input priority -10; policy accept;
    iifname "wan0" udp dport { 500, 4500 } drop
  }
}`)
		if out, err := e.Swanctl("g", "--terminate", "--ike", "t1"); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		// Reported from charon's second retransmission of IKE_SA_INIT (about 11 s).
		var st v1alpha1.TunnelState
		deadline := time.Now().Add(netns.Scaled(3 * time.Minute))
		for time.Now().Before(deadline) {
			if st, _ = read(); st.Reason == downcause.PeerNotResponding {
				break
			}
			time.Sleep(time.Second)
		}
		if st.Reason != downcause.PeerNotResponding {
			t.Fatalf("status %+v, want %s", st, downcause.PeerNotResponding)
		}
		// The client answers again 10 s later.
		e.sleep(10 * time.Second)
		fixed := time.Now()
		e.Must(e.NS("p"), "nft", "delete", "table", "ip", "tn_drop")
		e.Eventually("Up after the client answers", func() bool { st, ok := read(); return ok && st.State == "Up" })
		// Bounded by eventually's limit: the next retransmission (at most 20 s away) gets
		// through, or the next attempt after charon gives up.
		figure(t.Logf, "unanswered peer: up %.1fs after it answers again", time.Since(fixed).Seconds())
		restore(t)
	})
}

// roleCtl stops and starts one of the gateway's roles: init-nat, charon, or the status
// agent with its loader.
func (e *env) roleCtl(role string) (stop, start func()) {
	name := map[string]string{"init-nat": "init-nat", "charon": e.gwCharon(), "status": "status-agent"}[role]
	if e.kernel {
		name = map[string]string{"init-nat": render.ContainerInitNAT, "charon": render.ContainerStrongswan, "status": render.ContainerStatus}[role]
	}
	stop = func() { e.Stop(name, syscall.SIGTERM) }
	switch role {
	case "charon":
		start = func() { e.startCharon("g") }
	case "init-nat":
		start = func() { e.startAgent(name) }
	default:
		start = func() {
			if e.kernel {
				e.startContainer(name)
				return
			}
			e.Start(name, e.NS("g"), nil, e.statusArgs...)
		}
	}
	return stop, start
}

// clearPortRouting removes what init-nat installed: its routing prelude and its
// nftables table, whose guard would drop IKE leaving by the pod network (a pod whose
// init-nat has not run yet has neither).
func (e *env) clearPortRouting() {
	_, _ = e.Sh(e.NS("g"), "nft", "delete", "table", "ip", nat.DefaultTable)
	for i := 0; i < 10; i++ {
		if _, err := e.Sh(e.NS("g"), "ip", "rule", "del", "table", "100"); err != nil {
			break
		}
	}
	_, _ = e.Sh(e.NS("g"), "ip", "route", "flush", "table", "100")
	_, _ = e.Sh(e.NS("g"), "ip", "addr", "del", "100.64.7.1/32", "dev", "lo")
}

// localHosts lists the addresses the gateway's IKE SAs of t1 run from.
func (e *env) localHosts() []string {
	s, err := vici.Dial(e.Sock("g"))
	if err != nil {
		return nil
	}
	defer s.Close()
	sas, err := vici.ListSAs(context.Background(), s, "t1")
	if err != nil {
		return nil
	}
	var out []string
	for _, sa := range sas["t1"] {
		out = append(out, sa.LocalHost)
	}
	return out
}

// onPort: the tunnel is up, carries traffic, and its only IKE SA runs from the port.
func (e *env) onPort(read statusReader) bool {
	st, ok := read()
	if !ok || st.State != "Up" || !e.probe() {
		return false
	}
	h := e.localHosts()
	return len(h) == 1 && h[0] == portFixedIP
}

// startOrder: the gateway's pod also has a pod network (eth0, with the default route,
// masqueraded by the node), and the client accepts IKE from any address, so IKE that
// left before the port's policy routing exists would build an SA over the wrong path.
// init-nat started seconds after charon and the loader, and each role restarted alone:
// no IKE or ESP ever leaves by eth0, the SA runs from the port's address, traffic flows.
// An SA built over the pod network anyway (initiated by hand before init-nat ran) is
// ended and rebuilt on the port once the routing is there.
func (e *env) startOrder(t *testing.T, read statusReader) {
	e.Apply(netns.Topology{
		Links:  []netns.Link{{A: "g", ADev: "eth0", B: "r", BDev: "pod0"}},
		Addrs:  []netns.Addr{{Role: "g", Dev: "eth0", CIDR: "10.244.0.2/24"}, {Role: "r", Dev: "pod0", CIDR: "10.244.0.1/24"}},
		Routes: []netns.Route{{Role: "g", Dst: "default", Via: "10.244.0.1"}},
		Tables: []netns.Table{{Role: "r", Rules: `table ip tn_podnat {
  chain post { type nat hook postrouting priority srcnat; policy accept;
    oifname "wan0" ip saddr 10.244.0.0/24 masquerade
  }
}`}},
	})
	defer func() {
		_, _ = e.Sh(e.NS("g"), "ip", "link", "del", "eth0")
		_, _ = e.Sh(e.NS("r"), "nft", "delete", "table", "ip", "tn_podnat")
	}()
	anyPeer := defaultPeer()
	anyPeer.ike, anyPeer.esp, anyPeer.anyRemote = "aes256gcm16-prfsha384-x25519", "aes256gcm16-x25519", true
	e.configurePeerWith(anyPeer)
	stopCapture := e.Capture("pod-network", "g", "eth0", 128)

	e.run(t, "init-nat started seconds after charon and the loader", func(t *testing.T) {
		stopInit, startInit := e.roleCtl("init-nat")
		stopCharon, startCharon := e.roleCtl("charon")
		stopStatus, startStatus := e.roleCtl("status")
		stopStatus()
		stopCharon()
		stopInit()
		e.clearPortRouting()
		startCharon()
		startStatus()
		e.sleep(5 * time.Second)
		if h := e.localHosts(); len(h) != 0 {
			t.Errorf("IKE SAs before init-nat ran: from %v", h)
		}
		startInit()
		e.Eventually("up from the port's address once init-nat ran", func() bool { return e.onPort(read) })
		if !strings.Contains(e.statusAgentLog(), "waiting for the port's policy routing") {
			t.Errorf("the loader did not wait for the port's routing:\n%s", netns.Tail(e.statusAgentLog(), 30))
		}
	})
	for _, role := range []string{"init-nat", "charon", "status"} {
		e.run(t, role+" restarted alone", func(t *testing.T) {
			stop, start := e.roleCtl(role)
			stop()
			e.sleep(2 * time.Second)
			start()
			e.sleep(2 * time.Second)
			e.Eventually("up from the port's address after restarting "+role, func() bool { return e.onPort(read) })
		})
	}
	pcap := stopCapture()
	if ike := readPcap(t, pcap, "udp port 500 or udp port 4500"); len(ike) != 0 {
		t.Errorf("IKE or ESP left by the pod network:\n%s", strings.Join(netns.First(ike, 10), "\n"))
	}

	e.run(t, "an SA built over the pod network is rebuilt on the port", func(t *testing.T) {
		stopInit, startInit := e.roleCtl("init-nat")
		stopStatus, startStatus := e.roleCtl("status")
		stopStatus()
		stopInit()
		e.clearPortRouting()
		if out, err := e.Swanctl("g", "--terminate", "--ike", "t1"); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		// charon initiates without the loader (as a restart by charon itself would). The
		// IKE SA comes up over the pod network; its child SA cannot be installed without
		// .1 of the service CIDR (that is why the loader waits for it too).
		out, _ := e.Swanctl("g", "--initiate", "--child", "t1", "--timeout", "20")
		if h := e.localHosts(); len(h) != 1 || h[0] != "10.244.0.2" {
			t.Fatalf("the IKE SA runs from %v, want the pod network's 10.244.0.2\n%s", h, out)
		}
		startInit()
		startStatus()
		e.Eventually("rebuilt from the port's address", func() bool { return e.onPort(read) })
		if !strings.Contains(e.statusAgentLog(), "not from the port's address") {
			t.Errorf("the loader did not end the wrong-path SA:\n%s", netns.Tail(e.statusAgentLog(), 30))
		}
	})
	e.configurePeerWith(peerOpts{ike: anyPeer.ike, esp: anyPeer.esp, remoteTS: serviceCIDR, psk: psk})
}
