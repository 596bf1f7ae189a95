package wireguard

import (
	"syscall"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/agent/nat"
	"bnerd.net/vpn-operator/test/e2e/netns"
)

// BenchmarkWireGuardThroughput measures the WireGuard gateway's throughput with iperf3
// (the agent's wireguard role in auto mode: wireguard-go where the kernel has no
// WireGuard), with and without the agent's NAT and guard table: the same three figures as
// BenchmarkTunnelThroughput of the IPsec dataplane, so both run side by side in one go
// test invocation (as root, packages from hack/install-deps.sh):
//
//	go test -p 1 -run XXX -bench 'TunnelThroughput|WireGuardThroughput' -benchtime 1x ./test/e2e/dataplane ./test/e2e/wireguard
//
// It reports Mbit/s; figures go to docs/benchmarks.md. Nothing asserts them.
func BenchmarkWireGuardThroughput(b *testing.B) {
	w, outer := newWorld(b)
	defer func() {
		for _, stop := range outer {
			stop()
		}
	}()
	impl := w.state().Implementation
	w.Start("iperf-gw", w.NS("g"), nil, "iperf3", "-s", "-B", "100.64.9.1", "-p", "5201")
	w.Start("iperf-backend", w.NS("b"), nil, "iperf3", "-s", "-B", backendAddr, "-p", "5202")
	time.Sleep(500 * time.Millisecond)
	run := func(dst, port string) float64 {
		out, err := w.Sh(w.NS("c"), "iperf3", "-c", dst, "-p", port, "-t", "8", "-J")
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
	withRulesLocal := run("100.64.9.1", "5201")
	withRulesDNAT := run("100.64.9.12", "5202")
	// Without the table: stop init-nat so it cannot repair, then delete the table.
	w.Stop("init-nat", syscall.SIGTERM)
	w.Must(w.NS("g"), "nft", "delete", "table", "ip", nat.DefaultTable)
	withoutLocal := run("100.64.9.1", "5201")
	b.StopTimer()
	b.ReportMetric(withoutLocal, "Mbit/s-bare")
	b.ReportMetric(withRulesLocal, "Mbit/s-table")
	b.ReportMetric(withRulesDNAT, "Mbit/s-exposure")
	b.Logf("%s WireGuard, iperf3 Mbit/s: tunnel to gateway without table %.0f, with table %.0f (ratio %.3f); tunnel+DNAT+SNAT+guard to backend %.0f (ratio to bare tunnel %.3f)",
		impl, withoutLocal, withRulesLocal, withRulesLocal/withoutLocal, withRulesDNAT, withRulesDNAT/withoutLocal)
}
