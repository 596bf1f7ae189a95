package dataplane

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/agent/nat"
	"bnerd.net/vpn-operator/test/e2e/netns"
)

// BenchmarkTunnelThroughput measures libipsec tunnel throughput with iperf3, with and
// without the agent's NAT and guard table, in one run. A harness, run once by hand (as
// root, packages from hack/install-deps.sh):
//
//	go test -run XXX -bench TunnelThroughput -benchtime 1x ./test/e2e/dataplane
//
// It reports Mbit/s; figures go to docs/benchmarks.md. Nothing asserts them.
func BenchmarkTunnelThroughput(b *testing.B) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		b.Fatal("needs iperf3 (hack/install-deps.sh)")
	}
	e, _, outer := newEnv(b)
	defer outer()
	e.Start("iperf-gw", e.NS("g"), nil, "iperf3", "-s", "-B", "100.64.7.1", "-p", "5201")
	e.Start("iperf-backend", e.NS("b"), nil, "iperf3", "-s", "-B", backendAddr, "-p", "5202")
	time.Sleep(500 * time.Millisecond)
	run := func(dst, port string) float64 {
		out, err := e.Sh(e.NS("c"), "iperf3", "-c", dst, "-p", port, "-t", "8", "-J")
		if err != nil {
			b.Fatalf("iperf3: %v\n%s", err, out)
		}
		mbits, err := netns.IperfMbits(out)
		if err != nil {
			b.Fatal(err)
		}
		return mbits
	}
	b.ResetTimer()
	withRulesLocal := run("100.64.7.1", "5201")
	withRulesDNAT := run("100.64.7.12", "5202")
	// Without the table: stop init-nat so it cannot repair, then delete the table.
	e.Stop("init-nat", syscall.SIGTERM)
	e.Must(e.NS("g"), "nft", "delete", "table", "ip", nat.DefaultTable)
	withoutLocal := run("100.64.7.1", "5201")
	b.StopTimer()
	b.ReportMetric(withoutLocal, "Mbit/s-bare")
	b.ReportMetric(withRulesLocal, "Mbit/s-table")
	b.ReportMetric(withRulesDNAT, "Mbit/s-exposure")
	b.Logf("iperf3 Mbit/s: tunnel to gateway without table %.0f, with table %.0f (ratio %.3f); tunnel+DNAT+SNAT+guard to backend %.0f (ratio to bare tunnel %.3f)",
		withoutLocal, withRulesLocal, withRulesLocal/withoutLocal, withRulesDNAT, withRulesDNAT/withoutLocal)
}
