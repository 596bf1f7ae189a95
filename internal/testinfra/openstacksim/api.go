package openstacksim

import (
	"fmt"
	"net/netip"
	"slices"
)

// This file is the test-facing side door: lock-protected copies of the
// state and out-of-band mutations that bypass the API (and its refusals),
// standing in for a human or another tool changing the cloud.

// AppCredential returns the ID and secret of a seeded application
// credential, by name.
func (s *Server) AppCredential(name string) (id, secret string, ok bool) {
	s.st.mu.RLock()
	defer s.st.mu.RUnlock()
	for _, ac := range s.st.appCreds {
		if ac.Name == name {
			return ac.ID, ac.secret, true
		}
	}
	return "", "", false
}

// AppCredentials lists the application credentials (without secrets).
func (s *Server) AppCredentials() []AppCredential {
	s.st.mu.RLock()
	defer s.st.mu.RUnlock()
	out := make([]AppCredential, 0, len(s.st.appCreds))
	for _, ac := range s.st.appCreds {
		c := ac.AppCredential
		c.Roles = cloneStrings(c.Roles)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b AppCredential) int { return cmpString(a.Name, b.Name) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sorted returns values in creation order.
func sorted[T any](st *state, m map[string]*T, copyFn func(*T) T) []T {
	items := inOrder(st, m)
	out := make([]T, 0, len(items))
	for _, v := range items {
		out = append(out, copyFn(v))
	}
	return out
}

func (s *Server) Projects() []Project {
	s.st.mu.RLock()
	defer s.st.mu.RUnlock()
	out := make([]Project, 0, len(s.st.projects))
	for _, p := range s.st.projects {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b Project) int { return cmpString(a.Name, b.Name) })
	return out
}

func (s *Server) ProjectByName(name string) (Project, bool) {
	for _, p := range s.Projects() {
		if p.Name == name {
			return p, true
		}
	}
	return Project{}, false
}

func (s *Server) Ports() []Port {
	s.st.mu.RLock()
	defer s.st.mu.RUnlock()
	return sorted(s.st, s.st.ports, (*Port).clone)
}

func (s *Server) Port(id string) (Port, bool) {
	s.st.mu.RLock()
	defer s.st.mu.RUnlock()
	if p := s.st.ports[id]; p != nil {
		return p.clone(), true
	}
	return Port{}, false
}

// PortsByTag returns the ports carrying every given tag (via the index).
func (s *Server) PortsByTag(tags ...string) []Port {
	s.st.mu.RLock()
	defer s.st.mu.RUnlock()
	var out []Port
	if len(tags) == 0 {
		return out
	}
	ids := make([]string, 0)
	for id := range s.st.portsByTag[tags[0]] {
		if p := s.st.ports[id]; p != nil && !slices.ContainsFunc(tags, func(t string) bool { return !slices.Contains(p.Tags, t) }) {
			ids = append(ids, id)
		}
	}
	s.st.sortIDs(ids)
	for _, id := range ids {
		out = append(out, s.st.ports[id].clone())
	}
	return out
}

func (s *Server) Networks() []Network {
	s.st.mu.RLock()
	defer s.st.mu.RUnlock()
	return sorted(s.st, s.st.networks, (*Network).clone)
}

func (s *Server) NetworkByName(name string) (Network, bool) {
	for _, n := range s.Networks() {
		if n.Name == name {
			return n, true
		}
	}
	return Network{}, false
}

func (s *Server) Subnets() []Subnet {
	s.st.mu.RLock()
	defer s.st.mu.RUnlock()
	return sorted(s.st, s.st.subnets, (*Subnet).clone)
}

func (s *Server) SubnetByName(name string) (Subnet, bool) {
	for _, n := range s.Subnets() {
		if n.Name == name {
			return n, true
		}
	}
	return Subnet{}, false
}

func (s *Server) Routers() []Router {
	s.st.mu.RLock()
	defer s.st.mu.RUnlock()
	return sorted(s.st, s.st.routers, (*Router).clone)
}

func (s *Server) Router(id string) (Router, bool) {
	s.st.mu.RLock()
	defer s.st.mu.RUnlock()
	if r := s.st.routers[id]; r != nil {
		return r.clone(), true
	}
	return Router{}, false
}

func (s *Server) RouterByName(name string) (Router, bool) {
	for _, r := range s.Routers() {
		if r.Name == name {
			return r, true
		}
	}
	return Router{}, false
}

// RouterInterfaces returns the IDs of the router's interface ports.
func (s *Server) RouterInterfaces(routerID string) []string {
	s.st.mu.RLock()
	defer s.st.mu.RUnlock()
	var out []string
	for _, p := range s.st.routerInterfaces(routerID) {
		out = append(out, p.ID)
	}
	return out
}

func (s *Server) SecurityGroups() []SecurityGroup {
	s.st.mu.RLock()
	defer s.st.mu.RUnlock()
	return sorted(s.st, s.st.sgs, (*SecurityGroup).clone)
}

func (s *Server) SecurityGroup(id string) (SecurityGroup, bool) {
	s.st.mu.RLock()
	defer s.st.mu.RUnlock()
	if g := s.st.sgs[id]; g != nil {
		return g.clone(), true
	}
	return SecurityGroup{}, false
}

func (s *Server) FloatingIPs() []FloatingIP {
	s.st.mu.RLock()
	defer s.st.mu.RUnlock()
	return sorted(s.st, s.st.fips, (*FloatingIP).clone)
}

func (s *Server) RBACPolicies() []RBACPolicy {
	s.st.mu.RLock()
	defer s.st.mu.RUnlock()
	return sorted(s.st, s.st.rbac, func(p *RBACPolicy) RBACPolicy { return *p })
}

func (s *Server) Servers() []Instance {
	s.st.mu.RLock()
	defer s.st.mu.RUnlock()
	return sorted(s.st, s.st.servers, func(i *Instance) Instance { return *i })
}

// ServerInterfaces returns the IDs of the ports attached to a Nova server.
func (s *Server) ServerInterfaces(serverID string) []string {
	s.st.mu.RLock()
	defer s.st.mu.RUnlock()
	out := []string{}
	for _, p := range s.st.serverInterfaces(serverID) {
		out = append(out, p.ID)
	}
	return out
}

// --- out-of-band mutations ---

var errNotFound = fmt.Errorf("not found")

// DeletePort removes a port whatever it is attached to (router interface,
// server), as an admin cleaning up by hand would.
func (s *Server) DeletePort(id string) error {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	p := s.st.ports[id]
	if p == nil {
		return fmt.Errorf("port %s: %w", id, errNotFound)
	}
	s.st.deletePort(p)
	return nil
}

// AddPort creates a port directly. NetworkID is required; ProjectID defaults
// to the network's owner; FixedIPs (subnet and/or address) are claimed, or
// one address allocated when empty; ID and MAC are generated when empty.
// Security groups are taken as given (none when empty).
func (s *Server) AddPort(p Port) (Port, error) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	n := s.st.networks[p.NetworkID]
	if n == nil {
		return Port{}, fmt.Errorf("network %s: %w", p.NetworkID, errNotFound)
	}
	project := firstNonEmpty(p.ProjectID, n.ProjectID)
	sgs := cloneStrings(p.SecurityGroups)
	sp := portSpec{id: p.ID, networkID: n.ID, projectID: project, name: p.Name, description: p.Description,
		deviceID: p.DeviceID, deviceOwner: p.DeviceOwner, mac: p.MACAddress, securityGroups: &sgs,
		pairs: p.AllowedAddressPairs, tags: p.Tags}
	if len(p.FixedIPs) > 0 {
		sp.fixedIPs, sp.explicitIPs = p.FixedIPs, true
	}
	created, e := s.st.createPort(&caller{projectID: project, admin: true}, sp)
	if e != nil {
		return Port{}, e
	}
	if p.HostID != "" {
		created.HostID = p.HostID
	}
	return created.clone(), nil
}

// SetPortDevice rewrites a port's device_id and device_owner.
func (s *Server) SetPortDevice(portID, deviceID, deviceOwner string) error {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	p := s.st.ports[portID]
	if p == nil {
		return fmt.Errorf("port %s: %w", portID, errNotFound)
	}
	s.st.mutatePort(p, func(p *Port) { p.DeviceID, p.DeviceOwner = deviceID, deviceOwner })
	return nil
}

// SetPortTags replaces a port's tags.
func (s *Server) SetPortTags(portID string, tags []string) error {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	p := s.st.ports[portID]
	if p == nil {
		return fmt.Errorf("port %s: %w", portID, errNotFound)
	}
	s.st.mutatePort(p, func(p *Port) { p.Tags = dedupTags(tags) })
	return nil
}

// AddRoute adds a route to a router, with Neutron's nexthop checks.
func (s *Server) AddRoute(routerID, destination, nexthop string) error {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	r := s.st.routers[routerID]
	if r == nil {
		return fmt.Errorf("router %s: %w", routerID, errNotFound)
	}
	routes, e := s.st.validateRoutes(r, []Route{{Destination: destination, NextHop: nexthop}})
	if e != nil {
		return e
	}
	r.Routes = uniqueRoutes(append(r.Routes, routes...))
	s.st.touchRouter(r)
	return nil
}

// RemoveRoute removes a route from a router; removing an absent route is
// an error so a test notices a typo.
func (s *Server) RemoveRoute(routerID, destination, nexthop string) error {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	r := s.st.routers[routerID]
	if r == nil {
		return fmt.Errorf("router %s: %w", routerID, errNotFound)
	}
	if pfx, err := netip.ParsePrefix(destination); err == nil {
		destination = pfx.Masked().String()
	}
	want := Route{Destination: destination, NextHop: nexthop}
	i := slices.Index(r.Routes, want)
	if i < 0 {
		return fmt.Errorf("route %s via %s on router %s: %w", destination, nexthop, routerID, errNotFound)
	}
	r.Routes = slices.Delete(slices.Clone(r.Routes), i, i+1)
	s.st.touchRouter(r)
	return nil
}

// DetachRouterPort removes a router interface by port ID without the
// API's route check (the port is deleted, as Neutron does).
func (s *Server) DetachRouterPort(routerID, portID string) error {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	p := s.st.ports[portID]
	if p == nil || p.DeviceID != routerID || p.DeviceOwner != OwnerRouterInterface {
		return fmt.Errorf("interface %s on router %s: %w", portID, routerID, errNotFound)
	}
	s.st.deletePort(p)
	return nil
}

// AddRBACPolicy shares a network with a project (or "*") as an admin would.
func (s *Server) AddRBACPolicy(networkID, targetProject string) (RBACPolicy, error) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	n := s.st.networks[networkID]
	if n == nil {
		return RBACPolicy{}, fmt.Errorf("network %s: %w", networkID, errNotFound)
	}
	p, e := s.st.createRBAC(&caller{projectID: n.ProjectID, admin: true}, "network", networkID, "access_as_shared", targetProject, n.ProjectID)
	if e != nil {
		return RBACPolicy{}, e
	}
	return *p, nil
}

// SetNetworkShared sets a network's shared flag as an admin's
// `openstack network set --share` (or --no-share) would. Every project may then use
// the network (see networkUsable). A wildcard share made as an RBAC policy with target
// "*" is AddRBACPolicy(networkID, "*").
func (s *Server) SetNetworkShared(networkID string, shared bool) error {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	n := s.st.networks[networkID]
	if n == nil {
		return fmt.Errorf("network %s: %w", networkID, errNotFound)
	}
	n.Shared = shared
	n.RevisionNumber++
	n.UpdatedAt = now()
	return nil
}

// DeleteRBACPolicy removes a policy without Neutron's in-use check.
func (s *Server) DeleteRBACPolicy(id string) error {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	p := s.st.rbac[id]
	if p == nil {
		return fmt.Errorf("rbac policy %s: %w", id, errNotFound)
	}
	s.st.deleteRBAC(p)
	return nil
}

func (s *Server) DeleteFloatingIP(id string) error {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	f := s.st.fips[id]
	if f == nil {
		return fmt.Errorf("floating ip %s: %w", id, errNotFound)
	}
	s.st.deleteFIP(f)
	return nil
}

// DeleteSecurityGroupRule removes one rule by ID.
func (s *Server) DeleteSecurityGroupRule(id string) error {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	g, i, e := s.st.findRule(&caller{admin: true}, id)
	if e != nil {
		return fmt.Errorf("security group rule %s: %w", id, errNotFound)
	}
	delete(s.st.sgRules, id)
	g.Rules = slices.Delete(g.Rules, i, i+1)
	return nil
}

// DeleteSecurityGroup removes a group even if ports still use it (they
// lose it, as after a forced cleanup).
func (s *Server) DeleteSecurityGroup(id string) error {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	g := s.st.sgs[id]
	if g == nil {
		return fmt.Errorf("security group %s: %w", id, errNotFound)
	}
	for _, p := range s.st.ports {
		if slices.Contains(p.SecurityGroups, id) {
			s.st.mutatePort(p, func(p *Port) {
				p.SecurityGroups = slices.DeleteFunc(p.SecurityGroups, func(x string) bool { return x == id })
			})
		}
	}
	s.st.deleteSG(g)
	return nil
}

// DetachInterface unbinds a port from a server at once, like a Nova detach
// that already finished.
func (s *Server) DetachInterface(serverID, portID string) error {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	if !s.st.detachPort(serverID, portID) {
		return fmt.Errorf("port %s on server %s: %w", portID, serverID, errNotFound)
	}
	return nil
}

// AddServer adds a Nova server (ID generated when empty, status ACTIVE by
// default).
func (s *Server) AddServer(in Instance) (Instance, error) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	if _, ok := s.st.projects[in.ProjectID]; !ok {
		return Instance{}, fmt.Errorf("project %s: %w", in.ProjectID, errNotFound)
	}
	in.ID = firstNonEmpty(in.ID, newID())
	if _, dup := s.st.servers[in.ID]; dup {
		return Instance{}, fmt.Errorf("server %s already exists", in.ID)
	}
	in.Status = firstNonEmpty(in.Status, "ACTIVE")
	in.Host = firstNonEmpty(in.Host, in.Name)
	t := now()
	in.CreatedAt, in.UpdatedAt = t, t
	s.st.servers[in.ID] = &in
	s.st.order(in.ID)
	return in, nil
}

// SetServerStatus changes a server's status (e.g. SHUTOFF, ERROR).
func (s *Server) SetServerStatus(serverID, status string) error {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	in := s.st.servers[serverID]
	if in == nil {
		return fmt.Errorf("server %s: %w", serverID, errNotFound)
	}
	in.Status = status
	return nil
}

// SetPageSize pages every Neutron list at n entries even when the request names no
// limit, as Neutron does with pagination_max_limit set (0 = not paged unless asked).
func (s *Server) SetPageSize(n int) {
	s.st.mu.Lock()
	s.st.pageSize = n
	s.st.mu.Unlock()
}

// SetMaxRoutes changes the per-router route limit (0 = unlimited).
func (s *Server) SetMaxRoutes(n int) {
	s.st.mu.Lock()
	s.st.maxRoutes = n
	s.st.mu.Unlock()
}
