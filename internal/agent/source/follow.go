package source

import (
	"context"
	"sync"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// Tunnels tracks the tunnel (connection) names and the gateway reference of the latest
// valid config, for the roles that only report on what charon runs.
type Tunnels struct {
	// Logf receives rejected configs.
	Logf func(format string, args ...any)

	mu    sync.Mutex
	names []string
	ref   gatewayconfig.GatewayRef
	peers map[string]string
}

// Follow consumes snaps until ctx ends. An invalid config keeps the previous names.
func (t *Tunnels) Follow(ctx context.Context, snaps <-chan Snapshot) {
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-snaps:
			cfg, err := gatewayconfig.Unmarshal(s.Config)
			if err != nil {
				if t.Logf != nil {
					t.Logf("config: %v", err)
				}
				continue
			}
			t.mu.Lock()
			t.names = gatewayconfig.ConnectionNames(cfg)
			t.ref = cfg.Gateway
			t.peers = map[string]string{}
			for _, tn := range cfg.Tunnels {
				t.peers[tn.PeerAddress] = tn.Name
			}
			t.mu.Unlock()
		}
	}
}

// Get returns a copy of the names and the gateway reference.
func (t *Tunnels) Get() ([]string, gatewayconfig.GatewayRef) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.names...), t.ref
}

// ByPeer returns the tunnel whose peer has address addr ("" when none has).
func (t *Tunnels) ByPeer(addr string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.peers[addr]
}

// Names returns a copy of the names.
func (t *Tunnels) Names() []string {
	n, _ := t.Get()
	return n
}

// Fanout copies every snapshot from in to each of outs (latest wins per consumer, in
// order), so two loops of one role share one watch.
func Fanout(ctx context.Context, in <-chan Snapshot, outs ...chan Snapshot) {
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-in:
			for _, o := range outs {
				send(ctx, o, s)
			}
		}
	}
}
