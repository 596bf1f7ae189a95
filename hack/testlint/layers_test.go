package testlint

import (
	"path/filepath"
	"runtime"
	"slices"
	"testing"
)

// No package imports against the project's layering (Layers).
func TestImportsFollowTheLayers(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	imports, err := Imports(root)
	if err != nil {
		t.Fatal(err)
	}
	// The scan sees the tree: the operator's entry point imports the gateway controller,
	// and the chart module's packages are not the operator's.
	if !slices.Contains(imports["cmd/bnerd-vpn-operator"], "internal/controller/gateway") {
		t.Fatalf("the scan missed cmd/bnerd-vpn-operator's import of the gateway controller: %v", imports["cmd/bnerd-vpn-operator"])
	}
	if _, ok := imports["test/chart"]; ok {
		t.Fatal("the scan entered the chart's own module")
	}
	for _, v := range LayerViolations(imports, Layers) {
		t.Error(v)
	}
}

// The rules catch the three wrong-way imports they were written against (diagnose on
// the gateway controller, the status agent on the operator's configuration, init-nat on
// the exporter) and a product package linking the simulator, and let the allowed
// directions pass.
func TestLayerViolationsFindsWrongWayImports(t *testing.T) {
	imports := map[string][]string{
		"internal/kubectlvpn/diagnose": {"internal/controller/gateway", "internal/openstack"},
		"internal/agent/status":        {"internal/operatorconfig", "internal/gatewayconfig"},
		"internal/agent/initnat":       {"internal/agent/exporter", "internal/agent/statefile"},
		"cmd/bnerd-vpn-operator":       {"internal/controller/gateway"},
		"test/harness":                 {"internal/controller/clusterlink"},
		"internal/controller/gateway":  {"internal/controller/outcome"},
		"internal/agent/exporter":      {"internal/agent/statefile"},
		"internal/operatorconfig":      {"internal/gatewayconfig"},
		"internal/controllerish/other": {"internal/controllers"},
		"internal/quota":               {"internal/testinfra/openstacksim"},
		"cmd/sandbox":                  {"internal/testinfra/world", "internal/testinfra/openstacksim"},
		"internal/testinfra/world":     {"internal/testinfra/fabric"},
		"test/soak":                    {"internal/testinfra/testenv"},
	}
	got := LayerViolations(imports, Layers)
	want := []string{
		"internal/kubectlvpn/diagnose imports internal/controller/gateway",
		"internal/agent/status imports internal/operatorconfig",
		"internal/agent/initnat imports internal/agent/exporter",
		"internal/quota imports internal/testinfra/openstacksim",
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(v string) bool { return len(v) > len(w) && v[:len(w)] == w }) {
			t.Errorf("no violation %q in %q", w, got)
		}
	}
	// diagnose breaks two rules (any package, the read-only tools), the others one each.
	if len(got) != 5 {
		t.Errorf("%d violations, want 5: %q", len(got), got)
	}
}

// No package outside the API handles the two gateway kinds one by one: they read both
// through v1alpha1.Gateway (ListGateways, NewGateway, GatewayKinds). The exceptions
// is the WireGuard key watch, where the kind is the subject (only a VPNGateway has a
// key).
func TestNoPackageSwitchesOnTheGatewayKind(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	allowed := []string{"internal/controller/gateway/wireguard_key.go:(*v1alpha1.VPNGateway)"}
	found, err := KindSwitches(root, []string{"cmd", "internal"}, allowed)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("handles the gateway kinds one by one (use v1alpha1.Gateway): %s", f)
	}
	// The scan finds what it looks for: the API's own accessor does it on purpose.
	inAPI, err := KindSwitches(root, []string{"api"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(inAPI) == 0 {
		t.Fatal("the scan found no kind switch even in the API's accessor: it is broken")
	}
}
