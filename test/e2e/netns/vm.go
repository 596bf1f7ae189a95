package netns

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// VMRun is one e2e suite run again inside the kernel VM (hack/vm: Debian 12's stock
// kernel, with ESP and WireGuard; software emulation where the machine has no usable
// KVM), with KernelEnv set for the guest.
type VMRun struct {
	// Package is the suite, relative to the module root (./test/e2e/routed); its test
	// binary, the gateway agent and the dataplane's test helper are built static (the
	// guest has no Go toolchain) into the share the guest mounts at /share.
	Package string
	// Run selects the tests the guest runs (-test.run).
	Run string
	// Want is what the guest's output must hold besides no skipped test.
	Want []string
	// What names the run in the timing line of the log.
	What string
}

// RunInVM boots the kernel VM, runs r's tests in it and fails t unless they pass there,
// none skipped. The share is kept when t fails.
func RunInVM(t *testing.T, r VMRun) {
	t.Helper()
	testenv.SkipUnit(t, "boots a VM")
	if Kernel() {
		t.Skip("already inside the VM")
	}
	testenv.NeedRoot(t, "the kernel VM needs root (image build, network namespaces in the guest)")
	for _, b := range []string{"qemu-system-x86_64", "go", "flock"} {
		if _, err := exec.LookPath(b); err != nil {
			testenv.SkipDataplane(t, "the kernel VM needs "+b+"; hack/vm/image.sh installs it")
		}
	}
	root := testenv.RepoRoot()
	name := filepath.Base(r.Package)
	share, err := os.MkdirTemp("", "bnerd-vm-"+name+"-")
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
	// Static binaries, linked as the dataplane VM test links them.
	static := []string{}
	if out, err := exec.Command("go", "env", "CGO_ENABLED").Output(); err == nil && strings.TrimSpace(string(out)) == "1" {
		static = []string{"-ldflags", "-linkmode=external -extldflags=-static"}
	}
	for _, b := range [][]string{
		append(append([]string{"test", "-c"}, static...), "-o", filepath.Join(share, name+".test"), r.Package),
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
	for _, kv := range []string{KernelEnv + "=1", BinDirEnv + "=/share", WaitScaleEnv + "=3", testenv.RequireDataplaneEnv + "=1"} {
		args = append(args, "--env", kv)
	}
	args = append(args, share, "/share/"+name+".test", "-test.run", r.Run, "-test.v", "-test.count=1", "-test.timeout", "25m")
	var out bytes.Buffer
	cmd := exec.Command("bash", args...)
	cmd.Stdout = &out
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // qemu goes with the group
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }()
	runErr := cmd.Wait()
	t.Logf("VM: boot, %s and shutdown took %.0fs", r.What, time.Since(start).Seconds())
	text := out.String()
	if runErr != nil {
		t.Fatalf("the VM run failed (%v); output:\n%s", runErr, Tail(text, 150))
	}
	for _, want := range r.Want {
		if !strings.Contains(text, want) {
			t.Errorf("the VM output lacks %q:\n%s", want, Tail(text, 80))
		}
	}
	if strings.Contains(text, "--- SKIP") {
		t.Errorf("a test skipped inside the VM:\n%s", Tail(text, 80))
	}
	if testing.Verbose() {
		t.Logf("VM output:\n%s", Tail(text, 60))
	}
}
