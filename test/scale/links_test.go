package scale

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/controller/clusterlink"
	"bnerd.net/vpn-operator/internal/controller/gateway"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
	"bnerd.net/vpn-operator/test/harness"
)

// TestLinkWritesBounded creates a few same-tenant ClusterLinks, lets them converge, then
// creates BNERD_SCALE_LINK_GATEWAYS gateways (default 40) with reverse exposures all at
// once, and counts what the links wrote while the gateways arrived: router route writes
// per link (the simulator's request log) and ClusterLink writes per link (a watch on the
// API server: every MODIFIED event is one write), and the security-group rule creates
// (one bulk request per gateway). Then a window with nothing changing:
// no OpenStack request at all, no link write. Counts only; the waits are generous
// bounds, never assertions. Run:
//
//	go test -count=1 -v ./test/scale/ -run TestLinkWritesBounded
func TestLinkWritesBounded(t *testing.T) {
	const links = 3
	n := envInt(t, "BNERD_SCALE_LINK_GATEWAYS", 40, 1)
	servers := []string{harness.WorkerServerID(0), harness.WorkerServerID(1), harness.WorkerServerID(2)}
	w := newWorldOf(t, harness.Estate(harness.EstateOptions{ServiceClusters: links, Workers: len(servers)}), servers)
	env, s, clients := w.env, w.sim, w.clients
	ctx := context.Background()
	c := env.Client
	const ns = "links"
	w.namespace(ns)
	must(t, harness.EnsureNamespace(ctx, c, harness.CredentialsNamespace))
	op, ok := s.ProjectByName(harness.OperatorProject)
	if !ok {
		t.Fatal("the estate has no operator project")
	}

	var reconciles atomic.Int64
	stop := w.startOperator(gateway.Deps{OpenStack: clients, Config: w.cfg, Log: logr.Discard(), SkipNameValidation: true,
		PortWait: openstack.WaitOpts{Interval: 50 * time.Millisecond, Timeout: time.Minute},
		Observe:  func(string, types.NamespacedName, error) { reconciles.Add(1) }},
		func(mgr ctrl.Manager) error {
			// The production fan-out delay (clusterlink.FanOutDelay): the bound below is its.
			return clusterlink.New(clusterlink.Deps{OpenStack: clients, OperatorProjectID: op.ID, AuthURL: s.AuthURL(), Region: s.Region(),
				Config: w.cfg, SkipNameValidation: true}).SetupWithManager(mgr)
		})
	defer stop()

	routers := map[string]string{} // router ID -> link
	for i := 0; i < links; i++ {
		name := fmt.Sprintf("link-%d", i)
		must(t, c.Create(ctx, &v1alpha1.ClusterLink{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.ClusterLinkSpec{ServiceClusterRouter: harness.ServiceClusterRouter(i), ServiceClusterCIDR: fmt.Sprintf("10.100.%d.0/24", i)}}))
		r, ok := s.RouterByName(harness.ServiceClusterRouter(i))
		if !ok {
			t.Fatalf("the estate has no router %s", harness.ServiceClusterRouter(i))
		}
		routers[r.ID] = name
	}
	waitLinks(t, c, links, 0)
	// Let the links' own creation settle (their fan-out included) before counting.
	quiet(t, s, nil, clusterlink.FanOutDelay+2*time.Second)

	// Every write of a ClusterLink (status or metadata) is one MODIFIED event.
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	must(t, err)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watcher, err := wc.Watch(wctx, &v1alpha1.ClusterLinkList{})
	must(t, err)
	lw := &linkWrites{per: map[string]int{}}
	go func() {
		for ev := range watcher.ResultChan() {
			if ev.Type != watch.Modified {
				continue
			}
			if o, ok := ev.Object.(client.Object); ok {
				lw.note(o.GetName())
			}
		}
	}()
	defer watcher.Stop()

	s.ResetCounters()
	reconciles.Store(0)
	t0 := time.Now()
	for i := 0; i < n; i++ {
		must(t, c.Create(ctx, &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("gw-%03d", i)}, Spec: gwSpec(i)}))
	}
	waitAll(t, c, ns, n)
	gwAt := time.Since(t0)
	waitLinks(t, c, links, n)
	linksAt := time.Since(t0)
	// Done: nothing moved (OpenStack requests, link writes) for longer than a fan-out.
	quiet(t, s, lw, clusterlink.FanOutDelay+2*time.Second)
	ac := s.Counters()
	if ac.Total() >= 4000 {
		t.Fatalf("%d requests: the simulator's request log (4,096) may have dropped some of the router writes", ac.Total())
	}
	adds, removes := map[string]int{}, map[string]int{}
	rulePosts := 0
	for _, r := range s.RequestLog() {
		if r.Method == "POST" && r.Path == "/network/v2.0/security-group-rules" {
			rulePosts++
		}
		if r.Method != "PUT" {
			continue
		}
		for id, link := range routers {
			switch r.Path {
			case "/network/v2.0/routers/" + id + "/add_extraroutes":
				adds[link]++
			case "/network/v2.0/routers/" + id + "/remove_extraroutes":
				removes[link]++
			}
		}
	}
	statusWrites := lw.snapshot()
	fmt.Printf("links: %d same-tenant ClusterLinks, %d gateways with a reverse exposure created at once\n", links, n)
	fmt.Printf("arrival: gateways converged after %s, every link with %d reverse routes after %s (not asserted)\n",
		gwAt.Round(100*time.Millisecond), n, linksAt.Round(100*time.Millisecond))
	fmt.Printf("arrival: OpenStack requests %d, writes %d; gateway reconciles %d\n", ac.Total(), ac.Writes, reconciles.Load())
	fmt.Printf("arrival: per link: router add_extraroutes %v, remove_extraroutes %v, ClusterLink writes %v\n", adds, removes, statusWrites)
	fmt.Printf("arrival: clusterlink reconciles %s\n", linkMetrics(t))
	fmt.Printf("arrival: security-group rule creates %d for %d gateways\n", rulePosts, n)

	// Each gateway's rules (its peer's IKE and NAT-T, its reverse exposure from the
	// internal sources and from every link's service cluster) are created in one bulk
	// request: at most one per gateway (40 for 40 measured), where a request per rule
	// would be 6 per gateway here (counted from gwSpec) and over 100 with 100 links.
	if rulePosts > n {
		t.Errorf("%d security-group rule creates for %d gateways, want at most one per gateway (one bulk create)", rulePosts, n)
	}

	// The bound. A link reconcile sends at most one atomic add (and one remove) of the
	// difference between the routes it wants and the router's (routes.go), and writes
	// its status at most twice doing so (the routes it is about to add are on record
	// before the add, and the result after). Gateway changes reach a link only through
	// the fan-out, which holds the link's turn for clusterlink.FanOutDelay (5 s) and lets
	// every change within it join that turn: while gateways arrive a link is reconciled
	// at most once per window, however many gateways arrive in it. So the router writes
	// of a link are at most the windows the arrival spanned, plus one (a turn under way
	// when the last change came), whatever the number of gateways; one write per
	// gateway (n), what the guard is for, fails it. The windows come from the arrival's
	// duration, so a slower machine allows more writes only as it takes more windows;
	// the bound is capped at n/2 (the arrival would have to take 100 s at 40 gateways,
	// several times the slowest run seen here), so a link writing per gateway never
	// passes.
	windows := int((linksAt + clusterlink.FanOutDelay - 1) / clusterlink.FanOutDelay)
	maxAdds := min(windows+1, n/2)
	fmt.Printf("arrival: %d fan-out windows: at most %d router writes and %d ClusterLink writes per link\n", windows, maxAdds, 2*maxAdds)
	for i := 0; i < links; i++ {
		name := fmt.Sprintf("link-%d", i)
		if adds[name] < 1 || adds[name] > maxAdds {
			t.Errorf("%s: %d add_extraroutes on its router while %d gateways arrived over %d fan-out windows, want 1 to %d", name, adds[name], n, windows, maxAdds)
		}
		if removes[name] != 0 {
			t.Errorf("%s: %d remove_extraroutes while gateways only arrived", name, removes[name])
		}
		if statusWrites[name] < 1 || statusWrites[name] > 2*maxAdds {
			t.Errorf("%s: %d ClusterLink writes while %d gateways arrived over %d fan-out windows, want 1 to %d", name, statusWrites[name], n, windows, 2*maxAdds)
		}
	}

	// Steady state: nothing changes, so nothing is read or written. The operator has no
	// periodic OpenStack read but the resync (one hour here, as in production's default
	// order of magnitude); a poll or a requeue loop with a period under the window would
	// show here.
	const window = 10 * time.Second
	s.ResetCounters()
	before := lw.total()
	rBefore := reconciles.Load()
	time.Sleep(window)
	sc := s.Counters()
	idleWrites := lw.total() - before
	fmt.Printf("steady (%s, nothing changing): OpenStack requests %d (reads %d, writes %d, tokens %d), ClusterLink writes %d, gateway reconciles %d\n",
		window, sc.Total(), sc.Reads, sc.Writes, sc.Tokens, idleWrites, reconciles.Load()-rBefore)
	if sc.Total() != 0 || idleWrites != 0 {
		t.Errorf("steady state: %d OpenStack requests (%d writes) and %d ClusterLink writes in %s, want none: %v", sc.Total(), sc.Writes, idleWrites, window, sc.ByRoute)
	}
}

// linkWrites counts ClusterLink writes per link.
type linkWrites struct {
	mu  sync.Mutex
	per map[string]int
	n   int
}

func (l *linkWrites) note(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.per[name]++
	l.n++
}

func (l *linkWrites) total() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

func (l *linkWrites) snapshot() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.per)
}

// waitLinks waits until every one of links ClusterLinks is Ready with routes reverse
// routes.
func waitLinks(t *testing.T, c client.Client, links, routes int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Minute) // a generous bound, not a latency assertion
	for {
		var l v1alpha1.ClusterLinkList
		must(t, c.List(context.Background(), &l))
		done := 0
		for i := range l.Items {
			if meta.IsStatusConditionTrue(l.Items[i].Status.Conditions, v1alpha1.ConditionReady) && len(l.Items[i].Status.ReverseRoutes) == routes {
				done++
			}
		}
		if done == links {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d ClusterLinks Ready with %d reverse routes", done, links, routes)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// quiet waits until neither the simulator's request count nor the link writes (when
// counted) moved for d: the work a change caused is complete, so a count taken after
// it is whole.
func quiet(t *testing.T, s *openstacksim.Server, lw *linkWrites, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Minute) // a generous bound, not a latency assertion
	last, since := -1, time.Now()
	for {
		now := s.Counters().Total() + lw.total()
		if now != last {
			last, since = now, time.Now()
		} else if time.Since(since) >= d {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("requests still moving after 10 minutes (%d)", now)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// linkMetrics reads the clusterlink controller's reconcile and retry counts from
// controller-runtime's registry (this process's managers).
func linkMetrics(t *testing.T) string {
	mfs, err := crmetrics.Registry.Gather()
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, mf := range mfs {
		switch mf.GetName() {
		case "controller_runtime_reconcile_total", "controller_runtime_reconcile_errors_total", "workqueue_retries_total":
		default:
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["controller"] != "clusterlink" && labels["name"] != "clusterlink" {
				continue
			}
			if v := m.GetCounter().GetValue(); v > 0 {
				parts = append(parts, fmt.Sprintf("%s%s %.0f", mf.GetName(), labelText(labels), v))
			}
		}
	}
	return strings.Join(parts, "; ")
}

func labelText(l map[string]string) string {
	if r := l["result"]; r != "" {
		return "{result=" + r + "}"
	}
	return ""
}
