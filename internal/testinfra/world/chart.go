package world

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// CredentialSecret is the Secret the chart's operator reads its OpenStack credential from.
const CredentialSecret = "bnerd-openstack"

// InternalSourceCIDRs are the fabric's sources admitted to reverse exposures: the service
// cluster svc01 (its hosts reach reverse exposures through its router, keeping their own
// addresses). Never the transit network: that is where the other gateways' ports are.
var InternalSourceCIDRs = []string{"10.251.0.0/16"}

// ChartValues are the values the world installs the chart with: the estate's router and
// networks, and the libipsec dataplane, since this machine's kernel has no ESP. No image
// value: the released chart's defaults name the images released beside it.
func (w *World) ChartValues() map[string]any {
	return map[string]any{
		"router":              OperatorRouter,
		"externalNetwork":     ExternalNetwork,
		"gatewayNetwork":      GatewayNetwork,
		"internalSourceCIDRs": InternalSourceCIDRs,
		"gatewayDataplane":    "libipsec",
		"resyncInterval":      "1m",
		"openstack":           map[string]any{"credentials": map[string]any{"secretName": CredentialSecret}},
	}
}

// chartInstaller builds test/chart's chart-install (the Helm SDK's install, upgrade and
// uninstall with wait, from the module the chart tests already build) into the world's
// directory.
func (w *World) chartInstaller(ctx context.Context) (string, error) {
	bin := filepath.Join(w.dir, "chart-install")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/chart-install")
	cmd.Dir = filepath.Join(w.opts.Repo, "test", "chart")
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building test/chart/cmd/chart-install: %w\n%s", err, out)
	}
	return bin, nil
}

// installChart creates the operator namespace and its credential Secret, then installs
// the chart released into the world's registry with the Helm SDK, as `helm upgrade
// --install --wait oci://... --version` does (trusting the registry's CA through
// SSL_CERT_FILE), and waits for the operator.
func (w *World) installChart(ctx context.Context) error {
	helm, err := w.chartInstaller(ctx)
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OperatorNamespace}}
	if err := w.Kube.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	data := map[string]string{}
	for _, k := range []string{"OS_AUTH_URL", "OS_REGION_NAME", "OS_AUTH_TYPE", "OS_INTERFACE", "OS_IDENTITY_API_VERSION", "OS_APPLICATION_CREDENTIAL_ID", "OS_APPLICATION_CREDENTIAL_SECRET"} {
		if v := w.OperatorEnv[k]; v != "" {
			data[k] = v
		}
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: CredentialSecret, Namespace: OperatorNamespace}, StringData: data}
	if err := w.Kube.Create(ctx, sec); apierrors.IsAlreadyExists(err) {
		err = w.Kube.Update(ctx, sec)
		if err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	vals, err := yaml.Marshal(w.ChartValues())
	if err != nil {
		return err
	}
	w.valuesFile = filepath.Join(w.dir, "values.yaml")
	if err := os.WriteFile(w.valuesFile, vals, 0o600); err != nil {
		return err
	}
	w.helm = helm
	w.onDown(func() error {
		return w.runLogged(context.Background(), "helm-uninstall", nil, helm, "--kubeconfig", w.KubeConfig,
			"--namespace", OperatorNamespace, "--release", ReleaseName, "--uninstall", "--timeout", "2m")
	})
	rel := w.Release
	if w.opts.StartFrom != "" {
		if w.Previous, err = w.PushPreviousRelease(ctx, w.opts.StartFrom); err != nil {
			return err
		}
		rel = w.Previous.Release
	}
	return w.helmInstall(ctx, rel)
}

// helmInstall runs the Helm SDK's `helm upgrade --install --wait` of rel with the world's
// values file.
func (w *World) helmInstall(ctx context.Context, rel Release) error {
	t0 := time.Now()
	if err := w.runLogged(ctx, "helm-install-"+rel.Version, []string{"SSL_CERT_FILE=" + w.RegistryCA}, w.helm, "--kubeconfig", w.KubeConfig,
		"--namespace", OperatorNamespace, "--release", ReleaseName, "--chart", rel.Chart, "--version", rel.Version,
		"--values", w.valuesFile, "--timeout", "3m"); err != nil {
		return err
	}
	w.progress("    Helm SDK install of %s --version %s as release %s in %s (values %s), waited for: operator Ready after %.1fs",
		rel.Chart, rel.Version, ReleaseName, OperatorNamespace, w.valuesFile, time.Since(t0).Seconds())
	return nil
}
