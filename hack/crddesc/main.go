// Command crddesc rewrites the descriptions in generated CRD files so that `kubectl
// explain` reads well: controller-gen keeps the line breaks of the Go comments, and
// kubectl wraps those lines again, leaving ragged half-empty lines. Lines of a paragraph
// are joined; blank lines (paragraph breaks) and list items are kept.
//
// Usage: go run ./hack/crddesc DIR   (rewrites DIR/*.yaml in place)
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: crddesc DIR")
		os.Exit(2)
	}
	files, err := filepath.Glob(filepath.Join(os.Args[1], "*.yaml"))
	if err != nil || len(files) == 0 {
		fmt.Fprintf(os.Stderr, "crddesc: no YAML files in %s\n", os.Args[1])
		os.Exit(1)
	}
	for _, f := range files {
		if err := rewrite(f); err != nil {
			fmt.Fprintf(os.Stderr, "crddesc: %s: %v\n", f, err)
			os.Exit(1)
		}
	}
}

func rewrite(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return err
	}
	walk(doc)
	out, err := yaml.Marshal(doc)
	if err != nil {
		return err
	}
	return os.WriteFile(path, append([]byte("---\n"), out...), 0o644)
}

func walk(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, val := range t {
			if s, ok := val.(string); ok && k == "description" {
				t[k] = Unwrap(s)
				continue
			}
			walk(val)
		}
	case []any:
		for _, e := range t {
			walk(e)
		}
	}
}

// Unwrap joins the lines of each paragraph of s.
func Unwrap(s string) string {
	lines := strings.Split(s, "\n")
	var b strings.Builder
	for i, l := range lines {
		l = strings.TrimRight(l, " ")
		switch {
		case i == 0:
		case l == "" || lines[i-1] == "" || strings.HasPrefix(l, "- ") || strings.HasPrefix(l, "* "):
			b.WriteString("\n")
		default:
			b.WriteString(" ")
		}
		b.WriteString(l)
	}
	return b.String()
}
