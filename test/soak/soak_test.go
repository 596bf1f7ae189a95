// Package soak runs the chaos soak: random creates, updates and deletes of gateways and
// ClusterLinks against the real API server and the OpenStack simulator with latency and
// injected faults, the operator process killed and restarted all the while; then every
// object must converge and the simulator's state must hold nothing leaked or doubled.
package soak

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
	"bnerd.net/vpn-operator/test/harness"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// settings of one soak run, from the environment.
type settings struct {
	ops        int           // BNERD_SOAK_OPS: operations (default 500, the short form)
	seed       uint64        // BNERD_SOAK_SEED: random seed (default: the clock; printed)
	killEvery  time.Duration // BNERD_SOAK_KILL_EVERY: SIGKILL and restart period (30s)
	opInterval time.Duration // BNERD_SOAK_OP_INTERVAL: pause between operations (150ms)
	latency    time.Duration // BNERD_SOAK_LATENCY: simulator latency per request (20ms)
}

func loadSettings(t *testing.T) settings {
	s := settings{ops: 500, seed: uint64(time.Now().UnixNano()), killEvery: 30 * time.Second,
		opInterval: 150 * time.Millisecond, latency: 20 * time.Millisecond}
	if v := os.Getenv("BNERD_SOAK_OPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("BNERD_SOAK_OPS=%q: %v", v, err)
		}
		s.ops = n
	}
	if v := os.Getenv("BNERD_SOAK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("BNERD_SOAK_SEED=%q: %v", v, err)
		}
		s.seed = n
	}
	for name, d := range map[string]*time.Duration{"BNERD_SOAK_KILL_EVERY": &s.killEvery, "BNERD_SOAK_OP_INTERVAL": &s.opInterval, "BNERD_SOAK_LATENCY": &s.latency} {
		if v := os.Getenv(name); v != "" {
			x, err := time.ParseDuration(v)
			if err != nil {
				t.Fatalf("%s=%q: %v", name, v, err)
			}
			*d = x
		}
	}
	return s
}

// ConvergeBound is how long every object has to converge once the faults stop: a
// correctness bound (something that never converges fails), not a performance figure.
const ConvergeBound = 60 * time.Second

// TestChaosSoak is the soak. Short form (make test): 500 operations. Long form, by hand:
//
//	KUBEBUILDER_ASSETS=$(bash hack/controlplane.sh --print-dir) BNERD_SOAK_OPS=10000 \
//	  go test -count=1 -v -timeout 3h -run TestChaosSoak ./test/soak/
func TestChaosSoak(t *testing.T) {
	testenv.Need(t)
	if testing.Short() {
		t.Skip("builds and runs the operator process for minutes; skipped in -short mode")
	}
	cfg := loadSettings(t)
	t.Logf("soak: %d operations, seed %d (BNERD_SOAK_SEED to repeat), operator killed every %s, simulator latency %s",
		cfg.ops, cfg.seed, cfg.killEvery, cfg.latency)
	ctx := context.Background()
	w := newWorld(t, ctx, cfg)

	// Faults on: a slow, flaky cloud.
	faultsOff := w.faultsOn()
	killer := w.startKiller(cfg.killEvery)
	flapper := w.startNodeFlapper()
	start := time.Now()
	for i := 0; i < cfg.ops; i++ {
		w.step()
		time.Sleep(cfg.opInterval)
	}
	opsTook := time.Since(start)
	killer()
	flapper()
	faultsOff()
	w.ensureRunning()
	t.Logf("operations done in %s: %s; operator started %d times", opsTook.Round(time.Second), w.opSummary(), w.op.Starts())

	// Every object converges within the bound.
	t0 := time.Now()
	w.waitConverged(ConvergeBound)
	t.Logf("converged %s after the faults stopped (%d gateways, %d ClusterLinks live)", time.Since(t0).Round(100*time.Millisecond), len(w.gws), len(w.links))

	// Nothing leaked, nothing doubled, nothing of a deleted object left.
	w.audit("after the soak")

	// Everything deleted: nothing of anything remains.
	w.deleteAll()
	w.waitGone(ConvergeBound)
	w.audit("after deleting everything")

	w.checkLogs()
	c := w.sim.Counters()
	slowA, failA, slowD := w.sim.NovaChaosSeen()
	t.Logf("OpenStack requests %d (writes %d, faulted %d); Nova attaches made slow %d, failed %d, detaches delayed %d",
		c.Total(), c.Writes, c.Faulted, slowA, failA, slowD)
}

// faultsOn makes the cloud slow and flaky: every request 20 ms (by default), 5 % 5xx,
// 2 % 429 with Retry-After, 1 % hung (until the client's timeout), 409 storms on router
// routes, Nova attaches that take 30 s or fail and detaches that finish 5 s late. The returned func turns the faults
// off again (the latency stays: it is the cloud's, not a fault).
func (w *world) faultsOn() (off func()) {
	s := w.sim
	s.SetLatency(w.cfg.latency)
	api := "re:^/(network|compute)/"
	s.Inject(openstacksim.Fault{PathPattern: api, Status: 500, Rate: 0.025})
	s.Inject(openstacksim.Fault{PathPattern: api, Status: 503, Rate: 0.025})
	s.Inject(openstacksim.Fault{PathPattern: api, Status: 429, RetryAfter: time.Second, Rate: 0.02})
	s.Inject(openstacksim.Fault{PathPattern: api, Hang: true, Rate: 0.01})
	stopStorm := s.Storm(openstacksim.Fault{Method: "PUT", PathPattern: "re:^/network/v2.0/routers/[^/]+/(add|remove)_extraroutes$", Status: 409},
		10*time.Second, 2*time.Second)
	s.SetNovaChaos(openstacksim.NovaChaos{SlowAttachRate: 0.1, SlowAttach: 30 * time.Second, FailAttachRate: 0.1,
		SlowDetachRate: 0.2, SlowDetach: 5 * time.Second})
	return func() {
		stopStorm()
		s.ClearFaults()
		s.SetNovaChaos(openstacksim.NovaChaos{})
	}
}

// startKiller SIGKILLs the operator every period and starts it again at once (as a
// Deployment would after a node or OOM kill), until the returned func is called.
func (w *world) startKiller(period time.Duration) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				w.restarting.Lock()
				w.op.Kill()
				w.kills++
				err := w.op.Start()
				w.restarting.Unlock()
				if err != nil {
					w.t.Errorf("restarting the operator: %v", err)
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}

// startNodeFlapper makes a random worker NotReady every 10 s, for 1 to 12 s (shorter
// than the operator's 5 s grace period, or longer), so gateways stay through flaps and
// move off nodes that stay down, under the same faults. The returned func stops it and
// makes every worker Ready again.
func (w *world) startNodeFlapper() (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Second):
			}
			node := harness.WorkerNode(w.flapRand.IntN(workers))
			down := time.Duration(1+w.flapRand.IntN(12)) * time.Second
			if err := harness.SetNodeReady(w.ctx, w.c, node, false); err != nil {
				w.t.Errorf("node %s NotReady: %v", node, err)
			}
			w.flaps++
			select {
			case <-done:
			case <-time.After(down):
			}
			if err := harness.SetNodeReady(w.ctx, w.c, node, true); err != nil {
				w.t.Errorf("node %s Ready: %v", node, err)
			}
		}
	}()
	return func() { close(done); <-finished }
}

func (w *world) waitConverged(bound time.Duration) {
	w.t.Helper()
	deadline := time.Now().Add(bound)
	for {
		left, err := harness.NotConverged(w.ctx, w.c)
		if err != nil {
			w.t.Fatal(err)
		}
		left = append(left, w.stillThere()...)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%d object(s) did not converge within %s after the faults stopped:\n  %s",
				len(left), bound, harness.Summarize(left, 40))
		}
		w.ensureRunning()
		time.Sleep(250 * time.Millisecond)
	}
}

func (w *world) audit(when string) {
	w.t.Helper()
	in, err := harness.BuildAuditInput(w.ctx, w.c, w.sim, w.baseline, w.deleted)
	if err != nil {
		w.t.Fatal(err)
	}
	rep := harness.Audit(w.sim.Objects(), in)
	w.t.Logf("audit %s: %s", when, rep)
	if p := rep.Problems(); len(p) > 0 {
		w.t.Errorf("audit %s found %d problem(s):\n  %s", when, len(p), harness.Summarize(p, 60))
	}
}

// checkLogs: no secret in the operator's output, no panic.
func (w *world) checkLogs() {
	w.t.Helper()
	logs := w.op.Log()
	for _, s := range w.secrets {
		if strings.Contains(logs, s) {
			w.t.Errorf("a credential secret reached the operator's output")
		}
	}
	if n := strings.Count(logs, "panic"); n > 0 {
		w.t.Errorf("the operator's output mentions panic %d times", n)
	}
}

func (w *world) opSummary() string {
	var parts []string
	for _, k := range sortedKeys(w.opCount) {
		parts = append(parts, fmt.Sprintf("%s %d", k, w.opCount[k]))
	}
	return strings.Join(parts, ", ") + fmt.Sprintf("; kills %d, node flaps %d", w.kills, w.flaps)
}
