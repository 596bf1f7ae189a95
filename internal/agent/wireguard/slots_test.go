package wireguard

import (
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// Each peer is answered through the device it completed its latest handshake with; a
// peer with no handshake anywhere through the current key's device.
func TestRouteDevicesFollowTheLatestHandshake(t *testing.T) {
	a, b, c := mustKey(t), mustKey(t), mustKey(t)
	now := time.Now()
	peers := []DesiredPeer{{Name: "a", PublicKey: a}, {Name: "b", PublicKey: b}, {Name: "c", PublicKey: c}}
	cur := &activeDevice{wgDevice: &wgDevice{name: "wg1"}, current: true, want: Desired{Peers: peers}, dev: &wgtypes.Device{Peers: []wgtypes.Peer{
		{PublicKey: a, LastHandshakeTime: now.Add(-time.Minute)},
		{PublicKey: b, LastHandshakeTime: now.Add(-time.Second)},
		{PublicKey: c},
	}}}
	prev := &activeDevice{wgDevice: &wgDevice{name: "wg0"}, want: Desired{Peers: peers}, dev: &wgtypes.Device{Peers: []wgtypes.Peer{
		{PublicKey: a, LastHandshakeTime: now.Add(-10 * time.Second)},
		{PublicKey: b, LastHandshakeTime: now.Add(-time.Minute)},
		{PublicKey: c},
	}}}
	// The previous key's device listed first must not make it the default.
	via := routeDevices([]*activeDevice{prev, cur})
	for key, want := range map[wgtypes.Key]string{a: "wg0", b: "wg1", c: "wg1"} {
		if got := via[key].name; got != want {
			t.Errorf("peer %s via %s, want %s", key, got, want)
		}
	}
}

// The config's key slots map onto the runner's device names; the current key first.
func TestServedKeysUseTheSlotsDevices(t *testing.T) {
	wg := &gatewayconfig.WireGuard{PublicKey: "new", ListenPort: 51821, Interface: "wg1",
		Previous: &gatewayconfig.WireGuardKey{PublicKey: "old", ListenPort: 51820, Interface: "wg0"}}
	got := servedKeys(wg, [2]string{"t-gw", "t-gw1"})
	if len(got) != 2 || got[0] != (served{iface: "t-gw1", pub: "new", port: 51821, current: true}) || got[1] != (served{iface: "t-gw", pub: "old", port: 51820}) {
		t.Errorf("served %+v", got)
	}
	// A config from before key slots: its one key on slot 0.
	got = servedKeys(&gatewayconfig.WireGuard{PublicKey: "k", ListenPort: 51820}, [2]string{"wg0", "wg1"})
	if len(got) != 1 || got[0].iface != "wg0" {
		t.Errorf("served %+v", got)
	}
}

func mustKey(t *testing.T) wgtypes.Key {
	t.Helper()
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k.PublicKey()
}
