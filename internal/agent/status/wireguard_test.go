package status

import (
	"errors"
	"strings"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/agent/wgstate"
)

func TestComputeWireGuard(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	st := wgstate.State{UpdatedAt: now, Peers: []wgstate.Peer{
		{Name: "fresh", LatestHandshake: now.Add(-2*time.Minute - 59*time.Second)},
		{Name: "old", LatestHandshake: now.Add(-3 * time.Minute)},
		{Name: "never"},
	}}
	got, ready := ComputeWireGuard([]string{"fresh", "old", "never", "missing"}, st, nil, now)
	if ready != "1/4" {
		t.Fatalf("ready %s", ready)
	}
	want := []struct{ state, msg string }{{StateUp, ""}, {StateDown, "latest handshake 3m0s ago"}, {StateDown, "no handshake"}, {StateDown, "not configured"}}
	for i, w := range want {
		if got[i].State != w.state || !strings.Contains(got[i].Message, w.msg) {
			t.Errorf("%s: %s %q, want %s %q", got[i].Name, got[i].State, got[i].Message, w.state, w.msg)
		}
	}
	if got[0].LatestHandshake == nil || !got[0].LatestHandshake.Time.Equal(now.Add(-3*time.Minute+time.Second)) {
		t.Errorf("handshake time %v", got[0].LatestHandshake)
	}
	// No state: every peer down with the reason.
	got, ready = ComputeWireGuard([]string{"fresh"}, wgstate.State{}, errors.New("the wireguard container last reported 1m0s ago"), now)
	if ready != "0/1" || got[0].State != StateDown || !strings.Contains(got[0].Message, "last reported") {
		t.Fatalf("stale state: %+v %s", got, ready)
	}
}
