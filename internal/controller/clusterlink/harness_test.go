package clusterlink

import (
	"context"
	"fmt"
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
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/operatorconfig"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

var env *testenv.Env

// Everything logged and every Event of the whole suite, scanned for Secret values by
// TestNoSecretInLogsOrEvents and, after the last test, by scanSuite.
var (
	captureMu sync.Mutex
	captured  []string
	// secretValues are the distinctive application credential IDs and secrets the
	// seeds use; none may ever appear in a log line, an Event or a status.
	secretValues []string
)

func capture(s string) {
	captureMu.Lock()
	captured = append(captured, s)
	captureMu.Unlock()
}

var testLogger = funcr.New(func(prefix, args string) { capture(prefix + " " + args) }, funcr.Options{Verbosity: 10})

func TestMain(m *testing.M) {
	ctrl.SetLogger(testLogger)
	testenv.Main(m, &env, scanSuite)
}

const credNS = operatorconfig.DefaultClusterLinkCredentialsNamespace

// Fixed project IDs, so messages in tests are readable.
const (
	projOperator = "0a1b2c3d4e5f40718293a4b5c6d7e8f9"
	projDiehl    = "d1e2b1c0ffee4a5b8c9d0e1f2a3b4c5d"
	projOther    = "0f0e0d0c0b0a49988776655443322110"
	projAdmin    = "adadadadadad4adadadadadadadadada"
)

// appCred is one seeded application credential with distinctive values.
type appCred struct{ id, secret string }

var creds = map[string]appCred{}

func cred(name string) appCred {
	if c, ok := creds[name]; ok {
		return c
	}
	c := appCred{id: "acid-" + name + "-7f3e9a", secret: "ZZSECRET-" + name + "-c4d1e8b2a9"}
	creds[name] = c
	secretValues = append(secretValues, c.id, c.secret)
	return c
}

func seedAppCred(name string, roles ...string) openstacksim.SeedAppCredential {
	c := cred(name)
	return openstacksim.SeedAppCredential{Name: name, ID: c.id, Secret: c.secret, Roles: roles}
}

// baseSeed is the estate of the specification's examples: the gateway cluster vpn01
// with its leg at .1, same-tenant service clusters, customer routers, credentials of
// every shape the cross-tenant rules distinguish.
func baseSeed() *openstacksim.Seed {
	return &openstacksim.Seed{
		MaxRoutes: -1,
		Projects: []openstacksim.SeedProject{
			{Name: "admin", ID: projAdmin}, {Name: "vpn-operator", ID: projOperator},
			{Name: "customer-diehl", ID: projDiehl}, {Name: "customer-other", ID: projOther},
		},
		Users: []openstacksim.SeedUser{
			{Name: "vpn-operator", Project: "vpn-operator", Roles: []string{"member"},
				AppCredentials: []openstacksim.SeedAppCredential{seedAppCred("operator", "member")}},
			{Name: "diehl-automation", Project: "customer-diehl", Roles: []string{"member", "load-balancer_admin", "_member_"},
				AppCredentials: []openstacksim.SeedAppCredential{
					seedAppCred("diehl", "member", "load-balancer_admin", "_member_"),
					seedAppCred("diehl-rotated", "member"),
					seedAppCred("diehl-admin", "Admin"),
					seedAppCred("diehl-service", "service"),
					seedAppCred("diehl-advsvc", "ADVSVC"),
					seedAppCred("diehl-custom", "member", "network_operator"),
				}},
			{Name: "diehl-empty", Project: "customer-diehl",
				AppCredentials: []openstacksim.SeedAppCredential{seedAppCred("diehl-noroles")}},
			{Name: "other-automation", Project: "customer-other", Roles: []string{"member"},
				AppCredentials: []openstacksim.SeedAppCredential{seedAppCred("other", "member")}},
			{Name: "vpn-operator-2", Project: "vpn-operator", Roles: []string{"member"},
				AppCredentials: []openstacksim.SeedAppCredential{seedAppCred("operator-as-customer", "member")}},
		},
		Networks: []openstacksim.SeedNetwork{
			{Name: "public", Project: "admin", External: true,
				Subnets: []openstacksim.SeedSubnet{{Name: "public-subnet", CIDR: "203.0.113.0/24", GatewayIP: "203.0.113.1"}}},
			{Name: "vpn-transit", Project: "vpn-operator",
				Subnets: []openstacksim.SeedSubnet{{Name: "vpn-transit-subnet", CIDR: "10.254.0.0/24", GatewayIP: "10.254.0.1"}},
				Ports:   []openstacksim.SeedPort{{Name: "vpn-transit-dhcp", FixedIP: "10.254.0.2", DeviceOwner: "network:dhcp", DeviceID: "dhcp-vpn-transit"}}},
		},
		Routers: []openstacksim.SeedRouter{
			{Name: "shoot--services--vpn01", Project: "vpn-operator", ExternalGateway: "public",
				Interfaces: []openstacksim.SeedInterface{{Subnet: "vpn-transit-subnet", IP: "10.254.0.1"}}},
			{Name: "shoot--services--svc01", Project: "vpn-operator", ExternalGateway: "public"},
			{Name: "shoot--services--svc02", Project: "vpn-operator", ExternalGateway: "public"},
			{Name: "shoot--services--svc03", Project: "vpn-operator", ExternalGateway: "public"},
			{Name: "shoot--services--svc04", Project: "vpn-operator", ExternalGateway: "public"},
			{Name: "shoot--diehl--diehl01", Project: "customer-diehl", ExternalGateway: "public"},
			{Name: "shoot--diehl--diehl02", Project: "customer-diehl", ExternalGateway: "public"},
			{Name: "shoot--other--other01", Project: "customer-other", ExternalGateway: "public"},
		},
	}
}

// recorder keeps every Event, and feeds the suite-wide capture.
type recorder struct {
	mu     sync.Mutex
	events []recorded
}

type recorded struct{ Object, Type, Reason, Note string }

func (r *recorder) Eventf(regarding runtime.Object, _ runtime.Object, eventtype, reason, _ string, note string, args ...interface{}) {
	name := ""
	if o, ok := regarding.(client.Object); ok {
		name = o.GetName()
	}
	e := recorded{Object: name, Type: eventtype, Reason: reason, Note: fmt.Sprintf(note, args...)}
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	capture("EVENT " + e.Type + " " + e.Reason + " " + e.Note)
}

func (r *recorder) find(object, reason string) []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []recorded
	for _, e := range r.events {
		if (object == "" || e.Object == object) && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// countingReader counts Secret reads, to prove the name check happens before any.
type countingReader struct {
	client.Reader
	secretGets atomic.Int32
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Secret); ok {
		c.secretGets.Add(1)
	}
	return c.Reader.Get(ctx, key, obj, opts...)
}

type harness struct {
	// interfaces records the endpoint type of every customer client built.
	mu         sync.Mutex
	interfaces []string

	t      *testing.T
	ctx    context.Context
	sim    *openstacksim.Server
	op     *openstack.Clients
	r      *Reconciler
	rec    *recorder
	reader *countingReader
	builds atomic.Int32
	cfg    operatorconfig.Config
}

func newHarness(t *testing.T, mutate ...func(*openstacksim.Seed)) *harness {
	t.Helper()
	testenv.Need(t)
	seed := baseSeed()
	for _, m := range mutate {
		m(seed)
	}
	s, err := openstacksim.Start(seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ctx := logr.NewContext(context.Background(), testLogger)
	opCred := openstack.Credential{AuthURL: s.AuthURL(), Region: s.Region(), AppCredentialID: cred("operator").id, AppCredentialSecret: cred("operator").secret}
	op, err := openstack.NewClients(ctx, opCred, openstack.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, ctx: ctx, sim: s, op: op, rec: &recorder{}, reader: &countingReader{Reader: env.Client}}
	h.cfg = operatorconfig.Default()
	h.cfg.Router = "shoot--services--vpn01"
	h.cfg.ResyncInterval = 5 * time.Minute
	h.r = New(h.deps())
	ensureNamespace(t, credNS)
	t.Cleanup(h.cleanup)
	current = h
	t.Cleanup(func() { current = nil })
	return h
}

// customerUserAgent marks the customer credential's requests, so a fault can hit only
// those.
const customerUserAgent = "customer-credential-test"

func (h *harness) deps() Deps {
	return Deps{
		Client:            env.Client,
		APIReader:         h.reader,
		OpenStack:         h.op,
		OperatorProjectID: projOperator,
		AuthURL:           h.sim.AuthURL(),
		Region:            h.sim.Region(),
		Interface:         "public",
		CustomerClients: func(ctx context.Context, c openstack.Credential) (*openstack.Clients, error) {
			h.builds.Add(1)
			h.mu.Lock()
			h.interfaces = append(h.interfaces, c.Interface)
			h.mu.Unlock()
			return openstack.NewClients(ctx, c, openstack.ClientOptions{UserAgent: customerUserAgent})
		},
		Config:   h.cfg,
		Clock:    func() time.Time { return time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC) },
		Recorder: h.rec,
	}
}

func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// cleanup removes every ClusterLink, gateway and credential Secret the test left, so
// the next test starts from an empty estate (ClusterLinks are cluster-scoped).
func (h *harness) cleanup() {
	ctx := context.Background()
	var links v1alpha1.ClusterLinkList
	_ = env.Client.List(ctx, &links)
	for i := range links.Items {
		l := &links.Items[i]
		l.Finalizers = nil
		_ = env.Client.Update(ctx, l)
		_ = env.Client.Delete(ctx, l)
	}
	var ig v1alpha1.IPsecGatewayList
	_ = env.Client.List(ctx, &ig)
	for i := range ig.Items {
		_ = env.Client.Delete(ctx, &ig.Items[i])
	}
	var vg v1alpha1.VPNGatewayList
	_ = env.Client.List(ctx, &vg)
	for i := range vg.Items {
		_ = env.Client.Delete(ctx, &vg.Items[i])
	}
	var secrets corev1.SecretList
	_ = env.Client.List(ctx, &secrets, client.InNamespace(credNS))
	for i := range secrets.Items {
		_ = env.Client.Delete(ctx, &secrets.Items[i])
	}
	waitFor(h.t, "the estate to be empty", func() (bool, string) {
		var l v1alpha1.ClusterLinkList
		_ = env.Client.List(ctx, &l)
		return len(l.Items) == 0, fmt.Sprintf("%d ClusterLinks left", len(l.Items))
	})
}

// waitFor polls with a generous deadline; it fails, never asserts on timing.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		ok, detail := cond()
		if ok {
			return
		}
		last = detail
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s: %s", what, last)
}

func (h *harness) transitNetID() string {
	n, ok := h.sim.NetworkByName("vpn-transit")
	if !ok {
		h.t.Fatal("no vpn-transit network in the seed")
	}
	return n.ID
}

func (h *harness) transitSubnetID() string {
	s, ok := h.sim.SubnetByName("vpn-transit-subnet")
	if !ok {
		h.t.Fatal("no vpn-transit-subnet in the seed")
	}
	return s.ID
}

func (h *harness) router(name string) openstacksim.Router {
	h.t.Helper()
	r, ok := h.sim.RouterByName(name)
	if !ok {
		h.t.Fatalf("router %s not in the simulator", name)
	}
	return r
}

func (h *harness) opRouter() openstacksim.Router { return h.router("shoot--services--vpn01") }

// --- objects ---

type linkOpt func(*v1alpha1.ClusterLink)

func pin(ip string) linkOpt { return func(l *v1alpha1.ClusterLink) { l.Spec.TransitIP = ip } }

// crossTenant makes the link cross-tenant with the Secret it is allowed to use.
func crossTenant(project string) linkOpt {
	return func(l *v1alpha1.ClusterLink) {
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[v1alpha1.AnnotationCustomerAPIAccess] = "none"
		l.Spec.CredentialsSecretRef = &v1alpha1.SecretRef{Name: SecretNamePrefix + l.Name, Namespace: credNS}
		l.Spec.CustomerProjectID = project
	}
}

var cidrSeq atomic.Int32

// freshCIDR is a service cluster network no other link of the suite uses (links may not
// overlap).
func freshCIDR() string { return fmt.Sprintf("10.238.%d.0/24", cidrSeq.Add(1)%256) }

func (h *harness) newLink(name, router, cidr string, opts ...linkOpt) *v1alpha1.ClusterLink {
	h.t.Helper()
	l := &v1alpha1.ClusterLink{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.ClusterLinkSpec{ServiceClusterRouter: router, ServiceClusterCIDR: cidr},
	}
	for _, o := range opts {
		o(l)
	}
	if err := env.Client.Create(h.ctx, l); err != nil {
		h.t.Fatalf("create ClusterLink %s: %v", name, err)
	}
	return l
}

// secret writes the credential Secret of link for the named application credential,
// with extra keys.
func (h *harness) secret(link, credName string, extra map[string]string) *corev1.Secret {
	h.t.Helper()
	data := map[string][]byte{}
	if credName != "" {
		c := cred(credName)
		data[openstack.EnvAppCredentialID] = []byte(c.id)
		data[openstack.EnvAppCredentialSecret] = []byte(c.secret)
	}
	for k, v := range extra {
		if v == "" {
			delete(data, k)
			continue
		}
		data[k] = []byte(v)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: SecretNamePrefix + link, Namespace: credNS}, Type: corev1.SecretTypeOpaque, Data: data}
	existing := &corev1.Secret{}
	if err := env.Client.Get(h.ctx, client.ObjectKeyFromObject(s), existing); err == nil {
		existing.Data = data
		if err := env.Client.Update(h.ctx, existing); err != nil {
			h.t.Fatal(err)
		}
		return existing
	}
	if err := env.Client.Create(h.ctx, s); err != nil {
		h.t.Fatal(err)
	}
	return s
}

func (h *harness) get(name string) *v1alpha1.ClusterLink {
	h.t.Helper()
	l := &v1alpha1.ClusterLink{}
	if err := env.Client.Get(h.ctx, types.NamespacedName{Name: name}, l); err != nil {
		h.t.Fatalf("get ClusterLink %s: %v", name, err)
	}
	return l
}

func (h *harness) gone(name string) bool {
	err := env.Client.Get(h.ctx, types.NamespacedName{Name: name}, &v1alpha1.ClusterLink{})
	return apierrors.IsNotFound(err)
}

func (h *harness) update(name string, mut func(*v1alpha1.ClusterLink)) {
	h.t.Helper()
	for range 10 {
		l := h.get(name)
		mut(l)
		err := env.Client.Update(h.ctx, l)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			h.t.Fatal(err)
		}
	}
	h.t.Fatal("update kept conflicting")
}

func (h *harness) delete(name string) {
	h.t.Helper()
	if err := env.Client.Delete(h.ctx, h.get(name)); err != nil {
		h.t.Fatal(err)
	}
}

// reconcile runs one reconcile; an error is logged into the capture the way the
// manager would log it.
func (h *harness) reconcile(name string) (ctrl.Result, error) {
	res, err := h.r.Reconcile(h.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: name}})
	if err != nil {
		capture("RECONCILE ERROR " + err.Error())
	}
	return res, err
}

// converge reconciles until cond holds (or the link is gone when cond is nil).
func (h *harness) until(name string, what string, cond func(l *v1alpha1.ClusterLink) bool) *v1alpha1.ClusterLink {
	h.t.Helper()
	var last *v1alpha1.ClusterLink
	var lastErr error
	for range 20 {
		_, lastErr = h.reconcile(name)
		l := &v1alpha1.ClusterLink{}
		if err := env.Client.Get(h.ctx, types.NamespacedName{Name: name}, l); err != nil {
			if apierrors.IsNotFound(err) && cond == nil {
				return nil
			}
			h.t.Fatalf("get %s: %v", name, err)
		}
		last = l
		if cond != nil && cond(l) {
			return l
		}
	}
	h.t.Fatalf("ClusterLink %s never reached %s; last error %v; conditions:\n%s", name, what, lastErr, dumpConds(last))
	return nil
}

func (h *harness) untilReady(name string) *v1alpha1.ClusterLink {
	h.t.Helper()
	return h.until(name, "Ready", func(l *v1alpha1.ClusterLink) bool {
		return meta.IsStatusConditionTrue(l.Status.Conditions, v1alpha1.ConditionReady)
	})
}

func (h *harness) untilCond(name, condType, reason string) *v1alpha1.ClusterLink {
	h.t.Helper()
	return h.until(name, condType+"/"+reason, func(l *v1alpha1.ClusterLink) bool {
		c := meta.FindStatusCondition(l.Status.Conditions, condType)
		return c != nil && c.Reason == reason
	})
}

func dumpConds(l *v1alpha1.ClusterLink) string {
	if l == nil {
		return "<none>"
	}
	var b strings.Builder
	for _, c := range l.Status.Conditions {
		fmt.Fprintf(&b, "  %s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	fmt.Fprintf(&b, "  status: transitIP=%s legPortID=%s routerID=%s project=%s reverse=%v\n",
		l.Status.TransitIP, l.Status.LegPortID, l.Status.RouterID, l.Status.CustomerProjectID, l.Status.ReverseRoutes)
	return b.String()
}

// expectCond asserts a condition's status, reason and message prefix.
func expectCond(t *testing.T, l *v1alpha1.ClusterLink, condType string, status metav1.ConditionStatus, reason, msgPrefix string) *metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(l.Status.Conditions, condType)
	if c == nil {
		t.Fatalf("%s: no %s condition;\n%s", l.Name, condType, dumpConds(l))
	}
	if c.Status != status || c.Reason != reason || !strings.HasPrefix(c.Message, msgPrefix) {
		t.Fatalf("%s: %s = %s/%s %q; want %s/%s with message prefix %q", l.Name, condType, c.Status, c.Reason, c.Message, status, reason, msgPrefix)
	}
	return c
}

func expectNoCond(t *testing.T, l *v1alpha1.ClusterLink, condType string) {
	t.Helper()
	if c := meta.FindStatusCondition(l.Status.Conditions, condType); c != nil {
		t.Fatalf("%s: unexpected %s condition %s/%s", l.Name, condType, c.Status, c.Reason)
	}
}

// --- simulator views ---

func (h *harness) portsAt(ip string) []openstacksim.Port {
	var out []openstacksim.Port
	for _, p := range h.sim.Ports() {
		for _, f := range p.FixedIPs {
			if f.IPAddress == ip {
				out = append(out, p)
			}
		}
	}
	return out
}

func (h *harness) linkPorts(l *v1alpha1.ClusterLink) []openstacksim.Port {
	return h.sim.PortsByTag(openstack.TagManaged, openstack.SanitizeTag(openstack.TagUIDPrefix+string(l.UID)))
}

func hasRoute(r openstacksim.Router, dst, nh string) bool {
	return r.HasRoute(openstacksim.Route{Destination: dst, NextHop: nh})
}

func (h *harness) sharesFor(project string) []openstacksim.RBACPolicy {
	var out []openstacksim.RBACPolicy
	for _, p := range h.sim.RBACPolicies() {
		if p.TargetProject == project && p.ObjectID == h.transitNetID() && p.Action == "access_as_shared" {
			out = append(out, p)
		}
	}
	return out
}

func (h *harness) writes() int { return h.sim.Counters().Writes }
