package wireguard

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

func key(t *testing.T) wgtypes.Key {
	t.Helper()
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func prefixes(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range s {
		out = append(out, netip.MustParsePrefix(x))
	}
	return out
}

func TestChanges(t *testing.T) {
	gw, a, b, c := key(t), key(t).PublicKey(), key(t).PublicKey(), key(t).PublicKey()
	ep := &net.UDPAddr{IP: net.IPv4(198, 51, 100, 7), Port: 51820}
	want := Desired{PrivateKey: gw, ListenPort: 51820, Peers: []DesiredPeer{
		{Name: "a", PublicKey: a, AllowedIPs: prefixes("192.168.10.0/24"), Endpoint: ep},
		{Name: "b", PublicKey: b, AllowedIPs: prefixes("192.168.20.0/24", "192.168.21.0/24"), Keepalive: 25 * time.Second},
	}}

	// A fresh device: key, port and both peers with their endpoints.
	cfg, ok := Changes(&wgtypes.Device{}, want, map[wgtypes.Key]string{})
	if !ok || cfg.PrivateKey == nil || *cfg.ListenPort != 51820 || len(cfg.Peers) != 2 {
		t.Fatalf("fresh device: %+v", cfg)
	}
	if cfg.Peers[0].UpdateOnly || !cfg.Peers[0].ReplaceAllowedIPs || cfg.Peers[0].Endpoint == nil || cfg.ReplacePeers {
		t.Fatalf("new peer config %+v", cfg.Peers[0])
	}

	// The device as configured: nothing to do, even when a roamed.
	dev := &wgtypes.Device{PrivateKey: gw, ListenPort: 51820, Peers: []wgtypes.Peer{
		{PublicKey: a, AllowedIPs: ipNets(prefixes("192.168.10.0/24")), Endpoint: &net.UDPAddr{IP: net.IPv4(203, 0, 113, 9), Port: 4444}},
		{PublicKey: b, AllowedIPs: ipNets(prefixes("192.168.21.0/24", "192.168.20.0/24")), PersistentKeepaliveInterval: 25 * time.Second},
	}}
	last := map[wgtypes.Key]string{a: ep.String()}
	if cfg, ok := Changes(dev, want, last); ok {
		t.Fatalf("converged device changed: %+v", cfg)
	}

	// A third peer is added: only it is sent, b and a are untouched.
	want.Peers = append(want.Peers, DesiredPeer{Name: "c", PublicKey: c, AllowedIPs: prefixes("10.9.0.0/16")})
	cfg, ok = Changes(dev, want, last)
	if !ok || len(cfg.Peers) != 1 || cfg.Peers[0].PublicKey != c || cfg.PrivateKey != nil || cfg.ListenPort != nil {
		t.Fatalf("adding a peer: %+v", cfg)
	}

	// b's allowed IPs change: an update of b only; a peer gone from the config is removed.
	want.Peers = []DesiredPeer{want.Peers[0], {Name: "b", PublicKey: b, AllowedIPs: prefixes("192.168.20.0/24"), Keepalive: 25 * time.Second}}
	cfg, ok = Changes(dev, want, last)
	if !ok || len(cfg.Peers) != 1 || cfg.Peers[0].PublicKey != b || !cfg.Peers[0].UpdateOnly || !cfg.Peers[0].ReplaceAllowedIPs || cfg.Peers[0].Endpoint != nil {
		t.Fatalf("changing b: %+v", cfg)
	}
	dev.Peers = append(dev.Peers, wgtypes.Peer{PublicKey: c})
	want.Peers[1].AllowedIPs = prefixes("192.168.20.0/24", "192.168.21.0/24")
	cfg, ok = Changes(dev, want, last)
	if !ok || len(cfg.Peers) != 1 || cfg.Peers[0].PublicKey != c || !cfg.Peers[0].Remove {
		t.Fatalf("removing c: %+v", cfg)
	}

	// The config moves a's endpoint: sent once.
	want.Peers[0].Endpoint = &net.UDPAddr{IP: net.IPv4(198, 51, 100, 8), Port: 51820}
	dev.Peers = dev.Peers[:2]
	cfg, ok = Changes(dev, want, last)
	if !ok || len(cfg.Peers) != 1 || cfg.Peers[0].Endpoint == nil || cfg.Peers[0].Endpoint.String() != "198.51.100.8:51820" {
		t.Fatalf("moving a's endpoint: %+v", cfg)
	}

	// A rotated key: only the private key.
	want.Peers[0].Endpoint = ep
	want.PrivateKey = key(t)
	cfg, ok = Changes(dev, want, last)
	if !ok || cfg.PrivateKey == nil || len(cfg.Peers) != 0 {
		t.Fatalf("rotating: %+v", cfg)
	}
}

// A peer at a fixed endpoint gets the reach-out keepalive until it has handshaken with
// the device; a roaming peer and one with its own keepalive keep theirs; the desired
// state passed in is not changed.
func TestReachOut(t *testing.T) {
	fixed, roaming, own := key(t).PublicKey(), key(t).PublicKey(), key(t).PublicKey()
	ep := &net.UDPAddr{IP: net.IPv4(198, 51, 100, 7), Port: 51820}
	want := Desired{Peers: []DesiredPeer{
		{Name: "fixed", PublicKey: fixed, Endpoint: ep},
		{Name: "roaming", PublicKey: roaming},
		{Name: "own", PublicKey: own, Endpoint: ep, Keepalive: 25 * time.Second},
	}}
	keepalives := func(d Desired) []time.Duration {
		var out []time.Duration
		for _, p := range d.Peers {
			out = append(out, p.Keepalive)
		}
		return out
	}
	same := func(got []time.Duration, want ...time.Duration) bool {
		if len(got) != len(want) {
			return false
		}
		for i := range got {
			if got[i] != want[i] {
				return false
			}
		}
		return true
	}

	// A fresh device (a new pod) and one whose peer never answered: reach out.
	for name, dev := range map[string]*wgtypes.Device{
		"fresh":      {},
		"unanswered": {Peers: []wgtypes.Peer{{PublicKey: fixed, PersistentKeepaliveInterval: ReachOutInterval}}},
	} {
		got := ReachOut(dev, want)
		if k := keepalives(got); !same(k, ReachOutInterval, 0, 25*time.Second) {
			t.Errorf("%s device: keepalives %v, want [%v 0 25s]", name, k, ReachOutInterval)
		}
		// The device then gets it: the peer is new, or its keepalive changes.
		cfg, ok := Changes(dev, got, map[wgtypes.Key]string{})
		if name == "fresh" && (!ok || *cfg.Peers[0].PersistentKeepaliveInterval != ReachOutInterval) {
			t.Errorf("fresh device: the peer is not configured with the reach-out keepalive: %+v", cfg.Peers)
		}
	}
	if k := keepalives(want); !same(k, 0, 0, 25*time.Second) {
		t.Errorf("ReachOut changed its input: %v", k)
	}

	// Handshaken: the config's keepalive again, and the device is told so.
	dev := &wgtypes.Device{Peers: []wgtypes.Peer{{PublicKey: fixed, PersistentKeepaliveInterval: ReachOutInterval, LastHandshakeTime: time.Now()}}}
	got := ReachOut(dev, want)
	if k := keepalives(got); !same(k, 0, 0, 25*time.Second) {
		t.Errorf("after the handshake: keepalives %v, want [0 0 25s]", k)
	}
	cfg, ok := Changes(dev, Desired{Peers: got.Peers[:1]}, map[wgtypes.Key]string{fixed: ep.String()})
	if !ok || len(cfg.Peers) != 1 || cfg.Peers[0].PersistentKeepaliveInterval == nil || *cfg.Peers[0].PersistentKeepaliveInterval != 0 {
		t.Errorf("after the handshake the reach-out keepalive is not turned off: %+v", cfg.Peers)
	}
}
