package chart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/strvals"
	"sigs.k8s.io/yaml"
)

// The chart values and the helm commands the runbooks show are accepted by the chart:
// every "yaml values" block, and the --set/--set-json flags of every helm install or
// upgrade, render through the schema and the templates.
func TestRunbookHelmValues(t *testing.T) {
	files, err := filepath.Glob(fromRoot("docs", "runbooks", "*.md"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no runbooks: %v", err)
	}
	files = append(files, fromRoot("docs", "install.md"), fromRoot("docs", "helm.md"), fromRoot("README.md"))
	blocks, commands := 0, 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cur *strings.Builder
		info, indent := "", ""
		var shell []string
		for _, line := range strings.Split(string(data), "\n") {
			trimmed := strings.TrimSpace(line)
			if strings.HasPrefix(trimmed, "```") {
				if cur == nil {
					cur, info = &strings.Builder{}, strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))
					indent = line[:len(line)-len(strings.TrimLeft(line, " "))]
					continue
				}
				switch info {
				case "yaml values":
					blocks++
					var vals map[string]any
					if err := yaml.Unmarshal([]byte(cur.String()), &vals); err != nil {
						t.Fatalf("%s: %v", filepath.Base(f), err)
					}
					if _, _, err := renderChart(t, vals, renderOpts{}); err != nil {
						t.Errorf("%s: the chart refuses the documented values: %v", filepath.Base(f), err)
					}
				case "sh", "":
					shell = append(shell, strings.Split(cur.String(), "\n")...)
				}
				cur = nil
				continue
			}
			if cur != nil {
				cur.WriteString(strings.TrimRight(strings.TrimPrefix(line, indent), " ") + "\n")
			}
		}
		// Join continuation lines, then take each helm install/upgrade.
		joined := strings.ReplaceAll(strings.Join(shell, "\n"), "\\\n", " ")
		for _, line := range strings.Split(joined, "\n") {
			words := strings.Fields(line)
			if len(words) < 2 || words[0] != "helm" || (words[1] != "install" && words[1] != "upgrade") {
				continue
			}
			commands++
			vals := map[string]any{}
			for i := 0; i < len(words)-1; i++ {
				arg := strings.Trim(words[i+1], `'"`)
				switch words[i] {
				case "--set":
					if err := strvals.ParseInto(arg, vals); err != nil {
						t.Errorf("%s: --set %s: %v", filepath.Base(f), arg, err)
					}
				case "--set-json":
					if err := strvals.ParseJSON(arg, vals); err != nil {
						t.Errorf("%s: --set-json %s: %v", filepath.Base(f), arg, err)
					}
				}
			}
			if _, _, err := renderChart(t, vals, renderOpts{}); err != nil {
				t.Errorf("%s: %q is refused by the chart: %v", filepath.Base(f), line, err)
			}
		}
	}
	if blocks == 0 || commands == 0 {
		t.Errorf("found %d values blocks and %d helm commands in the runbooks", blocks, commands)
	}
}
