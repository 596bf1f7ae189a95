package harness

import (
	"strings"
	"testing"

	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

// Servers of the example estate (examples/sim-estate.yaml).
const (
	workerA = "11111111-1111-4111-8111-111111111111"
	workerB = "22222222-2222-4222-8222-222222222222"
)

func startEstate(t *testing.T) *openstacksim.Server {
	t.Helper()
	seed, err := openstacksim.LoadSeed("../../examples/sim-estate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := openstacksim.Start(seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func ok(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// ownerTag is a stand-in for the operator's tag convention in the audit tests.
func ownerTag(tags []string) (string, bool) {
	for _, t := range tags {
		if o, ok := strings.CutPrefix(t, "uid="); ok {
			return o, true
		}
	}
	return "", false
}

func TestAuditFindsEveryKindOfLeak(t *testing.T) {
	s := startEstate(t)
	s.SetMaxRoutes(-1)
	transit, _ := s.NetworkByName("vpn-transit")
	vpn01, _ := s.RouterByName("shoot--services--vpn01")
	svc01, _ := s.RouterByName("shoot--services--svc01")
	base := TakeSnapshot(s.Objects())

	// A live gateway with reverse exposures, fully built; a live link.
	gwPort := mustPort(t, s, openstacksim.Port{NetworkID: transit.ID, Name: "gw", Tags: []string{"uid=gw1"},
		AllowedAddressPairs: []openstacksim.AddressPair{{IPAddress: "100.64.0.0/24"}}})
	ok(t, s.SetPortDevice(gwPort.ID, workerA, openstacksim.OwnerCompute))
	ip := gwPort.FixedIPs[0].IPAddress
	ok(t, s.AddRoute(vpn01.ID, "100.64.0.0/24", ip))
	leg := mustPort(t, s, openstacksim.Port{NetworkID: transit.ID, Name: "leg", Tags: []string{"uid=link1"}})
	ok(t, s.SetPortDevice(leg.ID, svc01.ID, openstacksim.OwnerRouterInterface))
	legIP := leg.FixedIPs[0].IPAddress
	ok(t, s.AddRoute(vpn01.ID, "10.251.0.0/16", legIP))
	ok(t, s.AddRoute(svc01.ID, "100.64.0.0/24", ip))

	in := AuditInput{
		Baseline: base, OwnerOf: ownerTag, GatewayRouterID: vpn01.ID,
		Gateways: []AuditGateway{{Owner: "gw1", Name: "ns/gw1", ServiceCIDR: "100.64.0.0/24", VirtualIPs: []string{"100.64.0.10", "100.64.0.200"},
			PortID: gwPort.ID, ServerID: workerA, Reverse: true}},
		Links:   []AuditLink{{Owner: "link1", Name: "link1", TransitIP: legIP, LegPortID: leg.ID, RouterID: svc01.ID, ServiceClusterCIDR: "10.251.0.0/16"}},
		Deleted: []string{"gone"},
	}
	if rep := Audit(s.Objects(), in); len(rep.Problems()) != 0 || rep.Checked.Ports != 2 || rep.Checked.Routes != 3 {
		t.Fatalf("a clean estate: %s (checked %+v)", rep, rep.Checked)
	}
	// Tenancy: a link that does not serve the gateway must not route to it; the same
	// route is then a leak, and a link that serves nobody misses nothing.
	in.Links[0].Serves = []string{}
	if rep := Audit(s.Objects(), in); !strings.Contains(rep.String(), "leaked route: 100.64.0.0/24 via "+ip+" on router shoot--services--svc01") || strings.Contains(rep.String(), "missing") {
		t.Errorf("a reverse route to a gateway the link does not serve:\n%s", rep)
	}
	ok(t, s.RemoveRoute(svc01.ID, "100.64.0.0/24", ip))
	if rep := Audit(s.Objects(), in); len(rep.Problems()) != 0 {
		t.Errorf("a link serving nobody, without the route: %s", rep)
	}
	in.Links[0].Serves = []string{"gw1"}
	if rep := Audit(s.Objects(), in); !strings.Contains(rep.String(), "missing: ClusterLink link1: reverse route 100.64.0.0/24") {
		t.Errorf("a served gateway's reverse route missing:\n%s", rep)
	}
	ok(t, s.AddRoute(svc01.ID, "100.64.0.0/24", ip))

	// Now one of each.
	mustPort(t, s, openstacksim.Port{NetworkID: transit.ID, Name: "orphan", Tags: []string{"uid=gone"}}) // deleted owner's port
	mustPort(t, s, openstacksim.Port{NetworkID: transit.ID, Name: "second", Tags: []string{"uid=gw1"}})  // second port of a live gateway
	stray := mustPort(t, s, openstacksim.Port{NetworkID: transit.ID, Name: "untagged"})                  // untagged
	ok(t, s.SetPortDevice(stray.ID, workerB, openstacksim.OwnerCompute))                                 // ... and attached
	ok(t, s.AddRoute(vpn01.ID, "100.64.9.0/24", ip))                                                     // route nobody explains
	ok(t, s.AddRoute(svc01.ID, "100.64.0.0/24", stray.FixedIPs[0].IPAddress))                            // the /24 routed twice
	ok(t, s.SetPortDevice(gwPort.ID, workerB, openstacksim.OwnerCompute))                                // the gateway on the wrong server
	in.Gateways = append(in.Gateways, AuditGateway{Owner: "gw2", Name: "ns/gw2", ServiceCIDR: "100.64.0.0/24", VirtualIPs: []string{"100.64.0.10"}})
	in.Links = append(in.Links, AuditLink{Owner: "link2", Name: "link2", TransitIP: legIP})

	rep := Audit(s.Objects(), in)
	for _, want := range []string{
		"leaked port: port", "belongs to deleted owner gone",
		"is a second port of gateway ns/gw1", "carries no owner tag",
		"leaked attachment: port " + stray.ID,
		"leaked route: 100.64.9.0/24 via " + ip,
		"duplicate service CIDR: 100.64.0.0/24 is routed 2 times on router shoot--services--svc01",
		"duplicate service CIDR: 100.64.0.0/24 is held by ns/gw1, ns/gw2",
		"duplicate virtual IP: 100.64.0.10 is held 2 times",
		"duplicate transit IP: " + legIP + " is held by link1, link2",
		"leaked attachment: gateway ns/gw1: port " + gwPort.ID + " is attached to server " + workerB,
		"deleted object's leftover: port",
		"missing: gateway ns/gw2 has no port",
	} {
		if !strings.Contains(rep.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
}

func mustPort(t *testing.T, s *openstacksim.Server, p openstacksim.Port) openstacksim.Port {
	t.Helper()
	got, err := s.AddPort(p)
	if err != nil {
		t.Fatal(err)
	}
	return got
}
