//go:build measure

package scale

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
	"bnerd.net/vpn-operator/test/harness"
)

// slowCloud are the knobs of TestSlowCloudScale, from the environment.
type slowCloud struct {
	gateways, links    int           // BNERD_SCALE_GATEWAYS (1000), BNERD_SCALE_LINKS (100)
	latency            time.Duration // BNERD_SCALE_LATENCY: per request (20ms)
	simQPS             float64       // BNERD_SCALE_SIM_QPS: the cloud's rate limit per project (0: none)
	simBurst           int           // BNERD_SCALE_SIM_BURST
	opQPS              float64       // BNERD_SCALE_OS_QPS: the operator's pacing (0: none)
	opBurst            int           // BNERD_SCALE_OS_BURST
	workers            int           // BNERD_SCALE_WORKERS: MaxConcurrentReconciles (16)
	concurrentCreates  int           // BNERD_SCALE_RESTART_CREATES: gateways created by 8 clients during restarts (200)
	profile            string        // BNERD_SCALE_PROFILE: write a CPU profile of the operator during creation here
	memoryLimitMiB     int           // BNERD_SCALE_MEMORY_LIMIT: run the operator in a memory cgroup of this many MiB (0: none)
	foreign            int           // BNERD_SCALE_FOREIGN: other applications' workloads in the cluster (0)
	createClients      int
	restartDuringBurst int
}

func loadSlowCloud(t *testing.T) slowCloud {
	return slowCloud{
		gateways: envInt(t, "BNERD_SCALE_GATEWAYS", 1000, 1), links: envInt(t, "BNERD_SCALE_LINKS", 100, 0),
		latency: envDuration(t, "BNERD_SCALE_LATENCY", 20*time.Millisecond),
		simQPS:  envFloat(t, "BNERD_SCALE_SIM_QPS", 0), simBurst: envInt(t, "BNERD_SCALE_SIM_BURST", 100, 1),
		opQPS: envFloat(t, "BNERD_SCALE_OS_QPS", 0), opBurst: envInt(t, "BNERD_SCALE_OS_BURST", 0, 0),
		workers: envInt(t, "BNERD_SCALE_WORKERS", 16, 1), concurrentCreates: envInt(t, "BNERD_SCALE_RESTART_CREATES", 200, 0),
		profile: os.Getenv("BNERD_SCALE_PROFILE"), createClients: 8, restartDuringBurst: 2,
		memoryLimitMiB: envInt(t, "BNERD_SCALE_MEMORY_LIMIT", 0, 0), foreign: envInt(t, "BNERD_SCALE_FOREIGN", 0, 0),
	}
}

// wholeNetworkPortLists names the simulator's tally of GET /ports by network alone.
const wholeNetworkPortLists = "whole-network port lists"

// TestSlowCloudScale converges many gateways and ClusterLinks with the operator as its own
// process against a slow (and optionally rate-limited) simulated cloud, then measures a
// restart's first pass and a burst of concurrent creates across restarts. Run by hand:
//
//	KUBEBUILDER_ASSETS=$(bash hack/controlplane.sh --print-dir) BNERD_SCALE=1 \
//	  go test -tags measure -count=1 -v -timeout 60m ./test/scale/ -run TestSlowCloudScale
func TestSlowCloudScale(t *testing.T) {
	if os.Getenv("BNERD_SCALE") != "1" {
		t.Skip("scale harness; run by hand with BNERD_SCALE=1")
	}
	cfg := loadSlowCloud(t)
	ctrllog.SetLogger(logr.Discard())
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx := context.Background()
	c := env.Client

	// Room for every gateway: a transit address each (a /20 holds about 4,000) and a
	// floating IP each (the /19, about 8,000); a /24 each from the pool below.
	transit, pool := "10.254.0.0/20", "100.64.0.0/13"
	if cfg.gateways > 2000 {
		transit, pool = "10.254.0.0/18", "100.64.0.0/11"
	}
	s, err := openstacksim.Start(harness.Estate(harness.EstateOptions{TransitCIDR: transit, PublicCIDR: "198.18.0.0/19",
		ServiceClusters: cfg.links, Workers: 3}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SetLatency(cfg.latency)
	if cfg.simQPS > 0 {
		s.SetRateLimit(openstacksim.RateLimit{QPS: cfg.simQPS, Burst: cfg.simBurst, PerProject: true})
	}

	const ns = "scale"
	for _, n := range []string{ns, harness.OperatorNamespace} {
		must(t, harness.EnsureNamespace(ctx, c, n))
		must(t, harness.TenantPolicy(ctx, c, "slowcloud-"+n, n))
	}
	must(t, harness.CreateWorkers(ctx, c, 3))
	must(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "psk"}, Data: map[string][]byte{"psk": []byte("scale-test-pre-shared-key-0123456789")}}))
	baseline := harness.TakeSnapshot(s.Objects())
	if cfg.foreign > 0 {
		t0 := time.Now()
		createForeign(t, ctx, c, cfg.createClients, cfg.foreign)
		fmt.Printf("other applications: %d workloads (a Deployment, a ConfigMap, a ServiceAccount, a Role and a RoleBinding each) created in %s before the operator starts\n",
			cfg.foreign, time.Since(t0).Round(100*time.Millisecond))
	}

	dir := t.TempDir()
	bin, err := harness.BuildOperator(dir)
	must(t, err)
	kubeconfig, err := env.WriteKubeConfig(dir)
	must(t, err)
	opEnv, err := harness.OperatorEnv(s, kubeconfig, "10.250.0.0/16",
		fmt.Sprintf("IPSEC_MAX_CONCURRENT_RECONCILES=%d", cfg.workers),
		fmt.Sprintf("IPSEC_OPENSTACK_QPS=%g", cfg.opQPS), fmt.Sprintf("IPSEC_OPENSTACK_BURST=%d", cfg.opBurst),
		"IPSEC_RESYNC_INTERVAL=1h", "IPSEC_SERVICE_CIDR_POOL="+pool)
	must(t, err)
	// BNERD_SCALE_OPERATOR_ENV adds NAME=value settings (comma-separated), for example
	// GOMEMLIMIT=230MiB as the chart's 256Mi limit would set it.
	if extra := os.Getenv("BNERD_SCALE_OPERATOR_ENV"); extra != "" {
		opEnv = append(opEnv, strings.Split(extra, ",")...)
	}
	op := &harness.Operator{Bin: bin, Env: opEnv, Args: []string{"--leader-elect=false", "--profiling", "--zap-log-level=error"}, LogPath: filepath.Join(dir, "operator.log")}
	var cg *harness.MemCgroup
	if cfg.memoryLimitMiB > 0 {
		// As in the chart's container: the operator reads the limit at start and sets its
		// Go memory limit to 90 % of it; the kernel kills it if it goes over.
		cg, err = harness.MemoryCgroup(fmt.Sprintf("bnerd-scale-%d", os.Getpid()), cfg.memoryLimitMiB)
		must(t, err)
		op.CgroupProcs = cg.Procs()
		defer func() {
			op.Stop()
			peak := cg.PeakMiB()
			kills, err := cg.Close()
			fmt.Printf("memory cgroup of %d MiB: peak charge %d MiB over the whole run, %d OOM kill(s) of the operator (removing it: %v)\n", cfg.memoryLimitMiB, peak, kills, err)
			if kills > 0 {
				t.Errorf("the operator was OOM-killed %d time(s) in its %d MiB cgroup", kills, cfg.memoryLimitMiB)
			}
		}()
	}
	must(t, op.Start())
	defer op.Stop()
	must(t, op.WaitServing(ctx, time.Minute))
	rss := sampleRSS(op)

	fmt.Printf("operator settings: %s; memory cgroup %d MiB (0: none)\n", os.Getenv("BNERD_SCALE_OPERATOR_ENV"), cfg.memoryLimitMiB)
	fmt.Printf("slow cloud: %d gateways, %d ClusterLinks, latency %s, cloud rate limit %g/s burst %d (0: none), operator pacing %g/s burst %d (0: none), %d workers per controller\n",
		cfg.gateways, cfg.links, cfg.latency, cfg.simQPS, cfg.simBurst, cfg.opQPS, cfg.opBurst, cfg.workers)

	// The lists of every port on a network (the query names the network and nothing
	// else but the attributes wanted): a ClusterLink's look at the occupied transit
	// addresses before it allocates.
	s.Tally(wholeNetworkPortLists, func(r openstacksim.RequestRecord) bool {
		if r.Method != http.MethodGet || r.Path != "/network/v2.0/ports" {
			return false
		}
		q, err := url.ParseQuery(r.Query)
		if err != nil || !q.Has("network_id") {
			return false
		}
		delete(q, "fields")
		return len(q) == 1
	})

	// 1. Create everything at once, from several clients, and wait for Ready.
	apiBefore, apiErr := apiServerWrites(ctx, env)
	s.ResetCounters()
	limitedBefore := s.RateLimited()
	t0 := time.Now()
	var profileDone chan struct{}
	if cfg.profile != "" {
		profileDone = make(chan struct{})
		var pw sync.WaitGroup
		pw.Add(3)
		// BNERD_SCALE_PROFILE_AFTER starts the profiles later, in the middle of the run.
		after, _ := time.ParseDuration(os.Getenv("BNERD_SCALE_PROFILE_AFTER"))
		go func() {
			defer pw.Done()
			time.Sleep(after)
			captureProfile(t, op, cfg.profile+".operator", 30*time.Second)
		}()
		go func() {
			defer pw.Done()
			time.Sleep(after)
			captureAPIServerProfile(t, env, cfg.profile+".apiserver", 30*time.Second)
		}()
		go func() {
			defer pw.Done()
			time.Sleep(after)
			captureSelfProfile(t, cfg.profile+".simulator", 30*time.Second)
		}()
		go func() { pw.Wait(); close(profileDone) }()
	}
	split := startCPUSplit(op.Pid())
	createAll(t, ctx, c, cfg.createClients, cfg.links, func(i int) client.Object {
		return &v1alpha1.ClusterLink{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("link-%03d", i)},
			Spec: v1alpha1.ClusterLinkSpec{ServiceClusterRouter: harness.ServiceClusterRouter(i), ServiceClusterCIDR: fmt.Sprintf("10.%d.%d.0/24", 100+i/250, i%250)}}
	})
	createAll(t, ctx, c, cfg.createClients, cfg.gateways, func(i int) client.Object {
		return &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("gw-%04d", i)}, Spec: gwSpec(i)}
	})
	created := time.Since(t0)
	gwReady := waitReady(t, ctx, env, ns, cfg.gateways, cfg.links, 60*time.Minute)
	wall := time.Since(t0)
	apiAfter, err := apiServerWrites(ctx, env)
	if apiErr == nil {
		apiErr = err
	}
	fmt.Printf("create: %s\n", split)
	cc := s.Counters()
	limited := s.RateLimited() - limitedBefore
	_, peak := op.RSSKiB()
	if profileDone != nil {
		<-profileDone
		if resp, err := http.Get("http://" + op.MetricsAddr() + "/debug/pprof/heap"); err == nil {
			if f, err := os.Create(cfg.profile + ".operator-heap"); err == nil {
				_, _ = io.Copy(f, resp.Body)
				f.Close()
				fmt.Printf("heap profile of the operator (all Ready) in %s.operator-heap\n", cfg.profile)
			}
			resp.Body.Close()
		}
	}
	fmt.Printf("create: objects created in %s; all %d gateways Ready after %s, and every ClusterLink Ready with %d reverse routes after %s\n",
		created.Round(100*time.Millisecond), cfg.gateways, gwReady.Round(100*time.Millisecond), cfg.gateways, wall.Round(100*time.Millisecond))
	fmt.Printf("create: OpenStack requests %d (%.1f per gateway), writes %d (%.1f per gateway), answered 429 by the cloud %d, tokens %d\n",
		cc.Total(), float64(cc.Total())/float64(cfg.gateways), cc.Writes, float64(cc.Writes)/float64(cfg.gateways), limited, cc.Tokens)
	fmt.Printf("create: operator peak RSS %d MiB (VmHWM; sampled max %d MiB)\n", peak/1024, rss.max()/1024)
	if cg != nil {
		fmt.Printf("create: the operator's memory cgroup (limit %d MiB) charged at most %d MiB\n", cfg.memoryLimitMiB, cg.PeakMiB())
	}
	fmt.Printf("create: requests by route: %s\n", topRoutes(cc.ByRoute, 14))
	fmt.Printf("create: lists of every port of a network (the links' occupied transit addresses) %d\n", cc.Tallies[wholeNetworkPortLists])
	// Each is a create the kube-apiserver pays for, as it does for the owned objects.
	ev, reasons := eventReasonsSince(t, ctx, c, t0)
	fmt.Printf("create: Events %d (%.1f per gateway); occurrences by kind and reason: %s\n", ev, float64(ev)/float64(cfg.gateways), topRoutes(reasons, 12))
	if apiErr != nil {
		fmt.Printf("create: the kube-apiserver's request counts not read: %v\n", apiErr)
	} else {
		byKind, total := apiServerWritesSince(apiBefore, apiAfter)
		fmt.Printf("create: kube-apiserver writes %d (%.1f per gateway; the harness's creates of the gateways and links included): %s\n",
			total, float64(total)/float64(cfg.gateways), topRoutes(byKind, 16))
	}
	for _, verb := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		sum, _ := op.Metrics(ctx, "rest_client_request_duration_seconds_sum", "verb="+verb)
		n, _ := op.Metrics(ctx, "rest_client_request_duration_seconds_count", "verb="+verb)
		if n > 0 {
			fmt.Printf("create: API server %s requests %.0f, mean %.0f ms\n", verb, n, 1000*sum/n)
		}
	}
	for _, ctl := range []string{"ipsecgateway", "clusterlink"} {
		total, _ := op.Metrics(ctx, "controller_runtime_reconcile_total", "controller="+ctl)
		errs, _ := op.Metrics(ctx, "controller_runtime_reconcile_errors_total", "controller="+ctl)
		requeue, _ := op.Metrics(ctx, "controller_runtime_reconcile_total", "controller="+ctl, "result=requeue_after")
		retries, _ := op.Metrics(ctx, "workqueue_retries_total", "name="+ctl)
		fmt.Printf("create: %s reconciles %.0f (errors %.0f, requeued after a delay %.0f), workqueue retries %.0f\n", ctl, total, errs, requeue, retries)
	}

	// 2. Steady state: nothing to do, nothing done.
	s.ResetCounters()
	quiet := apiWrites(t, ctx, c, ns)
	time.Sleep(30 * time.Second)
	sc := s.Counters()
	fmt.Printf("steady (30 s idle): OpenStack requests %d, writes %d; API objects changed %d\n", sc.Total(), sc.Writes, quiet.changed(t, ctx, c, ns))
	if sc.Total() > 0 {
		fmt.Printf("steady: requests by route: %s\n", topRoutes(sc.ByRoute, 14))
	}
	if sc.Writes != 0 {
		t.Errorf("steady state made %d OpenStack writes: %v", sc.Writes, sc.ByRoute)
	}

	// 3. A restart: the first full pass costs reads only.
	before := apiWrites(t, ctx, c, ns)
	op.Kill()
	s.ResetCounters()
	t1 := time.Now()
	must(t, op.Start())
	passWait(t, ctx, op, cfg.gateways, cfg.links)
	pass := time.Since(t1)
	pc := s.Counters()
	changed := before.changed(t, ctx, c, ns)
	events := eventsSince(t, ctx, c, t1)
	fmt.Printf("restart: first full pass in %s; OpenStack requests %d (%.2f per gateway), writes %d; API objects changed %d, Events %d\n",
		pass.Round(100*time.Millisecond), pc.Total(), float64(pc.Total())/float64(cfg.gateways), pc.Writes, changed, events)
	fmt.Printf("restart: requests by route: %s\n", topRoutes(pc.ByRoute, 14))
	if pc.Writes != 0 || changed != 0 || events != 0 {
		t.Errorf("the first pass after a restart wrote: %d OpenStack writes (%v), %d API objects changed, %d Events", pc.Writes, pc.ByRoute, changed, events)
	}

	// 4. Concurrent creates by 8 clients while the operator is killed and restarted: the
	// service-CIDR pool is rebuilt from status each time, never handing a /24 out twice.
	if cfg.concurrentCreates > 0 {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < cfg.restartDuringBurst; i++ {
				time.Sleep(3 * time.Second)
				op.Kill()
				if err := op.Start(); err != nil {
					t.Errorf("restarting the operator: %v", err)
					return
				}
			}
		}()
		createAll(t, ctx, c, cfg.createClients, cfg.concurrentCreates, func(i int) client.Object {
			return &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("burst-%04d", i)}, Spec: gwSpec(cfg.gateways + i)}
		})
		wg.Wait()
		waitReady(t, ctx, env, ns, cfg.gateways+cfg.concurrentCreates, cfg.links, 30*time.Minute)
		in, err := harness.BuildAuditInput(ctx, c, s, baseline, nil)
		must(t, err)
		rep := harness.Audit(s.Objects(), in)
		fmt.Printf("restart during %d concurrent creates (8 clients, %d restarts): audit %s\n", cfg.concurrentCreates, cfg.restartDuringBurst, rep)
		if p := rep.Problems(); len(p) > 0 {
			t.Errorf("audit: %s", harness.Summarize(p, 40))
		}
	}
	if t.Failed() {
		fmt.Printf("operator log: %s\n", op.LogTail(40))
	}
}

// createAll creates n objects from clients goroutines.
func createAll(t *testing.T, ctx context.Context, c client.Client, clients, n int, obj func(i int) client.Object) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	for k := 0; k < clients; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := c.Create(ctx, obj(i)); err != nil {
					t.Errorf("create %d: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// linkCarries: the link is Ready and reaches all n gateways: a route to each
// (PerGateway), or its one route to the pool (Aggregate; it reaches every gateway once the
// gateway cluster's router carries the per-gateway routes, which the gateways' own
// RoutingReady phase reports, and waitReady waits for those first).
func linkCarries(lk *v1alpha1.ClusterLink, n int) bool {
	if !meta.IsStatusConditionTrue(lk.Status.Conditions, v1alpha1.ConditionReady) {
		return false
	}
	if lk.Status.ReverseRouteMode != v1alpha1.ReverseRouteAggregate {
		return len(lk.Status.ReverseRoutes) == n
	}
	return len(lk.Status.ReverseRoutes) == 1
}

// waitReady waits until n gateways in ns are converged (every phase condition True) and
// every ClusterLink is Ready with a reverse route to each of them; it returns when the
// gateways had all converged.
func waitReady(t *testing.T, ctx context.Context, env *testenv.Env, ns string, n, links int, bound time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(bound)
	if ready := watchConverged(t, ctx, env, ns, n, deadline); ready < n {
		t.Fatalf("%d of %d gateways Ready", ready, n)
	}
	gwAt := time.Since(start)
	for {
		// Links carry a route per gateway in their status: listed only now, once a second.
		var cl v1alpha1.ClusterLinkList
		must(t, env.Client.List(ctx, &cl))
		linksDone := 0
		for i := range cl.Items {
			if linkCarries(&cl.Items[i], n) {
				linksDone++
			}
		}
		if linksDone == links {
			return gwAt
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d ClusterLinks Ready with %d reverse routes", linksDone, links, n)
		}
		time.Sleep(time.Second)
	}
}

// watchConverged follows the gateways in ns through an informer (controller-runtime's
// cache: one list, then the watch, listing again only when the watch loses its place)
// until n of them are converged or the deadline passes, and returns how many are. Not a
// list from the API server a second: listing thousands of gateways every second cost the
// kube-apiserver (and this process) CPU the operator would otherwise have had, so it was
// part of what the run measured. The local copy is counted every 100 ms.
func watchConverged(t *testing.T, ctx context.Context, env *testenv.Env, ns string, n int, deadline time.Time) int {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gws, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	must(t, err)
	_, err = gws.GetInformer(ctx, &v1alpha1.IPsecGateway{})
	must(t, err)
	go func() { _ = gws.Start(ctx) }()
	if !gws.WaitForCacheSync(ctx) {
		t.Fatal("the gateways' informer did not sync")
	}
	for {
		var l v1alpha1.IPsecGatewayList
		must(t, gws.List(ctx, &l, client.UnsafeDisableDeepCopy))
		ready := 0
		for i := range l.Items {
			// Converged: every phase True (Ready also needs a running pod and the status
			// agent's report, which no kubelet provides here).
			if converged(l.Items[i].Status.Conditions, l.Items[i].Generation) {
				ready++
			}
		}
		if ready >= n || time.Now().After(deadline) {
			return ready
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// passWait waits for the restarted operator's first pass: every gateway and link
// reconciled at least once (the operator's own reconcile counters), then quiet.
func passWait(t *testing.T, ctx context.Context, op *harness.Operator, gateways, links int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Minute)
	last, stableSince := -1.0, time.Now()
	for {
		gw, err1 := op.Metrics(ctx, "controller_runtime_reconcile_total", "controller=ipsecgateway")
		cl, err2 := op.Metrics(ctx, "controller_runtime_reconcile_total", "controller=clusterlink")
		if err1 == nil && err2 == nil {
			total := gw + cl
			if total != last {
				last, stableSince = total, time.Now()
			}
			if gw >= float64(gateways) && cl >= float64(links) && time.Since(stableSince) > 3*time.Second {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first pass did not finish (reconciles: gateways %v, links %v)", gw, cl)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// objectVersions records the resourceVersion of every object the operator writes.
type objectVersions map[string]string

func apiWrites(t *testing.T, ctx context.Context, c client.Client, ns string) objectVersions {
	t.Helper()
	out := objectVersions{}
	add := func(kind string, list client.ObjectList, opts ...client.ListOption) {
		must(t, c.List(ctx, list, opts...))
		items, err := meta.ExtractList(list)
		must(t, err)
		for _, it := range items {
			o := it.(client.Object)
			out[kind+"/"+o.GetNamespace()+"/"+o.GetName()] = o.GetResourceVersion()
		}
	}
	add("IPsecGateway", &v1alpha1.IPsecGatewayList{}, client.InNamespace(ns))
	add("ClusterLink", &v1alpha1.ClusterLinkList{})
	add("ConfigMap", &corev1.ConfigMapList{}, client.InNamespace(ns))
	add("Secret", &corev1.SecretList{}, client.InNamespace(ns))
	add("ServiceAccount", &corev1.ServiceAccountList{}, client.InNamespace(ns))
	add("Role", &rbacv1.RoleList{}, client.InNamespace(ns))
	add("RoleBinding", &rbacv1.RoleBindingList{}, client.InNamespace(ns))
	add("Deployment", &appsv1.DeploymentList{}, client.InNamespace(ns))
	add("NetworkPolicy", &networkingv1.NetworkPolicyList{}, client.InNamespace(ns))
	nads := &unstructured.UnstructuredList{}
	nads.SetGroupVersionKind(render.NADGVK.GroupVersion().WithKind(render.NADGVK.Kind + "List"))
	add("NAD", nads, client.InNamespace(ns))
	return out
}

// changed counts objects created, changed or deleted since v was taken.
func (v objectVersions) changed(t *testing.T, ctx context.Context, c client.Client, ns string) int {
	now := apiWrites(t, ctx, c, ns)
	n := 0
	for k, rv := range now {
		if v[k] != rv {
			n++
		}
	}
	for k := range v {
		if _, ok := now[k]; !ok {
			n++
		}
	}
	return n
}

func eventsSince(t *testing.T, ctx context.Context, c client.Client, since time.Time) int {
	n, _ := eventReasonsSince(t, ctx, c, since)
	return n
}

// eventReasonsSince counts the Events created since then and their occurrences by
// "kind reason" (an Event repeated within its series counts each time: the repeats are
// the kube-apiserver's Event patches).
func eventReasonsSince(t *testing.T, ctx context.Context, c client.Client, since time.Time) (int, map[string]int) {
	t.Helper()
	var l eventsv1.EventList
	must(t, c.List(ctx, &l))
	n := 0
	by := map[string]int{}
	for _, e := range l.Items {
		if !e.CreationTimestamp.Time.Before(since.Truncate(time.Second)) {
			n++
			times := 1
			if e.Series != nil {
				times = int(e.Series.Count)
			}
			by[e.Regarding.Kind+" "+e.Reason] += times
		}
	}
	return n, by
}

type rssSampler struct {
	mu  sync.Mutex
	top int64
}

func (r *rssSampler) max() int64 { r.mu.Lock(); defer r.mu.Unlock(); return r.top }

// sampleRSS records the operator's resident set every 250 ms (the peak of the running
// process is also in VmHWM; sampling survives restarts).
func sampleRSS(op *harness.Operator) *rssSampler {
	r := &rssSampler{}
	go func() {
		for {
			now, _ := op.RSSKiB()
			r.mu.Lock()
			if now > r.top {
				r.top = now
			}
			r.mu.Unlock()
			time.Sleep(250 * time.Millisecond)
		}
	}()
	return r
}

// captureProfile writes a CPU profile of the operator (its --profiling endpoint).
func captureProfile(t *testing.T, op *harness.Operator, path string, d time.Duration) {
	addr := op.MetricsAddr()
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(d.Seconds())))
	if err != nil {
		t.Logf("profile: %v", err)
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		t.Logf("profile: %v", err)
		return
	}
	defer f.Close()
	_, _ = io.Copy(f, resp.Body)
	fmt.Printf("CPU profile of the operator (first %s of the creation) in %s\n", d, path)
}

// captureAPIServerProfile writes a CPU profile of the kube-apiserver (its
// /debug/pprof, open to the control plane's admin).
func captureAPIServerProfile(t *testing.T, env *testenv.Env, path string, d time.Duration) {
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Logf("apiserver profile: %v", err)
		return
	}
	b, err := cs.RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(int(d.Seconds()))).Timeout(d + 30*time.Second).DoRaw(context.Background())
	if err != nil {
		t.Logf("apiserver profile: %v", err)
		return
	}
	if err := os.WriteFile(path, b, 0o600); err == nil {
		fmt.Printf("CPU profile of the kube-apiserver in %s\n", path)
	}
}

// captureSelfProfile writes a CPU profile of this process: the simulator and the
// harness.
func captureSelfProfile(t *testing.T, path string, d time.Duration) {
	f, err := os.Create(path)
	if err != nil {
		t.Logf("profile: %v", err)
		return
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Logf("profile: %v", err)
		return
	}
	time.Sleep(d)
	pprof.StopCPUProfile()
	fmt.Printf("CPU profile of the simulator (this process) in %s\n", path)
}

func topRoutes(m map[string]int, n int) string {
	type kv struct {
		k string
		v int
	}
	var l []kv
	for k, v := range m {
		l = append(l, kv{k, v})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].v > l[j].v })
	var parts []string
	for i := 0; i < len(l) && i < n; i++ {
		parts = append(parts, fmt.Sprintf("%s %d", l[i].k, l[i].v))
	}
	return strings.Join(parts, "; ")
}
