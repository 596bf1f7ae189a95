// Package wireguard is the wireguard role of a WireGuard gateway's pod: it creates the
// gateway's WireGuard interface (the kernel's, or wireguard-go in this process where the
// kernel has no WireGuard), keeps its key, listen port, peers and allowed IPs equal to
// the rendered config through wgctrl, routes each peer's allowed IPs into the interface
// ahead of the pod's port routing, and writes the device's state for the status agent
// and the exporter. Peer changes touch only the peers that changed, so the other peers'
// sessions survive them.
package wireguard

import (
	"fmt"
	"net"
	"net/netip"
	"sort"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// Desired is the interface the config and the key file ask for.
type Desired struct {
	PrivateKey wgtypes.Key
	ListenPort int
	// FirewallMark marks the interface's own (encrypted) packets, so a policy rule
	// sends them out of the port whatever their destination (a roaming peer's address
	// is known only from its handshake).
	FirewallMark int
	Peers        []DesiredPeer
}

// DesiredPeer is one peer as the config names it.
type DesiredPeer struct {
	Name       string
	PublicKey  wgtypes.Key
	AllowedIPs []netip.Prefix
	// Endpoint is nil for a roaming peer.
	Endpoint  *net.UDPAddr
	Keepalive time.Duration
}

// FromConfig derives the desired peers and port from a validated WireGuard config.
func FromConfig(cfg *gatewayconfig.Config, key wgtypes.Key) (Desired, error) {
	if cfg.Protocol != gatewayconfig.ProtocolWireGuard || cfg.WireGuard == nil {
		return Desired{}, fmt.Errorf("the config is not a WireGuard gateway's")
	}
	d := Desired{PrivateKey: key, ListenPort: int(cfg.WireGuard.ListenPort)}
	for _, p := range cfg.WireGuard.Peers {
		pk, err := wgtypes.ParseKey(p.PublicKey)
		if err != nil {
			return Desired{}, fmt.Errorf("peer %s: public key: %w", p.Name, err)
		}
		dp := DesiredPeer{Name: p.Name, PublicKey: pk, Keepalive: time.Duration(p.PersistentKeepalive) * time.Second}
		for _, s := range p.AllowedIPs {
			pfx, err := netip.ParsePrefix(s)
			if err != nil {
				return Desired{}, fmt.Errorf("peer %s: allowed IP %q: %w", p.Name, s, err)
			}
			dp.AllowedIPs = append(dp.AllowedIPs, pfx)
		}
		if ep := p.Endpoint(); ep != "" {
			a, err := net.ResolveUDPAddr("udp4", ep) // an IP literal: no lookup
			if err != nil {
				return Desired{}, fmt.Errorf("peer %s: endpoint: %w", p.Name, err)
			}
			dp.Endpoint = a
		}
		d.Peers = append(d.Peers, dp)
	}
	return d, nil
}

// ReachOutInterval is the keepalive a peer at a fixed endpoint gets until its first
// handshake with this device: WireGuard's REKEY_TIMEOUT, the pace at which it retries an
// unanswered handshake anyway.
const ReachOutInterval = 5 * time.Second

// ReachOut makes the gateway start the handshake with every peer at a fixed endpoint
// that has not completed one with dev yet (a new pod, a new peer): it gives such a peer
// a keepalive of ReachOutInterval unless the config sets one. WireGuard sends a keepalive
// at once when one is turned on, and with no session that starts a handshake; without it
// a restarted gateway waits for the client's next packet, and the client starts a new
// handshake only 15 s after its packets stopped being answered (KEEPALIVE_TIMEOUT +
// REKEY_TIMEOUT). Once the peer has handshaken the keepalive is back to the config's.
// A roaming peer has no address to reach.
func ReachOut(dev *wgtypes.Device, d Desired) Desired {
	handshook := map[wgtypes.Key]bool{}
	for _, p := range dev.Peers {
		handshook[p.PublicKey] = !p.LastHandshakeTime.IsZero()
	}
	out := d
	out.Peers = append([]DesiredPeer(nil), d.Peers...)
	for i, p := range out.Peers {
		if p.Endpoint != nil && p.Keepalive == 0 && !handshook[p.PublicKey] {
			out.Peers[i].Keepalive = ReachOutInterval
		}
	}
	return out
}

// Changes returns the wgtypes.Config that turns dev into d, and whether anything needs
// changing. Peers are updated one by one (never ReplacePeers): a peer whose settings are
// unchanged is not sent, so its session and handshake state stay. A configured endpoint
// is sent for a new peer and when the config's endpoint changed since it was last sent
// (lastEndpoint, by peer key); never merely because the peer roamed, which WireGuard
// follows by itself.
func Changes(dev *wgtypes.Device, d Desired, lastEndpoint map[wgtypes.Key]string) (wgtypes.Config, bool) {
	var cfg wgtypes.Config
	changed := false
	if dev.PrivateKey != d.PrivateKey {
		k := d.PrivateKey
		cfg.PrivateKey, changed = &k, true
	}
	if dev.ListenPort != d.ListenPort {
		p := d.ListenPort
		cfg.ListenPort, changed = &p, true
	}
	if dev.FirewallMark != d.FirewallMark {
		m := d.FirewallMark
		cfg.FirewallMark, changed = &m, true
	}
	have := map[wgtypes.Key]wgtypes.Peer{}
	for _, p := range dev.Peers {
		have[p.PublicKey] = p
	}
	want := map[wgtypes.Key]bool{}
	for _, p := range d.Peers {
		want[p.PublicKey] = true
		ips := ipNets(p.AllowedIPs)
		ka := p.Keepalive
		cur, exists := have[p.PublicKey]
		if !exists {
			cfg.Peers = append(cfg.Peers, wgtypes.PeerConfig{
				PublicKey: p.PublicKey, Endpoint: p.Endpoint, PersistentKeepaliveInterval: &ka,
				ReplaceAllowedIPs: true, AllowedIPs: ips,
			})
			changed = true
			continue
		}
		pc := wgtypes.PeerConfig{PublicKey: p.PublicKey, UpdateOnly: true}
		upd := false
		if !samePrefixes(cur.AllowedIPs, p.AllowedIPs) {
			pc.ReplaceAllowedIPs, pc.AllowedIPs, upd = true, ips, true
		}
		if cur.PersistentKeepaliveInterval != ka {
			pc.PersistentKeepaliveInterval, upd = &ka, true
		}
		if p.Endpoint != nil && lastEndpoint[p.PublicKey] != p.Endpoint.String() {
			pc.Endpoint, upd = p.Endpoint, true
		}
		if upd {
			cfg.Peers = append(cfg.Peers, pc)
			changed = true
		}
	}
	var gone []wgtypes.Key
	for k := range have {
		if !want[k] {
			gone = append(gone, k)
		}
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i].String() < gone[j].String() })
	for _, k := range gone {
		cfg.Peers = append(cfg.Peers, wgtypes.PeerConfig{PublicKey: k, Remove: true})
		changed = true
	}
	return cfg, changed
}

func ipNets(ps []netip.Prefix) []net.IPNet {
	out := make([]net.IPNet, 0, len(ps))
	for _, p := range ps {
		out = append(out, net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())})
	}
	return out
}

func samePrefixes(have []net.IPNet, want []netip.Prefix) bool {
	if len(have) != len(want) {
		return false
	}
	set := map[netip.Prefix]bool{}
	for _, n := range have {
		a, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			return false
		}
		bits, _ := n.Mask.Size()
		set[netip.PrefixFrom(a.Unmap(), bits)] = true
	}
	for _, p := range want {
		if !set[p] {
			return false
		}
	}
	return true
}
