// Package loader is the strongswan-loader loop: it keeps charon's connections and shared
// keys equal to the latest configuration, re-checking on a timer so a restarted charon
// (which lost everything) or a lost SA is repaired without a config change.
//
// The loop renders swanctl.conf and the keys itself, from the validated gateway.json
// and the keys its key source reads: what charon loads is never text taken from the
// ConfigMap. A tunnel whose key is missing, unreadable or below the floor is left out
// (never started without its key) and reported by Waiting.
package loader

import (
	"context"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	"bnerd.net/vpn-operator/internal/agent/psk"
	"bnerd.net/vpn-operator/internal/agent/source"
	"bnerd.net/vpn-operator/internal/agent/vici"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// Applier converges charon to the rendered files (*vici.Syncer: it opens a new VICI
// session for every Apply, so a restarted charon is reached again without bookkeeping).
type Applier interface {
	Apply(ctx context.Context, swanctl, secrets string) (vici.Result, error)
}

// Loop runs Applier on every snapshot, every key change and every Interval.
type Loop struct {
	Applier Applier
	// Keys supplies the pre-shared keys (psk.API in the pod). Nil: the snapshot's
	// secrets.conf (the file mode).
	Keys     psk.Source
	Interval time.Duration
	// RetryFirst is the wait before the first retry of a round that failed for want of
	// something that is coming (charon's socket, the port's routing): doubled per further
	// failure up to Interval, so a pod whose containers start in any order loads its
	// connections within moments of charon answering, not at the next Interval (default
	// 100ms).
	RetryFirst time.Duration
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
	// KeyWait is how long a tunnel whose Secret has not been read once yet (psk.Keys'
	// Pending: a restarted agent's first list, a Role just updated) holds off every
	// change to charon's connections; default 30s. Without it, an agent restarted next
	// to a running charon would unload the tunnels whose keys it has not read yet and
	// tear them down. After it, such a tunnel counts as without a key (fail closed).
	KeyWait time.Duration
	// Logf receives one line per change of state; never key material.
	Logf func(format string, args ...any)

	mu      sync.Mutex
	waiting map[string]string
	now     func() time.Time
}

func (l *Loop) logf(format string, args ...any) {
	if l.Logf != nil {
		l.Logf(format, args...)
	}
}

// Waiting returns, for every tunnel of the current config that is not loaded for want
// of a usable key, why (a copy).
func (l *Loop) Waiting() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.waiting)
}

// Run loops until ctx ends.
func (l *Loop) Run(ctx context.Context, snaps <-chan source.Snapshot) {
	interval := l.Interval
	if interval <= 0 {
		interval = 2 * time.Second
	}
	timeout := l.Timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	keys := l.Keys
	var file *psk.File
	if keys == nil {
		file = psk.NewFile()
		keys = file
	}
	var (
		cfg     *gatewayconfig.Config
		lastCfg []byte
	)
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
	lastWaiting := ""
	keyWait := l.KeyWait
	if keyWait <= 0 {
		keyWait = 30 * time.Second
	}
	now := l.now
	if now == nil {
		now = time.Now
	}
	pendingSince := map[string]time.Time{}
	// retry fires a round soon after one that failed (retryIn doubles per failure);
	// nil while the last round succeeded.
	var retry <-chan time.Time
	var retryIn time.Duration
	failed := func() {
		switch {
		case retryIn == 0 && l.RetryFirst > 0:
			retryIn = l.RetryFirst
		case retryIn == 0:
			retryIn = 100 * time.Millisecond
		default:
			retryIn *= 2
		}
		retryIn = min(retryIn, interval)
		retry = time.After(retryIn)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-retry:
			retry = nil
		case s := <-snaps:
			if file != nil {
				file.Update(s.Secrets)
			}
			if !s.Complete() || string(s.Config) == string(lastCfg) {
				break
			}
			next, err := gatewayconfig.Unmarshal(s.Config)
			if err != nil {
				// A config the agent's own check refuses is never loaded; the last
				// valid one stays.
				l.logf("load: config refused, keeping the last valid one: %v", err)
				break
			}
			cfg, lastCfg = next, s.Config
			keys.Follow(cfg.PSKSecrets())
		case <-keys.Changed():
		case <-tick.C:
		}
		if cfg == nil {
			continue
		}
		k := keys.Keys(cfg)
		if held := holdForKeys(k.Pending, pendingSince, now(), keyWait); held != "" {
			report("waiting for the pre-shared keys of " + held + " to be read before changing charon's connections")
			continue
		}
		l.mu.Lock()
		l.waiting = k.Waiting
		l.mu.Unlock()
		if w := describe(k.Waiting); w != lastWaiting {
			if w != "" {
				l.logf("load: not starting tunnels without a usable pre-shared key: %s", w)
			}
			lastWaiting = w
		}
		ready := k.Ready()
		swanctl, err := gatewayconfig.RenderSwanctlFor(cfg, ready)
		if err != nil {
			report("rendering connections: " + err.Error())
			continue
		}
		secrets, err := gatewayconfig.RenderSecretsFor(cfg, k.ByTunnel, ready)
		if err != nil {
			report("rendering keys: " + err.Error()) // never quotes key material
			continue
		}
		if l.PortRouting != nil {
			if ok, why := l.portReady(cfg); !ok {
				report(why)
				failed()
				continue
			}
		}
		actx, cancel := context.WithTimeout(ctx, timeout)
		_, err = l.Applier.Apply(actx, swanctl, secrets)
		cancel()
		if err != nil {
			report(err.Error())
			failed()
			continue
		}
		retry, retryIn = nil, 0
		report("")
	}
}

// holdForKeys tracks since when each tunnel's key has been pending and names the ones
// still inside the wait (sorted, comma-separated; "" when none holds the round).
func holdForKeys(pending map[string]bool, since map[string]time.Time, now time.Time, wait time.Duration) string {
	for n := range since {
		if !pending[n] {
			delete(since, n)
		}
	}
	var held []string
	for n := range pending {
		first, ok := since[n]
		if !ok {
			since[n], first = now, now
		}
		if now.Sub(first) < wait {
			held = append(held, n)
		}
	}
	sort.Strings(held)
	return strings.Join(held, ", ")
}

func describe(waiting map[string]string) string {
	names := make([]string, 0, len(waiting))
	for n := range waiting {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, n+": "+waiting[n])
	}
	return strings.Join(parts, "; ")
}

// localAddresser is an Applier that can be told the port's address (*vici.Syncer).
type localAddresser interface{ SetLocalAddress(string) }

// portReady reports whether the port's policy routing is in place for the config, and
// why not.
func (l *Loop) portReady(cfg *gatewayconfig.Config) (bool, string) {
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
