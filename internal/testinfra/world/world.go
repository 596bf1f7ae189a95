// Package world runs the whole product on this machine, as one piece: the local node world
// (hack/node: a control plane and two real nodes, and an OCI registry the release is
// pushed to and the nodes pull from), the OpenStack simulator as its own process, the
// packet fabric that makes the simulator's networking carry traffic (internal/testinfra/fabric),
// the operator installed from the released chart (`helm install oci://... --version`),
// a client site with its own hand-configured strongSwan, and hosts in the service
// cluster. The sandbox (cmd/sandbox) and the product e2e
// (test/e2e/product) both drive it. It needs root.
package world

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"bnerd.net/vpn-operator/internal/testinfra/fabric"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// Names of the estate (examples/sim-estate.yaml) and of the install.
const (
	OperatorNamespace = "bnerd-vpn"
	ReleaseName       = "bnerd-vpn-operator"
	OperatorRouter    = "shoot--services--vpn01"
	ExternalNetwork   = "public"
	GatewayNetwork    = "vpn-transit"
	// ControlPlaneIP is the node world's control-plane address (hack/node/up.sh); the
	// simulator listens there so pods reach it.
	ControlPlaneIP = "10.77.0.1"
)

// Options configure Up.
type Options struct {
	// Repo is the repository root (default: found from this source file).
	Repo string
	// Seed is the simulator's estate (default examples/sim-estate.yaml).
	Seed string
	// NodeState is hack/node's state directory (default ${TMPDIR:-/tmp}/bnerd-node).
	NodeState string
	// Progress receives one line per step (default: discarded).
	Progress func(format string, args ...any)
	// FabricLog receives the fabric's change lines (default: Progress).
	FabricLog func(format string, args ...any)
	// StartFrom, a commit of this repository, makes Up install the release built from
	// that commit (PushPreviousRelease) instead of the current one, so a test can
	// upgrade from it (InstallRelease of Release).
	StartFrom string
}

// Node is one node of the world.
type Node struct {
	Name, Namespace, ServerID, IP, Containerd string
}

// World is a running product world.
type World struct {
	opts  Options
	dir   string
	start time.Time
	lock  *os.File

	Kube       client.Client
	KubeConfig string
	Kubectl    string
	Nodes      []Node
	// Registry is the world's registry and prefix (10.77.0.1:5000/bnerd), RegistryCA the
	// CA its certificate is signed by.
	Registry, RegistryCA string
	// Release is what hack/node/up.sh released into the registry.
	Release Release
	// Previous is the release Up installed when Options.StartFrom named a commit.
	Previous *PreviousRelease
	// Images are the pushed references by name (operator, gateway, gateway-wireguard,
	// status-agent, pause), each tagged with the release's version (pause: its content),
	// and ImageDigests their index digests (sha256:...).
	Images, ImageDigests map[string]string

	// helm is the Helm SDK's installer (test/chart/cmd/chart-install), valuesFile the
	// values every install and upgrade uses.
	helm, valuesFile string

	simCmd  *exec.Cmd
	simDone chan struct{}
	// OperatorEnv and AdminEnv are the simulator's OS_* environments.
	OperatorEnv, AdminEnv map[string]string

	Fabric     *fabric.Fabric
	fabricStop context.CancelFunc
	fabricDone chan struct{}

	// Timings of Up's phases, in order.
	Timings []Timing

	mu      sync.Mutex
	cleanup []func() error
	// partitioned: per node cut off by PartitionNode, the routes through its link that
	// HealNode puts back.
	partitioned map[string][]string
	// lost are nodes PowerOffNode killed: machines that are gone, so nothing on them counts
	// as left behind.
	lost map[string]bool
}

// Release is a release pushed to the world's registry.
type Release struct {
	// Version is the chart's version (0.0.0-dev.g<hash>); the images are tagged v<Version>.
	Version string
	// Chart is the chart's OCI reference without the version (oci://.../bnerd-vpn-operator).
	Chart string
}

// Timing is how long one phase of Up took.
type Timing struct {
	Phase    string
	Duration time.Duration
}

func (w *World) progress(format string, args ...any) {
	if w.opts.Progress != nil {
		w.opts.Progress(format, args...)
	}
}

func (w *World) onDown(f func() error) {
	w.mu.Lock()
	w.cleanup = append(w.cleanup, f)
	w.mu.Unlock()
}

func (w *World) phase(name string, f func() error) error {
	t0 := time.Now()
	w.progress("%s", name)
	err := f()
	w.Timings = append(w.Timings, Timing{Phase: name, Duration: time.Since(t0)})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// Requirements returns why the world cannot run here, or "".
func Requirements() string {
	if os.Geteuid() != 0 {
		return "the product world needs root (network namespaces, containerd, kubelet)"
	}
	for _, b := range []string{"ip", "nft", "go", "bash", "nsenter"} {
		if _, err := exec.LookPath(b); err != nil {
			return "the product world needs " + b
		}
	}
	return ""
}

// Up starts the world: node world and images, simulator, fabric, the operator installed
// with the chart. The client site and the service cluster's hosts are separate (Site,
// PlugHost), since the client configures its side once the gateway exists.
func Up(ctx context.Context, opts Options) (w *World, err error) {
	if why := Requirements(); why != "" {
		return nil, errors.New(why)
	}
	if opts.Repo == "" {
		opts.Repo = testenv.RepoRoot()
	}
	if opts.Seed == "" {
		opts.Seed = filepath.Join(opts.Repo, "examples", "sim-estate.yaml")
	}
	if opts.NodeState == "" {
		opts.NodeState = filepath.Join(os.TempDir(), "bnerd-node")
	}
	if opts.FabricLog == nil {
		opts.FabricLog = opts.Progress
	}
	dir, err := os.MkdirTemp("", "bnerd-world-")
	if err != nil {
		return nil, err
	}
	w = &World{opts: opts, dir: dir, start: time.Now()}
	defer func() {
		if err != nil {
			_ = w.Down()
			w = nil
		}
	}()
	if err := w.takeLock(); err != nil {
		return w, err
	}
	if err := w.phase("node world: control plane, registry with the release pushed, two nodes (hack/node/up.sh)", func() error { return w.nodesUp(ctx) }); err != nil {
		return w, err
	}
	if err := w.phase("OpenStack simulator (cmd/openstack-sim, "+filepath.Base(opts.Seed)+")", func() error { return w.simUp(ctx) }); err != nil {
		return w, err
	}
	if err := w.phase("packet fabric (internal/testinfra/fabric)", func() error { return w.fabricUp(ctx) }); err != nil {
		return w, err
	}
	if err := w.phase("operator installed from the released chart (helm install oci://...)", func() error { return w.installChart(ctx) }); err != nil {
		return w, err
	}
	return w, nil
}

// Dir is the world's scratch directory (logs, configuration).
func (w *World) Dir() string { return w.dir }

// Repo is the repository the world runs (its scripts, examples and chart).
func (w *World) Repo() string { return w.opts.Repo }

// Elapsed since Up began.
func (w *World) Elapsed() time.Duration { return time.Since(w.start) }

// takeLock makes sure only one world runs on the machine: the node world's addresses and
// the containerds are single instances.
func (w *World) takeLock() error {
	if err := os.MkdirAll(w.opts.NodeState, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(w.opts.NodeState, ".world.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		// Another world runs (a sandbox, the other test package): wait for it.
		w.progress("waiting for the other product world on this machine to stop (lock %s)", f.Name())
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return fmt.Errorf("locking %s: %w", f.Name(), err)
		}
	}
	w.lock = f
	return nil
}

// runLogged runs a command, sending its output to a log file in the world's directory
// and lines starting with "[" (the hack scripts' progress) to Progress.
func (w *World) runLogged(ctx context.Context, name string, env []string, args ...string) error {
	logf, err := os.Create(filepath.Join(w.dir, name+".log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = w.opts.Repo
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			if strings.HasPrefix(line, "[node-") || strings.HasPrefix(line, "[release ") || strings.HasPrefix(line, "images: ") || strings.HasPrefix(line, "controlplane: ") || strings.HasPrefix(line, "tool: ") {
				w.progress("    %s", line)
			}
		}
	}()
	err = cmd.Run()
	pw.Close()
	<-done
	if err != nil {
		return fmt.Errorf("%s failed (%w); log: %s", strings.Join(args, " "), err, logf.Name())
	}
	return nil
}

func (w *World) nodesUp(ctx context.Context) error {
	w.onDown(func() error {
		return w.runLogged(context.Background(), "node-down", []string{"BNERD_NODE_STATE=" + w.opts.NodeState}, "bash", "hack/node/down.sh")
	})
	if err := w.runLogged(ctx, "node-up", []string{"BNERD_NODE_STATE=" + w.opts.NodeState, "BNERD_NODE_IMAGES=1"}, "bash", "hack/node/up.sh"); err != nil {
		return err
	}
	nodes, err := os.ReadFile(filepath.Join(w.opts.NodeState, "nodes"))
	if err != nil {
		return err
	}
	for _, l := range strings.Split(strings.TrimSpace(string(nodes)), "\n") {
		f := strings.Fields(l)
		if len(f) != 5 {
			return fmt.Errorf("nodes file line %q", l)
		}
		w.Nodes = append(w.Nodes, Node{Name: f[0], Namespace: f[1], ServerID: f[2], IP: f[3], Containerd: f[4]})
	}
	if err := w.readRelease(); err != nil {
		return err
	}
	w.KubeConfig = filepath.Join(w.opts.NodeState, "etc", "admin.kubeconfig")
	out, err := exec.Command("bash", filepath.Join(w.opts.Repo, "hack", "controlplane.sh"), "--print-dir").Output()
	if err != nil {
		return err
	}
	w.Kubectl = filepath.Join(strings.TrimSpace(string(out)), "kubectl")
	cfg, err := clientcmd.BuildConfigFromFlags("", w.KubeConfig)
	if err != nil {
		return err
	}
	w.Kube, err = client.New(cfg, client.Options{Scheme: testenv.NewScheme()})
	return err
}

// readRelease reads what hack/node/up.sh pushed: the registry ($STATE/registry: prefix and
// CA), the images ($STATE/release/images.txt and pause.txt: name, reference, digest) and
// the chart ($STATE/release/chart.txt: "chart", reference, version, digest).
func (w *World) readRelease() error {
	dir := w.opts.NodeState
	reg, err := os.ReadFile(filepath.Join(dir, "registry"))
	if err != nil {
		return err
	}
	f := strings.Fields(string(reg))
	if len(f) != 2 {
		return fmt.Errorf("registry file %q", reg)
	}
	w.Registry, w.RegistryCA = f[0], f[1]
	w.Images, w.ImageDigests = map[string]string{}, map[string]string{}
	for _, name := range []string{"images.txt", "pause.txt"} {
		data, err := os.ReadFile(filepath.Join(dir, "release", name))
		if err != nil {
			return err
		}
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			if f := strings.Fields(l); len(f) == 3 {
				w.Images[f[0]], w.ImageDigests[f[0]] = f[1], f[2]
			}
		}
	}
	for _, want := range []string{"operator", "gateway", "gateway-wireguard", "status-agent", "pause"} {
		if w.Images[want] == "" {
			return fmt.Errorf("no %s image was pushed", want)
		}
	}
	chart, err := os.ReadFile(filepath.Join(dir, "release", "chart.txt"))
	if err != nil {
		return err
	}
	if f := strings.Fields(string(chart)); len(f) == 4 && f[0] == "chart" {
		w.Release = Release{Chart: f[1], Version: f[2]}
	} else {
		return fmt.Errorf("chart file %q", chart)
	}
	return nil
}

// Node returns the node by name.
func (w *World) Node(name string) (Node, bool) {
	for _, n := range w.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

func (w *World) simUp(ctx context.Context) error {
	bin := filepath.Join(w.dir, "openstack-sim")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/openstack-sim")
	build.Dir = w.opts.Repo
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building cmd/openstack-sim: %w\n%s", err, out)
	}
	envDir := filepath.Join(w.dir, "openstack")
	if err := os.MkdirAll(envDir, 0o700); err != nil {
		return err
	}
	ready := filepath.Join(envDir, "ready")
	logf, err := os.Create(filepath.Join(w.dir, "openstack-sim.log"))
	if err != nil {
		return err
	}
	// Pods reach the simulator on the control plane's address; it never listens beyond
	// the machine's own namespaces.
	cmd := exec.Command(bin, "--seed", w.opts.Seed, "--listen", ControlPlaneIP+":0", "--listen-host-only",
		"--credential", "vpn-operator", "--ready-file", ready, "--env-dir", envDir)
	cmd.Stdout, cmd.Stderr = io.Discard, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	w.simCmd = cmd
	w.simDone = make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(w.simDone) }()
	w.onDown(func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-w.simDone:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-w.simDone
		}
		return nil
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		select {
		case <-w.simDone:
			return fmt.Errorf("the simulator exited; log %s", logf.Name())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("the simulator did not get ready")
		}
	}
	if w.OperatorEnv, err = readEnv(filepath.Join(envDir, "vpn-operator.env")); err != nil {
		return err
	}
	if w.AdminEnv, err = readEnv(filepath.Join(envDir, "admin.env")); err != nil {
		return err
	}
	return nil
}

func readEnv(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimPrefix(strings.TrimSpace(l), "export ")
		if k, v, ok := strings.Cut(l, "="); ok {
			env[k] = v
		}
	}
	return env, nil
}

func (w *World) fabricUp(ctx context.Context) error {
	r, err := fabric.NewReader(ctx, fabric.Credential{
		AuthURL: w.AdminEnv["OS_AUTH_URL"], Region: w.AdminEnv["OS_REGION_NAME"],
		ID: w.AdminEnv["OS_APPLICATION_CREDENTIAL_ID"], Secret: w.AdminEnv["OS_APPLICATION_CREDENTIAL_SECRET"],
	})
	if err != nil {
		return err
	}
	servers := map[string]string{}
	for _, n := range w.Nodes {
		servers[n.ServerID] = n.Namespace
	}
	logf := w.opts.FabricLog
	if logf == nil {
		logf = func(string, ...any) {}
	}
	f := fabric.New(r, fabric.Config{Servers: servers, Logf: func(format string, args ...any) {
		logf("    [fabric %6.1fs] "+format, append([]any{w.Elapsed().Seconds()}, args...)...)
	}})
	w.onDown(f.Close)
	if err := f.Sync(ctx); err != nil {
		return err
	}
	fctx, cancel := context.WithCancel(context.Background())
	w.Fabric, w.fabricStop, w.fabricDone = f, cancel, make(chan struct{})
	go func() { defer close(w.fabricDone); f.Run(fctx) }()
	w.onDown(func() error { cancel(); <-w.fabricDone; return nil })
	return nil
}

// KubectlRun runs kubectl against the world and returns its output.
func (w *World) KubectlRun(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, w.Kubectl, append([]string{"--kubeconfig", w.KubeConfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Down stops everything Up started, in reverse order. The scratch directory (Dir: logs,
// captures) stays for the caller to keep or remove.
func (w *World) Down() error {
	w.mu.Lock()
	fns := w.cleanup
	w.cleanup = nil
	w.mu.Unlock()
	var errs []error
	for i := len(fns) - 1; i >= 0; i-- {
		if err := fns[i](); err != nil {
			errs = append(errs, err)
		}
	}
	if w.lock != nil {
		_ = syscall.Flock(int(w.lock.Fd()), syscall.LOCK_UN)
		w.lock.Close()
		w.lock = nil
	}
	return errors.Join(errs...)
}
