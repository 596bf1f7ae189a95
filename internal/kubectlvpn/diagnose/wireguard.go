package diagnose

import (
	"fmt"
	"slices"
	"strings"
	"time"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
)

// checkWireGuardKey reports the gateway's WireGuard identity: the public key the clients
// need, whether the pod's interface uses it, and a rotation in progress.
func (r *run) checkWireGuardKey() {
	const id, title = "gateway.wireguardkey", "WireGuard gateway key published and in use"
	st := r.g.status
	switch {
	case st.WireGuard == nil || st.WireGuard.PublicKey == "":
		r.add(Check{ID: id, Title: title, Status: Fail, Detail: "status.wireguard.publicKey is not set: the operator has not generated the gateway's key yet",
			Fix: "Look at the WireGuardKeyReady condition; the operator must be running.", Runbook: anchor(FindingWireGuardKey)})
	case st.InterfacePublicKey != "" && st.InterfacePublicKey != st.WireGuard.PublicKey:
		r.add(Check{ID: id, Title: title, Status: Warn,
			Detail: fmt.Sprintf("the gateway's interface still uses %s, not the published %s: the pod has not picked up the rotated key yet (a mounted Secret refreshes within about a minute)", st.InterfacePublicKey, st.WireGuard.PublicKey),
			Fix:    "Wait a minute; if it persists, read the wireguard container's log.", Runbook: anchor(FindingWireGuardKey)})
	case st.WireGuard.PreviousPublicKey != "":
		until := ""
		if t := st.WireGuard.PreviousKeyRetiresAt; t != nil {
			until = " or until " + t.UTC().Format(time.RFC3339)
		}
		r.add(Check{ID: id, Title: title, Status: Warn,
			Detail: fmt.Sprintf("key rotation in its overlap: the clients must switch to %s on UDP %d; the previous key %s is still served on UDP %d until every peer has completed a handshake with the new one%s",
				st.WireGuard.PublicKey, st.WireGuard.ListenPort, st.WireGuard.PreviousPublicKey, st.WireGuard.PreviousListenPort, until),
			Fix: fixText(v1alpha1.ReasonKeyRotationPending), Runbook: anchor(v1alpha1.ReasonKeyRotationPending)})
	case st.WireGuard.RetiredPublicKey != "":
		r.add(Check{ID: id, Title: title, Status: Warn,
			Detail: fmt.Sprintf("the previous key %s was retired before every peer had switched to %s on UDP %d: those peers get no handshake until their clients configure it",
				st.WireGuard.RetiredPublicKey, st.WireGuard.PublicKey, st.WireGuard.ListenPort),
			Fix: fixText(v1alpha1.ReasonPreviousKeyRetired), Runbook: anchor(v1alpha1.ReasonPreviousKeyRetired)})
	default:
		r.add(Check{ID: id, Title: title, Status: Pass, Detail: "public key " + st.WireGuard.PublicKey})
	}
}

func fixText(reason string) string {
	f, _ := fixFor(reason)
	return f
}

// isWireGuard: a VPNGateway with protocol wireguard.
func (g *gw) isWireGuard() bool {
	return g.wireguard != nil
}

// handshakeWord names what a peer sends the gateway first, for the checks' details.
func (g *gw) handshakeWord() string {
	if g.isWireGuard() {
		return "WireGuard handshake"
	}
	return "IKE"
}

// tunnelRef is a tunnel or WireGuard peer and how to name its far end.
type tunnelRef struct{ name, peer string }

// tunnels lists the gateway's tunnels, or a WireGuard gateway's peers.
func (g *gw) tunnels() []tunnelRef {
	var out []tunnelRef
	if g.isWireGuard() {
		if g.wireguard != nil {
			for _, p := range g.wireguard.Peers {
				peer := "roaming"
				if p.Endpoint != nil {
					peer = fmt.Sprintf("%s:%d", p.Endpoint.Address, v1alpha1.WireGuardEndpointPort(p.Endpoint))
				}
				out = append(out, tunnelRef{p.Name, peer})
			}
		}
		return out
	}
	for _, t := range g.spec.Tunnels {
		out = append(out, tunnelRef{t.Name, t.Peer.Address})
	}
	return out
}

// checkWireGuardRules: the UDP port of each key the gateway serves (the current key's,
// and the previous key's during a rotation's overlap) is admitted from each peer's
// endpoint (from anywhere while a peer roams).
func (r *run) checkWireGuardRules(id, title string, sg *openstack.SecurityGroup) {
	ports := wireGuardPorts(r.g)
	has := func(port int, remote string) bool {
		return slices.ContainsFunc(sg.Rules, func(rule openstack.SecurityGroupRule) bool {
			return rule.Direction == openstack.DirectionIngress && rule.EtherType == openstack.EtherTypeIPv4 &&
				rule.Protocol == openstack.ProtocolUDP && rule.PortRangeMin == port && rule.PortRangeMax == port && rule.RemoteIPPrefix == remote
		})
	}
	var missing []string
	roaming := false
	if r.g.wireguard != nil {
		for _, port := range ports {
			for _, p := range r.g.wireguard.Peers {
				remote := "0.0.0.0/0"
				if p.Endpoint != nil {
					remote = p.Endpoint.Address + "/32"
				} else {
					roaming = true
				}
				if !has(port, remote) {
					missing = append(missing, fmt.Sprintf("udp/%d from %s (peer %s)", port, remote, p.Name))
				}
			}
		}
	}
	port := ports[0]
	if len(missing) > 0 {
		r.add(Check{ID: id, Title: title, Status: Fail,
			Detail:  fmt.Sprintf("security group %s lacks ingress %s: the peer's handshakes are dropped before the gateway", sg.ID, strings.Join(missing, ", ")),
			Fix:     "Let the operator add the rules again: " + r.nudge(),
			Runbook: anchor(FindingListenPort)})
		return
	}
	if roaming {
		r.add(Check{ID: id, Title: title, Status: Warn,
			Detail:  fmt.Sprintf("%s: udp/%d is open to every address because a peer has no fixed endpoint", sg.ID, port),
			Fix:     fixText(v1alpha1.ReasonListenPortOpen),
			Runbook: anchor(v1alpha1.ReasonListenPortOpen)})
		return
	}
	r.add(Check{ID: id, Title: title, Status: Pass, Detail: fmt.Sprintf("%s: udp/%d from every peer's endpoint", sg.ID, port)})
}

// wireGuardPorts are the UDP ports of the keys the gateway serves, as its status
// publishes them: the current key's first.
func wireGuardPorts(g *gw) []int {
	ports := []int{int(v1alpha1.WireGuardListenPort(g.wireguard))}
	if st := g.status.WireGuard; st != nil && st.ListenPort != 0 {
		ports[0] = int(st.ListenPort)
		if st.PreviousListenPort != 0 && st.PreviousListenPort != st.ListenPort {
			ports = append(ports, int(st.PreviousListenPort))
		}
	}
	return ports
}
