// Package natbench measures what the gateway's NAT costs per packet as exposures grow,
// against the original design's iptables rules (one DNAT rule per exposure port), side
// by side in one run: a client namespace, the gateway namespace and a server namespace
// joined by veth pairs. The gateway namespace holds either the agent's table, installed
// through the nat package's public API (nat.New, Sync; the client-facing veth plays the
// tunnel interface), or the iptables rules, with 10 or with 10,000 exposure ports.
//
// The host kernel has no ESP, so the packets are plain forwarded traffic entering the
// gateway namespace on the interface the table treats as the tunnel: the NAT lookup per
// new connection, which is what the number of exposures can change, is the same as
// behind a real tunnel; the encryption is not part of it.
//
// Two measurements share the rig. TestNATLeadAtTenThousandExposures (make test, root)
// sends bare SYNs from a raw socket, so what it times is the gateway's per-connection
// work and little else, and asserts the maps' lead. TestNATPacketCost (build tag
// measure, by hand) connects real TCP clients and runs iperf3 for throughput.
package natbench

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"bnerd.net/vpn-operator/internal/agent/nat"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/testinfra/world"
	e2enetns "bnerd.net/vpn-operator/test/e2e/netns"
)

// Names and addresses inside the rig's own namespaces (10.98.0.0/23: outside the
// operator's pool; 100.127.5.0/24 is a gateway's service CIDR as the operator would
// allocate it, inside the namespaces only).
const (
	// tunIf is the gateway's interface towards the client, standing in for the tunnel.
	tunIf = "bnnb-tun"
	// serverIf is the server's interface, whose received packets count deliveries.
	serverIf = "bnnb-s0"

	clientAddr = "10.98.0.2"
	peerSubnet = "10.98.0.0/24"
	gwSNAT     = "10.98.1.1"
	serverAddr = "10.98.1.2"
	serverPort = 8443
	iperfPort  = 5201
	// The gateway's service CIDR: virtual IPs .10-.199, as the operator allocates them.
	serviceNet = "100.127.5."
)

// clientAddrs are the client's addresses: clientAddr and three more, as sources of
// distinct connections.
var clientAddrs = []string{clientAddr, "10.98.0.3", "10.98.0.4", "10.98.0.5"}

// rig is the three namespaces of one test.
type rig struct {
	env                *e2enetns.Env
	client, gw, server string // namespace names
}

// newRig builds client -- gateway -- server namespaces (removed when the test ends).
func newRig(t *testing.T) *rig {
	t.Helper()
	env := e2enetns.New(t, "nb")
	env.AddNS("c", "g", "s")
	r := &rig{env: env, client: env.NS("c"), gw: env.NS("g"), server: env.NS("s")}
	env.Link("c", "bnnb-c0", "g", tunIf)
	env.Link("s", serverIf, "g", "bnnb-g1")
	for _, a := range clientAddrs {
		env.Addr("c", "bnnb-c0", a+"/24")
	}
	env.Must(r.client, "ip", "route", "add", "default", "via", "10.98.0.1")
	env.Addr("g", tunIf, "10.98.0.1/24")
	env.Addr("g", "bnnb-g1", gwSNAT+"/24")
	env.Addr("s", serverIf, serverAddr+"/24")
	// Closed connections leave conntrack at once, so the table does not fill during a
	// run (each run starts from a flushed table).
	env.Must(r.gw, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0",
		"net.netfilter.nf_conntrack_tcp_timeout_close=1", "net.netfilter.nf_conntrack_tcp_timeout_time_wait=1")
	return r
}

// exposures builds n exposure port mappings the way one gateway holds them: virtual IPs
// .10-.199 of its /24, each with as many TCP ports as n needs, all delivered to the
// server. The last mapping is the iptables chain's last rule.
func exposures(n int) *gatewayconfig.NAT {
	m := &gatewayconfig.NAT{
		PeerSubnets:        []string{peerSubnet},
		ForwardSNATAddress: gwSNAT,
		ReverseSNATAddress: serviceNet + "1",
		MSSClamp:           gatewayconfig.MSSClamp{Enabled: true},
	}
	perVIP := (n + 189) / 190
	for i := 0; i < n; i++ {
		vip := fmt.Sprintf("%s%d", serviceNet, 10+i/perVIP)
		port := int32(10000 + i%perVIP)
		m.ExposurePorts = append(m.ExposurePorts, gatewayconfig.PortMapping{VirtualIP: vip, Protocol: "tcp", Port: port,
			Target: serverAddr, TargetPort: serverPort, Owner: fmt.Sprintf("e%d", i)})
	}
	// iperf3's control and data connections, as the last exposure.
	last := m.ExposurePorts[len(m.ExposurePorts)-1]
	m.ExposurePorts = append(m.ExposurePorts, gatewayconfig.PortMapping{VirtualIP: last.VirtualIP, Protocol: "tcp", Port: iperfPort,
		Target: serverAddr, TargetPort: iperfPort, Owner: "iperf"})
	return m
}

// variant is one ruleset under test: the agent's maps or the original design's rules,
// with n exposures.
type variant struct {
	name  string
	n     int
	apply func(*rig, *testing.T, *gatewayconfig.NAT)
}

func (v variant) key() string { return fmt.Sprintf("%s/%d", v.name, v.n) }

// variants are what both measurements compare, in the order each round measures them:
// the 10-exposure maps first, the figure the others' ratios are taken to.
var variants = []variant{
	{"nft maps", 10, (*rig).applyNFT}, {"iptables", 10, (*rig).applyIPTables},
	{"nft maps", 10000, (*rig).applyNFT}, {"iptables", 10000, (*rig).applyIPTables},
}

// worstCase is the exposure matched by the iptables chain's last DNAT rule (before
// iperf3's): a rule list's worst case, a map's any case.
func worstCase(m *gatewayconfig.NAT) gatewayconfig.PortMapping {
	return m.ExposurePorts[len(m.ExposurePorts)-2]
}

// iptablesScript is the original design: one DNAT rule per exposure port in the nat
// table's PREROUTING chain, SNAT, the MSS clamp and the guard.
func iptablesScript(m *gatewayconfig.NAT) string {
	var w strings.Builder
	w.WriteString("*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n")
	for _, pm := range m.ExposurePorts {
		fmt.Fprintf(&w, "-A PREROUTING -i %s -s %s -d %s/32 -p %s --dport %d -j DNAT --to-destination %s:%d\n",
			tunIf, peerSubnet, pm.VirtualIP, pm.Protocol, pm.Port, pm.Target, pm.TargetPort)
	}
	fmt.Fprintf(&w, "-A POSTROUTING -m conntrack --ctstate DNAT -d %s -j SNAT --to-source %s\n", peerSubnet, m.ReverseSNATAddress)
	fmt.Fprintf(&w, "-A POSTROUTING -m conntrack --ctstate DNAT -s %s -j SNAT --to-source %s\n", peerSubnet, m.ForwardSNATAddress)
	w.WriteString("COMMIT\n*mangle\n:FORWARD ACCEPT [0:0]\n-A FORWARD -p tcp --tcp-flags SYN,RST SYN -j TCPMSS --clamp-mss-to-pmtu\nCOMMIT\n")
	fmt.Fprintf(&w, "*filter\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A FORWARD -d %s ! -o %s -j DROP\n-A OUTPUT -d %s ! -o %s -j DROP\n",
		peerSubnet, tunIf, peerSubnet, tunIf)
	fmt.Fprintf(&w, "-A FORWARD -s %s -m conntrack ! --ctstate DNAT -j DROP\nCOMMIT\n", peerSubnet)
	return w.String()
}

// applyNFT installs the agent's table for m in the gateway namespace, through the nat
// package's public API on a thread that lives in that namespace.
func (r *rig) applyNFT(t *testing.T, m *gatewayconfig.NAT) {
	t.Helper()
	err := world.InNS(r.gw, func() error {
		p, err := nat.New(nat.Options{TunnelInterface: tunIf})
		if err != nil {
			return err
		}
		_, err = p.Sync(context.Background(), m)
		return err
	})
	if err != nil {
		t.Fatalf("nft table: %v", err)
	}
}

// applyIPTables installs the original design's rules for m in the gateway namespace.
func (r *rig) applyIPTables(t *testing.T, m *gatewayconfig.NAT) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", r.gw, "iptables-restore")
	cmd.Stdin = strings.NewReader(iptablesScript(m))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("iptables-restore: %v\n%s", err, out)
	}
}

// clear removes both rulesets from the gateway namespace and flushes conntrack.
func (r *rig) clear() {
	_, _ = r.env.Sh(r.gw, "nft", "delete", "table", "ip", nat.DefaultTable)
	for _, tbl := range []string{"nat", "mangle", "filter"} {
		_, _ = r.env.Sh(r.gw, "nft", "delete", "table", "ip", tbl)
	}
	_, _ = r.env.Sh(r.gw, "conntrack", "-F")
}

// ruleCount is how many rules the gateway namespace's nftables holds (iptables-nft
// rules included), as a check that the ruleset under test is the intended one.
func (r *rig) ruleCount(t *testing.T) int {
	out := r.env.Must(r.gw, "nft", "-a", "list", "ruleset")
	return strings.Count(out, "# handle") - strings.Count(out, "table ") - strings.Count(out, "chain ")
}

// median of x (the upper one of an even count).
func median(x []float64) float64 {
	s := append([]float64(nil), x...)
	sort.Float64s(s)
	return s[len(s)/2]
}
