package netns

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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
	// Tags are build tags of the test binary (the guest's own code: vmtest).
	Tags []string
	// Run selects the tests the guest runs (-test.run).
	Run string
	// Want is what the guest's output must hold besides a passed test, no failed and
	// no skipped one.
	Want []string
	// What names the run in the timing line of the log.
	What string
	// Share, when set, is the directory (made by the caller, which may have put inputs
	// in it) the guest mounts; otherwise RunInVM makes one. It is kept when t fails.
	Share string
	// Env is more of the guest's environment (K=V), Ports the host's listening unix
	// sockets joined to the guest's virtio-serial ports (NAME=SOCKET), Disks raw images
	// attached as /dev/vdb and on (hack/vm/run.sh's --env, --port, --disk).
	Env, Ports, Disks []string
	// Timeout stops the VM (default 30 min); GuestTimeout is the guest test binary's
	// -test.timeout (default 25 min).
	Timeout, GuestTimeout time.Duration
}

// RunInVM boots the kernel VM, runs r's tests in it and fails t unless they pass there,
// none skipped. The guest's OutEnv is the share's out/: its figures.txt lines are logged
// as "VM: ..." lines, and a guest test that fails copies its logs there. The whole output
// is in the share's vm-output.txt. The run is stopped 30 s before t's deadline.
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
	share := r.Share
	if share == "" {
		var err error
		if share, err = os.MkdirTemp("", "bnerd-vm-"+name+"-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if !t.Failed() {
				_ = os.RemoveAll(share)
			}
		})
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("VM share kept in %s (vm-output.txt, and out/ with the guest's logs)", share)
		}
	})
	if err := os.MkdirAll(filepath.Join(share, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	buildGuestBinaries(t, root, share, name, r)

	timeout, guestTimeout := r.Timeout, r.GuestTimeout
	if timeout == 0 {
		timeout = 30 * time.Minute
	}
	if guestTimeout == 0 {
		guestTimeout = 25 * time.Minute
	}
	// Software emulation is several times slower than the host: every wait times 3
	// unless the caller's environment says otherwise.
	scale := os.Getenv(WaitScaleEnv)
	if scale == "" {
		scale = "3"
	}
	args := []string{filepath.Join(root, "hack", "vm", "run.sh"), "--timeout", strconv.Itoa(int(timeout.Seconds()))}
	for _, p := range r.Ports {
		args = append(args, "--port", p)
	}
	for _, d := range r.Disks {
		args = append(args, "--disk", d)
	}
	for _, kv := range append([]string{KernelEnv + "=1", BinDirEnv + "=/share", WaitScaleEnv + "=" + scale, OutEnv + "=/share/out",
		testenv.RequireDataplaneEnv + "=1"}, r.Env...) {
		args = append(args, "--env", kv)
	}
	args = append(args, share, "/share/"+name+".test", "-test.run", r.Run, "-test.v", "-test.count=1", "-test.timeout", guestTimeout.String())

	text, wall, runErr := runVM(t, args, filepath.Join(share, "vm-output.txt"))
	figures, _ := os.ReadFile(filepath.Join(share, "out", "figures.txt"))
	for _, l := range strings.Split(strings.TrimSpace(string(figures)), "\n") {
		if l != "" {
			t.Logf("VM: %s", l)
		}
	}
	t.Logf("VM: boot, %s and shutdown took %.0fs", r.What, wall.Seconds())
	if runErr != nil {
		t.Fatalf("the VM run failed (%v); output:\n%s", runErr, Tail(text, 200))
	}
	for _, want := range r.Want {
		if !strings.Contains(text, want) {
			t.Errorf("the VM output lacks %q:\n%s", want, Tail(text, 100))
		}
	}
	if !strings.Contains(text, "--- PASS: ") || strings.Contains(text, "--- FAIL: ") {
		t.Errorf("the VM run passed no test or failed one:\n%s", Tail(text, 100))
	}
	if strings.Contains(text, "--- SKIP") {
		t.Errorf("a test skipped inside the VM:\n%s", Tail(text, 100))
	}
	if testing.Verbose() {
		t.Logf("VM output:\n%s", Tail(text, 60))
	}
}

// buildGuestBinaries builds r's test binary, the gateway agent and the dataplane's test
// helper into share. They are linked statically against glibc where cgo is on (the
// default where gcc exists) rather than built with CGO_ENABLED=0, so they reuse the
// packages the rest of the test run compiled: a cold CGO_ENABLED=0 build of the same tree
// took 6.5 minutes here, this takes seconds. (glibc's linker warns that NSS lookups in a
// static binary need matching shared libraries at run time; the tests use addresses
// only.)
func buildGuestBinaries(t *testing.T, root, share, name string, r VMRun) {
	t.Helper()
	t0 := time.Now()
	static := []string{}
	if out, err := exec.Command("go", "env", "CGO_ENABLED").Output(); err == nil && strings.TrimSpace(string(out)) == "1" {
		static = []string{"-ldflags", "-linkmode=external -extldflags=-static"}
	}
	testBuild := []string{"test", "-c"}
	if len(r.Tags) > 0 {
		testBuild = append(testBuild, "-tags", strings.Join(r.Tags, ","))
	}
	for _, b := range [][]string{
		append(append(testBuild, static...), "-o", filepath.Join(share, name+".test"), r.Package),
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
}

// runVM runs hack/vm/run.sh with args, its output also written to logPath, and returns
// the output, the wall time and the run's error. It runs in its own process group, so
// everything it started (qemu, tail) goes with it: SIGTERM to the group lets run.sh stop
// qemu and remove its run directory, SIGKILL follows if it does not. The run is stopped
// 30 s before t's deadline, so the test still reports what the guest said.
func runVM(t *testing.T, args []string, logPath string) (string, time.Duration, error) {
	t.Helper()
	var out bytes.Buffer
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logFile.Close() }()
	cmd := exec.Command("bash", args...)
	cmd.Stdout = io.MultiWriter(&out, logFile)
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
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
	return out.String(), time.Since(start), runErr
}
