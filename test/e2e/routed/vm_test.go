package routed

import (
	"testing"

	"bnerd.net/vpn-operator/test/e2e/netns"
)

// TestRoutedModeKernelVM runs TestRoutedMode with the production IPsec backend: it boots the
// kernel VM (hack/vm: Debian 12's stock kernel with ESP; software emulation where the
// machine has no usable KVM) and runs the test binary in it with charon's kernel (XFRM)
// backend at the gateway and both sites, init-nat's xfrm guard, and internal sources that
// do not hold the gateway's address (which libipsec cannot do, see TestRoutedMode).
func TestRoutedModeKernelVM(t *testing.T) {
	netns.RunInVM(t, netns.VMRun{Package: "./test/e2e/routed", Run: "^TestRoutedMode$", Want: []string{"--- PASS: TestRoutedMode "}, What: "kernel routed-mode test"})
}
