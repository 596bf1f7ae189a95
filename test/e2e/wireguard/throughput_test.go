package wireguard

import "testing"

// BenchmarkWireGuardThroughput measures the WireGuard gateway's throughput with iperf3
// (the agent's wireguard role in auto mode: wireguard-go where the kernel has no
// WireGuard), through an exposure and without the agent's NAT and guard table: the same
// two figures as BenchmarkTunnelThroughput of the IPsec dataplane, so both run side by
// side in one go test invocation (as root, packages from hack/install-deps.sh):
//
//	go test -p 1 -run XXX -bench 'TunnelThroughput|WireGuardThroughput' -benchtime 1x ./test/e2e/dataplane ./test/e2e/wireguard
//
// It reports Mbit/s; figures go to docs/benchmarks.md. Only a figure of zero fails it.
func BenchmarkWireGuardThroughput(b *testing.B) {
	w, outer := newWorld(b)
	defer func() {
		for _, stop := range outer {
			stop()
		}
	}()
	impl := w.state().Implementation
	b.Logf("%s WireGuard, %s", impl, w.MeasureThroughput(b, "100.64.9.1", "100.64.9.12", backendAddr))
}
