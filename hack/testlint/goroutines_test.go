package testlint

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"runtime"
	"testing"
)

// No test of the project calls t.Fatal (or a helper that does) from a goroutine it
// started: such a call stops only that goroutine, and the test goes on or hangs.
func TestNoFatalInGoroutines(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	found, err := FatalInGoroutines(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("%s: %s inside a goroutine; report with t.Error (or send the error to the test's goroutine)", f.Pos, f.Call)
	}
}

// The check finds what it is meant to find.
func TestFatalInGoroutinesFindsOffenders(t *testing.T) {
	src := `package x
import "testing"
func must(t *testing.T, err error) { if err != nil { t.Fatal(err) } }
func TestX(t *testing.T) {
	go func() { t.Fatal("a") }()
	go func() { must(t, nil) }()
	go func() { t.Error("fine") }()
	t.Fatal("fine: the test's own goroutine")
	go func() { h.t.Fatalf("b") }()
	inNetns(t, func() { t.Fatal("c") })
	inNetns(t, func() { t.Error("fine") })
	benchNetns(t, func() { t.Fatalf("d") })
	go func() { t.Run("sub", func(t *testing.T) { t.Fatal("fine: the subtest's own goroutine") }) }()
	bothSites(t, func(t *testing.T) { must(t, nil) })
	go func() { t.Run("sub", func(t *testing.T) {}); t.FailNow() }()
}
func bothSites(t *testing.T, f func(t *testing.T)) {
	go func() { t.Run("site", func(t *testing.T) { f(t) }) }()
}
func benchNetns(t *testing.T, f func()) { inNetns(t, f) }
func inNetns(t *testing.T, f func()) {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	<-done
}`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x_test.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := inFile(fset, f)
	want := []string{"t.Fatal", "must", "h.t.Fatalf", "t.Fatal", "t.Fatalf", "t.FailNow"}
	if len(got) != len(want) {
		t.Fatalf("found %v, want %v", got, want)
	}
	for i, w := range want {
		if got[i].Call != w {
			t.Errorf("finding %d: %s, want %s", i, got[i].Call, w)
		}
	}
}
