package openstacksim

import "slices"

// Objects is a copy of the Neutron objects the simulator holds, by ID, taken under one
// read lock, so a caller sees one moment's state and can read it at leisure (the test
// harness audits it against the operator's objects) without holding up the API.
type Objects struct {
	Ports          map[string]*Port
	FloatingIPs    map[string]*FloatingIP
	SecurityGroups map[string]*SecurityGroup
	Routers        map[string]*Router
}

// Objects copies the ports, floating IPs, security groups and routers present now.
func (s *Server) Objects() Objects {
	st := s.st
	st.mu.RLock()
	defer st.mu.RUnlock()
	o := Objects{
		Ports:          make(map[string]*Port, len(st.ports)),
		FloatingIPs:    make(map[string]*FloatingIP, len(st.fips)),
		SecurityGroups: make(map[string]*SecurityGroup, len(st.sgs)),
		Routers:        make(map[string]*Router, len(st.routers)),
	}
	for id, p := range st.ports {
		c := *p
		c.FixedIPs = slices.Clone(p.FixedIPs)
		c.SecurityGroups = slices.Clone(p.SecurityGroups)
		c.AllowedAddressPairs = slices.Clone(p.AllowedAddressPairs)
		c.Tags = slices.Clone(p.Tags)
		o.Ports[id] = &c
	}
	for id, f := range st.fips {
		c := *f
		c.Tags = slices.Clone(f.Tags)
		o.FloatingIPs[id] = &c
	}
	for id, g := range st.sgs {
		c := *g
		c.Rules = slices.Clone(g.Rules)
		c.Tags = slices.Clone(g.Tags)
		o.SecurityGroups[id] = &c
	}
	for id, r := range st.routers {
		c := *r
		if r.GatewayInfo != nil {
			gi := *r.GatewayInfo
			gi.ExternalFixedIPs = slices.Clone(gi.ExternalFixedIPs)
			c.GatewayInfo = &gi
		}
		c.Routes = slices.Clone(r.Routes)
		c.Tags = slices.Clone(r.Tags)
		o.Routers[id] = &c
	}
	return o
}
