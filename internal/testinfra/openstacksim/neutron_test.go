package openstacksim

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/attributestags"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/external"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/extraroutes"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/rbacpolicies"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"
)

func TestSeedExampleEstate(t *testing.T) {
	s := startEstate(t)
	transit, ok := s.NetworkByName("vpn-transit")
	if !ok || len(transit.Subnets) != 1 {
		t.Fatalf("vpn-transit = %+v", transit)
	}
	sub, _ := s.SubnetByName("vpn-transit-subnet")
	if sub.CIDR != "10.254.0.0/24" || sub.GatewayIP != "10.254.0.1" {
		t.Fatalf("transit subnet = %+v", sub)
	}
	vpn01, ok := s.RouterByName("shoot--services--vpn01")
	if !ok || vpn01.GatewayInfo == nil {
		t.Fatalf("vpn01 router = %+v", vpn01)
	}
	public, _ := s.NetworkByName("public")
	if vpn01.GatewayInfo.NetworkID != public.ID || !public.External {
		t.Fatalf("vpn01 gateway %+v, public %+v", vpn01.GatewayInfo, public)
	}
	var legs []string
	for _, id := range s.RouterInterfaces(vpn01.ID) {
		p, _ := s.Port(id)
		legs = append(legs, p.FixedIPs[0].IPAddress)
		if p.DeviceID != vpn01.ID || p.DeviceOwner != OwnerRouterInterface {
			t.Fatalf("router port %+v", p)
		}
	}
	if !slices.Contains(legs, "10.254.0.1") {
		t.Fatalf("vpn01 legs %v", legs)
	}
	var dhcp bool
	for _, p := range s.Ports() {
		if p.DeviceOwner == OwnerDHCP && p.FixedIPs[0].IPAddress == "10.254.0.2" {
			dhcp = true
		}
	}
	if !dhcp {
		t.Fatal("no DHCP port at 10.254.0.2")
	}
	if _, ok := s.RouterByName("shoot--services--svc01"); !ok {
		t.Fatal("no svc01 router")
	}
	diehl, _ := s.RouterByName("shoot--diehl--diehl01")
	cust, _ := s.ProjectByName("customer-diehl")
	if diehl.ProjectID != cust.ID {
		t.Fatalf("diehl01 router project %q, want %q", diehl.ProjectID, cust.ID)
	}
	servers := s.Servers()
	if len(servers) != 3 || servers[0].ID != "11111111-1111-4111-8111-111111111111" || servers[0].Name != "vpn01-worker-a" {
		t.Fatalf("servers = %+v", servers)
	}
	for _, name := range []string{"vpn-operator", "customer-diehl", "admin"} {
		if id, secret, ok := s.AppCredential(name); !ok || id == "" || len(secret) < 32 {
			t.Fatalf("credential %s missing", name)
		}
	}
	// IDs are derived from names: a second run has the same ones.
	s2 := startEstate(t)
	if n2, _ := s2.NetworkByName("vpn-transit"); n2.ID != transit.ID {
		t.Fatalf("network ID not stable: %s vs %s", n2.ID, transit.ID)
	}
	// Secrets are not.
	_, sec1, _ := s.AppCredential("vpn-operator")
	_, sec2, _ := s2.AppCredential("vpn-operator")
	if sec1 == sec2 {
		t.Fatal("generated secrets repeat across runs")
	}
}

func TestSeedRefusesInconsistencies(t *testing.T) {
	for name, y := range map[string]string{
		"unknown field":   "projects: [{name: a, colour: red}]",
		"unknown project": "networks: [{name: n, project: nope}]",
		"ip conflict": `projects: [{name: a}]
networks: [{name: n, project: a, subnets: [{name: s, cidr: 10.0.0.0/24}], ports: [{name: p1, fixedIP: 10.0.0.5}, {name: p2, fixedIP: 10.0.0.5}]}]`,
		"bad route": `projects: [{name: a}]
networks: [{name: n, project: a, subnets: [{name: s, cidr: 10.0.0.0/24}]}]
routers: [{name: r, project: a, interfaces: [{subnet: s}], routes: [{destination: 10.9.0.0/16, nexthop: 192.0.2.1}]}]`,
	} {
		t.Run(name, func(t *testing.T) {
			seed, err := ParseSeed([]byte(y))
			if err == nil {
				var s *Server
				s, err = Start(seed)
				if s != nil {
					s.Close()
				}
			}
			if err == nil {
				t.Fatal("seed accepted")
			}
		})
	}
}

func TestPortAddressAllocationAndConflicts(t *testing.T) {
	s := startEstate(t)
	c := login(t, s, "vpn-operator")
	transit, _ := s.NetworkByName("vpn-transit")
	sub, _ := s.SubnetByName("vpn-transit-subnet")

	p := must[*ports.Port](t)(ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: transit.ID, Name: "gw"}).Extract())
	if len(p.FixedIPs) != 1 || p.FixedIPs[0].IPAddress != "10.254.0.3" || p.FixedIPs[0].SubnetID != sub.ID {
		t.Fatalf("first free address should be .3 (skipping .0, router .1, DHCP .2): %+v", p.FixedIPs)
	}
	if !strings.HasPrefix(p.MACAddress, "fa:16:3e:") || len(p.MACAddress) != 17 {
		t.Fatalf("mac %q", p.MACAddress)
	}
	op, _ := s.ProjectByName("vpn-operator")
	if p.ProjectID != op.ID || p.TenantID != op.ID || p.Status != "DOWN" || len(p.SecurityGroups) != 1 {
		t.Fatalf("port %+v", p)
	}

	_, err := ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: transit.ID,
		FixedIPs: []ports.IP{{SubnetID: sub.ID, IPAddress: "10.254.0.3"}}}).Extract()
	wantErr(t, err, 409, "IpAddressAlreadyAllocated")
	_, err = ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: transit.ID,
		FixedIPs: []ports.IP{{IPAddress: "10.254.0.255"}}}).Extract()
	wantErr(t, err, 400, "InvalidIpForSubnet")
	_, err = ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: transit.ID,
		FixedIPs: []ports.IP{{IPAddress: "10.99.0.4"}}}).Extract()
	wantErr(t, err, 400, "InvalidIpForNetwork")

	pinned := must[*ports.Port](t)(ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: transit.ID,
		FixedIPs: []ports.IP{{SubnetID: sub.ID, IPAddress: "10.254.0.20"}}, SecurityGroups: &[]string{}}).Extract())
	if pinned.FixedIPs[0].IPAddress != "10.254.0.20" || len(pinned.SecurityGroups) != 0 {
		t.Fatalf("pinned %+v", pinned)
	}
	// Deleting frees the address for the next allocation.
	ok(t, ports.Delete(ctx(), c.network, p.ID).ExtractErr())
	again := must[*ports.Port](t)(ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: transit.ID}).Extract())
	if again.FixedIPs[0].IPAddress != "10.254.0.3" {
		t.Fatalf("freed address not reused: %+v", again.FixedIPs)
	}
	wantErr(t, ports.Get(ctx(), c.network, p.ID).Err, 404, "PortNotFound")
}

func TestSmallSubnetExhaustsWithoutBroadcast(t *testing.T) {
	s := startEstate(t)
	c := login(t, s, "vpn-operator")
	n := must[*networks.Network](t)(networks.Create(ctx(), c.network, networks.CreateOpts{Name: "tiny"}).Extract())
	sn := must[*subnets.Subnet](t)(subnets.Create(ctx(), c.network, subnets.CreateOpts{NetworkID: n.ID, CIDR: "192.168.7.0/29", IPVersion: 4}).Extract())
	if sn.GatewayIP != "192.168.7.1" {
		t.Fatalf("default gateway %q", sn.GatewayIP)
	}
	var got []string
	for {
		p, err := ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: n.ID}).Extract()
		if err != nil {
			wantErr(t, err, 409, "IpAddressGenerationFailure")
			break
		}
		got = append(got, p.FixedIPs[0].IPAddress)
	}
	want := []string{"192.168.7.2", "192.168.7.3", "192.168.7.4", "192.168.7.5", "192.168.7.6"}
	if !slices.Equal(got, want) {
		t.Fatalf("allocated %v, want %v", got, want)
	}
	wantErr(t, networks.Delete(ctx(), c.network, n.ID).ExtractErr(), 409, "NetworkInUse")
}

func TestPortTagsFiltersAndUpdates(t *testing.T) {
	s := startEstate(t)
	c := login(t, s, "vpn-operator")
	transit, _ := s.NetworkByName("vpn-transit")
	mk := func(name string, tags ...string) *ports.Port {
		p := must[*ports.Port](t)(ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: transit.ID, Name: name}).Extract())
		if len(tags) > 0 {
			got := must[[]string](t)(attributestags.ReplaceAll(ctx(), c.network, "ports", p.ID, attributestags.ReplaceAllOpts{Tags: tags}).Extract())
			if !slices.Equal(got, tags) {
				t.Fatalf("tags %v", got)
			}
		}
		return p
	}
	a := mk("a", "bnerd.net/managed-by=vpn-operator", "bnerd.net/gateway=ns1/gw1")
	b := mk("b", "bnerd.net/managed-by=vpn-operator", "bnerd.net/gateway=ns2/gw2")
	mk("c")

	ids := func(o ports.ListOpts) []string {
		ps := must[[]ports.Port](t)(extractPorts(c, o))
		var out []string
		for _, p := range ps {
			out = append(out, p.ID)
		}
		return out
	}
	if got := ids(ports.ListOpts{Tags: "bnerd.net/managed-by=vpn-operator,bnerd.net/gateway=ns1/gw1"}); !slices.Equal(got, []string{a.ID}) {
		t.Fatalf("tags filter: %v", got)
	}
	if got := ids(ports.ListOpts{TagsAny: "bnerd.net/gateway=ns1/gw1,bnerd.net/gateway=ns2/gw2"}); !slices.Equal(got, []string{a.ID, b.ID}) {
		t.Fatalf("tags-any filter: %v", got)
	}
	if got := ids(ports.ListOpts{FixedIPs: []ports.FixedIPOpts{{IPAddress: b.FixedIPs[0].IPAddress}}}); !slices.Equal(got, []string{b.ID}) {
		t.Fatalf("fixed_ips filter: %v", got)
	}
	if got := ids(ports.ListOpts{Name: "b", NetworkID: transit.ID}); !slices.Equal(got, []string{b.ID}) {
		t.Fatalf("name filter: %v", got)
	}
	if got := ids(ports.ListOpts{DeviceOwner: "network:dhcp"}); len(got) != 1 {
		t.Fatalf("device_owner filter: %v", got)
	}

	// Single-tag add/remove keep the index right.
	ok(t, attributestags.Add(ctx(), c.network, "ports", b.ID, "extra").ExtractErr())
	if got := ids(ports.ListOpts{Tags: "extra"}); !slices.Equal(got, []string{b.ID}) {
		t.Fatalf("after add: %v", got)
	}
	if exists, err := attributestags.Confirm(ctx(), c.network, "ports", b.ID, "extra").Extract(); err != nil || !exists {
		t.Fatalf("confirm = %v, %v", exists, err)
	}
	ok(t, attributestags.Delete(ctx(), c.network, "ports", b.ID, "extra").ExtractErr())
	if got := ids(ports.ListOpts{Tags: "extra"}); len(got) != 0 {
		t.Fatalf("after delete: %v", got)
	}
	wantErr(t, attributestags.Delete(ctx(), c.network, "ports", b.ID, "extra").ExtractErr(), 404, "TagNotFound")

	// Allowed address pairs and device fields via update.
	pairs := []ports.AddressPair{{IPAddress: "100.64.3.0/24"}}
	dev := "some-device"
	up := must[*ports.Port](t)(ports.Update(ctx(), c.network, a.ID, ports.UpdateOpts{AllowedAddressPairs: &pairs, DeviceID: &dev}).Extract())
	if len(up.AllowedAddressPairs) != 1 || up.AllowedAddressPairs[0].MACAddress != a.MACAddress || up.DeviceID != dev {
		t.Fatalf("update %+v", up)
	}
	if got := ids(ports.ListOpts{DeviceID: dev}); !slices.Equal(got, []string{a.ID}) {
		t.Fatalf("device_id filter: %v", got)
	}
	// If-Match with a stale revision is refused.
	stale := up.RevisionNumber - 1
	name := "x"
	_, err := ports.Update(ctx(), c.network, a.ID, ports.UpdateOpts{Name: &name, RevisionNumber: &stale}).Extract()
	wantErr(t, err, 412, "RevisionNumberConstraintFailed")
}

func TestSecurityGroupsAndDuplicateRule(t *testing.T) {
	s := startEstate(t)
	c := login(t, s, "vpn-operator")
	g := must[*groups.SecGroup](t)(groups.Create(ctx(), c.network, groups.CreateOpts{Name: "gw-ike"}).Extract())
	if len(g.Rules) != 2 {
		t.Fatalf("new group should carry the two default egress rules: %+v", g.Rules)
	}
	ok(t, attributestags.Add(ctx(), c.network, "security-groups", g.ID, "bnerd.net/gateway=ns/gw").ExtractErr())
	opts := rules.CreateOpts{SecGroupID: g.ID, Direction: rules.DirIngress, EtherType: rules.EtherType4,
		Protocol: rules.ProtocolUDP, PortRangeMin: 500, PortRangeMax: 500, RemoteIPPrefix: "198.51.100.7/32"}
	r := must[*rules.SecGroupRule](t)(rules.Create(ctx(), c.network, opts).Extract())
	if r.PortRangeMin != 500 || r.RemoteIPPrefix != "198.51.100.7/32" || r.Protocol != "udp" {
		t.Fatalf("rule %+v", r)
	}
	_, err := rules.Create(ctx(), c.network, opts).Extract()
	wantErr(t, err, 409, "SecurityGroupRuleExists")
	// The same rule written with a protocol number and a bare address is
	// still a duplicate.
	opts.Protocol, opts.RemoteIPPrefix = "17", "198.51.100.7"
	_, err = rules.Create(ctx(), c.network, opts).Extract()
	wantErr(t, err, 409, "SecurityGroupRuleExists")
	_, err = rules.Create(ctx(), c.network, rules.CreateOpts{SecGroupID: g.ID, Direction: rules.DirIngress,
		EtherType: rules.EtherType4, PortRangeMin: 10, PortRangeMax: 20}).Extract()
	wantErr(t, err, 400, "SecurityGroupProtocolRequiredWithPorts")

	list, err := groups.List(c.network, groups.ListOpts{Tags: "bnerd.net/gateway=ns/gw"}).AllPages(ctx())
	ok(t, err)
	gs := must[[]groups.SecGroup](t)(groups.ExtractGroups(list))
	if len(gs) != 1 || gs[0].ID != g.ID || len(gs[0].Rules) != 3 {
		t.Fatalf("list by tag: %+v", gs)
	}
	// In use by a port: refused.
	transit, _ := s.NetworkByName("vpn-transit")
	p := must[*ports.Port](t)(ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: transit.ID, SecurityGroups: &[]string{g.ID}}).Extract())
	wantErr(t, groups.Delete(ctx(), c.network, g.ID).ExtractErr(), 409, "SecurityGroupInUse")
	ok(t, ports.Delete(ctx(), c.network, p.ID).ExtractErr())
	ok(t, rules.Delete(ctx(), c.network, r.ID).ExtractErr())
	ok(t, groups.Delete(ctx(), c.network, g.ID).ExtractErr())
	// Another project cannot see it.
	cust := login(t, s, "customer-diehl")
	wantErr(t, groups.Get(ctx(), cust.network, g.ID).Err, 404, "SecurityGroupNotFound")
}

// TestCrossTenantLeg walks the ClusterLink cross-tenant flow: share the
// transit network, create the customer's leg, attach it, route to it.
func TestCrossTenantLeg(t *testing.T) {
	s := startEstate(t)
	op := login(t, s, "vpn-operator")
	cu := login(t, s, "customer-diehl")
	admin := login(t, s, "admin")
	transit, _ := s.NetworkByName("vpn-transit")
	sub, _ := s.SubnetByName("vpn-transit-subnet")
	custProj, _ := s.ProjectByName("customer-diehl")
	diehl, _ := s.RouterByName("shoot--diehl--diehl01")
	vpn01, _ := s.RouterByName("shoot--services--vpn01")

	// Before the share the customer cannot use (or see) the network.
	legOpts := ports.CreateOpts{NetworkID: transit.ID, Name: "leg", FixedIPs: []ports.IP{{SubnetID: sub.ID, IPAddress: "10.254.0.10"}}}
	_, err := ports.Create(ctx(), cu.network, legOpts).Extract()
	wantErr(t, err, 404, "NetworkNotFound")
	wantErr(t, networks.Get(ctx(), cu.network, transit.ID).Err, 404, "NetworkNotFound")

	// The customer may not share the operator's network (Neutron's validation says
	// so as bad input); nobody but an admin may share with everyone.
	share := rbacpolicies.CreateOpts{Action: rbacpolicies.ActionAccessShared, ObjectType: "network", ObjectID: transit.ID, TargetTenant: custProj.ID}
	_, err = rbacpolicies.Create(ctx(), cu.network, share).Extract()
	wantErr(t, err, 400, "InvalidInput")
	wild := share
	wild.TargetTenant = "*"
	_, err = rbacpolicies.Create(ctx(), op.network, wild).Extract()
	wantErr(t, err, 403, "PolicyNotAuthorized")

	pol := must[*rbacpolicies.RBACPolicy](t)(rbacpolicies.Create(ctx(), op.network, share).Extract())
	if pol.TargetTenant != custProj.ID || pol.ObjectID != transit.ID {
		t.Fatalf("policy %+v", pol)
	}
	_, err = rbacpolicies.Create(ctx(), op.network, share).Extract()
	wantErr(t, err, 409, "DuplicateRbacPolicy")
	// A rule made by the admin is invisible to the operator, and the
	// operator's create conflicts with it all the same.
	adminRule := must[*rbacpolicies.RBACPolicy](t)(rbacpolicies.Create(ctx(), admin.network, rbacpolicies.CreateOpts{
		Action: rbacpolicies.ActionAccessShared, ObjectType: "network", ObjectID: transit.ID, TargetTenant: "someone-else"}).Extract())
	pages, err := rbacpolicies.List(op.network, rbacpolicies.ListOpts{ObjectID: transit.ID}).AllPages(ctx())
	ok(t, err)
	visible := must[[]rbacpolicies.RBACPolicy](t)(rbacpolicies.ExtractRBACPolicies(pages))
	if len(visible) != 1 || visible[0].ID != pol.ID {
		t.Fatalf("operator sees %+v", visible)
	}

	// Now the customer sees the network and its subnet, and makes its leg.
	if n := must[*networks.Network](t)(networks.Get(ctx(), cu.network, transit.ID).Extract()); n.Name != "vpn-transit" {
		t.Fatalf("network %+v", n)
	}
	must[*subnets.Subnet](t)(subnets.Get(ctx(), cu.network, sub.ID).Extract())
	// On a network it does not own the customer may not pick the address; Neutron
	// allocates one.
	_, err = ports.Create(ctx(), cu.network, legOpts).Extract()
	wantErr(t, err, 403, "PolicyNotAuthorized")
	legOpts.FixedIPs = []ports.IP{{SubnetID: sub.ID}}
	leg := must[*ports.Port](t)(ports.Create(ctx(), cu.network, legOpts).Extract())
	if leg.ProjectID != custProj.ID || len(leg.FixedIPs) != 1 {
		t.Fatalf("leg %+v", leg)
	}
	legIP := leg.FixedIPs[0].IPAddress
	// The network owner sees ports on its network, including the customer's.
	if got := must[*ports.Port](t)(ports.Get(ctx(), op.network, leg.ID).Extract()); got.ID != leg.ID {
		t.Fatal("operator cannot see leg")
	}
	// The operator cannot attach its ports to the customer's router: it
	// cannot even see it.
	wantErr(t, routers.Get(ctx(), op.network, diehl.ID).Err, 404, "RouterNotFound")

	info := must[*routers.InterfaceInfo](t)(routers.AddInterface(ctx(), cu.network, diehl.ID, routers.AddInterfaceOpts{PortID: leg.ID}).Extract())
	if info.PortID != leg.ID || info.SubnetID != sub.ID {
		t.Fatalf("interface info %+v", info)
	}
	got, _ := s.Port(leg.ID)
	if got.DeviceID != diehl.ID || got.DeviceOwner != OwnerRouterInterface {
		t.Fatalf("leg after attach: %+v", got)
	}
	// A second leg on the same subnet is refused.
	leg2 := must[*ports.Port](t)(ports.Create(ctx(), cu.network, ports.CreateOpts{NetworkID: transit.ID}).Extract())
	_, err = routers.AddInterface(ctx(), cu.network, diehl.ID, routers.AddInterfaceOpts{PortID: leg2.ID}).Extract()
	wantErr(t, err, 400, "Router already has a port on subnet")
	// A router interface port cannot be deleted through the port API.
	wantErr(t, ports.Delete(ctx(), cu.network, leg.ID).ExtractErr(), 409, "ServicePortInUse")

	// The operator routes the customer's cluster via the leg.
	routes := []routers.Route{{DestinationCIDR: "10.234.0.0/16", NextHop: legIP}}
	r := must[*routers.Router](t)(extraroutes.Add(ctx(), op.network, vpn01.ID, extraroutes.Opts{Routes: &routes}).Extract())
	if len(r.Routes) != 1 || r.Routes[0] != routes[0] {
		t.Fatalf("routes %+v", r.Routes)
	}
	bad := []routers.Route{{DestinationCIDR: "10.9.0.0/16", NextHop: "192.0.2.1"}}
	_, err = extraroutes.Add(ctx(), op.network, vpn01.ID, extraroutes.Opts{Routes: &bad}).Extract()
	wantErr(t, err, 400, "InvalidRoutes")
	self := []routers.Route{{DestinationCIDR: "10.9.0.0/16", NextHop: "10.254.0.1"}}
	_, err = extraroutes.Add(ctx(), op.network, vpn01.ID, extraroutes.Opts{Routes: &self}).Extract()
	wantErr(t, err, 400, "InvalidRoutes")
	// The vpn01 transit leg cannot go while a route needs it.
	vpn01Leg := ""
	for _, id := range s.RouterInterfaces(vpn01.ID) {
		if p, _ := s.Port(id); p.FixedIPs[0].IPAddress == "10.254.0.1" {
			vpn01Leg = id
		}
	}
	_, err = routers.RemoveInterface(ctx(), op.network, vpn01.ID, routers.RemoveInterfaceOpts{PortID: vpn01Leg}).Extract()
	wantErr(t, err, 409, "RouterInterfaceInUseByRoute")

	// Unsharing while the customer's leg uses the network is refused.
	wantErr(t, rbacpolicies.Delete(ctx(), op.network, pol.ID).ExtractErr(), 409, "RbacPolicyInUse")

	// Unwind: route, attachment (which deletes the port, as Neutron does).
	r = must[*routers.Router](t)(extraroutes.Remove(ctx(), op.network, vpn01.ID, extraroutes.Opts{Routes: &routes}).Extract())
	if len(r.Routes) != 0 {
		t.Fatalf("routes after remove %+v", r.Routes)
	}
	must[*routers.InterfaceInfo](t)(routers.RemoveInterface(ctx(), cu.network, diehl.ID, routers.RemoveInterfaceOpts{PortID: leg.ID}).Extract())
	wantErr(t, ports.Get(ctx(), cu.network, leg.ID).Err, 404, "PortNotFound")
	_, err = routers.RemoveInterface(ctx(), cu.network, diehl.ID, routers.RemoveInterfaceOpts{PortID: leg.ID}).Extract()
	wantErr(t, err, 404, "RouterInterfaceNotFound")
	ok(t, ports.Delete(ctx(), cu.network, leg2.ID).ExtractErr())
	ok(t, rbacpolicies.Delete(ctx(), op.network, pol.ID).ExtractErr())
	ok(t, rbacpolicies.Delete(ctx(), admin.network, adminRule.ID).ExtractErr())
	_, err = ports.Create(ctx(), cu.network, legOpts).Extract()
	wantErr(t, err, 404, "NetworkNotFound")
}

func TestProjectScoping(t *testing.T) {
	s := startEstate(t)
	op := login(t, s, "vpn-operator")
	cu := login(t, s, "customer-diehl")
	admin := login(t, s, "admin")
	svc01, _ := s.RouterByName("shoot--services--svc01")
	nodes, _ := s.NetworkByName("shoot--services--vpn01")

	wantErr(t, routers.Get(ctx(), cu.network, svc01.ID).Err, 404, "RouterNotFound")
	_, err := ports.Create(ctx(), cu.network, ports.CreateOpts{NetworkID: nodes.ID}).Extract()
	wantErr(t, err, 404, "NetworkNotFound")
	// The customer's list shows only its own routers.
	pages, err := routers.List(cu.network, routers.ListOpts{}).AllPages(ctx())
	ok(t, err)
	rs := must[[]routers.Router](t)(routers.ExtractRouters(pages))
	if len(rs) != 1 || rs[0].Name != "shoot--diehl--diehl01" {
		t.Fatalf("customer routers %+v", rs)
	}
	// Everyone sees the external network; nobody else's private ones.
	pages, err = networks.List(cu.network, networks.ListOpts{}).AllPages(ctx())
	ok(t, err)
	var names []string
	var nets []struct {
		networks.Network
		external.NetworkExternalExt
	}
	ok(t, networks.ExtractNetworksInto(pages, &nets))
	for _, n := range nets {
		names = append(names, n.Name)
		if n.Name == "public" && !n.External {
			t.Fatal("public not flagged external")
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"public", "shoot--diehl--diehl01"}) {
		t.Fatalf("customer networks %v", names)
	}
	// The admin sees everything.
	must[*routers.Router](t)(routers.Get(ctx(), admin.network, svc01.ID).Extract())
	pages, err = routers.List(admin.network, routers.ListOpts{}).AllPages(ctx())
	ok(t, err)
	if rs := must[[]routers.Router](t)(routers.ExtractRouters(pages)); len(rs) != 3 {
		t.Fatalf("admin routers %d", len(rs))
	}
	_ = op
}

func TestFloatingIPs(t *testing.T) {
	s := startEstate(t)
	c := login(t, s, "vpn-operator")
	public, _ := s.NetworkByName("public")
	transit, _ := s.NetworkByName("vpn-transit")
	nodes, _ := s.NetworkByName("shoot--services--vpn01")
	vpn01, _ := s.RouterByName("shoot--services--vpn01")

	f := must[*floatingips.FloatingIP](t)(floatingips.Create(ctx(), c.network, floatingips.CreateOpts{
		FloatingNetworkID: public.ID, FloatingIP: "203.0.113.50"}).Extract())
	if f.FloatingIP != "203.0.113.50" || f.PortID != "" || f.Status != "DOWN" {
		t.Fatalf("fip %+v", f)
	}
	_, err := floatingips.Create(ctx(), c.network, floatingips.CreateOpts{FloatingNetworkID: public.ID, FloatingIP: "203.0.113.50"}).Extract()
	wantErr(t, err, 409, "IpAddressInUse")
	_, err = floatingips.Create(ctx(), c.network, floatingips.CreateOpts{FloatingNetworkID: transit.ID}).Extract()
	wantErr(t, err, 400, "not a valid external network")
	auto := must[*floatingips.FloatingIP](t)(floatingips.Create(ctx(), c.network, floatingips.CreateOpts{FloatingNetworkID: public.ID}).Extract())
	if auto.FloatingIP == "" || auto.FloatingIP == "203.0.113.1" {
		t.Fatalf("auto fip %q", auto.FloatingIP)
	}
	ok(t, attributestags.Add(ctx(), c.network, "floatingips", f.ID, "bnerd.net/gateway=ns/gw").ExtractErr())

	gw := must[*ports.Port](t)(ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: transit.ID}).Extract())
	portID := gw.ID
	up := must[*floatingips.FloatingIP](t)(floatingips.Update(ctx(), c.network, f.ID, floatingips.UpdateOpts{PortID: &portID}).Extract())
	if up.PortID != gw.ID || up.FixedIP != gw.FixedIPs[0].IPAddress || up.RouterID != vpn01.ID || up.Status != "ACTIVE" {
		t.Fatalf("associated %+v", up)
	}
	// The same fixed IP cannot take a second floating IP.
	_, err = floatingips.Update(ctx(), c.network, auto.ID, floatingips.UpdateOpts{PortID: &portID}).Extract()
	wantErr(t, err, 409, "FloatingIPPortAlreadyAssociated")
	// A network with no router to the external one cannot be reached.
	_ = nodes
	isolated := must[*networks.Network](t)(networks.Create(ctx(), c.network, networks.CreateOpts{Name: "isolated"}).Extract())
	must[*subnets.Subnet](t)(subnets.Create(ctx(), c.network, subnets.CreateOpts{NetworkID: isolated.ID, CIDR: "172.16.0.0/24", IPVersion: 4}).Extract())
	lone := must[*ports.Port](t)(ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: isolated.ID}).Extract())
	loneID := lone.ID
	_, err = floatingips.Update(ctx(), c.network, auto.ID, floatingips.UpdateOpts{PortID: &loneID}).Extract()
	wantErr(t, err, 404, "ExternalGatewayForFloatingIPNotFound")

	for _, o := range []floatingips.ListOpts{{FloatingIP: "203.0.113.50"}, {PortID: gw.ID}, {Tags: "bnerd.net/gateway=ns/gw"}} {
		pages, err := floatingips.List(c.network, o).AllPages(ctx())
		ok(t, err)
		fs := must[[]floatingips.FloatingIP](t)(floatingips.ExtractFloatingIPs(pages))
		if len(fs) != 1 || fs[0].ID != f.ID {
			t.Fatalf("list %+v: %+v", o, fs)
		}
	}
	empty := ""
	down := must[*floatingips.FloatingIP](t)(floatingips.Update(ctx(), c.network, f.ID, floatingips.UpdateOpts{PortID: &empty}).Extract())
	if down.PortID != "" || down.Status != "DOWN" {
		t.Fatalf("disassociated %+v", down)
	}
	ok(t, floatingips.Delete(ctx(), c.network, f.ID).ExtractErr())
	wantErr(t, floatingips.Get(ctx(), c.network, f.ID).Err, 404, "FloatingIPNotFound")
	// The address is free again.
	must[*floatingips.FloatingIP](t)(floatingips.Create(ctx(), c.network, floatingips.CreateOpts{FloatingNetworkID: public.ID, FloatingIP: "203.0.113.50"}).Extract())
}

func TestConcurrentExtraroutesLoseNothing(t *testing.T) {
	s := startEstate(t)
	s.SetMaxRoutes(0)
	c1 := login(t, s, "vpn-operator")
	c2 := login(t, s, "vpn-operator")
	vpn01, _ := s.RouterByName("shoot--services--vpn01")
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for w, c := range []clients{c1, c2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				rt := []routers.Route{{DestinationCIDR: fmt.Sprintf("10.%d.%d.0/24", 100+w, i), NextHop: fmt.Sprintf("10.254.0.%d", 10+i)}}
				if _, err := extraroutes.Add(ctx(), c.network, vpn01.ID, extraroutes.Opts{Routes: &rt}).Extract(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	r, _ := s.Router(vpn01.ID)
	if len(r.Routes) != 100 {
		t.Fatalf("routes = %d, want 100", len(r.Routes))
	}
	for w := 0; w < 2; w++ {
		for i := 0; i < 50; i++ {
			want := Route{Destination: fmt.Sprintf("10.%d.%d.0/24", 100+w, i), NextHop: fmt.Sprintf("10.254.0.%d", 10+i)}
			if !r.HasRoute(want) {
				t.Fatalf("lost route %+v", want)
			}
		}
	}
	// Neutron's max_routes applies to the atomic add as well.
	s.SetMaxRoutes(100)
	more := []routers.Route{{DestinationCIDR: "10.200.0.0/24", NextHop: "10.254.0.99"}}
	_, err := extraroutes.Add(ctx(), c1.network, vpn01.ID, extraroutes.Opts{Routes: &more}).Extract()
	wantErr(t, err, 400, "RoutesExhausted")
	// PUT routes replaces the whole list.
	repl := []routers.Route{{DestinationCIDR: "10.251.0.0/16", NextHop: "10.254.0.3"}}
	got := must[*routers.Router](t)(routers.Update(ctx(), c1.network, vpn01.ID, routers.UpdateOpts{Routes: &repl}).Extract())
	if len(got.Routes) != 1 {
		t.Fatalf("after PUT routes: %+v", got.Routes)
	}
	// Out-of-band removal is visible to the next reader.
	ok(t, s.RemoveRoute(vpn01.ID, "10.251.0.0/16", "10.254.0.3"))
	if r, _ := s.Router(vpn01.ID); len(r.Routes) != 0 {
		t.Fatalf("after RemoveRoute: %+v", r.Routes)
	}
}

func TestRouterInterfaceBySubnet(t *testing.T) {
	s := startEstate(t)
	c := login(t, s, "vpn-operator")
	n := must[*networks.Network](t)(networks.Create(ctx(), c.network, networks.CreateOpts{Name: "extra"}).Extract())
	sn := must[*subnets.Subnet](t)(subnets.Create(ctx(), c.network, subnets.CreateOpts{NetworkID: n.ID, CIDR: "172.20.0.0/24", IPVersion: 4}).Extract())
	svc01, _ := s.RouterByName("shoot--services--svc01")
	info := must[*routers.InterfaceInfo](t)(routers.AddInterface(ctx(), c.network, svc01.ID, routers.AddInterfaceOpts{SubnetID: sn.ID}).Extract())
	p, _ := s.Port(info.PortID)
	if p.FixedIPs[0].IPAddress != "172.20.0.1" || p.DeviceID != svc01.ID {
		t.Fatalf("interface port %+v", p)
	}
	_, err := routers.AddInterface(ctx(), c.network, svc01.ID, routers.AddInterfaceOpts{SubnetID: sn.ID}).Extract()
	wantErr(t, err, 400, "Router already has a port on subnet")
	must[*routers.InterfaceInfo](t)(routers.RemoveInterface(ctx(), c.network, svc01.ID, routers.RemoveInterfaceOpts{SubnetID: sn.ID}).Extract())
	if _, ok := s.Port(info.PortID); ok {
		t.Fatal("interface port survived removal")
	}
}
