package gatewayconfig

import (
	"encoding/base64"
	"fmt"
	"net/netip"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/addrpolicy"
)

// ProtocolWireGuard is Config.Protocol of a WireGuard gateway.
const ProtocolWireGuard = "wireguard"

// WireGuard is a WireGuard gateway's interface: its listen port, its own public key (the
// private key never enters the ConfigMap: the pod mounts it from the gateway's key
// Secret) and its peers.
type WireGuard struct {
	// ListenPort is the port the current key is served on.
	ListenPort int32 `json:"listenPort"`
	// PublicKey is the gateway's public key as the operator published it; the agent
	// serves the mounted private key whose public key it is.
	PublicKey string `json:"publicKey"`
	// Interface is the device the current key is served on, its key slot's
	// (WireGuardInterfaceOf); empty in a config from before key slots: wg0.
	Interface string `json:"interface,omitempty"`
	// Previous is the key a rotation replaced, served during the rotation's overlap on
	// its own port and device, so clients that have not switched keep their tunnels.
	Previous *WireGuardKey   `json:"previous,omitempty"`
	Peers    []WireGuardPeer `json:"peers"`
}

// WireGuardKey is a served key other than the current one.
type WireGuardKey struct {
	PublicKey  string `json:"publicKey"`
	ListenPort int32  `json:"listenPort"`
	Interface  string `json:"interface"`
}

// WireGuardInterfaceOf is the pod's WireGuard device of a key slot (0 or 1).
func WireGuardInterfaceOf(slot int) string { return fmt.Sprintf("wg%d", slot) }

// CurrentInterface is the device of the current key.
func (w *WireGuard) CurrentInterface() string {
	if w.Interface == "" {
		return WireGuardInterfaceOf(0)
	}
	return w.Interface
}

// slotOfPort is the key slot a published port belongs to.
func slotOfPort(wg *v1alpha1.WireGuardSpec, port int32) int {
	if port == v1alpha1.WireGuardKeyPort(wg, 1) {
		return 1
	}
	return 0
}

// WireGuardPeer is one client peer.
type WireGuardPeer struct {
	Name       string   `json:"name"`
	PublicKey  string   `json:"publicKey"`
	AllowedIPs []string `json:"allowedIPs"`
	// EndpointAddress and EndpointPort are empty and 0 for a roaming peer.
	EndpointAddress     string `json:"endpointAddress,omitempty"`
	EndpointPort        int32  `json:"endpointPort,omitempty"`
	PersistentKeepalive int32  `json:"persistentKeepalive,omitempty"`
}

// Endpoint returns "address:port", or "" for a roaming peer.
func (p WireGuardPeer) Endpoint() string {
	if p.EndpointAddress == "" {
		return ""
	}
	return fmt.Sprintf("%s:%d", p.EndpointAddress, p.EndpointPort)
}

// buildWireGuard renders the WireGuard part of a config from the spec and the published
// public key.
func buildWireGuard(wg *v1alpha1.WireGuardSpec, st *v1alpha1.GatewayStatus) (*WireGuard, error) {
	if st.WireGuard == nil || st.WireGuard.PublicKey == "" {
		return nil, incompletef("status.wireguard.publicKey is not set yet")
	}
	port := st.WireGuard.ListenPort
	if port == 0 {
		port = v1alpha1.WireGuardKeyPort(wg, 0)
	}
	out := &WireGuard{ListenPort: port, PublicKey: st.WireGuard.PublicKey, Interface: WireGuardInterfaceOf(slotOfPort(wg, port)), Peers: []WireGuardPeer{}}
	if prev := st.WireGuard.PreviousPublicKey; prev != "" && st.WireGuard.PreviousListenPort != 0 {
		out.Previous = &WireGuardKey{PublicKey: prev, ListenPort: st.WireGuard.PreviousListenPort,
			Interface: WireGuardInterfaceOf(slotOfPort(wg, st.WireGuard.PreviousListenPort))}
	}
	for _, p := range wg.Peers {
		cp := WireGuardPeer{Name: p.Name, PublicKey: p.PublicKey, AllowedIPs: append([]string(nil), p.AllowedIPs...), PersistentKeepalive: p.PersistentKeepalive}
		if p.Endpoint != nil {
			cp.EndpointAddress, cp.EndpointPort = p.Endpoint.Address, v1alpha1.WireGuardEndpointPort(p.Endpoint)
		}
		out.Peers = append(out.Peers, cp)
	}
	return out, nil
}

// CheckKey reports whether k is a base64 WireGuard (Curve25519) key as wg(8) prints it.
// Errors never quote the value: the same check guards private keys.
func CheckKey(k string) error {
	b, err := base64.StdEncoding.DecodeString(k)
	if err != nil || len(b) != 32 || base64.StdEncoding.EncodeToString(b) != k {
		return fmt.Errorf("not a WireGuard key (44 characters of base64 encoding 32 bytes)")
	}
	return nil
}

// validateWireGuard checks a WireGuard gateway's interface and peers, adding their
// allowed IPs to allSubnets and their names to remotes.
func validateWireGuard(cfg *Config, svc, subnet netip.Prefix, pol addrpolicy.Policy, allSubnets *[]netip.Prefix, remotes map[string][]string) error {
	wg := cfg.WireGuard
	if wg == nil {
		return invalidf("protocol wireguard without a wireguard section")
	}
	if len(cfg.Tunnels) != 0 {
		return invalidf("protocol wireguard with IPsec tunnels")
	}
	if wg.ListenPort < 1 || wg.ListenPort > 65535 {
		return invalidf("wireguard listen port %d out of range", wg.ListenPort)
	}
	if err := CheckKey(wg.PublicKey); err != nil {
		return invalidf("wireguard public key: %v", err)
	}
	slots := map[string]bool{WireGuardInterfaceOf(0): true, WireGuardInterfaceOf(1): true}
	if wg.Interface != "" && !slots[wg.Interface] {
		return invalidf("wireguard interface %q is not a key slot's (wg0 or wg1)", wg.Interface)
	}
	if p := wg.Previous; p != nil {
		if err := CheckKey(p.PublicKey); err != nil {
			return invalidf("wireguard previous public key: %v", err)
		}
		if p.PublicKey == wg.PublicKey {
			return invalidf("wireguard previous public key is the current one")
		}
		if p.ListenPort < 1 || p.ListenPort > 65535 || p.ListenPort == wg.ListenPort {
			return invalidf("wireguard previous key's listen port %d out of range or the current key's", p.ListenPort)
		}
		if !slots[p.Interface] || p.Interface == wg.CurrentInterface() {
			return invalidf("wireguard previous key's interface %q is not the other key slot's", p.Interface)
		}
	}
	if len(wg.Peers) == 0 {
		return invalidf("no wireguard peers")
	}
	keys := map[string]string{}
	for _, p := range wg.Peers {
		if err := checkName("wireguard peer name", p.Name, maxTunnelNameLen); err != nil {
			return err
		}
		if remotes[p.Name] != nil {
			return invalidf("duplicate wireguard peer %q", p.Name)
		}
		if err := CheckKey(p.PublicKey); err != nil {
			return invalidf("wireguard peer %s: public key: %v", p.Name, err)
		}
		if other, ok := keys[p.PublicKey]; ok {
			return invalidf("wireguard peers %s and %s share a public key", other, p.Name)
		}
		if p.PublicKey == wg.PublicKey || wg.Previous != nil && p.PublicKey == wg.Previous.PublicKey {
			return invalidf("wireguard peer %s has the gateway's own public key", p.Name)
		}
		keys[p.PublicKey] = p.Name
		var ep netip.Addr
		if p.EndpointAddress != "" || p.EndpointPort != 0 {
			a, err := parseIPv4("wireguard peer "+p.Name+" endpoint", p.EndpointAddress)
			if err != nil {
				return err
			}
			if p.EndpointPort < 1 || p.EndpointPort > 65535 {
				return invalidf("wireguard peer %s: endpoint port %d out of range", p.Name, p.EndpointPort)
			}
			if err := pol.PeerAddress(a); err != nil {
				return invalidf("wireguard peer %s: endpoint %s %v", p.Name, a, err)
			}
			ep = a
		}
		if p.PersistentKeepalive < 0 || p.PersistentKeepalive > 65535 {
			return invalidf("wireguard peer %s: persistent keepalive %d out of range", p.Name, p.PersistentKeepalive)
		}
		if len(p.AllowedIPs) == 0 {
			return invalidf("wireguard peer %s: no allowed IPs", p.Name)
		}
		for _, s := range p.AllowedIPs {
			pfx, err := parsePrefix4("wireguard peer "+p.Name+" allowed IP", s)
			if err != nil {
				return err
			}
			if pfx.Bits() == 0 || pfx.Overlaps(svc) || pfx.Overlaps(subnet) {
				return invalidf("wireguard peer %s: allowed IP %s is the whole address space or overlaps the service CIDR or the gateway subnet", p.Name, pfx)
			}
			if err := pol.ClientSubnet(pfx); err != nil {
				return invalidf("wireguard peer %s: allowed IP %s %v", p.Name, pfx, err)
			}
			if ep.IsValid() && pfx.Contains(ep) {
				return invalidf("wireguard peer %s: endpoint %s lies inside its allowed IP %s", p.Name, ep, pfx)
			}
			for _, o := range *allSubnets {
				if o.Overlaps(pfx) {
					return invalidf("remote subnets %s and %s overlap", o, pfx)
				}
			}
			*allSubnets = append(*allSubnets, pfx)
		}
		remotes[p.Name] = p.AllowedIPs
	}
	return nil
}
