package gateway

import (
	"fmt"
	"net/netip"
	"strings"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
)

// wireGuardIngressRules is a WireGuard gateway's security-group ingress: the UDP port of
// each key it serves (the current key's, and the previous key's during a rotation's
// overlap) from each peer's fixed endpoint only, and from anywhere only while some peer
// has no fixed endpoint (a roaming peer's address is learned from its handshakes, so no
// narrower rule can admit it); then the reverse exposures' rules from the reverse
// sources (the internal source CIDRs and the ClusterLinks serving the gateway), as for
// IPsec. The note names the roaming peers when the ports are open to everyone, for the
// condition message.
func wireGuardIngressRules(spec *v1alpha1.GatewaySpec, wg *v1alpha1.WireGuardSpec, served []int32, reverse []netip.Prefix) ([]ruleKey, string) {
	set := map[ruleKey]bool{}
	var roaming []string
	var ports []string
	for _, port := range served {
		ports = append(ports, fmt.Sprint(port))
		for _, p := range wg.Peers {
			if p.Endpoint == nil {
				continue
			}
			a, err := netip.ParseAddr(p.Endpoint.Address)
			if err != nil || !a.Is4() {
				continue
			}
			set[ruleKey{Protocol: openstack.ProtocolUDP, Min: int(port), Max: int(port), Remote: netip.PrefixFrom(a, 32).String()}] = true
		}
	}
	for _, p := range wg.Peers {
		if p.Endpoint == nil {
			roaming = append(roaming, p.Name)
		}
	}
	note := ""
	if len(roaming) > 0 {
		for _, port := range served {
			set[ruleKey{Protocol: openstack.ProtocolUDP, Min: int(port), Max: int(port), Remote: "0.0.0.0/0"}] = true
		}
		verb := "is"
		if len(ports) > 1 {
			verb = "are"
		}
		note = fmt.Sprintf("WARNING: UDP %s %s open to every source address because peer(s) %s have no fixed endpoint; give each peer spec.wireguard.peers[].endpoint to admit only those addresses",
			strings.Join(ports, " and "), verb, strings.Join(roaming, ", "))
	}
	for _, k := range desiredIngressRules(&v1alpha1.GatewaySpec{ReverseExposures: spec.ReverseExposures}, nil, reverse) {
		set[k] = true
	}
	return sortedRules(set), note
}

// servedPorts are the UDP ports of the keys the gateway serves, as the key phase derived
// them from the key Secret in this reconcile: the current key's and, during a
// rotation's overlap, the previous key's.
func servedPorts(g *gateway) []int32 {
	st := g.status.WireGuard
	if st == nil || st.ListenPort == 0 {
		return []int32{v1alpha1.WireGuardKeyPort(g.wg, 0)}
	}
	out := []int32{st.ListenPort}
	if st.PreviousListenPort != 0 && st.PreviousListenPort != st.ListenPort {
		out = append(out, st.PreviousListenPort)
	}
	return out
}
