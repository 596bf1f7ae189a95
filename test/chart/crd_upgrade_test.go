package chart

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/testinfra/testenv"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/kube"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

const vpnGatewaysCRD = "vpngateways.ipsec.bnerd.net"

// withCRD returns a copy of the chart whose vpngateways CRD file is changed by edit,
// as another chart version would ship it.
func withCRD(t *testing.T, c *chart.Chart, version string, edit func(crd map[string]any)) *chart.Chart {
	t.Helper()
	out := *c
	md := *c.Metadata
	md.Version = version
	out.Metadata = &md
	out.Files = nil
	for _, f := range c.Files {
		if f.Name == "files/crds/ipsec.bnerd.net_vpngateways.yaml" {
			var crd map[string]any
			if err := yaml.Unmarshal(f.Data, &crd); err != nil {
				t.Fatal(err)
			}
			edit(crd)
			b, err := yaml.Marshal(crd)
			if err != nil {
				t.Fatal(err)
			}
			f = &chart.File{Name: f.Name, Data: b}
		}
		out.Files = append(out.Files, f)
	}
	return &out
}

// printerColumns returns the names of the served version's printer columns of the CRD
// object (unstructured, as in a chart file).
func printerColumns(crd map[string]any) *[]any {
	versions := crd["spec"].(map[string]any)["versions"].([]any)
	v := versions[0].(map[string]any)
	cols, _ := v["additionalPrinterColumns"].([]any)
	v["additionalPrinterColumns"] = cols
	p := cols
	return &p
}

func setColumns(crd map[string]any, cols []any) {
	crd["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)["additionalPrinterColumns"] = cols
}

func liveColumns(t *testing.T, c client.Client) []string {
	t.Helper()
	var crd apiextensionsv1.CustomResourceDefinition
	if err := c.Get(context.Background(), client.ObjectKey{Name: vpnGatewaysCRD}, &crd); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, col := range crd.Spec.Versions[0].AdditionalPrinterColumns {
		out = append(out, col.Name)
	}
	return out
}

// The chart installs and upgrades its CRDs, with the Helm SDK against a real API server:
//   - CRDs a release of the old layout installed from crds/ (no Helm ownership) make
//     the install fail, naming the ownership; labelled and annotated as docs/helm.md
//     says, the release adopts and upgrades them;
//   - a helm upgrade to a chart whose CRD changed changes the CRD in the cluster (what
//     Helm's crds/ directory never does);
//   - every example of artifacthub.io/crdsExamples is admitted;
//   - crds.enabled=false and an uninstall leave the CRDs and the objects (crds.keep);
//     with crds.keep=false the uninstall removes them.
func TestCRDUpgradeByChart(t *testing.T) {
	dir, why := controlPlaneDir()
	if dir == "" {
		if os.Getenv(requireEnvtest) == "1" {
			t.Fatalf("%s=1 but no control plane: %s", requireEnvtest, why)
		}
		t.Skip("no control plane: " + why)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: dir}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	user, err := env.AddUser(envtest.User{Name: "helm", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = apiextensionsv1.AddToScheme(scheme)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ns := range []string{releaseNS, "tenant-a"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	ac := &action.Configuration{}
	if err := ac.Init(kube.GetConfig(kubeconfig, "", releaseNS), releaseNS, "secret", func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	current := loadChart(t)

	// A previous layout's install: the CRDs applied from crds/, one column fewer.
	old := withCRD(t, current, "0.0.9", func(crd map[string]any) {
		cols := *printerColumns(crd)
		var kept []any
		for _, col := range cols {
			if col.(map[string]any)["name"] != "Protocol" {
				kept = append(kept, col)
			}
		}
		setColumns(crd, kept)
	})
	for _, f := range old.Files {
		if !strings.HasPrefix(f.Name, "files/crds/") {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(f.Data, &u.Object); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	waitEstablished(t, c)
	if cols := liveColumns(t, c); contains(cols, "Protocol") {
		t.Fatalf("the old CRD has the Protocol column already: %v", cols)
	}
	gw := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(`{"apiVersion":"ipsec.bnerd.net/v1alpha1","kind":"VPNGateway","metadata":{"name":"kept","namespace":"tenant-a"},
		"spec":{"tunnels":[{"name":"hq","peer":{"address":"198.51.100.7","subnets":["192.168.10.0/24"]},"preSharedKey":{"name":"hq-psk"}}]}}`), &gw.Object); err != nil {
		t.Fatal(err)
	}
	// Established does not mean discovery already serves the kind: retry a while.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Create(ctx, gw.DeepCopy())
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("creating a VPNGateway under the old CRD: %v", c.Create(ctx, gw.DeepCopy()))
	}

	install := func(ch *chart.Chart, vals map[string]any) error {
		in := action.NewInstall(ac)
		in.ReleaseName, in.Namespace = releaseName, releaseNS
		_, err := in.Run(ch, vals)
		return err
	}
	upgrade := func(ch *chart.Chart, vals map[string]any) {
		t.Helper()
		up := action.NewUpgrade(ac)
		up.Namespace = releaseNS
		if _, err := up.Run(releaseName, ch, vals); err != nil {
			t.Fatalf("helm upgrade to %s: %v", ch.Metadata.Version, err)
		}
	}
	err = install(current, requiredValues())
	if err == nil || !strings.Contains(err.Error(), "invalid ownership metadata") || !strings.Contains(err.Error(), "CustomResourceDefinition") || !strings.Contains(err.Error(), ".ipsec.bnerd.net") {
		t.Fatalf("installing over CRDs Helm does not own: want an ownership error naming the CRD, got %v", err)
	}
	// docs/helm.md, "Upgrades": hand the CRDs to the release.
	for _, f := range current.Files {
		if !strings.HasPrefix(f.Name, "files/crds/") {
			continue
		}
		var m struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		_ = yaml.Unmarshal(f.Data, &m)
		patch := []byte(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":"Helm"},"annotations":{"meta.helm.sh/release-name":"` + releaseName + `","meta.helm.sh/release-namespace":"` + releaseNS + `"}}}`)
		crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: m.Metadata.Name}}
		if err := c.Patch(ctx, crd, client.RawPatch("application/merge-patch+json", patch)); err != nil {
			t.Fatal(err)
		}
	}
	// A failed install leaves a release record behind; remove it as `helm uninstall` would.
	un := action.NewUninstall(ac)
	un.KeepHistory = false
	_, _ = un.Run(releaseName)
	if err := install(current, requiredValues()); err != nil {
		t.Fatalf("install after the adoption: %v", err)
	}
	if cols := liveColumns(t, c); !contains(cols, "Protocol") {
		t.Fatalf("the install did not bring the CRD up to the chart's: columns %v", cols)
	}

	// helm upgrade to a chart whose CRD changed.
	newer := withCRD(t, current, "0.1.1", func(crd map[string]any) {
		cols := *printerColumns(crd)
		setColumns(crd, append(cols, map[string]any{"name": "Upgraded", "type": "string", "jsonPath": ".spec.protocol", "priority": 1}))
	})
	upgrade(newer, requiredValues())
	var crd apiextensionsv1.CustomResourceDefinition
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return contains(liveColumns(t, c), "Upgraded"), nil
	})
	if err != nil {
		t.Fatalf("helm upgrade left the CRD as it was: columns %v", liveColumns(t, c))
	}
	if err := c.Get(ctx, client.ObjectKey{Name: vpnGatewaysCRD}, &crd); err != nil {
		t.Fatal(err)
	}
	if crd.Labels["helm.sh/chart"] != "bnerd-vpn-operator-0.1.1" || crd.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Errorf("upgraded CRD labels %v annotations %v", crd.Labels, crd.Annotations)
	}

	// The examples ArtifactHub shows are admitted by the CRDs the chart installs.
	var examples []map[string]any
	if err := yaml.Unmarshal([]byte(current.Metadata.Annotations["artifacthub.io/crdsExamples"]), &examples); err != nil {
		t.Fatal(err)
	}
	for _, ex := range examples {
		u := &unstructured.Unstructured{Object: ex}
		if err := c.Create(ctx, u, client.DryRunAll, client.FieldValidation("Strict")); err != nil {
			t.Errorf("crdsExamples %s %s refused: %v", u.GetKind(), u.GetName(), err)
		}
	}

	// Turning crds.enabled off, then uninstalling, keeps the CRDs and the gateway.
	upgrade(current, with(requiredValues(), "crds.enabled", false))
	un = action.NewUninstall(ac)
	if _, err := un.Run(releaseName); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: vpnGatewaysCRD}, &crd); err != nil {
		t.Fatalf("the CRD went with the release: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(gw), gw.DeepCopy()); err != nil {
		t.Fatalf("the gateway went with the release: %v", err)
	}

	// crds.keep=false: an uninstall removes the CRDs. The kept CRDs still name the old
	// release, so this release adopts them.
	if err := install(current, with(requiredValues(), "crds.keep", false)); err != nil {
		t.Fatalf("install with crds.keep=false: %v", err)
	}
	if err := c.Delete(ctx, gw); err != nil {
		t.Fatal(err)
	}
	if _, err := action.NewUninstall(ac).Run(releaseName); err != nil {
		t.Fatal(err)
	}
	if err := testenv.WaitCRDGone(ctx, c, vpnGatewaysCRD, time.Minute); err != nil {
		t.Errorf("with crds.keep=false the uninstall left the CRD: %v", err)
	}
}

func waitEstablished(t *testing.T, c client.Client) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: vpnGatewaysCRD}, &crd); err != nil {
			return false, nil
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal("CRD not established")
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
