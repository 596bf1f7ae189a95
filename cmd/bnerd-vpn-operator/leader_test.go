package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/controller/gateway"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// The binary's defaults: leader election on, and one resync mechanism (the reconcilers'
// own requeue; no cache SyncPeriod of the same interval on top).
func TestManagerDefaults(t *testing.T) {
	f, cfg, err := parseFlags(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if !f.leaderElect {
		t.Fatal("leader election is off by default")
	}
	scheme, err := newScheme()
	if err != nil {
		t.Fatal(err)
	}
	opts := managerOptions(f, cfg, scheme)
	if !opts.LeaderElection || opts.LeaderElectionID != LeaderElectionID || !opts.LeaderElectionReleaseOnCancel {
		t.Fatalf("leader election options %v %q %v", opts.LeaderElection, opts.LeaderElectionID, opts.LeaderElectionReleaseOnCancel)
	}
	if opts.Cache.SyncPeriod != nil {
		t.Fatalf("the cache has a SyncPeriod (%s) besides the reconcilers' resync", *opts.Cache.SyncPeriod)
	}
	// No Secret is ever read through an informer (docs/security.md).
	if opts.Client.Cache == nil || len(opts.Client.Cache.DisableFor) != 1 {
		t.Fatal("the manager's client may cache Secrets")
	}
	if _, ok := opts.Client.Cache.DisableFor[0].(*corev1.Secret); !ok {
		t.Fatalf("the client's uncached kind is %T, want Secret", opts.Client.Cache.DisableFor[0])
	}
	off, _, err := parseFlags([]string{"--leader-elect=false"}, func(string) string { return "" })
	if err != nil || off.leaderElect {
		t.Fatalf("--leader-elect=false: %v %v", off.leaderElect, err)
	}
	// controller-runtime's timing unless set; a shorter one reaches the manager.
	if *opts.LeaseDuration != 15*time.Second || *opts.RenewDeadline != 10*time.Second || *opts.RetryPeriod != 2*time.Second {
		t.Fatalf("leader election timing %s %s %s", *opts.LeaseDuration, *opts.RenewDeadline, *opts.RetryPeriod)
	}
	short, cfg, err := parseFlags([]string{"--leader-election-lease-duration=6s", "--leader-election-renew-deadline=4s", "--leader-election-retry-period=1s"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if o := managerOptions(short, cfg, scheme); *o.LeaseDuration != 6*time.Second || *o.RenewDeadline != 4*time.Second || *o.RetryPeriod != time.Second {
		t.Fatalf("leader election timing %s %s %s, want 6s 4s 1s", *o.LeaseDuration, *o.RenewDeadline, *o.RetryPeriod)
	}
	for _, bad := range [][]string{
		{"--leader-election-lease-duration=4s", "--leader-election-renew-deadline=4s"},
		{"--leader-election-renew-deadline=2s", "--leader-election-retry-period=2s"},
		{"--leader-election-retry-period=0s"},
	} {
		if _, _, err := parseFlags(bad, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "leader election") {
			t.Errorf("%v: %v, want the leader election's rule", bad, err)
		}
	}
}

// Two managers built with the binary's options against one API server: exactly one
// wins the Lease and reconciles; the other reconciles nothing until the leader stops,
// then takes over.
func TestOnlyTheLeaderReconciles(t *testing.T) {
	testenv.Need(t)
	seed, err := openstacksim.LoadSeed(filepath.Join(testenv.RepoRoot(), "examples", "sim-estate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := openstacksim.Start(seed)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	id, secret, _ := s.AppCredential("vpn-operator")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clients, err := openstack.NewClients(ctx, openstack.Credential{AuthURL: s.AuthURL(), Region: s.Region(), AppCredentialID: id, AppCredentialSecret: secret}, openstack.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "leader-test"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	envVars := map[string]string{
		"POD_NAMESPACE": ns, "IPSEC_GATEWAY_NETWORK": "vpn-transit", "IPSEC_EXTERNAL_NETWORK": "public", "IPSEC_ROUTER_ID": "shoot--services--vpn01",
	}
	f, cfg, err := parseFlags([]string{"--metrics-bind-address=0", "--health-probe-bind-address=0"}, func(k string) string { return envVars[k] })
	if err != nil {
		t.Fatal(err)
	}
	scheme, err := newScheme()
	if err != nil {
		t.Fatal(err)
	}

	type replica struct {
		name       string
		mgr        ctrl.Manager
		reconciles atomic.Int64
		stop       func()
	}
	start := func(name string) *replica {
		rep := &replica{name: name}
		opts := managerOptions(f, cfg, scheme)
		// Test pacing only: a short lease so the takeover below does not take 15 s.
		lease, renew, retry := 4*time.Second, 3*time.Second, 200*time.Millisecond
		opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod = &lease, &renew, &retry
		opts.Logger = logr.Discard()
		mgr, err := ctrl.NewManager(env.Config, opts)
		if err != nil {
			t.Fatal(err)
		}
		r := gateway.New(gateway.Deps{OpenStack: clients, Config: cfg, Log: logr.Discard(), SkipNameValidation: true,
			Observe: func(string, types.NamespacedName, error) { rep.reconciles.Add(1) }})
		if err := r.SetupWithManager(mgr); err != nil {
			t.Fatal(err)
		}
		mctx, mcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- mgr.Start(mctx) }()
		rep.mgr = mgr
		rep.stop = func() {
			mcancel()
			if err := <-done; err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		return rep
	}
	a, b := start("a"), start("b")
	defer func() {
		a.stop()
		b.stop()
		// Leave nothing for the next test's operator to reconcile.
		var l v1alpha1.IPsecGatewayList
		_ = env.Client.List(context.Background(), &l, client.InNamespace(ns))
		for i := range l.Items {
			g := &l.Items[i]
			g.Finalizers = nil
			_ = env.Client.Update(context.Background(), g)
			_ = env.Client.Delete(context.Background(), g)
		}
	}()

	var leader, follower *replica
	select {
	case <-a.mgr.Elected():
		leader, follower = a, b
	case <-b.mgr.Elected():
		leader, follower = b, a
	case <-time.After(time.Minute):
		t.Fatal("no replica became leader")
	}

	const n = 3
	for i := range n {
		gw := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("gw-%d", i)}, Spec: v1alpha1.GatewaySpec{
			Tunnels: []v1alpha1.Tunnel{{Name: "hq", Peer: v1alpha1.Peer{Address: "198.51.100.7", Subnets: []string{"192.168.10.0/24"}},
				PreSharedKey: v1alpha1.SecretKeyRef{Name: "psk"}}},
		}}
		if err := env.Client.Create(ctx, gw); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "the leader reconciled every gateway", func() bool { return leader.reconciles.Load() >= n })
	// Give the follower every chance to do something wrong: the leader reconciles the
	// same objects again meanwhile.
	time.Sleep(2 * time.Second)
	select {
	case <-follower.mgr.Elected():
		t.Fatal("both replicas are leaders")
	default:
	}
	if got := follower.reconciles.Load(); got != 0 {
		t.Fatalf("the follower reconciled %d times while %s led", got, leader.name)
	}
	t.Logf("leader %s: %d reconciles; follower %s: 0", leader.name, leader.reconciles.Load(), follower.name)

	// The leader goes away (releasing its Lease): the follower takes over and
	// reconciles the gateways it finds.
	leader.stop()
	leader.stop = func() {}
	select {
	case <-follower.mgr.Elected():
	case <-time.After(time.Minute):
		t.Fatal("the follower never took over")
	}
	waitUntil(t, "the new leader reconciled every gateway", func() bool { return follower.reconciles.Load() >= n })
}

// waitUntil polls with a generous deadline; it asserts an outcome, never a duration.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
