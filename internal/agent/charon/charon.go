// Package charon prepares the charon container's start: it renders strongswan.conf for
// the pod's dataplane and returns what to exec, so charon is the container's main
// process and its exit is the container's exit.
package charon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// Options are the role's flags.
type Options struct {
	Dataplane  gatewayconfig.DataplaneMode
	VICISocket string
	// Conf is where strongswan.conf is written; Binary the charon to exec.
	Conf, Binary string
	// TUNDevice, when set, is created as the TUN character device if missing, with the
	// libipsec dataplane only: libipsec opens /dev/net/tun, which container runtimes do
	// not provide (their device cgroup allows it; creating the node takes CAP_MKNOD).
	TUNDevice string
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
	if err := os.WriteFile(o.Conf, []byte(text), 0o644); err != nil {
		return Start{}, fmt.Errorf("writing %s: %w", o.Conf, err)
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
