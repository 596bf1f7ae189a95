package world

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Capture is a running tcpdump.
type Capture struct {
	cmd  *exec.Cmd
	done chan struct{}
	File string
	log  string
}

// StartCapture records every packet on dev in namespace ns into <dir>/<name>.pcap. It
// returns once tcpdump listens.
func (w *World) StartCapture(name, ns, dev string) (*Capture, error) {
	c := &Capture{File: filepath.Join(w.dir, name+".pcap"), log: filepath.Join(w.dir, name+".tcpdump.log"), done: make(chan struct{})}
	logf, err := os.Create(c.log)
	if err != nil {
		return nil, err
	}
	c.cmd = exec.Command("ip", "netns", "exec", ns, "tcpdump", "-ni", dev, "-s", "256", "--immediate-mode", "-U", "-w", c.File)
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	if err := c.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	go func() { _ = c.cmd.Wait(); logf.Close(); close(c.done) }()
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

// Stop ends the capture (after a moment for packets in flight).
func (c *Capture) Stop() {
	time.Sleep(200 * time.Millisecond)
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
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
