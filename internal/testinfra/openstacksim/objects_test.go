package openstacksim

import "testing"

// Objects hands out a copy: what a caller does with it never reaches the simulator.
func TestObjectsIsACopy(t *testing.T) {
	s := startEstate(t)
	vpn01, _ := s.RouterByName("shoot--services--vpn01")
	transit, _ := s.NetworkByName("vpn-transit")
	p, err := s.AddPort(Port{NetworkID: transit.ID, Name: "p", Tags: []string{"a"}})
	ok(t, err)
	ok(t, s.AddRoute(vpn01.ID, "100.64.0.0/24", p.FixedIPs[0].IPAddress))

	o := s.Objects()
	if o.Ports[p.ID] == nil || len(o.Routers[vpn01.ID].Routes) == 0 {
		t.Fatalf("the copy lacks the port or the route: %+v", o.Ports[p.ID])
	}
	o.Ports[p.ID].Tags[0] = "changed"
	o.Ports[p.ID].FixedIPs[0].IPAddress = "0.0.0.0"
	o.Routers[vpn01.ID].Routes[0].NextHop = "0.0.0.0"
	delete(o.Ports, p.ID)

	again := s.Objects()
	got := again.Ports[p.ID]
	if got == nil || got.Tags[0] != "a" || got.FixedIPs[0].IPAddress != p.FixedIPs[0].IPAddress {
		t.Fatalf("a change to the copy reached the simulator: %+v", got)
	}
	if r := again.Routers[vpn01.ID]; !r.HasRoute(Route{Destination: "100.64.0.0/24", NextHop: p.FixedIPs[0].IPAddress}) {
		t.Fatalf("a change to the copy's routes reached the simulator: %v", r.Routes)
	}
}
