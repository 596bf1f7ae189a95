package chart

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// helmDocsVersion is the helm-docs version the Makefile pins (HELM_DOCS_VERSION).
func helmDocsVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(fromRoot("Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^HELM_DOCS_VERSION := (v[0-9.]+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("the Makefile pins no HELM_DOCS_VERSION")
	}
	return string(m[1])
}

// The chart's README is what helm-docs writes from values.yaml and README.md.gotmpl
// now: a value added or redescribed without `make chart-docs` fails here. Every value
// row has a description.
func TestChartREADMEIsGenerated(t *testing.T) {
	cmd := exec.Command("go", "run", "github.com/norwoodj/helm-docs/cmd/helm-docs@"+helmDocsVersion(t),
		"--chart-search-root", chartDir, "--sort-values-order", "file", "--skip-version-footer", "--dry-run", "--log-level", "error")
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm-docs: %v\n%s", err, stderr.String())
	}
	have, err := os.ReadFile(fromRoot("charts", "bnerd-vpn-operator", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	// --dry-run prints the document as it would write it.
	if strings.TrimSpace(string(out)) != strings.TrimSpace(string(have)) {
		t.Fatalf("charts/bnerd-vpn-operator/README.md is stale: run make chart-docs\n--- helm-docs would write\n%s", out)
	}
	rows := 0
	for _, line := range strings.Split(string(have), "\n") {
		cells := strings.Split(line, "|")
		// | key | type | default | description |
		if len(cells) != 6 || strings.TrimSpace(cells[1]) == "Key" || strings.HasPrefix(strings.TrimSpace(cells[1]), "--") {
			continue
		}
		rows++
		if strings.TrimSpace(cells[4]) == "" {
			t.Errorf("value %s has no description in values.yaml (a `# --` comment)", strings.TrimSpace(cells[1]))
		}
	}
	if rows < 50 {
		t.Errorf("the README's values table has %d rows", rows)
	}
	for _, want := range []string{"gatewayPods.resources", "crds.enabled", "imageRegistry", "WireGuard"} {
		if !strings.Contains(string(have), want) {
			t.Errorf("the chart README does not mention %s", want)
		}
	}
}
