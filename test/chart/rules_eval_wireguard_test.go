package chart

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// A WireGuard gateway (VPNGateway with protocol wireguard) next to the IPsec one: its pod's
// exporter publishes bnerd_wireguard_* instead of bnerd_ipsec_*.
const (
	branch    = `namespace="tenant-c", gateway="branch", gateway_kind="vpngateway"`
	branchPod = branch + `, job="` + gatewayJob + `", instance="10.1.0.9:9903", pod="branch-gateway-6c8d"`
	hsAge     = "bnerd_wireguard_peer_latest_handshake_age_seconds"
)

// Handshake ages as a scrape every 30 s sees them. noHandshake: the exporter has no age
// for the peer (none with the current key: the series is absent); gone: the series has
// just vanished from the scrape (the interface's state is not reported), which
// Prometheus marks stale.
const (
	noHandshake = -1
	gone        = -2
)

// rekeying is a session carrying traffic: the initiator re-handshakes every two minutes,
// so the ages seen are 5, 35, 65, 95 and then 5 again.
func rekeying(n int) []int { return cycle([]int{5, 35, 65, 95}, n) }

// lateRenewal is a session renewed only when the gateway, as the session's initiator,
// receives a keepalive after 165 s (the client, the responder, sends one every 25 s): the
// age passes 180 s for one scrape in each round, and bnerd_wireguard_peer_up reads 0 then.
func lateRenewal(n int) []int { return cycle([]int{10, 40, 70, 100, 130, 160, 190}, n) }

func cycle(ages []int, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = ages[i%len(ages)]
	}
	return out
}

// silent is a peer whose latest handshake was `from` seconds ago and that makes no more.
func silent(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + 30*i
	}
	return out
}

func repeat(v, n int) []int { return cycle([]int{v}, n) }

func join(parts ...[]int) []int {
	var out []int
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// wgPeer returns a peer's two series as the exporter writes them from the ages:
// bnerd_wireguard_peer_up is 1 while the latest handshake is younger than 180 s.
func wgPeer(peer string, ages []int) []string {
	var age, up []string
	for _, a := range ages {
		switch {
		case a == noHandshake:
			age = append(age, "_")
		case a == gone:
			age = append(age, "stale")
		default:
			age = append(age, strconv.Itoa(a))
		}
		if a >= 0 && a < 180 {
			up = append(up, "1")
		} else {
			up = append(up, "0")
		}
	}
	l := `tunnel="` + peer + `"`
	return []string{
		pod("bnerd_wireguard_peer_up", branchPod, l) + " " + strings.Join(up, " "),
		pod(hsAge, branchPod, l) + " " + strings.Join(age, " "),
	}
}

// healthyWireGuard are the series of a converged WireGuard gateway, for 40 minutes
// (81 scrapes), with two peers: site carries traffic, roamer's session is renewed late.
func healthyWireGuard() []string {
	s := []string{
		op("bnerd_gateway_info", branch, `node="node-2", floating_ip="203.0.113.12"`) + " 1x80",
		op("bnerd_gateway_pod_ready", branch, "") + " 1x80",
		op("bnerd_gateway_tunnel_reported_up", branch, `tunnel="site"`) + " 1x80",
		op("bnerd_gateway_tunnel_reported_up", branch, `tunnel="roamer"`) + " 1x80",
		pod("up", branchPod, "") + " 1x80",
		pod("bnerd_wireguard_up", branchPod, "") + " 1x80",
		pod("bnerd_gateway_nat_apply_errors_total", branchPod, "") + " 0x80",
	}
	s = append(s, wgPeer("site", rekeying(81))...)
	return append(s, wgPeer("roamer", lateRenewal(81))...)
}

// withPeer replaces a peer's two series.
func withPeer(lines []string, peer string, ages []int) []string {
	l := `tunnel="` + peer + `"`
	lines = replace(lines, pod("bnerd_wireguard_peer_up", branchPod, l))
	lines = replace(lines, pod(hsAge, branchPod, l))
	return append(lines, wgPeer(peer, ages)...)
}

func TestWireGuardAlertRulesEvaluated(t *testing.T) {
	base := func() []string {
		s := append([]string{operatorUp + " 1x80"}, healthy(office, officePod)...)
		return append(s, healthyWireGuard()...)
	}

	t.Run("healthy, with a session renewed after 180 s every round: nothing fires", func(t *testing.T) {
		evaluate(t, base(), m("40m")).never(t)
	})

	t.Run("a peer without any handshake fires PeerDown after 5 minutes; one that needs 2 minutes does not", func(t *testing.T) {
		s := withPeer(base(), "site", repeat(noHandshake, 81))
		s = withPeer(s, "roamer", join(repeat(noHandshake, 4), rekeying(77)))
		evaluate(t, s, m("30m")).expect(t, map[time.Duration][]string{
			m("4m30s"): nil,
			m("5m"):    {"BnerdVPNWireGuardPeerDown{tenant-c/branch/site}"},
			m("30m"):   {"BnerdVPNWireGuardPeerDown{tenant-c/branch/site}"},
		})
	})

	t.Run("a handshake stale for 5 minutes fires HandshakeStale, not PeerDown; a lapse of 3.5 minutes does not", func(t *testing.T) {
		// site's last handshake is at minute 4; its age passes 180 s at minute 7.
		s := withPeer(base(), "site", join(rekeying(8), silent(5, 73)))
		// roamer's age is above 180 s from minute 8 to 11:30, then it handshakes again.
		s = withPeer(s, "roamer", join(rekeying(10), silent(5, 14), rekeying(57)))
		evaluate(t, s, m("30m")).expect(t, map[time.Duration][]string{
			m("6m30s"):  nil,
			m("11m30s"): nil,
			m("12m"):    {"BnerdVPNWireGuardHandshakeStale{tenant-c/branch/site}"},
			m("30m"):    {"BnerdVPNWireGuardHandshakeStale{tenant-c/branch/site}"},
		})
	})

	t.Run("interface not reported for 5 minutes fires InterfaceDown and each peer's PeerDown; a 2 minute restart does not", func(t *testing.T) {
		// From minute 5 the wireguard container reports nothing: the exporter writes
		// bnerd_wireguard_up 0, every peer_up 0, and no handshake ages.
		s := replace(base(), pod("bnerd_wireguard_up", branchPod, ""), pod("bnerd_wireguard_up", branchPod, "")+" 1x9 0x70")
		s = withPeer(s, "site", join(rekeying(10), repeat(gone, 71)))
		s = withPeer(s, "roamer", join(lateRenewal(10), repeat(gone, 71)))
		evaluate(t, s, m("30m")).expect(t, map[time.Duration][]string{
			m("9m30s"): nil,
			m("10m"): {"BnerdVPNWireGuardInterfaceDown{tenant-c/branch}",
				"BnerdVPNWireGuardPeerDown{tenant-c/branch/roamer}", "BnerdVPNWireGuardPeerDown{tenant-c/branch/site}"},
		})

		s = replace(base(), pod("bnerd_wireguard_up", branchPod, ""), pod("bnerd_wireguard_up", branchPod, "")+" 1x9 0x3 1x66")
		s = withPeer(s, "site", join(rekeying(10), repeat(gone, 4), rekeying(67)))
		s = withPeer(s, "roamer", join(lateRenewal(10), repeat(gone, 4), rekeying(67)))
		evaluate(t, s, m("40m")).never(t)
	})

	t.Run("an IPsec tunnel down fires only the IPsec alert", func(t *testing.T) {
		s := replace(base(), pod("bnerd_ipsec_tunnel_up", officePod, `tunnel="hq"`), pod("bnerd_ipsec_tunnel_up", officePod, `tunnel="hq"`)+" 0x80")
		s = replace(s, op("bnerd_gateway_tunnel_reported_up", office, `tunnel="hq"`), op("bnerd_gateway_tunnel_reported_up", office, `tunnel="hq"`)+" 0x80")
		evaluate(t, s, m("10m")).expect(t, map[time.Duration][]string{m("5m"): {"BnerdVPNTunnelDown{tenant-a/office/hq}"}})
	})
}
