package gateway

import (
	"fmt"
	"net/netip"
	"strings"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
)

// wireGuardIngressRules is a WireGuard gateway's security-group ingress: its UDP listen
// port from each peer's fixed endpoint only, and from anywhere only while some peer has
// no fixed endpoint (a roaming peer's address is learned from its handshakes, so no
// narrower rule can admit it); then the reverse exposures' rules from the internal
// sources, as for IPsec. The note names the roaming peers when the port is open to
// everyone, for the condition message.
func wireGuardIngressRules(spec *v1alpha1.GatewaySpec, wg *v1alpha1.WireGuardSpec, internal []netip.Prefix) ([]ruleKey, string) {
	set := map[ruleKey]bool{}
	port := int(v1alpha1.WireGuardListenPort(wg))
	var roaming []string
	for _, p := range wg.Peers {
		if p.Endpoint == nil {
			roaming = append(roaming, p.Name)
			continue
		}
		a, err := netip.ParseAddr(p.Endpoint.Address)
		if err != nil || !a.Is4() {
			continue
		}
		set[ruleKey{Protocol: openstack.ProtocolUDP, Min: port, Max: port, Remote: netip.PrefixFrom(a, 32).String()}] = true
	}
	note := ""
	if len(roaming) > 0 {
		set[ruleKey{Protocol: openstack.ProtocolUDP, Min: port, Max: port, Remote: "0.0.0.0/0"}] = true
		note = fmt.Sprintf("WARNING: UDP %d is open to every source address because peer(s) %s have no fixed endpoint; give each peer spec.wireguard.peers[].endpoint to admit only those addresses",
			port, strings.Join(roaming, ", "))
	}
	for _, k := range DesiredIngressRules(&v1alpha1.GatewaySpec{ReverseExposures: spec.ReverseExposures}, internal) {
		set[k] = true
	}
	return sortedRules(set), note
}
