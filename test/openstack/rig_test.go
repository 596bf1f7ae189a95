// Package realopenstack runs the operator's controllers against the real OpenStacks of
// hack/openstack.sh (Keystone, Neutron, Nova with the fake virt driver; Zed with its
// legacy policy defaults and 2025.1 with the secure-RBAC defaults and scope checks) and
// a real API server: gateways and ClusterLinks from create to Ready, a steady state that
// writes nothing, and a delete after which an audit of the real Neutron and Nova finds
// nothing the operator made. Every test runs once per release, as a subtest named after
// the release's target.
//
// It needs BNERD_OPENSTACK=real,real-2025.1 (make test sets it, and
// BNERD_REQUIRE_OPENSTACK=1 as root) and the control plane binaries; without them it
// skips, saying why.
package realopenstack

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/controller/clusterlink"
	"bnerd.net/vpn-operator/internal/controller/gateway"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/operatorconfig"
	"bnerd.net/vpn-operator/internal/testinfra/realstack"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	testenv.Main(m, &env)
}

var (
	sweptMu sync.Mutex
	swept   = map[realstack.Release]*sync.Once{}
)

// forReleases runs fn as a subtest for every release the run asks for (or demands),
// one after the other: the reconcilers' metrics, which the rigs read, are the process's.
func forReleases(t *testing.T, fn func(t *testing.T, rel realstack.Release)) {
	t.Helper()
	rels := realstack.Wanted()
	if len(rels) == 0 {
		t.Skipf("no real OpenStack asked for (%s=real,real-2025.1, as make test sets it)", realstack.TargetsEnv)
	}
	for _, rel := range rels {
		t.Run(rel.Target(), func(t *testing.T) { fn(t, rel) })
	}
}

// cleanEstate removes what an interrupted earlier run left, once per run and cloud.
func cleanEstate(t *testing.T, c *realstack.Cloud) {
	t.Helper()
	var err error
	sweptMu.Lock()
	once := swept[c.Release]
	if once == nil {
		once = &sync.Once{}
		swept[c.Release] = once
	}
	sweptMu.Unlock()
	once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		var removed []string
		removed, err = sweepEstate(ctx, c)
		if len(removed) > 0 {
			t.Logf("removed what an earlier run left: %v", removed)
		}
	})
	if err != nil {
		t.Fatalf("cleaning the estate: %v", err)
	}
}

// Real OpenStack is slow (a port create takes about a second): waits are generous.
const waitTimeout = 5 * time.Minute

// writeLog records every OpenStack request that changes something, in order.
type writeLog struct {
	mu     sync.Mutex
	writes []string
	next   http.RoundTripper
}

func (l *writeLog) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead && !strings.HasSuffix(r.URL.Path, "/auth/tokens") {
		l.mu.Lock()
		l.writes = append(l.writes, r.Method+" "+template(r.URL.Path))
		l.mu.Unlock()
	}
	return l.next.RoundTrip(r)
}

// template replaces IDs in a path: "PUT /v2.0/routers/{id}/remove_extraroutes".
func template(path string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		if len(strings.ReplaceAll(s, "-", "")) == 32 {
			segs[i] = "{id}"
		}
	}
	return strings.Join(segs, "/")
}

func (l *writeLog) since(mark int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.writes[mark:])
}

func (l *writeLog) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.writes)
}

// rig is one test's world: the real estate, an API server namespace, Nodes backed by
// the estate's Nova servers, and a manager running both reconcilers.
type rig struct {
	t     *testing.T
	ctx   context.Context
	cloud *realstack.Cloud
	// tag tells the release's cluster-scoped objects (Nodes, ClusterLinks) apart: ""
	// for Zed, "2025" for 2025.1.
	tag      string
	os       *openstack.Clients // the operator's (vpn-operator application credential)
	customer *openstack.Clients // the customer's, for looking at its router
	osWrites *writeLog
	k8sWrite atomic.Int64 // API-server writes by the reconcilers
	k8sMu    sync.Mutex
	k8sLog   []string
	runs     atomic.Int64 // finished reconciles
	lastRun  atomic.Int64 // unix nanos of the last finished reconcile
	ns       string
	cfg      operatorconfig.Config
	servers  map[string]string // node name -> Nova server ID
	opts     openstack.ClientOptions
}

var nsCounter atomic.Int64

func newRig(t *testing.T, rel realstack.Release) *rig {
	return newRigAs(t, rel, "vpn-operator")
}

// newRigAs is newRig with the operator running on another credential of the estate.
func newRigAs(t *testing.T, rel realstack.Release, operatorCredential string) *rig {
	t.Helper()
	testenv.Need(t)
	cloud := realstack.NeedRelease(t, rel)
	cleanEstate(t, cloud)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r := &rig{t: t, ctx: ctx, cloud: cloud, osWrites: &writeLog{next: http.DefaultTransport}, servers: map[string]string{}}
	if rel != realstack.Zed {
		r.tag = strings.Split(string(rel), ".")[0]
	}
	r.opts = openstack.ClientOptions{Timeout: time.Minute, Transport: r.osWrites}
	r.os = r.clients(operatorCredential)
	r.customer = r.clients("customer-diehl")
	r.cfg = operatorconfig.Default()
	r.cfg.Namespace = "bnerd-vpn-system"
	r.cfg.GatewayNetwork = "vpn-transit"
	r.cfg.ExternalNetwork = "public"
	r.cfg.Router = "shoot--services--vpn01"
	// The gateway cluster's node network (never the transit network: the operator takes
	// the gateway network out of the internal sources).
	r.cfg.InternalSourceCIDRs = []netip.Prefix{netip.MustParsePrefix("10.250.0.0/16")}
	r.cfg.ResyncInterval = 30 * time.Minute
	r.cfg.MaxConcurrentReconciles = 2
	r.ns = fmt.Sprintf("real-%d-%d", time.Now().UnixNano()%100000, nsCounter.Add(1))
	for _, ns := range []string{r.ns, r.cfg.ClusterLinkCredentialsNamespace} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	// The rig's tenant may expose the node network (its gateways' portal lives there).
	pol := &v1alpha1.VPNTenantPolicy{ObjectMeta: metav1.ObjectMeta{Name: "rig-" + r.ns}, Spec: v1alpha1.VPNTenantPolicySpec{
		NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: r.ns}},
		ExposureTargets:   []string{"10.250.0.0/16"},
	}}
	if err := env.Client.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pol) })
	// The estate's Nova servers back the Nodes: providerID openstack:///<server UUID>.
	for _, name := range []string{"vpn01-worker-a", "vpn01-worker-b", "vpn01-worker-c"} {
		id, err := cloud.ID("servers", "vpn-operator/"+name)
		if err != nil {
			t.Fatal(err)
		}
		node := r.nodeName(strings.TrimPrefix(name, "vpn01-"))
		r.servers[node] = id
		r.node(node, "openstack:///"+id)
	}
	t.Cleanup(func() {
		for n := range r.servers {
			_ = env.Client.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
		}
	})
	r.start()
	return r
}

// nodeName is the release's Node for a worker of the estate ("worker-a").
func (r *rig) nodeName(worker string) string { return "bn-real" + r.tag + "-" + worker }

// linkName is the release's name for a ClusterLink ("svc01").
func (r *rig) linkName(name string) string { return "real" + r.tag + "-" + name }

func (r *rig) clients(name string) *openstack.Clients {
	r.t.Helper()
	cred, err := r.cloud.Credential(name)
	if err != nil {
		r.t.Fatal(err)
	}
	c, err := openstack.NewClients(r.ctx, cred, r.opts)
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

func (r *rig) node(name, providerID string) {
	r.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: providerID}}
	if err := env.Client.Create(r.ctx, n); err != nil {
		r.t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(), Reason: "Test"}}
	if err := env.Client.Status().Update(r.ctx, n); err != nil {
		r.t.Fatal(err)
	}
}

// start runs the operator's two reconcilers, as its main does, in one manager whose
// client counts writes.
func (r *rig) start() {
	r.t.Helper()
	count := func(c client.WithWatch) client.WithWatch {
		add := func(verb string, o client.Object) {
			r.k8sWrite.Add(1)
			r.k8sMu.Lock()
			r.k8sLog = append(r.k8sLog, fmt.Sprintf("%s %T %s/%s", verb, o, o.GetNamespace(), o.GetName()))
			r.k8sMu.Unlock()
		}
		return interceptor.NewClient(c, interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
				add("create", o)
				return c.Create(ctx, o, opts...)
			},
			Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
				// A dry run writes nothing, but it costs the API server an update's work:
				// it counts, named for what it is.
				if (&client.UpdateOptions{}).ApplyOptions(opts).DryRun != nil {
					add("dry-run update", o)
				} else {
					add("update", o)
				}
				return c.Update(ctx, o, opts...)
			},
			Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
				add("patch", o)
				return c.Patch(ctx, o, p, opts...)
			},
			Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
				add("delete", o)
				return c.Delete(ctx, o, opts...)
			},
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, o client.Object, opts ...client.SubResourceUpdateOption) error {
				add("update "+sub+" of", o)
				return c.SubResource(sub).Update(ctx, o, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				add("patch "+sub+" of", o)
				return c.SubResource(sub).Patch(ctx, o, p, opts...)
			},
		})
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{
			r.ns: {}, r.cfg.ClusterLinkCredentialsNamespace: {}, r.cfg.Namespace: {}}},
		NewClient: func(cfg *rest.Config, opts client.Options) (client.Client, error) {
			c, err := client.NewWithWatch(cfg, opts)
			if err != nil {
				return nil, err
			}
			return count(c), nil
		},
		Logger: logr.Discard(),
		// Each test runs its own manager in this process.
		Controller: config.Controller{SkipNameValidation: ptr(true)},
	})
	if err != nil {
		r.t.Fatal(err)
	}
	token, err := r.os.Identity.TokenInfo(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	gw := gateway.New(gateway.Deps{
		OpenStack: r.os, Config: r.cfg, Log: logr.Discard(), SkipNameValidation: true,
		PortWait: openstack.WaitOpts{Timeout: 2 * time.Minute, Interval: 500 * time.Millisecond},
		Observe: func(string, types.NamespacedName, error) {
			r.runs.Add(1)
			r.lastRun.Store(time.Now().UnixNano())
		},
	})
	if err := gw.SetupWithManager(mgr); err != nil {
		r.t.Fatal(err)
	}
	opCred, _ := r.cloud.Credential("vpn-operator")
	cl := clusterlink.New(clusterlink.Deps{
		OpenStack: r.os, OperatorProjectID: token.ProjectID, AuthURL: opCred.AuthURL, Region: opCred.Region,
		CustomerClients: func(ctx context.Context, c openstack.Credential) (*openstack.Clients, error) {
			return openstack.NewClients(ctx, c, r.opts)
		},
		Config: r.cfg,
	})
	if err := cl.SetupWithManager(mgr); err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			r.t.Errorf("manager: %v", err)
		}
	}()
	r.t.Cleanup(func() {
		cancel()
		<-done
	})
}

// eventually polls cond until it holds or waitTimeout passes. It asserts an outcome,
// never how fast it came.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached: %s", what, msg)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func condString(conds []metav1.Condition) string {
	var b strings.Builder
	for _, c := range conds {
		fmt.Fprintf(&b, "%s=%s/%s: %s; ", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

// quiet waits until no reconcile finished for two seconds.
func (r *rig) quiet() {
	r.t.Helper()
	last, at := reconcileTotal(r.t), time.Now()
	eventually(r.t, "reconcilers quiet", func() (bool, string) {
		if n := reconcileTotal(r.t); n != last {
			last, at = n, time.Now()
		}
		idle := time.Since(at)
		return idle > 3*time.Second, fmt.Sprintf("last reconcile %s ago", idle)
	})
}

// steadyState makes the reconcilers run again over converged objects (a metadata
// change wakes them) and checks they wrote nothing, to OpenStack or the API server.
func (r *rig) steadyState(objs ...client.Object) {
	r.t.Helper()
	r.quiet()
	mark, k8s, runs := r.osWrites.mark(), r.k8sWrite.Load(), reconcileTotal(r.t)
	for i, o := range objs {
		patch := client.MergeFrom(o.DeepCopyObject().(client.Object))
		ann := o.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann["test.bnerd.net/poke"] = fmt.Sprint(i, time.Now().UnixNano())
		o.SetAnnotations(ann)
		if err := env.Client.Patch(r.ctx, o, patch); err != nil {
			r.t.Fatal(err)
		}
	}
	eventually(r.t, "reconciles after the poke", func() (bool, string) {
		n := reconcileTotal(r.t) - runs
		return n >= len(objs), fmt.Sprintf("%d reconciles", n)
	})
	r.quiet()
	if w := r.osWrites.since(mark); len(w) != 0 {
		r.t.Errorf("the steady state wrote to OpenStack: %v", w)
	}
	if n := r.k8sWrite.Load() - k8s; n != 0 {
		r.k8sMu.Lock()
		r.t.Errorf("the steady state made %d API-server writes: %v", n, r.k8sLog[len(r.k8sLog)-int(n):])
		r.k8sMu.Unlock()
	}
	r.t.Logf("steady state: %d reconciles, 0 writes", reconcileTotal(r.t)-runs)
}

// reconcileTotal is controller-runtime's count of finished reconciles, every
// controller of the process (both reconcilers report there, with or without a hook).
func reconcileTotal(t *testing.T) int {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			n += m.GetCounter().GetValue()
		}
	}
	return int(n)
}

func (r *rig) psk(name, value string) {
	r.t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name}, Data: map[string][]byte{"psk": []byte(value)}}
	if err := env.Client.Create(r.ctx, s); err != nil {
		r.t.Fatal(err)
	}
}

func gatewaySpec(reverse bool) v1alpha1.GatewaySpec {
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

func (r *rig) createGateway(name string, reverse bool) *v1alpha1.IPsecGateway {
	r.t.Helper()
	gw := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name}, Spec: gatewaySpec(reverse)}
	if err := env.Client.Create(r.ctx, gw); err != nil {
		r.t.Fatal(err)
	}
	// Whatever happens, the reconciler unwinds it before the manager stops.
	r.t.Cleanup(func() { r.deleteAndWait(gw) })
	return gw
}

// gatewayReady waits until every phase condition is True for the current generation:
// the OpenStack and Kubernetes objects are converged. No kubelet runs here, so the
// gateway's own Ready (which also needs the pod and its tunnels) stays False.
func (r *rig) gatewayReady(name string) *v1alpha1.IPsecGateway {
	r.t.Helper()
	var gw v1alpha1.IPsecGateway
	eventually(r.t, "gateway "+name+" converged", func() (bool, string) {
		if err := env.Client.Get(r.ctx, client.ObjectKey{Namespace: r.ns, Name: name}, &gw); err != nil {
			return false, err.Error()
		}
		for _, typ := range v1alpha1.GatewayPhaseConditionTypes {
			c := meta.FindStatusCondition(gw.Status.Conditions, typ)
			if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != gw.Generation {
				return false, condString(gw.Status.Conditions)
			}
		}
		return true, ""
	})
	return &gw
}

func (r *rig) linkReady(name string) *v1alpha1.ClusterLink {
	r.t.Helper()
	var l v1alpha1.ClusterLink
	eventually(r.t, "ClusterLink "+name+" Ready", func() (bool, string) {
		if err := env.Client.Get(r.ctx, client.ObjectKey{Name: name}, &l); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(l.Status.Conditions, v1alpha1.ConditionReady), condString(l.Status.Conditions)
	})
	return &l
}

// deleteAndWait deletes o and waits until its finalizer has run and it is gone.
func (r *rig) deleteAndWait(o client.Object) {
	r.t.Helper()
	if err := env.Client.Delete(r.ctx, o); err != nil && !apierrors.IsNotFound(err) {
		r.t.Fatal(err)
	}
	eventually(r.t, "deletion of "+o.GetName(), func() (bool, string) {
		err := env.Client.Get(r.ctx, client.ObjectKeyFromObject(o), o.DeepCopyObject().(client.Object))
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// audit looks into the real Neutron for anything an owner's tags still name, in the
// operator's and the customer's projects.
func (r *rig) audit(uids ...types.UID) {
	r.t.Helper()
	r.auditWith(map[string]*openstack.Clients{"operator": r.os, "customer": r.customer}, uids...)
}

// auditWith audits with the given clients, by whose project they are.
func (r *rig) auditWith(clients map[string]*openstack.Clients, uids ...types.UID) {
	r.t.Helper()
	for _, uid := range uids {
		sel := openstack.Owner{UID: string(uid)}.Selector()
		for who, c := range clients {
			ports, err := c.Networking.ListPorts(r.ctx, openstack.ListPortsOpts{Tags: sel})
			if err != nil {
				r.t.Fatal(err)
			}
			sgs, err := c.Networking.ListSecurityGroups(r.ctx, sel)
			if err != nil {
				r.t.Fatal(err)
			}
			fips, err := c.Networking.ListFloatingIPs(r.ctx, openstack.ListFloatingIPsOpts{Tags: sel})
			if err != nil {
				r.t.Fatal(err)
			}
			if len(ports)+len(sgs)+len(fips) != 0 {
				r.t.Errorf("left behind in the %s's project for %s: %d ports, %d security groups, %d floating IPs", who, uid, len(ports), len(sgs), len(fips))
			}
		}
	}
}

func (r *rig) router(c *openstack.Clients, name string) *openstack.Router {
	r.t.Helper()
	rt, err := c.Networking.ResolveRouter(r.ctx, name)
	if err != nil {
		r.t.Fatal(err)
	}
	return rt
}

// routesVia lists a router's routes through nexthop or to destination.
func routesMatching(rt *openstack.Router, destination, nexthop string) []openstack.Route {
	var out []openstack.Route
	for _, x := range rt.Routes {
		if (destination != "" && x.Destination == destination) || (nexthop != "" && x.NextHop == nexthop) {
			out = append(out, x)
		}
	}
	return out
}

func ptr[T any](v T) *T { return &v }
