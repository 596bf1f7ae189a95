package status

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/wgstate"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// HandshakeFresh is how young a WireGuard peer's latest handshake must be for the peer to
// count as up: WireGuard re-handshakes every two minutes while traffic flows and drops a
// session after three, so an older handshake means no usable session.
const HandshakeFresh = 3 * time.Minute

// ComputeWireGuard derives each configured peer's state from the wireguard role's state:
// Up while its latest handshake with the current key is younger than HandshakeFresh, or
// during a key rotation's overlap its latest with the previous key (the message says the
// client has not switched); Down otherwise or when the state is missing or stale.
// LatestHandshake is always the current key's (the operator counts the rotation's
// progress by it), truncated to whole seconds as the API server keeps it.
func ComputeWireGuard(peers []string, st wgstate.State, stErr error, now time.Time) ([]v1alpha1.TunnelState, string) {
	out := make([]v1alpha1.TunnelState, 0, len(peers))
	up := 0
	for _, name := range peers {
		ts := v1alpha1.TunnelState{Name: name, State: StateDown}
		p, ok := st.Peer(name)
		var pp wgstate.Peer
		if st.Previous != nil {
			pp, _ = st.Previous.Peer(name)
		}
		if stErr == nil && ok && !p.LatestHandshake.IsZero() {
			hs := metav1.NewTime(p.LatestHandshake.Truncate(time.Second).UTC())
			ts.LatestHandshake = &hs
		}
		switch {
		case stErr != nil:
			ts.Message = stErr.Error()
		case !ok:
			ts.Message = "not configured on the interface yet"
		case !p.LatestHandshake.IsZero() && now.Sub(p.LatestHandshake) < HandshakeFresh:
			ts.State = StateUp
			up++
		case !pp.LatestHandshake.IsZero() && now.Sub(pp.LatestHandshake) < HandshakeFresh:
			ts.State = StateUp
			up++
			ts.Message = fmt.Sprintf("up on the previous key %s (UDP %d): the client has not configured the current key %s yet", st.Previous.PublicKey, st.Previous.ListenPort, st.PublicKey)
		case p.LatestHandshake.IsZero():
			ts.Message = "no handshake with the gateway's current key"
		default:
			ts.Message = fmt.Sprintf("latest handshake %s ago", now.Sub(p.LatestHandshake).Round(time.Second))
		}
		out = append(out, ts)
	}
	return out, fmt.Sprintf("%d/%d", up, len(peers))
}

// WireGuardSource reads the state file for the status agent and remembers the
// interface's public key for the writer.
type WireGuardSource struct {
	StateFile string

	key string
}

// State is Agent.State for a WireGuard gateway.
func (w *WireGuardSource) State(names []string, now time.Time) ([]v1alpha1.TunnelState, string) {
	st, err := wgstate.Read(w.StateFile, now)
	if err == nil {
		w.key = st.PublicKey
	}
	return ComputeWireGuard(names, st, err, now)
}

// Writer is the WriteFunc of a WireGuard gateway's status agent: ClientWriter's, with
// the interface's public key written beside the tunnels (so the operator can tell
// handshakes with a rotated key).
func (w *WireGuardSource) Writer(c client.Client, heartbeat time.Duration) WriteFunc {
	var mu sync.Mutex
	writers := map[gatewayconfig.GatewayRef]*Writer{}
	return func(ctx context.Context, ref gatewayconfig.GatewayRef, tunnels []v1alpha1.TunnelState, ready string) (bool, error) {
		mu.Lock()
		wr := writers[ref]
		if wr == nil {
			wr = &Writer{Client: c, Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name, Heartbeat: heartbeat}
			writers[ref] = wr
		}
		wr.InterfacePublicKey = w.key
		mu.Unlock()
		return wr.Write(ctx, tunnels, ready)
	}
}

// WatchState kicks the agent when the wireguard role's state file says something new
// about the peers: a handshake, a new key on the interface, a peer appearing or going. The
// file is rewritten every second with a fresh UpdatedAt, which alone is no news. Without
// it a WireGuard gateway's status followed a handshake only at the agent's next round (10
// s by default; IPsec's agent is kicked by charon's events instead): the sandbox's
// gateway turned Ready 10 s after its first handshake. A file that cannot be read is no
// news either; the agent's rounds report it.
func (w *WireGuardSource) WatchState(ctx context.Context, every time.Duration, kick func()) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	last := ""
	for {
		if b, err := os.ReadFile(w.StateFile); err == nil {
			var st wgstate.State
			if json.Unmarshal(b, &st) == nil {
				if sig := peersSignature(st); sig != last {
					last = sig
					kick()
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// peersSignature is what the status reports from a state, without its timestamps of
// reading and byte counters.
func peersSignature(st wgstate.State) string {
	var b strings.Builder
	for _, d := range st.Devices() {
		fmt.Fprintf(&b, "%s %s %s\n", d.Interface, d.PublicKey, d.KeyAppliedAt.Format(time.RFC3339Nano))
		for _, p := range d.Peers {
			fmt.Fprintf(&b, "%s %s %s %s\n", p.Name, p.PublicKey, p.Endpoint, p.LatestHandshake.Format(time.RFC3339Nano))
		}
	}
	return b.String()
}
