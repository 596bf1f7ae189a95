package tenantpolicy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	testenv.Main(m, &env)
}

func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
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

func gateway(ns, name string, tunnels int) *v1alpha1.IPsecGateway {
	g := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for i := range tunnels {
		g.Spec.Tunnels = append(g.Spec.Tunnels, v1alpha1.Tunnel{Name: fmt.Sprintf("t%d", i),
			Peer:         v1alpha1.Peer{Address: fmt.Sprintf("198.51.100.%d", 10+i), Subnets: []string{fmt.Sprintf("192.168.%d.0/24", i)}},
			PreSharedKey: v1alpha1.SecretKeyRef{Name: "psk"}})
	}
	g.Spec.Exposures = []v1alpha1.Exposure{{Name: "portal", Target: v1alpha1.Target{Address: "10.250.0.20", Ports: []v1alpha1.PortSpec{{Port: 443}}}}}
	return g
}

// The policy reports what it governs: the namespaces it selects (by their labels, as
// they change), what their gateways hold against its limits and which gateways the
// limits refuse (the newer one), and an overlap with another policy, on both policies.
func TestPolicyStatus(t *testing.T) {
	testenv.Need(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	suffix := fmt.Sprint(time.Now().UnixNano() % 100000)
	a1, a2, b := "tp-a1-"+suffix, "tp-a2-"+suffix, "tp-b-"+suffix
	for ns, tenant := range map[string]string{a1: "acme-" + suffix, a2: "acme-" + suffix, b: "other-" + suffix} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{v1alpha1.LabelTenant: tenant}}}); err != nil {
			t.Fatal(err)
		}
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&Reconciler{SkipNameValidation: true}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	defer func() { cancel(); <-done }()

	one := int32(1)
	pol := &v1alpha1.VPNTenantPolicy{ObjectMeta: metav1.ObjectMeta{Name: "acme-" + suffix}, Spec: v1alpha1.VPNTenantPolicySpec{
		NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.LabelTenant: "acme-" + suffix}},
		Limits:            v1alpha1.TenantLimits{Gateways: &one},
	}}
	if err := env.Client.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	defer env.Client.Delete(context.Background(), pol)
	g1 := gateway(a1, "g1", 2)
	if err := env.Client.Create(ctx, g1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // creation times have whole seconds
	if err := env.Client.Create(ctx, gateway(a2, "g2", 1)); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, gateway(b, "g3", 3)); err != nil {
		t.Fatal(err)
	}
	get := func(name string) *v1alpha1.VPNTenantPolicy {
		var p v1alpha1.VPNTenantPolicy
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		return &p
	}
	cond := func(p *v1alpha1.VPNTenantPolicy, typ string) string {
		c := meta.FindStatusCondition(p.Status.Conditions, typ)
		if c == nil {
			return typ + "=<none>"
		}
		return fmt.Sprintf("%s=%s/%s: %s", typ, c.Status, c.Reason, c.Message)
	}
	eventually(t, "usage and the refused gateway", func() (bool, string) {
		p := get(pol.Name)
		ok := strings.Join(p.Status.Namespaces, ",") == a1+","+a2 && p.Status.NamespaceCount == 2 &&
			p.Status.Usage.Gateways == 1 && p.Status.Usage.Tunnels == 2 && p.Status.Usage.Exposures == 1 && p.Status.RefusedGateways == 1 &&
			strings.Contains(cond(p, v1alpha1.ConditionWithinLimits), "False/LimitExceeded") &&
			strings.Contains(cond(p, v1alpha1.ConditionWithinLimits), "IPsecGateway "+a2+"/g2 (gateways (2 of 1))") &&
			strings.Contains(cond(p, v1alpha1.ConditionReady), "False/LimitExceeded")
		return ok, fmt.Sprintf("%+v %s %s", p.Status, cond(p, v1alpha1.ConditionWithinLimits), cond(p, v1alpha1.ConditionReady))
	})

	// Another policy selects a2 too: both say so.
	other := &v1alpha1.VPNTenantPolicy{ObjectMeta: metav1.ObjectMeta{Name: "overlap-" + suffix}, Spec: v1alpha1.VPNTenantPolicySpec{
		NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: a2}}}}
	if err := env.Client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the overlap on both policies", func() (bool, string) {
		p, o := get(pol.Name), get(other.Name)
		cp, co := cond(p, v1alpha1.ConditionExclusive), cond(o, v1alpha1.ConditionExclusive)
		return strings.Contains(cp, "False/PolicyOverlap") && strings.Contains(cp, a2+" (also "+other.Name+")") &&
			strings.Contains(co, "False/PolicyOverlap") && strings.Contains(co, a2+" (also "+pol.Name+")"), cp + " | " + co
	})
	if err := env.Client.Delete(ctx, other); err != nil {
		t.Fatal(err)
	}
	// a2 leaves the tenant (its label changes): one namespace, nothing refused.
	eventually(t, "relabel a2", func() (bool, string) {
		var ns corev1.Namespace
		if err := env.Client.Get(ctx, client.ObjectKey{Name: a2}, &ns); err != nil {
			return false, err.Error()
		}
		ns.Labels[v1alpha1.LabelTenant] = "other-" + suffix
		err := env.Client.Update(ctx, &ns)
		return err == nil, fmt.Sprint(err)
	})
	eventually(t, "a2 no longer counted", func() (bool, string) {
		p := get(pol.Name)
		return p.Status.NamespaceCount == 1 && p.Status.RefusedGateways == 0 && strings.Contains(cond(p, v1alpha1.ConditionReady), "True") &&
			strings.Contains(cond(p, v1alpha1.ConditionExclusive), "True/NoOverlap"), fmt.Sprintf("%+v", p.Status)
	})
}
