package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// kubectl vpn tenant: the governing policy, its ranges and limits, and the tenant's
// gateways counted as the operator counts (the second gateway past the limit of one is
// refused, exit 1); the strict defaults for a namespace no policy selects (exit 0).
func TestTenantCommand(t *testing.T) {
	testenv.Need(t)
	ctx := context.Background()
	one := int32(1)
	pol := &v1alpha1.VPNTenantPolicy{ObjectMeta: metav1.ObjectMeta{Name: "cli-acme"}, Spec: v1alpha1.VPNTenantPolicySpec{
		NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.LabelTenant: "cli-acme"}},
		ExposureTargets:   []string{"10.250.0.0/16"}, RoutedSubnets: []string{"10.40.0.0/16"},
		Limits: v1alpha1.TenantLimits{Gateways: &one},
	}}
	if err := env.Client.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cli-tenant", Labels: map[string]string{v1alpha1.LabelTenant: "cli-acme"}}}); err != nil {
		t.Fatal(err)
	}
	gatewayWithStatus(t, "cli-tenant", "first")
	gatewayWithStatus(t, "cli-tenant", "second")

	out, errOut, code := run(t, nil, "tenant", "cli-tenant")
	if code != ExitProblem {
		t.Fatalf("exit %d, want %d (a gateway is refused): %s %s", code, ExitProblem, out, errOut)
	}
	for _, want := range []string{"namespace cli-tenant: VPNTenantPolicy cli-acme", "routed subnets:    10.40.0.0/16",
		"exposure targets:  10.250.0.0/16", "floating IPs:      none (no pins)", "refused: would pass gateways (2 of 1)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, _, _ = run(t, nil, "tenant", "cli-tenant", "-o", "json")
	var rep TenantReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// Both hold a service CIDR (established): the refused one still holds what it has,
	// so the usage counts it.
	// (Created in the same second, the two are ordered by UID: either may be refused.)
	if rep.Policy != "cli-acme" || rep.Usage.Gateways != 2 || rep.Limits.Gateways != 1 || len(rep.Gateways) != 2 ||
		len(rep.Gateways[0].Refused)+len(rep.Gateways[1].Refused) != 1 {
		t.Fatalf("report %+v", rep)
	}

	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cli-alone"}}); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = run(t, nil, "tenant", "cli-alone")
	if code != ExitOK || !strings.Contains(out, "no VPNTenantPolicy selects it; the strict defaults apply") ||
		!strings.Contains(out, "routed subnets:    none (routed mode off)") {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
}
