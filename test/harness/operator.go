// Package harness runs the operator the way it runs in production, as its own process,
// against a local API server and the OpenStack simulator, for the soak and scale
// harnesses: it builds the binary, starts, kills and restarts it, reads its metrics
// and its peak memory, seeds the simulated estate and audits it afterwards.
package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// BuildOperator builds cmd/bnerd-vpn-operator into dir and returns the binary's path.
func BuildOperator(dir string) (string, error) {
	bin := filepath.Join(dir, "bnerd-vpn-operator")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/bnerd-vpn-operator")
	cmd.Dir = testenv.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the operator: %v\n%s", err, out)
	}
	return bin, nil
}

// Operator is the operator binary run as a child process. Start it, Kill it (SIGKILL,
// as a crashing node or an OOM kill would), Start it again; every run appends to one
// log file.
type Operator struct {
	Bin  string
	Env  []string
	Args []string
	// LogPath receives the output of every run.
	LogPath string
	// CgroupProcs, when set, is a cgroup's cgroup.procs file the process joins before the
	// operator's binary starts, so that it reads the cgroup's memory limit at start as in
	// a container (see MemoryCgroup).
	CgroupProcs string

	mu          sync.Mutex
	cmd         *exec.Cmd
	exited      chan struct{}
	metricsAddr string
	starts      int
	peakRSSKiB  int64 // the highest peak over finished runs
}

// Start runs a new process; the previous one must have exited.
func (o *Operator) Start() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cmd != nil {
		return errors.New("the operator is already running")
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(o.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	// Plain HTTP metrics (and pprof) on loopback: the harness scrapes without a token.
	args := append([]string{"--metrics-bind-address=" + addr, "--metrics-secure=false", "--health-probe-bind-address=0"}, o.Args...)
	cmd := exec.Command(o.Bin, args...)
	if o.CgroupProcs != "" {
		// The shell joins the cgroup and then becomes the operator (same PID).
		cmd = exec.Command("/bin/sh", append([]string{"-c", `echo $$ > "$1" && shift && exec "$@"`, "sh", o.CgroupProcs, o.Bin}, args...)...)
	}
	cmd.Env = o.Env
	cmd.Stdout, cmd.Stderr = logf, logf
	fmt.Fprintf(logf, "=== start %d at %s\n", o.starts+1, time.Now().Format(time.RFC3339Nano))
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	o.starts++
	o.cmd, o.metricsAddr = cmd, addr
	exited := make(chan struct{})
	o.exited = exited
	go func() {
		_ = cmd.Wait()
		logf.Close()
		o.mu.Lock()
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && ru.Maxrss > o.peakRSSKiB {
			o.peakRSSKiB = ru.Maxrss
		}
		if o.cmd == cmd {
			o.cmd = nil
		}
		o.mu.Unlock()
		close(exited)
	}()
	return nil
}

// Running reports whether a process is running.
func (o *Operator) Running() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.cmd != nil
}

// Starts is how many processes were started.
func (o *Operator) Starts() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.starts
}

// Kill sends SIGKILL and waits for the process to be gone.
func (o *Operator) Kill() { o.signal(syscall.SIGKILL) }

// Stop sends SIGTERM and waits (SIGKILL after 30 s).
func (o *Operator) Stop() { o.signal(syscall.SIGTERM) }

func (o *Operator) signal(sig syscall.Signal) {
	o.mu.Lock()
	cmd, exited := o.cmd, o.exited
	o.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Exited is closed when the current process ends (nil when none runs).
func (o *Operator) Exited() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.exited
}

// RSSKiB is the running process's resident set now and its peak so far (VmRSS and
// VmHWM), in KiB.
func (o *Operator) RSSKiB() (now, peak int64) {
	o.mu.Lock()
	cmd := o.cmd
	o.mu.Unlock()
	if cmd == nil {
		return 0, 0
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var v int64
		switch {
		case strings.HasPrefix(sc.Text(), "VmRSS:"):
			fmt.Sscanf(strings.TrimPrefix(sc.Text(), "VmRSS:"), "%d", &v)
			now = v
		case strings.HasPrefix(sc.Text(), "VmHWM:"):
			fmt.Sscanf(strings.TrimPrefix(sc.Text(), "VmHWM:"), "%d", &v)
			peak = v
		}
	}
	return now, peak
}

// PeakRSSKiB is the highest peak resident set of any finished run (from the kernel's
// accounting of the child), in KiB.
func (o *Operator) PeakRSSKiB() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.peakRSSKiB
}

// Metrics scrapes the running process's Prometheus metrics: the sum of every series of
// the family whose labels contain all of match (e.g. "controller=ipsecgateway"); for a
// histogram, name it with _sum or _count.
func (o *Operator) Metrics(ctx context.Context, family string, match ...string) (float64, error) {
	o.mu.Lock()
	addr := o.metricsAddr
	o.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, err
	}
	fam := fams[family]
	if fam == nil {
		// A histogram's _sum and _count are read from the histogram itself.
		fam = fams[strings.TrimSuffix(strings.TrimSuffix(family, "_sum"), "_count")]
	}
	if fam == nil {
		return 0, nil
	}
	var sum float64
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		ok := true
		for _, kv := range match {
			k, v, _ := strings.Cut(kv, "=")
			if labels[k] != v {
				ok = false
			}
		}
		if !ok {
			continue
		}
		switch {
		case m.Histogram != nil && strings.HasSuffix(family, "_count"):
			sum += float64(m.GetHistogram().GetSampleCount())
		case m.Histogram != nil:
			sum += m.GetHistogram().GetSampleSum()
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum, nil
}

// Log returns the output of every run so far.
func (o *Operator) Log() string {
	b, _ := os.ReadFile(o.LogPath)
	return string(b)
}

// LogTail returns the last n lines of the output.
func (o *Operator) LogTail(n int) string {
	lines := strings.Split(strings.TrimRight(o.Log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// MetricsAddr is the running process's metrics (and, with --profiling, pprof) address.
func (o *Operator) MetricsAddr() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.metricsAddr
}

// WaitServing waits until the running process answers on its metrics address (the
// manager has started).
func (o *Operator) WaitServing(ctx context.Context, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+o.MetricsAddr()+"/metrics", nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the operator does not serve its metrics after %s", bound)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Pid is the running process's ID (0 when none runs).
func (o *Operator) Pid() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cmd == nil {
		return 0
	}
	return o.cmd.Process.Pid
}

// MemCgroup is a memory cgroup an Operator runs in, limited as a container would be.
type MemCgroup struct {
	dir string
	v1  bool
}

// MemoryCgroup makes a memory cgroup named name limited to limitMiB: cgroup v1's memory
// controller where it is mounted, else cgroup v2.
func MemoryCgroup(name string, limitMiB int) (*MemCgroup, error) {
	cg := &MemCgroup{dir: filepath.Join("/sys/fs/cgroup/memory", name), v1: true}
	limitFile := "memory.limit_in_bytes"
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		cg.dir, cg.v1, limitFile = filepath.Join("/sys/fs/cgroup", name), false, "memory.max"
	}
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		return nil, fmt.Errorf("making the memory cgroup: %w", err)
	}
	if err := os.WriteFile(filepath.Join(cg.dir, limitFile), []byte(fmt.Sprint(limitMiB<<20)), 0o644); err != nil {
		_ = os.Remove(cg.dir)
		return nil, fmt.Errorf("limiting the memory cgroup: %w", err)
	}
	return cg, nil
}

// Procs is the cgroup's cgroup.procs file (Operator.CgroupProcs).
func (cg *MemCgroup) Procs() string { return filepath.Join(cg.dir, "cgroup.procs") }

// PeakMiB is the most memory the kernel charged to the cgroup so far, as it counts
// against the limit (anonymous memory and the page cache the process brought in; not
// the binary's pages another process had read before).
func (cg *MemCgroup) PeakMiB() int64 {
	f := "memory.peak"
	if cg.v1 {
		f = "memory.max_usage_in_bytes"
	}
	b, err := os.ReadFile(filepath.Join(cg.dir, f))
	if err != nil {
		return -1
	}
	var v int64
	fmt.Sscan(strings.TrimSpace(string(b)), &v)
	return v >> 20
}

// Close reports the cgroup's OOM kills and removes it (its processes must be gone).
func (cg *MemCgroup) Close() (oomKills int, err error) {
	f := "memory.events"
	if cg.v1 {
		f = "memory.oom_control"
	}
	if b, rerr := os.ReadFile(filepath.Join(cg.dir, f)); rerr == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, " "); ok && k == "oom_kill" {
				fmt.Sscan(v, &oomKills)
			}
		}
	}
	return oomKills, os.Remove(cg.dir)
}
