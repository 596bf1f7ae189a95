// Package scale holds scale harnesses: they converge many objects against a real
// kube-apiserver and the OpenStack simulator and print the figures recorded in
// docs/benchmarks.md. `make test` runs them small (their assertions are counts, never
// times); the figures come from the larger runs by hand.
package scale

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/controller/gateway"
	"bnerd.net/vpn-operator/internal/openstack"
)

// TestGatewayScale converges BNERD_SCALE_GATEWAYS gateways (default 20; the figures
// in docs/benchmarks.md use 200), each with a tunnel, an exposure and a reverse
// exposure, then restarts the operator and measures the steady-state cost of
// reconciling them all again. Run:
//
//	BNERD_SCALE_GATEWAYS=200 go test -count=1 -v -timeout 30m ./test/scale/ -run TestGatewayScale
func TestGatewayScale(t *testing.T) {
	n := envInt(t, "BNERD_SCALE_GATEWAYS", 20, 1)
	w := newWorld(t)
	env, s, clients := w.env, w.sim, w.clients

	ctx := context.Background()
	c := env.Client
	const ns = "scale"
	w.namespace(ns)

	var reconciles atomic.Int64
	start := func() func() {
		return w.startOperator(gateway.Deps{OpenStack: clients, Config: w.cfg, Log: logr.Discard(), SkipNameValidation: true,
			PortWait: openstack.WaitOpts{Interval: 50 * time.Millisecond, Timeout: time.Minute},
			Observe:  func(string, types.NamespacedName, error) { reconciles.Add(1) }})
	}

	s.ResetCounters()
	stop := start()
	t0 := time.Now()
	for i := 0; i < n; i++ {
		gw := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("gw-%03d", i)}, Spec: gwSpec(i)}
		must(t, c.Create(ctx, gw))
	}
	waitAll(t, c, ns, n)
	create := time.Since(t0)
	// Until the requests stop, so that reconciles queued behind the first ones count.
	quiet(t, s, nil, 2*time.Second)
	cc := s.Counters()
	createReconciles := reconciles.Load()
	stop()

	// Steady state: a restarted operator reconciles every converged gateway once.
	s.ResetCounters()
	reconciles.Store(0)
	stop = start()
	t1 := time.Now()
	deadline := t1.Add(10 * time.Minute) // a generous bound, not a latency assertion
	for reconciles.Load() < int64(n) {
		if time.Now().After(deadline) {
			t.Fatalf("steady state: only %d of %d gateways reconciled after a restart", reconciles.Load(), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The whole pass: until the requests stop (stragglers such as the PSK Secret's
	// watch waking the gateways it names), so the counts below are complete.
	quiet(t, s, nil, 2*time.Second)
	steady := time.Since(t1)
	sc := s.Counters()
	steadyReconciles := reconciles.Load()
	stop()

	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	fmt.Printf("gateways: %d\n", n)
	fmt.Printf("create: wall %s; OpenStack requests %d (%.1f/gateway), writes %d (%.1f/gateway), tokens %d; reconciles %d (%.1f/gateway)\n",
		create.Round(time.Millisecond), cc.Total(), float64(cc.Total())/float64(n), cc.Writes, float64(cc.Writes)/float64(n), cc.Tokens, createReconciles, float64(createReconciles)/float64(n))
	fmt.Printf("steady (restart, one pass): wall %s; OpenStack requests %d (%.1f/gateway), writes %d; reconciles %d (%.1f/gateway)\n",
		steady.Round(time.Millisecond), sc.Total(), float64(sc.Total())/float64(n), sc.Writes, steadyReconciles, float64(steadyReconciles)/float64(n))
	fmt.Printf("steady requests by route: %v\n", sc.ByRoute)
	fmt.Printf("peak RSS of the test process (operator + simulator in one process): %d MiB\n", ru.Maxrss/1024)
	if sc.Writes != 0 {
		t.Errorf("steady state made %d OpenStack writes: %v", sc.Writes, sc.ByRoute)
	}
	// Creation: one reconcile per gateway, give or take a retried write. The creation of
	// the objects a reconcile makes (Deployment, ConfigMap, ...) does not wake their
	// gateway again: that echo was a second reconcile of every gateway, four OpenStack
	// reads each, which at 1,000 gateways ran after they had all converged.
	if createReconciles > int64(n+n/4) {
		t.Errorf("create: %d reconciles for %d gateways, want about one each (at most %d)", createReconciles, n, n+n/4)
	}
	if steadyReconciles < int64(n) {
		t.Errorf("steady state: %d reconciles for %d gateways", steadyReconciles, n)
	}
	// Reads in the restart pass. Once per process start: the gateway cluster's router
	// resolved by name, and one tagged port list per gateway kind (startRoutes). Per
	// converged gateway at most 4 (docs/benchmarks.md): its port, its security group with
	// its rules, its floating IP, the operator router (reverse exposure). Each gateway is
	// reconciled once: the watch of the pre-shared-key Secret it names, started by that
	// reconcile, does not report the version the reconcile read (namedwatch), which used
	// to wake every gateway naming the Secret a second time.
	startup, startMax := 0, 0
	for r, max := range startRoutes {
		startup += sc.ByRoute[r]
		startMax += max
	}
	perGateway := sc.Reads - startup
	fmt.Printf("steady reads: %d once per start, %d for %d reconciles (%.2f per reconcile, %.2f per gateway)\n",
		startup, perGateway, steadyReconciles, float64(perGateway)/float64(steadyReconciles), float64(perGateway)/float64(n))
	if startup > startMax {
		t.Errorf("restart pass: %d once-per-start reads, want at most %v", startup, startRoutes)
	}
	if perGateway > 4*n {
		t.Errorf("restart pass: %d reads for %d converged gateways (%d reconciles), want at most 4 each: %v", perGateway, n, steadyReconciles, sc.ByRoute)
	}
	if steadyReconciles > int64(n) {
		t.Errorf("restart pass: %d reconciles for %d gateways, want one each", steadyReconciles, n)
	}
	if sc.Tokens > 1 {
		t.Errorf("restart pass: %d token requests, want at most 1", sc.Tokens)
	}
	if cc.ByRoute["POST /compute/v2.1/servers/{id}/os-interface"] != n {
		t.Errorf("create: %d Nova attach calls for %d gateways", cc.ByRoute["POST /compute/v2.1/servers/{id}/os-interface"], n)
	}
}

// startRoutes are the reads a gateway controller makes once per start, not per gateway:
// the operator router resolved by name, and the tagged port list of each gateway kind.
var startRoutes = map[string]int{"GET /network/v2.0/routers": 1, "GET /network/v2.0/ports": 2}

func gwSpec(i int) v1alpha1.GatewaySpec {
	return v1alpha1.GatewaySpec{
		Tunnels: []v1alpha1.Tunnel{{Name: "hq",
			Peer:         v1alpha1.Peer{Address: fmt.Sprintf("198.51.%d.%d", 100+i/250, 1+i%250), Subnets: []string{"192.168.10.0/24"}},
			PreSharedKey: v1alpha1.SecretKeyRef{Name: "psk", Key: "psk"}}},
		Exposures: []v1alpha1.Exposure{{Name: "portal", Target: v1alpha1.Target{Address: "10.250.0.20", Ports: []v1alpha1.PortSpec{{Port: 443, Protocol: v1alpha1.ProtocolTCP}}}}},
		ReverseExposures: []v1alpha1.ReverseExposure{{Name: "erp", Tunnel: "hq",
			Target: v1alpha1.Target{Address: "192.168.10.5", Ports: []v1alpha1.PortSpec{{Port: 8443, Protocol: v1alpha1.ProtocolTCP}}}}},
	}
}

func waitAll(t *testing.T, c client.Client, ns string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Minute) // a generous bound, not a latency assertion
	for {
		var l v1alpha1.IPsecGatewayList
		must(t, c.List(context.Background(), &l, client.InNamespace(ns)))
		ready := 0
		for _, g := range l.Items {
			// Converged: every phase True (Ready also needs a running pod and the
			// tunnels up, which no kubelet or peer provides here).
			if converged(g.Status.Conditions, g.Generation) {
				ready++
			}
		}
		if ready == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d gateways converged", ready, n)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
