package psk_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/loader"
	"bnerd.net/vpn-operator/internal/agent/psk"
	"bnerd.net/vpn-operator/internal/agent/source"
	"bnerd.net/vpn-operator/internal/agent/vici"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// Distinctive key values: none may appear in anything the agent logs.
const (
	hqKey     = "zq-hq-key-0f9e8d7c6b5a4321"
	branchKey = "zq-branch-key-1a2b3c4d5e6f7788"
	shortKey  = "zq-short-9"
)

type logs struct {
	mu sync.Mutex
	l  []string
}

func (l *logs) logf(f string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.l = append(l.l, fmt.Sprintf(f, a...))
}

func (l *logs) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.l, "\n")
}

func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a bound for a hung test, not a latency
	last := ""
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: not reached: %s", what, last)
}

// gatewayPod sets up, on the real API server, what the operator renders for a gateway
// pod (ServiceAccount, Role naming the given Secrets, RoleBinding) and returns a client
// set that is that pod's ServiceAccount.
func gatewayPod(t *testing.T, ns, name string, secrets ...string) (kubernetes.Interface, render.Gateway) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	g := render.Gateway{APIVersion: v1alpha1.GroupVersion.String(), Kind: "IPsecGateway", Resource: "ipsecgateways", Namespace: ns, Name: name, UID: "0c4e5d6f-0000-4000-8000-0000000000aa"}
	for _, o := range []client.Object{render.ServiceAccount(g), render.Role(g, v1alpha1.GroupVersion.Group, secrets...), render.RoleBinding(g)} {
		o.SetOwnerReferences(nil)
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + render.ServiceAccountName(name)}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs, g
}

func setRole(t *testing.T, g render.Gateway, secrets ...string) {
	t.Helper()
	want := render.Role(g, v1alpha1.GroupVersion.Group, secrets...)
	var cur = want.DeepCopy()
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(want), cur); err != nil {
		t.Fatal(err)
	}
	cur.Rules = want.Rules
	if err := env.Client.Update(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
}

func putSecret(t *testing.T, ns, name string, data map[string]string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	ctx := context.Background()
	var cur corev1.Secret
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(s), &cur); err == nil {
		cur.Data = s.Data
		if err := env.Client.Update(ctx, &cur); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := env.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
}

// config builds gateway.json for the named tunnels, each naming Secret <tunnel>-psk.
func config(t *testing.T, ns string, tunnels ...string) *gatewayconfig.Config {
	t.Helper()
	spec := &v1alpha1.GatewaySpec{}
	peers := map[string]v1alpha1.Peer{
		"hq":     {Address: "198.51.100.7", Subnets: []string{"192.168.10.0/24"}},
		"branch": {Address: "203.0.113.9", Subnets: []string{"172.16.5.0/24"}},
	}
	for _, n := range tunnels {
		spec.Tunnels = append(spec.Tunnels, v1alpha1.Tunnel{Name: n, Peer: peers[n], PreSharedKey: v1alpha1.SecretKeyRef{Name: n + "-psk", Key: "psk"}})
	}
	cfg, err := gatewayconfig.Build(gatewayconfig.Input{Kind: v1alpha1.KindIPsecGateway, Namespace: ns, Name: "gw", Spec: spec,
		Status: &v1alpha1.GatewayStatus{ServiceCIDR: "100.64.3.0/24", FloatingIP: "192.0.2.44", PortFixedIP: "10.254.0.17", SubnetCIDR: "10.254.0.0/24", SubnetGatewayIP: "10.254.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// The agent reads each tunnel's key through the pod's own Role, following exactly the
// Secrets the config names. A key that is missing, a Secret not readable yet (the Role
// not updated), a key below the floor: each is reported with the Secret and key, never
// a value. A tunnel added with its Secret gets its key without a pod restart or a
// kubelet volume refresh; a Secret of the namespace the Role does not name is never
// readable.
func TestAPIKeysThroughThePodsOwnRole(t *testing.T) {
	testenv.Need(t)
	const ns = "psk-api"
	cs, g := gatewayPod(t, ns, "gw", "hq-psk")
	putSecret(t, ns, "hq-psk", map[string]string{"psk": hqKey})
	putSecret(t, ns, "other-tenant-secret", map[string]string{"psk": "zq-not-for-the-pod-1234567890"})
	ctx, cancel := context.Background(), func() {}
	ctx, cancel = context.WithCancel(ctx)
	defer cancel()
	var lg logs
	a := psk.NewAPI(ctx, cs, ns, lg.logf)

	cfg := config(t, ns, "hq")
	a.Follow(cfg.PSKSecrets())
	waitFor(t, "hq's key", func() (bool, string) {
		k := a.Keys(cfg)
		return k.ByTunnel["hq"] == hqKey, fmt.Sprint(k.Waiting)
	})

	// A tunnel is added: the operator names its Secret in the Role first, then the
	// config names the tunnel. The Secret is not there yet: the tunnel waits, saying so.
	setRole(t, g, "hq-psk", "branch-psk")
	cfg = config(t, ns, "hq", "branch")
	a.Follow(cfg.PSKSecrets())
	waitFor(t, "branch waiting for its Secret", func() (bool, string) {
		k := a.Keys(cfg)
		return k.Waiting["branch"] == "Secret "+ns+"/branch-psk not found" && k.ByTunnel["hq"] == hqKey, fmt.Sprint(k.Waiting)
	})
	putSecret(t, ns, "branch-psk", map[string]string{"psk": shortKey})
	waitFor(t, "branch's key refused as too short", func() (bool, string) {
		k := a.Keys(cfg)
		return k.Waiting["branch"] == "the pre-shared key in Secret "+ns+"/branch-psk key psk is shorter than 20 bytes", fmt.Sprint(k.Waiting)
	})
	putSecret(t, ns, "branch-psk", map[string]string{"other": branchKey})
	waitFor(t, "branch's Secret without the key", func() (bool, string) {
		k := a.Keys(cfg)
		return k.Waiting["branch"] == `Secret `+ns+`/branch-psk has no key "psk"`, fmt.Sprint(k.Waiting)
	})
	putSecret(t, ns, "branch-psk", map[string]string{"psk": branchKey})
	waitFor(t, "branch's key", func() (bool, string) {
		k := a.Keys(cfg)
		return k.ByTunnel["branch"] == branchKey && len(k.Waiting) == 0, fmt.Sprint(k.Waiting)
	})

	// A tunnel names a Secret the Role does not (yet) grant: it waits, with the API
	// server's refusal, and gets the key once the Role names it.
	cfg.Tunnels[1].PSK.Secret = "other-tenant-secret"
	a.Follow(cfg.PSKSecrets())
	waitFor(t, "refused by RBAC", func() (bool, string) {
		k := a.Keys(cfg)
		return strings.Contains(k.Waiting["branch"], "cannot read Secret "+ns+"/other-tenant-secret") && strings.Contains(k.Waiting["branch"], "forbidden"), fmt.Sprint(k.Waiting)
	})
	setRole(t, g, "hq-psk", "other-tenant-secret")
	waitFor(t, "readable once the Role names it", func() (bool, string) {
		k := a.Keys(cfg)
		return k.ByTunnel["branch"] == "zq-not-for-the-pod-1234567890", fmt.Sprint(k.Waiting)
	})

	// The Secret is deleted: the tunnel waits again.
	if err := env.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hq-psk"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "hq waiting after its Secret went", func() (bool, string) {
		k := a.Keys(cfg)
		return k.Waiting["hq"] == "Secret "+ns+"/hq-psk not found", fmt.Sprint(k.Waiting)
	})
	for _, v := range []string{hqKey, branchKey, shortKey, "zq-not-for-the-pod"} {
		if strings.Contains(lg.all(), v) {
			t.Fatalf("a key reached the agent's log:\n%s", lg.all())
		}
	}
}

type recorder struct {
	mu    sync.Mutex
	calls [][2]string
}

func (r *recorder) Apply(_ context.Context, swanctl, secrets string) (vici.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, [2]string{swanctl, secrets})
	return vici.Result{}, nil
}

// every reports whether each apply so far satisfied ok.
func (r *recorder) every(ok func(conns []string, keys []gatewayconfig.SharedSecret) bool) (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.calls {
		root, err := gatewayconfig.ParseSettings(c[0])
		if err != nil {
			return false, len(r.calls)
		}
		var conns []string
		for _, s := range root.Sub("connections").Sections {
			conns = append(conns, s.Name)
		}
		keys, err := gatewayconfig.ParseSecrets(c[1])
		if err != nil || !ok(conns, keys) {
			return false, len(r.calls)
		}
	}
	return true, len(r.calls)
}

func (r *recorder) last() (conns []string, keys []gatewayconfig.SharedSecret) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) == 0 {
		return nil, nil
	}
	c := r.calls[len(r.calls)-1]
	root, _ := gatewayconfig.ParseSettings(c[0])
	for _, s := range root.Sub("connections").Sections {
		conns = append(conns, s.Name)
	}
	keys, _ = gatewayconfig.ParseSecrets(c[1])
	return conns, keys
}

// Keys arrive with the tunnel, with a real API server: the loader, reading keys as the
// gateway pod does, loads a tunnel added to a running gateway as soon as its Secret
// exists, never loads a connection without its key, and says why it waits.
func TestLoaderStartsATunnelOnlyWithItsKey(t *testing.T) {
	testenv.Need(t)
	const ns = "psk-loader"
	cs, g := gatewayPod(t, ns, "gw", "hq-psk")
	putSecret(t, ns, "hq-psk", map[string]string{"psk": hqKey})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var lg logs
	rec := &recorder{}
	l := &loader.Loop{Applier: rec, Keys: psk.NewAPI(ctx, cs, ns, lg.logf), Interval: 50 * time.Millisecond, Logf: lg.logf}
	snaps := make(chan source.Snapshot, 1)
	go l.Run(ctx, snaps)
	js, err := gatewayconfig.Marshal(config(t, ns, "hq"))
	if err != nil {
		t.Fatal(err)
	}
	snaps <- source.Snapshot{Config: js}
	waitFor(t, "hq loaded", func() (bool, string) {
		conns, keys := rec.last()
		return strings.Join(conns, ",") == "hq" && len(keys) == 1, fmt.Sprint(conns)
	})

	// The tunnel is added; the Role names its Secret, the Secret comes a moment later.
	setRole(t, g, "hq-psk", "branch-psk")
	js, err = gatewayconfig.Marshal(config(t, ns, "hq", "branch"))
	if err != nil {
		t.Fatal(err)
	}
	snaps <- source.Snapshot{Config: js}
	waitFor(t, "branch waiting, said", func() (bool, string) {
		w := l.Waiting()
		return w["branch"] == "Secret "+ns+"/branch-psk not found", fmt.Sprint(w)
	})
	putSecret(t, ns, "branch-psk", map[string]string{"psk": branchKey})
	waitFor(t, "branch loaded with its key", func() (bool, string) {
		conns, keys := rec.last()
		return strings.Join(conns, ",") == "hq,branch" && len(keys) == 2 && string(keys[1].Secret) == branchKey, fmt.Sprint(conns)
	})
	// Never, in any apply, a connection without its key.
	ok, n := rec.every(func(conns []string, keys []gatewayconfig.SharedSecret) bool {
		have := map[string]bool{}
		for _, k := range keys {
			have[strings.TrimPrefix(k.Section, gatewayconfig.SecretSectionPrefix)] = len(k.Secret) >= gatewayconfig.MinPSKLength
		}
		for _, c := range conns {
			if !have[c] {
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("one of %d applies loaded a connection without a usable key", n)
	}
	if !strings.Contains(lg.all(), "not starting tunnels without a usable pre-shared key: branch: Secret "+ns+"/branch-psk not found") {
		t.Fatalf("the wait was not logged:\n%s", lg.all())
	}
	for _, v := range []string{hqKey, branchKey} {
		if strings.Contains(lg.all(), v) {
			t.Fatalf("a key reached the agent's log:\n%s", lg.all())
		}
	}
}
