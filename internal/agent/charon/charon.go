// Package charon prepares the charon container's start: it renders strongswan.conf for
// the pod's dataplane and returns what to exec, so charon is the container's main
// process and its exit is the container's exit.
package charon

import (
	"fmt"
	"os"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// Options are the role's flags.
type Options struct {
	Dataplane  gatewayconfig.DataplaneMode
	VICISocket string
	// Conf is where strongswan.conf is written; Binary the charon to exec.
	Conf, Binary string
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
