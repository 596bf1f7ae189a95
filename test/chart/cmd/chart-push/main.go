// Command chart-push packages the operator's chart for a release and pushes it to an OCI
// registry with the Helm SDK's registry client, as `helm package` and `helm push` do
// (`make release` runs it):
//
//   - the chart's version becomes the release version (0.2.0) and its appVersion the
//     images' tag (v0.2.0), so every image defaults to the release's;
//   - every images.*.repository default moves to the registry the release pushed its
//     images to (--images), so the chart pulled from a registry installs the images
//     pushed beside it with no image values at all; the values file is rewritten line by
//     line, so its comments (the chart's documentation) stay;
//   - the package is pushed to <--push>/<chart name>:<version>.
//
// Credentials come from Helm's registry config with a fallback to Docker's (helm
// registry login, docker login); a registry behind a private CA is trusted through
// SSL_CERT_FILE.
//
//	chart-push --chart DIR --version 0.2.0 --images REGISTRY/PREFIX --push oci://REGISTRY/PREFIX/charts [--out FILE] [--package-dir DIR]
//
// prints "chart <oci reference> <version> <manifest digest>".
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/registry"
)

func main() {
	chartDir := flag.String("chart", "", "chart directory")
	version := flag.String("version", "", "release version (0.2.0 or v0.2.0)")
	images := flag.String("images", "", "registry and prefix the release's images were pushed to (REGISTRY/PREFIX)")
	push := flag.String("push", "", "OCI repository prefix to push the chart to (oci://REGISTRY/PREFIX/charts)")
	out := flag.String("out", "", "also write the printed line to this file")
	packageDir := flag.String("package-dir", "", "keep the packaged .tgz in this directory")
	flag.Parse()
	if err := run(*chartDir, *version, *images, *push, *out, *packageDir); err != nil {
		fmt.Fprintf(os.Stderr, "chart-push: %v\n", err)
		os.Exit(1)
	}
}

func run(chartDir, version, images, push, out, packageDir string) error {
	if chartDir == "" || version == "" || images == "" || push == "" {
		return errors.New("--chart, --version, --images and --push are required")
	}
	if !strings.HasPrefix(push, "oci://") {
		return fmt.Errorf("--push %q: want oci://REGISTRY/PREFIX", push)
	}
	ch, err := loader.Load(chartDir)
	if err != nil {
		return err
	}
	if err := stamp(ch, version, strings.TrimSuffix(images, "/")); err != nil {
		return err
	}
	dir := packageDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "chart-push-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	pkg, err := chartutil.Save(ch, dir)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(pkg)
	if err != nil {
		return err
	}
	client, err := registry.NewClient(registry.ClientOptWriter(os.Stderr))
	if err != nil {
		return err
	}
	ref := strings.TrimSuffix(strings.TrimPrefix(push, "oci://"), "/") + "/" + ch.Metadata.Name + ":" + ch.Metadata.Version
	res, err := client.Push(data, ref)
	if err != nil {
		return fmt.Errorf("pushing %s: %w", ref, err)
	}
	line := fmt.Sprintf("chart oci://%s %s %s", strings.TrimSuffix(ref, ":"+ch.Metadata.Version), ch.Metadata.Version, res.Manifest.Digest)
	fmt.Println(line)
	if out != "" {
		return os.WriteFile(out, []byte(line+"\n"), 0o644)
	}
	return nil
}

var semver = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

// stamp sets the chart's version and appVersion and moves its image defaults to images.
func stamp(ch *chart.Chart, version, images string) error {
	v := strings.TrimPrefix(version, "v")
	if !semver.MatchString(v) {
		return fmt.Errorf("version %q is not MAJOR.MINOR.PATCH[-PRERELEASE]", version)
	}
	ch.Metadata.Version, ch.Metadata.AppVersion = v, "v"+v
	var raw *chart.File
	for _, f := range ch.Raw {
		if f.Name == chartutil.ValuesfileName {
			raw = f
		}
	}
	if raw == nil {
		return errors.New("the chart has no values.yaml")
	}
	imgs, ok := ch.Values["images"].(map[string]any)
	if !ok || len(imgs) == 0 {
		return errors.New("the chart's values have no images")
	}
	// Each default repository line, rewritten in place: <images>/<the image's name>.
	want := map[string]string{}
	keys := make([]string, 0, len(imgs))
	for k := range imgs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	text := string(raw.Data)
	for _, k := range keys {
		m, _ := imgs[k].(map[string]any)
		old, _ := m["repository"].(string)
		if old == "" {
			return fmt.Errorf("images.%s has no repository", k)
		}
		newRepo := images + "/" + path.Base(old)
		want[k] = newRepo
		line := regexp.MustCompile(`(?m)^(\s+repository:\s*)"?` + regexp.QuoteMeta(old) + `"?\s*$`)
		if !line.MatchString(text) {
			return fmt.Errorf("values.yaml has no line `repository: %s` to move to %s", old, newRepo)
		}
		text = line.ReplaceAllString(text, "${1}"+newRepo)
	}
	vals, err := chartutil.ReadValues([]byte(text))
	if err != nil {
		return fmt.Errorf("the rewritten values.yaml: %w", err)
	}
	// The rewrite must have moved exactly the image defaults: read them back.
	for k, repo := range want {
		got, err := vals.PathValue("images." + k + ".repository")
		if err != nil || got != repo {
			return fmt.Errorf("images.%s.repository is %v after the rewrite, want %s", k, got, repo)
		}
	}
	raw.Data = []byte(text)
	ch.Values = vals
	// ArtifactHub lists the images a default install runs: the released ones now.
	var listed strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&listed, "- name: %s\n  image: %s:%s\n", path.Base(want[k]), want[k], ch.Metadata.AppVersion)
	}
	if ch.Metadata.Annotations == nil {
		ch.Metadata.Annotations = map[string]string{}
	}
	ch.Metadata.Annotations["artifacthub.io/images"] = listed.String()
	return nil
}
