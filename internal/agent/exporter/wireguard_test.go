package exporter

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"bnerd.net/vpn-operator/internal/agent/wgstate"
)

func TestWireGuardCollector(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "wg.json")
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	write := func(rx, tx int64) {
		t.Helper()
		if err := wgstate.Write(file, wgstate.State{UpdatedAt: now, Device: wgstate.Device{Interface: "wg0", PublicKey: "gw", Peers: []wgstate.Peer{
			{Name: "hq", PublicKey: "k1", LatestHandshake: now.Add(-30 * time.Second), ReceiveBytes: rx, TransmitBytes: tx},
			{Name: "br", PublicKey: "k2"},
		}}}); err != nil {
			t.Fatal(err)
		}
	}
	write(1000, 500)
	c := &WireGuardCollector{Peers: func() []string { return []string{"hq", "br"} }, StateFile: file, Now: func() time.Time { return now }}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	expect := func(want string, names ...string) {
		t.Helper()
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
			t.Error(err)
		}
	}
	expect(`
# HELP bnerd_wireguard_peer_up 1 when the peer's latest handshake with a key the gateway serves (the current one, or the previous one during a rotation's overlap) is younger than 3 minutes.
# TYPE bnerd_wireguard_peer_up gauge
bnerd_wireguard_peer_up{tunnel="br"} 0
bnerd_wireguard_peer_up{tunnel="hq"} 1
# HELP bnerd_wireguard_peer_latest_handshake_age_seconds Seconds since the peer's latest handshake with a key the gateway serves (absent without one).
# TYPE bnerd_wireguard_peer_latest_handshake_age_seconds gauge
bnerd_wireguard_peer_latest_handshake_age_seconds{tunnel="hq"} 30
# HELP bnerd_wireguard_up 1 when the wireguard container reported the interface within the last 30 s.
# TYPE bnerd_wireguard_up gauge
bnerd_wireguard_up 1
`, "bnerd_wireguard_peer_up", "bnerd_wireguard_peer_latest_handshake_age_seconds", "bnerd_wireguard_up")
	// A recreated interface restarts its counters; the totals keep growing.
	write(200, 100)
	expect(`
# HELP bnerd_wireguard_peer_bytes_total Bytes exchanged with the peer (in: received from it, out: sent to it).
# TYPE bnerd_wireguard_peer_bytes_total counter
bnerd_wireguard_peer_bytes_total{direction="in",tunnel="br"} 0
bnerd_wireguard_peer_bytes_total{direction="in",tunnel="hq"} 1200
bnerd_wireguard_peer_bytes_total{direction="out",tunnel="br"} 0
bnerd_wireguard_peer_bytes_total{direction="out",tunnel="hq"} 600
`, "bnerd_wireguard_peer_bytes_total")
	// A key rotation's overlap: br still on the previous key's device is up, with that
	// handshake's age, and its bytes there count too.
	if err := wgstate.Write(file, wgstate.State{UpdatedAt: now,
		Device: wgstate.Device{Interface: "wg1", PublicKey: "gw2", Peers: []wgstate.Peer{
			{Name: "hq", PublicKey: "k1", LatestHandshake: now.Add(-10 * time.Second), ReceiveBytes: 50, TransmitBytes: 40},
			{Name: "br", PublicKey: "k2"},
		}},
		Previous: &wgstate.Device{Interface: "wg0", PublicKey: "gw", Peers: []wgstate.Peer{
			{Name: "hq", PublicKey: "k1", LatestHandshake: now.Add(-2 * time.Minute), ReceiveBytes: 200, TransmitBytes: 100},
			{Name: "br", PublicKey: "k2", LatestHandshake: now.Add(-20 * time.Second), ReceiveBytes: 7, TransmitBytes: 9},
		}},
	}); err != nil {
		t.Fatal(err)
	}
	expect(`
# HELP bnerd_wireguard_peer_up 1 when the peer's latest handshake with a key the gateway serves (the current one, or the previous one during a rotation's overlap) is younger than 3 minutes.
# TYPE bnerd_wireguard_peer_up gauge
bnerd_wireguard_peer_up{tunnel="br"} 1
bnerd_wireguard_peer_up{tunnel="hq"} 1
# HELP bnerd_wireguard_peer_latest_handshake_age_seconds Seconds since the peer's latest handshake with a key the gateway serves (absent without one).
# TYPE bnerd_wireguard_peer_latest_handshake_age_seconds gauge
bnerd_wireguard_peer_latest_handshake_age_seconds{tunnel="br"} 20
bnerd_wireguard_peer_latest_handshake_age_seconds{tunnel="hq"} 10
# HELP bnerd_wireguard_peer_bytes_total Bytes exchanged with the peer (in: received from it, out: sent to it).
# TYPE bnerd_wireguard_peer_bytes_total counter
bnerd_wireguard_peer_bytes_total{direction="in",tunnel="br"} 7
bnerd_wireguard_peer_bytes_total{direction="in",tunnel="hq"} 1250
bnerd_wireguard_peer_bytes_total{direction="out",tunnel="br"} 9
bnerd_wireguard_peer_bytes_total{direction="out",tunnel="hq"} 640
`, "bnerd_wireguard_peer_up", "bnerd_wireguard_peer_latest_handshake_age_seconds", "bnerd_wireguard_peer_bytes_total")
	// A silent wireguard container: down, every peer down.
	c.Now = func() time.Time { return now.Add(time.Minute) }
	expect(`
# HELP bnerd_wireguard_up 1 when the wireguard container reported the interface within the last 30 s.
# TYPE bnerd_wireguard_up gauge
bnerd_wireguard_up 0
`, "bnerd_wireguard_up")
}
