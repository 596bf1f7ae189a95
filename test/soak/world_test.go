package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
	"bnerd.net/vpn-operator/test/harness"
)

// The estate's size and the soak's bounds on live objects.
const (
	serviceClusters = 6
	customers       = 3
	customerRouters = 2
	workers         = 3
	maxGateways     = 40
	transitCIDR     = "10.254.0.0/22"
	// internalCIDR is the gateway cluster's node network: the fabric's sources (never
	// the transit network, which the operator takes out of them).
	internalCIDR = "10.250.0.0/16"
)

var tenantNamespaces = []string{"soak-a", "soak-b", "soak-c"}

// world is the soak's view of what it made: the live objects (created and not deleted)
// and the UIDs of the deleted ones, whose footprint the audit checks is gone.
type world struct {
	t   *testing.T
	ctx context.Context
	cfg settings
	c   client.Client
	r   *rand.Rand
	sim *openstacksim.Server
	op  *harness.Operator
	// restarting is held by the killer from its kill to its start, and by ensureRunning:
	// without it, ensureRunning could see the killed process gone before the killer
	// started the next, report an exit the soak caused as the operator's own, and start
	// a process the killer then could not.
	restarting sync.Mutex
	baseline   *harness.Snapshot
	secrets    []string

	gws     map[string]*gwRec // by kind/namespace/name
	links   map[string]*linkRec
	deleted []string
	// gone are objects deleted during the run: they must disappear from the API server.
	gone  []client.Object
	next  int
	kills int
	flaps int
	// flapRand is the node flapper's own source (the operations' one is not shared
	// between goroutines).
	flapRand *rand.Rand
	opCount  map[string]int
	routers  []routerRec
}

type gwRec struct {
	kind, ns, name string
	pinned         int // third octet of a /24 pinned at creation (0: none)
}

type linkRec struct {
	name   string
	router int // index into world.routers
}

type routerRec struct {
	name     string
	customer int // -1: same tenant
	cidrs    [2]string
}

func newWorld(t *testing.T, ctx context.Context, cfg settings) *world {
	t.Helper()
	s, err := openstacksim.Start(harness.Estate(harness.EstateOptions{TransitCIDR: transitCIDR, ServiceClusters: serviceClusters,
		Customers: customers, RoutersPerCustomer: customerRouters, Workers: workers}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	w := &world{t: t, ctx: ctx, cfg: cfg, c: env.Client, r: rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x5eed)), sim: s,
		flapRand: rand.New(rand.NewPCG(cfg.seed^0xf1a9, cfg.seed)),
		gws:      map[string]*gwRec{}, links: map[string]*linkRec{}, opCount: map[string]int{}}
	for i := 0; i < serviceClusters; i++ {
		w.routers = append(w.routers, routerRec{name: harness.ServiceClusterRouter(i), customer: -1,
			cidrs: [2]string{fmt.Sprintf("10.%d.0.0/17", 100+i), fmt.Sprintf("10.%d.128.0/17", 100+i)}})
	}
	for i := 0; i < customers; i++ {
		for j := 0; j < customerRouters; j++ {
			k := len(w.routers)
			w.routers = append(w.routers, routerRec{name: harness.CustomerRouter(i, j), customer: i,
				cidrs: [2]string{fmt.Sprintf("10.%d.0.0/17", 100+k), fmt.Sprintf("10.%d.128.0/17", 100+k)}})
		}
	}

	for _, ns := range append(tenantNamespaces, harness.OperatorNamespace, harness.CredentialsNamespace) {
		if err := harness.EnsureNamespace(ctx, w.c, ns); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range tenantNamespaces {
		// Each namespace is a tenant of its own, with room for what the soak makes.
		if err := harness.TenantPolicy(ctx, w.c, "soak-"+ns, ns); err != nil {
			t.Fatal(err)
		}
		psk := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "psk"}, Data: map[string][]byte{"psk": []byte("soak-pre-shared-key-of-the-namespace-" + ns)}}
		if err := w.c.Create(ctx, psk); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	if err := harness.CreateWorkers(ctx, w.c, workers); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < customers; i++ {
		_, secret, _ := s.AppCredential(harness.CustomerProject(i))
		w.secrets = append(w.secrets, secret)
	}
	_, opSecret, _ := s.AppCredential(harness.OperatorCred)
	w.secrets = append(w.secrets, opSecret)
	w.baseline = harness.TakeSnapshot(s.Objects())

	dir := t.TempDir()
	bin, err := harness.BuildOperator(dir)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := env.WriteKubeConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	opEnv, err := harness.OperatorEnv(s, kubeconfig, internalCIDR)
	if err != nil {
		t.Fatal(err)
	}
	w.op = &harness.Operator{Bin: bin, Env: opEnv, Args: []string{"--leader-elect=false"}, LogPath: filepath.Join(dir, "operator.log")}
	if err := w.op.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.op.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			// The temporary directory goes with the test: keep the log.
			keep := filepath.Join(os.TempDir(), fmt.Sprintf("bnerd-soak-%d.log", cfg.seed))
			if err := os.WriteFile(keep, []byte(w.op.Log()), 0o600); err == nil {
				t.Logf("operator log kept in %s", keep)
			}
		}
	})
	return w
}

// ensureRunning restarts an operator that exited by itself, which the soak reports: the
// process must survive the faults and only die when killed.
func (w *world) ensureRunning() {
	w.restarting.Lock()
	defer w.restarting.Unlock()
	if w.op.Running() {
		return
	}
	w.t.Errorf("the operator exited by itself; log tail:\n%s", w.op.LogTail(5))
	if err := w.op.Start(); err != nil {
		w.t.Fatal(err)
	}
}

// step performs one random operation.
func (w *world) step() {
	w.ensureRunning()
	type op struct {
		name   string
		weight int
		ok     func() bool
		do     func()
	}
	ops := []op{
		{"create-gateway", 25, func() bool { return len(w.gws) < maxGateways }, w.createGateway},
		{"update-gateway", 38, func() bool { return len(w.gws) > 0 }, w.updateGateway},
		{"delete-gateway", 12, func() bool { return len(w.gws) > 0 }, w.deleteGateway},
		{"create-link", 9, func() bool { return len(w.freeRouters()) > 0 }, w.createLink},
		{"update-link", 9, func() bool { return len(w.links) > 0 }, w.updateLink},
		{"delete-link", 7, func() bool { return len(w.links) > 0 }, w.deleteLink},
	}
	total := 0
	for _, o := range ops {
		if o.ok() {
			total += o.weight
		}
	}
	pick := w.r.IntN(total)
	for _, o := range ops {
		if !o.ok() {
			continue
		}
		if pick < o.weight {
			o.do()
			w.opCount[o.name]++
			return
		}
		pick -= o.weight
	}
}

func (w *world) name(prefix string) string {
	w.next++
	return fmt.Sprintf("%s-%04d", prefix, w.next)
}

func gwKey(kind, ns, name string) string { return kind + "/" + ns + "/" + name }

func newGatewayObject(kind, ns, name string) client.Object {
	if kind == v1alpha1.KindVPNGateway {
		return &v1alpha1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	return &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

func specOf(obj client.Object) *v1alpha1.GatewaySpec {
	switch o := obj.(type) {
	case *v1alpha1.VPNGateway:
		return &o.Spec.GatewaySpec
	case *v1alpha1.IPsecGateway:
		return &o.Spec
	}
	return nil
}

func statusOf(obj client.Object) *v1alpha1.GatewayStatus {
	switch o := obj.(type) {
	case *v1alpha1.VPNGateway:
		return &o.Status
	case *v1alpha1.IPsecGateway:
		return &o.Status
	}
	return nil
}

// pinnedInUse: third octets of the /24s pinned by live gateways.
func (w *world) pinnedInUse() map[int]bool {
	out := map[int]bool{}
	for _, g := range w.gws {
		if g.pinned != 0 {
			out[g.pinned] = true
		}
	}
	return out
}

func (w *world) createGateway() {
	kind := v1alpha1.KindIPsecGateway
	if w.r.IntN(3) == 0 {
		kind = v1alpha1.KindVPNGateway
	}
	ns := tenantNamespaces[w.r.IntN(len(tenantNamespaces))]
	name := w.name("gw")
	obj := newGatewayObject(kind, ns, name)
	spec := specOf(obj)
	for i := 0; i < 1+w.r.IntN(2); i++ {
		w.addTunnel(spec)
	}
	for i := 0; i < w.r.IntN(3); i++ {
		w.addExposure(spec)
	}
	for i := 0; i < w.r.IntN(2); i++ {
		w.addReverse(spec)
	}
	rec := &gwRec{kind: kind, ns: ns, name: name}
	// Some gateways pin their virtual IPs from the start (a migration keeping its
	// addresses), in a /24 above the auto-allocated ones. A /24 freed by a deletion is
	// taken again at once, while its former holder may still be cleaning up.
	if w.r.IntN(5) == 0 {
		used := w.pinnedInUse()
		for o := 200; o < 255; o++ {
			if !used[o] {
				rec.pinned = o
				break
			}
		}
		if rec.pinned != 0 {
			if len(spec.Exposures) == 0 {
				w.addExposure(spec)
			}
			spec.Exposures[0].VirtualIP = fmt.Sprintf("100.64.%d.%d", rec.pinned, 10+w.r.IntN(100))
		}
	}
	if vg, ok := obj.(*v1alpha1.VPNGateway); ok {
		vg.Spec.Protocol = v1alpha1.VPNProtocolIPsec
	}
	if err := w.c.Create(w.ctx, obj); err != nil {
		w.t.Fatalf("creating %s %s/%s: %v", kind, ns, name, err)
	}
	w.gws[gwKey(kind, ns, name)] = rec
}

func (w *world) addTunnel(spec *v1alpha1.GatewaySpec) {
	used := map[string]bool{}
	for _, t := range spec.Tunnels {
		used[t.Name] = true
		used[t.Peer.Address] = true
		for _, s := range t.Peer.Subnets {
			used[s] = true
		}
	}
	var name, addr, subnet string
	for {
		name = fmt.Sprintf("t%d", w.r.IntN(100))
		addr = fmt.Sprintf("198.51.100.%d", 1+w.r.IntN(250))
		subnet = fmt.Sprintf("192.168.%d.0/24", w.r.IntN(250))
		if !used[name] && !used[addr] && !used[subnet] {
			break
		}
	}
	spec.Tunnels = append(spec.Tunnels, v1alpha1.Tunnel{Name: name, Peer: v1alpha1.Peer{Address: addr, Subnets: []string{subnet}},
		PreSharedKey: v1alpha1.SecretKeyRef{Name: "psk", Key: "psk"}})
}

func (w *world) addExposure(spec *v1alpha1.GatewaySpec) {
	used := map[string]bool{}
	for _, e := range spec.Exposures {
		used[e.Name] = true
	}
	var name string
	for name = fmt.Sprintf("e%d", w.r.IntN(1000)); used[name]; name = fmt.Sprintf("e%d", w.r.IntN(1000)) {
	}
	port := []int32{443, 636, 8443}[w.r.IntN(3)]
	spec.Exposures = append(spec.Exposures, v1alpha1.Exposure{Name: name,
		Target: v1alpha1.Target{Address: fmt.Sprintf("10.250.%d.%d", w.r.IntN(250), 1+w.r.IntN(250)),
			Ports: []v1alpha1.PortSpec{{Port: port, Protocol: v1alpha1.ProtocolTCP}}}})
}

func (w *world) addReverse(spec *v1alpha1.GatewaySpec) {
	if len(spec.Tunnels) == 0 {
		return
	}
	used := map[string]bool{}
	for _, e := range spec.ReverseExposures {
		used[e.Name] = true
	}
	var name string
	for name = fmt.Sprintf("r%d", w.r.IntN(1000)); used[name]; name = fmt.Sprintf("r%d", w.r.IntN(1000)) {
	}
	t := spec.Tunnels[w.r.IntN(len(spec.Tunnels))]
	base := t.Peer.Subnets[0][:len(t.Peer.Subnets[0])-len("0/24")]
	spec.ReverseExposures = append(spec.ReverseExposures, v1alpha1.ReverseExposure{Name: name, Tunnel: t.Name,
		Target: v1alpha1.Target{Address: fmt.Sprintf("%s%d", base, 5+w.r.IntN(200)), Ports: []v1alpha1.PortSpec{{Port: 8443, Protocol: v1alpha1.ProtocolTCP}}}})
}

func (w *world) randomGateway() (string, *gwRec) {
	keys := sortedKeys(w.gws)
	k := keys[w.r.IntN(len(keys))]
	return k, w.gws[k]
}

// updateGateway changes one thing: exposures or reverse exposures added or removed,
// a virtual IP pinned or unpinned, a tunnel added or removed.
func (w *world) updateGateway() {
	_, g := w.randomGateway()
	obj := newGatewayObject(g.kind, g.ns, g.name)
	choice := w.r.IntN(8)
	err := w.retryUpdate(obj, func() {
		spec, st := specOf(obj), statusOf(obj)
		switch choice {
		case 0:
			if len(spec.Exposures) < 5 {
				w.addExposure(spec)
			}
		case 1:
			if n := len(spec.Exposures); n > 0 {
				i := w.r.IntN(n)
				if g.pinned != 0 && i == 0 {
					return // the exposure holding the gateway's pin stays
				}
				spec.Exposures = append(spec.Exposures[:i], spec.Exposures[i+1:]...)
			}
		case 2:
			if len(spec.ReverseExposures) < 3 {
				w.addReverse(spec)
			}
		case 3:
			if n := len(spec.ReverseExposures); n > 0 {
				i := w.r.IntN(n)
				spec.ReverseExposures = append(spec.ReverseExposures[:i], spec.ReverseExposures[i+1:]...)
			}
		case 4:
			// Pin an exposure to the address it was given (what a user does to keep
			// it), once the gateway has one.
			for i := range spec.Exposures {
				if spec.Exposures[i].VirtualIP != "" {
					continue
				}
				for _, a := range st.Exposures {
					if a.Name == spec.Exposures[i].Name {
						spec.Exposures[i].VirtualIP = a.VirtualIP
					}
				}
				break
			}
		case 5:
			for i := range spec.Exposures {
				if spec.Exposures[i].VirtualIP != "" && !(g.pinned != 0 && i == 0) {
					spec.Exposures[i].VirtualIP = ""
					break
				}
			}
		case 6:
			if len(spec.Tunnels) < 3 {
				w.addTunnel(spec)
			}
		case 7:
			if n := len(spec.Tunnels); n > 1 {
				gone := spec.Tunnels[w.r.IntN(n)].Name
				var keep []v1alpha1.Tunnel
				for _, t := range spec.Tunnels {
					if t.Name != gone {
						keep = append(keep, t)
					}
				}
				spec.Tunnels = keep
				var rev []v1alpha1.ReverseExposure
				for _, r := range spec.ReverseExposures {
					if r.Tunnel != gone {
						rev = append(rev, r)
					}
				}
				spec.ReverseExposures = rev
			}
		}
	})
	if err != nil {
		w.t.Fatalf("updating %s %s/%s: %v", g.kind, g.ns, g.name, err)
	}
}

// retryUpdate reads obj fresh, applies mutate and writes it, again on a conflict (the
// operator writes status in between).
func (w *world) retryUpdate(obj client.Object, mutate func()) error {
	for i := 0; ; i++ {
		if err := w.c.Get(w.ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate()
		err := w.c.Update(w.ctx, obj)
		if err == nil || !apierrors.IsConflict(err) || i > 20 {
			return err
		}
	}
}

func (w *world) deleteGateway() {
	k, g := w.randomGateway()
	obj := newGatewayObject(g.kind, g.ns, g.name)
	w.deleteObject(obj)
	delete(w.gws, k)
}

// deleteObject deletes obj and remembers its UID (the audit checks nothing of it is
// left) and that it must disappear.
func (w *world) deleteObject(obj client.Object) {
	if err := w.c.Get(w.ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		w.t.Fatalf("reading %T %s before deleting it: %v", obj, obj.GetName(), err)
	}
	w.deleted = append(w.deleted, string(obj.GetUID()))
	if err := w.c.Delete(w.ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		w.t.Fatalf("deleting %T %s: %v", obj, obj.GetName(), err)
	}
	w.gone = append(w.gone, obj)
}

func (w *world) freeRouters() []int {
	used := map[int]bool{}
	for _, l := range w.links {
		used[l.router] = true
	}
	var out []int
	for i := range w.routers {
		if !used[i] {
			out = append(out, i)
		}
	}
	return out
}

// createLink links a free service cluster router: same-tenant, or cross-tenant with
// the customer's credential Secret. A router freed by a deletion is linked again at
// once, while the former link may still be unwinding.
func (w *world) createLink() {
	free := w.freeRouters()
	ri := free[w.r.IntN(len(free))]
	rt := w.routers[ri]
	name := w.name("link")
	link := &v1alpha1.ClusterLink{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ClusterLinkSpec{ServiceClusterRouter: rt.name, ServiceClusterCIDR: rt.cidrs[w.r.IntN(2)]}}
	if rt.customer >= 0 {
		project := harness.CustomerProject(rt.customer)
		id, secret, _ := w.sim.AppCredential(project)
		p, _ := w.sim.ProjectByName(project)
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: harness.CredentialsNamespace, Name: "clusterlink-" + name},
			Data: map[string][]byte{"OS_APPLICATION_CREDENTIAL_ID": []byte(id), "OS_APPLICATION_CREDENTIAL_SECRET": []byte(secret)}}
		if err := w.c.Create(w.ctx, sec); err != nil {
			w.t.Fatal(err)
		}
		link.Annotations = map[string]string{v1alpha1.AnnotationCustomerAPIAccess: "none"}
		link.Spec.CredentialsSecretRef = &v1alpha1.SecretRef{Namespace: harness.CredentialsNamespace, Name: sec.Name}
		link.Spec.CustomerProjectID = p.ID
	}
	if err := w.c.Create(w.ctx, link); err != nil {
		w.t.Fatalf("creating ClusterLink %s: %v", name, err)
	}
	w.links[name] = &linkRec{name: name, router: ri}
}

func (w *world) randomLink() *linkRec {
	keys := sortedKeys(w.links)
	return w.links[keys[w.r.IntN(len(keys))]]
}

// updateLink moves the service cluster's CIDR (the forward route follows).
func (w *world) updateLink() {
	l := w.randomLink()
	link := &v1alpha1.ClusterLink{ObjectMeta: metav1.ObjectMeta{Name: l.name}}
	err := w.retryUpdate(link, func() {
		cidrs := w.routers[l.router].cidrs
		if link.Spec.ServiceClusterCIDR == cidrs[0] {
			link.Spec.ServiceClusterCIDR = cidrs[1]
		} else {
			link.Spec.ServiceClusterCIDR = cidrs[0]
		}
	})
	if err != nil {
		w.t.Fatalf("updating ClusterLink %s: %v", l.name, err)
	}
}

func (w *world) deleteLink() {
	l := w.randomLink()
	w.deleteObject(&v1alpha1.ClusterLink{ObjectMeta: metav1.ObjectMeta{Name: l.name}})
	delete(w.links, l.name)
}

// stillThere lists deleted objects the API server still has.
func (w *world) stillThere() []string {
	var out []string
	for _, obj := range w.gone {
		cur := obj.DeepCopyObject().(client.Object)
		err := w.c.Get(w.ctx, client.ObjectKeyFromObject(obj), cur)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			out = append(out, fmt.Sprintf("%T %s: %v", obj, obj.GetName(), err))
		case cur.GetUID() != obj.GetUID():
			// The name was reused by a new object: the deleted one is gone.
		default:
			out = append(out, fmt.Sprintf("deleted %T %s/%s is still there (finalizers %v)", obj, obj.GetNamespace(), obj.GetName(), cur.GetFinalizers()))
		}
	}
	return out
}

func (w *world) deleteAll() {
	for _, k := range sortedKeys(w.gws) {
		g := w.gws[k]
		w.deleteObject(newGatewayObject(g.kind, g.ns, g.name))
		delete(w.gws, k)
	}
	for _, k := range sortedKeys(w.links) {
		w.deleteObject(&v1alpha1.ClusterLink{ObjectMeta: metav1.ObjectMeta{Name: k}})
		delete(w.links, k)
	}
}

func (w *world) waitGone(bound time.Duration) {
	w.t.Helper()
	deadline := time.Now().Add(bound)
	for {
		left := w.stillThere()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%d deleted object(s) still there after %s:\n  %s", len(left), bound, harness.Summarize(left, 40))
		}
		w.ensureRunning()
		time.Sleep(250 * time.Millisecond)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
