package dataplane

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"bnerd.net/vpn-operator/internal/testinfra/testenv"
	"bnerd.net/vpn-operator/test/e2e/netns"
)

// vmTests are the tests the VM runs: the dataplane suite in kernel mode, the tunnel's
// life cycle where it touches kernel SAs (rekeys, make-before-break changes), what only
// a stock kernel can show (kernel WireGuard), and libreswan as the client (it has no
// userspace ESP). One boot for all of them; the guest keeps one session on the API
// server's port for the whole run (sharedGuestAPI).
var vmTests = []string{"TestDataplane", "TestTunnelLifecycle", "TestWireGuardKernel", "TestLibreswanClient"}

// vmRunEnv narrows the tests the VM runs to a regular expression (a developer's loop,
// for example BNERD_DATAPLANE_VM_RUN=TestLibreswanClient, about 6 min); unset, all of vmTests run and
// each must pass.
const vmRunEnv = "BNERD_DATAPLANE_VM_RUN"

// TestDataplaneKernelVM proves the production dataplane: it boots a VM with Debian's stock
// kernel (hack/vm; software emulation where the machine has no usable KVM) and runs
// TestDataplane inside it in kernel mode (kernel XFRM, --guard=xfrm, the pod's containers
// with render.Deployment's arguments reading their config through the API server), plus
// the other vmTests. The API server is the project's envtest control plane on this
// host, reached from inside the VM over a virtio-serial port (the VM has no NIC).
func TestDataplaneKernelVM(t *testing.T) {
	testenv.SkipUnit(t, "boots a VM")
	testenv.NeedRoot(t, "the kernel dataplane VM needs root (image build, network namespaces in the guest)")
	for _, b := range []string{"qemu-system-x86_64", "go", "flock"} {
		if _, err := exec.LookPath(b); err != nil {
			testenv.SkipDataplane(t, "the kernel dataplane VM needs "+b+"; hack/vm/image.sh installs it")
		}
	}
	root := testenv.RepoRoot()
	work, err := os.MkdirTemp("", "bnerd-vm-dataplane-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("VM share kept in %s (out/ holds the guest's logs)", work)
			return
		}
		_ = os.RemoveAll(work)
	})
	share := filepath.Join(work, "share")
	for _, d := range []string{share, filepath.Join(share, "out")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	// Static binaries: the guest has no Go toolchain and need not share the host's libc.
	// With cgo enabled (the default where gcc exists) they are linked statically against
	// glibc rather than built with CGO_ENABLED=0, so they reuse the packages the rest of
	// the test run compiled: a cold CGO_ENABLED=0 build of the same tree took 6.5 minutes
	// here, this takes seconds. (glibc's linker warns that NSS lookups in a static binary
	// need matching shared libraries at run time; the tests use addresses only.)
	t0 := time.Now()
	static := []string{}
	if out, err := exec.Command("go", "env", "CGO_ENABLED").Output(); err == nil && strings.TrimSpace(string(out)) == "1" {
		static = []string{"-ldflags", "-linkmode=external -extldflags=-static"}
	}
	for _, b := range [][]string{
		append(append([]string{"test", "-c", "-tags", "vmtest"}, static...), "-o", filepath.Join(share, "dataplane.test"), "./test/e2e/dataplane"),
		append(append([]string{"build"}, static...), "-o", filepath.Join(share, "vpn-gateway-agent"), "./cmd/vpn-gateway-agent"),
		append(append([]string{"build"}, static...), "-o", filepath.Join(share, "testhelper"), "./test/e2e/dataplane/testhelper"),
	} {
		cmd := exec.Command("go", b...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", b, err, out)
		}
	}
	t.Logf("guest binaries built in %.0fs", time.Since(t0).Seconds())
	// The libreswan clients (4.10 and 5.2 in chroots of their Debian releases) on a
	// second disk: a separate, cached image (hack/vm/libreswan.sh).
	t0 = time.Now()
	lsw, err := exec.Command("bash", filepath.Join(root, "hack", "vm", "libreswan.sh")).Output()
	if err != nil {
		t.Fatalf("hack/vm/libreswan.sh: %v", err)
	}
	clients := filepath.Join(strings.TrimSpace(string(lsw)), "clients.img")
	t.Logf("libreswan clients image ready in %.0fs", time.Since(t0).Seconds())

	api, err := testenv.Start()
	if err != nil {
		if err == testenv.ErrNoControlPlane && !testenv.Required() {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	defer func() { _ = api.Stop() }()
	kc, err := clientcmd.Load(api.KubeConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range kc.Clusters {
		c.Server = "https://" + apiAddr
	}
	if err := clientcmd.WriteToFile(*kc, filepath.Join(share, "kubeconfig")); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(api.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	// A short path: unix socket paths are limited to 107 bytes.
	sockDir, err := os.MkdirTemp("", "bn-vm-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	sock := filepath.Join(sockDir, "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go serveAPIPort(ln, u.Host)

	scale := os.Getenv(netns.WaitScaleEnv)
	if scale == "" {
		scale = "3" // software emulation: measured passing at 2 on a loaded 2-core machine
	}
	args := []string{filepath.Join(root, "hack", "vm", "run.sh"), "--timeout", "2700", "--port", "bnerd.api=" + sock, "--disk", clients}
	for _, kv := range []string{
		netns.KernelEnv + "=1", netns.WaitScaleEnv + "=" + scale, netns.BinDirEnv + "=/share", apiPortEnv + "=/dev/virtio-ports/bnerd.api",
		kubeconfigEnv + "=/share/kubeconfig", outEnv + "=/share/out", testenv.RequireDataplaneEnv + "=1",
		libreswanDiskEnv + "=/dev/vdb",
	} {
		args = append(args, "--env", kv)
	}
	run := "^(" + strings.Join(vmTests, "|") + ")$"
	if r := os.Getenv(vmRunEnv); r != "" {
		run = r
	}
	args = append(args, share, "/share/dataplane.test", "-test.run", run, "-test.v", "-test.count=1", "-test.timeout", "40m")

	var out bytes.Buffer
	logFile, err := os.Create(filepath.Join(work, "vm-output.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command("bash", args...)
	cmd.Stdout = io.MultiWriter(&out, logFile)
	cmd.Stderr = cmd.Stdout
	// Its own process group, so everything it started (qemu, tail) goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Stopping the run: SIGTERM to its process group lets hack/vm/run.sh stop qemu and
	// remove its run directory; SIGKILL follows if it does not.
	var once sync.Once
	var runErr error
	stop := func() {
		once.Do(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			select {
			case runErr = <-done:
			case <-time.After(20 * time.Second):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				runErr = <-done
			}
		})
	}
	defer stop()
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-30*time.Second))
		defer cancel()
	}
	select {
	case runErr = <-done:
		once.Do(func() {})
	case <-ctx.Done():
		stop()
		t.Errorf("the VM run was stopped before the test deadline")
	}
	wall := time.Since(start)

	figures, _ := os.ReadFile(filepath.Join(share, "out", "figures.txt"))
	for _, l := range strings.Split(strings.TrimSpace(string(figures)), "\n") {
		if l != "" {
			t.Logf("VM: %s", l)
		}
	}
	t.Logf("VM tier: boot, kernel-mode tests and shutdown took %.0fs", wall.Seconds())
	text := out.String()
	if runErr != nil {
		t.Fatalf("the VM run failed (%v); output:\n%s", runErr, netns.Tail(text, 200))
	}
	for _, name := range vmTests {
		if want := "--- PASS: " + name + " "; os.Getenv(vmRunEnv) == "" && !strings.Contains(text, want) {
			t.Errorf("the VM output lacks %q:\n%s", want, netns.Tail(text, 100))
		}
	}
	if !strings.Contains(text, "--- PASS: ") || strings.Contains(text, "--- FAIL: ") {
		t.Errorf("the VM run passed no test or failed one:\n%s", netns.Tail(text, 100))
	}
	if strings.Contains(text, "--- SKIP") {
		t.Errorf("a test skipped inside the VM:\n%s", netns.Tail(text, 100))
	}
	if testing.Verbose() {
		t.Logf("VM output:\n%s", text)
	}
}

// TestVMRunnerTimeoutLeavesNothing boots the VM with a command that never ends and a
// timeout: hack/vm/run.sh must stop the VM, exit 124, and leave neither a qemu process nor
// its run directory behind.
func TestVMRunnerTimeoutLeavesNothing(t *testing.T) {
	testenv.SkipUnit(t, "boots a VM")
	testenv.NeedRoot(t, "the VM runner needs root (image build)")
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		testenv.SkipDataplane(t, "the VM runner needs qemu-system-x86_64; hack/vm/image.sh installs it")
	}
	share, tmp := t.TempDir(), t.TempDir()
	cmd := exec.Command("bash", filepath.Join(testenv.RepoRoot(), "hack", "vm", "run.sh"), "--timeout", "40", share, "/bin/sleep", "600")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 124 {
		t.Fatalf("run.sh: %v, want exit 124\n%s", err, out)
	}
	if !strings.Contains(string(out), "running /bin/sleep") {
		t.Errorf("the command never started in the VM (boot slower than the timeout?):\n%s", out)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("run directory left behind: %v", left)
	}
	// No process may still reference this run (qemu's command line names the share).
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), share) {
			t.Errorf("a process of the run survived: %s %q", p, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
}
