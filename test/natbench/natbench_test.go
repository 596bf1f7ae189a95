//go:build measure

// Package natbench measures what the gateway's NAT costs per packet as exposures grow:
// the new-connection rate and the throughput of forwarded TCP through a gateway network
// namespace holding the agent's nftables table (fixed rules, one map element per
// exposure port) with 10 and with 10,000 exposures, against the original design's
// iptables rules (one DNAT rule per exposure port), side by side in one run.
//
// The host kernel has no ESP, so the packets are plain forwarded traffic entering the
// gateway namespace on the interface the table treats as the tunnel: the NAT lookup per
// new connection, which is what the number of exposures can change, is the same as
// behind a real tunnel; the encryption is not part of it.
//
// Run by hand, as root:
//
//	BNERD_NATBENCH=1 go test -tags measure -count=1 -v -timeout 20m -run TestNATPacketCost ./test/natbench/
package natbench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"bnerd.net/vpn-operator/internal/agent/nat"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	e2enetns "bnerd.net/vpn-operator/test/e2e/netns"
)

// Names and addresses; everything lives in the benchmark's own namespaces.
const (
	nsClient = "bn-nbc"
	nsGW     = "bn-nbg"
	nsServer = "bn-nbs"
	// tunIf is the gateway's interface towards the client, standing in for the tunnel.
	tunIf = "bnnb-tun"

	clientAddr = "10.98.0.2"
	peerSubnet = "10.98.0.0/24"
	gwSNAT     = "10.98.1.1"
	serverAddr = "10.98.1.2"
	serverPort = 8443
	iperfPort  = 5201
	// The gateway's service CIDR: virtual IPs .10-.199, as the operator allocates them.
	serviceNet = "100.127.5."
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

// exposures builds n exposure port mappings the way one gateway holds them: virtual IPs
// .10-.199 of its /24, each with as many TCP ports as n needs, all delivered to the
// server. The last mapping is the iptables chain's last rule.
func exposures(n int) *gatewayconfig.NAT {
	m := &gatewayconfig.NAT{
		PeerSubnets:        []string{peerSubnet},
		ForwardSNATAddress: gwSNAT,
		ReverseSNATAddress: serviceNet + "1",
		MSSClamp:           gatewayconfig.MSSClamp{Enabled: true},
	}
	perVIP := (n + 189) / 190
	for i := 0; i < n; i++ {
		vip := fmt.Sprintf("%s%d", serviceNet, 10+i/perVIP)
		port := int32(10000 + i%perVIP)
		m.ExposurePorts = append(m.ExposurePorts, gatewayconfig.PortMapping{VirtualIP: vip, Protocol: "tcp", Port: port,
			Target: serverAddr, TargetPort: serverPort, Owner: fmt.Sprintf("e%d", i)})
	}
	// iperf3's control and data connections, as the last exposure.
	last := m.ExposurePorts[len(m.ExposurePorts)-1]
	m.ExposurePorts = append(m.ExposurePorts, gatewayconfig.PortMapping{VirtualIP: last.VirtualIP, Protocol: "tcp", Port: iperfPort,
		Target: serverAddr, TargetPort: iperfPort, Owner: "iperf"})
	return m
}

// iptablesScript is the original design: one DNAT rule per exposure port in the nat
// table's PREROUTING chain, SNAT, the MSS clamp and the guard.
func iptablesScript(m *gatewayconfig.NAT) string {
	var w strings.Builder
	w.WriteString("*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n")
	for _, pm := range m.ExposurePorts {
		fmt.Fprintf(&w, "-A PREROUTING -i %s -s %s -d %s/32 -p %s --dport %d -j DNAT --to-destination %s:%d\n",
			tunIf, peerSubnet, pm.VirtualIP, pm.Protocol, pm.Port, pm.Target, pm.TargetPort)
	}
	fmt.Fprintf(&w, "-A POSTROUTING -m conntrack --ctstate DNAT -d %s -j SNAT --to-source %s\n", peerSubnet, m.ReverseSNATAddress)
	fmt.Fprintf(&w, "-A POSTROUTING -m conntrack --ctstate DNAT -s %s -j SNAT --to-source %s\n", peerSubnet, m.ForwardSNATAddress)
	w.WriteString("COMMIT\n*mangle\n:FORWARD ACCEPT [0:0]\n-A FORWARD -p tcp --tcp-flags SYN,RST SYN -j TCPMSS --clamp-mss-to-pmtu\nCOMMIT\n")
	fmt.Fprintf(&w, "*filter\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A FORWARD -d %s ! -o %s -j DROP\n-A OUTPUT -d %s ! -o %s -j DROP\n",
		peerSubnet, tunIf, peerSubnet, tunIf)
	fmt.Fprintf(&w, "-A FORWARD -s %s -m conntrack ! --ctstate DNAT -j DROP\nCOMMIT\n", peerSubnet)
	return w.String()
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func inNS(ns string, args ...string) []string { return append([]string{"netns", "exec", ns}, args...) }

// topology builds client -- gateway -- server namespaces and removes them at the end.
func topology(t *testing.T) {
	t.Helper()
	cleanup := func() {
		for _, ns := range []string{nsClient, nsGW, nsServer} {
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
	}
	cleanup()
	t.Cleanup(cleanup)
	for _, ns := range []string{nsClient, nsGW, nsServer} {
		run(t, "ip", "netns", "add", ns)
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	run(t, "ip", "link", "add", "name", "bnnb-c0", "netns", nsClient, "type", "veth", "peer", "name", tunIf, "netns", nsGW)
	run(t, "ip", "link", "add", "name", "bnnb-s0", "netns", nsServer, "type", "veth", "peer", "name", "bnnb-g1", "netns", nsGW)
	for _, c := range [][]string{
		{nsClient, "addr", "add", clientAddr + "/24", "dev", "bnnb-c0"}, {nsClient, "link", "set", "bnnb-c0", "up"},
		{nsClient, "route", "add", "default", "via", "10.98.0.1"},
		{nsGW, "addr", "add", "10.98.0.1/24", "dev", tunIf}, {nsGW, "link", "set", tunIf, "up"},
		{nsGW, "addr", "add", gwSNAT + "/24", "dev", "bnnb-g1"}, {nsGW, "link", "set", "bnnb-g1", "up"},
		{nsServer, "addr", "add", serverAddr + "/24", "dev", "bnnb-s0"}, {nsServer, "link", "set", "bnnb-s0", "up"},
	} {
		run(t, "ip", append([]string{"-n", c[0]}, c[1:]...)...)
	}
	// Forwarding on; closed connections leave conntrack at once, so the table does not
	// fill during a run (each run starts from a flushed table).
	run(t, "ip", inNS(nsGW, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0",
		"net.netfilter.nf_conntrack_tcp_timeout_close=1", "net.netfilter.nf_conntrack_tcp_timeout_time_wait=1")...)
}

// applyNFT installs the agent's table for m in the gateway namespace, through the nat
// package's public API on a thread that lives in that namespace.
func applyNFT(t *testing.T, m *gatewayconfig.NAT) {
	t.Helper()
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		h, e := netns.GetFromName(nsGW)
		if e != nil {
			err = e
			return
		}
		defer h.Close()
		if err = netns.Set(h); err != nil {
			return
		}
		p, e := nat.New(nat.Options{TunnelInterface: tunIf})
		if e != nil {
			err = e
			return
		}
		_, err = p.Sync(context.Background(), m)
	}()
	<-done
	if err != nil {
		t.Fatalf("nft table: %v", err)
	}
}

// clear removes both rulesets from the gateway namespace and flushes conntrack.
func clear(t *testing.T) {
	t.Helper()
	_ = exec.Command("ip", inNS(nsGW, "nft", "delete", "table", "ip", nat.DefaultTable)...).Run()
	for _, tbl := range []string{"nat", "mangle", "filter"} {
		_ = exec.Command("ip", inNS(nsGW, "nft", "delete", "table", "ip", tbl)...).Run()
	}
	_ = exec.Command("ip", inNS(nsGW, "conntrack", "-F")...).Run()
}

func applyIPTables(t *testing.T, m *gatewayconfig.NAT) {
	t.Helper()
	cmd := exec.Command("ip", inNS(nsGW, "iptables-restore")...)
	cmd.Stdin = strings.NewReader(iptablesScript(m))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("iptables-restore: %v\n%s", err, out)
	}
}

// ruleCount is how many rules the gateway namespace's nftables holds (iptables-nft
// rules included), as a check that the ruleset under test is the intended one.
func ruleCount(t *testing.T) int {
	out := run(t, "ip", inNS(nsGW, "nft", "-a", "list", "ruleset")...)
	return strings.Count(out, "# handle") - strings.Count(out, "table ") - strings.Count(out, "chain ")
}

type result struct {
	Conns    int64   `json:"conns"`
	Failures int64   `json:"failures"`
	Seconds  float64 `json:"seconds"`
}

func (r result) rate() float64 { return float64(r.Conns) / r.Seconds }

// connRate runs the client in its namespace against target for d with parallel
// connectors, each connecting and resetting in a loop.
func connRate(t *testing.T, target string, d time.Duration, parallel int) result {
	t.Helper()
	cmd := exec.Command("ip", inNS(nsClient, os.Args[0], "-test.run=^$")...)
	cmd.Env = append(os.Environ(), roleEnv+"=client", "BNERD_NATBENCH_TARGET="+target,
		"BNERD_NATBENCH_SECONDS="+strconv.FormatFloat(d.Seconds(), 'f', 1, 64), "BNERD_NATBENCH_PARALLEL="+strconv.Itoa(parallel))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	var r result
	if err := json.Unmarshal(bytes.TrimSpace(out), &r); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	return r
}

// throughput runs iperf3 for d through the exposure and returns Mbit/s.
func throughput(t *testing.T, vip string, d time.Duration) float64 {
	t.Helper()
	out := run(t, "ip", inNS(nsClient, "iperf3", "-J", "-c", vip, "-p", strconv.Itoa(iperfPort), "-t", strconv.Itoa(int(d.Seconds())))...)
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
	topology(t)

	// The server accepts and closes connections, and runs iperf3.
	srv := exec.Command("ip", inNS(nsServer, os.Args[0], "-test.run=^$")...)
	srv.Env = append(os.Environ(), roleEnv+"=server")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	iperf := exec.Command("ip", inNS(nsServer, "iperf3", "-s", "-p", strconv.Itoa(iperfPort))...)
	if err := iperf.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = iperf.Process.Kill(); _ = iperf.Wait() })
	time.Sleep(500 * time.Millisecond)

	type variant struct {
		name  string
		n     int
		apply func(*testing.T, *gatewayconfig.NAT)
	}
	variants := []variant{
		{"nft maps", 10, applyNFT}, {"iptables", 10, applyIPTables},
		{"nft maps", 10000, applyNFT}, {"iptables", 10000, applyIPTables},
	}
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
			key := fmt.Sprintf("%s/%d", v.name, v.n)
			f := got[key]
			if f == nil {
				f = &figures{}
				got[key] = f
			}
			m := exposures(v.n)
			clear(t)
			v.apply(t, m)
			f.rules = ruleCount(t)
			// The worst case for a rule list: the exposure matched by the last rule.
			last := m.ExposurePorts[len(m.ExposurePorts)-2]
			r := connRate(t, fmt.Sprintf("%s:%d", last.VirtualIP, last.Port), seconds, parallel)
			if r.Conns == 0 {
				t.Fatalf("%s: no connection got through (failures %d)", key, r.Failures)
			}
			f.rates = append(f.rates, r.rate())
			f.ratios = append(f.ratios, r.rate()/got["nft maps/10"].rates[round])
			f.fails += r.Failures
			tput := 0.0
			if round < throughputRounds {
				tput = throughput(t, last.VirtualIP, 5*time.Second)
				f.tput = append(f.tput, tput)
			}
			fmt.Printf("round %2d %-16s rules %5d: %8.0f new connections/s (%d failed), %6.0f Mbit/s\n",
				round+1, key, f.rules, r.rate(), r.Failures, tput)
		}
	}
	clear(t)
	med := func(x []float64) float64 {
		s := append([]float64(nil), x...)
		sort.Float64s(s)
		return s[len(s)/2]
	}
	fmt.Printf("\n%d rounds, %s each, %d parallel connectors, connecting to the last exposure; throughput over %d rounds of 5 s:\n",
		rounds, seconds, parallel, throughputRounds)
	fmt.Printf("%-16s %8s %14s %20s %12s\n", "ruleset", "rules", "median conn/s", "median ratio in round", "Mbit/s")
	for _, v := range variants {
		key := fmt.Sprintf("%s/%d", v.name, v.n)
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
