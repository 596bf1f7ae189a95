// Package loader is the strongswan-loader loop: it keeps charon's connections and shared
// keys equal to the latest snapshot, re-checking on a timer so a restarted charon (which
// lost everything) or a lost SA is repaired without a config change.
package loader

import (
	"context"
	"os"
	"time"

	"bnerd.net/vpn-operator/internal/agent/source"
	"bnerd.net/vpn-operator/internal/agent/vici"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// Applier converges charon to the rendered files (*vici.Loader: it opens a new VICI
// session for every Apply, so a restarted charon is reached again without bookkeeping).
type Applier interface {
	Apply(ctx context.Context, swanctl, secrets string) (vici.Result, error)
}

// Loop runs Applier on every snapshot and every Interval.
type Loop struct {
	Applier  Applier
	Interval time.Duration
	// SecretsFile, when set, supplies the shared keys (the gateway's Secret mounted as a
	// volume) instead of the snapshot, so the pod needs no API access to its Secret.
	SecretsFile string
	ReadFile    func(string) ([]byte, error)
	// Timeout bounds one Apply as a whole (each VICI call is bounded on its own too).
	Timeout time.Duration
	// PortRouting, when set, gates loading on the port's policy routing: connections are
	// loaded only once it reports the routing of the config's port address in place
	// (routing.InPlace), so IKE can never start over the pod network, whatever order the
	// pod's containers start in. The Applier also learns the port's address
	// (SetLocalAddress), so an SA from any other address is ended.
	PortRouting func(portFixedIP string) (bool, error)
	// ServiceAddress, when set, also gates loading on .1 of the service CIDR being a
	// local address (routing.HasLocalAddress): the child SA's routes need it, and a child
	// SA attempted before it exists fails.
	ServiceAddress func(addr string) (bool, error)
	Logf           func(format string, args ...any)
}

func (l *Loop) logf(format string, args ...any) {
	if l.Logf != nil {
		l.Logf(format, args...)
	}
}

// Run loops until ctx ends.
func (l *Loop) Run(ctx context.Context, snaps <-chan source.Snapshot) {
	read := l.ReadFile
	if read == nil {
		read = os.ReadFile
	}
	interval := l.Interval
	if interval <= 0 {
		interval = 2 * time.Second
	}
	timeout := l.Timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	var cur source.Snapshot
	tick := time.NewTicker(interval)
	defer tick.Stop()
	// While charon is down every round fails the same way; one line per change of the
	// error, not one per round.
	lastErr := ""
	report := func(msg string) {
		if msg != lastErr && msg != "" {
			l.logf("load: %s", msg)
		}
		if msg == "" && lastErr != "" {
			l.logf("load: charon reachable again")
		}
		lastErr = msg
	}
	for {
		select {
		case <-ctx.Done():
			return
		case cur = <-snaps:
		case <-tick.C:
		}
		if l.SecretsFile != "" {
			data, err := read(l.SecretsFile)
			if err != nil {
				report("reading shared keys: " + err.Error())
				continue
			}
			cur.Secrets = string(data)
		}
		if !cur.Complete(true) {
			continue
		}
		if l.PortRouting != nil {
			if ok, why := l.portReady(cur); !ok {
				report(why)
				continue
			}
		}
		actx, cancel := context.WithTimeout(ctx, timeout)
		_, err := l.Applier.Apply(actx, cur.Swanctl, cur.Secrets)
		cancel()
		if err != nil {
			report(err.Error())
			continue
		}
		report("")
	}
}

// localAddresser is an Applier that can be told the port's address (*vici.Loader).
type localAddresser interface{ SetLocalAddress(string) }

// portReady reports whether the port's policy routing is in place for the snapshot's
// config, and why not.
func (l *Loop) portReady(cur source.Snapshot) (bool, string) {
	cfg, err := gatewayconfig.Unmarshal(cur.Config)
	if err != nil {
		return false, "config: " + err.Error()
	}
	if la, ok := l.Applier.(localAddresser); ok {
		la.SetLocalAddress(cfg.PortFixedIP)
	}
	ok, err := l.PortRouting(cfg.PortFixedIP)
	if err != nil {
		return false, "checking the port's policy routing: " + err.Error()
	}
	if !ok {
		return false, "waiting for the port's policy routing (init-nat) before loading connections"
	}
	if l.ServiceAddress != nil && cfg.GatewayAddress != "" {
		ok, err := l.ServiceAddress(cfg.GatewayAddress)
		if err != nil {
			return false, "checking the service CIDR's local address: " + err.Error()
		}
		if !ok {
			return false, "waiting for " + cfg.GatewayAddress + " (init-nat) before loading connections"
		}
	}
	return true, ""
}
