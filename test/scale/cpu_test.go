package scale

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cpuClock reads a process's user+system CPU time from /proc (clock ticks of 10 ms).
func cpuClock(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces) start after the last ')'.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fields) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(fields[11], 10, 64)
	st, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// children finds this process's child processes named name (the control plane envtest
// started).
func children(name string) []int {
	var out []int
	self := os.Getpid()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		fields := strings.Fields(s[close+2:])
		ppid, _ := strconv.Atoi(fields[1])
		if s[open+1:close] == name && ppid == self {
			out = append(out, pid)
		}
	}
	return out
}

// cpuSplit measures the CPU each part of the run used between start and stop.
type cpuSplit struct {
	pids  map[string][]int
	start map[string]time.Duration
	t0    time.Time
}

func startCPUSplit(operatorPid int) *cpuSplit {
	c := &cpuSplit{pids: map[string][]int{
		"operator":                             {operatorPid},
		"kube-apiserver":                       children("kube-apiserver"),
		"etcd":                                 children("etcd"),
		"test process (simulator and harness)": {os.Getpid()},
	}, start: map[string]time.Duration{}, t0: time.Now()}
	for k, ps := range c.pids {
		for _, p := range ps {
			c.start[k] += cpuClock(p)
		}
	}
	return c
}

func (c *cpuSplit) String() string {
	wall := time.Since(c.t0)
	var parts []string
	for _, k := range []string{"operator", "kube-apiserver", "etcd", "test process (simulator and harness)"} {
		var now time.Duration
		for _, p := range c.pids[k] {
			now += cpuClock(p)
		}
		used := now - c.start[k]
		parts = append(parts, fmt.Sprintf("%s %.1f s (%.0f %% of one core)", k, used.Seconds(), 100*used.Seconds()/wall.Seconds()))
	}
	return fmt.Sprintf("CPU over %s: %s", wall.Round(100*time.Millisecond), strings.Join(parts, ", "))
}
