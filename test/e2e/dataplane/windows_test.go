package dataplane

import (
	"fmt"
	"regexp"
	"sort"

	"strings"
	"syscall"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/agent/nat"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/test/e2e/netns"
)

// window is one event the tunnel has to survive without a plaintext packet between the
// sites, while pings run through it in both directions.
type window struct {
	name string
	act  func(t *testing.T)
	// guardFires: traffic would leave unencrypted in this window without the guard, so
	// its drop counter must move (the guard is seen to work, not assumed to).
	guardFires bool
}

func (e *env) windows() []window {
	sw := func(args ...string) func(t *testing.T) {
		return func(t *testing.T) {
			if out, err := e.Swanctl("g", args...); err != nil {
				t.Errorf("swanctl %v: %v\n%s", args, err, out)
			}
		}
	}
	ws := []window{
		{name: "child SA deleted", act: sw("--terminate", "--child", "t1")},
		{name: "child SA rekeyed", act: sw("--rekey", "--child", "t1")},
		{name: "IKE SA rekeyed", act: sw("--rekey", "--ike", "t1")},
		{name: "IKE SA deleted", act: sw("--terminate", "--ike", "t1")},
		{name: "charon SIGKILLed and restarted", act: e.killCharon, guardFires: true},
		{name: "agents restarted", act: func(*testing.T) {
			e.stopAgents()
			e.sleep(time.Second)
			e.startAgents()
		}},
	}
	if !e.kernel {
		return ws
	}
	// The pod's containers restart independently (crash, OOM kill, liveness): in any
	// order, the tunnel comes back and nothing leaves in the clear meanwhile.
	restart := func(stop, start []string) func(*testing.T) {
		return func(*testing.T) {
			for _, c := range stop {
				e.Stop(c, syscall.SIGTERM)
			}
			e.sleep(2 * time.Second)
			for _, c := range start {
				e.startContainer(c)
			}
		}
	}
	pod := []string{render.ContainerInitNAT, render.ContainerStrongswan, render.ContainerStatus, render.ContainerExporter}
	rev := []string{render.ContainerExporter, render.ContainerStatus, render.ContainerStrongswan, render.ContainerInitNAT}
	ws = append(ws,
		window{name: "containers restarted one at a time in pod order", act: func(t *testing.T) {
			for _, c := range pod {
				restart([]string{c}, []string{c})(t)
				if c == render.ContainerStrongswan {
					e.Eventually("SA back after the strongswan container restarted", func() bool { return e.ikeID() != "" })
				}
			}
		}},
		window{name: "all containers stopped, started in reverse order", act: restart(pod, rev)},
		window{name: "charon and status agent restarted while init-nat is down, init-nat last", act: func(t *testing.T) {
			restart([]string{render.ContainerInitNAT, render.ContainerStrongswan, render.ContainerStatus},
				[]string{render.ContainerStrongswan, render.ContainerStatus})(t)
			e.Eventually("SA back without init-nat", func() bool { return e.ikeID() != "" && e.probe() })
			e.startContainer(render.ContainerInitNAT)
		}},
	)
	return ws
}

var reSlug = regexp.MustCompile(`[^a-z0-9]+`)

// window runs w with a capture between the sites and reads the guard's drop counter (in
// nftables and through the exporter) before and after it, so each count belongs to that
// window alone.
func (e *env) window(t *testing.T, w window) {
	e.run(t, w.name, func(t *testing.T) {
		slug := strings.Trim(reSlug.ReplaceAllString(strings.ToLower(w.name), "-"), "-")
		nft0, m0 := e.guardDrops(), e.metric(guardMetric)
		stop := e.Capture("w-"+slug, "r", "wan0", 256)
		start := time.Now()
		w.act(t)
		e.Eventually("traffic through the tunnel again after: "+w.name, func() bool { return e.ikeID() != "" && e.probe() })
		recovered := time.Since(start)
		e.sleep(time.Second)
		wr := readWire(t, stop())
		nft1 := e.guardDrops()
		drops := nft1 - nft0
		if nft1 < nft0 {
			drops = nft1 // init-nat rewrote its table (restart): counting restarted at zero
		}
		metric := "n/a (init-nat restarted)"
		if w.guardFires {
			var m1 float64
			e.Eventually("the guard's drops reach the exporter", func() bool { m1 = e.metric(guardMetric); return m1 > m0 })
			metric = fmt.Sprintf("+%.0f", m1-m0)
		} else if m1 := e.metric(guardMetric); m1 >= m0 {
			metric = fmt.Sprintf("+%.0f", m1-m0)
		}
		figure(t.Logf, "%s window %q: %d packets between the sites (%d ESP-in-UDP), %d other, %d with inner addresses; guard dropped %d (exporter %s); traffic again after %.1fs",
			e.dataplane(), w.name, len(wr.all), len(wr.esp), len(wr.other), len(wr.inner), drops, metric, recovered.Seconds())
		if len(wr.inner) != 0 || len(wr.other) != 0 {
			t.Errorf("plaintext between the sites:\n%s\n%s", strings.Join(netns.First(wr.inner, 10), "\n"), strings.Join(netns.First(wr.other, 10), "\n"))
		}
		if w.guardFires && drops == 0 {
			t.Errorf("the guard dropped nothing in this window; was traffic flowing?\n%s", e.Must(e.NS("g"), "nft", "list", "table", "ip", nat.DefaultTable))
		}
	})
}

// killCharon SIGKILLs the gateway's charon, leaves it dead for a while, restarts it and
// measures the time from the restart to traffic through the tunnel.
func (e *env) killCharon(t *testing.T) {
	e.Stop(e.gwCharon(), syscall.SIGKILL)
	// Host mode: ipsec0 and table 220 vanish with charon; the guard alone holds. Kernel
	// mode: the SAs and policies stay in the kernel (outbound keeps using them, inbound
	// ESP meets a closed port), until the restart clears them.
	e.sleep(3 * time.Second)
	if e.kernel {
		states, policies := e.xfrm()
		figure(t.Logf, "kernel: after charon's SIGKILL, %d SAs and %d policies remain in the kernel", len(states), policies)
		if len(states) == 0 {
			t.Errorf("no orphaned SA after SIGKILL: the kernel behaves differently than documented")
		}
	}
	restart := time.Now()
	e.startCharon("g")
	e.Eventually("SA and traffic back after charon was killed", func() bool { return e.ikeID() != "" && e.probe() })
	figure(t.Logf, "%s: charon restart to traffic through the tunnel: %.1fs", e.dataplane(), time.Since(restart).Seconds())
	if !e.kernel {
		return
	}
	if !strings.Contains(e.Log(render.ContainerStrongswan), "left in the kernel by a previous charon") {
		t.Errorf("the charon container did not report clearing the orphaned state:\n%s", e.Log(render.ContainerStrongswan))
	}
	// No stale or duplicate SA after the restart: the kernel holds exactly the SAs charon
	// reports for its installed child SA, one per direction.
	var kernel, charon []string
	e.Eventually("kernel SAs equal charon's", func() bool {
		kernel, _ = e.xfrm()
		charon = e.charonSPIs()
		return len(charon) == 2 && strings.Join(kernel, ",") == strings.Join(charon, ",")
	})
	figure(t.Logf, "kernel: after the restart %d SAs in the kernel, exactly charon's (SPIs %s)", len(kernel), strings.Join(kernel, " "))
}

var (
	reXfrmSPI   = regexp.MustCompile(`proto esp spi 0x([0-9a-f]+)`)
	reXfrmPol   = regexp.MustCompile(`(?m)^src \S+ dst \S+`)
	reCharonSPI = regexp.MustCompile(`(?m)^\s+(?:in|out)\s+([0-9a-f]{8})`)
)

// xfrm returns the SPIs of the gateway namespace's XFRM states (sorted) and the number of
// its policies.
func (e *env) xfrm() ([]string, int) {
	st, _ := e.Sh(e.NS("g"), "ip", "xfrm", "state")
	pol, _ := e.Sh(e.NS("g"), "ip", "xfrm", "policy")
	var spis []string
	for _, m := range reXfrmSPI.FindAllStringSubmatch(st, -1) {
		spis = append(spis, m[1])
	}
	sort.Strings(spis)
	return spis, len(reXfrmPol.FindAllString(pol, -1))
}

// charonSPIs returns the SPIs of the gateway charon's installed child SAs (sorted).
func (e *env) charonSPIs() []string {
	out, _ := e.Swanctl("g", "--list-sas")
	var spis []string
	for _, m := range reCharonSPI.FindAllStringSubmatch(out, -1) {
		spis = append(spis, m[1])
	}
	sort.Strings(spis)
	return spis
}

var reGuardRule = regexp.MustCompile(`comment "fail-closed guard" # handle (\d+)`)

// removeGuard deletes the guard's rules (and nothing else) from the gateway's table.
func (e *env) removeGuard(t *testing.T) int {
	out := e.Must(e.NS("g"), "nft", "-a", "list", "table", "ip", nat.DefaultTable)
	chain, n := "", 0
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == "chain" {
			chain = f[1]
		}
		if m := reGuardRule.FindStringSubmatch(l); m != nil {
			e.Must(e.NS("g"), "nft", "delete", "rule", "ip", nat.DefaultTable, chain, "handle", m[1])
			n++
		}
	}
	return n
}

// negativeControl shows that the capture between the sites can see a leak at all: with
// init-nat stopped (it would repair), the guard's rules deleted and the tunnel gone
// (charon SIGKILLed; in kernel mode also its orphaned policies and SAs flushed), the
// fabric's pings to the reverse exposure must show up in the clear. Then the guard and
// the tunnel are restored, and a last capture is clean again.
func (e *env) negativeControl(t *testing.T) {
	e.Start("ping-fabric-nc", e.NS("f"), nil, "ping", "-n", "-i", "0.2", "100.64.7.201")
	defer e.Stop("ping-fabric-nc", syscall.SIGINT)
	e.Eventually("fabric pings cross the tunnel", func() bool { return strings.Contains(e.Log("ping-fabric-nc"), "bytes from 100.64.7.201") })

	stop := e.Capture("negative-control", "r", "wan0", 256)
	e.Stop("init-nat", syscall.SIGTERM)
	removed := e.removeGuard(t)
	if removed == 0 {
		t.Fatal("no guard rule found to remove")
	}
	e.Stop(e.gwCharon(), syscall.SIGKILL)
	if e.kernel {
		e.Must(e.NS("g"), "ip", "xfrm", "policy", "flush")
		e.Must(e.NS("g"), "ip", "xfrm", "state", "flush")
	}
	e.sleep(3 * time.Second)
	wr := readWire(t, stop())
	figure(t.Logf, "%s negative control (%d guard rules removed, tunnel gone): %d packets with inner addresses between the sites, e.g. %s",
		e.dataplane(), removed, len(wr.inner), strings.Join(netns.First(wr.inner, 1), ""))
	if len(wr.inner) == 0 {
		t.Errorf("no plaintext seen without guard and tunnel: the capture could not have seen a leak, so its zeros prove nothing")
	}

	// Restore: init-nat repairs its table (the guard is back before charon is), then
	// charon and the tunnel.
	e.startAgent(render.ContainerInitNAT)
	e.Eventually("guard rules restored", func() bool {
		out, _ := e.Sh(e.NS("g"), "nft", "list", "table", "ip", nat.DefaultTable)
		return strings.Count(out, `comment "fail-closed guard"`) == removed
	})
	e.startCharon("g")
	e.Eventually("tunnel back", func() bool { return e.ikeID() != "" && e.probe() })
	stop = e.Capture("restored", "r", "wan0", 256)
	e.sleep(3 * time.Second)
	wr = readWire(t, stop())
	if len(wr.inner) != 0 || len(wr.esp) == 0 {
		t.Errorf("after the restore: %d packets with inner addresses, %d ESP", len(wr.inner), len(wr.esp))
	}
}
