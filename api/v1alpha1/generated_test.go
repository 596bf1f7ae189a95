package v1alpha1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// TestGeneratedFilesAreCurrent regenerates the deepcopy code, the CRDs and the operator's
// RBAC with the pinned controller-gen and fails when the committed files differ: run
// `make generate`.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("regenerating with controller-gen takes a few seconds; skipped in -short mode")
	}
	root := testenv.RepoRoot()
	gen := func(args ...string) []byte {
		cmd := exec.Command("go", append([]string{"tool", "controller-gen"}, args...)...)
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("controller-gen %v: %v\n%s", args, err, stderr.String())
		}
		return out
	}

	deepcopy := gen("object:headerFile=hack/boilerplate.go.txt", "paths=./api/...", "output:object:stdout")
	committed, err := os.ReadFile(filepath.Join(root, "api", "v1alpha1", "zz_generated.deepcopy.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(deepcopy, committed) {
		t.Error("api/v1alpha1/zz_generated.deepcopy.go is stale: run `make generate`")
	}

	rbacDir := t.TempDir()
	gen("rbac:roleName=bnerd-vpn-operator", "paths=./internal/controller/...;./cmd/bnerd-vpn-operator", "output:rbac:dir="+rbacDir)
	freshRole, _ := os.ReadFile(filepath.Join(rbacDir, "role.yaml"))
	committedRole, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	if err != nil || len(freshRole) == 0 || !bytes.Equal(freshRole, committedRole) {
		t.Error("config/rbac/role.yaml is stale: run `make generate`")
	}

	dir := t.TempDir()
	gen("crd:crdVersions=v1", "paths=./api/...", "output:crd:dir="+dir)
	unwrap := exec.Command("go", "run", "./hack/crddesc", dir)
	unwrap.Dir = root
	if out, err := unwrap.CombinedOutput(); err != nil {
		t.Fatalf("crddesc: %v\n%s", err, out)
	}
	fresh, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(fresh) == 0 {
		t.Fatalf("controller-gen wrote no CRDs: %v", err)
	}
	old, _ := filepath.Glob(filepath.Join(root, "config", "crd", "*.yaml"))
	if len(old) != len(fresh) {
		t.Errorf("config/crd holds %d CRDs, controller-gen makes %d: run `make generate`", len(old), len(fresh))
	}
	for _, f := range fresh {
		want, _ := os.ReadFile(f)
		got, err := os.ReadFile(filepath.Join(root, "config", "crd", filepath.Base(f)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("config/crd/%s is stale: run `make generate`", filepath.Base(f))
		}
	}
}
