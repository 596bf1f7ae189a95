package testlint

import (
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"

	"bnerd.net/vpn-operator/internal/controller/clusterlink"
	"bnerd.net/vpn-operator/internal/controller/gateway"
)

func controllerDirs() []string {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	return []string{
		filepath.Join(root, "internal", "controller", "gateway"),
		filepath.Join(root, "internal", "controller", "clusterlink"),
	}
}

// Both reconcilers write their finalizer and send their Events through the skeleton
// only: one finalizer write style, and no Event before the status write recording it.
func TestReconcilersGoThroughTheSkeleton(t *testing.T) {
	calls, err := Calls(controllerDirs(), SkeletonBypasses)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		t.Errorf("bypasses internal/controller/skeleton: %s", c)
	}
}

// The check names a bypass, in either selector form, and leaves other calls alone.
func TestCallsFindsBypasses(t *testing.T) {
	dir := t.TempDir()
	src := "package p\n\nfunc f() {\n\tcontrollerutil.AddFinalizer(o, \"x\")\n\tr.Recorder.Eventf(o, nil, \"Normal\", \"R\", \"A\", \"n\")\n\tskeleton.AddFinalizer(ctx, c, o, \"x\")\n\tg.events.Add(\"Normal\", \"R\", \"A\", \"n\")\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	calls, err := Calls([]string{dir}, SkeletonBypasses)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.ToSlash(filepath.Join(dir, "p.go")) + ":4 controllerutil.AddFinalizer", filepath.ToSlash(filepath.Join(dir, "p.go")) + ":5 Recorder.Eventf"}
	if !reflect.DeepEqual(calls, want) {
		t.Errorf("got %q, want %q", calls, want)
	}
}

// The two reconcilers' Deps open with the same seven collaborators, named, typed and
// ordered alike (one Deps shape); each adds its own after them.
func TestReconcilersShareOneDepsShape(t *testing.T) {
	shared := []string{"Client", "APIReader", "OpenStack", "Config", "Recorder", "Clock", "SkipNameValidation"}
	gw, cl := reflect.TypeFor[gateway.Deps](), reflect.TypeFor[clusterlink.Deps]()
	for i, name := range shared {
		g, c := gw.Field(i), cl.Field(i)
		if g.Name != name || c.Name != name || g.Type != c.Type {
			t.Errorf("field %d: gateway.Deps has %s %v, clusterlink.Deps %s %v; both want %s of one type", i, g.Name, g.Type, c.Name, c.Type, name)
		}
	}
}
