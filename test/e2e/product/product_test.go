// Package product is the end-to-end test of the whole product on this machine: a real
// two-node cluster (hack/node) pulling the release's images from the world's registry, the
// operator installed from the released chart (helm install oci://... --version) against
// the OpenStack simulator, the packet fabric that makes the simulator's
// networking carry traffic, a client site with its own hand-configured strongSwan, and
// hosts in the service clusters (internal/testinfra/world). It applies the examples and checks what
// a client and the platform would: the tunnel comes up from the applied IPsecGateway and
// carries traffic both ways, survives what a cluster does to pods and nodes, fails
// closed, and leaves nothing behind.
//
// It needs root and the packages hack/install-deps.sh and hack/node/up.sh install; it
// skips without them, and fails instead under BNERD_REQUIRE_DATAPLANE=1. Durations are
// logged as FIGURE lines (and appended to $BNERD_PRODUCT_FIGURES when set); nothing here
// asserts a duration.
package product

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/nat"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/operatorconfig"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
	"bnerd.net/vpn-operator/internal/testinfra/world"
)

type env struct {
	t    testing.TB
	ctx  context.Context
	w    *world.World
	site *world.Site
	psk  string
}

func (e *env) figure(name string, d time.Duration) {
	e.t.Logf("FIGURE %s: %.2fs", name, d.Seconds())
	if f := os.Getenv("BNERD_PRODUCT_FIGURES"); f != "" {
		fh, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintf(fh, "%s\t%.2f\n", name, d.Seconds())
			fh.Close()
		}
	}
}

// waitFor polls cond every 100ms and returns how long it took; the limit only bounds a
// hung test.
func (e *env) waitFor(what string, limit time.Duration, cond func() bool) time.Duration {
	e.t.Helper()
	t0 := time.Now()
	for !cond() {
		if time.Since(t0) > limit {
			e.t.Fatalf("never happened within %s: %s", limit, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(t0)
}

func (e *env) gateway() *v1alpha1.IPsecGateway {
	e.t.Helper()
	gw, err := e.w.Gateway(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return gw
}

// answers: one HTTPS request from ns to url got the expected backend's answer.
func (e *env) answers(ns, url, want string) bool {
	body, err := world.Get(e.ctx, ns, url, 1500*time.Millisecond)
	return err == nil && strings.HasPrefix(body, want)
}

func (e *env) portalURL() string {
	return "https://" + world.VIPOf(e.gateway().Status.Exposures, "portal") + ":443/"
}

func (e *env) reverseURL() string {
	return "https://" + world.VIPOf(e.gateway().Status.ReverseExposures, "erp") + ":" + world.SiteHostPort + "/"
}

func (e *env) portalAnswers() bool {
	return e.answers(world.SiteHostNamespace, e.portalURL(), world.ServiceHostBody)
}

var reIKESPIs = regexp.MustCompile(`platform: #\d+, ESTABLISHED, IKEv2, ([0-9a-f]+_i\*? [0-9a-f]+_r\*?)`)

// clientIKE returns the SPIs of the client's established IKE SA ("" when none): the same
// SPIs mean the same IKE SA.
func (e *env) clientIKE() string {
	out, err := e.site.Swanctl("--list-sas", "--ike", "platform")
	if err != nil {
		return ""
	}
	if m := reIKESPIs.FindStringSubmatch(out); m != nil && strings.Contains(out, "INSTALLED") {
		return m[1]
	}
	return ""
}

func requirements(t testing.TB) {
	testenv.SkipUnit(t, "the product e2e brings up the node world (a control plane, kubelets, root)")
	if why := world.Requirements(); why != "" {
		testenv.SkipDataplane(t, why)
	}
	for _, b := range []string{"charon-systemd", "swanctl", "tcpdump", "ctr"} {
		if _, err := exec.LookPath(b); err != nil {
			testenv.SkipDataplane(t, "the product e2e needs "+b+" (hack/install-deps.sh, hack/node/up.sh)")
		}
	}
}

func TestProduct(t *testing.T) {
	requirements(t)
	ctrllog.SetLogger(logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	t0 := time.Now()
	w := bringUp(t, ctx)
	for _, p := range w.Timings {
		t.Logf("world phase %-70s %6.1fs", p.Phase, p.Duration.Seconds())
	}
	e := &env{t: t, ctx: ctx, w: w}
	e.figure("world up (node world, release pushed, simulator, fabric, chart)", time.Since(t0))
	e.prepare()

	t.Run("applied gateway brings the tunnel up and exposures answer", e.applyGateway)
	t.Run("the release: operator and gateway pods run the images pulled from the world's registry", e.releasePulled)
	t.Run("gateway pod hardened on the node: seccomp, non-root agents, token where needed", e.podHardened)
	t.Run("cluster link: portal in the service cluster and the reverse exposure answer", e.applyLink)
	t.Run("cluster link in Aggregate mode: one route to the pool, the reverse exposure answers through the gateway cluster's router", e.aggregateLink)
	t.Run("security group enforced: a removed rule drops, the operator restores it", e.securityGroup)
	t.Run("cluster link back to a route per gateway, under traffic", e.perGatewayLink)
	t.Run("exposure added live answers without a pod restart or a new IKE SA", e.exposureAddedLive)
	t.Run("charon killed: no plaintext on the public segment", e.charonKilled)
	t.Run("containers start in any order and restart alone; IKE only on NIC2", e.startOrders)
	t.Run("gateway pod deleted: traffic comes back", e.podDeleted)
	t.Run("node partitioned: the gateway moves, the old pod loses the port and carries nothing, the healed kubelet stops it", e.nodePartitioned)
	t.Run("node powered off with the operator's leader on it: the gateway moves to the other node before NotReady and traffic comes back", e.nodeLost)
	t.Run("gateway and link deleted: nothing is left", e.deleted)
}

func (e *env) applyGateway(t *testing.T) {
	e.t = t
	start := time.Now()
	if err := e.w.Apply(e.ctx, "examples/ipsecgateway.yaml", &v1alpha1.IPsecGateway{}, world.TenantNamespace); err != nil {
		t.Fatal(err)
	}
	// The client's IT configures its side from what the platform hands over: the floating
	// IP and the service CIDR, once allocated.
	var gw *v1alpha1.IPsecGateway
	e.waitFor("floating IP and service CIDR allocated", 2*time.Minute, func() bool {
		gw = e.gateway()
		return gw.Status.FloatingIP != "" && gw.Status.ServiceCIDR != ""
	})
	if err := e.site.Configure(gw.Status.FloatingIP, gw.Status.ServiceCIDR, e.psk); err != nil {
		t.Fatal(err)
	}
	e.waitFor("tunnelsReady 1/1", 3*time.Minute, func() bool { return e.gateway().Status.TunnelsReady == "1/1" })
	e.figure("apply -> tunnel up (tunnelsReady 1/1)", time.Since(start))
	gw = e.gateway()
	dir := "https://" + world.VIPOf(gw.Status.Exposures, "directory") + ":636/"
	e.waitFor("directory exposure answers", 2*time.Minute, func() bool { return e.answers(world.SiteHostNamespace, dir, world.DirectoryBody) })
	e.figure("apply -> exposure answering (client host -> directory VIP)", time.Since(start))

	// The status agent can report the tunnel before the kubelet reports the pod Running.
	var pod *corev1.Pod
	e.waitFor("the gateway pod Running", time.Minute, func() bool {
		pod, _ = e.w.GatewayPod(e.ctx, world.TenantNamespace, "acme")
		return pod != nil
	})
	if pod.Spec.NodeName != gw.Status.NodeName {
		t.Errorf("pod on %s, gateway pinned to %s", pod.Spec.NodeName, gw.Status.NodeName)
	}
	net1, err := e.w.InPod(pod, render.ContainerExporter, "ip", "-o", "link", "show", render.NIC2Interface)
	if err != nil || !strings.Contains(strings.ToLower(net1), strings.ToLower(gw.Status.PortMACAddress)) {
		t.Errorf("net1 in the pod does not carry the port's MAC %s: %v %s", gw.Status.PortMACAddress, err, net1)
	}
	for _, c := range pod.Status.ContainerStatuses {
		if !c.Ready || c.RestartCount != 0 {
			t.Errorf("container %s ready=%v restarts=%d", c.Name, c.Ready, c.RestartCount)
		}
	}
	// The gateway's IKE SA runs from the port's address, NAT'd to the floating IP.
	out, err := e.w.KubectlRun(e.ctx, "exec", "-n", world.TenantNamespace, pod.Name, "-c", render.ContainerStrongswan, "--",
		"swanctl", "--list-sas", "--uri", "unix://"+render.RunMountPath+"/charon.vici")
	if err != nil || !strings.Contains(out, "@ "+gw.Status.PortFixedIP+"[4500]") {
		t.Errorf("the gateway's IKE SA does not run from the port's address %s: %v\n%s", gw.Status.PortFixedIP, err, out)
	}
}

func (e *env) applyLink(t *testing.T) {
	e.t = t
	start := time.Now()
	link := &v1alpha1.ClusterLink{}
	if err := e.w.Apply(e.ctx, "examples/clusterlink.yaml", link, ""); err != nil {
		t.Fatal(err)
	}
	e.waitFor("portal in the service cluster answers the client host", 2*time.Minute, e.portalAnswers)
	e.figure("cluster link apply -> portal answering", time.Since(start))
	e.waitFor("the reverse exposure answers the service cluster", time.Minute, func() bool {
		return e.answers(world.ServiceHostNamespace, e.reverseURL(), world.SiteHostBody)
	})
	e.figure("cluster link apply -> reverse exposure answering", time.Since(start))
}

// securityGroup removes the operator's rule admitting the service cluster to the reverse
// exposure, out of band: the fabric enforces the group on the port, so the request must
// now fail; the operator puts the rule back on its next reconcile, and it answers again.
func (e *env) securityGroup(t *testing.T) {
	e.t = t
	r, err := e.w.CloudReader(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := r.Read(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ruleID string
	for _, g := range snap.SecurityGroups {
		if !openstack.HasTags(g.Tags, openstack.TagManaged) {
			continue
		}
		page, err := rules.List(r.Network(), rules.ListOpts{SecGroupID: g.ID, Direction: "ingress", Protocol: "tcp", RemoteIPPrefix: "10.251.0.0/16"}).AllPages(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := rules.ExtractRules(page)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) == 1 && rs[0].PortRangeMin == 8443 {
			ruleID = rs[0].ID
		}
	}
	if ruleID == "" {
		t.Fatal("no operator rule admitting 10.251.0.0/16 to tcp 8443")
	}
	rev := e.reverseURL()
	if !e.answers(world.ServiceHostNamespace, rev, world.SiteHostBody) {
		t.Fatal("the reverse exposure does not answer before the rule is removed")
	}
	if err := rules.Delete(e.ctx, r.Network(), ruleID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	fails := 0
	e.waitFor("the reverse exposure dropped without its rule", time.Minute, func() bool {
		if e.answers(world.ServiceHostNamespace, rev, world.SiteHostBody) {
			fails = 0
		} else {
			fails++
		}
		return fails >= 3
	})
	e.figure("security group rule removed -> dropped by the fabric", time.Since(start))
	// Any change to the gateway starts a reconcile; the resync would too, later.
	gw := e.gateway()
	if gw.Annotations == nil {
		gw.Annotations = map[string]string{}
	}
	gw.Annotations["e2e.bnerd.net/poke"] = time.Now().Format(time.RFC3339Nano)
	if err := e.w.Kube.Update(e.ctx, gw); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	e.waitFor("the operator restored the rule and the reverse exposure answers", 2*time.Minute, func() bool {
		return e.answers(world.ServiceHostNamespace, rev, world.SiteHostBody)
	})
	e.figure("reconcile -> security group rule restored, answering", time.Since(start))
}

// exposureRuns is how many exposures are added one after another, each timed from the
// spec update to its first answer.
const exposureRuns = 10

func (e *env) exposureAddedLive(t *testing.T) {
	e.t = t
	before, err := e.w.GatewayPod(e.ctx, world.TenantNamespace, "acme")
	if err != nil || before == nil {
		t.Fatalf("no gateway pod: %v", err)
	}
	ike := e.clientIKE()
	if ike == "" {
		t.Fatal("no established client IKE SA to compare with")
	}
	// Each run adds one exposure (its own target port and backend) to the live gateway
	// and times the update to the first answer through the tunnel (firstAnswer).
	var runs []time.Duration
	for i := range exposureRuns {
		port := 9443 + i
		body := fmt.Sprintf("svc01 wiki %d", i)
		srv, err := world.ServeHTTPS(world.ServiceHostNamespace, fmt.Sprintf("%s:%d", world.ServiceHostAddress, port), body)
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		name := fmt.Sprintf("wiki-%d", i)
		var gw *v1alpha1.IPsecGateway
		var start time.Time
		for range 10 {
			gw = e.gateway()
			gw.Spec.Exposures = append(gw.Spec.Exposures, v1alpha1.Exposure{Name: name, Target: v1alpha1.Target{
				Address: world.ServiceHostAddress, Ports: []v1alpha1.PortSpec{{Port: int32(port), Protocol: v1alpha1.ProtocolTCP}}}})
			start = time.Now()
			if err = e.w.Kube.Update(e.ctx, gw); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		d, err := e.firstAnswer(start, func() string {
			if v := world.VIPOf(e.gateway().Status.Exposures, name); v != "" {
				return fmt.Sprintf("https://%s:%d/", v, port)
			}
			return ""
		}, body)
		if err != nil {
			t.Fatalf("exposure %s: %v", name, err)
		}
		runs = append(runs, d)
		e.figure("exposure added -> answering", d)
	}
	slices.Sort(runs)
	t.Logf("FIGURE exposure added -> answering over %d runs: median %.2fs, max %.2fs", len(runs), ((runs[len(runs)/2-1] + runs[len(runs)/2]) / 2).Seconds(), runs[len(runs)-1].Seconds())
	after, _ := e.w.GatewayPod(e.ctx, world.TenantNamespace, "acme")
	if after == nil || after.UID != before.UID {
		t.Errorf("the gateway pod was replaced")
	} else {
		for _, c := range after.Status.ContainerStatuses {
			if c.RestartCount != 0 {
				t.Errorf("container %s restarted (%d)", c.Name, c.RestartCount)
			}
		}
	}
	if got := e.clientIKE(); got != ike {
		t.Errorf("the IKE SA changed: %q -> %q", ike, got)
	}
}

// firstAnswer starts a new HTTPS request from the client host every 50 ms, each on its
// own, to the URL url returns ("" while it is not known yet), and returns how long after
// start the first one answered with want. A request sent before the gateway was ready is
// lost (its SYN dropped) and would wait for TCP's retransmission (1 s); the requests
// after it do not wait for it, so the figure is the gateway's, within 50 ms.
func (e *env) firstAnswer(start time.Time, url func() string, want string) (time.Duration, error) {
	answered := make(chan time.Duration, 1)
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if u := url(); u != "" {
			go func() {
				if got, err := world.Get(ctx, world.SiteHostNamespace, u, 2*time.Second); err == nil && strings.HasPrefix(got, want) {
					select {
					case answered <- time.Since(start):
					default:
					}
				}
			}()
		}
		select {
		case d := <-answered:
			return d, nil
		case <-ctx.Done():
			return 0, fmt.Errorf("no answer from %s within a minute", url())
		case <-tick.C:
		}
	}
}

// backAgain measures an outage that begins after start: it sends the client's request to
// u (the portal) every 50 ms without waiting for answers (each with a 2 s timeout) and
// returns the time from start to the answer of the first request sent after one that
// failed. Requests answered before the outage began (the old pod still serving) do not
// count. It runs in its own goroutine, so it reports by its result, never through t.
func backAgain(ctx context.Context, u string, start time.Time) (time.Duration, error) {
	return backAgainFrom(ctx, world.SiteHostNamespace, u, world.ServiceHostBody, start)
}

// probeBack runs backAgainFrom in the background from now on; the returned func waits for
// its result.
func probeBack(ctx context.Context, ns, u, want string, start time.Time) func() (time.Duration, error) {
	var back time.Duration
	var err error
	done := make(chan struct{})
	go func() {
		back, err = backAgainFrom(ctx, ns, u, want, start)
		close(done)
	}()
	return func() (time.Duration, error) { <-done; return back, err }
}

// backAgainFrom is backAgain from the namespace ns, answered with want.
func backAgainFrom(ctx context.Context, ns, u, want string, start time.Time) (time.Duration, error) {
	type probe struct {
		done, ok bool
		answer   time.Duration
	}
	var mu sync.Mutex
	var probes []*probe
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		p := &probe{}
		mu.Lock()
		probes = append(probes, p)
		mu.Unlock()
		go func() {
			got, err := world.Get(ctx, ns, u, 2*time.Second)
			mu.Lock()
			p.done, p.ok, p.answer = true, err == nil && strings.HasPrefix(got, want), time.Since(start)
			mu.Unlock()
		}()
		mu.Lock()
		failed := false
		for _, q := range probes {
			if !q.done {
				break // in order of sending: wait for the earlier ones
			}
			if !q.ok {
				failed = true
			} else if failed {
				mu.Unlock()
				return q.answer, nil
			}
		}
		mu.Unlock()
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("no outage followed by an answer from %s within a minute", u)
		case <-tick.C:
		}
	}
}

// traffic keeps requests running from the service cluster to the reverse exposure (the
// gateway DNATs them towards the client's subnet: a leak would carry that address in the
// clear) and from the client to the portal, until stop.
func (e *env) traffic() (stop func() (ok, failed int64)) {
	return e.requests(
		request{world.ServiceHostNamespace, e.reverseURL(), world.SiteHostBody},
		request{world.SiteHostNamespace, e.portalURL(), world.ServiceHostBody})
}

// request is one URL asked from a namespace, and the body that means it answered.
type request struct{ ns, url, want string }

// requests repeats each request every 100 ms, counting answers and failures, until stop.
func (e *env) requests(jobs ...request) (stop func() (ok, failed int64)) {
	var ok, failed atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, job := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if e.answers(job.ns, job.url, job.want) {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	return func() (int64, int64) { close(done); wg.Wait(); return ok.Load(), failed.Load() }
}

// plaintext: packets to or from the client's subnet that are not IKE/ESP-in-UDP.
const plaintext = "ip and net " + world.SiteLAN + " and not udp port 500 and not udp port 4500"

func (e *env) publicCapture(name string) *world.Capture {
	e.t.Helper()
	br, ok := e.w.Fabric.Bridge(world.ExternalNetwork)
	if !ok {
		e.t.Fatal("no bridge for the public network")
	}
	c, err := e.w.StartCapture(name, e.w.Fabric.FabricNamespace(), br)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// unguard freezes the pod's init-nat (so it cannot repair its table) and deletes the
// fail-closed guard's drop rules for the tunnel interfaces (one, or a comma-separated
// list as init-nat takes it): the negative controls' pod
// without its guard. The returned func thaws init-nat, which puts the rules back.
func (e *env) unguard(pod *corev1.Pod, tunnelInterface string) (resume func()) {
	t := e.t
	t.Helper()
	node, _ := e.w.Node(pod.Spec.NodeName)
	initNAT := world.ContainerID(pod, render.ContainerInitNAT)
	if _, err := world.Exec("", "ctr", "-a", node.Containerd, "-n", "k8s.io", "tasks", "pause", initNAT); err != nil {
		t.Fatal(err)
	}
	resume = func() {
		if _, err := world.Exec("", "ctr", "-a", node.Containerd, "-n", "k8s.io", "tasks", "resume", initNAT); err != nil {
			t.Errorf("resuming init-nat: %v", err)
		}
	}
	rules, err := e.w.InPod(pod, render.ContainerInitNAT, "nft", "-a", "list", "table", "ip", nat.DefaultTable)
	if err != nil {
		resume()
		t.Fatal(err)
	}
	chain := ""
	removed := 0
	for _, l := range strings.Split(rules, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "chain ") {
			chain = strings.Fields(l)[1]
		}
		if i := strings.Index(l, "# handle "); i > 0 && strings.Contains(l, "oifname != "+nat.TunnelMatch(tunnelInterface)) {
			if _, err := e.w.InPod(pod, render.ContainerInitNAT, "nft", "delete", "rule", "ip", nat.DefaultTable, chain, "handle", strings.TrimSpace(l[i+len("# handle "):])); err != nil {
				resume()
				t.Fatal(err)
			}
			removed++
		}
	}
	if removed == 0 {
		resume()
		t.Fatalf("no guard rule found to remove:\n%s", rules)
	}
	return resume
}

func (e *env) charonKilled(t *testing.T) {
	e.t = t
	pod, err := e.w.GatewayPod(e.ctx, world.TenantNamespace, "acme")
	if err != nil || pod == nil {
		t.Fatalf("no gateway pod: %v", err)
	}
	restarts := func() int32 {
		p, _ := e.w.GatewayPod(e.ctx, world.TenantNamespace, "acme")
		if p == nil {
			return -1
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.Name == render.ContainerStrongswan {
				return c.RestartCount
			}
		}
		return -1
	}
	backUp := func() time.Duration {
		return e.waitFor("tunnel and traffic back", 3*time.Minute, func() bool {
			return e.gateway().Status.TunnelsReady == "1/1" && e.portalAnswers() &&
				e.answers(world.ServiceHostNamespace, e.reverseURL(), world.SiteHostBody)
		})
	}

	// Negative control: the same kill with the guard's drop rules removed (init-nat frozen
	// so it cannot repair them) must put plaintext on the public segment, or the capture
	// below would prove nothing.
	t.Run("negative control: without the guard the capture sees plaintext", func(t *testing.T) {
		e.t = t
		defer e.unguard(pod, render.TunnelInterface)()
		cap := e.publicCapture("charon-kill-unguarded")
		stop := e.traffic()
		time.Sleep(time.Second)
		if err := e.w.KillContainer(pod, render.ContainerStrongswan); err != nil {
			t.Fatal(err)
		}
		// The traffic in flight leaks only now and then (a segment of a connection open at
		// the kill; one packet in a passing run, none in a failing one), so the pod also
		// opens connections to the client's host from its port's address, which the
		// guard's output rule covers like forwarded traffic: without it they leave in the
		// clear through the port and the router.
		portIP := e.gateway().Status.PortFixedIP
		clientHost := "https://" + world.SiteHostAddress + ":" + world.SiteHostPort + "/"
		var leaked []string
		e.waitFor("plaintext on the public segment without the guard", time.Minute, func() bool {
			_, _ = e.w.InPod(pod, render.ContainerExporter, "curl", "-sk", "--max-time", "1", "--interface", portIP, clientHost)
			leaked, _ = cap.Packets(plaintext)
			return len(leaked) > 0
		})
		stop()
		cap.Stop()
		t.Logf("without the guard, %d plaintext packets reached the public segment, e.g. %s", len(leaked), leaked[0])
	})
	e.t = t
	e.waitFor("charon restarted after the control", 2*time.Minute, func() bool { return restarts() >= 1 })
	backUp()

	pod, _ = e.w.GatewayPod(e.ctx, world.TenantNamespace, "acme")
	before := restarts()
	cap := e.publicCapture("charon-kill-guarded")
	stop := e.traffic()
	time.Sleep(time.Second)
	start := time.Now()
	if err := e.w.KillContainer(pod, render.ContainerStrongswan); err != nil {
		t.Fatal(err)
	}
	e.waitFor("charon restarted", 2*time.Minute, func() bool { return restarts() > before })
	backUp()
	e.figure("charon killed -> traffic back", time.Since(start))
	time.Sleep(time.Second)
	ok, failed := stop()
	cap.Stop()
	leaked, err := cap.Packets(plaintext)
	if err != nil {
		t.Fatal(err)
	}
	if len(leaked) > 0 {
		t.Errorf("%d plaintext packets to or from the client's subnet on the public segment while charon was down, e.g. %s", len(leaked), leaked[0])
	}
	all, _ := cap.Packets("ip")
	t.Logf("guarded: %d requests answered, %d not while charon was down; %d packets captured, 0 plaintext", ok, failed, len(all))
	if failed == 0 {
		t.Errorf("no request failed while charon was down: the kill did not interrupt anything, so the capture proves nothing")
	}
}

// startOrders starts the IPsec gateway's real rendered pod with its containers delayed
// into every order and restarts each container alone (startOrdersOf).
func (e *env) startOrders(t *testing.T) {
	e.startOrdersOf(t, orderedGateway{
		name:       "acme",
		containers: []string{render.ContainerInitNAT, render.ContainerStrongswan, render.ContainerStatus},
		wire:       "udp port 500 or udp port 4500 or ip proto 50",
		working:    func() bool { return e.gateway().Status.TunnelsReady == "1/1" && e.portalAnswers() },
	})
}

// orderedGateway is a gateway whose containers startOrdersOf starts in every order.
type orderedGateway struct {
	name string
	// containers are started in every order; each, and the exporter, also restarts alone.
	containers []string
	// wire matches the tunnel's own packets (pcap filter), which never belong on the pod
	// network, only on the port's interface.
	wire string
	// working reports the gateway's tunnel up and carrying the client's traffic.
	working func() bool
	// figurePrefix starts the figures' names.
	figurePrefix string
}

// startOrdersOf starts the real rendered pod with its containers delayed into every order
// and restarts each container alone: the tunnel's packets must never appear on the pod
// network, and the tunnel must come up and carry traffic each time. The operator is
// scaled down meanwhile, so the test's delays stay in the Deployment; the original spec
// is restored after.
func (e *env) startOrdersOf(t *testing.T, g orderedGateway) {
	e.t = t
	kubectl := func(args ...string) {
		t.Helper()
		if out, err := e.w.KubectlRun(e.ctx, args...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	key := client.ObjectKey{Namespace: world.TenantNamespace, Name: render.DeploymentName(g.name)}
	// Runs last, after the gateway's own template is back and the operator scaled up
	// again (the deferred calls below): the steps after this one must find the pod of
	// the restored template, not the test's last pod still running until the rollout
	// replaces it (a pod-delete step once took that pod and found it gone 0.1 s later).
	defer func() {
		e.t = t
		e.waitFor("the gateway's own template rolled out and its tunnel working", 3*time.Minute, func() bool {
			var d appsv1.Deployment
			if e.w.Kube.Get(e.ctx, key, &d) != nil {
				return false
			}
			st := d.Status
			return st.ObservedGeneration >= d.Generation && st.Replicas == 1 && st.UpdatedReplicas == 1 && st.ReadyReplicas == 1 && g.working()
		})
	}()
	var op appsv1.Deployment
	if err := e.w.Kube.Get(e.ctx, client.ObjectKey{Namespace: world.OperatorNamespace, Name: world.ReleaseName}, &op); err != nil || op.Spec.Replicas == nil {
		t.Fatalf("the operator's Deployment: %v", err)
	}
	kubectl("scale", "-n", world.OperatorNamespace, "deployment/"+world.ReleaseName, "--replicas=0")
	defer func() {
		e.t = t
		kubectl("scale", "-n", world.OperatorNamespace, "deployment/"+world.ReleaseName, fmt.Sprintf("--replicas=%d", *op.Spec.Replicas))
	}()
	e.waitFor("operator stopped", time.Minute, func() bool {
		var pods corev1.PodList
		_ = e.w.Kube.List(e.ctx, &pods, client.InNamespace(world.OperatorNamespace))
		return len(pods.Items) == 0
	})
	var orig appsv1.Deployment
	if err := e.w.Kube.Get(e.ctx, key, &orig); err != nil {
		t.Fatal(err)
	}
	defer func() {
		e.t = t
		e.setTemplate(key, orig.Spec.Template)
	}()
	cur, _ := e.w.GatewayPod(e.ctx, world.TenantNamespace, g.name)
	if cur == nil {
		t.Fatal("no gateway pod")
	}
	node, _ := e.w.Node(cur.Spec.NodeName)
	// The operator binds gateway pods to their node; while it is scaled down the test pins
	// them itself (nodeName). Safe here: the Deployment's Recreate rollout creates the new
	// pod only once the old one is gone.
	pinned := func(tmpl corev1.PodTemplateSpec) corev1.PodTemplateSpec {
		tmpl.Spec.NodeName = node.Name
		return tmpl
	}

	// ikeOnPodNetwork captures the node's pod bridge while f runs and returns the
	// tunnel's packets seen there.
	ikeOnPodNetwork := func(name string, f func()) []string {
		c, err := e.w.StartCapture(name, node.Namespace, "bn-cni0")
		if err != nil {
			t.Fatal(err)
		}
		f()
		c.Stop()
		pk, err := c.Packets(g.wire)
		if err != nil {
			t.Fatal(err)
		}
		return pk
	}
	working := func() time.Duration {
		return e.waitFor("tunnel up and traffic through it", 3*time.Minute, func() bool {
			p, _ := e.w.GatewayPod(e.ctx, world.TenantNamespace, g.name)
			ready := p != nil
			if p != nil {
				for _, c := range p.Status.ContainerStatuses {
					ready = ready && c.Ready
				}
			}
			return ready && g.working()
		})
	}

	for _, perm := range permutations(g.containers) {
		name := strings.Join(perm, " > ")
		t.Run("start order "+name, func(t *testing.T) {
			e.t = t
			old, _ := e.w.GatewayPod(e.ctx, world.TenantNamespace, g.name)
			if old == nil {
				t.Fatal("no gateway pod")
			}
			template := pinned(*orig.Spec.Template.DeepCopy())
			for i, cname := range perm {
				for j := range template.Spec.Containers {
					c := &template.Spec.Containers[j]
					if c.Name == cname {
						// The image's entrypoint, started i*4 seconds late.
						c.Command = []string{"/bin/sh", "-c", fmt.Sprintf("sleep %d; exec /usr/local/bin/vpn-gateway-agent \"$@\"", i*4), "sh"}
					}
				}
			}
			var took time.Duration
			pk := ikeOnPodNetwork("order-"+strings.ReplaceAll(name, " > ", "-"), func() {
				start := time.Now()
				e.setTemplate(key, template)
				e.waitFor("the old pod replaced", 2*time.Minute, func() bool {
					p, _ := e.w.GatewayPod(e.ctx, world.TenantNamespace, g.name)
					return p != nil && p.UID != old.UID
				})
				working()
				took = time.Since(start)
			})
			if len(pk) > 0 {
				t.Errorf("%d tunnel packets on the pod network, e.g. %s", len(pk), pk[0])
			}
			e.figure(g.figurePrefix+"start order "+name+" (4s apart) -> traffic", took)
		})
	}
	e.t = t
	// Each container restarted alone, in the original pod.
	e.setTemplate(key, pinned(*orig.Spec.Template.DeepCopy()))
	e.waitFor("the original pod back", 2*time.Minute, func() bool {
		p, _ := e.w.GatewayPod(e.ctx, world.TenantNamespace, g.name)
		return p != nil && p.Spec.Containers[0].Command == nil
	})
	working()
	for _, cname := range append(append([]string(nil), g.containers...), render.ContainerExporter) {
		t.Run("restart "+cname+" alone", func(t *testing.T) {
			e.t = t
			pod, _ := e.w.GatewayPod(e.ctx, world.TenantNamespace, g.name)
			if pod == nil {
				t.Fatal("no gateway pod")
			}
			count := func(p *corev1.Pod) int32 {
				for _, c := range p.Status.ContainerStatuses {
					if c.Name == cname {
						return c.RestartCount
					}
				}
				return -1
			}
			before := count(pod)
			var took time.Duration
			pk := ikeOnPodNetwork("restart-"+cname, func() {
				start := time.Now()
				if err := e.w.KillContainer(pod, cname); err != nil {
					t.Fatal(err)
				}
				e.waitFor(cname+" restarted", 2*time.Minute, func() bool {
					p, _ := e.w.GatewayPod(e.ctx, world.TenantNamespace, g.name)
					return p != nil && p.UID == pod.UID && count(p) > before
				})
				working()
				took = time.Since(start)
			})
			if len(pk) > 0 {
				t.Errorf("%d tunnel packets on the pod network, e.g. %s", len(pk), pk[0])
			}
			e.figure(g.figurePrefix+"restart "+cname+" alone -> traffic", took)
		})
	}
}

// setTemplate replaces the Deployment's pod template (retrying on conflicts with the
// Deployment controller's status writes).
func (e *env) setTemplate(key client.ObjectKey, tmpl corev1.PodTemplateSpec) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var d appsv1.Deployment
		if err := e.w.Kube.Get(e.ctx, key, &d); err != nil {
			return err
		}
		d.Spec.Template = tmpl
		return e.w.Kube.Update(e.ctx, &d)
	})
	if err != nil {
		e.t.Fatalf("updating the gateway Deployment: %v", err)
	}
}

func permutations(s []string) [][]string {
	if len(s) <= 1 {
		return [][]string{append([]string(nil), s...)}
	}
	var out [][]string
	for i := range s {
		rest := append(append([]string(nil), s[:i]...), s[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]string{s[i]}, p...))
		}
	}
	return out
}

// podDeleteRuns is how many times podDeleted deletes the running pod (the goal
// is the figure in each of ten runs).
const podDeleteRuns = 10

// inService is how long podDeleted lets a converged pod run before it deletes it.
const inService = 3 * time.Second

// podDeleted deletes the gateway's running pod ten times in a row (each after it has been
// in service for a few seconds), then deletes a replacement again before it runs, then deletes the pod and restarts its node's kubelet
// at once; each time until a new pod carries the client's traffic. The operator binds a
// replacement only once the old pod has left the node, so no sandbox ever asks for the
// port's interface while another still holds it: not one FailedCreatePodSandBox on the
// gateway's pods over all of it (the race this replaced cost the kubelet's ten-second
// back-off). The durations are figures, not assertions.
func (e *env) podDeleted(t *testing.T) {
	e.t = t
	since := time.Now()
	converged := func() *corev1.Pod {
		var pod *corev1.Pod
		e.waitFor("operator back and the gateway converged", 2*time.Minute, func() bool {
			pod, _ = e.w.GatewayPod(e.ctx, world.TenantNamespace, "acme")
			return pod != nil && pod.Spec.Containers[0].Command == nil && e.gateway().Status.TunnelsReady == "1/1" && e.portalAnswers()
		})
		return pod
	}
	// backAfter waits for a new pod to carry the client's traffic and logs where the time
	// went: the old pod gone from the API (its kubelet done with it), a new pod bound, its
	// containers running.
	backAfter := func(name string, old *corev1.Pod, start time.Time) {
		var gone, bound, running time.Duration
		var back time.Duration
		var backErr error
		probed := make(chan struct{})
		u := e.portalURL()
		go func() { back, backErr = backAgain(e.ctx, u, start); close(probed) }()
		e.waitFor("a new pod carries traffic", 3*time.Minute, func() bool {
			at := time.Since(start)
			if gone == 0 && apierrors.IsNotFound(e.w.Kube.Get(e.ctx, client.ObjectKeyFromObject(old), &corev1.Pod{})) {
				gone = at
			}
			var pods corev1.PodList
			_ = e.w.Kube.List(e.ctx, &pods, client.InNamespace(world.TenantNamespace), client.MatchingLabels{render.LabelInstance: "acme", render.LabelName: render.AppName})
			for i := range pods.Items {
				p := &pods.Items[i]
				if p.UID == old.UID || p.DeletionTimestamp != nil {
					continue
				}
				if bound == 0 && p.Spec.NodeName != "" {
					bound = at
				}
				if running == 0 && p.Status.Phase == corev1.PodRunning {
					running = at
				}
			}
			p, _ := e.w.GatewayPod(e.ctx, world.TenantNamespace, "acme")
			return p != nil && p.UID != old.UID && e.portalAnswers()
		})
		<-probed
		if backErr != nil {
			t.Fatal(backErr)
		}
		t.Logf("%s: old pod gone %.2fs, new pod bound %.2fs, running %.2fs (polled), first answer %.2fs",
			name, gone.Seconds(), bound.Seconds(), running.Seconds(), back.Seconds())
		e.figure(name, back)
	}
	for i := 1; i <= podDeleteRuns; i++ {
		pod := converged()
		// A pod in service, not one that has just started: the kubelet's pod worker,
		// before it stops a pod, waits for a container listing newer than its last sync
		// of the pod (its relist runs every second), and a pod whose containers started
		// a moment ago was synced a moment ago. Deleted within that second, the old pod
		// finishes up to a second later (binding 0.6-1.8 s after the delete instead of
		// 0.4-0.7 s; docs/benchmarks.md). The two deletes below follow at once.
		time.Sleep(inService)
		start := time.Now()
		if err := e.w.Kube.Delete(e.ctx, pod); err != nil {
			t.Fatal(err)
		}
		backAfter(fmt.Sprintf("gateway pod deleted -> traffic back (run %d)", i), pod, start)
	}

	// Deleted again before the replacement runs: the third pod waits for both.
	pod := converged()
	start := time.Now()
	if err := e.w.Kube.Delete(e.ctx, pod); err != nil {
		t.Fatal(err)
	}
	var second *corev1.Pod
	e.waitFor("the replacement created", time.Minute, func() bool {
		var pods corev1.PodList
		_ = e.w.Kube.List(e.ctx, &pods, client.InNamespace(world.TenantNamespace), client.MatchingLabels{render.LabelInstance: "acme", render.LabelName: render.AppName})
		for i := range pods.Items {
			if p := &pods.Items[i]; p.UID != pod.UID && p.DeletionTimestamp == nil {
				second = p
				return true
			}
		}
		return false
	})
	if err := e.w.Kube.Delete(e.ctx, second); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	backAfter("gateway pod deleted, its replacement deleted before running -> traffic back", second, start)

	// Deleted while the node's kubelet restarts.
	pod = converged()
	start = time.Now()
	if err := e.w.Kube.Delete(e.ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := e.w.RestartKubelet(pod.Spec.NodeName); err != nil {
		t.Fatal(err)
	}
	backAfter("gateway pod deleted and its node's kubelet restarted -> traffic back", pod, start)

	var events corev1.EventList
	if err := e.w.Kube.List(e.ctx, &events, client.InNamespace(world.TenantNamespace)); err != nil {
		t.Fatal(err)
	}
	for _, ev := range events.Items {
		if ev.Reason == "FailedCreatePodSandBox" && ev.InvolvedObject.Kind == "Pod" && strings.HasPrefix(ev.InvolvedObject.Name, render.DeploymentName("acme")) &&
			(ev.LastTimestamp.After(since) || ev.EventTime.After(since)) {
			t.Errorf("pod %s: %s (%d times): a sandbox was set up while another held the port's interface", ev.InvolvedObject.Name, ev.Message, ev.Count)
		}
	}
}

// nodeLost powers the gateway's node off (kubelet and containers killed, its link down,
// the Node object left as it is) with the operator's leader on it: the standby on the
// other node takes the leader Lease once it runs out, and learns the failure from the
// gateway's liveness Lease going silent, not from NotReady (the node controller's default
// grace period, 50 s, as on a default cluster), so the gateway must have moved while the
// node was still Ready.
func (e *env) nodeLost(t *testing.T) {
	e.t = t
	from := e.gateway().Status.NodeName
	e.leaderOn(from)
	start := time.Now()
	if err := e.w.PowerOffNode(from); err != nil {
		t.Fatal(err)
	}
	var to string
	readyAtMove := false
	e.waitFor("the gateway moved to another node", 3*time.Minute, func() bool {
		to = e.gateway().Status.NodeName
		if to == "" || to == from {
			return false
		}
		var n corev1.Node
		readyAtMove = e.w.Kube.Get(e.ctx, client.ObjectKey{Name: from}, &n) == nil && nodeReady(&n)
		return true
	})
	e.figure("node powered off -> gateway pinned to another node", time.Since(start))
	if !readyAtMove {
		t.Errorf("node %s was no longer Ready when the gateway moved: the move did not come from the liveness Lease", from)
	}
	e.waitFor("traffic through the moved gateway", 5*time.Minute, func() bool {
		p, _ := e.w.GatewayPod(e.ctx, world.TenantNamespace, "acme")
		return p != nil && p.Spec.NodeName == to && e.portalAnswers()
	})
	e.figure("node powered off -> traffic back", time.Since(start))
	e.waitFor("the reverse exposure answers again", time.Minute, func() bool {
		return e.answers(world.ServiceHostNamespace, e.reverseURL(), world.SiteHostBody)
	})
}

// nodePartitioned cuts the gateway's node off the network while its kubelet and the
// gateway pod keep running: the operator moves the gateway on the liveness Lease's
// silence, and the Nova detach (the fence) takes the port's interface out of the old pod.
// A capture in the old pod's own network namespace, from before the cut until its kubelet
// stopped it after the heal, shows its packets to and from the client end before the
// traffic came back through the new pod, and none after: two pods never carry the tunnel
// at once. The heal waits for the node controller's NotReady, so the node's Ready again
// also ends its quarantine for the steps after.
func (e *env) nodePartitioned(t *testing.T) {
	e.t = t
	from := e.gateway().Status.NodeName
	e.leaderOn(e.otherNode(from))
	old, err := e.w.GatewayPod(e.ctx, world.TenantNamespace, "acme")
	if err != nil || old == nil || old.Spec.NodeName != from {
		t.Fatalf("the gateway's pod on %s: %v %v", from, old, err)
	}
	pid, err := e.w.PodPID(old, render.ContainerStrongswan)
	if err != nil {
		t.Fatal(err)
	}
	capture, err := e.w.StartCapture("partition-old-pod", "pid:"+pid, "any")
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			capture.Stop()
		}
	}()
	e.waitFor("tunnel traffic through the old pod, captured", 30*time.Second, func() bool {
		return e.portalAnswers()
	})
	// The client keeps sending through the tunnel all along (a request every 100 ms), so
	// the old pod would see the client's packets for as long as it has the port.
	url := e.portalURL()
	probing, stopProbing := context.WithCancel(e.ctx)
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		for probing.Err() == nil {
			_, _ = world.Get(probing, world.SiteHostNamespace, url, time.Second)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	defer func() { stopProbing(); <-probed }()
	start := time.Now()
	if err := e.w.PartitionNode(from); err != nil {
		t.Fatal(err)
	}
	healed := false
	defer func() {
		if !healed {
			_ = e.w.HealNode(from)
		}
	}()
	var to string
	e.waitFor("the gateway moved to another node", 3*time.Minute, func() bool {
		to = e.gateway().Status.NodeName
		return to != "" && to != from
	})
	e.figure("node partitioned -> gateway pinned to another node", time.Since(start))
	e.waitFor("traffic through the moved gateway", 3*time.Minute, func() bool {
		p, _ := e.w.GatewayPod(e.ctx, world.TenantNamespace, "acme")
		return p != nil && p.Spec.NodeName == to && e.portalAnswers()
	})
	back := time.Now()
	e.figure("node partitioned -> traffic back", back.Sub(start))
	// The fence: the old pod, still running on the cut-off node, has no port any more.
	links, err := world.Exec("", "nsenter", "-t", pid, "-n", "--", "ip", "-br", "link")
	if err != nil {
		t.Fatalf("the old pod's namespace: %v", err)
	}
	if strings.Contains(links, render.NIC2Interface) {
		t.Errorf("the old pod on the partitioned node still has %s after the move:\n%s", render.NIC2Interface, links)
	}
	e.waitFor("node "+from+" NotReady (the node controller's grace period)", 2*time.Minute, func() bool {
		var n corev1.Node
		return e.w.Kube.Get(e.ctx, client.ObjectKey{Name: from}, &n) == nil && !nodeReady(&n)
	})
	if err := e.w.HealNode(from); err != nil {
		t.Fatal(err)
	}
	healed = true
	e.waitFor("the healed kubelet stopped the old pod", 3*time.Minute, func() bool {
		_, err := e.w.PodPID(old, render.ContainerStrongswan)
		return err != nil
	})
	e.figure("node partitioned -> healed kubelet stopped the old pod", time.Since(start))
	e.waitFor("node "+from+" Ready again", 2*time.Minute, func() bool {
		var n corev1.Node
		return e.w.Kube.Get(e.ctx, client.ObjectKey{Name: from}, &n) == nil && nodeReady(&n)
	})
	capture.Stop()
	stopped = true
	times, err := capture.PacketTimes("host " + world.SiteWANAddress)
	if err != nil {
		t.Fatal(err)
	}
	var before, cut, after int
	var last time.Time
	for _, at := range times {
		switch {
		case at.Before(start):
			before++
		case at.Before(back):
			cut++
		default:
			after++
		}
		if at.After(last) {
			last = at
		}
	}
	// The controls: the capture saw the old pod carry the tunnel before the cut, and the
	// client's packets still reach it after the cut, until the port moved.
	if before == 0 || cut == 0 {
		t.Fatalf("the capture in the old pod saw %d packets to or from the client before the partition and %d after it: it proves nothing", before, cut)
	}
	if after > 0 {
		t.Errorf("the old pod sent or received %d packets to or from the client after the traffic came back through the new pod (last %s, back %s)",
			after, last.Format(time.RFC3339Nano), back.Format(time.RFC3339Nano))
	}
	t.Logf("old pod: %d packets to or from the client, %d before the partition, %d after it, the last %.2fs after it; traffic back through the new pod %.2fs after it",
		len(times), before, cut, last.Sub(start).Seconds(), back.Sub(start).Seconds())
	e.waitFor("the reverse exposure answers again", time.Minute, func() bool {
		return e.answers(world.ServiceHostNamespace, e.reverseURL(), world.SiteHostBody)
	})
}

// leaderElectionLease is the Lease the operator's replicas compete for (the operator's
// LeaderElectionID), in the operator's namespace.
const leaderElectionLease = "bnerd-vpn-operator.ipsec.bnerd.net"

// leaderOn arranges the chart's two operator replicas so the leader runs on node and a
// ready standby on another node: it deletes the leader's pod while the leader runs
// elsewhere (the standby on node takes over) and a standby on node while both run there
// (its replacement is spread to the other node). It then waits until the replicas have
// watched the liveness Leases for longer than their timeout, since a replica that took
// over sooner gives each Lease a full timeout from its own start: the figure measures
// the detection, not a start.
func (e *env) leaderOn(node string) {
	t := e.t
	t.Helper()
	var deleted []string
	e.waitFor("the operator's leader on "+node+" and a ready standby on another node", 4*time.Minute, func() bool {
		var lease coordinationv1.Lease
		if err := e.w.Kube.Get(e.ctx, client.ObjectKey{Namespace: world.OperatorNamespace, Name: leaderElectionLease}, &lease); err != nil || lease.Spec.HolderIdentity == nil {
			return false
		}
		var pods corev1.PodList
		if err := e.w.Kube.List(e.ctx, &pods, client.InNamespace(world.OperatorNamespace)); err != nil {
			return false
		}
		var leader *corev1.Pod
		var standbyHere, standbyElsewhere []*corev1.Pod
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp != nil {
				return false // a replica on its way out: wait for the pair to settle
			}
			switch {
			case strings.HasPrefix(*lease.Spec.HolderIdentity, p.Name+"_"):
				leader = p
			case !podReady(p):
				return false
			case p.Spec.NodeName == node:
				standbyHere = append(standbyHere, p)
			default:
				standbyElsewhere = append(standbyElsewhere, p)
			}
		}
		var victim *corev1.Pod
		switch {
		case leader == nil || !podReady(leader):
			return false
		case leader.Spec.NodeName == node && len(standbyElsewhere) > 0:
			t.Logf("operator leader %s on %s, standby %s on %s", leader.Name, node, standbyElsewhere[0].Name, standbyElsewhere[0].Spec.NodeName)
			return true
		case leader.Spec.NodeName != node && len(standbyHere) > 0:
			victim = leader
		case leader.Spec.NodeName == node && len(standbyHere) > 0:
			victim = standbyHere[0]
		case leader.Spec.NodeName != node && len(standbyElsewhere) > 0:
			victim = standbyElsewhere[0]
		default:
			return false
		}
		if !slices.Contains(deleted, victim.Name) {
			deleted = append(deleted, victim.Name)
			t.Logf("operator pod %s on %s deleted, to get the leader onto %s with a standby elsewhere", victim.Name, victim.Spec.NodeName, node)
			_ = e.w.Kube.Delete(e.ctx, victim)
		}
		return false
	})
	time.Sleep(2 * operatorconfig.DefaultGatewayLivenessTimeout)
}

// otherNode is a node of the world other than name.
func (e *env) otherNode(name string) string {
	for _, n := range e.w.Nodes {
		if n.Name != name {
			return n.Name
		}
	}
	e.t.Fatalf("no node other than %s", name)
	return ""
}

func (e *env) deleted(t *testing.T) {
	e.t = t
	start := time.Now()
	for _, obj := range []client.Object{&v1alpha1.ClusterLink{}, &v1alpha1.IPsecGateway{}} {
		key := client.ObjectKey{Name: "svc01-link"}
		if _, ok := obj.(*v1alpha1.IPsecGateway); ok {
			key = world.GatewayKey
		}
		if err := e.w.Kube.Get(e.ctx, key, obj); err != nil {
			t.Fatal(err)
		}
		if err := e.w.Kube.Delete(e.ctx, obj); err != nil {
			t.Fatal(err)
		}
		e.waitFor(key.String()+" gone", 3*time.Minute, func() bool {
			return apierrors.IsNotFound(e.w.Kube.Get(e.ctx, key, obj))
		})
	}
	var left []string
	e.waitFor("nothing left", 2*time.Minute, func() bool {
		var err error
		left, err = e.w.Leftovers(e.ctx, world.TenantNamespace)
		return err == nil && len(left) == 0
	})
	e.figure("delete -> nothing left", time.Since(start))
}

// releasePulled: the operator came from the released chart at its version, and every
// container of the operator and gateway pods runs the image the release pushed, as the
// node's containerd pulled it from the registry: the reference the chart defaults to and
// the index digest the push reported (the kubelet's imageID is the repository digest of
// what containerd pulled).
func (e *env) releasePulled(t *testing.T) {
	e.t = t
	w := e.w
	out, err := w.KubectlRun(e.ctx, "get", "deploy", "-n", world.OperatorNamespace, world.ReleaseName,
		"-o", `jsonpath={.metadata.labels.helm\.sh/chart}`)
	if want := "bnerd-vpn-operator-" + w.Release.Version; err != nil || out != want {
		t.Errorf("operator Deployment's chart label %q (%v), want %s: installed from the released chart", out, err, want)
	}
	check := func(pod *corev1.Pod, image map[string]string) {
		for _, c := range pod.Status.ContainerStatuses {
			name, ok := image[c.Name]
			if !ok {
				continue
			}
			ref, digest := w.Images[name], w.ImageDigests[name]
			if !strings.HasPrefix(ref, w.Registry+"/") || !strings.HasSuffix(ref, ":v"+w.Release.Version) {
				t.Errorf("%s image %s: not in the world's registry %s at v%s", name, ref, w.Registry, w.Release.Version)
			}
			if c.Image != ref {
				t.Errorf("pod %s container %s runs %s, want the released %s", pod.Name, c.Name, c.Image, ref)
			}
			repo, _, _ := strings.Cut(ref, ":v")
			if c.ImageID != repo+"@"+digest {
				t.Errorf("pod %s container %s: imageID %s, want %s@%s (pulled from the registry)", pod.Name, c.Name, c.ImageID, repo, digest)
			}
		}
	}
	var pods corev1.PodList
	if err := w.Kube.List(e.ctx, &pods, client.InNamespace(world.OperatorNamespace)); err != nil || len(pods.Items) == 0 {
		t.Fatalf("operator pods: %v (%d)", err, len(pods.Items))
	}
	for i := range pods.Items {
		check(&pods.Items[i], map[string]string{"operator": "operator"})
	}
	pod, err := w.GatewayPod(e.ctx, world.TenantNamespace, "acme")
	if err != nil || pod == nil {
		t.Fatalf("the gateway pod: %v", err)
	}
	check(pod, map[string]string{
		render.ContainerStrongswan: "gateway", render.ContainerInitNAT: "status-agent",
		render.ContainerStatus: "status-agent", render.ContainerExporter: "status-agent",
	})
	t.Logf("release %s: operator %s, gateway %s, status agent %s, pulled from %s", w.Release.Version,
		w.ImageDigests["operator"], w.ImageDigests["gateway"], w.ImageDigests["status-agent"], w.Registry)
}

// bringUp brings the node world up for one test and tears it down at the test's end,
// keeping its logs and captures when the test failed.
func bringUp(t testing.TB, ctx context.Context) *world.World {
	t.Helper()
	return bringUpWith(t, ctx, world.Options{})
}

// prepare starts the service hosts and the client site, and prepares the tenant's
// namespace with a fresh pre-shared key.
func (e *env) prepare() {
	e.t.Helper()
	w, t, ctx := e.w, e.t, e.ctx
	var err error
	if err := w.StartServiceHosts(); err != nil {
		t.Fatal(err)
	}
	if e.site, err = w.StartSite(ctx); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	e.psk = hex.EncodeToString(b)
	if err := w.PrepareTenant(ctx, e.psk); err != nil {
		t.Fatal(err)
	}
}

// nodeReady: the node's Ready condition is True.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
