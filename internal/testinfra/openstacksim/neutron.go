package openstacksim

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

const neutronBase = networkPrefix + "/v2.0"

// --- query helpers ---

// listValues flattens repeated and comma-separated query values.
func listValues(q url.Values, key string) []string {
	var out []string
	for _, v := range q[key] {
		for _, p := range strings.Split(v, ",") {
			if p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// tagsMatch applies Neutron's four tag filters.
func tagsMatch(q url.Values, tags []string) bool {
	for _, t := range listValues(q, "tags") {
		if !slices.Contains(tags, t) {
			return false
		}
	}
	if any := listValues(q, "tags-any"); len(any) > 0 && !slices.ContainsFunc(any, func(t string) bool { return slices.Contains(tags, t) }) {
		return false
	}
	if not := listValues(q, "not-tags"); len(not) > 0 && !slices.ContainsFunc(not, func(t string) bool { return !slices.Contains(tags, t) }) {
		return false
	}
	if slices.ContainsFunc(listValues(q, "not-tags-any"), func(t string) bool { return slices.Contains(tags, t) }) {
		return false
	}
	return true
}

// fieldMatch: an absent filter matches; repeated values are alternatives.
func fieldMatch(q url.Values, key, value string) bool {
	vs, ok := q[key]
	if !ok {
		return true
	}
	for _, v := range vs {
		if v == value {
			return true
		}
	}
	return false
}

func boolMatch(q url.Values, key string, value bool) bool {
	v, ok := q[key]
	if !ok || len(v) == 0 {
		return true
	}
	b, err := strconv.ParseBool(strings.ToLower(v[0]))
	return err == nil && b == value
}

func projectMatch(q url.Values, projectID string) bool {
	return fieldMatch(q, "project_id", projectID) && fieldMatch(q, "tenant_id", projectID)
}

// checkIfMatch honours "If-Match: revision_number=N" (revision-if-match).
func (st *state) checkIfMatch(r *http.Request, rev int) *apiError {
	h := r.Header.Get("If-Match")
	if h == "" || !st.hasExt("revision-if-match") {
		return nil
	}
	want, err := strconv.Atoi(strings.TrimPrefix(h, "revision_number="))
	if err != nil {
		return errf(400, "BadRequest", "If-Match header must be revision_number=<int>.")
	}
	if want != rev {
		return errf(412, "RevisionNumberConstraintFailed", "Constrained to %d, but current revision is %d", want, rev)
	}
	return nil
}

// --- wire forms: Neutron reports tenant_id next to project_id ---

type portWire struct {
	Port
	TenantID string `json:"tenant_id"`
}
type networkWire struct {
	Network
	TenantID string `json:"tenant_id"`
}
type subnetWire struct {
	Subnet
	TenantID string `json:"tenant_id"`
}

func portOut(p *Port) portWire          { return portWire{p.clone(), p.ProjectID} }
func networkOut(n *Network) networkWire { return networkWire{n.clone(), n.ProjectID} }
func subnetOut(s *Subnet) subnetWire    { return subnetWire{s.clone(), s.ProjectID} }

func (s *Server) neutronFail(w http.ResponseWriter, e *apiError) { writeError(w, svcNetwork, e) }

// --- versions and extensions ---

func (s *Server) handleNetworkVersions(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, map[string]any{"versions": []any{map[string]any{"id": "v2.0", "status": "CURRENT",
		"links": []any{map[string]string{"rel": "self", "href": s.url + neutronBase + "/"}}}}})
}

func (s *Server) handleExtensions(w http.ResponseWriter, r *http.Request, c *caller) {
	var out []map[string]string
	s.st.mu.RLock()
	aliases := slices.Clone(s.st.extensions)
	s.st.mu.RUnlock()
	for _, a := range aliases {
		out = append(out, map[string]string{"alias": a, "name": a, "description": a, "updated": "2020-01-01T00:00:00-00:00"})
	}
	writeJSON(w, 200, map[string]any{"extensions": out})
}

// --- networks ---

func (s *Server) listNetworks(w http.ResponseWriter, r *http.Request, c *caller) {
	q := r.URL.Query()
	st := s.st
	st.mu.RLock()
	defer st.mu.RUnlock()
	writeList(st, w, r, "networks", inOrder(st, st.networks), func(n *Network) bool {
		return st.networkVisible(c, n) && fieldMatch(q, "id", n.ID) && fieldMatch(q, "name", n.Name) &&
			fieldMatch(q, "description", n.Description) &&
			projectMatch(q, n.ProjectID) && boolMatch(q, "shared", n.Shared) &&
			boolMatch(q, "router:external", n.External) && fieldMatch(q, "status", n.Status) && tagsMatch(q, n.Tags)
	}, networkOut)
}

func (st *state) visibleNetwork(c *caller, id string) (*Network, *apiError) {
	n := st.networks[id]
	if n == nil || !st.networkVisible(c, n) {
		return nil, errf(404, "NetworkNotFound", "Network %s could not be found.", id)
	}
	return n, nil
}

type networkBody struct {
	Network struct {
		Name         *string   `json:"name"`
		Description  *string   `json:"description"`
		Shared       *bool     `json:"shared"`
		External     *bool     `json:"router:external"`
		AdminStateUp *bool     `json:"admin_state_up"`
		ProjectID    string    `json:"project_id"`
		TenantID     string    `json:"tenant_id"`
		Tags         *[]string `json:"tags"`
		MTU          int       `json:"mtu"`
	} `json:"network"`
}

func (s *Server) createNetwork(w http.ResponseWriter, r *http.Request, c *caller) {
	var b networkBody
	if e := decode(r, &b); e != nil {
		s.neutronFail(w, e)
		return
	}
	in := b.Network
	if !c.admin && (in.Shared != nil && *in.Shared || in.External != nil && *in.External) {
		s.neutronFail(w, errf(403, "PolicyNotAuthorized", "rule:create_network:shared is disallowed by policy"))
		return
	}
	project, e := createProject(c, "create_network", in.ProjectID, in.TenantID)
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	tags, e := st.createTags(derefSlice(in.Tags), project, "network")
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	n := st.newNetwork("", deref(in.Name), project, derefBool(in.Shared), derefBool(in.External), tags)
	n.Description = deref(in.Description)
	if in.MTU > 0 {
		n.MTU = in.MTU
	}
	writeJSON(w, 201, map[string]any{"network": networkOut(n)})
}

func (st *state) newNetwork(id, name, project string, shared, external bool, tags []string) *Network {
	if id == "" {
		id = newID()
	}
	t := now()
	n := &Network{ID: id, Name: name, ProjectID: project, Shared: shared, External: external, AdminStateUp: true,
		Status: "ACTIVE", MTU: 1500, Subnets: []string{}, Tags: dedupTags(tags), RevisionNumber: 1, CreatedAt: t, UpdatedAt: t}
	st.networks[id] = n
	st.order(id)
	return n
}

func (st *state) deleteNetwork(n *Network) {
	for id := range st.portsByNetwork[n.ID] {
		st.deletePort(st.ports[id])
	}
	for _, sid := range n.Subnets {
		delete(st.subnets, sid)
		delete(st.pools, sid)
		delete(st.seq, sid)
	}
	for id, p := range st.rbac {
		if p.ObjectID == n.ID {
			delete(st.rbac, id)
		}
	}
	delete(st.networks, n.ID)
	delete(st.seq, n.ID)
}

func (s *Server) updateNetwork(w http.ResponseWriter, r *http.Request, c *caller) {
	var b networkBody
	if e := decode(r, &b); e != nil {
		s.neutronFail(w, e)
		return
	}
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	n, e := st.visibleNetwork(c, r.PathValue("id"))
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	if !owns(c, n.ProjectID) {
		s.neutronFail(w, errf(403, "PolicyNotAuthorized", "rule:update_network is disallowed by policy"))
		return
	}
	if e := st.checkIfMatch(r, n.RevisionNumber); e != nil {
		s.neutronFail(w, e)
		return
	}
	in := b.Network
	if !c.admin && (in.Shared != nil || in.External != nil) {
		s.neutronFail(w, errf(403, "PolicyNotAuthorized", "rule:update_network:shared is disallowed by policy"))
		return
	}
	if in.Name != nil {
		n.Name = *in.Name
	}
	if in.Description != nil {
		n.Description = *in.Description
	}
	if in.Shared != nil {
		n.Shared = *in.Shared
	}
	if in.External != nil {
		n.External = *in.External
	}
	n.RevisionNumber++
	n.UpdatedAt = now()
	writeJSON(w, 200, map[string]any{"network": networkOut(n)})
}

// refuseNetworkDelete: only the owner deletes, and only once no port but
// DHCP's is left.
func (st *state) refuseNetworkDelete(c *caller, n *Network) *apiError {
	if !owns(c, n.ProjectID) {
		return errf(403, "PolicyNotAuthorized", "rule:delete_network is disallowed by policy")
	}
	for id := range st.portsByNetwork[n.ID] {
		if st.ports[id].DeviceOwner != OwnerDHCP {
			return errf(409, "NetworkInUse", "Unable to complete operation on network %s. There are one or more ports still in use on the network.", n.ID)
		}
	}
	return nil
}

// --- subnets ---

func (s *Server) listSubnets(w http.ResponseWriter, r *http.Request, c *caller) {
	q := r.URL.Query()
	st := s.st
	st.mu.RLock()
	defer st.mu.RUnlock()
	var ids []string
	if nets, ok := q["network_id"]; ok {
		for _, nid := range nets {
			if n := st.networks[nid]; n != nil {
				ids = append(ids, n.Subnets...)
			}
		}
	} else {
		for id := range st.subnets {
			ids = append(ids, id)
		}
	}
	st.sortIDs(ids)
	writeList(st, w, r, "subnets", byIDs(st.subnets, ids), func(sn *Subnet) bool {
		return st.subnetVisible(c, sn) && fieldMatch(q, "id", sn.ID) && fieldMatch(q, "name", sn.Name) &&
			fieldMatch(q, "cidr", sn.CIDR) && fieldMatch(q, "gateway_ip", sn.GatewayIP) &&
			fieldMatch(q, "ip_version", strconv.Itoa(sn.IPVersion)) && projectMatch(q, sn.ProjectID) && tagsMatch(q, sn.Tags)
	}, subnetOut)
}

func (st *state) visibleSubnet(c *caller, id string) (*Subnet, *apiError) {
	sn := st.subnets[id]
	if sn == nil || !st.subnetVisible(c, sn) {
		return nil, errf(404, "SubnetNotFound", "Subnet %s could not be found.", id)
	}
	return sn, nil
}

func (s *Server) createSubnet(w http.ResponseWriter, r *http.Request, c *caller) {
	var b struct {
		Subnet struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			NetworkID   string          `json:"network_id"`
			CIDR        string          `json:"cidr"`
			GatewayIP   json.RawMessage `json:"gateway_ip"`
			IPVersion   int             `json:"ip_version"`
			EnableDHCP  *bool           `json:"enable_dhcp"`
			Tags        []string        `json:"tags"`
		} `json:"subnet"`
	}
	if e := decode(r, &b); e != nil {
		s.neutronFail(w, e)
		return
	}
	in := b.Subnet
	gw, gwSet := "", len(in.GatewayIP) > 0
	if gwSet && string(in.GatewayIP) != "null" {
		if err := json.Unmarshal(in.GatewayIP, &gw); err != nil {
			s.neutronFail(w, errf(400, "InvalidInput", "Invalid input for gateway_ip."))
			return
		}
	}
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	n, e := st.visibleNetwork(c, in.NetworkID)
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	if !owns(c, n.ProjectID) {
		s.neutronFail(w, errf(403, "PolicyNotAuthorized", "rule:create_subnet is disallowed by policy"))
		return
	}
	tags, e := st.createTags(in.Tags, n.ProjectID, "subnet")
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	in.Tags = tags
	sn, e := st.newSubnet("", in.Name, n, in.CIDR, gw, !gwSet)
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	sn.Description = in.Description
	sn.Tags = dedupTags(in.Tags)
	if in.EnableDHCP != nil {
		sn.EnableDHCP = *in.EnableDHCP
	}
	writeJSON(w, 201, map[string]any{"subnet": subnetOut(sn)})
}

// newSubnet adds a subnet; defaultGateway picks the first host address.
func (st *state) newSubnet(id, name string, n *Network, cidr, gateway string, defaultGateway bool) (*Subnet, *apiError) {
	pfx, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, errf(400, "InvalidInput", "Invalid input for operation: '%s' is not a valid IP subnet.", cidr)
	}
	pfx = pfx.Masked()
	if defaultGateway {
		gateway = pfx.Addr().Next().String()
	}
	pool, perr := newPool(pfx.String(), gateway)
	if perr != nil {
		return nil, errf(400, "InvalidInput", "Invalid input for operation: %v.", perr)
	}
	for _, other := range st.networkSubnets(n.ID) {
		if st.pools[other.ID].prefix.Overlaps(pfx) {
			return nil, errf(400, "InvalidInput", "Invalid input for operation: Requested subnet with cidr: %s for network: %s overlaps with another subnet.", pfx, n.ID)
		}
	}
	if id == "" {
		id = newID()
	}
	t := now()
	v := 4
	if pfx.Addr().Is6() {
		v = 6
	}
	sn := &Subnet{ID: id, Name: name, NetworkID: n.ID, ProjectID: n.ProjectID, CIDR: pfx.String(), GatewayIP: gateway,
		IPVersion: v, EnableDHCP: true, AllocationPools: pool.allocationPools(), Tags: []string{}, RevisionNumber: 1,
		CreatedAt: t, UpdatedAt: t}
	st.subnets[id] = sn
	st.pools[id] = pool
	st.order(id)
	n.Subnets = append(n.Subnets, id)
	n.RevisionNumber++
	return sn, nil
}

// refuseSubnetDelete: only the owner deletes, and only once no address of
// the subnet is allocated.
func (st *state) refuseSubnetDelete(c *caller, sn *Subnet) *apiError {
	if !owns(c, sn.ProjectID) {
		return errf(403, "PolicyNotAuthorized", "rule:delete_subnet is disallowed by policy")
	}
	if len(st.portsBySubnet[sn.ID]) > 0 || len(st.pools[sn.ID].used) > 0 {
		return errf(409, "SubnetInUse", "Unable to complete operation on subnet %s: One or more ports have an IP allocation from this subnet.", sn.ID)
	}
	return nil
}

func (st *state) deleteSubnet(sn *Subnet) {
	if n := st.networks[sn.NetworkID]; n != nil {
		n.Subnets = slices.DeleteFunc(n.Subnets, func(x string) bool { return x == sn.ID })
	}
	delete(st.subnets, sn.ID)
	delete(st.pools, sn.ID)
	delete(st.seq, sn.ID)
}

// --- ports ---

// portCandidates narrows a port list with the most selective index the
// query offers, so a filtered list does not scan every port.
func (st *state) portCandidates(q url.Values, c *caller) []string {
	var best set
	consider := func(s set) {
		if best == nil || len(s) < len(best) {
			best = s
		}
	}
	empty := set{}
	pick := func(ix index, keys []string) {
		if len(keys) == 0 {
			return
		}
		if len(keys) == 1 {
			if s := ix[keys[0]]; s != nil {
				consider(s)
			} else {
				consider(empty)
			}
			return
		}
		u := set{}
		for _, k := range keys {
			for id := range ix[k] {
				u[id] = struct{}{}
			}
		}
		consider(u)
	}
	if ids := q["id"]; len(ids) > 0 {
		u := set{}
		for _, id := range ids {
			if _, ok := st.ports[id]; ok {
				u[id] = struct{}{}
			}
		}
		consider(u)
	}
	var ips []string
	for _, f := range q["fixed_ips"] {
		if v, ok := strings.CutPrefix(f, "ip_address="); ok {
			ips = append(ips, v)
		}
	}
	pick(st.portsByIP, ips)
	pick(st.portsByDevice, q["device_id"])
	for _, t := range listValues(q, "tags") {
		pick(st.portsByTag, []string{t})
	}
	pick(st.portsByNetwork, q["network_id"])
	pick(st.portsByProject, q["project_id"])
	pick(st.portsByProject, q["tenant_id"])
	var ids []string
	if best != nil {
		ids = make([]string, 0, len(best))
		for id := range best {
			ids = append(ids, id)
		}
	} else {
		ids = make([]string, 0, len(st.ports))
		for id := range st.ports {
			ids = append(ids, id)
		}
	}
	st.sortIDs(ids)
	return ids
}

func fixedIPsMatch(q url.Values, p *Port) bool {
	var ips, subnets []string
	for _, f := range q["fixed_ips"] {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "ip_address":
			ips = append(ips, v)
		case "subnet_id":
			subnets = append(subnets, v)
		}
	}
	if len(ips) == 0 && len(subnets) == 0 {
		return true
	}
	for _, f := range p.FixedIPs {
		if (len(ips) == 0 || slices.Contains(ips, f.IPAddress)) && (len(subnets) == 0 || slices.Contains(subnets, f.SubnetID)) {
			return true
		}
	}
	return false
}

func (s *Server) listPorts(w http.ResponseWriter, r *http.Request, c *caller) {
	q := r.URL.Query()
	st := s.st
	st.mu.RLock()
	defer st.mu.RUnlock()
	sgs := q["security_groups"]
	writeList(st, w, r, "ports", byIDs(st.ports, st.portCandidates(q, c)), func(p *Port) bool {
		return st.portVisible(c, p) && fieldMatch(q, "id", p.ID) && fieldMatch(q, "name", p.Name) &&
			fieldMatch(q, "description", p.Description) &&
			fieldMatch(q, "network_id", p.NetworkID) && fieldMatch(q, "device_id", p.DeviceID) &&
			fieldMatch(q, "device_owner", p.DeviceOwner) && fieldMatch(q, "mac_address", p.MACAddress) &&
			fieldMatch(q, "status", p.Status) && projectMatch(q, p.ProjectID) && tagsMatch(q, p.Tags) &&
			fixedIPsMatch(q, p) &&
			(len(sgs) == 0 || slices.ContainsFunc(sgs, func(g string) bool { return slices.Contains(p.SecurityGroups, g) }))
	}, portOut)
}

func (st *state) visiblePort(c *caller, id string) (*Port, *apiError) {
	p := st.ports[id]
	if p == nil || !st.portVisible(c, p) {
		return nil, errf(404, "PortNotFound", "Port %s could not be found.", id)
	}
	return p, nil
}

type portBody struct {
	NetworkID           string         `json:"network_id"`
	Name                *string        `json:"name"`
	Description         *string        `json:"description"`
	ProjectID           string         `json:"project_id"`
	TenantID            string         `json:"tenant_id"`
	MACAddress          *string        `json:"mac_address"`
	FixedIPs            *[]FixedIP     `json:"fixed_ips"`
	DeviceID            *string        `json:"device_id"`
	DeviceOwner         *string        `json:"device_owner"`
	AdminStateUp        *bool          `json:"admin_state_up"`
	SecurityGroups      *[]string      `json:"security_groups"`
	AllowedAddressPairs *[]AddressPair `json:"allowed_address_pairs"`
	PortSecurityEnabled *bool          `json:"port_security_enabled"`
	HostID              *string        `json:"binding:host_id"`
	Tags                *[]string      `json:"tags"`
}

func (s *Server) createPort(w http.ResponseWriter, r *http.Request, c *caller) {
	var b struct {
		Port portBody `json:"port"`
	}
	if e := decode(r, &b); e != nil {
		s.neutronFail(w, e)
		return
	}
	in := b.Port
	if in.NetworkID == "" {
		s.neutronFail(w, errf(400, "BadRequest", "Bad port request: network_id is required."))
		return
	}
	sp := portSpec{networkID: in.NetworkID, projectID: firstNonEmpty(in.ProjectID, in.TenantID), name: deref(in.Name),
		description: deref(in.Description), deviceID: deref(in.DeviceID), deviceOwner: deref(in.DeviceOwner),
		mac: deref(in.MACAddress), securityGroups: in.SecurityGroups, tags: derefSlice(in.Tags),
		portSecurity: in.PortSecurityEnabled, adminStateUp: in.AdminStateUp}
	if in.FixedIPs != nil {
		sp.fixedIPs, sp.explicitIPs = *in.FixedIPs, true
	}
	if in.AllowedAddressPairs != nil {
		sp.pairs = *in.AllowedAddressPairs
	}
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	// Without tag creation Neutron accepts a port's tags and drops them.
	sp.tags, _ = st.tagsAtCreate(true, sp.tags)
	e := st.pickAddressPolicy(c, sp.networkID, sp.fixedIPs, "create_port")
	if e == nil {
		e = st.checkQuota(firstNonEmpty(sp.projectID, c.projectID), "port")
	}
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	p, e := st.createPort(c, sp)
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	if in.HostID != nil {
		p.HostID = *in.HostID
	}
	writeJSON(w, 201, map[string]any{"port": portOut(p)})
}

func (s *Server) updatePort(w http.ResponseWriter, r *http.Request, c *caller) {
	var b struct {
		Port portBody `json:"port"`
	}
	if e := decode(r, &b); e != nil {
		s.neutronFail(w, e)
		return
	}
	in := b.Port
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	p, e := st.visiblePort(c, r.PathValue("id"))
	if e == nil && !owns(c, p.ProjectID) {
		e = errf(403, "PolicyNotAuthorized", "rule:update_port is disallowed by policy")
	}
	if e == nil {
		e = st.checkIfMatch(r, p.RevisionNumber)
	}
	if e == nil && in.Tags != nil {
		e = validTags(*in.Tags)
	}
	var pairs []AddressPair
	if e == nil && in.AllowedAddressPairs != nil {
		pairs, e = normalizePairs(*in.AllowedAddressPairs, p.MACAddress)
	}
	if e == nil && in.SecurityGroups != nil {
		for _, g := range *in.SecurityGroups {
			if sg := st.sgs[g]; sg == nil || !owns(c, sg.ProjectID) {
				e = errf(404, "SecurityGroupNotFound", "Security group %s does not exist", g)
				break
			}
		}
	}
	if e == nil && in.FixedIPs != nil {
		e = st.pickAddressPolicy(c, p.NetworkID, *in.FixedIPs, "update_port")
	}
	var newIPs []FixedIP
	if e == nil && in.FixedIPs != nil {
		// Keep addresses the port already holds; claim only new ones.
		held := map[string]FixedIP{}
		for _, f := range p.FixedIPs {
			held[f.IPAddress] = f
		}
		var want []FixedIP
		var keep []FixedIP
		for _, f := range *in.FixedIPs {
			if h, ok := held[f.IPAddress]; ok && f.IPAddress != "" && (f.SubnetID == "" || f.SubnetID == h.SubnetID) {
				keep = append(keep, h)
				delete(held, f.IPAddress)
				continue
			}
			want = append(want, f)
		}
		var claimed []FixedIP
		claimed, e = st.resolveFixedIPs(p.NetworkID, p.ID, want, true)
		if e == nil {
			var drop []FixedIP
			for _, f := range held {
				drop = append(drop, f)
			}
			st.releaseFixedIPs(drop)
			newIPs = append(append([]FixedIP{}, keep...), claimed...)
		}
	}
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	st.mutatePort(p, func(p *Port) {
		if in.Name != nil {
			p.Name = *in.Name
		}
		if in.Description != nil {
			p.Description = *in.Description
		}
		if in.DeviceID != nil {
			p.DeviceID = *in.DeviceID
		}
		if in.DeviceOwner != nil {
			p.DeviceOwner = *in.DeviceOwner
		}
		if in.AdminStateUp != nil {
			p.AdminStateUp = *in.AdminStateUp
		}
		if in.SecurityGroups != nil {
			p.SecurityGroups = cloneStrings(*in.SecurityGroups)
		}
		if in.AllowedAddressPairs != nil {
			p.AllowedAddressPairs = pairs
		}
		if in.PortSecurityEnabled != nil {
			p.PortSecurityEnabled = *in.PortSecurityEnabled
		}
		if in.HostID != nil {
			p.HostID = *in.HostID
		}
		if in.Tags != nil {
			p.Tags = dedupTags(*in.Tags)
		}
		if in.FixedIPs != nil {
			p.FixedIPs = newIPs
		}
	})
	writeJSON(w, 200, map[string]any{"port": portOut(p)})
}

// pickAddressPolicy is Neutron's create_port:fixed_ips:ip_address (and the update's):
// only the network's owner (or an admin) picks an address on it; a project the
// network is shared with gets one allocated.
func (st *state) pickAddressPolicy(c *caller, networkID string, ips []FixedIP, action string) *apiError {
	n := st.networks[networkID]
	if c.admin || n == nil || !st.networkVisible(c, n) || n.ProjectID == c.projectID {
		return nil
	}
	for _, f := range ips {
		if f.IPAddress != "" {
			return errf(403, "PolicyNotAuthorized", "(rule:%[1]s and (rule:%[1]s:fixed_ips and (rule:%[1]s:fixed_ips:ip_address))) is disallowed by policy", action)
		}
	}
	return nil
}

// refusePortDelete: router ports go only through the router API.
func refusePortDelete(_ *caller, p *Port) *apiError {
	if p.DeviceOwner == OwnerRouterInterface || p.DeviceOwner == OwnerRouterGateway {
		return errf(409, "ServicePortInUse", "Port %s cannot be deleted directly via the port API: has device owner %s.", p.ID, p.DeviceOwner)
	}
	return nil
}

// --- tags on any taggable resource ---

// taggable returns a pointer to a resource's tag list, checking visibility
// (and ownership for writes). Ports are reindexed by the caller.
func (st *state) taggable(c *caller, resource, id string, write bool) (*[]string, *Port, *apiError) {
	nf := func(kind string) *apiError {
		return errf(404, "NotFound", "%s %s could not be found.", kind, id)
	}
	forbid := errf(403, "PolicyNotAuthorized", "rule:update_%s:tags is disallowed by policy", strings.TrimSuffix(resource, "s"))
	// 2025.1's tag API finds the resource whoever owns it and then asks the policy, so
	// another project's object is a 403 there, not a 404.
	if write && st.secureRBAC && !c.admin {
		if owner, ok := st.ownerOf(resource, id); ok && owner != c.projectID {
			return nil, nil, forbid
		}
	}
	var tags *[]string
	var owner string
	var port *Port
	switch resource {
	case "ports":
		p := st.ports[id]
		if p == nil || !st.portVisible(c, p) {
			return nil, nil, nf("Port")
		}
		tags, owner, port = &p.Tags, p.ProjectID, p
	case "networks":
		n := st.networks[id]
		if n == nil || !st.networkVisible(c, n) {
			return nil, nil, nf("Network")
		}
		tags, owner = &n.Tags, n.ProjectID
	case "subnets":
		sn := st.subnets[id]
		if sn == nil || !st.subnetVisible(c, sn) {
			return nil, nil, nf("Subnet")
		}
		tags, owner = &sn.Tags, sn.ProjectID
	case "routers":
		rt := st.routers[id]
		if rt == nil || !owns(c, rt.ProjectID) {
			return nil, nil, nf("Router")
		}
		tags, owner = &rt.Tags, rt.ProjectID
	case "security-groups":
		sg := st.sgs[id]
		if sg == nil || !owns(c, sg.ProjectID) {
			return nil, nil, nf("Security group")
		}
		tags, owner = &sg.Tags, sg.ProjectID
	case "floatingips":
		f := st.fips[id]
		if f == nil || !owns(c, f.ProjectID) {
			return nil, nil, nf("Floating IP")
		}
		tags, owner = &f.Tags, f.ProjectID
	default:
		return nil, nil, errf(404, "NotFound", "Resource %s not found.", resource)
	}
	if write && !owns(c, owner) {
		return nil, nil, forbid
	}
	return tags, port, nil
}

// ownerOf is the project of a taggable resource, whoever may see it.
func (st *state) ownerOf(resource, id string) (string, bool) {
	switch resource {
	case "ports":
		if p := st.ports[id]; p != nil {
			return p.ProjectID, true
		}
	case "networks":
		if n := st.networks[id]; n != nil {
			return n.ProjectID, true
		}
	case "subnets":
		if sn := st.subnets[id]; sn != nil {
			return sn.ProjectID, true
		}
	case "routers":
		if rt := st.routers[id]; rt != nil {
			return rt.ProjectID, true
		}
	case "security-groups":
		if sg := st.sgs[id]; sg != nil {
			return sg.ProjectID, true
		}
	case "floatingips":
		if f := st.fips[id]; f != nil {
			return f.ProjectID, true
		}
	}
	return "", false
}

// setTags replaces a tag list, keeping the port tag index right.
func (st *state) setTags(tags *[]string, port *Port, next []string) {
	if port != nil {
		st.mutatePort(port, func(p *Port) { p.Tags = next })
		return
	}
	*tags = next
}

func (s *Server) tagHandlers(resource string) map[string]hfn {
	withTags := func(write bool, fn func(w http.ResponseWriter, r *http.Request, tags *[]string, port *Port)) hfn {
		return func(w http.ResponseWriter, r *http.Request, c *caller) {
			st := s.st
			if write {
				st.mu.Lock()
				defer st.mu.Unlock()
			} else {
				st.mu.RLock()
				defer st.mu.RUnlock()
			}
			tags, port, e := st.taggable(c, resource, r.PathValue("id"), write)
			if e != nil {
				s.neutronFail(w, e)
				return
			}
			fn(w, r, tags, port)
		}
	}
	return map[string]hfn{
		"GET /tags": withTags(false, func(w http.ResponseWriter, r *http.Request, tags *[]string, _ *Port) {
			writeJSON(w, 200, map[string]any{"tags": cloneStrings(*tags)})
		}),
		"PUT /tags": withTags(true, func(w http.ResponseWriter, r *http.Request, tags *[]string, port *Port) {
			var b struct {
				Tags []string `json:"tags"`
			}
			if e := decode(r, &b); e != nil {
				s.neutronFail(w, e)
				return
			}
			if e := validTags(b.Tags); e != nil {
				s.neutronFail(w, e)
				return
			}
			s.st.setTags(tags, port, dedupTags(b.Tags))
			// The answer echoes the request's order; the resource shows them sorted.
			writeJSON(w, 200, map[string]any{"tags": cloneStrings(b.Tags)})
		}),
		"DELETE /tags": withTags(true, func(w http.ResponseWriter, r *http.Request, tags *[]string, port *Port) {
			s.st.setTags(tags, port, []string{})
			w.WriteHeader(204)
		}),
		"GET /tags/{tag}": withTags(false, func(w http.ResponseWriter, r *http.Request, tags *[]string, _ *Port) {
			if !slices.Contains(*tags, r.PathValue("tag")) {
				s.neutronFail(w, errf(404, "TagNotFound", "Tag %s could not be found for %s %s.", r.PathValue("tag"), resource, r.PathValue("id")))
				return
			}
			w.WriteHeader(204)
		}),
		"PUT /tags/{tag}": withTags(true, func(w http.ResponseWriter, r *http.Request, tags *[]string, port *Port) {
			t := r.PathValue("tag")
			if e := validTags([]string{t}); e != nil {
				s.neutronFail(w, e)
				return
			}
			if !slices.Contains(*tags, t) {
				s.st.setTags(tags, port, append(cloneStrings(*tags), t))
			}
			w.WriteHeader(201)
		}),
		"DELETE /tags/{tag}": withTags(true, func(w http.ResponseWriter, r *http.Request, tags *[]string, port *Port) {
			t := r.PathValue("tag")
			if !slices.Contains(*tags, t) {
				s.neutronFail(w, errf(404, "TagNotFound", "Tag %s could not be found for %s %s.", t, resource, r.PathValue("id")))
				return
			}
			s.st.setTags(tags, port, slices.DeleteFunc(cloneStrings(*tags), func(x string) bool { return x == t }))
			w.WriteHeader(204)
		}),
	}
}

// --- small helpers ---

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func derefBool(p *bool) bool { return p != nil && *p }

func derefSlice(p *[]string) []string {
	if p == nil {
		return nil
	}
	return *p
}

func firstNonEmpty(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}
