package testlint

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// No reconcile phase of either controller is longer than MaxPhaseLines: a phase reads
// as its steps.
func TestNoLongPhases(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	long, err := LongPhases([]string{
		filepath.Join(root, "internal", "controller", "gateway"),
		filepath.Join(root, "internal", "controller", "clusterlink"),
	}, MaxPhaseLines)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range long {
		t.Errorf("phase over %d lines: %s", MaxPhaseLines, l)
	}
}

// The check finds a long phase and leaves a long non-phase function alone.
func TestLongPhasesFindsOffenders(t *testing.T) {
	dir := t.TempDir()
	body := strings.Repeat("\tx++\n", 70)
	src := "package p\n\nfunc ensureLong() {\n\tx := 0\n" + body + "\t_ = x\n}\n\nfunc ensureShort() {}\n\nfunc helperLong() {\n\tx := 0\n" + body + "\t_ = x\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	long, err := LongPhases([]string{dir}, MaxPhaseLines)
	if err != nil {
		t.Fatal(err)
	}
	if len(long) != 1 || !strings.Contains(long[0], ":ensureLong (74 lines)") {
		t.Fatalf("got %q, want ensureLong (74 lines) only", long)
	}
}
