package nat

import (
	"fmt"
	"strings"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// routed are the rules of routed-mode tunnels, as "<chain>\t<rule>" lines.
type routed struct {
	postrouting, forward []string
}

// routedRules renders routed mode: the routed tunnels' subnets are never source-NATed
// (in either direction: exposure targets and reverse-exposure clients see real
// addresses), and plain routed traffic is forwarded only between those subnets and the
// fabric's internal sources; from the client's side only when it came out of the tunnel.
// The subnets are inline sets: they change only with a tunnel's mode, which is a full
// sync, and the rules exist only while a tunnel is routed. The guard is unchanged: the
// routed subnets are peer subnets too, so nothing reaches them except through the tunnel.
func routedRules(m *gatewayconfig.NAT, fromTunnel string) routed {
	var r routed
	if len(m.RoutedSubnets) == 0 {
		return r
	}
	subnets := "{ " + strings.Join(m.RoutedSubnets, ", ") + " }"
	r.postrouting = []string{
		ChainPostrouting + "\t" + fmt.Sprintf("ip saddr %s accept", subnets),
		ChainPostrouting + "\t" + fmt.Sprintf("ip daddr %s accept", subnets),
	}
	if len(m.InternalSources) == 0 {
		// Fail closed: without the fabric's sources nothing is routed.
		return r
	}
	internal := "{ " + strings.Join(m.InternalSources, ", ") + " }"
	r.forward = []string{
		ChainForward + "\t" + fmt.Sprintf("%s ip saddr %s ip daddr %s accept", fromTunnel, subnets, internal),
		ChainForward + "\t" + fmt.Sprintf("ip saddr %s ip daddr %s accept", internal, subnets),
	}
	return r
}
