package dataplane

import (
	"errors"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		testenv.SkipDataplane(t, "the kernel dataplane VM needs qemu-system-x86_64; hack/vm/image.sh installs it")
	}
	root := testenv.RepoRoot()
	work, err := os.MkdirTemp("", "bnerd-vm-dataplane-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			_ = os.RemoveAll(work)
		}
	})
	share := filepath.Join(work, "share")
	if err := os.MkdirAll(share, 0o755); err != nil {
		t.Fatal(err)
	}

	// The libreswan clients (4.10 and 5.2 in chroots of their Debian releases) on a
	// second disk: a separate, cached image (hack/vm/libreswan.sh).
	t0 := time.Now()
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

	run := "^(" + strings.Join(vmTests, "|") + ")$"
	var want []string
	if r := os.Getenv(vmRunEnv); r != "" {
		run = r
	} else {
		for _, name := range vmTests {
			want = append(want, "--- PASS: "+name+" ")
		}
	}
	netns.RunInVM(t, netns.VMRun{
		Package: "./test/e2e/dataplane", Tags: []string{"vmtest"}, Run: run, Want: want, What: "kernel-mode tests",
		Share: share, Ports: []string{"bnerd.api=" + sock}, Disks: []string{clients},
		Env:     []string{apiPortEnv + "=/dev/virtio-ports/bnerd.api", kubeconfigEnv + "=/share/kubeconfig", libreswanDiskEnv + "=/dev/vdb"},
		Timeout: 45 * time.Minute, GuestTimeout: 40 * time.Minute,
	})
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
