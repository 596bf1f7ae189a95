package netns

import (
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/agent/nat"
)

// Throughput is a gateway's tunnel measured with iperf3 from the client site, in Mbit/s:
// through an exposure to the backend, the agent's table (DNAT, SNAT, guard, MSS clamp)
// in the path (Exposure), and to the gateway's own address once the table is gone
// (Bare). With the table present the client cannot reach the gateway's own address:
// its input chain drops new connections from the client's subnets to the pod.
type Throughput struct{ Bare, Exposure float64 }

// MeasureThroughput measures the two figures of Throughput in one world: the client is
// role c, the gateway g (its table programmed by the process "init-nat"), the backend b.
// The IPsec and WireGuard throughput benchmarks report the same figures through it, so
// both run side by side in one go test invocation. It reports them as the benchmark's
// metrics (Mbit/s-bare, Mbit/s-exposure) and fails the benchmark on a figure of zero (a
// path that carried nothing is no figure); nothing else asserts them.
func (e *Env) MeasureThroughput(b *testing.B, gatewayAddr, exposureVIP, backendAddr string) Throughput {
	b.Helper()
	if _, err := exec.LookPath("iperf3"); err != nil {
		b.Fatal("needs iperf3 (hack/install-deps.sh)")
	}
	e.Start("iperf-gw", e.NS("g"), nil, "iperf3", "-s", "-B", gatewayAddr, "-p", "5201")
	e.Start("iperf-backend", e.NS("b"), nil, "iperf3", "-s", "-B", backendAddr, "-p", "5202")
	time.Sleep(500 * time.Millisecond)
	run := func(what, dst, port string) float64 {
		b.Helper()
		out, err := e.Sh(e.NS("c"), "iperf3", "-c", dst, "-p", port, "-t", "8", "-J")
		if err != nil {
			b.Fatalf("iperf3 %s: %v\n%s", what, err, out)
		}
		mbits, err := IperfMbits(out)
		if err != nil {
			b.Fatal(err)
		}
		if mbits == 0 {
			b.Fatalf("iperf3 %s: 0 Mbit/s received\n%s", what, Tail(out, 30))
		}
		return mbits
	}
	var r Throughput
	b.ResetTimer()
	r.Exposure = run("through the exposure", exposureVIP, "5202")
	// Without the table: stop init-nat so it cannot repair, then delete the table.
	e.Stop("init-nat", syscall.SIGTERM)
	e.Must(e.NS("g"), "nft", "delete", "table", "ip", nat.DefaultTable)
	r.Bare = run("to the gateway without the table", gatewayAddr, "5201")
	b.StopTimer()
	b.ReportMetric(r.Bare, "Mbit/s-bare")
	b.ReportMetric(r.Exposure, "Mbit/s-exposure")
	return r
}

// String is the figures as the benchmarks log them, with the exposure's ratio to the
// bare tunnel.
func (r Throughput) String() string {
	return fmt.Sprintf("iperf3 Mbit/s: tunnel to gateway without table %.0f; tunnel+DNAT+SNAT+guard to backend %.0f (ratio to bare tunnel %.3f)",
		r.Bare, r.Exposure, r.Exposure/r.Bare)
}
