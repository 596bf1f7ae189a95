// Command chart-install installs, upgrades or uninstalls a chart with the Helm SDK, as
// `helm upgrade --install --wait` and `helm uninstall --wait` do. The local product world
// (internal/world) installs the operator's chart with it: the SDK is what the chart tests
// already build, so the world needs no helm CLI of its own.
//
//	chart-install --kubeconfig KC --namespace NS --release R --chart DIR --values FILE [--timeout 3m]
//	chart-install --kubeconfig KC --namespace NS --release R --uninstall
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/storage/driver"
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig")
	namespace := flag.String("namespace", "default", "release namespace")
	release := flag.String("release", "", "release name")
	chartDir := flag.String("chart", "", "chart directory")
	valuesFile := flag.String("values", "", "values file")
	timeout := flag.Duration("timeout", 3*time.Minute, "how long to wait for the release's resources")
	uninstall := flag.Bool("uninstall", false, "uninstall the release instead")
	flag.Parse()
	if err := run(*kubeconfig, *namespace, *release, *chartDir, *valuesFile, *timeout, *uninstall); err != nil {
		fmt.Fprintf(os.Stderr, "chart-install: %v\n", err)
		os.Exit(1)
	}
}

func run(kubeconfig, namespace, release, chartDir, valuesFile string, timeout time.Duration, uninstall bool) error {
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
	if chartDir == "" {
		return errors.New("--chart is required")
	}
	ch, err := loader.Load(chartDir)
	if err != nil {
		return err
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
