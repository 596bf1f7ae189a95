package dataplane

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"bnerd.net/vpn-operator/test/e2e/netns"
)

// Environment of the kernel mode, set by TestDataplaneKernelVM for the test binary it
// runs inside the VM. The kernel mode, the wait factor and the prebuilt binaries are the
// shared harness's (netns.KernelEnv, netns.WaitScaleEnv, netns.BinDirEnv), as in the other
// e2e suites.
const (
	// apiPortEnv is the virtio-serial port the API server is reached through.
	apiPortEnv = "BNERD_DATAPLANE_API_PORT"
	// kubeconfigEnv is the admin kubeconfig for the forwarded API server.
	kubeconfigEnv = "BNERD_DATAPLANE_KUBECONFIG"
	// libreswanDiskEnv is the block device holding hack/vm/libreswan.sh's clients image
	// (the VM's second disk).
	libreswanDiskEnv = "BNERD_LIBRESWAN_DISK"
)

// kernelMode (netns.KernelEnv=1) selects kernel XFRM, --guard=xfrm and the pod's real
// containers.
func kernelMode() bool { return netns.Kernel() }

var figuresMu sync.Mutex

// figure records a measured value: in the test log, and in <out>/figures.txt when the
// test runs in the VM, from where the host side reports it.
func figure(logf func(string, ...any), format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	logf("FIGURE %s", line)
	out := os.Getenv(netns.OutEnv)
	if out == "" {
		return
	}
	figuresMu.Lock()
	defer figuresMu.Unlock()
	f, err := os.OpenFile(filepath.Join(out, "figures.txt"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}

func itoa(n int) string { return strconv.Itoa(n) }
