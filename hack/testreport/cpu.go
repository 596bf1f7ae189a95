package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The machine's CPU time while the tests ran, from /proc/stat: whether a whole run was
// bound by its CPUs (idle near zero) and, if so, its floor on this machine (the busy
// seconds over the CPUs), and where in the run the CPUs stood idle (tiers that could
// have run side by side). It is the whole machine's, not only the tests'.

// userHZ is /proc/stat's clock tick: USER_HZ, 100 on every architecture Go builds the
// operator for.
const userHZ = 100

// cpuTimes is /proc/stat's first line summed into what a run's reader needs, in ticks.
type cpuTimes struct {
	// busy is user, nice, system, irq and softirq (guest time is inside user).
	busy uint64
	// idle is idle and iowait.
	idle uint64
	// steal is time the hypervisor gave to others while this machine wanted it.
	steal uint64
}

// parseProcStat reads /proc/stat's aggregate line and counts the cpuN lines.
func parseProcStat(b []byte) (cpuTimes, int, error) {
	var t cpuTimes
	cpus, found := 0, false
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		if f[0] != "cpu" {
			cpus++
			continue
		}
		if len(f) < 9 {
			return t, 0, fmt.Errorf("/proc/stat: %d fields on the cpu line, want at least 8", len(f)-1)
		}
		var v [8]uint64
		for i := range v {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return t, 0, fmt.Errorf("/proc/stat: field %d: %w", i+1, err)
			}
			v[i] = n
		}
		// user nice system idle iowait irq softirq steal
		t = cpuTimes{busy: v[0] + v[1] + v[2] + v[5] + v[6], idle: v[3] + v[4], steal: v[7]}
		found = true
	}
	if !found || cpus == 0 {
		return t, 0, fmt.Errorf("/proc/stat: no cpu lines")
	}
	return t, cpus, nil
}

// cpuSample is the machine's CPU times at one moment.
type cpuSample struct {
	at time.Time
	cpuTimes
}

// cpuUse is a run's CPU summary: the totals and the busy share of each slice.
type cpuUse struct {
	cpus                    int
	wall, busy, idle, steal float64 // seconds
	slice                   time.Duration
	busyShare               []float64 // 0..1, one per slice (the last may be shorter)
}

// summarize turns samples (in time order, the first taken at the start) into a cpuUse,
// the busy share taken per slice of wall time.
func summarize(samples []cpuSample, cpus int, slice time.Duration) cpuUse {
	u := cpuUse{cpus: cpus, slice: slice}
	if len(samples) < 2 {
		return u
	}
	first, last := samples[0], samples[len(samples)-1]
	u.wall = last.at.Sub(first.at).Seconds()
	u.busy = float64(last.busy-first.busy) / userHZ
	u.idle = float64(last.idle-first.idle) / userHZ
	u.steal = float64(last.steal-first.steal) / userHZ
	from := first
	for i, s := range samples[1:] {
		last := i == len(samples)-2
		if s.at.Sub(from.at) < slice && !last {
			continue
		}
		all := (s.busy - from.busy) + (s.idle - from.idle) + (s.steal - from.steal)
		if all > 0 {
			u.busyShare = append(u.busyShare, float64(s.busy-from.busy)/float64(all))
		}
		from = s
	}
	return u
}

// String is the report's line: the totals, the floor they imply, and each slice's busy
// share.
func (u cpuUse) String() string {
	if u.cpus == 0 || u.wall == 0 {
		return "the machine's CPU use: not measured (no /proc/stat)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the machine's %d CPUs while the tests ran (%.0f s): busy %.0f s, idle %.0f s, stolen %.0f s; busy/CPUs %.0f s\n",
		u.cpus, u.wall, u.busy, u.idle, u.steal, u.busy/float64(u.cpus))
	fmt.Fprintf(&b, "  busy share of each %s:", u.slice)
	for _, s := range u.busyShare {
		fmt.Fprintf(&b, " %.0f%%", 100*s)
	}
	b.WriteString("\n")
	return b.String()
}

// cpuSampler reads /proc/stat every interval until stopped.
type cpuSampler struct {
	mu      sync.Mutex
	samples []cpuSample
	cpus    int
	stop    chan struct{}
	done    chan struct{}
}

func startCPUSampler(every time.Duration) *cpuSampler {
	s := &cpuSampler{stop: make(chan struct{}), done: make(chan struct{})}
	s.take()
	go func() {
		defer close(s.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				s.take()
			case <-s.stop:
				return
			}
		}
	}()
	return s
}

func (s *cpuSampler) take() {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return
	}
	t, cpus, err := parseProcStat(b)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, cpuSample{at: time.Now(), cpuTimes: t})
	s.cpus = cpus
}

// end takes the last sample and summarizes.
func (s *cpuSampler) end(slice time.Duration) cpuUse {
	close(s.stop)
	<-s.done
	s.take()
	s.mu.Lock()
	defer s.mu.Unlock()
	return summarize(s.samples, s.cpus, slice)
}
