package testlint

import (
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// Every BNERD_* variable the code reads has a row in docs/testing.md's variables table,
// and the page names no variable the code no longer reads.
func TestEveryBNERDVariableIsDocumented(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	code, err := EnvVarsInCode(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(code) == 0 {
		t.Fatal("found no BNERD_* variable in the code: the scan is broken")
	}
	md, err := os.ReadFile(filepath.Join(root, "docs", "testing.md"))
	if err != nil {
		t.Fatal(err)
	}
	undocumented, stale := EnvDocProblems(code, md)
	for _, v := range undocumented {
		t.Errorf("%s (named in %s) has no row in docs/testing.md's variables table", v, code[v])
	}
	for _, v := range stale {
		t.Errorf("docs/testing.md names %s, which no Go file, shell script or Makefile names any more", v)
	}
}

// The check finds what it is meant to find: a variable read only by a script, one only
// by a Makefile, one missing from the table though mentioned in prose, and a stale one.
func TestEnvDocProblemsFindsOffenders(t *testing.T) {
	// The names are spelled with a placeholder prefix, so that this file names no
	// variable for the check above.
	prefix := "BNERD" + "_"
	fix := func(s string) string { return strings.ReplaceAll(s, "PFX_", prefix) }
	root := t.TempDir()
	files := map[string]string{
		"a/x.go":         `package a; import "os"; var _ = os.Getenv("PFX_GO_VAR")`,
		"hack/s.sh":      `echo "${PFX_SH_VAR:-}"`,
		"Makefile":       "export PFX_MAKE_VAR ?= 1\n",
		"docs/x.md":      "PFX_ONLY_IN_MARKDOWN\n",
		"a/data.json":    `{"PFX_ONLY_IN_JSON": 1}`,
		".git/config.sh": "PFX_IN_GIT_DIR=1\n",
	}
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(fix(content)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, err := EnvVarsInCode(root)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{fix("PFX_GO_VAR"): "a/x.go", fix("PFX_SH_VAR"): "hack/s.sh", fix("PFX_MAKE_VAR"): "Makefile"}
	if !reflect.DeepEqual(code, want) {
		t.Fatalf("variables in code = %v, want %v", code, want)
	}
	md := strings.Join([]string{
		"Prose names `PFX_MAKE_VAR` without a row, and the family `PFX_GO_*`.",
		"| variable | read by | what it does |",
		"|---|---|---|",
		"| `PFX_GO_VAR` | a | x |",
		"| `PFX_GONE_VAR` | a | removed from the code |",
		"| the `PFX_SH_VAR` row's name is not in the first column | | |",
	}, "\n")
	undocumented, stale := EnvDocProblems(code, []byte(fix(md)))
	if want := []string{fix("PFX_MAKE_VAR"), fix("PFX_SH_VAR")}; !reflect.DeepEqual(undocumented, want) {
		t.Errorf("undocumented = %v, want %v", undocumented, want)
	}
	if want := []string{fix("PFX_GONE_VAR")}; !reflect.DeepEqual(stale, want) {
		t.Errorf("stale = %v, want %v", stale, want)
	}
}
