// Command chart-install installs, upgrades or uninstalls a chart with the Helm SDK, as
// `helm upgrade --install --wait` and `helm uninstall --wait` do. The local product world
// (internal/testinfra/world) installs the operator's chart with it, from the release pushed to the
// world's registry (--chart oci://... --version), as a provider does: the SDK is what
// the chart tests already build, so the world needs no helm CLI of its own. An OCI chart
// is located and pulled as `helm install oci://... --version` does (the registry
// client's credentials: Helm's registry config, then Docker's; a private CA through
// SSL_CERT_FILE).
//
//	chart-install --kubeconfig KC --namespace NS --release R --chart DIR|oci://REF [--version V] --values FILE [--timeout 3m]
//	chart-install --kubeconfig KC --namespace NS --release R --uninstall
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/cli"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/registry"
	"helm.sh/helm/v3/pkg/storage/driver"
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig")
	namespace := flag.String("namespace", "default", "release namespace")
	release := flag.String("release", "", "release name")
	chartRef := flag.String("chart", "", "chart directory or oci:// reference")
	version := flag.String("version", "", "chart version (with an oci:// chart)")
	valuesFile := flag.String("values", "", "values file")
	timeout := flag.Duration("timeout", 3*time.Minute, "how long to wait for the release's resources")
	uninstall := flag.Bool("uninstall", false, "uninstall the release instead")
	flag.Parse()
	if err := run(*kubeconfig, *namespace, *release, *chartRef, *version, *valuesFile, *timeout, *uninstall); err != nil {
		fmt.Fprintf(os.Stderr, "chart-install: %v\n", err)
		os.Exit(1)
	}
}

func run(kubeconfig, namespace, release, chartRef, version, valuesFile string, timeout time.Duration, uninstall bool) error {
	if release == "" {
		return errors.New("--release is required")
	}
	cfg := &action.Configuration{}
	if err := cfg.Init(kube.GetConfig(kubeconfig, "", namespace), namespace, "secret", func(string, ...any) {}); err != nil {
		return err
	}
	if uninstall {
		u := action.NewUninstall(cfg)
		u.Wait, u.Timeout = true, timeout
		_, err := u.Run(release)
		if errors.Is(err, driver.ErrReleaseNotFound) {
			return nil
		}
		return err
	}
	if chartRef == "" {
		return errors.New("--chart is required")
	}
	path := chartRef
	if registry.IsOCI(chartRef) {
		rc, err := registry.NewClient(registry.ClientOptWriter(io.Discard))
		if err != nil {
			return err
		}
		cfg.RegistryClient = rc
		cache, err := os.MkdirTemp("", "chart-install-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(cache)
		settings := cli.New()
		settings.RepositoryCache = cache
		in := action.NewInstall(cfg)
		in.Version = version
		if path, err = in.LocateChart(chartRef, settings); err != nil {
			return fmt.Errorf("locating %s --version %s: %w", chartRef, version, err)
		}
	} else if version != "" {
		return errors.New("--version goes with an oci:// chart")
	}
	ch, err := loader.Load(path)
	if err != nil {
		return err
	}
	if version != "" && ch.Metadata.Version != version {
		return fmt.Errorf("%s pulled chart version %s, asked for %s", chartRef, ch.Metadata.Version, version)
	}
	vals := map[string]any{}
	if valuesFile != "" {
		if vals, err = chartutil.ReadValuesFile(valuesFile); err != nil {
			return err
		}
	}
	if _, err := action.NewHistory(cfg).Run(release); errors.Is(err, driver.ErrReleaseNotFound) {
		in := action.NewInstall(cfg)
		in.ReleaseName, in.Namespace, in.Wait, in.Timeout = release, namespace, true, timeout
		rel, err := in.Run(ch, vals)
		if err != nil {
			return err
		}
		fmt.Printf("release %s installed (revision %d, chart %s-%s)\n", rel.Name, rel.Version, rel.Chart.Metadata.Name, rel.Chart.Metadata.Version)
		return nil
	}
	up := action.NewUpgrade(cfg)
	up.Namespace, up.Wait, up.Timeout = namespace, true, timeout
	rel, err := up.Run(release, ch, vals)
	if err != nil {
		return err
	}
	fmt.Printf("release %s upgraded (revision %d, chart %s-%s)\n", rel.Name, rel.Version, rel.Chart.Metadata.Name, rel.Chart.Metadata.Version)
	return nil
}
