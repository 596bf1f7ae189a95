package world

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Capture is a running tcpdump.
type Capture struct {
	cmd  *exec.Cmd
	done chan struct{}
	File string
	log  string
	once sync.Once
}

// StartCapture records every packet on dev in namespace ns into <dir>/<name>.pcap. It
// returns once tcpdump listens. ns is a named network namespace, or "pid:N" for the
// network namespace of process N (a pod's).
func (w *World) StartCapture(name, ns, dev string) (*Capture, error) {
	c := &Capture{File: filepath.Join(w.dir, name+".pcap"), log: filepath.Join(w.dir, name+".tcpdump.log"), done: make(chan struct{})}
	logf, err := os.Create(c.log)
	if err != nil {
		return nil, err
	}
	enter := []string{"ip", "netns", "exec", ns}
	if pid, ok := strings.CutPrefix(ns, "pid:"); ok {
		enter = []string{"nsenter", "-t", pid, "-n", "--"}
	}
	c.cmd = exec.Command(enter[0], append(enter[1:], "tcpdump", "-ni", dev, "-s", "256", "--immediate-mode", "-U", "-w", c.File)...)
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	if err := c.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	go func() { _ = c.cmd.Wait(); logf.Close(); close(c.done) }()
	// A test that fails before it stops its capture leaves it to the world's teardown.
	w.onDown(func() error { c.Stop(); return nil })
	for i := 0; i < 100; i++ {
		b, _ := os.ReadFile(c.log)
		if strings.Contains(string(b), "listening on") {
			return c, nil
		}
		select {
		case <-c.done:
			return nil, fmt.Errorf("tcpdump on %s/%s exited: %s", ns, dev, b)
		case <-time.After(50 * time.Millisecond):
		}
	}
	c.Stop()
	return nil, fmt.Errorf("tcpdump on %s/%s did not start", ns, dev)
}

// Stop ends the capture (after a moment for packets in flight); a second call does
// nothing.
func (c *Capture) Stop() {
	c.once.Do(func() {
		time.Sleep(200 * time.Millisecond)
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	})
}

// PacketTimes returns when each captured packet matching a tcpdump filter was seen.
func (c *Capture) PacketTimes(filter string) ([]time.Time, error) {
	out, err := exec.Command("tcpdump", "-tt", "-nr", c.File, filter).Output()
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", c.File, err)
	}
	var times []time.Time
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		var sec float64
		if _, err := fmt.Sscan(f[0], &sec); err != nil {
			return nil, fmt.Errorf("a line of tcpdump -tt without a time: %q", l)
		}
		times = append(times, time.Unix(0, int64(sec*1e9)))
	}
	return times, nil
}

// Packets returns the captured packets matching a tcpdump filter, one line each.
func (c *Capture) Packets(filter string) ([]string, error) {
	out, err := exec.Command("tcpdump", "-nr", c.File, filter).Output()
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", c.File, err)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	return lines, nil
}
