package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"bnerd.net/vpn-operator/internal/testinfra/testenv"
	"bnerd.net/vpn-operator/internal/testinfra/world"
)

// TestSandboxObjectsOnlyRunsToCompletion runs the README's objects-only sandbox command the
// way a user does and checks that the example gateway converged (and honestly is not Ready:
// no kubelet runs its pod) and the ClusterLink became Ready, produced their OpenStack
// objects (including the reverse route on the service cluster's router), and were deleted
// without leaving any behind.
func TestSandboxObjectsOnlyRunsToCompletion(t *testing.T) {
	testenv.SkipUnit(t, "the sandbox builds and runs the operator")
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
	cmd := exec.Command(bin, "--objects-only", "--timeout", "2m")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	t.Logf("sandbox output:\n%s", out)
	if err != nil {
		t.Fatalf("sandbox failed: %v", err)
	}
	for _, want := range []string{
		"IPsecGateway tenant-a/acme is converged",
		"IPsecGateway tenant-a/acme: Ready=False/PodNotFound (the objects-only sandbox's nodes are API objects without a kubelet",
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
	for _, bad := range []string{"goroutine ", "panic:", "log.SetLogger"} {
		if strings.Contains(string(out), bad) {
			t.Errorf("sandbox output contains %q", bad)
		}
	}
}

// TestSandboxProductRunsToCompletion runs `make sandbox`'s default mode as a user does
// (root): the whole product with the examples applied. It checks the output shows the
// phases converging, the pod on its pinned node with net1 carrying the port's MAC, the
// tunnel up, requests answered both ways through it, the same for the WireGuard gateway
// beside it, and nothing left after the deletion; and that no stack trace or
// controller-runtime logger dump is printed.
func TestSandboxProductRunsToCompletion(t *testing.T) {
	testenv.SkipUnit(t, "the product sandbox starts a cluster")
	if why := world.Requirements(); why != "" {
		testenv.SkipDataplane(t, why)
	}
	root := testenv.RepoRoot()
	bin := filepath.Join(t.TempDir(), "sandbox")
	build := exec.Command("go", "build", "-o", bin, "./cmd/sandbox")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the sandbox: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--timeout", "3m")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	t.Logf("sandbox output:\n%s", out)
	if err != nil {
		t.Fatalf("sandbox failed: %v", err)
	}
	for _, want := range []string{
		"IPsecGateway tenant-a/acme is Ready",
		"ClusterLink svc01-link is Ready",
		"WorkloadReady",
		"tunnel up: tunnelsReady 1/1",
		"is Running on vpn01-worker-",
		"net1",
		"(exposure portal (svc01)) through the tunnel: \"svc01 portal at 10.251.0.20",
		"(reverse exposure erp (client)) through the tunnel: \"client erp at 192.168.10.5",
		"ingress udp 500-500 from 198.51.100.7/32",
		// The WireGuard gateway beside it, its client site configured from peer-config.
		"VPNGateway tenant-a/acme-wg is Ready",
		"(exposure portal (svc01)) through the WireGuard tunnel: \"svc01 portal at 10.251.0.20",
		"(reverse exposure wiki (WireGuard client)) through the WireGuard tunnel: \"client wiki at 192.168.20.5",
		"latest handshake",
		"ingress udp 51820-51820 from 192.0.2.8/32",
		"deleting the WireGuard gateway",
		"nothing is left",
		"stopping the world",
		// Two kubelets run here: before the client configures its side, the sandbox says
		// the pod runs and the tunnel waits for the client (never "no kubelet").
		"(the gateway pod runs on its node; the tunnel waits for the client site",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("sandbox output lacks %q", want)
		}
	}
	for _, bad := range []string{"goroutine ", "panic:", "log.SetLogger", "no kubelet"} {
		if strings.Contains(string(out), bad) {
			t.Errorf("sandbox output contains %q", bad)
		}
	}
}
