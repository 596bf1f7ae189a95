package openstacksim

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"slices"
)

type routerWire struct {
	Router
	TenantID string `json:"tenant_id"`
}

type fipWire struct {
	FloatingIP
	TenantID string `json:"tenant_id"`
}

func routerOut(r *Router) routerWire { return routerWire{r.clone(), r.ProjectID} }
func fipOut(f *FloatingIP) fipWire   { return fipWire{f.clone(), f.ProjectID} }
func routerNotFound(id string) *apiError {
	return errf(404, "RouterNotFound", "Router %s could not be found", id)
}

// --- routers ---

func (st *state) visibleRouter(c *caller, id string) (*Router, *apiError) {
	r := st.routers[id]
	if r == nil || !owns(c, r.ProjectID) {
		return nil, routerNotFound(id)
	}
	return r, nil
}

func (st *state) newRouter(id, name, project, gwNetwork string, tags []string) (*Router, *apiError) {
	if id == "" {
		id = newID()
	}
	t := now()
	r := &Router{ID: id, Name: name, ProjectID: project, Status: "ACTIVE", AdminStateUp: true, Routes: []Route{},
		Tags: dedupTags(tags), RevisionNumber: 1, CreatedAt: t, UpdatedAt: t}
	if gwNetwork != "" {
		if e := st.setGateway(r, gwNetwork); e != nil {
			return nil, e
		}
	}
	st.routers[id] = r
	st.order(id)
	return r, nil
}

// setGateway plugs the router into an external network, taking an address
// there like Neutron's router_gateway port does.
func (st *state) setGateway(r *Router, networkID string) *apiError {
	n := st.networks[networkID]
	if n == nil {
		return errf(404, "NetworkNotFound", "Network %s could not be found.", networkID)
	}
	if !n.External {
		return errf(400, "BadRequest", "Bad router request: Network %s is not an external network.", networkID)
	}
	st.clearGateway(r)
	gi := &GatewayInfo{NetworkID: n.ID, EnableSNAT: true, ExternalFixedIPs: []FixedIP{}}
	for _, sn := range st.networkSubnets(n.ID) {
		if a, ok := st.pools[sn.ID].allocate("gw:" + r.ID); ok {
			gi.ExternalFixedIPs = append(gi.ExternalFixedIPs, FixedIP{SubnetID: sn.ID, IPAddress: a.String()})
			break
		}
	}
	r.GatewayInfo = gi
	return nil
}

func (st *state) clearGateway(r *Router) {
	if r.GatewayInfo != nil {
		st.releaseFixedIPs(r.GatewayInfo.ExternalFixedIPs)
		r.GatewayInfo = nil
	}
}

func (s *Server) listRouters(w http.ResponseWriter, r *http.Request, c *caller) {
	q := r.URL.Query()
	st := s.st
	st.mu.RLock()
	defer st.mu.RUnlock()
	writeList(st, w, r, "routers", inOrder(st, st.routers), func(rt *Router) bool {
		return owns(c, rt.ProjectID) && fieldMatch(q, "id", rt.ID) && fieldMatch(q, "name", rt.Name) &&
			fieldMatch(q, "description", rt.Description) &&
			projectMatch(q, rt.ProjectID) && fieldMatch(q, "status", rt.Status) && tagsMatch(q, rt.Tags)
	}, routerOut)
}

type routerBody struct {
	Router struct {
		Name         *string         `json:"name"`
		Description  *string         `json:"description"`
		AdminStateUp *bool           `json:"admin_state_up"`
		ProjectID    string          `json:"project_id"`
		TenantID     string          `json:"tenant_id"`
		GatewayInfo  json.RawMessage `json:"external_gateway_info"`
		Routes       *[]Route        `json:"routes"`
		Tags         *[]string       `json:"tags"`
	} `json:"router"`
}

// gatewayNetwork reads external_gateway_info: ("", true) clears it.
func gatewayNetwork(raw json.RawMessage) (id string, set bool, e *apiError) {
	if len(raw) == 0 {
		return "", false, nil
	}
	if string(raw) == "null" {
		return "", true, nil
	}
	var gi struct {
		NetworkID string `json:"network_id"`
	}
	if err := json.Unmarshal(raw, &gi); err != nil {
		return "", false, errf(400, "BadRequest", "Invalid external_gateway_info.")
	}
	return gi.NetworkID, true, nil
}

func (s *Server) createRouter(w http.ResponseWriter, r *http.Request, c *caller) {
	var b routerBody
	if e := decode(r, &b); e != nil {
		s.neutronFail(w, e)
		return
	}
	in := b.Router
	gw, _, e := gatewayNetwork(in.GatewayInfo)
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	project, e := createProject(c, "create_router", in.ProjectID, in.TenantID)
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	tags, e := st.createTags(derefSlice(in.Tags), project, "router")
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	rt, e := st.newRouter("", deref(in.Name), project, gw, tags)
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	rt.Description = deref(in.Description)
	writeJSON(w, 201, map[string]any{"router": routerOut(rt)})
}

func (s *Server) updateRouter(w http.ResponseWriter, r *http.Request, c *caller) {
	var b routerBody
	if e := decode(r, &b); e != nil {
		s.neutronFail(w, e)
		return
	}
	in := b.Router
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	rt, e := st.visibleRouter(c, r.PathValue("id"))
	if e == nil {
		e = st.checkIfMatch(r, rt.RevisionNumber)
	}
	gw, gwSet, ge := gatewayNetwork(in.GatewayInfo)
	if e == nil {
		e = ge
	}
	if e == nil && gwSet {
		if gw == "" {
			st.clearGateway(rt)
		} else if rt.GatewayInfo == nil || rt.GatewayInfo.NetworkID != gw {
			e = st.setGateway(rt, gw)
		}
	}
	var routes []Route
	if e == nil && in.Routes != nil {
		routes, e = st.validateRoutes(rt, *in.Routes)
		if e == nil {
			routes = uniqueRoutes(routes)
			e = st.checkMaxRoutes(len(routes))
		}
	}
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	if in.Routes != nil {
		rt.Routes = routes
	}
	if in.Name != nil {
		rt.Name = *in.Name
	}
	if in.Description != nil {
		rt.Description = *in.Description
	}
	if in.AdminStateUp != nil {
		rt.AdminStateUp = *in.AdminStateUp
	}
	st.touchRouter(rt)
	writeJSON(w, 200, map[string]any{"router": routerOut(rt)})
}

func uniqueRoutes(in []Route) []Route {
	out := make([]Route, 0, len(in))
	for _, r := range in {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

func (st *state) refuseRouterDelete(_ *caller, rt *Router) *apiError {
	if len(st.routerInterfaces(rt.ID)) > 0 {
		return errf(409, "RouterInUse", "Router %s still has ports", rt.ID)
	}
	return nil
}

func (st *state) deleteRouter(rt *Router) {
	st.clearGateway(rt)
	delete(st.routers, rt.ID)
	delete(st.seq, rt.ID)
}

type interfaceBody struct {
	SubnetID string `json:"subnet_id"`
	PortID   string `json:"port_id"`
}

func interfaceInfo(rt *Router, p *Port) map[string]any {
	sub := ""
	subs := []string{}
	for _, f := range p.FixedIPs {
		if sub == "" {
			sub = f.SubnetID
		}
		subs = append(subs, f.SubnetID)
	}
	return map[string]any{"id": rt.ID, "tenant_id": rt.ProjectID, "project_id": rt.ProjectID, "port_id": p.ID,
		"network_id": p.NetworkID, "subnet_id": sub, "subnet_ids": subs, "tags": []string{}}
}

func (s *Server) addRouterInterface(w http.ResponseWriter, r *http.Request, c *caller) {
	var in interfaceBody
	if e := decode(r, &in); e != nil {
		s.neutronFail(w, e)
		return
	}
	if (in.SubnetID == "") == (in.PortID == "") {
		s.neutronFail(w, errf(400, "BadRequest", "Bad router request: Either subnet_id or port_id must be specified."))
		return
	}
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	rt, e := st.visibleRouter(c, r.PathValue("id"))
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	var p *Port
	if in.PortID != "" {
		if p, e = st.visiblePort(c, in.PortID); e == nil {
			e = st.attachInterface(c, rt, p)
		}
	} else {
		p, e = st.interfaceOnSubnet(c, rt, in.SubnetID)
	}
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	writeJSON(w, 200, interfaceInfo(rt, p))
}

// interfaceOnSubnet creates the router's port at the subnet's gateway IP.
func (st *state) interfaceOnSubnet(c *caller, rt *Router, subnetID string) (*Port, *apiError) {
	sn, e := st.visibleSubnet(c, subnetID)
	if e != nil {
		return nil, e
	}
	if sn.GatewayIP == "" {
		return nil, errf(400, "BadRequest", "Bad router request: Subnet for router interface must have a gateway IP.")
	}
	for _, ip := range st.routerInterfaces(rt.ID) {
		for _, f := range ip.FixedIPs {
			if f.SubnetID == sn.ID {
				return nil, errf(400, "BadRequest", "Bad router request: Router already has a port on subnet %s.", sn.ID)
			}
		}
	}
	p, e := st.createPort(&caller{projectID: rt.ProjectID, admin: true}, portSpec{networkID: sn.NetworkID,
		projectID: rt.ProjectID, deviceOwner: OwnerRouterInterface, explicitIPs: true,
		fixedIPs: []FixedIP{{SubnetID: sn.ID, IPAddress: sn.GatewayIP}}})
	if e != nil {
		return nil, e
	}
	if e := st.attachInterface(&caller{admin: true}, rt, p); e != nil {
		st.deletePort(p)
		return nil, e
	}
	return p, nil
}

func (s *Server) removeRouterInterface(w http.ResponseWriter, r *http.Request, c *caller) {
	var in interfaceBody
	if e := decode(r, &in); e != nil {
		s.neutronFail(w, e)
		return
	}
	if in.SubnetID == "" && in.PortID == "" {
		s.neutronFail(w, errf(400, "BadRequest", "Bad router request: Either subnet_id or port_id must be specified."))
		return
	}
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	rt, e := st.visibleRouter(c, r.PathValue("id"))
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	var p *Port
	for _, ip := range st.routerInterfaces(rt.ID) {
		if in.PortID != "" && ip.ID != in.PortID {
			continue
		}
		if in.SubnetID != "" && !slices.ContainsFunc(ip.FixedIPs, func(f FixedIP) bool { return f.SubnetID == in.SubnetID }) {
			continue
		}
		p = ip
		break
	}
	if p == nil {
		if in.PortID != "" {
			s.neutronFail(w, errf(404, "RouterInterfaceNotFound", "Router %s does not have an interface with id %s", rt.ID, in.PortID))
		} else {
			s.neutronFail(w, errf(404, "RouterInterfaceNotFoundForSubnet", "Router %s has no interface on subnet %s", rt.ID, in.SubnetID))
		}
		return
	}
	info := interfaceInfo(rt, p)
	if e := st.detachInterface(rt, p); e != nil {
		s.neutronFail(w, e)
		return
	}
	writeJSON(w, 200, info)
}

func (s *Server) extraRoutes(add bool) hfn {
	return func(w http.ResponseWriter, r *http.Request, c *caller) {
		s.st.mu.RLock()
		atomic := s.st.hasExt("extraroute-atomic")
		s.st.mu.RUnlock()
		if !atomic {
			s.neutronFail(w, errf(404, "HTTPNotFound", "The resource could not be found."))
			return
		}
		var b struct {
			Router struct {
				Routes []Route `json:"routes"`
			} `json:"router"`
		}
		if e := decode(r, &b); e != nil {
			s.neutronFail(w, e)
			return
		}
		st := s.st
		st.mu.Lock()
		defer st.mu.Unlock()
		rt, e := st.visibleRouter(c, r.PathValue("id"))
		if e != nil {
			s.neutronFail(w, e)
			return
		}
		if add {
			routes, e := st.validateRoutes(rt, b.Router.Routes)
			if e == nil {
				routes = uniqueRoutes(append(slices.Clone(rt.Routes), routes...))
				e = st.checkMaxRoutes(len(routes))
			}
			if e != nil {
				s.neutronFail(w, e)
				return
			}
			rt.Routes = routes
		} else {
			// Removal matches the routes as given and checks nothing else: an absent
			// or malformed route is simply not there.
			drop := b.Router.Routes
			rt.Routes = slices.DeleteFunc(slices.Clone(rt.Routes), func(x Route) bool { return slices.Contains(drop, x) })
		}
		st.touchRouter(rt)
		writeJSON(w, 200, map[string]any{"router": routerOut(rt)})
	}
}

// --- floating IPs ---

func (st *state) visibleFIP(c *caller, id string) (*FloatingIP, *apiError) {
	f := st.fips[id]
	if f == nil || !owns(c, f.ProjectID) {
		return nil, errf(404, "FloatingIPNotFound", "Floating IP %s could not be found", id)
	}
	return f, nil
}

func (s *Server) listFIPs(w http.ResponseWriter, r *http.Request, c *caller) {
	q := r.URL.Query()
	st := s.st
	st.mu.RLock()
	defer st.mu.RUnlock()
	writeList(st, w, r, "floatingips", inOrder(st, st.fips), func(f *FloatingIP) bool {
		return owns(c, f.ProjectID) && fieldMatch(q, "id", f.ID) && fieldMatch(q, "floating_ip_address", f.FloatingIPAddress) &&
			fieldMatch(q, "port_id", f.PortID) && fieldMatch(q, "floating_network_id", f.FloatingNetworkID) &&
			fieldMatch(q, "fixed_ip_address", f.FixedIPAddress) && fieldMatch(q, "router_id", f.RouterID) &&
			fieldMatch(q, "status", f.Status) && fieldMatch(q, "description", f.Description) &&
			projectMatch(q, f.ProjectID) && tagsMatch(q, f.Tags)
	}, fipOut)
}

type fipBody struct {
	FloatingNetworkID string          `json:"floating_network_id"`
	FloatingIPAddress string          `json:"floating_ip_address"`
	SubnetID          string          `json:"subnet_id"`
	PortID            json.RawMessage `json:"port_id"`
	FixedIPAddress    string          `json:"fixed_ip_address"`
	Description       *string         `json:"description"`
	ProjectID         string          `json:"project_id"`
	TenantID          string          `json:"tenant_id"`
	Tags              []string        `json:"tags"`
}

func rawString(raw json.RawMessage) (v string, set bool) {
	if len(raw) == 0 {
		return "", false
	}
	if string(raw) == "null" {
		return "", true
	}
	_ = json.Unmarshal(raw, &v)
	return v, true
}

func (s *Server) createFIP(w http.ResponseWriter, r *http.Request, c *caller) {
	var b struct {
		FIP fipBody `json:"floatingip"`
	}
	if e := decode(r, &b); e != nil {
		s.neutronFail(w, e)
		return
	}
	in := b.FIP
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	project, e := createProject(c, "create_floatingip", in.ProjectID, in.TenantID)
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	if in.FloatingIPAddress != "" && st.adminOnlyFIPAddr && !c.admin {
		s.neutronFail(w, errf(403, "PolicyNotAuthorized", "rule:create_floatingip:floating_ip_address is disallowed by policy"))
		return
	}
	tags, e := st.createTags(in.Tags, "", "")
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	in.Tags = tags
	n, e := st.visibleNetwork(c, in.FloatingNetworkID)
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	if !n.External {
		s.neutronFail(w, errf(400, "BadRequest", "Bad floatingip request: Network %s is not a valid external network.", n.ID))
		return
	}
	if e := st.checkQuota(project, "floatingip"); e != nil {
		s.neutronFail(w, e)
		return
	}
	id := newID()
	owner := "fip:" + id
	var addr FixedIP
	if in.FloatingIPAddress != "" {
		a, err := netip.ParseAddr(in.FloatingIPAddress)
		if err != nil {
			s.neutronFail(w, errf(400, "InvalidInput", "Invalid input for operation: '%s' is not a valid IP address.", in.FloatingIPAddress))
			return
		}
		for _, sn := range st.networkSubnets(n.ID) {
			if p := st.pools[sn.ID]; p.usable(a) && (in.SubnetID == "" || in.SubnetID == sn.ID) {
				if p.inUse(a) || a == p.gateway {
					s.neutronFail(w, errf(409, "IpAddressInUse", "Unable to complete operation for network %s. The IP address %s is in use.", n.ID, a))
					return
				}
				p.claim(a, owner)
				addr = FixedIP{SubnetID: sn.ID, IPAddress: a.String()}
				break
			}
		}
		if addr.IPAddress == "" {
			s.neutronFail(w, errf(400, "InvalidIpForNetwork", "IP address %s is not a valid IP for any of the subnets on the specified network.", a))
			return
		}
	} else {
		for _, sn := range st.networkSubnets(n.ID) {
			if in.SubnetID != "" && in.SubnetID != sn.ID {
				continue
			}
			if a, ok := st.pools[sn.ID].allocate(owner); ok {
				addr = FixedIP{SubnetID: sn.ID, IPAddress: a.String()}
				break
			}
		}
		if addr.IPAddress == "" {
			s.neutronFail(w, errf(409, "IpAddressGenerationFailure", "No more IP addresses available on network %s.", n.ID))
			return
		}
	}
	t := now()
	f := &FloatingIP{ID: id, FloatingNetworkID: n.ID, FloatingIPAddress: addr.IPAddress, ProjectID: project,
		Status: "DOWN", Tags: dedupTags(in.Tags), Description: deref(in.Description), RevisionNumber: 1, CreatedAt: t, UpdatedAt: t}
	if port, set := rawString(in.PortID); set && port != "" {
		if e := st.associateFIP(c, f, port, in.FixedIPAddress); e != nil {
			st.releaseFixedIPs([]FixedIP{addr})
			s.neutronFail(w, e)
			return
		}
	}
	st.fips[id] = f
	st.order(id)
	writeJSON(w, 201, map[string]any{"floatingip": fipOut(f)})
}

// associateFIP applies Neutron's checks: the port is the caller's, holds the
// fixed IP, has no other floating IP on that address, and a router with a
// gateway on the floating network has an interface on the port's subnet.
func (st *state) associateFIP(c *caller, f *FloatingIP, portID, fixedIP string) *apiError {
	p := st.ports[portID]
	if p == nil || !st.portVisible(c, p) || (!c.admin && p.ProjectID != f.ProjectID) {
		return errf(404, "PortNotFound", "Port %s could not be found.", portID)
	}
	var fixed *FixedIP
	for i := range p.FixedIPs {
		a, _ := netip.ParseAddr(p.FixedIPs[i].IPAddress)
		if (fixedIP == "" && a.Is4()) || p.FixedIPs[i].IPAddress == fixedIP {
			fixed = &p.FixedIPs[i]
			break
		}
	}
	if fixed == nil {
		if fixedIP != "" {
			return errf(400, "BadRequest", "Bad floatingip request: Port %s does not have fixed ip %s.", p.ID, fixedIP)
		}
		return errf(400, "BadRequest", "Bad floatingip request: Port %s does not have any IPv4 address.", p.ID)
	}
	for _, other := range st.fips {
		if other.ID != f.ID && other.PortID == p.ID && other.FixedIPAddress == fixed.IPAddress {
			return errf(409, "FloatingIPPortAlreadyAssociated", "Cannot associate floating IP %s (%s) with port %s using fixed IP %s, as that fixed IP already has a floating IP on external network %s.",
				f.FloatingIPAddress, f.ID, p.ID, fixed.IPAddress, other.FloatingNetworkID)
		}
	}
	routerID := ""
	for _, rt := range inOrder(st, st.routers) {
		if rt.GatewayInfo == nil || rt.GatewayInfo.NetworkID != f.FloatingNetworkID {
			continue
		}
		for _, ip := range st.routerInterfaces(rt.ID) {
			if slices.ContainsFunc(ip.FixedIPs, func(x FixedIP) bool { return x.SubnetID == fixed.SubnetID }) {
				routerID = rt.ID
			}
		}
		if routerID != "" {
			break
		}
	}
	if routerID == "" {
		return errf(404, "ExternalGatewayForFloatingIPNotFound", "External network %s is not reachable from subnet %s.  Therefore, cannot associate Port %s with a Floating IP.", f.FloatingNetworkID, fixed.SubnetID, p.ID)
	}
	f.PortID, f.FixedIPAddress, f.RouterID, f.Status = p.ID, fixed.IPAddress, routerID, "ACTIVE"
	return nil
}

func (s *Server) updateFIP(w http.ResponseWriter, r *http.Request, c *caller) {
	var b struct {
		FIP fipBody `json:"floatingip"`
	}
	if e := decode(r, &b); e != nil {
		s.neutronFail(w, e)
		return
	}
	in := b.FIP
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	f, e := st.visibleFIP(c, r.PathValue("id"))
	if e == nil {
		e = st.checkIfMatch(r, f.RevisionNumber)
	}
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	if port, set := rawString(in.PortID); set {
		if port == "" {
			f.PortID, f.FixedIPAddress, f.RouterID, f.Status = "", "", "", "DOWN"
		} else if e := st.associateFIP(c, f, port, in.FixedIPAddress); e != nil {
			s.neutronFail(w, e)
			return
		}
	}
	if in.Description != nil {
		f.Description = *in.Description
	}
	f.RevisionNumber++
	f.UpdatedAt = now()
	writeJSON(w, 200, map[string]any{"floatingip": fipOut(f)})
}

func (st *state) deleteFIP(f *FloatingIP) {
	for _, sn := range st.networkSubnets(f.FloatingNetworkID) {
		if a, err := netip.ParseAddr(f.FloatingIPAddress); err == nil && st.pools[sn.ID].prefix.Contains(a) {
			st.pools[sn.ID].release(a)
		}
	}
	delete(st.fips, f.ID)
	delete(st.seq, f.ID)
}
