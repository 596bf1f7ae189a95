package wireguard

import (
	"testing"

	"bnerd.net/vpn-operator/test/e2e/netns"
)

// TestWireGuardKernelVM runs TestWireGuardGateway with kernel WireGuard: it boots the
// kernel VM (hack/vm: Debian 12's stock kernel, which has the WireGuard module; software
// emulation where the machine has no usable KVM) and runs the test binary in it with the
// gateway's agent in `--mode kernel` and both client sites on kernel WireGuard links
// configured with wg(8). Everything but the status agent's API-server subtest (the VM has
// no API server; the host run covers it) runs as on the host.
func TestWireGuardKernelVM(t *testing.T) {
	netns.RunInVM(t, netns.VMRun{Package: "./test/e2e/wireguard", Run: "^TestWireGuardGateway$", Want: []string{"--- PASS: TestWireGuardGateway ", "runs kernel WireGuard"}, What: "kernel-WireGuard test"})
}
