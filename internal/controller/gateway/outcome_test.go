package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/status"
	"bnerd.net/vpn-operator/internal/agent/vici"
	"bnerd.net/vpn-operator/internal/controller/outcome"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/statuswrite"
	"bnerd.net/vpn-operator/internal/testinfra/crash"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

const routeCreatePort = "POST /network/v2.0/ports"

// postPortTimes are the times the simulator received a port create.
func (h *harness) postPortTimes() []time.Time {
	var out []time.Time
	for _, r := range h.sim.RequestLog() {
		if r.Method == "POST" && r.Path == "/network/v2.0/ports" {
			out = append(out, r.Time)
		}
	}
	return out
}

func (h *harness) eventsWith(reason string) int {
	h.events.mu.Lock()
	defer h.events.mu.Unlock()
	n := 0
	for _, e := range h.events.events {
		if strings.Contains(e, " "+reason) {
			n++
		}
	}
	return n
}

// A 403 from OpenStack is a refusal: the phase's condition says so (one status write,
// one Event), and the gateway is left alone — no further OpenStack call, no API write,
// no error log — until its spec changes.
func TestRefusalWaitsForSpecChange(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	remove := h.sim.Inject(openstacksim.Fault{Method: "POST", PathPattern: "/network/v2.0/ports", Status: 403})
	h.start()
	h.create("refused", spec(false))
	gw := h.waitCond("refused", v1alpha1.ConditionPortReady, metav1.ConditionFalse, v1alpha1.ReasonPortFailed)
	msg := condOf(gw.Status.Conditions, v1alpha1.ConditionPortReady)
	if !strings.Contains(msg, "HTTP 403") || !strings.Contains(msg, "refused: not retried until the spec") {
		t.Fatalf("the condition does not say that OpenStack refused and what happens next: %s", msg)
	}
	h.quiesce("refused")

	if n := len(h.postPortTimes()); n != 1 {
		t.Fatalf("the refused create was sent %d times, want once", n)
	}
	// The window in which a hot loop (or a backoff) would have tried again many times.
	writes, reconciles := h.writes.Load(), h.reconciles.Load()
	h.sim.ResetCounters()
	time.Sleep(3 * time.Second)
	if c := h.sim.Counters(); c.Total() != 0 {
		t.Fatalf("a refused gateway kept calling OpenStack: %v", c.ByRoute)
	}
	if d := h.writes.Load() - writes; d != 0 {
		t.Fatalf("a refused gateway kept writing to the API server: %d writes", d)
	}
	if d := h.reconciles.Load() - reconciles; d != 0 {
		t.Fatalf("a refused gateway was reconciled %d more times", d)
	}
	if n := h.eventsWith(v1alpha1.ReasonPortFailed + " " + v1alpha1.ConditionPortReady + "=False:"); n != 1 {
		t.Fatalf("%d PortReady Events for the refusal, want one", n)
	}
	if n := h.logs.count("Reconciler error"); n != 0 {
		t.Fatalf("%d error-level reconcile logs for a refusal", n)
	}

	// A spec change is news: the reconciler tries again, and (the cloud having changed
	// its mind) converges.
	remove()
	h.mutate("refused", func(s *v1alpha1.GatewaySpec) {
		s.Exposures = append(s.Exposures, v1alpha1.Exposure{Name: "api", Target: v1alpha1.Target{Address: "10.250.0.21", Ports: []v1alpha1.PortSpec{{Port: 443, Protocol: v1alpha1.ProtocolTCP}}}})
	})
	h.waitConverged("refused")
	if n := len(h.postPortTimes()); n != 1 {
		t.Fatalf("%d port creates after the spec change, want exactly one", n)
	}
}

// A storm of 503s is retried with exponential backoff: the gap before the n-th retry is
// at least 100 ms·2^(n-1) (lower bounds only: a slow machine makes gaps longer, never
// shorter), so a storm costs a logarithmic number of attempts.
func TestServerErrorStormBacksOff(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	remove := h.sim.Inject(openstacksim.Fault{Method: "POST", PathPattern: "/network/v2.0/ports", Status: 503})
	h.start()
	h.create("storm", spec(false))
	gw := h.waitCond("storm", v1alpha1.ConditionPortReady, metav1.ConditionFalse, v1alpha1.ReasonPortFailed)
	if msg := condOf(gw.Status.Conditions, v1alpha1.ConditionPortReady); !strings.Contains(msg, "retrying with backoff") {
		t.Fatalf("condition %s", msg)
	}
	time.Sleep(5 * time.Second)
	times := h.postPortTimes()
	remove()
	if len(times) < 4 {
		t.Fatalf("only %d attempts in the storm: the failure is not retried", len(times))
	}
	// 100 ms, 200 ms, 400 ms, ...: at most about log2(5 s / 100 ms) + 2 attempts.
	if len(times) > 9 {
		t.Fatalf("%d attempts in a 5 s storm: no exponential backoff", len(times))
	}
	// The n-th retry waits at least 100 ms·2^(n-1). Compared with the backoff's own
	// schedule, not with the gap before: noise can only lengthen a gap, and a gap the
	// machine stretched must not make the next one look short.
	for i := 1; i < len(times); i++ {
		gap, least := times[i].Sub(times[i-1]), outcome.DefaultBase<<(i-1)
		if gap < least {
			t.Fatalf("retry %d came %s after the attempt before, sooner than %s: the backoff does not double (gaps %v)", i, gap, least, gaps(times))
		}
	}
	t.Logf("%d attempts in the storm, gaps %v", len(times), gaps(times))
	h.waitConverged("storm")
}

// A 429 with Retry-After is never retried sooner than asked, even while the
// exponential backoff would allow it.
func TestRetryAfterHonoured(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	remove := h.sim.Inject(openstacksim.Fault{Method: "POST", PathPattern: "/network/v2.0/ports", Status: 429, RetryAfter: 2 * time.Second, Count: 3})
	defer remove()
	h.start()
	h.create("limited", spec(false))
	h.waitConverged("limited")
	times := h.postPortTimes()
	if len(times) != 4 {
		t.Fatalf("%d port creates, want 3 refused and one that succeeded", len(times))
	}
	for i, g := range gaps(times) {
		if g < 2*time.Second {
			t.Fatalf("retry %d came after %s, sooner than Retry-After 2s (%v)", i+1, g, gaps(times))
		}
	}
	if n := h.logs.count("OpenStack refused"); n != 0 {
		t.Fatalf("a 429 was treated as a refusal (%d log lines)", n)
	}
}

func gaps(ts []time.Time) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(ts); i++ {
		out = append(out, ts[i].Sub(ts[i-1]).Round(time.Millisecond))
	}
	return out
}

// gatedCompute answers Nova attach calls at once and applies them only when the test
// opens the gate: Nova's asynchronous attach, with the test deciding when Nova is done.
type gatedCompute struct {
	openstack.Compute
	gate chan struct{}

	mu        sync.Mutex
	requested map[string]int // port -> attach calls
	pending   sync.WaitGroup
}

func (g *gatedCompute) AttachPort(ctx context.Context, server, port string) (*openstack.ServerInterface, error) {
	g.mu.Lock()
	g.requested[port]++
	g.mu.Unlock()
	g.pending.Add(1)
	go func() {
		defer g.pending.Done()
		<-g.gate
		// Nova finishing the work; a failure shows up as a port that never binds.
		_, _ = g.Compute.AttachPort(context.Background(), server, port)
	}()
	return &openstack.ServerInterface{PortID: port}, nil
}

func (g *gatedCompute) counts() (ports, calls int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, n := range g.requested {
		ports++
		calls += n
	}
	return
}

// With Nova busy, no reconcile waits for it: with 4 workers, all 20 gateways get their
// attach requested while none has completed, the workers are idle meanwhile (zero
// reconciles in flight), and the gateways are polled rather than held. When Nova
// finishes, every gateway becomes Ready having asked Nova exactly once.
func TestNovaWaitHoldsNoWorker(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.sim.SetMaxRoutes(-1)
	gc := &gatedCompute{Compute: h.os.Compute, gate: make(chan struct{}), requested: map[string]int{}}
	defer func() {
		select {
		case <-gc.gate:
		default:
			close(gc.gate)
		}
		gc.pending.Wait()
	}()
	h.os = &openstack.Clients{Networking: h.os.Networking, Compute: gc, Identity: h.os.Identity}
	// A blocking wait would hold its worker for the whole window (ten minutes), so the
	// assertion below could not pass by accident; polling is every 100 ms.
	h.wait = openstack.WaitOpts{Interval: 100 * time.Millisecond, Timeout: 10 * time.Minute}
	r := h.start()
	if r.Config.MaxConcurrentReconciles != 4 {
		t.Fatalf("workers %d", r.Config.MaxConcurrentReconciles)
	}
	const n = 20
	for i := range n {
		h.create(fmt.Sprintf("slow-%02d", i), spec(false))
	}
	eventually(t, "every attach requested while Nova has finished none", func() (bool, string) {
		ports, calls := gc.counts()
		return ports == n, fmt.Sprintf("%d ports, %d attach calls; %d reconciles in flight", ports, calls, h.inflight.Load())
	})
	// Nova still works on all twenty: the workers are free, and the gateways are being
	// polled (reconciles keep completing) rather than waited for.
	polls := h.reconciles.Load()
	idle := 0
	for range 50 {
		if h.inflight.Load() == 0 {
			idle++
		}
		time.Sleep(20 * time.Millisecond)
	}
	if idle == 0 {
		t.Fatalf("a worker was busy at every sample while Nova worked (%d in flight)", h.inflight.Load())
	}
	if h.maxInflight.Load() > 4 {
		t.Fatalf("%d reconciles ran at once with 4 workers", h.maxInflight.Load())
	}
	if h.reconciles.Load() == polls {
		t.Fatal("no gateway was polled while Nova worked")
	}
	for i := range n {
		gw := h.get(fmt.Sprintf("slow-%02d", i))
		c := condOf(gw.Status.Conditions, v1alpha1.ConditionPortAttached)
		if !strings.Contains(c, "=Unknown/"+v1alpha1.ReasonAttaching) || !strings.Contains(c, "waiting for Nova") {
			t.Fatalf("%s: the wait is not recorded: %s", gw.Name, c)
		}
	}

	close(gc.gate)
	for i := range n {
		h.waitConverged(fmt.Sprintf("slow-%02d", i))
	}
	ports, calls := gc.counts()
	if ports != n || calls != n {
		t.Fatalf("%d attach calls for %d ports: each port is attached exactly once", calls, ports)
	}
	t.Logf("peak reconciles in flight: %d of 4 workers", h.maxInflight.Load())
}

// The status agent and the operator write one status object, each its own fields
// (server-side apply, two field managers). A thousand agent writes interleaved with
// operator reconciles that rewrite the operator's part of the status every time: no
// write of either fails with a conflict, and neither ever loses the other's update.
func TestStatusWritersNeverCollide(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	r := h.directReconciler(&crash.Point{})
	h.r = r
	h.create("shared", spec(false))
	converge(t, h, r, "shared", false)

	agent := &status.Writer{Client: env.Client, Kind: v1alpha1.KindIPsecGateway, Namespace: h.ns, Name: "shared"}
	const agentWrites = 1000
	var agentErrs, agentConflicts atomic.Int64
	var lastAgent atomic.Value // the tunnel message the agent last wrote
	stop := make(chan struct{})
	agentDone := make(chan struct{})
	go func() {
		defer close(agentDone)
		now := time.Now()
		for i := range agentWrites {
			// Alternate between up and down with a distinct message each time, so every
			// call is a write.
			var sas map[string][]vici.IKESA
			if i%2 == 0 {
				sas = map[string][]vici.IKESA{"hq": {{Name: "hq", State: "CONNECTING"}}}
			}
			tunnels, ready := status.Compute([]string{"hq"}, sas, nil, now)
			tunnels[0].Message = fmt.Sprintf("write %d", i)
			if _, err := agent.Write(h.ctx, tunnels, ready); err != nil {
				agentErrs.Add(1)
				if apierrors.IsConflict(errors.Unwrap(err)) || apierrors.IsConflict(err) {
					agentConflicts.Add(1)
				}
				continue
			}
			lastAgent.Store(tunnels[0].Message)
		}
	}()

	// Meanwhile the operator reconciles, and every reconcile changes the operator's
	// part of the status (an exposure comes and goes, so its virtual IP, the Allocated
	// condition and the config follow).
	reconciles, conflicts := 0, 0
	key := types.NamespacedName{Namespace: h.ns, Name: "shared"}
loop:
	for i := 0; ; i++ {
		select {
		case <-agentDone:
			break loop
		default:
		}
		h.mutate("shared", func(s *v1alpha1.GatewaySpec) {
			if len(s.Exposures) == 1 {
				s.Exposures = append(s.Exposures, v1alpha1.Exposure{Name: "extra", Target: v1alpha1.Target{Address: "10.250.0.22", Ports: []v1alpha1.PortSpec{{Port: 443, Protocol: v1alpha1.ProtocolTCP}}}})
			} else {
				s.Exposures = s.Exposures[:1]
			}
		})
		err := r.reconcile(h.ctx, v1alpha1.KindIPsecGateway, key)
		reconciles++
		if err != nil {
			if strings.Contains(err.Error(), "the object has been modified") || apierrors.IsConflict(errors.Unwrap(err)) {
				conflicts++
			}
			t.Errorf("reconcile %d: %v", i, err)
			continue
		}
		// The operator's own update is there, whatever the agent did meanwhile.
		gw := h.get("shared")
		if len(gw.Status.Exposures) != len(gw.Spec.Exposures) {
			t.Fatalf("reconcile %d: status has %d exposure VIPs for %d exposures: the operator's update was lost", i, len(gw.Status.Exposures), len(gw.Spec.Exposures))
		}
	}
	close(stop)
	if agentErrs.Load() != 0 || conflicts != 0 {
		t.Fatalf("agent: %d failed writes (%d conflicts); operator: %d conflicting reconciles of %d", agentErrs.Load(), agentConflicts.Load(), conflicts, reconciles)
	}
	if reconciles < 20 {
		t.Fatalf("only %d reconciles interleaved with the agent's writes", reconciles)
	}

	// Nothing of the agent's was lost: its last write is what the object says; and the
	// field managers split the status as designed.
	gw := h.get("shared")
	if len(gw.Status.Tunnels) != 1 || gw.Status.Tunnels[0].Message != lastAgent.Load() {
		t.Fatalf("the agent's last write %q is not the tunnel state %+v", lastAgent.Load(), gw.Status.Tunnels)
	}
	if !converged(gw.Status.Conditions, gw.Generation) {
		t.Fatalf("not converged after the run: %s", condOf(gw.Status.Conditions, v1alpha1.ConditionReady))
	}
	owners := statusOwners(t, gw)
	for _, f := range []string{"f:tunnels", "f:tunnelsReady", "f:tunnelsObservedTime"} {
		if got := owners[f]; len(got) != 1 || got[0] != statuswrite.ManagerStatusAgent {
			t.Errorf("status %s is owned by %v, want only the status agent", f, got)
		}
	}
	for _, f := range []string{"f:conditions", "f:exposures", "f:portID", "f:serviceCIDR", "f:tunnelSummary"} {
		if got := owners[f]; len(got) != 1 || got[0] != statuswrite.ManagerOperator {
			t.Errorf("status %s is owned by %v, want only the operator", f, got)
		}
	}
	t.Logf("%d agent writes interleaved with %d operator reconciles, each writing status: 0 conflicts", agentWrites, reconciles)
}

// statusOwners maps each top-level status field to the field managers that own it.
func statusOwners(t *testing.T, gw *v1alpha1.IPsecGateway) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, mf := range gw.ManagedFields {
		if mf.FieldsV1 == nil {
			continue
		}
		var fields map[string]map[string]any
		if err := json.Unmarshal(mf.FieldsV1.Raw, &fields); err != nil {
			t.Fatal(err)
		}
		for f := range fields["f:status"] {
			out[f] = append(out[f], mf.Manager)
		}
	}
	return out
}
