package wireguard

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/testinfra/testenv"
	"bnerd.net/vpn-operator/test/e2e/netns"
)

// TestWireGuardKernelVM runs TestWireGuardGateway with kernel WireGuard: it boots the
// kernel VM (hack/vm: Debian 12's stock kernel, which has the WireGuard module; software
// emulation where the machine has no usable KVM) and runs the test binary in it with the
// gateway's agent in `--mode kernel` and both client sites on kernel WireGuard links
// configured with wg(8). Everything but the status agent's API-server subtest (the VM has
// no API server; the host run covers it) runs as on the host.
func TestWireGuardKernelVM(t *testing.T) {
	testenv.SkipUnit(t, "boots a VM")
	if kernelMode() {
		t.Skip("already inside the VM")
	}
	testenv.NeedRoot(t, "the kernel VM needs root (image build, network namespaces in the guest)")
	for _, b := range []string{"qemu-system-x86_64", "go", "flock"} {
		if _, err := exec.LookPath(b); err != nil {
			testenv.SkipDataplane(t, "the kernel VM needs "+b+"; hack/vm/image.sh installs it")
		}
	}
	root := testenv.RepoRoot()
	share, err := os.MkdirTemp("", "bnerd-vm-wireguard-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("VM share kept in %s", share)
			return
		}
		_ = os.RemoveAll(share)
	})
	// Static binaries (the guest has no Go toolchain), linked as the dataplane VM test
	// links them.
	static := []string{}
	if out, err := exec.Command("go", "env", "CGO_ENABLED").Output(); err == nil && strings.TrimSpace(string(out)) == "1" {
		static = []string{"-ldflags", "-linkmode=external -extldflags=-static"}
	}
	for _, b := range [][]string{
		append(append([]string{"test", "-c"}, static...), "-o", filepath.Join(share, "wireguard.test"), "./test/e2e/wireguard"),
		append(append([]string{"build"}, static...), "-o", filepath.Join(share, "vpn-gateway-agent"), "./cmd/vpn-gateway-agent"),
		append(append([]string{"build"}, static...), "-o", filepath.Join(share, "testhelper"), "./test/e2e/dataplane/testhelper"),
	} {
		cmd := exec.Command("go", b...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", b, err, out)
		}
	}
	args := []string{filepath.Join(root, "hack", "vm", "run.sh"), "--timeout", "1800"}
	for _, kv := range []string{netns.KernelEnv + "=1", netns.BinDirEnv + "=/share", netns.WaitScaleEnv + "=3", testenv.RequireDataplaneEnv + "=1"} {
		args = append(args, "--env", kv)
	}
	args = append(args, share, "/share/wireguard.test", "-test.run", "^TestWireGuardGateway$", "-test.v", "-test.count=1", "-test.timeout", "25m")
	var out bytes.Buffer
	cmd := exec.Command("bash", args...)
	cmd.Stdout = io.MultiWriter(&out)
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // qemu goes with the group
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }()
	runErr := cmd.Wait()
	t.Logf("VM: boot, kernel-WireGuard test and shutdown took %.0fs", time.Since(start).Seconds())
	text := out.String()
	if runErr != nil {
		t.Fatalf("the VM run failed (%v); output:\n%s", runErr, netns.Tail(text, 150))
	}
	for _, want := range []string{"--- PASS: TestWireGuardGateway ", "runs kernel WireGuard"} {
		if !strings.Contains(text, want) {
			t.Errorf("the VM output lacks %q:\n%s", want, netns.Tail(text, 80))
		}
	}
	if strings.Contains(text, "--- SKIP") {
		t.Errorf("a test skipped inside the VM:\n%s", netns.Tail(text, 80))
	}
	if testing.Verbose() {
		t.Logf("VM output:\n%s", netns.Tail(text, 60))
	}
}
