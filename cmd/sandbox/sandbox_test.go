package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"bnerd.net/vpn-operator/internal/testenv"
)

// TestSandboxRunsToCompletion runs the README's sandbox command the way a user does and
// checks that the example gateway converged (and honestly is not Ready: no kubelet runs
// its pod) and the ClusterLink became Ready, produced their OpenStack
// objects (including the reverse route on the service cluster's router), and were deleted
// without leaving any behind.
func TestSandboxRunsToCompletion(t *testing.T) {
	if testing.Short() {
		t.Skip("the sandbox builds and runs the operator; skipped in -short mode")
	}
	if testenv.BinDir() == "" {
		if testenv.Required() {
			t.Fatal(testenv.ErrNoControlPlane)
		}
		t.Skip(testenv.ErrNoControlPlane)
	}
	root := testenv.RepoRoot()
	bin := filepath.Join(t.TempDir(), "sandbox")
	build := exec.Command("go", "build", "-o", bin, "./cmd/sandbox")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the sandbox: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--timeout", "2m")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	t.Logf("sandbox output:\n%s", out)
	if err != nil {
		t.Fatalf("sandbox failed: %v", err)
	}
	for _, want := range []string{
		"IPsecGateway tenant-a/acme is converged",
		"IPsecGateway tenant-a/acme: Ready=False/PodNotFound (no kubelet runs in the sandbox",
		"ClusterLink svc01-link is Ready",
		"floating IP 203.0.113.",
		"ingress udp 500-500 from 198.51.100.7/32",
		"router shoot--services--vpn01 route 100.64.0.0/24 via 10.254.0.",
		"router shoot--services--vpn01 route 10.251.0.0/16 via 10.254.0.",
		"router shoot--services--svc01 route 100.64.0.0/24 via 10.254.0.",
		"left nothing in OpenStack",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("sandbox output lacks %q", want)
		}
	}
}
