//go:build measure

package scale

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
	"bnerd.net/vpn-operator/test/harness"
)

// TestNodeLossTiming measures, with the operator as its own process, the time from a
// node's Ready condition turning False to each of its gateways' port being attached to
// the next node's server and its Deployment re-pinned there. Nova's own time is set in
// the simulator (its detach and attach finish that long after the API answered) and
// reported apart. Run by hand:
//
//	KUBEBUILDER_ASSETS=$(bash hack/controlplane.sh --print-dir) BNERD_SCALE=1 \
//	  go test -tags measure -count=1 -v -timeout 30m ./test/scale/ -run TestNodeLossTiming
func TestNodeLossTiming(t *testing.T) {
	if os.Getenv("BNERD_SCALE") != "1" {
		t.Skip("timing harness; run by hand with BNERD_SCALE=1")
	}
	ctrllog.SetLogger(logr.Discard())
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx := context.Background()
	c := env.Client
	gateways := envInt(t, "BNERD_SCALE_NODELOSS_GATEWAYS", 20, 1)

	for _, tc := range []struct {
		grace          time.Duration
		detach, attach time.Duration
	}{
		{0, 0, 0},
		{0, time.Second, 2 * time.Second},
		{5 * time.Second, 0, 0},
		{5 * time.Second, time.Second, 2 * time.Second},
	} {
		s, err := openstacksim.Start(harness.Estate(harness.EstateOptions{Workers: 2}))
		must(t, err)
		s.SetLatency(20 * time.Millisecond)
		s.SetNovaDelays(tc.attach, tc.detach)
		ns := fmt.Sprintf("nodeloss-%d", time.Now().UnixNano()%100000)
		must(t, harness.EnsureNamespace(ctx, c, ns))
		must(t, harness.TenantPolicy(ctx, c, "nodeloss-"+ns, ns))
		must(t, harness.EnsureNamespace(ctx, c, harness.OperatorNamespace))
		must(t, harness.CreateWorkers(ctx, c, 2))
		// Only worker-0 is eligible while the gateways are placed.
		setUnschedulable(t, ctx, c, harness.WorkerNode(1), true)
		must(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "psk"}, Data: map[string][]byte{"psk": []byte("scale-test-pre-shared-key-0123456789")}}))

		dir := t.TempDir()
		bin, err := harness.BuildOperator(dir)
		must(t, err)
		kubeconfig, err := env.WriteKubeConfig(dir)
		must(t, err)
		opEnv, err := harness.OperatorEnv(s, kubeconfig, "10.250.0.0/16", "IPSEC_NODE_NOT_READY_GRACE="+tc.grace.String(), "IPSEC_MAX_CONCURRENT_RECONCILES=8")
		must(t, err)
		op := &harness.Operator{Bin: bin, Env: opEnv, Args: []string{"--leader-elect=false", "--zap-log-level=error"}, LogPath: filepath.Join(dir, "operator.log")}
		must(t, op.Start())
		must(t, op.WaitServing(ctx, time.Minute))

		for i := 0; i < gateways; i++ {
			must(t, c.Create(ctx, &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("gw-%02d", i)}, Spec: gwSpec(i)}))
		}
		waitReady(t, ctx, env, ns, gateways, 0, 10*time.Minute)
		setUnschedulable(t, ctx, c, harness.WorkerNode(1), false)
		time.Sleep(2 * time.Second) // quiet

		// The node turns NotReady: measure until each gateway is on worker-1.
		target := harness.WorkerServerID(1)
		t0 := time.Now()
		must(t, harness.SetNodeReady(ctx, c, harness.WorkerNode(0), false))
		done := map[string]time.Duration{}
		deadline := t0.Add(5 * time.Minute)
		for len(done) < gateways {
			var l v1alpha1.IPsecGatewayList
			must(t, c.List(ctx, &l, client.InNamespace(ns)))
			for _, g := range l.Items {
				if _, ok := done[g.Name]; ok {
					continue
				}
				p, _ := s.Port(g.Status.PortID)
				var dep appsv1.Deployment
				if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: render.DeploymentName(g.Name)}, &dep); err != nil {
					continue
				}
				if p.DeviceID == target && render.PinnedNode(&dep.Spec.Template.Spec) == harness.WorkerNode(1) {
					done[g.Name] = time.Since(t0)
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d gateways moved after 5 minutes", len(done), gateways)
			}
			time.Sleep(20 * time.Millisecond)
		}
		var ds []time.Duration
		for _, d := range done {
			ds = append(ds, d)
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		nova := tc.detach + tc.attach
		fmt.Printf("node loss: grace %s, Nova detach %s + attach %s: %d gateways on the new server and re-pinned after median %s, max %s (of which grace %s and Nova %s; the rest, median %s / max %s, is the operator's)\n",
			tc.grace, tc.detach, tc.attach, gateways, ds[len(ds)/2].Round(10*time.Millisecond), ds[len(ds)-1].Round(10*time.Millisecond),
			tc.grace, nova, (ds[len(ds)/2] - tc.grace - nova).Round(10*time.Millisecond), (ds[len(ds)-1] - tc.grace - nova).Round(10*time.Millisecond))

		op.Stop()
		s.Close()
		// Leave the API server clean for the next case.
		var l v1alpha1.IPsecGatewayList
		must(t, c.List(ctx, &l, client.InNamespace(ns)))
		for i := range l.Items {
			l.Items[i].Finalizers = nil
			_ = c.Update(ctx, &l.Items[i])
			_ = c.Delete(ctx, &l.Items[i])
		}
		for i := 0; i < 2; i++ {
			_ = c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: harness.WorkerNode(i)}})
		}
		time.Sleep(time.Second)
	}
}

func setUnschedulable(t *testing.T, ctx context.Context, c client.Client, name string, on bool) {
	t.Helper()
	var n corev1.Node
	must(t, c.Get(ctx, client.ObjectKey{Name: name}, &n))
	n.Spec.Unschedulable = on
	must(t, c.Update(ctx, &n))
}
