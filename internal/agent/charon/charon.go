// Package charon prepares the charon container's start: it renders strongswan.conf for
// the pod's dataplane, clears the kernel IPsec state a previous charon left behind, and
// returns what to exec, so charon is the container's main process and its exit is the
// container's exit.
//
// Why the clearing: with kernel IPsec a charon that dies without cleaning up (SIGKILL,
// OOM kill, a crash) leaves its SAs and policies in the kernel. Outbound traffic keeps
// being encrypted with the orphaned SAs while nothing can answer the peer (ESP-in-UDP
// arrives at a closed port 4500), and after a restart the stale SAs stay beside the new
// ones until their hard lifetime. The tunnel is down either way until the new charon has
// negotiated; keeping the old state buys nothing but confusion. Flushing before charon
// starts means no stale SA outlives a restart, and while no policy exists the nftables
// guard (`rt ipsec missing`) drops what would otherwise leave unencrypted. The pod's
// network namespace holds this gateway's state only, so the flush touches nothing else.
package charon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/vishvananda/netlink"

	"bnerd.net/vpn-operator/internal/agent/statefile"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// Options are the role's flags.
type Options struct {
	Dataplane  gatewayconfig.DataplaneMode
	VICISocket string
	// Conf is where strongswan.conf is written; Binary the charon to exec.
	Conf, Binary string
	// PrivateDir closes the directories of Conf and VICISocket to all but root and
	// root's group (mode 0750): in the gateway pod they are an emptyDir (mode 0777)
	// that only charon and the status agent mount, and the status agent, a member of
	// root's group, may enter it and use the socket but neither create nor replace a
	// file there. charon owns the directory (kubelet creates it as root), so the change
	// needs no capability.
	PrivateDir bool
	// TUNDevice, when set, is created as the TUN character device if missing, with the
	// libipsec dataplane only: libipsec opens /dev/net/tun, which container runtimes do
	// not provide (their device cgroup allows it; creating the node takes CAP_MKNOD).
	TUNDevice string
	// FlushXFRM clears the network namespace's XFRM state and policies (FlushXFRM) and
	// reports how many it found; used with the kernel dataplane only.
	FlushXFRM func() (states, policies int, err error)
	Logf      func(format string, args ...any)
}

// Start is what the role execs.
type Start struct {
	Path string
	Argv []string
	Env  []string
}

// Prepare renders strongswan.conf and returns the exec of charon with environ plus
// STRONGSWAN_CONF.
func Prepare(o Options, environ []string) (Start, error) {
	if o.Dataplane == gatewayconfig.DataplaneLibipsec && o.TUNDevice != "" {
		if err := ensureTUN(o.TUNDevice); err != nil {
			return Start{}, err
		}
	}
	text, err := gatewayconfig.RenderStrongswanConf(gatewayconfig.StrongswanOptions{Mode: o.Dataplane, VICISocket: o.VICISocket})
	if err != nil {
		return Start{}, err
	}
	if o.PrivateDir {
		for _, dir := range []string{filepath.Dir(o.Conf), filepath.Dir(o.VICISocket)} {
			if err := os.Chmod(dir, 0o750); err != nil {
				return Start{}, fmt.Errorf("closing %s to other users: %w", dir, err)
			}
		}
	}
	// Never through a link left in the directory (package statefile).
	if err := statefile.Write(o.Conf, []byte(text)); err != nil {
		return Start{}, fmt.Errorf("writing %s: %w", o.Conf, err)
	}
	if o.Dataplane == gatewayconfig.DataplaneKernel && o.FlushXFRM != nil {
		states, policies, err := o.FlushXFRM()
		if err != nil {
			// charon can still run; stale SAs then age out by their lifetime.
			o.logf("clearing kernel IPsec state left by a previous charon failed: %v", err)
		} else if states+policies > 0 {
			o.logf("cleared %d SAs and %d policies left in the kernel by a previous charon", states, policies)
		}
	}
	env := append(append([]string(nil), environ...), "STRONGSWAN_CONF="+o.Conf)
	return Start{Path: o.Binary, Argv: []string{o.Binary}, Env: env}, nil
}

// ensureTUN creates the TUN device node at path (character device 10:200) unless a
// character device is there already.
func ensureTUN(path string) error {
	if fi, err := os.Stat(path); err == nil {
		if fi.Mode()&os.ModeCharDevice == 0 {
			return fmt.Errorf("%s exists and is not a character device", path)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(10, 200))); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("creating %s (libipsec needs it; the container needs CAP_MKNOD): %w", path, err)
	}
	return nil
}

func (o Options) logf(format string, args ...any) {
	if o.Logf != nil {
		o.Logf(format, args...)
	}
}

// FlushXFRM removes every XFRM state and policy of the current network namespace and
// returns how many there were.
func FlushXFRM() (states, policies int, err error) {
	st, err := netlink.XfrmStateList(netlink.FAMILY_ALL)
	if err != nil {
		return 0, 0, fmt.Errorf("listing XFRM states: %w", err)
	}
	pol, err := netlink.XfrmPolicyList(netlink.FAMILY_ALL)
	if err != nil {
		return 0, 0, fmt.Errorf("listing XFRM policies: %w", err)
	}
	if err := netlink.XfrmPolicyFlush(); err != nil {
		return len(st), len(pol), fmt.Errorf("flushing XFRM policies: %w", err)
	}
	if err := netlink.XfrmStateFlush(0); err != nil {
		return len(st), len(pol), fmt.Errorf("flushing XFRM states: %w", err)
	}
	return len(st), len(pol), nil
}
