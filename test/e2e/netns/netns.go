// Package netns is the harness of the namespace end-to-end tests (the IPsec dataplane,
// WireGuard, routed mode): network namespaces named with a per-test prefix, commands and long-lived
// processes inside them (each stopped by its PID), packet captures, and the project's
// binaries built for the test. It needs root; Require skips (or, under
// BNERD_REQUIRE_DATAPLANE=1, fails) with the reason when something is missing.
package netns

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
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

// Env is one test's world.
type Env struct {
	T testing.TB
	// Dir holds logs, captures and configs; kept when the test fails.
	Dir    string
	Prefix string
	// Diagnose, when set, adds to the failure of Eventually what says why (the tails
	// of the logs that matter).
	Diagnose func() string
	// CleanupSignal ends the processes still running when the test ends (zero:
	// SIGTERM, which daemons such as wireguard-go need to remove their sockets; the
	// dataplane suite uses SIGKILL, a crash being no different to what it tests).
	CleanupSignal syscall.Signal
	// Sockets names the VICI socket of a role's charon where it is not
	// <Dir>/<role>/charon.vici (Sock): the dataplane's kernel-mode gateway is the pod's
	// strongswan container, whose socket is on the pod's run mount.
	Sockets map[string]string
	// procs are the processes the test started, by name (mu: steps that act on several
	// sites at once start and stop processes concurrently).
	mu    sync.Mutex
	procs map[string]*exec.Cmd
}

// BinDirEnv names a directory of prebuilt binaries (by package base name) that Build
// returns instead of compiling: the kernel VM has no Go toolchain.
const BinDirEnv = "BNERD_E2E_BIN_DIR"

// Require skips the test unless it runs as root with every binary named.
func Require(t testing.TB, bins ...string) {
	t.Helper()
	testenv.NeedRoot(t, "namespace e2e needs root (network namespaces, nftables)")
	need := []string{"ip", "nft", "tcpdump"}
	if os.Getenv(BinDirEnv) == "" {
		need = append(need, "go")
	}
	for _, b := range append(need, bins...) {
		if _, err := exec.LookPath(b); err != nil {
			testenv.SkipDataplane(t, "namespace e2e needs "+b+"; run hack/install-deps.sh")
		}
	}
}

// OutEnv names a directory on the kernel VM's host share: a failed test's logs are
// copied there (the VM's disk is discarded), and the dataplane suite writes its figures
// there.
const OutEnv = "BNERD_E2E_OUT"

// New returns an Env whose namespaces are named tag + 6 random hex digits + "-" + role.
func New(t testing.TB, tag string) *Env {
	dir, err := os.MkdirTemp("", "bnerd-"+tag+"-")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, 0o755)
	rnd := make([]byte, 3)
	_, _ = rand.Read(rnd)
	e := &Env{T: t, Dir: dir, Prefix: tag + hex.EncodeToString(rnd) + "-", procs: map[string]*exec.Cmd{}}
	t.Cleanup(func() {
		sig := e.CleanupSignal
		if sig == 0 {
			sig = syscall.SIGTERM
		}
		for _, name := range e.running() {
			e.Stop(name, sig)
		}
		if t.Failed() {
			keepLogs(t, dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	return e
}

// running names the processes still running.
func (e *Env) running() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	names := make([]string, 0, len(e.procs))
	for name := range e.procs {
		names = append(names, name)
	}
	return names
}

// keepLogs says where a failed test's logs are; inside the kernel VM (OutEnv set) they
// are copied to the host share first.
func keepLogs(t testing.TB, dir string) {
	out := os.Getenv(OutEnv)
	if out == "" {
		t.Logf("logs kept in %s", dir)
		return
	}
	dst := filepath.Join(out, "logs-"+filepath.Base(dir))
	// Regular files only (charon's sockets cannot be copied).
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Logf("copying logs: %v", err)
		return
	}
	t.Logf("logs copied to the host share: %s", dst)
}

// NS is the namespace name of role.
func (e *Env) NS(role string) string { return e.Prefix + role }

// AddNS creates the namespaces of roles (loopback up, IPv6 off, forwarding on) and
// deletes them when the test ends.
func (e *Env) AddNS(roles ...string) {
	e.T.Helper()
	e.Apply(Topology{Namespaces: roles})
}

// Link joins two namespaces with a veth pair (names an and bn), both up.
func (e *Env) Link(a, an, b, bn string) {
	e.T.Helper()
	e.Apply(Topology{Links: []Link{{A: a, ADev: an, B: b, BDev: bn}}})
}

// Addr adds an address to a device of role.
func (e *Env) Addr(role, dev, addr string) {
	e.T.Helper()
	e.Apply(Topology{Addrs: []Addr{{Role: role, Dev: dev, CIDR: addr}}})
}

// Sh runs a command in namespace ns (empty: the test's own) and returns its output.
func (e *Env) Sh(ns string, args ...string) (string, error) {
	if ns != "" {
		args = append([]string{"ip", "netns", "exec", ns}, args...)
	}
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	return string(out), err
}

// Must is Sh that fails the test on error.
func (e *Env) Must(ns string, args ...string) string {
	e.T.Helper()
	return e.MustT(e.T, ns, args...)
}

// MustT is Must failing t instead of the environment's test (a site's own subtest).
func (e *Env) MustT(t testing.TB, ns string, args ...string) string {
	t.Helper()
	out, err := e.Sh(ns, args...)
	if err != nil {
		t.Fatalf("%s: %v: %v\n%s", ns, args, err, out)
	}
	return out
}

// NFT loads rules (nft -f syntax) in role's namespace.
func (e *Env) NFT(role, rules string) {
	e.T.Helper()
	e.Apply(Topology{Tables: []Table{{Role: role, Rules: rules}}})
}

// Start runs a long-lived process in ns (empty: the test's own namespace); its output
// goes to <Dir>/<name>.log (appended: a restarted process keeps its earlier lines).
func (e *Env) Start(name, ns string, env []string, args ...string) *exec.Cmd {
	e.T.Helper()
	return e.StartT(e.T, name, ns, env, args...)
}

// StartT is Start failing t (a subtest running beside others) rather than e.T.
func (e *Env) StartT(t testing.TB, name, ns string, env []string, args ...string) *exec.Cmd {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(e.Dir, name+".log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logf.Close() }()
	if ns != "" {
		args = append([]string{"ip", "netns", "exec", ns}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	e.mu.Lock()
	e.procs[name] = cmd
	e.mu.Unlock()
	return cmd
}

// proc is the running process named name (nil: none).
func (e *Env) proc(name string) *exec.Cmd {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.procs[name]
}

// take removes the process named name from those the test stops, and returns it.
func (e *Env) take(name string) *exec.Cmd {
	e.mu.Lock()
	defer e.mu.Unlock()
	cmd := e.procs[name]
	delete(e.procs, name)
	return cmd
}

// Signal sends sig to a process this test started (SIGSTOP/SIGCONT freeze it).
func (e *Env) Signal(name string, sig syscall.Signal) {
	if cmd := e.proc(name); cmd != nil {
		_ = cmd.Process.Signal(sig)
	}
}

// Wait waits for a process this test started to exit by itself.
func (e *Env) Wait(name string) error {
	cmd := e.take(name)
	if cmd == nil {
		return nil
	}
	return cmd.Wait()
}

// PeakRSSEnv names a file; when set, every process a test of this harness (or of the
// dataplane tests) stops first has its name and peak resident memory appended to it
// (VmHWM, kB): the figures of docs/benchmarks.md "Gateway pod resources".
const PeakRSSEnv = "BNERD_PEAK_RSS"

// RecordPeakRSS appends the process's peak resident memory to $BNERD_PEAK_RSS, if set.
// `ip netns exec` execs its command, so the PID is the command's.
func RecordPeakRSS(name string, pid int) {
	path := os.Getenv(PeakRSSEnv)
	if path == "" {
		return
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			if out, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
				fmt.Fprintf(out, "%s\t%s\n", name, f[1])
				_ = out.Close()
			}
		}
	}
}

// Stop ends a process this test started, by its PID; one that outlives sig by ten
// seconds (times WaitScale) is killed.
func (e *Env) Stop(name string, sig syscall.Signal) {
	cmd := e.take(name)
	if cmd == nil {
		return
	}
	RecordPeakRSS(name, cmd.Process.Pid)
	_ = cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(Scaled(10 * time.Second)):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Log returns a process's output so far.
func (e *Env) Log(name string) string {
	b, _ := os.ReadFile(filepath.Join(e.Dir, name+".log"))
	return string(b)
}

// Eventually polls cond until it holds; the generous two minutes only bound a hung test.
func (e *Env) Eventually(what string, cond func() bool) {
	e.T.Helper()
	for deadline := time.Now().Add(Scaled(2 * time.Minute)); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if cond() {
			return
		}
	}
	if e.Diagnose != nil {
		e.T.Fatalf("never happened: %s\n%s", what, e.Diagnose())
	}
	e.T.Fatalf("never happened: %s", what)
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// Curl fetches url from role with a short timeout; "" when it fails.
func (e *Env) Curl(role, url string) string {
	out, _ := e.Sh(e.NS(role), "curl", "-sk", "--max-time", "3", url)
	return strings.TrimSpace(out)
}

// Capture starts tcpdump in role on dev; the returned func stops it and yields the file.
func (e *Env) Capture(name, role, dev string, snaplen int) func() string {
	e.T.Helper()
	f := filepath.Join(e.Dir, name+".pcap")
	e.Start("tcpdump-"+name, e.NS(role), nil, "tcpdump", "-ni", dev, "-s", strconv.Itoa(snaplen), "--immediate-mode", "-U", "-w", f)
	e.Eventually("tcpdump "+name+" listening", func() bool { return strings.Contains(e.Log("tcpdump-"+name), "listening on") })
	return func() string {
		time.Sleep(Scaled(300 * time.Millisecond))
		e.Stop("tcpdump-"+name, syscall.SIGTERM)
		return f
	}
}

// ReadPcap returns the packets of file matching a tcpdump filter, one line each.
func ReadPcap(t testing.TB, file string, filter ...string) []string {
	t.Helper()
	args := append([]string{"-nr", file}, filter...)
	out, err := exec.Command("tcpdump", args...).Output()
	if err != nil {
		t.Fatalf("reading %s: %v", file, err)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// Build compiles the module's packages (import paths relative to the module root, such
// as ./cmd/vpn-gateway-agent) into Dir and returns the binaries by package.
func (e *Env) Build(pkgs ...string) map[string]string {
	e.T.Helper()
	out := map[string]string{}
	if dir := os.Getenv(BinDirEnv); dir != "" {
		for _, pkg := range pkgs {
			out[pkg] = filepath.Join(dir, filepath.Base(pkg))
		}
		return out
	}
	for _, pkg := range pkgs {
		bin := filepath.Join(e.Dir, filepath.Base(pkg))
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		cmd.Dir = testenv.RepoRoot()
		if b, err := cmd.CombinedOutput(); err != nil {
			e.T.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
		out[pkg] = bin
	}
	return out
}

// First returns at most n lines.
func First(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// KernelEnv=1 says the suite runs inside the kernel VM (set by each suite's VM runner for
// the guest): the kernel's XFRM or WireGuard instead of the userspace ones, and the
// guards that need the kernel. One knob for every e2e suite.
const KernelEnv = "BNERD_E2E_KERNEL"

// Kernel reports whether KernelEnv is set.
func Kernel() bool { return os.Getenv(KernelEnv) == "1" }

// WaitScaleEnv multiplies every wait (software emulation in the VM is several times
// slower than the host).
const WaitScaleEnv = "BNERD_E2E_WAIT_SCALE"

// WaitScale is the factor of WaitScaleEnv, at least 1.
func WaitScale() float64 {
	if v, err := strconv.ParseFloat(os.Getenv(WaitScaleEnv), 64); err == nil && v >= 1 {
		return v
	}
	return 1
}

// Scaled is d times WaitScale.
func Scaled(d time.Duration) time.Duration { return time.Duration(float64(d) * WaitScale()) }

// MetricValue is the value of one series (its name and labels exactly as the exporter
// writes them) in a Prometheus text exposition, -1 when it is not there.
func MetricValue(text, series string) float64 {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, series+" ") {
			v, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(l, series)), 64)
			return v
		}
	}
	return -1
}

// IperfMbits is the receiver's throughput in Mbit/s from iperf3's JSON output (-J).
func IperfMbits(out string) (float64, error) {
	var r struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return 0, fmt.Errorf("iperf3 output: %w", err)
	}
	return r.End.SumReceived.BitsPerSecond / 1e6, nil
}
