package scale

import (
	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"bnerd.net/vpn-operator/internal/conditions"
	"bnerd.net/vpn-operator/internal/controller/gateway"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/operatorconfig"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
	"bnerd.net/vpn-operator/test/harness"
)

// world is one harness's control plane, simulator and Ready worker nodes.
type world struct {
	t       *testing.T
	env     *testenv.Env
	sim     *openstacksim.Server
	clients *openstack.Clients
	cfg     operatorconfig.Config
}

// newWorld starts a control plane (a missing one is a failure: these harnesses run in
// `make test`) and the simulator with the example estate, and creates three Ready
// workers, one per server of the estate.
func newWorld(t *testing.T) *world {
	t.Helper()
	testenv.SkipUnit(t, "starts a control plane and the simulator")
	seed, err := openstacksim.LoadSeed(filepath.Join(testenv.RepoRoot(), "examples", "sim-estate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return newWorldOf(t, seed, []string{"11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222", "33333333-3333-4333-8333-333333333333"})
}

// newWorldOf is newWorld on another estate whose operator project, networks and gateway
// cluster router carry the example estate's names (harness.Estate does), with a Ready
// worker node for each of servers.
func newWorldOf(t *testing.T, seed *openstacksim.Seed, servers []string) *world {
	t.Helper()
	testenv.SkipUnit(t, "starts a control plane and the simulator")
	ctrllog.SetLogger(logr.Discard())
	env, err := testenv.Start()
	if err != nil {
		t.Fatalf("control plane: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	s, err := openstacksim.Start(seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	s.SetMaxRoutes(-1) // one route per gateway on the operator router
	id, secret, _ := s.AppCredential("vpn-operator")
	ctx := context.Background()
	clients, err := openstack.NewClients(ctx, openstack.Credential{AuthURL: s.AuthURL(), Region: s.Region(), AppCredentialID: id, AppCredentialSecret: secret}, openstack.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := env.Client
	for i, srv := range servers {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("worker-%d", i)}, Spec: corev1.NodeSpec{ProviderID: "openstack:///" + srv}}
		must(t, c.Create(ctx, node))
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		must(t, c.Status().Update(ctx, node))
	}
	cfg := operatorconfig.Default()
	cfg.Namespace = "bnerd-vpn-system"
	cfg.GatewayNetwork, cfg.ExternalNetwork, cfg.Router = "vpn-transit", "public", "shoot--services--vpn01"
	cfg.InternalSourceCIDRs, _ = operatorconfig.ParseCIDRList("10.250.0.0/16")
	cfg.ResyncInterval = time.Hour
	cfg.MaxConcurrentReconciles = 4
	return &world{t: t, env: env, sim: s, clients: clients, cfg: cfg}
}

// namespace creates ns with the PSK Secret the gateways use.
func (w *world) namespace(ns string) {
	w.t.Helper()
	ctx := context.Background()
	must(w.t, w.env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	must(w.t, harness.TenantPolicy(ctx, w.env.Client, "scale-"+ns, ns))
	must(w.t, w.env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "psk"}, Data: map[string][]byte{"psk": []byte("scale-test-pre-shared-key-0123456789")}}))
}

// startOperator runs a manager with a fresh gateway reconciler (a restarted operator)
// and whatever more the setup funcs add to it; the returned func stops it.
func (w *world) startOperator(d gateway.Deps, setup ...func(ctrl.Manager) error) func() {
	w.t.Helper()
	mgr, err := ctrl.NewManager(w.env.Config, ctrl.Options{Scheme: w.env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0", Logger: logr.Discard()})
	must(w.t, err)
	r := gateway.New(d)
	must(w.t, r.SetupWithManager(mgr))
	for _, f := range setup {
		must(w.t, f(mgr))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			w.t.Errorf("manager: %v", err)
		}
	}
}

// envInt reads an integer knob of a harness, at least min; anything else stops the test
// (a mistyped knob must not measure the default).
func envInt(t *testing.T, name string, def, min int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min {
		t.Fatalf("%s=%q: want an integer of at least %d", name, v, min)
	}
	return n
}

// envFloat reads a non-negative number knob of a harness.
func envFloat(t *testing.T, name string, def float64) float64 {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 {
		t.Fatalf("%s=%q: want a number of at least 0", name, v)
	}
	return f
}

// envDuration reads a duration knob of a harness.
func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		t.Fatalf("%s=%q: want a duration", name, v)
	}
	return d
}

// converged: every phase condition of a gateway True for generation gen (the OpenStack
// and Kubernetes objects are converged; Ready also needs a running pod and the tunnels
// up, which nothing provides in these harnesses).
func converged(conds []metav1.Condition, gen int64) bool {
	for _, t := range v1alpha1.GatewayPhaseConditionTypes {
		if !conditions.IsTrue(conds, t, gen) {
			return false
		}
	}
	return true
}
