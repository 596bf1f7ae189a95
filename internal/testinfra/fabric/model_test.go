package fabric

import (
	"os/exec"
	"strings"
	"testing"

	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

func yes() *bool { b := true; return &b }
func no() *bool  { b := false; return &b }

// estate is a small cloud: a public network, a transit network with the gateway
// cluster's router, a gateway port attached to server s1 with a floating IP and a
// security group, a port on an unknown server, and a port without port security.
func estate() *Snapshot {
	return &Snapshot{
		Networks: []Network{{ID: "pub", Name: "public", External: true}, {ID: "tr", Name: "vpn-transit"}},
		Subnets: []Subnet{
			{ID: "pub-sn", NetworkID: "pub", CIDR: "203.0.113.0/24", GatewayIP: "203.0.113.1", IPVersion: 4},
			{ID: "tr-sn", NetworkID: "tr", CIDR: "10.254.0.0/24", GatewayIP: "10.254.0.1", IPVersion: 4},
		},
		Routers: []Router{{
			ID: "r1", Name: "vpn01",
			GatewayInfo: &GatewayInfo{NetworkID: "pub", ExternalFixedIPs: []FixedIP{{SubnetID: "pub-sn", IPAddress: "203.0.113.2"}}},
			Routes:      []Route{{DestinationCIDR: "10.251.0.0/16", NextHop: "10.254.0.4"}, {DestinationCIDR: "100.64.0.0/24", NextHop: "10.254.0.3"}},
		}},
		Ports: []Port{
			{ID: "rif", NetworkID: "tr", MACAddress: "fa:16:3e:00:00:01", DeviceOwner: "network:router_interface", DeviceID: "r1",
				FixedIPs: []FixedIP{{SubnetID: "tr-sn", IPAddress: "10.254.0.1"}}},
			{ID: "gwport", NetworkID: "tr", MACAddress: "fa:16:3e:00:00:03", DeviceOwner: "compute:nova", DeviceID: "s1",
				FixedIPs: []FixedIP{{SubnetID: "tr-sn", IPAddress: "10.254.0.3"}}, SecurityGroups: []string{"sg1"},
				AllowedAddressPairs: []AddressPair{{IPAddress: "100.64.0.0/24"}}},
			{ID: "elsewhere", NetworkID: "tr", MACAddress: "fa:16:3e:00:00:09", DeviceOwner: "compute:nova", DeviceID: "s9",
				FixedIPs: []FixedIP{{SubnetID: "tr-sn", IPAddress: "10.254.0.9"}}},
			{ID: "open", NetworkID: "tr", MACAddress: "fa:16:3e:00:00:07", DeviceOwner: "compute:nova", DeviceID: "s2",
				FixedIPs: []FixedIP{{SubnetID: "tr-sn", IPAddress: "10.254.0.7"}}, PortSecurityEnabled: no()},
			{ID: "member", NetworkID: "tr", DeviceOwner: "compute:nova", DeviceID: "s9", SecurityGroups: []string{"sg2"},
				FixedIPs: []FixedIP{{SubnetID: "tr-sn", IPAddress: "10.254.0.8"}}},
		},
		FloatingIPs: []FloatingIP{{ID: "f1", FloatingIP: "203.0.113.5", PortID: "gwport", FixedIP: "10.254.0.3", RouterID: "r1"}},
		SecurityGroups: []SecurityGroup{
			{ID: "sg1", Name: "gateway", Rules: []SecurityGroupRule{
				{Direction: "egress", EtherType: "IPv4"},
				{Direction: "egress", EtherType: "IPv6"},
				{Direction: "ingress", EtherType: "IPv4", Protocol: "udp", PortRangeMin: 500, PortRangeMax: 500, RemoteIPPrefix: "198.51.100.7/32"},
				{Direction: "ingress", EtherType: "IPv4", Protocol: "udp", PortRangeMin: 4500, PortRangeMax: 4500, RemoteIPPrefix: "198.51.100.7/32"},
				{Direction: "ingress", EtherType: "IPv4", Protocol: "tcp", PortRangeMin: 8443, PortRangeMax: 8443, RemoteIPPrefix: "10.251.0.0/16"},
				{Direction: "ingress", EtherType: "IPv4", Protocol: "icmp", RemoteGroupID: "sg2"},
			}},
			{ID: "sg2", Name: "members"},
		},
	}
}

var servers = map[string]string{"s1": "bn-node-a", "s2": "bn-node-b"}

func TestBuildRoutersAndFloatingIPs(t *testing.T) {
	d, err := Build(estate(), servers, "bn-f-")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Routers) != 1 {
		t.Fatalf("routers %+v", d.Routers)
	}
	r := d.Routers[0]
	if r.Namespace != "bn-f-r-"+h8("r1") || len(r.Links) != 1 || r.Links[0].Address != "10.254.0.1/24" || r.Links[0].MAC != "fa:16:3e:00:00:01" ||
		r.Links[0].Bridge != bridgeName("tr") {
		t.Errorf("router interface %+v", r.Links)
	}
	if r.Gateway == nil || r.Gateway.Address != "203.0.113.2/24" || r.Gateway.Bridge != bridgeName("pub") || r.DefaultGW != "203.0.113.1" {
		t.Errorf("router gateway %+v via %s", r.Gateway, r.DefaultGW)
	}
	if len(r.Routes) != 2 || r.Routes[0].DestinationCIDR != "10.251.0.0/16" {
		t.Errorf("extra routes %+v", r.Routes)
	}
	if len(r.FloatingIPs) != 1 || r.FloatingIPs[0] != "203.0.113.5/32" {
		t.Errorf("floating IPs on the gateway leg %v", r.FloatingIPs)
	}
	for _, want := range []string{
		"ip daddr 203.0.113.5 dnat to 10.254.0.3",
		`oifname "` + gatewayLink("r1") + `" ip saddr 10.254.0.3 snat to 203.0.113.5`,
		`oifname "` + gatewayLink("r1") + `" ip saddr != 203.0.113.2 snat to 203.0.113.2`,
	} {
		if !strings.Contains(r.NAT, want) {
			t.Errorf("NAT lacks %q:\n%s", want, r.NAT)
		}
	}
	// The floating IP's SNAT comes before the router's own: a chain takes the first match.
	if strings.Index(r.NAT, "snat to 203.0.113.5") > strings.Index(r.NAT, "snat to 203.0.113.2") {
		t.Errorf("the router's SNAT shadows the floating IP's:\n%s", r.NAT)
	}
	if len(d.Upstream) != 1 || d.Upstream[0].Address != "203.0.113.1/24" {
		t.Errorf("upstream %+v", d.Upstream)
	}
	// Without enable_snat only the floating IPs are translated.
	s := estate()
	s.Routers[0].GatewayInfo.EnableSNAT = no()
	d, _ = Build(s, servers, "bn-f-")
	if strings.Contains(d.Routers[0].NAT, "snat to 203.0.113.2") {
		t.Errorf("enable_snat=false still SNATs:\n%s", d.Routers[0].NAT)
	}
}

// Only ports Nova attached to a server of ours appear, in that server's node, with the
// port's MAC; a port on another server does not.
func TestBuildVMPorts(t *testing.T) {
	d, err := Build(estate(), servers, "bn-f-")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]VMPort{}
	for _, vp := range d.VMPorts {
		got[vp.PortID] = vp
	}
	if len(got) != 2 {
		t.Fatalf("VM ports %+v", d.VMPorts)
	}
	gw := got["gwport"]
	if gw.Namespace != "bn-node-a" || gw.Link.MAC != "fa:16:3e:00:00:03" || gw.Link.Name != NICName("gwport") || gw.Link.Address != "" ||
		gw.Link.Bridge != bridgeName("tr") || len(gw.Link.Name) > 15 {
		t.Errorf("gateway port %+v", gw)
	}
	if _, ok := got["elsewhere"]; ok {
		t.Error("a port on a server that is no node of ours was plugged")
	}
	// Detach: the port loses its device, and its NIC stand-in is no longer asked for.
	s := estate()
	s.Ports[1].DeviceID, s.Ports[1].DeviceOwner = "", ""
	d, _ = Build(s, servers, "bn-f-")
	for _, vp := range d.VMPorts {
		if vp.PortID == "gwport" {
			t.Error("a detached port is still plugged")
		}
	}
}

func TestBuildSecurityGroups(t *testing.T) {
	d, err := Build(estate(), servers, "bn-f-")
	if err != nil {
		t.Fatal(err)
	}
	sec := d.Security
	peer := fabPeer("gwport")
	for _, want := range []string{
		`oifname "` + peer + `" meta mark set meta mark & 0xffff0000 | 0x1`,
		`iifname "` + peer + `" meta mark set meta mark & 0x0000ffff | 0x10000`,
		"chain to-" + h8("gwport"),
		"ip saddr 198.51.100.7/32 udp dport 500 return",
		"ip saddr 198.51.100.7/32 udp dport 4500 return",
		"ip saddr 10.251.0.0/16 tcp dport 8443 return",
		"ip saddr @g-" + h8("sg2") + " meta l4proto icmp return",
		"elements = { 10.254.0.8 }",
		// Anti-spoofing: only the fixed IP and the allowed address pair may be sources.
		"ip saddr != { 10.254.0.3, 100.64.0.0/24 } counter drop",
		"ct state established,related return",
	} {
		if !strings.Contains(sec, want) {
			t.Errorf("security rules lack %q:\n%s", want, sec)
		}
	}
	// A port without port security is not filtered at all.
	if strings.Contains(sec, fabPeer("open")) {
		t.Errorf("a port without port security is filtered:\n%s", sec)
	}
	// A removed rule is no longer admitted: the chain's final drop applies to it.
	s := estate()
	s.SecurityGroups[0].Rules = s.SecurityGroups[0].Rules[:3]
	d, _ = Build(s, servers, "bn-f-")
	if strings.Contains(d.Security, "udp dport 4500") || !strings.Contains(d.Security, "counter drop\n  }") {
		t.Errorf("the removed rule is still admitted:\n%s", d.Security)
	}
	// IPv6 rules are left out (the fabric is IPv4), and a bad rule is an error.
	if strings.Contains(sec, "ip6") {
		t.Errorf("IPv6 rule rendered:\n%s", sec)
	}
	s = estate()
	s.SecurityGroups[0].Rules = append(s.SecurityGroups[0].Rules, SecurityGroupRule{Direction: "ingress", EtherType: "IPv4", Protocol: "bogus"})
	if _, err := Build(s, servers, "bn-f-"); err == nil {
		t.Error("an unknown protocol was rendered")
	}
}

// The rendered rulesets are valid nftables: checked by nft itself (root), since a
// syntax error would only surface when the fabric applies them.
func TestRulesetsParse(t *testing.T) {
	testenv.NeedRoot(t, "nft --check needs root")
	if _, err := exec.LookPath("nft"); err != nil {
		testenv.SkipDataplane(t, "needs nft (nftables)")
	}
	d, err := Build(estate(), servers, "bn-f-")
	if err != nil {
		t.Fatal(err)
	}
	// A fresh namespace: --check still needs the families' hooks, never loads anything.
	ns := "bn-fabric-test"
	_ = exec.Command("ip", "netns", "del", ns).Run()
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	for name, text := range map[string]string{"security": d.Security, "router NAT": d.Routers[0].NAT} {
		cmd := exec.Command("ip", "netns", "exec", ns, "nft", "--check", "-f", "-")
		cmd.Stdin = strings.NewReader(text)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s ruleset does not parse: %v\n%s\n%s", name, err, out, text)
		}
	}
}
