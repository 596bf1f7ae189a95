package gateway

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
)

// ruleKey identifies an ingress rule by what it admits; descriptions do not count, so
// identical rules from two sources collapse to one.
type ruleKey struct {
	Protocol string
	Min, Max int
	Remote   string
}

func (k ruleKey) String() string {
	proto := k.Protocol
	if proto == "" {
		proto = "any"
	}
	if k.Min == 0 {
		return fmt.Sprintf("%s from %s", proto, k.Remote)
	}
	return fmt.Sprintf("%s/%d from %s", proto, k.Min, k.Remote)
}

// desiredIngressRules is the gateway security group's ingress: IKE (UDP 500) and NAT-T
// (UDP 4500) from each tunnel's peer only, never from anywhere and never bare ESP (NAT-T
// is mandatory behind the floating IP); each reverse exposure's ports from each of the
// reverse sources (every protocol when the reverse exposure lists no ports): the
// operator-wide internal source CIDRs and the service clusters of the ClusterLinks that
// serve this gateway (reverseSources); and every protocol from each operator-wide
// internal source CIDR while a tunnel is routed (the fabric reaches the client's real
// addresses through the port; a ClusterLink routes only the gateway's service CIDR).
// The internal sources never include the gateway network (internalSources): no other
// gateway's port is admitted.
func desiredIngressRules(spec *v1alpha1.GatewaySpec, internal, reverse []netip.Prefix) []ruleKey {
	set := map[ruleKey]bool{}
	if len(routedSubnets(spec)) > 0 {
		for _, cidr := range internal {
			set[ruleKey{Remote: cidr.String()}] = true
		}
	}
	for _, t := range spec.Tunnels {
		a, err := netip.ParseAddr(t.Peer.Address)
		if err != nil || !a.Is4() {
			continue
		}
		remote := netip.PrefixFrom(a, 32).String()
		for _, port := range []int{500, 4500} {
			set[ruleKey{Protocol: openstack.ProtocolUDP, Min: port, Max: port, Remote: remote}] = true
		}
	}
	for _, re := range spec.ReverseExposures {
		for _, cidr := range reverse {
			if len(re.Target.Ports) == 0 {
				set[ruleKey{Remote: cidr.String()}] = true
				continue
			}
			for _, p := range re.Target.Ports {
				proto := strings.ToLower(string(p.Protocol))
				if proto == "" {
					proto = openstack.ProtocolTCP
				}
				set[ruleKey{Protocol: proto, Min: int(p.Port), Max: int(p.Port), Remote: cidr.String()}] = true
			}
		}
	}
	return sortedRules(set)
}

func sortedRules(set map[ruleKey]bool) []ruleKey {
	out := make([]ruleKey, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

func keyOf(r openstack.SecurityGroupRule) ruleKey {
	return ruleKey{Protocol: r.Protocol, Min: r.PortRangeMin, Max: r.PortRangeMax, Remote: r.RemoteIPPrefix}
}

// ensureSecurityGroup converges the gateway's own security group and applies it (and
// only it) to the port.
func (r *Reconciler) ensureSecurityGroup(ctx context.Context, g *gateway) (bool, error) {
	fail := func(err error) (bool, error) {
		r.condFailed(g, v1alpha1.ConditionSecurityGroupReady, v1alpha1.ReasonSecurityGroupFail, err)
		return false, err
	}
	sg, err := r.ownedOrNewSecurityGroup(ctx, g)
	if err != nil {
		return fail(err)
	}
	// Record the group before touching its rules, so the next reconcile finds it by ID.
	g.status.SecurityGroupID = sg.ID

	reverse := r.reverseSources(g)
	want, openToAll := desiredIngressRules(g.spec, r.internalSources(g), reverse), ""
	if g.wg != nil {
		want, openToAll = wireGuardIngressRules(g.spec, g.wg, servedPorts(g), reverse)
	}
	if err := r.syncIngressRules(ctx, sg, want); err != nil {
		return fail(err)
	}
	if len(g.port.SecurityGroups) != 1 || g.port.SecurityGroups[0] != sg.ID {
		p, err := r.net().UpdatePortSecurityGroups(ctx, g.port.ID, []string{sg.ID})
		if err != nil {
			return fail(err)
		}
		g.port = p
	}
	msg := fmt.Sprintf("security group %s admits %d ingress rules", sg.ID, len(want))
	if len(g.spec.ReverseExposures) > 0 {
		msg += fmt.Sprintf("; reverse exposures admitted from the ClusterLinks serving this gateway: %s", linkNames(g.links, true))
	}
	if openToAll != "" {
		r.condTrue(g, v1alpha1.ConditionSecurityGroupReady, v1alpha1.ReasonListenPortOpen, msg+"; "+openToAll)
		return true, nil
	}
	r.condTrue(g, v1alpha1.ConditionSecurityGroupReady, v1alpha1.ReasonSecurityGroup, msg)
	return true, nil
}

// ownedOrNewSecurityGroup is the gateway's own group: found by ID or tags, else created
// with the tags. Only a lost create response makes a second group; it was never applied
// to the port by this reconciler unless the port says so, and goes.
func (r *Reconciler) ownedOrNewSecurityGroup(ctx context.Context, g *gateway) (*openstack.SecurityGroup, error) {
	owner := g.owner()
	found, err := openstack.Owned[openstack.SecurityGroup]{
		Owner: owner, RecordedID: g.status.SecurityGroupID, Get: r.net().GetSecurityGroup, Tags: openstack.SecurityGroupTags,
		List: func(ctx context.Context) ([]openstack.SecurityGroup, error) {
			return r.net().ListSecurityGroups(ctx, owner.Selector())
		},
		InUse:  func(sg *openstack.SecurityGroup) bool { return contains(g.port.SecurityGroups, sg.ID) },
		ID:     func(sg *openstack.SecurityGroup) string { return sg.ID },
		Delete: r.net().DeleteSecurityGroup,
		Create: func(ctx context.Context) (*openstack.SecurityGroup, error) {
			return r.net().CreateSecurityGroup(ctx, openstack.CreateSecurityGroupOpts{
				Name:        openstack.ResourceName(g.kind, owner.Namespace, owner.Name),
				Description: "bnerd-vpn-operator: ingress of " + g.String(),
				Tags:        owner.Tags(),
			})
		},
	}.Ensure(ctx)
	return found.Object, err
}

// syncIngressRules makes the group's ingress exactly want: every other ingress rule
// (and a duplicate, and any IPv6 one) is deleted, the missing ones created. Egress is
// Neutron's default allow, which the gateway pod needs; it is left alone.
func (r *Reconciler) syncIngressRules(ctx context.Context, sg *openstack.SecurityGroup, want []ruleKey) error {
	wantSet := map[ruleKey]bool{}
	for _, k := range want {
		wantSet[k] = true
	}
	have := map[ruleKey]bool{}
	for _, rule := range sg.Rules {
		if rule.Direction != openstack.DirectionIngress {
			continue
		}
		k := keyOf(rule)
		if rule.EtherType != openstack.EtherTypeIPv4 || !wantSet[k] || have[k] {
			if err := r.net().DeleteSecurityGroupRule(ctx, rule.ID); err != nil && !openstack.IsNotFound(err) {
				return err
			}
			continue
		}
		have[k] = true
	}
	var missing []openstack.CreateSecurityGroupRuleOpts
	for _, k := range want {
		if !have[k] {
			missing = append(missing, k.createOpts(sg.ID))
		}
	}
	return r.createRules(ctx, missing)
}

func (k ruleKey) createOpts(sgID string) openstack.CreateSecurityGroupRuleOpts {
	return openstack.CreateSecurityGroupRuleOpts{
		SecurityGroupID: sgID,
		Direction:       openstack.DirectionIngress,
		EtherType:       openstack.EtherTypeIPv4,
		Protocol:        k.Protocol,
		PortRangeMin:    k.Min,
		PortRangeMax:    k.Max,
		RemoteIPPrefix:  k.Remote,
	}
}

// createRules adds the missing rules of one group in one bulk request: a gateway
// served by a hundred ClusterLinks needs a rule per link, and one request each was what
// held a thousand gateways for minutes. Neutron refuses a bulk create as a whole when
// any rule already exists (a concurrent writer, or a create whose answer was lost after
// the group was read); the rules are then created one by one, an existing one counting
// as created. Any other refusal (a quota, 409 OverQuota) fails the phase: the rules are
// not in place, so the condition must not say they are.
func (r *Reconciler) createRules(ctx context.Context, rules []openstack.CreateSecurityGroupRuleOpts) error {
	if len(rules) > 1 {
		_, err := r.net().CreateSecurityGroupRules(ctx, rules)
		if !openstack.IsRuleExists(err) {
			return err
		}
	}
	for _, o := range rules {
		if _, err := r.net().CreateSecurityGroupRule(ctx, o); err != nil && !openstack.IsRuleExists(err) {
			return err
		}
	}
	return nil
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
