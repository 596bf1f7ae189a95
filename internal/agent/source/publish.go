package source

import (
	"context"

	"bnerd.net/vpn-operator/internal/agent/statefile"
)

// Publish writes each snapshot's configuration (the ConfigMap's gateway.json, never a
// key) to path until ctx ends. The status agent, the one container of the gateway pod
// with the API token, publishes it on the pod's shared volume for the containers that
// read it as a file (Files) and so need no token: init-nat and the exporter (and the
// WireGuard pod's wireguard role).
func Publish(ctx context.Context, in <-chan Snapshot, path string, logf func(string, ...any)) {
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-in:
			if !s.Complete() {
				continue
			}
			if err := statefile.Write(path, s.Config); err != nil && logf != nil {
				logf("publishing the configuration to %s: %v", path, err)
			}
		}
	}
}
