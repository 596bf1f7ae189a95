package openstack

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/attributestags"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/external"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/extraroutes"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/quotas"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/rbacpolicies"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"
)

// NewNetworking wraps a Neutron service client.
func NewNetworking(c *gophercloud.ServiceClient) Networking { return &networking{c: c} }

type networking struct {
	c    *gophercloud.ServiceClient
	feat featureCache
}

var _ Networking = (*networking)(nil)

// --- networks and subnets ---

type networkWithExternal struct {
	networks.Network
	external.NetworkExternalExt
}

func toNetwork(n networkWithExternal) Network {
	return Network{
		ID: n.ID, Name: n.Name, ProjectID: projectOf(n.ProjectID, n.TenantID),
		Shared: n.Shared, External: n.External, Subnets: n.Subnets, Tags: n.Tags,
	}
}

func (n *networking) GetNetwork(ctx context.Context, id string) (*Network, error) {
	if id == "" {
		return nil, fmt.Errorf("get network: %w: empty ID", ErrNotFound)
	}
	var out networkWithExternal
	if err := networks.Get(ctx, n.c, id).ExtractInto(&out); err != nil {
		return nil, wrapErr("get network "+id, err)
	}
	res := toNetwork(out)
	return &res, nil
}

func (n *networking) ResolveNetwork(ctx context.Context, nameOrID string) (*Network, error) {
	if nameOrID == "" {
		return nil, fmt.Errorf("resolve network: %w: empty name", ErrNotFound)
	}
	if looksLikeID(nameOrID) {
		net, err := n.GetNetwork(ctx, nameOrID)
		if err == nil || !IsNotFound(err) {
			return net, err
		}
	}
	pages, err := networks.List(n.c, networks.ListOpts{Name: nameOrID}).AllPages(ctx)
	if err != nil {
		return nil, wrapErr("list networks named "+nameOrID, err)
	}
	var all []networkWithExternal
	if err := networks.ExtractNetworksInto(pages, &all); err != nil {
		return nil, wrapErr("list networks named "+nameOrID, err)
	}
	switch len(all) {
	case 0:
		return nil, fmt.Errorf("resolve network %q: %w", nameOrID, ErrNotFound)
	case 1:
		res := toNetwork(all[0])
		return &res, nil
	default:
		return nil, fmt.Errorf("resolve network %q: %w: %d networks carry that name", nameOrID, ErrAmbiguous, len(all))
	}
}

func toSubnet(s subnets.Subnet) Subnet {
	return Subnet{ID: s.ID, Name: s.Name, NetworkID: s.NetworkID, CIDR: s.CIDR,
		GatewayIP: s.GatewayIP, ProjectID: projectOf(s.ProjectID, s.TenantID)}
}

func (n *networking) GetSubnet(ctx context.Context, id string) (*Subnet, error) {
	s, err := subnets.Get(ctx, n.c, id).Extract()
	if err != nil {
		return nil, wrapErr("get subnet "+id, err)
	}
	res := toSubnet(*s)
	return &res, nil
}

func (n *networking) ListSubnets(ctx context.Context, networkID string) ([]Subnet, error) {
	if networkID == "" {
		return nil, fmt.Errorf("list subnets: %w", ErrUnfiltered)
	}
	pages, err := subnets.List(n.c, subnets.ListOpts{NetworkID: networkID}).AllPages(ctx)
	if err != nil {
		return nil, wrapErr("list subnets of network "+networkID, err)
	}
	all, err := subnets.ExtractSubnets(pages)
	if err != nil {
		return nil, wrapErr("list subnets of network "+networkID, err)
	}
	out := make([]Subnet, 0, len(all))
	for _, s := range all {
		out = append(out, toSubnet(s))
	}
	return out, nil
}

// --- ports ---

func toPort(p ports.Port) Port {
	out := Port{
		ID: p.ID, Name: p.Name, Description: p.Description, NetworkID: p.NetworkID,
		MACAddress: p.MACAddress, DeviceID: p.DeviceID, DeviceOwner: p.DeviceOwner,
		SecurityGroups: p.SecurityGroups, Tags: p.Tags,
		ProjectID: projectOf(p.ProjectID, p.TenantID), Status: p.Status,
	}
	for _, ip := range p.FixedIPs {
		out.FixedIPs = append(out.FixedIPs, FixedIP{SubnetID: ip.SubnetID, IPAddress: ip.IPAddress})
	}
	for _, ap := range p.AllowedAddressPairs {
		out.AllowedAddressPairs = append(out.AllowedAddressPairs, AddressPair{IPAddress: ap.IPAddress, MACAddress: ap.MACAddress})
	}
	return out
}

// withTags adds "tags" to a port's create body: with tag-ports-during-bulk-creation
// Neutron sets them atomically with the port, which gophercloud's create options do not
// expose.
func withTags(body map[string]any, key string, tags []string, err error) (map[string]any, error) {
	if err != nil || len(tags) == 0 {
		return body, err
	}
	inner, ok := body[key].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("unexpected create body shape for %s", key)
	}
	inner["tags"] = tags
	return body, nil
}

type portCreate struct {
	ports.CreateOpts
	tags []string
}

func (o portCreate) ToPortCreateMap() (map[string]any, error) {
	m, err := o.CreateOpts.ToPortCreateMap()
	return withTags(m, "port", o.tags, err)
}

// CreatePort creates a port with its tags. Where Neutron takes tags in the create
// (tag-ports-during-bulk-creation) they go with it; elsewhere the port is created with a
// marker description and tagged right after (see tagpending.go).
func (n *networking) CreatePort(ctx context.Context, opts CreatePortOpts) (*Port, error) {
	co := ports.CreateOpts{NetworkID: opts.NetworkID, Name: opts.Name, Description: opts.Description}
	if opts.SubnetID != "" || opts.IPAddress != "" {
		co.FixedIPs = []ports.IP{{SubnetID: opts.SubnetID, IPAddress: opts.IPAddress}}
	}
	if opts.SecurityGroups != nil {
		sgs := append([]string{}, opts.SecurityGroups...)
		co.SecurityGroups = &sgs
	}
	tags := sanitizeTags(opts.Tags)
	op := "create port on network " + opts.NetworkID
	if opts.IPAddress != "" {
		op += " at " + opts.IPAddress
	}
	late := false
	if len(tags) > 0 {
		f, err := n.features(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		late = !f.PortTagCreation
	}
	body := portCreate{CreateOpts: co, tags: tags}
	marker := ""
	if late {
		body.tags = nil
		if marker = pendingMarker(tags); marker != "" {
			body.Description = marker
		}
	}
	p, err := ports.Create(ctx, n.c, body).Extract()
	if err != nil {
		return nil, wrapErr(op, err)
	}
	res := toPort(*p)
	if late {
		desc := opts.Description
		got, err := n.finishTagging(ctx, "ports", p.ID, tags, marker,
			func(ctx context.Context) error {
				_, err := ports.Update(ctx, n.c, p.ID, ports.UpdateOpts{Description: &desc}).Extract()
				return err
			},
			func(ctx context.Context) error { return n.DeletePort(ctx, p.ID) })
		if err != nil {
			return nil, err
		}
		res.Tags, res.Description = got, desc
	}
	return &res, nil
}

func (n *networking) GetPort(ctx context.Context, id string) (*Port, error) {
	if id == "" {
		return nil, fmt.Errorf("get port: %w: empty ID", ErrNotFound)
	}
	p, err := ports.Get(ctx, n.c, id).Extract()
	if err != nil {
		return nil, wrapErr("get port "+id, err)
	}
	res := toPort(*p)
	return &res, nil
}

func (n *networking) ListPorts(ctx context.Context, opts ListPortsOpts) ([]Port, error) {
	if opts.empty() {
		return nil, fmt.Errorf("list ports: %w", ErrUnfiltered)
	}
	lo := ports.ListOpts{
		Tags: tagFilter(opts.Tags), NetworkID: opts.NetworkID,
		DeviceID: opts.DeviceID, ProjectID: opts.ProjectID,
	}
	if opts.IPAddress != "" || opts.SubnetID != "" {
		lo.FixedIPs = []ports.FixedIPOpts{{IPAddress: opts.IPAddress, SubnetID: opts.SubnetID}}
	}
	out, err := n.listPorts(ctx, portQuery{ListOpts: lo, fields: opts.Fields})
	if err != nil || len(out) > 0 || len(opts.Tags) == 0 {
		return out, err
	}
	// Nothing carries the tags: on a Neutron that tags after the create, a crash may
	// have left the owner's port with only its marker.
	marker := selectorMarker(opts.Tags)
	if marker == "" {
		return out, nil
	}
	if f, err := n.features(ctx); err != nil || f.PortTagCreation {
		return out, err
	}
	// Every attribute: the marker's adoption reads the description and answers the
	// whole port.
	lo.Tags, lo.Description = "", marker
	pending, err := n.listPorts(ctx, lo)
	if err != nil {
		return nil, err
	}
	for _, p := range pending {
		if p.Description != marker {
			continue // a Neutron that ignored the filter
		}
		got, err := n.adoptPending(ctx, "ports", p.ID, opts.Tags, func(ctx context.Context) error {
			empty := ""
			_, err := ports.Update(ctx, n.c, p.ID, ports.UpdateOpts{Description: &empty}).Extract()
			return err
		})
		if err != nil {
			return nil, err
		}
		p.Tags, p.Description = got, ""
		out = append(out, p)
	}
	return out, nil
}

// portQuery is a port list's filter with Neutron's fields= added, which gophercloud's
// ListOpts does not offer: only the named attributes come back.
type portQuery struct {
	ports.ListOpts
	fields []string
}

func (q portQuery) ToPortListQuery() (string, error) {
	s, err := q.ListOpts.ToPortListQuery()
	if err != nil || len(q.fields) == 0 {
		return s, err
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	v := u.Query()
	for _, f := range q.fields {
		v.Add("fields", f)
	}
	return "?" + v.Encode(), nil
}

// listPorts decodes each page once (see requestInto): the transit network's list holds
// a port per gateway.
func (n *networking) listPorts(ctx context.Context, lo ports.ListOptsBuilder) ([]Port, error) {
	q, err := lo.ToPortListQuery()
	if err != nil {
		return nil, wrapErr("list ports", err)
	}
	type page struct {
		Ports []ports.Port       `json:"ports"`
		Links []gophercloud.Link `json:"ports_links"`
	}
	var out []Port
	err = listInto(ctx, n.c, n.c.ServiceURL("ports")+q, func(p *page) {
		for _, port := range p.Ports {
			out = append(out, toPort(port))
		}
	}, func(p *page) []gophercloud.Link { return p.Links })
	if err != nil {
		return nil, wrapErr("list ports", err)
	}
	return out, nil
}

// adoptPending finishes the tagging a crash interrupted: the object gets the tags it
// was looked up by, and loses the marker description.
func (n *networking) adoptPending(ctx context.Context, resource, id string, tags []string, clearDescription func(context.Context) error) ([]string, error) {
	got, err := attributestags.ReplaceAll(ctx, n.c, resource, id, replaceTags{tags: sanitizeTags(tags)}).Extract()
	if err != nil {
		return nil, wrapErr("tag the half-created "+strings.TrimSuffix(resource, "s")+" "+id, err)
	}
	if err := clearDescription(ctx); err != nil {
		return nil, wrapErr("clear the marker of "+strings.TrimSuffix(resource, "s")+" "+id, err)
	}
	return got, nil
}

func (n *networking) updatePort(ctx context.Context, op, id string, uo ports.UpdateOpts) (*Port, error) {
	p, err := ports.Update(ctx, n.c, id, uo).Extract()
	if err != nil {
		return nil, wrapErr(op+" of port "+id, err)
	}
	res := toPort(*p)
	return &res, nil
}

func (n *networking) UpdatePortAllowedAddressPairs(ctx context.Context, portID string, pairs []AddressPair) (*Port, error) {
	aap := make([]ports.AddressPair, 0, len(pairs))
	for _, p := range pairs {
		aap = append(aap, ports.AddressPair{IPAddress: p.IPAddress, MACAddress: p.MACAddress})
	}
	return n.updatePort(ctx, "update allowed address pairs", portID, ports.UpdateOpts{AllowedAddressPairs: &aap})
}

func (n *networking) UpdatePortSecurityGroups(ctx context.Context, portID string, securityGroupIDs []string) (*Port, error) {
	sgs := append([]string{}, securityGroupIDs...)
	return n.updatePort(ctx, "update security groups", portID, ports.UpdateOpts{SecurityGroups: &sgs})
}

// replaceTags allows an empty list (clear all tags), which gophercloud's
// ReplaceAllOpts rejects as missing input.
type replaceTags struct{ tags []string }

func (o replaceTags) ToAttributeTagsReplaceAllMap() (map[string]any, error) {
	if o.tags == nil {
		return map[string]any{"tags": []string{}}, nil
	}
	return map[string]any{"tags": o.tags}, nil
}

func (n *networking) ReplacePortTags(ctx context.Context, portID string, tags []string) ([]string, error) {
	got, err := attributestags.ReplaceAll(ctx, n.c, "ports", portID, replaceTags{tags: sanitizeTags(tags)}).Extract()
	if err != nil {
		return nil, wrapErr("replace tags of port "+portID, err)
	}
	return got, nil
}

func (n *networking) ReplaceFloatingIPTags(ctx context.Context, id string, tags []string) ([]string, error) {
	got, err := attributestags.ReplaceAll(ctx, n.c, "floatingips", id, replaceTags{tags: sanitizeTags(tags)}).Extract()
	if err != nil {
		return nil, wrapErr("replace tags of floating IP "+id, err)
	}
	return got, nil
}

func (n *networking) QuotaDetails(ctx context.Context, projectID string) (map[string]Quota, error) {
	if projectID == "" {
		return nil, fmt.Errorf("quota details: %w", ErrUnfiltered)
	}
	d, err := quotas.GetDetail(ctx, n.c, projectID).Extract()
	if err != nil {
		return nil, wrapErr("read quotas of project "+projectID, err)
	}
	q := func(x quotas.QuotaDetail) Quota { return Quota{Limit: x.Limit, Used: x.Used, Reserved: x.Reserved} }
	return map[string]Quota{
		"floatingip":          q(d.FloatingIP),
		"network":             q(d.Network),
		"port":                q(d.Port),
		"rbac_policy":         q(d.RBACPolicy),
		"router":              q(d.Router),
		"security_group":      q(d.SecurityGroup),
		"security_group_rule": q(d.SecurityGroupRule),
		"subnet":              q(d.Subnet),
	}, nil
}

func (n *networking) DeletePort(ctx context.Context, id string) error {
	return wrapErr("delete port "+id, ports.Delete(ctx, n.c, id).ExtractErr())
}

// --- security groups ---

func toRule(r rules.SecGroupRule) SecurityGroupRule {
	return SecurityGroupRule{
		ID: r.ID, SecurityGroupID: r.SecGroupID, Direction: r.Direction, EtherType: r.EtherType,
		Protocol: r.Protocol, PortRangeMin: r.PortRangeMin, PortRangeMax: r.PortRangeMax,
		RemoteIPPrefix: r.RemoteIPPrefix, Description: r.Description,
	}
}

func toSecurityGroup(g groups.SecGroup) SecurityGroup {
	out := SecurityGroup{ID: g.ID, Name: g.Name, Description: g.Description,
		ProjectID: projectOf(g.ProjectID, g.TenantID), Tags: g.Tags}
	for _, r := range g.Rules {
		out.Rules = append(out.Rules, toRule(r))
	}
	return out
}

func (n *networking) CreateSecurityGroup(ctx context.Context, opts CreateSecurityGroupOpts) (*SecurityGroup, error) {
	op := "create security group " + opts.Name
	// Tags follow the create on every release (see Features).
	tags := sanitizeTags(opts.Tags)
	late := len(tags) > 0
	body := groups.CreateOpts{Name: opts.Name, Description: opts.Description}
	marker := ""
	if late {
		if marker = pendingMarker(tags); marker != "" {
			body.Description = marker
		}
	}
	g, err := groups.Create(ctx, n.c, body).Extract()
	if err != nil {
		return nil, wrapErr(op, err)
	}
	res := toSecurityGroup(*g)
	if late {
		desc := opts.Description
		got, err := n.finishTagging(ctx, "security-groups", g.ID, tags, marker,
			func(ctx context.Context) error {
				_, err := groups.Update(ctx, n.c, g.ID, groups.UpdateOpts{Description: &desc}).Extract()
				return err
			},
			func(ctx context.Context) error { return n.DeleteSecurityGroup(ctx, g.ID) })
		if err != nil {
			return nil, err
		}
		res.Tags, res.Description = got, desc
	}
	return &res, nil
}

func (n *networking) GetSecurityGroup(ctx context.Context, id string) (*SecurityGroup, error) {
	if id == "" {
		return nil, fmt.Errorf("get security group: %w: empty ID", ErrNotFound)
	}
	// Decoded once (see requestInto), its rules as plainRules: a gateway's group carries a
	// rule per link.
	var out struct {
		Group plainGroup `json:"security_group"`
	}
	if err := requestInto(ctx, n.c, http.MethodGet, n.c.ServiceURL("security-groups", id), nil, &out, http.StatusOK); err != nil {
		return nil, wrapErr("get security group "+id, err)
	}
	res := out.Group.group()
	return &res, nil
}

func (n *networking) ListSecurityGroups(ctx context.Context, tags []string) ([]SecurityGroup, error) {
	if len(tags) == 0 {
		return nil, fmt.Errorf("list security groups: %w", ErrUnfiltered)
	}
	out, err := n.listSecurityGroups(ctx, groups.ListOpts{Tags: tagFilter(tags)})
	if err != nil || len(out) > 0 {
		return out, err
	}
	marker := selectorMarker(tags)
	if marker == "" {
		return out, nil
	}
	pending, err := n.listSecurityGroups(ctx, groups.ListOpts{Description: marker})
	if err != nil {
		return nil, err
	}
	for _, g := range pending {
		if g.Description != marker {
			continue // a Neutron that ignored the filter
		}
		got, err := n.adoptPending(ctx, "security-groups", g.ID, tags, func(ctx context.Context) error {
			empty := ""
			_, err := groups.Update(ctx, n.c, g.ID, groups.UpdateOpts{Description: &empty}).Extract()
			return err
		})
		if err != nil {
			return nil, err
		}
		g.Tags, g.Description = got, ""
		out = append(out, g)
	}
	return out, nil
}

// listSecurityGroups decodes each page once (see requestInto): each group comes with
// its rules.
func (n *networking) listSecurityGroups(ctx context.Context, lo groups.ListOpts) ([]SecurityGroup, error) {
	q, err := gophercloud.BuildQueryString(&lo) // as groups.List builds it
	if err != nil {
		return nil, wrapErr("list security groups", err)
	}
	type page struct {
		Groups []plainGroup       `json:"security_groups"`
		Links  []gophercloud.Link `json:"security_groups_links"`
	}
	var out []SecurityGroup
	err = listInto(ctx, n.c, n.c.ServiceURL("security-groups")+q.String(), func(p *page) {
		for _, g := range p.Groups {
			out = append(out, g.group())
		}
	}, func(p *page) []gophercloud.Link { return p.Links })
	if err != nil {
		return nil, wrapErr("list security groups", err)
	}
	return out, nil
}

func (n *networking) DeleteSecurityGroup(ctx context.Context, id string) error {
	return wrapErr("delete security group "+id, groups.Delete(ctx, n.c, id).ExtractErr())
}

func ruleCreateOpts(opts CreateSecurityGroupRuleOpts) rules.CreateOpts {
	return rules.CreateOpts{
		SecGroupID: opts.SecurityGroupID, Direction: rules.RuleDirection(opts.Direction),
		EtherType: rules.RuleEtherType(opts.EtherType), Protocol: rules.RuleProtocol(opts.Protocol),
		PortRangeMin: opts.PortRangeMin, PortRangeMax: opts.PortRangeMax,
		RemoteIPPrefix: opts.RemoteIPPrefix, Description: opts.Description,
	}
}

func (n *networking) CreateSecurityGroupRule(ctx context.Context, opts CreateSecurityGroupRuleOpts) (*SecurityGroupRule, error) {
	r, err := rules.Create(ctx, n.c, ruleCreateOpts(opts)).Extract()
	if err != nil {
		return nil, wrapErr("create rule in security group "+opts.SecurityGroupID, err)
	}
	res := toRule(*r)
	return &res, nil
}

// CreateSecurityGroupRules is Neutron's bulk create: one POST, checked as a whole
// (every rule in one group, none a duplicate) before any rule is stored.
func (n *networking) CreateSecurityGroupRules(ctx context.Context, opts []CreateSecurityGroupRuleOpts) ([]SecurityGroupRule, error) {
	if len(opts) == 0 {
		return nil, nil
	}
	body := make([]rules.CreateOpts, 0, len(opts))
	for _, o := range opts {
		body = append(body, ruleCreateOpts(o))
	}
	// What rules.CreateBulk sends, with the answer (every rule created) decoded once
	// (see requestInto).
	op := fmt.Sprintf("create %d rules in security group %s", len(opts), opts[0].SecurityGroupID)
	b, err := gophercloud.BuildRequestBody(body, "security_group_rules")
	if err != nil {
		return nil, wrapErr(op, err)
	}
	var created struct {
		Rules []plainRule `json:"security_group_rules"`
	}
	if err := requestInto(ctx, n.c, http.MethodPost, n.c.ServiceURL("security-group-rules"), b, &created, http.StatusCreated); err != nil {
		return nil, wrapErr(op, err)
	}
	out := make([]SecurityGroupRule, 0, len(created.Rules))
	for _, r := range created.Rules {
		out = append(out, r.rule())
	}
	return out, nil
}

func (n *networking) DeleteSecurityGroupRule(ctx context.Context, id string) error {
	return wrapErr("delete security group rule "+id, rules.Delete(ctx, n.c, id).ExtractErr())
}

// --- floating IPs ---

func toFloatingIP(f floatingips.FloatingIP) FloatingIP {
	return FloatingIP{
		ID: f.ID, Description: f.Description, FloatingIPAddress: f.FloatingIP, FloatingNetworkID: f.FloatingNetworkID,
		PortID: f.PortID, FixedIPAddress: f.FixedIP, Tags: f.Tags,
		ProjectID: projectOf(f.ProjectID, f.TenantID), Status: f.Status,
	}
}

func (n *networking) CreateFloatingIP(ctx context.Context, opts CreateFloatingIPOpts) (*FloatingIP, error) {
	op := "create floating IP on network " + opts.FloatingNetworkID
	if opts.FloatingIPAddress != "" {
		op += " at " + opts.FloatingIPAddress
	}
	// Tags follow the create on every release (see Features).
	tags := sanitizeTags(opts.Tags)
	late := len(tags) > 0
	body := floatingips.CreateOpts{
		FloatingNetworkID: opts.FloatingNetworkID, FloatingIP: opts.FloatingIPAddress,
		PortID: opts.PortID, Description: opts.Description,
	}
	marker := ""
	if late {
		if marker = pendingMarker(tags); marker != "" {
			body.Description = marker
		}
	}
	f, err := floatingips.Create(ctx, n.c, body).Extract()
	if err != nil {
		return nil, wrapErr(op, err)
	}
	res := toFloatingIP(*f)
	if late {
		desc := opts.Description
		got, err := n.finishTagging(ctx, "floatingips", f.ID, tags, marker,
			func(ctx context.Context) error {
				_, err := floatingips.Update(ctx, n.c, f.ID, floatingips.UpdateOpts{Description: &desc}).Extract()
				return err
			},
			func(ctx context.Context) error { return n.DeleteFloatingIP(ctx, f.ID) })
		if err != nil {
			return nil, err
		}
		res.Tags, res.Description = got, desc
	}
	return &res, nil
}

func (n *networking) GetFloatingIP(ctx context.Context, id string) (*FloatingIP, error) {
	if id == "" {
		return nil, fmt.Errorf("get floating IP: %w: empty ID", ErrNotFound)
	}
	f, err := floatingips.Get(ctx, n.c, id).Extract()
	if err != nil {
		return nil, wrapErr("get floating IP "+id, err)
	}
	res := toFloatingIP(*f)
	return &res, nil
}

func (n *networking) FindFloatingIPByAddress(ctx context.Context, address string) (*FloatingIP, error) {
	all, err := n.ListFloatingIPs(ctx, ListFloatingIPsOpts{FloatingIPAddress: address})
	if err != nil {
		return nil, err
	}
	switch len(all) {
	case 0:
		return nil, fmt.Errorf("find floating IP %s: %w", address, ErrNotFound)
	case 1:
		return &all[0], nil
	default:
		return nil, fmt.Errorf("find floating IP %s: %w: %d matches", address, ErrAmbiguous, len(all))
	}
}

func (n *networking) ListFloatingIPs(ctx context.Context, opts ListFloatingIPsOpts) ([]FloatingIP, error) {
	if len(opts.Tags) == 0 && opts.PortID == "" && opts.FloatingIPAddress == "" {
		return nil, fmt.Errorf("list floating IPs: %w", ErrUnfiltered)
	}
	lo := floatingips.ListOpts{Tags: tagFilter(opts.Tags), PortID: opts.PortID, FloatingIP: opts.FloatingIPAddress}
	out, err := n.listFloatingIPs(ctx, lo)
	if err != nil || len(out) > 0 || len(opts.Tags) == 0 {
		return out, err
	}
	marker := selectorMarker(opts.Tags)
	if marker == "" {
		return out, nil
	}
	lo.Tags, lo.Description = "", marker
	pending, err := n.listFloatingIPs(ctx, lo)
	if err != nil {
		return nil, err
	}
	for _, f := range pending {
		if f.Description != marker {
			continue // a Neutron that ignored the filter
		}
		got, err := n.adoptPending(ctx, "floatingips", f.ID, opts.Tags, func(ctx context.Context) error {
			empty := ""
			_, err := floatingips.Update(ctx, n.c, f.ID, floatingips.UpdateOpts{Description: &empty}).Extract()
			return err
		})
		if err != nil {
			return nil, err
		}
		f.Tags, f.Description = got, ""
		out = append(out, f)
	}
	return out, nil
}

func (n *networking) listFloatingIPs(ctx context.Context, lo floatingips.ListOpts) ([]FloatingIP, error) {
	pages, err := floatingips.List(n.c, lo).AllPages(ctx)
	if err != nil {
		return nil, wrapErr("list floating IPs", err)
	}
	all, err := floatingips.ExtractFloatingIPs(pages)
	if err != nil {
		return nil, wrapErr("list floating IPs", err)
	}
	out := make([]FloatingIP, 0, len(all))
	for _, f := range all {
		out = append(out, toFloatingIP(f))
	}
	return out, nil
}

func (n *networking) AssociateFloatingIP(ctx context.Context, floatingIPID, portID string) (*FloatingIP, error) {
	if portID == "" {
		return nil, fmt.Errorf("associate floating IP %s: empty port ID", floatingIPID)
	}
	f, err := floatingips.Update(ctx, n.c, floatingIPID, floatingips.UpdateOpts{PortID: &portID}).Extract()
	if err != nil {
		return nil, wrapErr("associate floating IP "+floatingIPID+" with port "+portID, err)
	}
	res := toFloatingIP(*f)
	return &res, nil
}

func (n *networking) DisassociateFloatingIP(ctx context.Context, floatingIPID string) (*FloatingIP, error) {
	// gophercloud turns an empty port ID into JSON null, which is how
	// Neutron spells "disassociate".
	none := ""
	f, err := floatingips.Update(ctx, n.c, floatingIPID, floatingips.UpdateOpts{PortID: &none}).Extract()
	if err != nil {
		return nil, wrapErr("disassociate floating IP "+floatingIPID, err)
	}
	res := toFloatingIP(*f)
	return &res, nil
}

func (n *networking) DeleteFloatingIP(ctx context.Context, id string) error {
	return wrapErr("delete floating IP "+id, floatingips.Delete(ctx, n.c, id).ExtractErr())
}

// --- routers ---

func toRouter(r routers.Router) Router {
	out := Router{ID: r.ID, Name: r.Name, ProjectID: projectOf(r.ProjectID, r.TenantID), Tags: r.Tags}
	for _, rt := range r.Routes {
		out.Routes = append(out.Routes, Route{Destination: rt.DestinationCIDR, NextHop: rt.NextHop})
	}
	return out
}

func (n *networking) GetRouter(ctx context.Context, id string) (*Router, error) {
	if id == "" {
		return nil, fmt.Errorf("get router: %w: empty ID", ErrNotFound)
	}
	// Decoded once (see requestInto): the operator's router carries a route per
	// reverse-exposure gateway.
	var out routerBody
	if err := requestInto(ctx, n.c, http.MethodGet, n.c.ServiceURL("routers", id), nil, &out, http.StatusOK); err != nil {
		return nil, wrapErr("get router "+id, err)
	}
	res := toRouter(routers.Router(out.Router))
	return &res, nil
}

// routerBody is Neutron's answer about one router, decoded as a plainRouter.
type routerBody struct {
	Router plainRouter `json:"router"`
}

// putRoutes sends add_extraroutes or remove_extraroutes (action) and decodes the router
// Neutron answers with, every route of it, once (see requestInto).
func (n *networking) putRoutes(ctx context.Context, routerID, action string, routes []Route) (*Router, error) {
	b, err := extraroutes.Opts{Routes: toGCRoutes(routes)}.ToExtraRoutesUpdateMap()
	if err != nil {
		return nil, err
	}
	var out routerBody
	if err := requestInto(ctx, n.c, http.MethodPut, n.c.ServiceURL("routers", routerID, action), b, &out, http.StatusOK); err != nil {
		return nil, err
	}
	res := toRouter(routers.Router(out.Router))
	return &res, nil
}

func (n *networking) ResolveRouter(ctx context.Context, nameOrID string) (*Router, error) {
	if nameOrID == "" {
		return nil, fmt.Errorf("resolve router: %w: empty name", ErrNotFound)
	}
	if looksLikeID(nameOrID) {
		r, err := n.GetRouter(ctx, nameOrID)
		if err == nil || !IsNotFound(err) {
			return r, err
		}
	}
	all, err := n.listRouters(ctx, routers.ListOpts{Name: nameOrID}, "list routers named "+nameOrID)
	if err != nil {
		return nil, err
	}
	switch len(all) {
	case 0:
		return nil, fmt.Errorf("resolve router %q: %w", nameOrID, ErrNotFound)
	case 1:
		return &all[0], nil
	default:
		return nil, fmt.Errorf("resolve router %q: %w: %d routers carry that name", nameOrID, ErrAmbiguous, len(all))
	}
}

func (n *networking) ListRouters(ctx context.Context, projectID string) ([]Router, error) {
	if projectID == "" {
		return nil, fmt.Errorf("list routers: %w", ErrUnfiltered)
	}
	return n.listRouters(ctx, routers.ListOpts{ProjectID: projectID}, "list routers of project "+projectID)
}

func (n *networking) listRouters(ctx context.Context, lo routers.ListOpts, op string) ([]Router, error) {
	pages, err := routers.List(n.c, lo).AllPages(ctx)
	if err != nil {
		return nil, wrapErr(op, err)
	}
	all, err := routers.ExtractRouters(pages)
	if err != nil {
		return nil, wrapErr(op, err)
	}
	out := make([]Router, 0, len(all))
	for _, r := range all {
		out = append(out, toRouter(r))
	}
	return out, nil
}

func (n *networking) AddRouterInterface(ctx context.Context, routerID, portID string) error {
	_, err := routers.AddInterface(ctx, n.c, routerID, routers.AddInterfaceOpts{PortID: portID}).Extract()
	return wrapErr("add port "+portID+" to router "+routerID, err)
}

func (n *networking) RemoveRouterInterface(ctx context.Context, routerID, portID string) error {
	_, err := routers.RemoveInterface(ctx, n.c, routerID, routers.RemoveInterfaceOpts{PortID: portID}).Extract()
	return wrapErr("remove port "+portID+" from router "+routerID, err)
}

func toGCRoutes(routes []Route) *[]routers.Route {
	out := make([]routers.Route, 0, len(routes))
	for _, r := range routes {
		out = append(out, routers.Route{DestinationCIDR: r.Destination, NextHop: r.NextHop})
	}
	return &out
}

func describeRoutes(routes []Route) string {
	parts := make([]string, 0, len(routes))
	for _, r := range routes {
		parts = append(parts, r.Destination+" via "+r.NextHop)
	}
	return strings.Join(parts, ", ")
}

// AddRouterRoutes adds routes with extraroute-atomic's add_extraroutes: Neutron merges
// them under its own lock, so concurrent writers never lose each other's routes, and
// adding a route the router has is a no-op. Without extraroute-atomic it replaces the
// router's routes, conditional on the revision it read (see updateRoutes).
func (n *networking) AddRouterRoutes(ctx context.Context, routerID string, routes []Route) (*Router, error) {
	op := "add routes [" + describeRoutes(routes) + "] to router " + routerID
	f, err := n.features(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if !f.ExtraRouteAtomic {
		return n.updateRoutes(ctx, op, routerID, func(have []Route) []Route {
			for _, r := range routes {
				if !slices.Contains(have, r) {
					have = append(have, r)
				}
			}
			return have
		})
	}
	r, err := n.putRoutes(ctx, routerID, "add_extraroutes", routes)
	return r, wrapErr(op, err)
}

// RemoveRouterRoutes removes exactly these routes (destination and next hop) with
// remove_extraroutes; an absent route is a no-op. Without extraroute-atomic, see
// updateRoutes.
func (n *networking) RemoveRouterRoutes(ctx context.Context, routerID string, routes []Route) (*Router, error) {
	op := "remove routes [" + describeRoutes(routes) + "] from router " + routerID
	f, err := n.features(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if !f.ExtraRouteAtomic {
		return n.updateRoutes(ctx, op, routerID, func(have []Route) []Route {
			return slices.DeleteFunc(have, func(r Route) bool { return slices.Contains(routes, r) })
		})
	}
	r, err := n.putRoutes(ctx, routerID, "remove_extraroutes", routes)
	return r, wrapErr(op, err)
}

// maxRouteRetries bounds the compare-and-swap loop of updateRoutes under contention.
const maxRouteRetries = 30

// updateRoutes is the route update for a Neutron without extraroute-atomic: read the
// router, compute its new routes, and write them back only if nobody changed the router
// in between ("If-Match: revision_number=N", revision-if-match; Neutron answers 412
// otherwise and the loop reads again). A plain router update would silently drop a
// route another writer added between the read and the write. The operator refuses to
// start on a Neutron with neither extension (see Features.Missing).
func (n *networking) updateRoutes(ctx context.Context, op, routerID string, change func([]Route) []Route) (*Router, error) {
	for attempt := 0; ; attempt++ {
		cur, rev, err := n.routerRevision(ctx, routerID)
		if err != nil {
			return nil, wrapErr(op, err)
		}
		want := change(slices.Clone(cur.Routes))
		if slices.Equal(want, cur.Routes) {
			return cur, nil
		}
		r, err := routers.Update(ctx, n.c, routerID, routers.UpdateOpts{Routes: toGCRoutes(want), RevisionNumber: &rev}).Extract()
		if err == nil {
			res := toRouter(*r)
			return &res, nil
		}
		if StatusCode(err) != 412 || attempt >= maxRouteRetries {
			return nil, wrapErr(op, err)
		}
		// Someone else wrote in between: back off a little (with jitter, so two
		// writers do not collide again in lockstep) and read again.
		wait := time.Duration(1+rand.IntN(10*(attempt+1))) * time.Millisecond
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: %w", op, ctx.Err())
		case <-time.After(wait):
		}
	}
}

func (n *networking) routerRevision(ctx context.Context, routerID string) (*Router, int, error) {
	var out struct {
		Router struct {
			routers.Router
			RevisionNumber int `json:"revision_number"`
		} `json:"router"`
	}
	if err := routers.Get(ctx, n.c, routerID).ExtractInto(&out); err != nil {
		return nil, 0, err
	}
	res := toRouter(out.Router.Router)
	return &res, out.Router.RevisionNumber, nil
}

// --- RBAC ---

func toRBAC(p rbacpolicies.RBACPolicy) RBACPolicy {
	return RBACPolicy{
		ID: p.ID, ObjectID: p.ObjectID, ObjectType: p.ObjectType, Action: string(p.Action),
		TargetProject: p.TargetTenant, ProjectID: projectOf(p.ProjectID, p.TenantID),
	}
}

func (n *networking) ShareNetwork(ctx context.Context, networkID, targetProjectID string) (*RBACPolicy, error) {
	p, err := rbacpolicies.Create(ctx, n.c, rbacpolicies.CreateOpts{
		Action: rbacpolicies.ActionAccessShared, ObjectType: RBACObjectNetwork,
		ObjectID: networkID, TargetTenant: targetProjectID,
	}).Extract()
	if err != nil {
		return nil, wrapErr("share network "+networkID+" with project "+targetProjectID, err)
	}
	res := toRBAC(*p)
	return &res, nil
}

func (n *networking) ListRBACPolicies(ctx context.Context, opts ListRBACPoliciesOpts) ([]RBACPolicy, error) {
	if opts.ObjectID == "" && opts.TargetProject == "" {
		return nil, fmt.Errorf("list RBAC policies: %w", ErrUnfiltered)
	}
	pages, err := rbacpolicies.List(n.c, rbacpolicies.ListOpts{
		ObjectID: opts.ObjectID, ObjectType: opts.ObjectType,
		TargetTenant: opts.TargetProject, Action: rbacpolicies.PolicyAction(opts.Action),
	}).AllPages(ctx)
	if err != nil {
		return nil, wrapErr("list RBAC policies", err)
	}
	all, err := rbacpolicies.ExtractRBACPolicies(pages)
	if err != nil {
		return nil, wrapErr("list RBAC policies", err)
	}
	out := make([]RBACPolicy, 0, len(all))
	for _, p := range all {
		out = append(out, toRBAC(p))
	}
	return out, nil
}

func (n *networking) DeleteRBACPolicy(ctx context.Context, id string) error {
	return wrapErr("delete RBAC policy "+id, rbacpolicies.Delete(ctx, n.c, id).ExtractErr())
}

// --- helpers ---

// sanitizeTags applies SanitizeTag (idempotent) so a tag written and the
// same tag used as a filter always match, and a comma can never split one
// filter tag into two.
func sanitizeTags(tags []string) []string {
	if len(tags) == 0 {
		return nil
	}
	out := make([]string, len(tags))
	for i, t := range tags {
		out[i] = SanitizeTag(t)
	}
	return out
}

func tagFilter(tags []string) string { return strings.Join(sanitizeTags(tags), ",") }

func projectOf(projectID, tenantID string) string {
	if projectID != "" {
		return projectID
	}
	return tenantID
}

// looksLikeID reports whether s has the shape of an OpenStack UUID, with or
// without dashes. A name may have that shape too, so callers still fall
// back to a name lookup on 404.
func looksLikeID(s string) bool {
	hex := 0
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9', r >= 'a' && r <= 'f', r >= 'A' && r <= 'F':
			hex++
		case r == '-':
		default:
			return false
		}
	}
	return hex == 32
}
