package world

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// CredentialSecret is the Secret the chart's operator reads its OpenStack credential from.
const CredentialSecret = "bnerd-openstack"

// InternalSourceCIDRs are the fabric's sources admitted to reverse exposures: the transit
// network and the service cluster svc01 (its hosts reach reverse exposures through its
// router, keeping their own addresses).
var InternalSourceCIDRs = []string{"10.254.0.0/24", "10.251.0.0/16"}

// ChartValues are the values the world installs the chart with: the estate's router and
// networks, the images built here (never pulled), and the libipsec dataplane, since this
// machine's kernel has no ESP.
func (w *World) ChartValues() map[string]any {
	repoTag := func(ref string) (string, string) {
		i := strings.LastIndex(ref, ":")
		return ref[:i], ref[i+1:]
	}
	opRepo, opTag := repoTag(w.Images["operator"])
	gwRepo, gwTag := repoTag(w.Images["gateway"])
	return map[string]any{
		"router":              OperatorRouter,
		"externalNetwork":     ExternalNetwork,
		"gatewayNetwork":      GatewayNetwork,
		"internalSourceCIDRs": InternalSourceCIDRs,
		"gatewayDataplane":    "libipsec",
		"resyncInterval":      "1m",
		"openstack":           map[string]any{"credentials": map[string]any{"secretName": CredentialSecret}},
		"images": map[string]any{
			"operator":    map[string]any{"repository": opRepo, "tag": opTag, "pullPolicy": "Never"},
			"gateway":     map[string]any{"repository": gwRepo, "tag": gwTag},
			"statusAgent": map[string]any{"repository": gwRepo, "tag": gwTag},
			// The world runs no WireGuard gateway; the gateway image holds the agent, which
			// is all the wireguard container runs.
			"gatewayWireguard": map[string]any{"repository": gwRepo, "tag": gwTag},
		},
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
// charts/bnerd-vpn-operator with the Helm SDK (as `helm upgrade --install --wait`) and
// waits for the operator.
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
	valuesFile := filepath.Join(w.dir, "values.yaml")
	if err := os.WriteFile(valuesFile, vals, 0o600); err != nil {
		return err
	}
	w.onDown(func() error {
		return w.runLogged(context.Background(), "helm-uninstall", nil, helm, "--kubeconfig", w.KubeConfig,
			"--namespace", OperatorNamespace, "--release", ReleaseName, "--uninstall", "--timeout", "2m")
	})
	t0 := time.Now()
	if err := w.runLogged(ctx, "helm-install", nil, helm, "--kubeconfig", w.KubeConfig, "--namespace", OperatorNamespace,
		"--release", ReleaseName, "--chart", filepath.Join(w.opts.Repo, "charts", "bnerd-vpn-operator"),
		"--values", valuesFile, "--timeout", "3m"); err != nil {
		return err
	}
	w.progress("    Helm SDK install of charts/bnerd-vpn-operator as release %s in %s (values %s), waited for: operator Ready after %.1fs",
		ReleaseName, OperatorNamespace, valuesFile, time.Since(t0).Seconds())
	return nil
}
