package dataplane

import "testing"

// BenchmarkTunnelThroughput measures libipsec tunnel throughput with iperf3, through an
// exposure (the agent's NAT and guard table in the path) and without the table, in one
// run (netns.MeasureThroughput). A harness, run once by hand (as
// root, packages from hack/install-deps.sh):
//
//	go test -run XXX -bench TunnelThroughput -benchtime 1x ./test/e2e/dataplane
//
// It reports Mbit/s; figures go to docs/benchmarks.md. Only a figure of zero fails it.
func BenchmarkTunnelThroughput(b *testing.B) {
	e, _, outer := newEnv(b)
	defer outer()
	b.Log(e.MeasureThroughput(b, "100.64.7.1", "100.64.7.12", backendAddr))
}
