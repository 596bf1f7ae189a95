package peerconfig

import (
	"fmt"
	"net/netip"
	"strings"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// renderWireGuard writes the client's side of one WireGuard peer in wg-quick(8) syntax
// (for `wg setconf`, drop the lines wg(8) does not know). The client's private key never
// leaves the client: the output names the public key the gateway expects, so the
// administrator puts the matching private key in.
func renderWireGuard(in Input) (string, error) {
	ref := fmt.Sprintf("%s %s/%s", in.Kind, in.Namespace, in.Name)
	if in.WireGuard == nil || in.Spec == nil || in.Status == nil {
		return "", fmt.Errorf("%w: %s has no spec.wireguard", gatewayconfig.ErrInvalid, ref)
	}
	var peer *v1alpha1.WireGuardPeer
	var names []string
	for i := range in.WireGuard.Peers {
		names = append(names, in.WireGuard.Peers[i].Name)
		if in.WireGuard.Peers[i].Name == in.Tunnel {
			peer = &in.WireGuard.Peers[i]
		}
	}
	if peer == nil {
		return "", fmt.Errorf("%s has no tunnel %q (its WireGuard peers: %s)", ref, in.Tunnel, strings.Join(names, ", "))
	}
	st := in.Status
	if st.FloatingIP == "" || st.ServiceCIDR == "" || st.WireGuard == nil || st.WireGuard.PublicKey == "" {
		return "", fmt.Errorf("%w: %s has no floating IP, service CIDR or public key in its status yet; wait for WireGuardKeyReady and FloatingIPReady (kubectl vpn diagnose %s -n %s)",
			ErrNotReady, ref, in.Name, in.Namespace)
	}
	fip, err := netip.ParseAddr(st.FloatingIP)
	if err != nil || !fip.Is4() {
		return "", fmt.Errorf("%s: status.floatingIP %q is not an IPv4 address", ref, st.FloatingIP)
	}
	svc, err := netip.ParsePrefix(st.ServiceCIDR)
	if err != nil || !svc.Addr().Is4() {
		return "", fmt.Errorf("%s: status.serviceCIDR %q is not an IPv4 network", ref, st.ServiceCIDR)
	}
	if err := gatewayconfig.CheckKey(st.WireGuard.PublicKey); err != nil {
		return "", fmt.Errorf("%s: status.wireguard.publicKey: %v", ref, err)
	}
	// The current key's port: after an odd number of rotations the gateway's second one.
	port := st.WireGuard.ListenPort
	if port == 0 {
		port = v1alpha1.WireGuardListenPort(in.WireGuard)
	}
	var b strings.Builder
	line := func(s string) { b.WriteString(strings.TrimRight("# "+s, " ") + "\n") }
	line(fmt.Sprintf("Client side of WireGuard peer %s of %s, for wg-quick(8).", peer.Name, ref))
	line(fmt.Sprintf("Gateway: %s:%d (UDP).", fip, port))
	line(fmt.Sprintf("Your networks %s reach the gateway's %s through the tunnel.", strings.Join(peer.AllowedIPs, ", "), svc.Masked()))
	if w := st.WireGuard; w.PreviousPublicKey != "" {
		until := ""
		if w.PreviousKeyRetiresAt != nil {
			until = " until " + w.PreviousKeyRetiresAt.UTC().Format("2006-01-02T15:04:05Z") + " at the latest"
		}
		line(fmt.Sprintf("The gateway's key was rotated: its previous key %s is still served on UDP %d%s; switch to the key and port below.", w.PreviousPublicKey, w.PreviousListenPort, until))
	}
	for _, e := range in.Spec.Exposures {
		for _, a := range st.Exposures {
			if a.Name == e.Name {
				line(fmt.Sprintf("  service %-20s %-15s %s", e.Name, a.VirtualIP, portsText(e.Target.Ports)))
			}
		}
	}
	for _, r := range in.Spec.ReverseExposures {
		if r.Tunnel == peer.Name {
			line(fmt.Sprintf("  our side reaches your %-12s %-15s %s from %s: admit it in your firewall", r.Name, r.Target.Address, portsText(r.Target.Ports), svc.Masked().Addr().Next()))
		}
	}
	b.WriteString("\n[Interface]\n")
	b.WriteString(fmt.Sprintf("# The private key whose public key is %s (spec.wireguard.peers[%s].publicKey).\n", peer.PublicKey, peer.Name))
	b.WriteString("PrivateKey = <this device's private key>\n")
	if peer.Endpoint != nil {
		b.WriteString(fmt.Sprintf("# The gateway expects this device at %s:%d (spec.wireguard.peers[].endpoint), and its\n# security group admits only that address.\n", peer.Endpoint.Address, v1alpha1.WireGuardEndpointPort(peer.Endpoint)))
		b.WriteString(fmt.Sprintf("ListenPort = %d\n", v1alpha1.WireGuardEndpointPort(peer.Endpoint)))
	}
	b.WriteString("\n[Peer]\n")
	b.WriteString(fmt.Sprintf("PublicKey = %s\n", st.WireGuard.PublicKey))
	b.WriteString(fmt.Sprintf("Endpoint = %s:%d\n", fip, port))
	b.WriteString(fmt.Sprintf("AllowedIPs = %s\n", svc.Masked()))
	if peer.Endpoint == nil {
		b.WriteString("# Without a fixed address the gateway cannot reach this device first: keep the NAT\n# mapping open.\n")
		b.WriteString("PersistentKeepalive = 25\n")
	}
	return b.String(), nil
}
