package chart

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/kube"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// monitoringCRDs returns a directory with the Prometheus Operator's ServiceMonitor,
// PodMonitor and PrometheusRule CRDs, generated with the project's pinned controller-gen
// from the Prometheus Operator API module this test module requires (the same types the
// rendering tests convert to), and cached by that module's version.
func monitoringCRDs(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}} {{.Version}}", "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring").Output()
	if err != nil {
		t.Fatalf("locating the Prometheus Operator API module: %v", err)
	}
	f := strings.Fields(string(out))
	if len(f) != 2 {
		t.Fatalf("go list: %q", out)
	}
	src, version := f[0], f[1]
	home, _ := os.UserHomeDir()
	dir := filepath.Join(home, ".cache", "bnerd-vpn-operator", "monitoring-crds", version)
	want := []string{"monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_podmonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml"}
	have := true
	for _, w := range want {
		if _, err := os.Stat(filepath.Join(dir, w)); err != nil {
			have = false
		}
	}
	if !have {
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			t.Fatal(err)
		}
		tmp, err := os.MkdirTemp(filepath.Dir(dir), ".gen-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		// The pinned controller-gen run inside the API module, so its packages resolve
		// with that module's own dependencies.
		cmd := exec.Command("go", "run", "sigs.k8s.io/controller-tools/cmd/controller-gen@"+controllerGenVersion(t),
			"crd:crdVersions=v1,maxDescLen=0", "paths=./v1/...", "output:crd:dir="+tmp)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("generating the monitoring CRDs: %v\n%s", err, b)
		}
		for _, w := range want {
			if _, err := os.Stat(filepath.Join(tmp, w)); err != nil {
				t.Fatalf("controller-gen did not write %s", w)
			}
		}
		_ = os.RemoveAll(dir)
		if err := os.Rename(tmp, dir); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	// Only the three kinds the chart uses.
	only := t.TempDir()
	for _, w := range want {
		b, err := os.ReadFile(filepath.Join(dir, w))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(only, w), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return only
}

// controllerGenVersion is the controller-tools version the operator's go.mod pins.
func controllerGenVersion(t *testing.T) string {
	b, err := os.ReadFile(fromRoot("go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == "sigs.k8s.io/controller-tools" {
			return f[1]
		}
	}
	t.Fatal("go.mod pins no sigs.k8s.io/controller-tools")
	return ""
}

// A real `helm install` (the Helm SDK against the API server, not a client-side render)
// into a cluster that has the Prometheus Operator's CRDs: Helm discovers the monitoring
// kinds, so the default `auto` creates the ServiceMonitor, PodMonitor and PrometheusRule,
// and the API server admits them against the CRDs' schemas. Without the CRDs the same
// install (TestInstallOnAPIServer) creates none.
func TestHelmInstallWithPrometheusOperatorCRDs(t *testing.T) {
	dir, why := controlPlaneDir()
	if dir == "" {
		if os.Getenv(requireEnvtest) == "1" {
			t.Fatalf("%s=1 but no control plane: %s", requireEnvtest, why)
		}
		t.Skip("no control plane: " + why)
	}
	crds := monitoringCRDs(t)
	env := &envtest.Environment{BinaryAssetsDirectory: dir, CRDDirectoryPaths: []string{crds}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	user, err := env.AddUser(envtest.User{Name: "helm", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}

	ac := &action.Configuration{}
	if err := ac.Init(kube.GetConfig(kubeconfig, "", releaseNS), releaseNS, "secret", func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	in := action.NewInstall(ac)
	in.ReleaseName, in.Namespace, in.CreateNamespace = releaseName, releaseNS, true
	rel, err := in.Run(loadChart(t), requiredValues())
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	if !strings.Contains(rel.Manifest, "kind: PrometheusRule") {
		t.Errorf("auto did not render the PrometheusRule although the API server serves it")
	}

	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, o := range []struct{ resource, name string }{
		{"servicemonitors", fullname},
		{"podmonitors", fullname + "-gateways"},
		{"prometheusrules", fullname + "-gateways"},
	} {
		u, err := dyn.Resource(schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: o.resource}).
			Namespace(releaseNS).Get(ctx, o.name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s %s not created by the install: %v", o.resource, o.name, err)
			continue
		}
		if o.resource == "prometheusrules" {
			rules, _, _ := unstructured.NestedSlice(u.Object, "spec", "groups")
			if len(rules) != 1 {
				t.Errorf("PrometheusRule groups %v", rules)
			}
		}
	}
}
