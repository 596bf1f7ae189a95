package wireguard

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/tun"
)

// Mode selects the WireGuard implementation.
type Mode string

const (
	// ModeAuto uses the kernel's WireGuard and falls back to wireguard-go in this
	// process when the kernel has none.
	ModeAuto Mode = "auto"
	// ModeKernel insists on the kernel module.
	ModeKernel Mode = "kernel"
	// ModeUserspace always runs wireguard-go.
	ModeUserspace Mode = "userspace"
)

// Implementations reported in the state file.
const (
	ImplKernel    = "kernel"
	ImplUserspace = "userspace"
)

// userspace is a wireguard-go device run by this process, with its UAPI socket (where
// wgctrl configures it, as it would the kernel's over netlink).
type userspace struct {
	dev  *device.Device
	uapi net.Listener
}

func (u *userspace) close() {
	_ = u.uapi.Close()
	u.dev.Close()
}

// closed reports whether wireguard-go shut the device down (it does when its TUN device
// is deleted under it).
func (u *userspace) closed() bool {
	select {
	case <-u.dev.Wait():
		return true
	default:
		return false
	}
}

// createLink makes the interface: the kernel's WireGuard link, or (auto, when the kernel
// refuses the link type, or userspace) a wireguard-go device on a TUN device.
func createLink(name string, mtu int, mode Mode, logf func(string, ...any)) (*userspace, string, error) {
	if mode != ModeUserspace {
		err := netlink.LinkAdd(&netlink.Wireguard{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu}})
		if err == nil {
			return nil, ImplKernel, nil
		}
		if mode == ModeKernel || !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOTSUP) {
			return nil, "", fmt.Errorf("creating the kernel WireGuard link %s: %w", name, err)
		}
		logf("the kernel has no WireGuard (%v): running wireguard-go in this process", err)
	}
	if err := ensureTunNode(); err != nil {
		return nil, "", err
	}
	t, err := tun.CreateTUN(name, mtu)
	if err != nil {
		return nil, "", fmt.Errorf("creating TUN device %s: %w", name, err)
	}
	dev := device.NewDevice(t, conn.NewDefaultBind(), device.NewLogger(device.LogLevelError, "wireguard-go: "))
	f, err := ipc.UAPIOpen(name)
	if err != nil {
		dev.Close()
		return nil, "", fmt.Errorf("opening the UAPI socket of %s: %w", name, err)
	}
	l, err := ipc.UAPIListen(name, f)
	if err != nil {
		dev.Close()
		return nil, "", fmt.Errorf("listening on the UAPI socket of %s: %w", name, err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go dev.IpcHandle(c)
		}
	}()
	return &userspace{dev: dev, uapi: l}, ImplUserspace, nil
}

// ensureTunNode creates /dev/net/tun where the container runtime provides none (the
// container needs CAP_MKNOD and the device cgroup's allowance for 10:200, which
// runtimes grant by default).
func ensureTunNode() error {
	const path = "/dev/net/tun"
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if err := os.MkdirAll("/dev/net", 0o755); err != nil {
		return err
	}
	if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(10, 200))); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("creating %s: %w", path, err)
	}
	return nil
}
