package scale

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/controller/gateway"
)

const routeAttach = "POST /compute/v2.1/servers/{id}/os-interface"

// TestSlowNovaAttach converges BNERD_SCALE_NOVA_GATEWAYS gateways (default 20) with 4
// workers while Nova takes BNERD_SCALE_NOVA_DELAY (default 3s; the figure in
// docs/benchmarks.md uses 30s) to finish each attach, with the production poll
// interval (2 s). A reconcile never waits for Nova, so the attaches overlap and all
// gateways converge in about one attach plus overhead. The assertions are counts (each
// port attached exactly once, never more reconciles at once than workers); the time is
// printed, not asserted. Run:
//
//	BNERD_SCALE_NOVA_DELAY=30s go test -count=1 -v ./test/scale/ -run TestSlowNovaAttach
func TestSlowNovaAttach(t *testing.T) {
	n := envInt(t, "BNERD_SCALE_NOVA_GATEWAYS", 20, 1)
	delay := envDuration(t, "BNERD_SCALE_NOVA_DELAY", 3*time.Second)
	w := newWorld(t)
	const ns = "slow-nova"
	w.namespace(ns)
	w.sim.SetNovaDelays(delay, delay)

	var inflight, maxInflight, reconciles atomic.Int64
	stop := w.startOperator(gateway.Deps{OpenStack: w.clients, Config: w.cfg, Log: logr.Discard(), SkipNameValidation: true,
		Begin: func(string, types.NamespacedName) {
			v := inflight.Add(1)
			for m := maxInflight.Load(); v > m && !maxInflight.CompareAndSwap(m, v); m = maxInflight.Load() {
			}
		},
		Observe: func(string, types.NamespacedName, error) { inflight.Add(-1); reconciles.Add(1) },
	})
	defer stop()

	ctx := context.Background()
	w.sim.ResetCounters()
	t0 := time.Now()
	for i := range n {
		gw := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("gw-%02d", i)}, Spec: gwSpec(i)}
		must(t, w.env.Client.Create(ctx, gw))
	}
	// Wait for all to converge, sampling how many attaches Nova works on at once.
	peakPending := 0
	deadline := t0.Add(20*delay + 5*time.Minute) // a generous bound, not a latency assertion
	for {
		attached, ready := 0, 0
		for _, p := range w.sim.Ports() {
			if p.DeviceID != "" && len(p.Tags) > 0 {
				attached++
			}
		}
		if pending := w.sim.Counters().ByRoute[routeAttach] - attached; pending > peakPending {
			peakPending = pending
		}
		var l v1alpha1.IPsecGatewayList
		must(t, w.env.Client.List(ctx, &l, client.InNamespace(ns)))
		for _, g := range l.Items {
			if converged(g.Status.Conditions, g.Generation) {
				ready++
			}
		}
		if ready == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d gateways converged", ready, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	wall := time.Since(t0)
	c := w.sim.Counters()
	fmt.Printf("slow Nova: %d gateways, 4 workers, attach takes %s: all converged after %s (%.2f attach times); peak attaches in flight %d; peak reconciles in flight %d; reconciles %d (%.1f/gateway); Nova attach calls %d\n",
		n, delay, wall.Round(time.Millisecond), wall.Seconds()/delay.Seconds(), peakPending, maxInflight.Load(), reconciles.Load(), float64(reconciles.Load())/float64(n), c.ByRoute[routeAttach])
	if got := c.ByRoute[routeAttach]; got != n {
		t.Errorf("%d Nova attach calls for %d gateways: each port is attached exactly once", got, n)
	}
	if m := maxInflight.Load(); m > int64(w.cfg.MaxConcurrentReconciles) {
		t.Errorf("%d reconciles at once with %d workers", m, w.cfg.MaxConcurrentReconciles)
	}
}
