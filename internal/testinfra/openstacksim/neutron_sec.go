package openstacksim

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// --- security groups ---

// ruleOut renders a rule with Neutron's nulls for "any".
func ruleOut(r SecurityGroupRule) map[string]any {
	null := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	port := func(p int) any {
		if p == 0 {
			return nil
		}
		return p
	}
	return map[string]any{
		"id": r.ID, "security_group_id": r.SecurityGroupID, "direction": r.Direction, "ethertype": r.EtherType,
		"protocol": null(r.Protocol), "port_range_min": port(r.PortRangeMin), "port_range_max": port(r.PortRangeMax),
		"remote_ip_prefix": null(r.RemoteIPPrefix), "remote_group_id": null(r.RemoteGroupID),
		"remote_address_group_id": nil, "normalized_cidr": null(normalizedCIDR(r.RemoteIPPrefix)), "description": r.Description,
		"project_id": r.ProjectID, "tenant_id": r.ProjectID, "revision_number": r.RevisionNumber,
		"created_at": r.CreatedAt, "updated_at": r.UpdatedAt, "tags": []string{}, "belongs_to_default_sg": false,
	}
}

func sgOut(g *SecurityGroup) map[string]any {
	rules := make([]map[string]any, 0, len(g.Rules))
	for _, r := range g.Rules {
		rules = append(rules, ruleOut(r))
	}
	return map[string]any{
		"id": g.ID, "name": g.Name, "description": g.Description, "project_id": g.ProjectID, "tenant_id": g.ProjectID,
		"stateful": g.Stateful, "security_group_rules": rules, "tags": cloneStrings(g.Tags), "shared": false,
		"revision_number": g.RevisionNumber, "created_at": g.CreatedAt, "updated_at": g.UpdatedAt,
	}
}

func (st *state) visibleSG(c *caller, id string) (*SecurityGroup, *apiError) {
	g := st.sgs[id]
	if g == nil || !owns(c, g.ProjectID) {
		return nil, errf(404, "SecurityGroupNotFound", "Security group %s does not exist", id)
	}
	return g, nil
}

func (s *Server) listSGs(w http.ResponseWriter, r *http.Request, c *caller) {
	q := r.URL.Query()
	st := s.st
	if !c.admin {
		// As Neutron does: a project's first look at its security groups makes its
		// default group (which a blind read then does not see).
		st.mu.Lock()
		st.ensureDefaultSG(c.projectID)
		st.mu.Unlock()
	}
	st.mu.RLock()
	defer st.mu.RUnlock()
	writeList(st, w, r, "security_groups", inOrder(st, st.sgs), func(g *SecurityGroup) bool {
		return owns(c, g.ProjectID) && fieldMatch(q, "id", g.ID) && fieldMatch(q, "name", g.Name) &&
			fieldMatch(q, "description", g.Description) && projectMatch(q, g.ProjectID) && tagsMatch(q, g.Tags)
	}, sgOut)
}

type sgBody struct {
	SG struct {
		Name        *string   `json:"name"`
		Description *string   `json:"description"`
		ProjectID   string    `json:"project_id"`
		TenantID    string    `json:"tenant_id"`
		Stateful    *bool     `json:"stateful"`
		Tags        *[]string `json:"tags"`
	} `json:"security_group"`
}

func (s *Server) createSG(w http.ResponseWriter, r *http.Request, c *caller) {
	var b sgBody
	if e := decode(r, &b); e != nil {
		s.neutronFail(w, e)
		return
	}
	in := b.SG
	project, e := createProject(c, "create_security_group", in.ProjectID, in.TenantID)
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	if deref(in.Name) == "default" {
		s.neutronFail(w, errf(409, "SecurityGroupDefaultAlreadyExists", "Default security group already exists."))
		return
	}
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	tags, e := st.createTags(derefSlice(in.Tags), project, "security_group")
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	g := st.newSecurityGroup(project, deref(in.Name), deref(in.Description), tags)
	if in.Stateful != nil {
		g.Stateful = *in.Stateful
	}
	writeJSON(w, 201, map[string]any{"security_group": sgOut(g)})
}

func (s *Server) updateSG(w http.ResponseWriter, r *http.Request, c *caller) {
	var b sgBody
	if e := decode(r, &b); e != nil {
		s.neutronFail(w, e)
		return
	}
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	g, e := st.visibleSG(c, r.PathValue("id"))
	if e == nil {
		e = st.checkIfMatch(r, g.RevisionNumber)
	}
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	if b.SG.Name != nil {
		g.Name = *b.SG.Name
	}
	if b.SG.Description != nil {
		g.Description = *b.SG.Description
	}
	if b.SG.Stateful != nil {
		g.Stateful = *b.SG.Stateful
	}
	g.RevisionNumber++
	g.UpdatedAt = now()
	writeJSON(w, 200, map[string]any{"security_group": sgOut(g)})
}

// refuseSGDelete: only the admin removes a project's default group, and
// no group goes while a port still uses it.
func (st *state) refuseSGDelete(c *caller, g *SecurityGroup) *apiError {
	if st.defaultSG[g.ProjectID] == g.ID && !c.admin {
		return errf(409, "SecurityGroupCannotRemoveDefault", "Insufficient rights for removing default security group.")
	}
	for _, p := range st.ports {
		if slices.Contains(p.SecurityGroups, g.ID) {
			return errf(409, "SecurityGroupInUse", "Security Group %s in use.", g.ID)
		}
	}
	return nil
}

func (st *state) deleteSG(g *SecurityGroup) {
	for _, r := range g.Rules {
		delete(st.sgRules, r.ID)
	}
	// Rules elsewhere that name this group as their remote go with it.
	for _, other := range st.sgs {
		other.Rules = slices.DeleteFunc(other.Rules, func(r SecurityGroupRule) bool {
			if r.RemoteGroupID == g.ID {
				delete(st.sgRules, r.ID)
				return true
			}
			return false
		})
	}
	delete(st.sgs, g.ID)
	delete(st.seq, g.ID)
	if st.defaultSG[g.ProjectID] == g.ID {
		delete(st.defaultSG, g.ProjectID)
	}
}

// --- security group rules ---

var protocolNumbers = map[string]string{"1": "icmp", "6": "tcp", "17": "udp", "58": "ipv6-icmp", "132": "sctp", "33": "dccp", "136": "udplite"}

func normProtocol(p string) string {
	p = strings.ToLower(p)
	if p == "any" {
		return ""
	}
	if n, ok := protocolNumbers[p]; ok {
		return n
	}
	if p == "icmpv6" {
		return "ipv6-icmp"
	}
	return p
}

func normalizedCIDR(p string) string {
	if pfx, err := netip.ParsePrefix(p); err == nil {
		return pfx.Masked().String()
	}
	return p
}

func normPrefix(p string) string {
	p = normalizedCIDR(p)
	if p == "0.0.0.0/0" || p == "::/0" {
		return ""
	}
	return p
}

func sameRule(a, b SecurityGroupRule) bool {
	return a.Direction == b.Direction && a.EtherType == b.EtherType && normProtocol(a.Protocol) == normProtocol(b.Protocol) &&
		a.PortRangeMin == b.PortRangeMin && a.PortRangeMax == b.PortRangeMax &&
		normPrefix(a.RemoteIPPrefix) == normPrefix(b.RemoteIPPrefix) && a.RemoteGroupID == b.RemoteGroupID
}

type ruleBody struct {
	Rule struct {
		SecurityGroupID string  `json:"security_group_id"`
		Direction       string  `json:"direction"`
		EtherType       string  `json:"ethertype"`
		Protocol        *string `json:"protocol"`
		PortRangeMin    *int    `json:"port_range_min"`
		PortRangeMax    *int    `json:"port_range_max"`
		RemoteIPPrefix  *string `json:"remote_ip_prefix"`
		RemoteGroupID   *string `json:"remote_group_id"`
		Description     string  `json:"description"`
	} `json:"security_group_rule"`
}

// validateRule checks and normalizes a rule as Neutron does.
func validateRule(in ruleBody) (SecurityGroupRule, *apiError) {
	b := in.Rule
	r := SecurityGroupRule{SecurityGroupID: b.SecurityGroupID, Direction: b.Direction, EtherType: b.EtherType,
		Protocol: deref(b.Protocol), RemoteIPPrefix: deref(b.RemoteIPPrefix), RemoteGroupID: deref(b.RemoteGroupID),
		Description: b.Description}
	if b.PortRangeMin != nil {
		r.PortRangeMin = *b.PortRangeMin
	}
	if b.PortRangeMax != nil {
		r.PortRangeMax = *b.PortRangeMax
	}
	if r.Direction != "ingress" && r.Direction != "egress" {
		return r, errf(400, "InvalidInput", "Invalid input for direction. Reason: '%s' is not in ['ingress', 'egress'].", r.Direction)
	}
	if r.EtherType == "" {
		r.EtherType = "IPv4"
	}
	if r.EtherType != "IPv4" && r.EtherType != "IPv6" {
		return r, errf(400, "InvalidInput", "Invalid input for ethertype. Reason: '%s' is not in ['IPv4', 'IPv6'].", r.EtherType)
	}
	proto := normProtocol(r.Protocol)
	if proto == "" {
		r.Protocol = ""
	}
	if r.PortRangeMin != 0 || r.PortRangeMax != 0 {
		switch proto {
		case "":
			return r, errf(400, "SecurityGroupProtocolRequiredWithPorts", "Must also specify protocol if port range is given.")
		case "tcp", "udp", "sctp", "dccp", "udplite":
			if r.PortRangeMin < 1 || r.PortRangeMax > 65535 || r.PortRangeMin > r.PortRangeMax {
				return r, errf(400, "SecurityGroupInvalidPortRange", "For TCP/UDP protocols, port_range_min must be <= port_range_max")
			}
		case "icmp", "ipv6-icmp":
			if r.PortRangeMin > 255 || r.PortRangeMax > 255 {
				return r, errf(400, "SecurityGroupInvalidIcmpValue", "Invalid value for ICMP type or code.")
			}
		default:
			return r, errf(400, "SecurityGroupInvalidProtocolForPort", "Ports cannot be specified for protocol %s.", r.Protocol)
		}
	}
	if r.RemoteIPPrefix != "" {
		if r.RemoteGroupID != "" {
			return r, errf(400, "SecurityGroupRemoteGroupAndRemoteIpPrefix", "Only remote_ip_prefix or remote_group_id may be provided.")
		}
		pfx, err := netip.ParsePrefix(r.RemoteIPPrefix)
		if err != nil {
			a, aerr := netip.ParseAddr(r.RemoteIPPrefix)
			if aerr != nil {
				return r, errf(400, "InvalidInput", "Invalid input for remote_ip_prefix. Reason: '%s' is not a valid IP subnet.", r.RemoteIPPrefix)
			}
			pfx = netip.PrefixFrom(a, a.BitLen())
		}
		if (r.EtherType == "IPv4") != pfx.Addr().Is4() {
			return r, errf(400, "SecurityGroupRuleParameterConflict", "Conflicting value ethertype %s for CIDR %s", r.EtherType, r.RemoteIPPrefix)
		}
		// Stored as given (a bare address becomes a host prefix); duplicates are judged
		// on the masked form, which Neutron shows as normalized_cidr.
		r.RemoteIPPrefix = pfx.String()
	}
	return r, nil
}

func (s *Server) listRules(w http.ResponseWriter, r *http.Request, c *caller) {
	q := r.URL.Query()
	st := s.st
	st.mu.RLock()
	defer st.mu.RUnlock()
	out := []map[string]any{}
	for _, g := range inOrder(st, st.sgs) {
		if !owns(c, g.ProjectID) || !fieldMatch(q, "security_group_id", g.ID) {
			continue
		}
		for _, rl := range g.Rules {
			if !fieldMatch(q, "id", rl.ID) || !fieldMatch(q, "direction", rl.Direction) || !fieldMatch(q, "ethertype", rl.EtherType) ||
				!fieldMatch(q, "protocol", rl.Protocol) || !fieldMatch(q, "remote_ip_prefix", rl.RemoteIPPrefix) ||
				!fieldMatch(q, "remote_group_id", rl.RemoteGroupID) || !fieldMatch(q, "port_range_min", strconv.Itoa(rl.PortRangeMin)) ||
				!fieldMatch(q, "port_range_max", strconv.Itoa(rl.PortRangeMax)) || !projectMatch(q, rl.ProjectID) {
				continue
			}
			out = append(out, ruleOut(rl))
		}
	}
	writeJSON(w, 200, map[string]any{"security_group_rules": out})
}

func (st *state) findRule(c *caller, id string) (*SecurityGroup, int, *apiError) {
	g := st.sgs[st.sgRules[id]]
	if g == nil || !owns(c, g.ProjectID) {
		return nil, 0, errf(404, "SecurityGroupRuleNotFound", "Security group rule %s does not exist", id)
	}
	i := slices.IndexFunc(g.Rules, func(r SecurityGroupRule) bool { return r.ID == id })
	if i < 0 {
		return nil, 0, errf(404, "SecurityGroupRuleNotFound", "Security group rule %s does not exist", id)
	}
	return g, i, nil
}

func (s *Server) getRule(w http.ResponseWriter, r *http.Request, c *caller) {
	st := s.st
	st.mu.RLock()
	defer st.mu.RUnlock()
	g, i, e := st.findRule(c, r.PathValue("id"))
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	writeJSON(w, 200, map[string]any{"security_group_rule": ruleOut(g.Rules[i])})
}

// createRule answers both forms of POST /security-group-rules: one rule
// ({"security_group_rule": {...}}) or Neutron's bulk create ({"security_group_rules":
// [...]}), which is judged as a whole before any rule is stored: every rule in one
// group (400 SecurityGroupNotSingleGroupRules), none repeated in the request (409
// DuplicateSecurityGroupRuleInPost) or already in the group (409
// SecurityGroupRuleExists), the quota counted for all of them.
func (s *Server) createRule(w http.ResponseWriter, r *http.Request, c *caller) {
	var b struct {
		ruleBody
		Rules []json.RawMessage `json:"security_group_rules"`
	}
	if e := decode(r, &b); e != nil {
		s.neutronFail(w, e)
		return
	}
	bodies := []ruleBody{b.ruleBody}
	if b.Rules != nil {
		bodies = bodies[:0]
		for _, raw := range b.Rules {
			var one ruleBody
			if err := json.Unmarshal(raw, &one.Rule); err != nil {
				s.neutronFail(w, errf(400, "BadRequest", "Malformed request body: %v", err))
				return
			}
			bodies = append(bodies, one)
		}
	}
	if len(bodies) == 0 {
		s.neutronFail(w, errf(400, "BadRequest", "Resource body required"))
		return
	}
	rules := make([]SecurityGroupRule, 0, len(bodies))
	for _, one := range bodies {
		rule, e := validateRule(one)
		if e != nil {
			s.neutronFail(w, e)
			return
		}
		if len(rules) > 0 && rule.SecurityGroupID != rules[0].SecurityGroupID {
			s.neutronFail(w, errf(400, "SecurityGroupNotSingleGroupRules", "Only allowed to update rules for one security profile at a time"))
			return
		}
		rules = append(rules, rule)
	}
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	g, e := st.visibleSG(c, rules[0].SecurityGroupID)
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	for i, rule := range rules {
		if rule.RemoteGroupID != "" {
			if _, e := st.visibleSG(c, rule.RemoteGroupID); e != nil {
				s.neutronFail(w, e)
				return
			}
		}
		if slices.ContainsFunc(rules[:i], func(x SecurityGroupRule) bool { return sameRule(x, rule) }) {
			s.neutronFail(w, errf(409, "DuplicateSecurityGroupRuleInPost", "Duplicate Security Group Rule in POST."))
			return
		}
	}
	if e := st.checkQuotaN(g.ProjectID, "security_group_rule", len(rules)); e != nil {
		s.neutronFail(w, e)
		return
	}
	for _, rule := range rules {
		for _, ex := range g.Rules {
			if sameRule(ex, rule) {
				s.neutronFail(w, errf(409, "SecurityGroupRuleExists", "Security group rule already exists. Rule id is %s.", ex.ID))
				return
			}
		}
	}
	out := make([]map[string]any, 0, len(rules))
	for _, rule := range rules {
		out = append(out, ruleOut(st.addRule(g, rule)))
	}
	g.UpdatedAt = now()
	if b.Rules != nil {
		writeJSON(w, 201, map[string]any{"security_group_rules": out})
		return
	}
	writeJSON(w, 201, map[string]any{"security_group_rule": out[0]})
}

func (s *Server) deleteRule(w http.ResponseWriter, r *http.Request, c *caller) {
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	g, i, e := st.findRule(c, r.PathValue("id"))
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	delete(st.sgRules, g.Rules[i].ID)
	g.Rules = slices.Delete(g.Rules, i, i+1)
	g.RevisionNumber++
	g.UpdatedAt = now()
	w.WriteHeader(204)
}

// --- RBAC policies ---

func rbacOut(p *RBACPolicy) map[string]any {
	return map[string]any{"id": p.ID, "object_id": p.ObjectID, "object_type": p.ObjectType, "action": p.Action,
		"target_tenant": p.TargetProject, "target_project": p.TargetProject, "project_id": p.ProjectID, "tenant_id": p.ProjectID}
}

func (s *Server) listRBAC(w http.ResponseWriter, r *http.Request, c *caller) {
	q := r.URL.Query()
	st := s.st
	st.mu.RLock()
	defer st.mu.RUnlock()
	writeList(st, w, r, "rbac_policies", inOrder(st, st.rbac), func(p *RBACPolicy) bool {
		return owns(c, p.ProjectID) && fieldMatch(q, "id", p.ID) && fieldMatch(q, "object_id", p.ObjectID) &&
			fieldMatch(q, "object_type", p.ObjectType) && fieldMatch(q, "action", p.Action) &&
			fieldMatch(q, "target_tenant", p.TargetProject) && fieldMatch(q, "target_project", p.TargetProject) &&
			projectMatch(q, p.ProjectID)
	}, rbacOut)
}

func (st *state) visibleRBAC(c *caller, id string) (*RBACPolicy, *apiError) {
	p := st.rbac[id]
	if p == nil || !owns(c, p.ProjectID) {
		return nil, errf(404, "RbacPolicyNotFound", "RBAC policy of type network with ID %s not found", id)
	}
	return p, nil
}

func (s *Server) createRBAC(w http.ResponseWriter, r *http.Request, c *caller) {
	var b struct {
		P struct {
			ObjectType    string `json:"object_type"`
			ObjectID      string `json:"object_id"`
			Action        string `json:"action"`
			TargetTenant  string `json:"target_tenant"`
			TargetProject string `json:"target_project"`
			ProjectID     string `json:"project_id"`
			TenantID      string `json:"tenant_id"`
		} `json:"rbac_policy"`
	}
	if e := decode(r, &b); e != nil {
		s.neutronFail(w, e)
		return
	}
	in := b.P
	target := firstNonEmpty(in.TargetTenant, in.TargetProject)
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	p, e := st.createRBAC(c, in.ObjectType, in.ObjectID, in.Action, target, firstNonEmpty(in.ProjectID, in.TenantID))
	if e != nil {
		s.neutronFail(w, e)
		return
	}
	writeJSON(w, 201, map[string]any{"rbac_policy": rbacOut(p)})
}

func (st *state) createRBAC(c *caller, objType, objID, action, target, project string) (*RBACPolicy, *apiError) {
	if objType != "network" {
		return nil, errf(400, "InvalidInput", "Invalid input for object_type. Reason: '%s' is not in ['network'].", objType)
	}
	if action != "access_as_shared" && action != "access_as_external" {
		return nil, errf(400, "InvalidInput", "Invalid input for action. Reason: '%s' is not in ['access_as_external', 'access_as_shared'].", action)
	}
	if target == "" {
		return nil, errf(400, "InvalidInput", "Invalid input for operation: target_tenant is required.")
	}
	if target == "*" && !c.admin {
		return nil, errf(403, "PolicyNotAuthorized", "rule:create_rbac_policy:target_tenant is disallowed by policy")
	}
	// Neutron validates the object in a callback and answers a missing network and
	// someone else's alike: bad input.
	n := st.networks[objID]
	if n == nil {
		return nil, errf(400, "InvalidInput", "Invalid input for operation: network %s could not be found.", objID)
	}
	if !owns(c, n.ProjectID) {
		return nil, errf(400, "InvalidInput", "Invalid input for operation: Only admins can manipulate policies on networks they do not own.")
	}
	if project == "" {
		project = c.projectID
	}
	if e := st.checkQuota(project, "rbac_policy"); e != nil {
		return nil, e
	}
	for _, p := range st.rbac {
		if p.ObjectID == objID && p.Action == action && p.TargetProject == target {
			return nil, errf(409, "DuplicateRbacPolicy", "An RBAC policy already exists with those values.")
		}
	}
	p := &RBACPolicy{ID: newID(), ObjectID: objID, ObjectType: objType, Action: action, TargetProject: target, ProjectID: project}
	st.rbac[p.ID] = p
	st.order(p.ID)
	return p, nil
}

func (st *state) deleteRBAC(p *RBACPolicy) {
	delete(st.rbac, p.ID)
	delete(st.seq, p.ID)
}

// rbacInUse refuses to unshare a network while a project that only reaches
// it through this policy still has ports there.
func (st *state) rbacInUse(_ *caller, p *RBACPolicy) *apiError {
	n := st.networks[p.ObjectID]
	if n == nil || p.Action != "access_as_shared" || n.Shared {
		return nil
	}
	for id := range st.portsByNetwork[n.ID] {
		port := st.ports[id]
		if port.ProjectID == n.ProjectID || (p.TargetProject != "*" && port.ProjectID != p.TargetProject) {
			continue
		}
		covered := false
		for _, other := range st.rbac {
			if other.ID != p.ID && other.ObjectID == n.ID && other.Action == "access_as_shared" &&
				(other.TargetProject == "*" || other.TargetProject == port.ProjectID) {
				covered = true
				break
			}
		}
		if !covered {
			return errf(409, "RbacPolicyInUse", "RBAC policy on object %s cannot be removed because other objects depend on it.", n.ID)
		}
	}
	return nil
}
