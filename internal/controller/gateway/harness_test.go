package gateway

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/conditions"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/operatorconfig"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	// client-go's reflectors log through the global logger; keep it quiet.
	ctrllog.SetLogger(logr.Discard())
	testenv.Main(m, &env)
}

// Servers of examples/sim-estate.yaml, in the operator's project.
const (
	serverA = "11111111-1111-4111-8111-111111111111"
	serverB = "22222222-2222-4222-8222-222222222222"
	serverC = "33333333-3333-4333-8333-333333333333"
)

const pollTimeout = 60 * time.Second

// eventually polls cond until it holds or the generous timeout passes. It asserts an
// outcome, never how fast it came.
func eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(pollTimeout)
	var last string
	for {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached: %s", what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type logCapture struct {
	mu    sync.Mutex
	lines []string
}

func (c *logCapture) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		c.mu.Lock()
		c.lines = append(c.lines, prefix+" "+args)
		c.mu.Unlock()
	}, funcr.Options{})
}

func (c *logCapture) count(substr string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, l := range c.lines {
		if strings.Contains(l, substr) {
			n++
		}
	}
	return n
}

type countingRecorder struct {
	n      atomic.Int64
	mu     sync.Mutex
	events []string
	// about holds the namespace/name of the object each event is about.
	about []string
}

func (r *countingRecorder) Eventf(regarding, _ runtime.Object, typ, reason, _, format string, args ...any) {
	r.n.Add(1)
	key := ""
	if o, ok := regarding.(client.Object); ok {
		key = o.GetNamespace() + "/" + o.GetName()
	}
	r.mu.Lock()
	r.events = append(r.events, typ+" "+reason+" "+fmt.Sprintf(format, args...))
	r.about = append(r.about, key)
	r.mu.Unlock()
}

// of lists the events about the object ns/name.
func (r *countingRecorder) of(ns, name string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for i, e := range r.events {
		if r.about[i] == ns+"/"+name {
			out = append(out, e)
		}
	}
	return out
}

// has reports whether an Event's message contains s.
func (r *countingRecorder) has(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if strings.Contains(e, s) {
			return true
		}
	}
	return false
}

// await reports whether an Event's message contains s, waiting for it up to eventWait:
// an Event is sent after the status write that records it, so a test that saw the
// status may look a moment before the Event is there.
func (r *countingRecorder) await(s string) bool {
	return awaitTrue(func() bool { return r.has(s) })
}

// awaitOf lists the Events about ns/name once one of them satisfies match, waiting for
// it up to eventWait as await does (then lists what there is).
func (r *countingRecorder) awaitOf(ns, name string, match func(string) bool) []string {
	awaitTrue(func() bool { return slices.ContainsFunc(r.of(ns, name), match) })
	return r.of(ns, name)
}

// eventWait bounds await: far longer than the moment between a status write and its
// Events, short enough that a missing Event fails soon.
const eventWait = 10 * time.Second

func awaitTrue(cond func() bool) bool {
	deadline := time.Now().Add(eventWait)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// harness is one test's world: a simulator, a namespace, nodes and (optionally) a
// running manager with the reconciler.
type harness struct {
	t       *testing.T
	ctx     context.Context
	sim     *openstacksim.Server
	os      *openstack.Clients
	ns      string
	cfg     operatorconfig.Config
	logs    *logCapture
	events  *countingRecorder
	writes  atomic.Int64 // API-server writes through the reconciler's client
	dryRuns atomic.Int64 // server-side dry runs through it (they write nothing)
	r       *Reconciler
	stopMgr func()
	nodes   []string
	// lastReconcile is when the manager last finished a reconcile (unix nanos).
	lastReconcile atomic.Int64
	// reconciles counts finished reconciles; inflight those running now, maxInflight
	// the most that ran at once.
	reconciles, inflight, maxInflight atomic.Int64
	// healthReconciles counts the health controllers' reconciles.
	healthReconciles atomic.Int64
	// wait paces the Nova polls (PortWait); zero takes the harness default.
	wait openstack.WaitOpts
	// extraNS are namespaces besides ns the manager watches (tenancy tests); policyNS
	// those of them the harness's own policy selects with ns (one tenant).
	extraNS, policyNS []string
}

func (h *harness) cachedNamespaces() map[string]cache.Config {
	m := map[string]cache.Config{h.ns: {}}
	for _, n := range h.extraNS {
		m[n] = cache.Config{}
	}
	return m
}

var nsCounter atomic.Int64

func testConfig() operatorconfig.Config {
	cfg := operatorconfig.Default()
	cfg.Namespace = "bnerd-vpn-system"
	cfg.GatewayNetwork = "vpn-transit"
	cfg.ExternalNetwork = "public"
	cfg.Router = "shoot--services--vpn01"
	// The gateway cluster's node network: the fabric's own sources (never the gateway
	// network 10.254.0.0/24, which the operator takes out of the internal sources).
	cfg.InternalSourceCIDRs = []netip.Prefix{netip.MustParsePrefix("10.250.0.0/16")}
	// Long enough that no periodic resync disturbs a measurement.
	cfg.ResyncInterval = 30 * time.Minute
	cfg.MaxConcurrentReconciles = 4
	return cfg
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	testenv.Need(t)
	seed, err := openstacksim.LoadSeed(filepath.Join(testenv.RepoRoot(), "examples", "sim-estate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := openstacksim.Start(seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	id, secret, ok := s.AppCredential("vpn-operator")
	if !ok {
		t.Fatal("seed has no vpn-operator application credential")
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	clients, err := openstack.NewClients(ctx, openstack.Credential{
		AuthURL: s.AuthURL(), Region: s.Region(), AppCredentialID: id, AppCredentialSecret: secret,
	}, openstack.ClientOptions{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{
		t: t, ctx: ctx, sim: s, os: clients, cfg: testConfig(),
		ns:     fmt.Sprintf("gw-test-%d-%d", time.Now().UnixNano()%100000, nsCounter.Add(1)),
		logs:   &logCapture{},
		events: &countingRecorder{},
	}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: h.ns}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.cleanup)
	h.createPolicy()
	t.Cleanup(func() {
		// A failed test shows what the reconcilers said last.
		if t.Failed() {
			h.logs.mu.Lock()
			lines := h.logs.lines[max(0, len(h.logs.lines)-40):]
			h.logs.mu.Unlock()
			t.Logf("last reconciler log lines:\n%s", strings.Join(lines, "\n"))
		}
	})
	return h
}

// harnessPolicy is what the harness's own VPNTenantPolicy allows its namespaces: the
// node network as exposure targets (spec's portal lives there), routed mode in the
// private ranges, the floating IPs the pinning tests use, and limits no test reaches
// unless it sets its own (policySpec).
func harnessPolicy() v1alpha1.VPNTenantPolicySpec {
	n := func(v int32) *int32 { return &v }
	return v1alpha1.VPNTenantPolicySpec{
		ExposureTargets: []string{"10.250.0.0/16"},
		RoutedSubnets:   []string{"192.168.0.0/16", "10.0.0.0/8", "172.16.0.0/12"},
		FloatingIPs:     []string{pinnedFIP, "203.0.113.99"},
		Limits:          v1alpha1.TenantLimits{Gateways: n(1000), Tunnels: n(10000), RoutedSubnets: n(1000), Exposures: n(100000), ReverseExposurePorts: n(100000)},
	}
}

// policyName is the harness's VPNTenantPolicy: it selects h.ns and the namespaces the
// test adds (namespace).
func (h *harness) policyName() string { return "harness-" + h.ns }

func (h *harness) createPolicy() {
	h.t.Helper()
	p := &v1alpha1.VPNTenantPolicy{ObjectMeta: metav1.ObjectMeta{Name: h.policyName()}, Spec: harnessPolicy()}
	p.Spec.NamespaceSelector = h.policySelector()
	if err := env.Client.Create(h.ctx, p); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = env.Client.Delete(context.Background(), p) })
}

func (h *harness) policySelector() metav1.LabelSelector {
	return metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: append([]string{h.ns}, h.policyNS...)}}}
}

// policySpec changes the harness's policy (fn gets the spec; the selector is kept up to
// date with the harness's namespaces); fn nil deletes the policy, so the strict
// defaults apply.
func (h *harness) policySpec(fn func(*v1alpha1.VPNTenantPolicySpec)) {
	h.t.Helper()
	eventually(h.t, "tenant policy updated", func() (bool, string) {
		var p v1alpha1.VPNTenantPolicy
		err := env.Client.Get(h.ctx, client.ObjectKey{Name: h.policyName()}, &p)
		if fn == nil {
			if apierrors.IsNotFound(err) {
				return true, ""
			}
			if err != nil {
				return false, err.Error()
			}
			err = env.Client.Delete(h.ctx, &p)
			return err == nil || apierrors.IsNotFound(err), fmt.Sprint(err)
		}
		if apierrors.IsNotFound(err) {
			p = v1alpha1.VPNTenantPolicy{ObjectMeta: metav1.ObjectMeta{Name: h.policyName()}, Spec: harnessPolicy()}
			fn(&p.Spec)
			p.Spec.NamespaceSelector = h.policySelector()
			err = env.Client.Create(h.ctx, &p)
			return err == nil, fmt.Sprint(err)
		}
		if err != nil {
			return false, err.Error()
		}
		fn(&p.Spec)
		p.Spec.NamespaceSelector = h.policySelector()
		if err := env.Client.Update(h.ctx, &p); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// cleanup runs after the manager is stopped: it removes what would disturb the next
// test (gateways would be seen by the next allocator; nodes by the next node choice).
func (h *harness) cleanup() {
	if h.stopMgr != nil {
		h.stopMgr()
	}
	ctx := context.Background()
	for _, kind := range v1alpha1.GatewayKinds {
		r := &Reconciler{Deps: Deps{Client: env.Client}}
		// Other tenants' namespaces too: their gateways' claims (routed subnets, peers)
		// are cluster-wide.
		for _, ns := range append([]string{h.ns}, h.extraNS...) {
			gws, _ := r.listGateways(ctx, kind, client.InNamespace(ns))
			for _, g := range gws {
				g.obj.SetFinalizers(nil)
				_ = env.Client.Update(ctx, g.obj)
				_ = env.Client.Delete(ctx, g.obj)
			}
		}
	}
	for _, n := range h.nodes {
		_ = env.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
}

func (h *harness) deps() Deps {
	wait := h.wait
	if wait.Interval == 0 {
		wait = openstack.WaitOpts{Timeout: 30 * time.Second, Interval: 20 * time.Millisecond}
	}
	return Deps{
		OpenStack:          h.os,
		Config:             h.cfg,
		Recorder:           h.events,
		Log:                h.logs.logger(),
		PortWait:           wait,
		SkipNameValidation: true,
		Begin: func(string, types.NamespacedName) {
			n := h.inflight.Add(1)
			for {
				m := h.maxInflight.Load()
				if n <= m || h.maxInflight.CompareAndSwap(m, n) {
					break
				}
			}
		},
		Observe: func(string, types.NamespacedName, error) {
			h.inflight.Add(-1)
			h.reconciles.Add(1)
			h.lastReconcile.Store(time.Now().UnixNano())
		},
		ObserveHealth: func(string, types.NamespacedName, error) {
			h.healthReconciles.Add(1)
			h.lastReconcile.Store(time.Now().UnixNano())
		},
	}
}

// countingClient counts every write the reconciler makes to the API server.
func (h *harness) countingClient(c client.WithWatch) client.WithWatch {
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			h.writes.Add(1)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			o := &client.UpdateOptions{}
			if o.ApplyOptions(opts); len(o.DryRun) > 0 {
				h.dryRuns.Add(1)
			} else {
				h.writes.Add(1)
			}
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			h.writes.Add(1)
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			h.writes.Add(1)
			return c.Delete(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			h.writes.Add(1)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			h.writes.Add(1)
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
}

// start runs a manager with a fresh reconciler (a restarted operator: nothing in
// memory but what it rebuilds from the API).
func (h *harness) start() *Reconciler {
	h.t.Helper()
	if h.stopMgr != nil {
		h.stopMgr()
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// As the operator caches: the namespaces of the test, and of those only what
		// CacheScope lets in.
		Cache: cache.Options{DefaultNamespaces: h.cachedNamespaces(), ByObject: CacheScope()},
		NewClient: func(cfg *rest.Config, opts client.Options) (client.Client, error) {
			c, err := client.NewWithWatch(cfg, opts)
			if err != nil {
				return nil, err
			}
			return h.countingClient(c), nil
		},
		Logger: h.logs.logger(),
	})
	if err != nil {
		h.t.Fatal(err)
	}
	r := New(h.deps())
	if err := r.SetupWithManager(mgr); err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			h.t.Errorf("manager: %v", err)
		}
	}()
	h.stopMgr = func() {
		cancel()
		<-done
		h.stopMgr = nil
	}
	h.r = r
	return r
}

func (h *harness) node(name, providerID string, ready bool, labels map[string]string) {
	h.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{ProviderID: providerID}}
	if err := env.Client.Create(h.ctx, n); err != nil {
		h.t.Fatal(err)
	}
	h.nodes = append(h.nodes, name)
	h.setReady(name, ready)
}

func (h *harness) setReady(name string, ready bool) {
	h.t.Helper()
	var n corev1.Node
	if err := env.Client.Get(h.ctx, client.ObjectKey{Name: name}, &n); err != nil {
		h.t.Fatal(err)
	}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(), Reason: "Test"}}
	if err := env.Client.Status().Update(h.ctx, &n); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) psk(name, value string) {
	h.t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name}, Data: map[string][]byte{"psk": []byte(value)}}
	if err := env.Client.Create(h.ctx, s); err != nil {
		if apierrors.IsAlreadyExists(err) {
			var cur corev1.Secret
			_ = env.Client.Get(h.ctx, client.ObjectKeyFromObject(s), &cur)
			cur.Data = s.Data
			if err := env.Client.Update(h.ctx, &cur); err != nil {
				h.t.Fatal(err)
			}
			return
		}
		h.t.Fatal(err)
	}
}

// spec is a valid gateway spec with one tunnel, one TLS exposure and (optionally) one
// reverse exposure.
func spec(reverse bool) v1alpha1.GatewaySpec {
	s := v1alpha1.GatewaySpec{
		Tunnels: []v1alpha1.Tunnel{{
			Name:         "hq",
			Peer:         v1alpha1.Peer{Address: "198.51.100.7", Subnets: []string{"192.168.10.0/24"}},
			PreSharedKey: v1alpha1.SecretKeyRef{Name: "hq-psk", Key: "psk"},
		}},
		Exposures: []v1alpha1.Exposure{{
			Name:   "portal",
			Target: v1alpha1.Target{Address: "10.250.0.20", Ports: []v1alpha1.PortSpec{{Port: 443, Protocol: v1alpha1.ProtocolTCP}}},
		}},
	}
	if reverse {
		s.ReverseExposures = []v1alpha1.ReverseExposure{{
			Name: "erp", Tunnel: "hq",
			Target: v1alpha1.Target{Address: "192.168.10.5", Ports: []v1alpha1.PortSpec{{Port: 8443, Protocol: v1alpha1.ProtocolTCP}}},
		}}
	}
	return s
}

func (h *harness) create(name string, s v1alpha1.GatewaySpec) *v1alpha1.IPsecGateway {
	h.t.Helper()
	gw := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name}, Spec: s}
	if err := env.Client.Create(h.ctx, gw); err != nil {
		h.t.Fatal(err)
	}
	return gw
}

func (h *harness) get(name string) *v1alpha1.IPsecGateway {
	h.t.Helper()
	var gw v1alpha1.IPsecGateway
	if err := env.Client.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: name}, &gw); err != nil {
		h.t.Fatal(err)
	}
	return &gw
}

// mutate applies fn to the gateway's spec, retrying on conflicts.
func (h *harness) mutate(name string, fn func(*v1alpha1.GatewaySpec)) {
	h.t.Helper()
	eventually(h.t, "spec update", func() (bool, string) {
		gw := h.get(name)
		fn(&gw.Spec)
		if err := env.Client.Update(h.ctx, gw); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

func condOf(conds []metav1.Condition, typ string) string {
	c := meta.FindStatusCondition(conds, typ)
	if c == nil {
		return typ + "=<none>"
	}
	return fmt.Sprintf("%s=%s/%s (gen %d): %s", typ, c.Status, c.Reason, c.ObservedGeneration, c.Message)
}

// waitCond waits for a condition of the gateway's current generation.
func (h *harness) waitCond(name, typ string, status metav1.ConditionStatus, reason string) *v1alpha1.IPsecGateway {
	h.t.Helper()
	var gw *v1alpha1.IPsecGateway
	eventually(h.t, fmt.Sprintf("%s %s=%s/%s", name, typ, status, reason), func() (bool, string) {
		gw = h.get(name)
		c := meta.FindStatusCondition(gw.Status.Conditions, typ)
		ok := c != nil && c.Status == status && (reason == "" || c.Reason == reason) && c.ObservedGeneration == gw.Generation
		return ok, condOf(gw.Status.Conditions, typ) + " | " + condOf(gw.Status.Conditions, v1alpha1.ConditionReady)
	})
	return gw
}

// waitConverged waits until every phase condition is True for the gateway's current
// generation: the OpenStack and Kubernetes objects are converged. (Ready also needs a
// ready pod and every tunnel up; envtest runs no kubelet, so a test that wants Ready
// writes the pod and the status agent's report itself: see health_test.go.)
func (h *harness) waitConverged(name string) *v1alpha1.IPsecGateway {
	h.t.Helper()
	var gw *v1alpha1.IPsecGateway
	eventually(h.t, name+" converged", func() (bool, string) {
		gw = h.get(name)
		return converged(gw.Status.Conditions, gw.Generation), condOf(gw.Status.Conditions, v1alpha1.ConditionReady)
	})
	return gw
}

// converged: every phase condition True for generation gen.
func converged(conds []metav1.Condition, gen int64) bool {
	for _, t := range v1alpha1.GatewayPhaseConditionTypes {
		if !conditions.IsTrue(conds, t, gen) {
			return false
		}
	}
	return true
}

func uidTag(uid types.UID) string { return openstack.TagUIDPrefix + string(uid) }

// tagged counts the simulator's objects carrying the gateway's UID tag.
func (h *harness) tagged(uid types.UID) (ports, sgs, fips int) {
	tag := uidTag(uid)
	for _, p := range h.sim.Ports() {
		if contains(p.Tags, tag) {
			ports++
		}
	}
	for _, g := range h.sim.SecurityGroups() {
		if contains(g.Tags, tag) {
			sgs++
		}
	}
	for _, f := range h.sim.FloatingIPs() {
		if contains(f.Tags, tag) {
			fips++
		}
	}
	return
}

func (h *harness) operatorRouter() openstacksim.Router {
	h.t.Helper()
	rt, ok := h.sim.RouterByName("shoot--services--vpn01")
	if !ok {
		h.t.Fatal("no operator router in the seed")
	}
	return rt
}

func routesVia(rt openstacksim.Router, nexthop string) []openstacksim.Route {
	var out []openstacksim.Route
	for _, r := range rt.Routes {
		if r.NextHop == nexthop {
			out = append(out, r)
		}
	}
	return out
}

// ingressRules lists a security group's ingress rules as "proto/port from cidr".
// rulesEventually waits until the group's ingress rules satisfy ok. A condition a test
// waits for can be written before the security-group phase of the same reconcile has
// changed the rules: the key phase's, with the allocation's record (a Record phase).
func (h *harness) rulesEventually(t *testing.T, sgID, what string, ok func([]string) bool) {
	t.Helper()
	eventually(t, what, func() (bool, string) {
		rules := h.ingressRules(sgID)
		return ok(rules), fmt.Sprint(rules)
	})
}

func (h *harness) ingressRules(sgID string) []string {
	h.t.Helper()
	sg, ok := h.sim.SecurityGroup(sgID)
	if !ok {
		h.t.Fatalf("security group %s not found", sgID)
	}
	var out []string
	for _, r := range sg.Rules {
		if r.Direction != "ingress" {
			continue
		}
		out = append(out, keyOf(openstack.SecurityGroupRule{Protocol: r.Protocol, PortRangeMin: r.PortRangeMin, PortRangeMax: r.PortRangeMax, RemoteIPPrefix: r.RemoteIPPrefix}).String())
	}
	sort.Strings(out)
	return out
}

// quiesce waits until the manager has settled: its cache shows the gateway as the API
// server has it and no reconcile finished for a while. Measurements start from there.
func (h *harness) quiesce(name string) {
	h.t.Helper()
	eventually(h.t, "manager quiet", func() (bool, string) {
		live := h.get(name)
		var cached v1alpha1.IPsecGateway
		if err := h.r.Client.Get(h.ctx, client.ObjectKeyFromObject(live), &cached); err != nil {
			return false, err.Error()
		}
		idle := time.Since(time.Unix(0, h.lastReconcile.Load()))
		return cached.ResourceVersion == live.ResourceVersion && idle > time.Second, fmt.Sprintf("cache %s, live %s, idle %s", cached.ResourceVersion, live.ResourceVersion, idle)
	})
}

// reconcileOnce runs one reconcile of the gateway directly (outside the manager's queue).
func (h *harness) reconcileOnce(name string) error {
	return h.r.reconcile(h.ctx, v1alpha1.KindIPsecGateway, types.NamespacedName{Namespace: h.ns, Name: name})
}

// testPSK is a pre-shared key long enough for the floor (20 bytes).
const testPSK = "a test key of more than twenty bytes"
