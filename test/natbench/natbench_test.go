//go:build measure

// TestNATPacketCost: real TCP clients and iperf3 through the rig, by hand, as root:
//
//	BNERD_NATBENCH=1 go test -tags measure -count=1 -v -timeout 20m -run TestNATPacketCost ./test/natbench/

package natbench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	e2enetns "bnerd.net/vpn-operator/test/e2e/netns"
)

// role is set when the test binary runs as the client or server inside a namespace.
const roleEnv = "BNERD_NATBENCH_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "server":
		serve()
		return
	case "client":
		dial()
		return
	}
	os.Exit(m.Run())
}

type result struct {
	Conns    int64   `json:"conns"`
	Failures int64   `json:"failures"`
	Seconds  float64 `json:"seconds"`
}

func (r result) rate() float64 { return float64(r.Conns) / r.Seconds }

// connRate runs the client in its namespace against target for d with parallel
// connectors, each connecting and resetting in a loop.
func (r *rig) connRate(t *testing.T, target string, d time.Duration, parallel int) result {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", r.client, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=client", "BNERD_NATBENCH_TARGET="+target,
		"BNERD_NATBENCH_SECONDS="+strconv.FormatFloat(d.Seconds(), 'f', 1, 64), "BNERD_NATBENCH_PARALLEL="+strconv.Itoa(parallel))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	var res result
	if err := json.Unmarshal(bytes.TrimSpace(out), &res); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	return res
}

// throughput runs iperf3 for d through the exposure and returns Mbit/s.
func (r *rig) throughput(t *testing.T, vip string, d time.Duration) float64 {
	t.Helper()
	out := r.env.Must(r.client, "iperf3", "-J", "-c", vip, "-p", strconv.Itoa(iperfPort), "-t", strconv.Itoa(int(d.Seconds())))
	mbits, err := e2enetns.IperfMbits(out)
	if err != nil {
		t.Fatal(err)
	}
	return mbits
}

func TestNATPacketCost(t *testing.T) {
	if os.Getenv("BNERD_NATBENCH") != "1" {
		t.Skip("dataplane benchmark; run by hand as root with BNERD_NATBENCH=1")
	}
	if os.Geteuid() != 0 {
		t.Fatal("needs root (network namespaces, nftables, iptables)")
	}
	for _, bin := range []string{"ip", "nft", "iptables-restore", "conntrack", "iperf3"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("needs %s", bin)
		}
	}
	// Many short rounds, each measuring every variant back to back: the machine's load
	// drifts, and the ratio within a round is what is compared.
	seconds := 2 * time.Second
	if v := os.Getenv("BNERD_NATBENCH_SECONDS"); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			seconds = time.Duration(n) * time.Second
		}
	}
	rounds := 15
	if v := os.Getenv("BNERD_NATBENCH_ROUNDS"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			rounds = n
		}
	}
	throughputRounds := 3
	parallel := 16
	r := newRig(t)

	// The server accepts and closes connections, and runs iperf3.
	srv := exec.Command("ip", "netns", "exec", r.server, os.Args[0], "-test.run=^$")
	srv.Env = append(os.Environ(), roleEnv+"=server")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	iperf := exec.Command("ip", "netns", "exec", r.server, "iperf3", "-s", "-p", strconv.Itoa(iperfPort))
	if err := iperf.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = iperf.Process.Kill(); _ = iperf.Wait() })
	time.Sleep(500 * time.Millisecond)

	type figures struct {
		rates  []float64
		ratios []float64 // to nft maps/10 of the same round
		tput   []float64
		rules  int
		fails  int64
	}
	got := map[string]*figures{}
	for round := 0; round < rounds; round++ {
		for _, v := range variants {
			key := v.key()
			f := got[key]
			if f == nil {
				f = &figures{}
				got[key] = f
			}
			m := exposures(v.n)
			r.clear()
			v.apply(r, t, m)
			f.rules = r.ruleCount(t)
			last := worstCase(m)
			res := r.connRate(t, fmt.Sprintf("%s:%d", last.VirtualIP, last.Port), seconds, parallel)
			if res.Conns == 0 {
				t.Fatalf("%s: no connection got through (failures %d)", key, res.Failures)
			}
			f.rates = append(f.rates, res.rate())
			f.ratios = append(f.ratios, res.rate()/got["nft maps/10"].rates[round])
			f.fails += res.Failures
			tput := 0.0
			if round < throughputRounds {
				tput = r.throughput(t, last.VirtualIP, 5*time.Second)
				f.tput = append(f.tput, tput)
			}
			fmt.Printf("round %2d %-16s rules %5d: %8.0f new connections/s (%d failed), %6.0f Mbit/s\n",
				round+1, key, f.rules, res.rate(), res.Failures, tput)
		}
	}
	r.clear()
	med := median
	fmt.Printf("\n%d rounds, %s each, %d parallel connectors, connecting to the last exposure; throughput over %d rounds of 5 s:\n",
		rounds, seconds, parallel, throughputRounds)
	fmt.Printf("%-16s %8s %14s %20s %12s\n", "ruleset", "rules", "median conn/s", "median ratio in round", "Mbit/s")
	for _, v := range variants {
		key := v.key()
		f := got[key]
		fmt.Printf("%-16s %8d %14.0f %20.2f %12.0f\n", key, f.rules, med(f.rates), med(f.ratios), med(f.tput))
	}
	ratio10k := med(got["nft maps/10000"].ratios)
	var lead []float64
	for i := range got["nft maps/10000"].rates {
		lead = append(lead, got["nft maps/10000"].rates[i]/got["iptables/10000"].rates[i])
	}
	fmt.Printf("nft maps with 10,000 exposures: %.0f %% of the 10-exposure connection rate (median of the rounds' ratios); %.1fx the iptables rate at 10,000\n", 100*ratio10k, med(lead))
}

// serve accepts connections on the server port and closes them; it runs until killed.
func serve() {
	ln, err := net.Listen("tcp", fmt.Sprintf("%s:%d", serverAddr, serverPort))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			continue
		}
		_ = c.Close()
	}
}

// dial connects to the target in a loop from several goroutines for the given time,
// resetting each connection at once (no TIME_WAIT to run out of ports), and prints
// the counts as JSON.
func dial() {
	target := os.Getenv("BNERD_NATBENCH_TARGET")
	secs, _ := strconv.ParseFloat(os.Getenv("BNERD_NATBENCH_SECONDS"), 64)
	parallel, _ := strconv.Atoi(os.Getenv("BNERD_NATBENCH_PARALLEL"))
	var conns, fails atomic.Int64
	start := time.Now()
	end := start.Add(time.Duration(secs * float64(time.Second)))
	var wg sync.WaitGroup
	d := net.Dialer{Timeout: time.Second}
	for i := 0; i < parallel; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				c, err := d.Dial("tcp", target)
				if err != nil {
					fails.Add(1)
					continue
				}
				_ = c.(*net.TCPConn).SetLinger(0)
				_ = c.Close()
				conns.Add(1)
			}
		}()
	}
	wg.Wait()
	out, _ := json.Marshal(result{Conns: conns.Load(), Failures: fails.Load(), Seconds: time.Since(start).Seconds()})
	fmt.Println(string(out))
}
