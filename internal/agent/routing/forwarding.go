package routing

import (
	"fmt"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// ipv4DevconfForwarding is IPV4_DEVCONF_FORWARDING of linux/ip.h.
const ipv4DevconfForwarding = 1

// EnsureForwarding turns on IPv4 forwarding for packets arriving on each named device
// (the kernel forwards a packet when its input device forwards).
//
// A pod's network namespace takes its forwarding setting from the host's initial
// namespace, which is on where the CNI routes but not everywhere, and a container cannot
// write /proc/sys (it is mounted read-only). Setting the per-device flag over netlink
// (IFLA_INET_CONF, what `sysctl net.ipv4.conf.<dev>.forwarding` sets) needs only
// NET_ADMIN, which init-nat has. Devices that do not exist (the tunnel device while
// charon is down) are skipped; the caller repeats when they appear.
func EnsureForwarding(devices ...string) error {
	for _, dev := range devices {
		link, err := netlink.LinkByName(dev)
		if err != nil {
			continue
		}
		if on, err := forwardingOn(dev); err == nil && on {
			continue
		}
		if err := setForwarding(link.Attrs().Index); err != nil {
			return fmt.Errorf("enabling forwarding on %s: %w", dev, err)
		}
	}
	return nil
}

// forwardingOn reads the device's flag from /proc (readable in a container).
func forwardingOn(dev string) (bool, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/conf/" + dev + "/forwarding")
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(string(b)) == "1", nil
}

func setForwarding(index int) error {
	req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)
	spec := nl.NewRtAttr(unix.IFLA_AF_SPEC, nil)
	inet := spec.AddRtAttr(unix.AF_INET, nil)
	conf := inet.AddRtAttr(unix.IFLA_INET_CONF, nil)
	conf.AddRtAttr(ipv4DevconfForwarding, nl.Uint32Attr(1))
	req.AddData(spec)
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}
