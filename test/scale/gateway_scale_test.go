// Package scale holds scale harnesses run by hand (never in CI): they converge many
// objects against a real kube-apiserver and the OpenStack simulator and print the
// figures recorded in docs/benchmarks.md.
package scale

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/controller/gateway"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/openstack/sim"
	"bnerd.net/vpn-operator/internal/operatorconfig"
	"bnerd.net/vpn-operator/internal/testenv"
)

// TestGatewayScale converges BNERD_SCALE_GATEWAYS (default 200) gateways, each with a
// tunnel, an exposure and a reverse exposure, then restarts the operator and measures
// the steady-state cost of reconciling them all again. Run:
//
//	BNERD_SCALE=1 go test -count=1 -v -timeout 30m ./test/scale/ -run TestGatewayScale
func TestGatewayScale(t *testing.T) {
	if os.Getenv("BNERD_SCALE") != "1" {
		t.Skip("scale harness; run by hand with BNERD_SCALE=1")
	}
	n := 200
	if v := os.Getenv("BNERD_SCALE_GATEWAYS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	ctrllog.SetLogger(logr.Discard())
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()

	seed, err := sim.LoadSeed(filepath.Join(testenv.RepoRoot(), "examples", "sim-estate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := sim.Start(seed)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SetMaxRoutes(-1) // one route per gateway on the operator router
	id, secret, _ := s.AppCredential("vpn-operator")
	ctx := context.Background()
	clients, err := openstack.NewClients(ctx, openstack.Credential{AuthURL: s.AuthURL(), Region: s.Region(), AppCredentialID: id, AppCredentialSecret: secret}, openstack.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}

	c := env.Client
	const ns = "scale"
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	for i, srv := range []string{"11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222", "33333333-3333-4333-8333-333333333333"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("worker-%d", i)}, Spec: corev1.NodeSpec{ProviderID: "openstack:///" + srv}}
		must(t, c.Create(ctx, node))
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		must(t, c.Status().Update(ctx, node))
	}
	must(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "psk"}, Data: map[string][]byte{"psk": []byte("scale-test-key")}}))

	cfg := operatorconfig.Default()
	cfg.Namespace = "bnerd-vpn-system"
	cfg.GatewayNetwork, cfg.ExternalNetwork, cfg.Router = "vpn-transit", "public", "shoot--services--vpn01"
	cfg.InternalSourceCIDRs, _ = operatorconfig.ParseCIDRList("10.254.0.0/24")
	cfg.ResyncInterval = time.Hour
	cfg.MaxConcurrentReconciles = 4

	var reconciles atomic.Int64
	start := func() func() {
		mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0", Logger: logr.Discard()})
		must(t, err)
		r := gateway.New(gateway.Deps{OpenStack: clients, Config: cfg, Log: logr.Discard(), SkipNameValidation: true,
			PortWait: openstack.WaitOpts{Interval: 50 * time.Millisecond, Timeout: time.Minute},
			Observe:  func(string, types.NamespacedName, error) { reconciles.Add(1) }})
		must(t, r.SetupWithManager(mgr))
		mctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = mgr.Start(mctx) }()
		return func() { cancel(); <-done }
	}

	s.ResetCounters()
	stop := start()
	t0 := time.Now()
	for i := 0; i < n; i++ {
		gw := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("gw-%03d", i)}, Spec: gwSpec(i)}
		must(t, c.Create(ctx, gw))
	}
	waitAll(t, c, ns, n)
	create := time.Since(t0)
	cc := s.Counters()
	createReconciles := reconciles.Load()
	stop()

	// Steady state: a restarted operator reconciles every converged gateway once.
	s.ResetCounters()
	reconciles.Store(0)
	stop = start()
	t1 := time.Now()
	for reconciles.Load() < int64(n) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // let stragglers (owned-object events) drain
	steady := time.Since(t1)
	sc := s.Counters()
	steadyReconciles := reconciles.Load()
	stop()

	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	fmt.Printf("gateways: %d\n", n)
	fmt.Printf("create: wall %s; OpenStack requests %d (%.1f/gateway), writes %d (%.1f/gateway), tokens %d; reconciles %d (%.1f/gateway)\n",
		create.Round(time.Millisecond), cc.Total(), float64(cc.Total())/float64(n), cc.Writes, float64(cc.Writes)/float64(n), cc.Tokens, createReconciles, float64(createReconciles)/float64(n))
	fmt.Printf("steady (restart, one pass): wall %s; OpenStack requests %d (%.1f/gateway), writes %d; reconciles %d (%.1f/gateway)\n",
		steady.Round(time.Millisecond), sc.Total(), float64(sc.Total())/float64(n), sc.Writes, steadyReconciles, float64(steadyReconciles)/float64(n))
	fmt.Printf("steady requests by route: %v\n", sc.ByRoute)
	fmt.Printf("peak RSS of the test process (operator + simulator in one process): %d MiB\n", ru.Maxrss/1024)
	if sc.Writes != 0 {
		t.Errorf("steady state made %d OpenStack writes: %v", sc.Writes, sc.ByRoute)
	}
}

func gwSpec(i int) v1alpha1.GatewaySpec {
	return v1alpha1.GatewaySpec{
		Tunnels: []v1alpha1.Tunnel{{Name: "hq",
			Peer:         v1alpha1.Peer{Address: fmt.Sprintf("198.51.%d.%d", 100+i/250, 1+i%250), Subnets: []string{"192.168.10.0/24"}},
			PreSharedKey: v1alpha1.SecretKeyRef{Name: "psk", Key: "psk"}}},
		Exposures: []v1alpha1.Exposure{{Name: "portal", Target: v1alpha1.Target{Address: "10.250.0.20", Ports: []v1alpha1.PortSpec{{Port: 443, Protocol: v1alpha1.ProtocolTCP}}}}},
		ReverseExposures: []v1alpha1.ReverseExposure{{Name: "erp", Tunnel: "hq",
			Target: v1alpha1.Target{Address: "192.168.10.5", Ports: []v1alpha1.PortSpec{{Port: 8443, Protocol: v1alpha1.ProtocolTCP}}}}},
	}
}

func waitAll(t *testing.T, c client.Client, ns string, n int) {
	deadline := time.Now().Add(20 * time.Minute)
	for {
		var l v1alpha1.IPsecGatewayList
		must(t, c.List(context.Background(), &l, client.InNamespace(ns)))
		ready := 0
		for _, g := range l.Items {
			for _, cd := range g.Status.Conditions {
				if cd.Type == v1alpha1.ConditionReady && cd.Status == metav1.ConditionTrue && cd.ObservedGeneration == g.Generation {
					ready++
				}
			}
		}
		if ready == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d gateways Ready", ready, n)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
