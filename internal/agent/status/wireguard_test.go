package status

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/agent/wgstate"
)

func TestComputeWireGuard(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	st := wgstate.State{UpdatedAt: now, Device: wgstate.Device{Peers: []wgstate.Peer{
		{Name: "fresh", LatestHandshake: now.Add(-2*time.Minute - 59*time.Second)},
		{Name: "old", LatestHandshake: now.Add(-3 * time.Minute)},
		{Name: "never"},
	}}}
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
	// A key rotation's overlap: a peer whose latest handshake is with the previous key's
	// device is up and told to switch; its LatestHandshake stays the current key's (none),
	// which the operator counts the rotation by.
	st.Previous = &wgstate.Device{Interface: "wg1", PublicKey: "oldkey", ListenPort: 51821, Peers: []wgstate.Peer{
		{Name: "never", LatestHandshake: now.Add(-5 * time.Second)},
		{Name: "old", LatestHandshake: now.Add(-4 * time.Minute)},
	}}
	got, ready = ComputeWireGuard([]string{"fresh", "old", "never"}, st, nil, now)
	if ready != "2/3" || got[2].State != StateUp || got[2].LatestHandshake != nil || !strings.Contains(got[2].Message, "previous key oldkey (UDP 51821)") {
		t.Errorf("overlap: %s %+v", ready, got[2])
	}
	if got[1].State != StateDown {
		t.Errorf("a stale handshake on the previous key counts as up: %+v", got[1])
	}
	// No state: every peer down with the reason.
	got, ready = ComputeWireGuard([]string{"fresh"}, wgstate.State{}, errors.New("the wireguard container last reported 1m0s ago"), now)
	if ready != "0/1" || got[0].State != StateDown || !strings.Contains(got[0].Message, "last reported") {
		t.Fatalf("stale state: %+v %s", got, ready)
	}
}

// WatchState kicks on news about the peers (the first state, a handshake, a new key) and
// not on the role's rewrites that only move UpdatedAt and the byte counters.
func TestWatchStateKicksOnNews(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wg.json")
	src := &WireGuardSource{StateFile: path}
	kicks := make(chan struct{}, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := time.Now().UTC()
	st := wgstate.State{UpdatedAt: now, Device: wgstate.Device{Interface: "wg0", PublicKey: "gw1", Peers: []wgstate.Peer{{Name: "hq", PublicKey: "hq1"}}}}
	write := func() {
		t.Helper()
		if err := wgstate.Write(path, st); err != nil {
			t.Fatal(err)
		}
	}
	write()
	go src.WatchState(ctx, 10*time.Millisecond, func() { kicks <- struct{}{} })
	// expect waits for a kick (want) or makes sure none comes within 200 ms (20 reads).
	expect := func(what string, want bool) {
		t.Helper()
		select {
		case <-kicks:
			if !want {
				t.Errorf("%s: kicked, want no kick", what)
			}
		case <-time.After(200 * time.Millisecond):
			if want {
				t.Errorf("%s: no kick", what)
			}
		}
	}
	expect("the first state", true)
	st.UpdatedAt, st.Peers[0].ReceiveBytes = now.Add(time.Second), 1234
	write()
	expect("a rewrite with a new UpdatedAt and byte counts", false)
	st.Peers[0].LatestHandshake = now.Add(2 * time.Second)
	write()
	expect("a handshake", true)
	st.PublicKey, st.KeyAppliedAt = "gw2", now.Add(3*time.Second)
	write()
	expect("a new key on the interface", true)
}
