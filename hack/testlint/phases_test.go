package testlint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// No function of the controllers (their phases, helpers and the skeleton) is longer than
// MaxFunctionLines: a phase reads as its steps.
func TestNoLongControllerFunctions(t *testing.T) {
	dirs := controllerDirs()
	root := filepath.Dir(dirs[0])
	dirs = append(dirs, filepath.Join(root, "tenantpolicy"), filepath.Join(root, "skeleton"))
	long, err := LongFunctions(dirs, MaxFunctionLines)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range long {
		t.Errorf("function over %d lines: %s", MaxFunctionLines, l)
	}
}

// The check finds a long function, test files aside.
func TestLongFunctionsFindsOffenders(t *testing.T) {
	dir := t.TempDir()
	body := strings.Repeat("\tx++\n", 70)
	long := func(name string) string { return "func " + name + "() {\n\tx := 0\n" + body + "\t_ = x\n}\n" }
	files := map[string]string{
		"p.go":      "package p\n\n" + long("ensureLong") + "\nfunc ensureShort() {}\n\n" + long("helperLong"),
		"p_test.go": "package p\n\n" + long("testHelperLong"),
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := LongFunctions([]string{dir}, MaxFunctionLines)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !strings.Contains(got[0], ":ensureLong (74 lines)") || !strings.Contains(got[1], ":helperLong (74 lines)") {
		t.Fatalf("got %q, want ensureLong and helperLong (74 lines each)", got)
	}
}
