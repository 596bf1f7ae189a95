package gatewaymetrics

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	testenv.Main(m, &env)
}

func tunnelSpec() v1alpha1.GatewaySpec {
	return v1alpha1.GatewaySpec{Tunnels: []v1alpha1.Tunnel{{
		Name: "hq", Peer: v1alpha1.Peer{Address: "198.51.100.7", Subnets: []string{"192.168.10.0/24"}},
		PreSharedKey: v1alpha1.SecretKeyRef{Name: "hq-psk"},
	}}}
}

// deployment creates the gateway's Deployment, controlled by owner, with the given
// ready replicas in its status (no controller runs in the test API server).
func deployment(t *testing.T, ctx context.Context, owner client.Object, gvk schema.GroupVersionKind, ready int32) {
	t.Helper()
	labels := map[string]string{"app": owner.GetName()}
	ctl := true
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: owner.GetNamespace(), Name: render.DeploymentName(owner.GetName()),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: owner.GetName(), UID: owner.GetUID(), Controller: &ctl}}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}},
		},
	}
	if err := env.Client.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: ready, AvailableReplicas: ready}
	if err := env.Client.Status().Update(ctx, d); err != nil {
		t.Fatal(err)
	}
}

// The collector reads the real API server: every gateway not being deleted has an info
// series; pod readiness comes from the gateway's own Deployment; tunnel states and
// exposure counts from status.
func TestCollector(t *testing.T) {
	testenv.Need(t)
	ctx := t.Context()
	ns := "metrics-test"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	office := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "office"}, Spec: tunnelSpec()}
	if err := env.Client.Create(ctx, office); err != nil {
		t.Fatal(err)
	}
	office.Status = v1alpha1.GatewayStatus{
		NodeName: "node-a", FloatingIP: "203.0.113.10",
		Exposures:        []v1alpha1.AllocatedAddress{{Name: "a", VirtualIP: "100.64.0.10"}, {Name: "b", VirtualIP: "100.64.0.11"}},
		ReverseExposures: []v1alpha1.AllocatedAddress{{Name: "r", VirtualIP: "100.64.0.200"}},
		Tunnels:          []v1alpha1.TunnelState{{Name: "hq", State: "Up"}, {Name: "branch", State: "Down"}},
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonReconciled,
			ObservedGeneration: office.Generation, LastTransitionTime: metav1.Now()},
			{Type: v1alpha1.ConditionTunnelsUp, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonTunnelsDown,
				ObservedGeneration: office.Generation, LastTransitionTime: metav1.Now()}},
	}
	if err := env.Client.Status().Update(ctx, office); err != nil {
		t.Fatal(err)
	}
	deployment(t, ctx, office, v1alpha1.GroupVersion.WithKind("IPsecGateway"), 1)

	// A VPNGateway whose pod is not ready and whose Ready condition is stale (older
	// generation); its status agent's last report is stale too (TunnelsUp Unknown): no
	// tunnel series.
	dc := &v1alpha1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dc"}, Spec: v1alpha1.VPNGatewaySpec{GatewaySpec: tunnelSpec()}}
	if err := env.Client.Create(ctx, dc); err != nil {
		t.Fatal(err)
	}
	dc.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonReconciled,
		ObservedGeneration: dc.Generation - 1, LastTransitionTime: metav1.Now()},
		{Type: v1alpha1.ConditionTunnelsUp, Status: metav1.ConditionUnknown, Reason: v1alpha1.ReasonStatusAgentSilent,
			ObservedGeneration: dc.Generation, LastTransitionTime: metav1.Now()}}
	dc.Status.Tunnels = []v1alpha1.TunnelState{{Name: "hq", State: "Up"}}
	if err := env.Client.Status().Update(ctx, dc); err != nil {
		t.Fatal(err)
	}
	deployment(t, ctx, dc, v1alpha1.GroupVersion.WithKind("VPNGateway"), 0)

	// No Deployment at all: pod not ready.
	fresh := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fresh"}, Spec: tunnelSpec()}
	if err := env.Client.Create(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	// Being deleted: no series.
	gone := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone", Finalizers: []string{v1alpha1.FinalizerGateway}}, Spec: tunnelSpec()}
	if err := env.Client.Create(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Get(context.Background(), client.ObjectKeyFromObject(gone), gone)
		gone.Finalizers = nil
		_ = env.Client.Update(context.Background(), gone)
	})

	c := &Collector{Reader: env.Client}
	want := `
# HELP bnerd_gateway_info 1 for every gateway that exists and is not being deleted: its pod should be running and scraped.
# TYPE bnerd_gateway_info gauge
bnerd_gateway_info{floating_ip="",gateway="dc",gateway_kind="vpngateway",namespace="metrics-test",node=""} 1
bnerd_gateway_info{floating_ip="",gateway="fresh",gateway_kind="ipsecgateway",namespace="metrics-test",node=""} 1
bnerd_gateway_info{floating_ip="203.0.113.10",gateway="office",gateway_kind="ipsecgateway",namespace="metrics-test",node="node-a"} 1
# HELP bnerd_gateway_pod_ready 1 when the gateway's Deployment reports a ready pod; 0 while the pod is missing, pending, crash-looping or unready.
# TYPE bnerd_gateway_pod_ready gauge
bnerd_gateway_pod_ready{gateway="dc",gateway_kind="vpngateway",namespace="metrics-test"} 0
bnerd_gateway_pod_ready{gateway="fresh",gateway_kind="ipsecgateway",namespace="metrics-test"} 0
bnerd_gateway_pod_ready{gateway="office",gateway_kind="ipsecgateway",namespace="metrics-test"} 1
# HELP bnerd_gateway_ready 1 when the gateway's Ready condition is True for its current generation: every phase converged, its pod ready, every tunnel up.
# TYPE bnerd_gateway_ready gauge
bnerd_gateway_ready{gateway="dc",gateway_kind="vpngateway",namespace="metrics-test"} 0
bnerd_gateway_ready{gateway="fresh",gateway_kind="ipsecgateway",namespace="metrics-test"} 0
bnerd_gateway_ready{gateway="office",gateway_kind="ipsecgateway",namespace="metrics-test"} 1
# HELP bnerd_gateway_tunnel_reported_up The tunnel's state as the gateway's status agent last wrote it into status.tunnels: 1 Up, 0 otherwise; absent while that report is not current (condition TunnelsUp Unknown).
# TYPE bnerd_gateway_tunnel_reported_up gauge
bnerd_gateway_tunnel_reported_up{gateway="office",gateway_kind="ipsecgateway",namespace="metrics-test",tunnel="branch"} 0
bnerd_gateway_tunnel_reported_up{gateway="office",gateway_kind="ipsecgateway",namespace="metrics-test",tunnel="hq"} 1
# HELP bnerd_gateway_exposures Exposures (direction forward) and reverse exposures (direction reverse) with an allocated virtual IP.
# TYPE bnerd_gateway_exposures gauge
bnerd_gateway_exposures{direction="forward",gateway="dc",gateway_kind="vpngateway",namespace="metrics-test"} 0
bnerd_gateway_exposures{direction="forward",gateway="fresh",gateway_kind="ipsecgateway",namespace="metrics-test"} 0
bnerd_gateway_exposures{direction="forward",gateway="office",gateway_kind="ipsecgateway",namespace="metrics-test"} 2
bnerd_gateway_exposures{direction="reverse",gateway="dc",gateway_kind="vpngateway",namespace="metrics-test"} 0
bnerd_gateway_exposures{direction="reverse",gateway="fresh",gateway_kind="ipsecgateway",namespace="metrics-test"} 0
bnerd_gateway_exposures{direction="reverse",gateway="office",gateway_kind="ipsecgateway",namespace="metrics-test"} 1
# HELP bnerd_gateway_metrics_errors 1 when listing gateways or their Deployments for these metrics failed during this scrape.
# TYPE bnerd_gateway_metrics_errors gauge
bnerd_gateway_metrics_errors 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	// The collector is a valid collector for a registry (no duplicate or inconsistent series).
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
