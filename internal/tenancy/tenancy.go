// Package tenancy decides what a tenant's gateways may do: which VPNTenantPolicy governs
// a namespace (or the strict defaults when none does), what a gateway holds against
// its tenant's limits, and which gateways of a tenant those limits admit. The gateway
// reconciler enforces it, the tenant-policy reconciler reports it on the policy, and
// `kubectl vpn tenant` prints it; all three count the same way because they call
// the same functions.
package tenancy

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// Policy is what governs one namespace's gateways.
type Policy struct {
	// Name is the VPNTenantPolicy's name; "" for the strict defaults.
	Name string
	// Namespace is the namespace the policy was resolved for.
	Namespace string
	// RoutedSubnets are the ranges routed-mode subnets must lie in (none: routed mode
	// off).
	RoutedSubnets []netip.Prefix
	// ExposureTargets are the ranges exposure targets may lie in besides the linked
	// clusters serving the gateway.
	ExposureTargets []netip.Prefix
	// FloatingIPs are the addresses the tenant may pin.
	FloatingIPs []netip.Addr
	// Limits are the caps with defaults applied.
	Limits v1alpha1.TenantUsage
	// Conflicting, when set, counts the policies that select the namespace: more than
	// one, so none applies and the namespace's gateways are refused.
	Conflicting int
}

// Strict is the policy of a namespace no VPNTenantPolicy selects.
func Strict(namespace string) Policy {
	return Policy{Namespace: namespace, Limits: v1alpha1.TenantLimits{}.Values()}
}

// FromSpec builds the policy a VPNTenantPolicy states (entries that do not parse are
// left out: the schema and Validate refuse them).
func FromSpec(name, namespace string, s *v1alpha1.VPNTenantPolicySpec) Policy {
	p := Policy{Name: name, Namespace: namespace, Limits: s.Limits.Values()}
	for _, c := range s.RoutedSubnets {
		if x, err := netip.ParsePrefix(c); err == nil && x.Addr().Is4() {
			p.RoutedSubnets = append(p.RoutedSubnets, x.Masked())
		}
	}
	for _, c := range s.ExposureTargets {
		if x, err := netip.ParsePrefix(c); err == nil && x.Addr().Is4() {
			p.ExposureTargets = append(p.ExposureTargets, x.Masked())
		}
	}
	for _, a := range s.FloatingIPs {
		if x, err := netip.ParseAddr(a); err == nil && x.Is4() {
			p.FloatingIPs = append(p.FloatingIPs, x)
		}
	}
	return p
}

// Selects reports whether the policy selects a namespace with these labels. A
// selector that names nothing (refused by the schema) or does not parse selects none.
func Selects(pol *v1alpha1.VPNTenantPolicy, nsLabels map[string]string) bool {
	sel := pol.Spec.NamespaceSelector
	if len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0 {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(&sel)
	if err != nil {
		return false
	}
	return s.Matches(labels.Set(nsLabels))
}

// Selecting returns the names of the policies that select the namespace, sorted.
func Selecting(policies []v1alpha1.VPNTenantPolicy, nsLabels map[string]string) []string {
	var out []string
	for i := range policies {
		if Selects(&policies[i], nsLabels) {
			out = append(out, policies[i].Name)
		}
	}
	sort.Strings(out)
	return out
}

// For resolves the policy of a namespace: the one policy that selects it, the strict
// defaults when none does, and a conflict (Conflicting > 1) when several do.
func For(policies []v1alpha1.VPNTenantPolicy, namespace string, nsLabels map[string]string) Policy {
	var found []*v1alpha1.VPNTenantPolicy
	for i := range policies {
		if Selects(&policies[i], nsLabels) {
			found = append(found, &policies[i])
		}
	}
	switch len(found) {
	case 0:
		return Strict(namespace)
	case 1:
		return FromSpec(found[0].Name, namespace, &found[0].Spec)
	}
	p := Strict(namespace)
	p.Conflicting = len(found)
	return p
}

// Describe names the policy for a condition message shown in the tenant's own
// namespace: its own policy's name, or the strict defaults. Never another tenant's.
func (p Policy) Describe() string {
	if p.Name == "" {
		return "the strict defaults (no VPNTenantPolicy selects namespace " + p.Namespace + ")"
	}
	return "VPNTenantPolicy " + p.Name
}

// RoutedAllowed reports whether s lies inside one of the routed-subnet ranges.
func (p Policy) RoutedAllowed(s netip.Prefix) bool {
	for _, r := range p.RoutedSubnets {
		if r.Bits() <= s.Bits() && r.Contains(s.Addr()) {
			return true
		}
	}
	return false
}

// TargetAllowed reports whether a lies inside one of the exposure-target ranges.
func (p Policy) TargetAllowed(a netip.Addr) bool {
	for _, r := range p.ExposureTargets {
		if r.Contains(a) {
			return true
		}
	}
	return false
}

// FloatingIPAllowed reports whether the tenant may pin a.
func (p Policy) FloatingIPAllowed(a netip.Addr) bool {
	for _, f := range p.FloatingIPs {
		if f == a {
			return true
		}
	}
	return false
}

// UsageOf is what one gateway holds against its tenant's limits. A WireGuard gateway
// (wg set) counts its peers as tunnels.
func UsageOf(spec *v1alpha1.GatewaySpec, wg *v1alpha1.WireGuardSpec) v1alpha1.TenantUsage {
	u := v1alpha1.TenantUsage{Gateways: 1, Exposures: int32(len(spec.Exposures))}
	if wg != nil {
		u.Tunnels = int32(len(wg.Peers))
	} else {
		u.Tunnels = int32(len(spec.Tunnels))
		for _, t := range spec.Tunnels {
			if t.Mode == v1alpha1.TunnelModeRouted {
				u.RoutedSubnets += int32(len(t.Peer.Subnets))
			}
		}
	}
	for _, r := range spec.ReverseExposures {
		u.ReverseExposurePorts += int32(max(1, len(r.Target.Ports)))
	}
	return u
}

// Add returns a + b.
func Add(a, b v1alpha1.TenantUsage) v1alpha1.TenantUsage {
	return v1alpha1.TenantUsage{
		Gateways:             a.Gateways + b.Gateways,
		Tunnels:              a.Tunnels + b.Tunnels,
		RoutedSubnets:        a.RoutedSubnets + b.RoutedSubnets,
		Exposures:            a.Exposures + b.Exposures,
		ReverseExposurePorts: a.ReverseExposurePorts + b.ReverseExposurePorts,
	}
}

// Exceeded names the limits u passes, as "tunnels (17 of 16)".
func Exceeded(u, limits v1alpha1.TenantUsage) []string {
	var out []string
	for _, x := range []struct {
		name        string
		used, limit int32
	}{
		{"gateways", u.Gateways, limits.Gateways},
		{"tunnels", u.Tunnels, limits.Tunnels},
		{"routed subnets", u.RoutedSubnets, limits.RoutedSubnets},
		{"exposures", u.Exposures, limits.Exposures},
		{"reverse-exposure ports", u.ReverseExposurePorts, limits.ReverseExposurePorts},
	} {
		if x.used > x.limit {
			out = append(out, fmt.Sprintf("%s (%d of %d)", x.name, x.used, x.limit))
		}
	}
	return out
}

// Member is one gateway of a tenant as the limits see it.
type Member struct {
	// Ref names the gateway as <Kind> <namespace>/<name> (for the policy's own status,
	// which only admins read).
	Ref     string
	UID     types.UID
	Created metav1.Time
	Usage   v1alpha1.TenantUsage
	// Admitted: the gateway's Validated condition is True for its current generation,
	// so it holds what it asks for now. Admitted gateways are counted first: a change
	// of one gateway never pushes out another that was admitted before.
	Admitted bool
	// Established: the gateway was admitted at some generation and holds what it was
	// given then (it has a service CIDR, allocated only after Validated). A refused
	// change of an established gateway keeps its place: it is counted, at its new size,
	// before any new gateway, so a refused edit never lets a newer gateway in.
	Established bool
}

// Refusal is a gateway the limits refuse and the limits it would pass.
type Refusal struct {
	Ref    string
	UID    types.UID
	Passes []string
}

// Admit counts the tenant's gateways against the limits: the admitted ones first, then
// the established ones whose change is not admitted yet, then the new ones, each group
// oldest first (then by UID). A gateway that would pass a limit is refused; a refused
// new gateway takes nothing from those after it, a refused established one is still
// counted (it holds what it had). Total is what the counted gateways hold.
func Admit(limits v1alpha1.TenantUsage, members []Member) (total v1alpha1.TenantUsage, refused []Refusal) {
	rank := func(m Member) int {
		switch {
		case m.Admitted:
			return 0
		case m.Established:
			return 1
		}
		return 2
	}
	// Everything fits (the common case): no one is refused, so the order, which only
	// decides whom a refusal falls on, need not be established.
	for _, m := range members {
		total = Add(total, m.Usage)
	}
	if len(Exceeded(total, limits)) == 0 {
		return total, nil
	}
	total = v1alpha1.TenantUsage{}
	ms := append([]Member(nil), members...)
	sort.SliceStable(ms, func(i, j int) bool {
		a, b := ms[i], ms[j]
		if rank(a) != rank(b) {
			return rank(a) < rank(b)
		}
		if !a.Created.Equal(&b.Created) {
			return a.Created.Before(&b.Created)
		}
		return a.UID < b.UID
	})
	for _, m := range ms {
		next := Add(total, m.Usage)
		if passes := Exceeded(next, limits); len(passes) > 0 {
			refused = append(refused, Refusal{Ref: m.Ref, UID: m.UID, Passes: passes})
			if !m.Established || m.Admitted {
				continue
			}
		}
		total = next
	}
	return total, refused
}

// RefusalOf returns the refusal of uid, if the limits refuse it.
func RefusalOf(refused []Refusal, uid types.UID) (Refusal, bool) {
	for _, r := range refused {
		if r.UID == uid {
			return r, true
		}
	}
	return Refusal{}, false
}

// Summary says in words what u holds of the limits.
func Summary(u, limits v1alpha1.TenantUsage) string {
	return strings.Join([]string{
		fmt.Sprintf("%d of %d gateways", u.Gateways, limits.Gateways),
		fmt.Sprintf("%d of %d tunnels", u.Tunnels, limits.Tunnels),
		fmt.Sprintf("%d of %d routed subnets", u.RoutedSubnets, limits.RoutedSubnets),
		fmt.Sprintf("%d of %d exposures", u.Exposures, limits.Exposures),
		fmt.Sprintf("%d of %d reverse-exposure ports", u.ReverseExposurePorts, limits.ReverseExposurePorts),
	}, ", ")
}

// Members lists the gateways of the given namespaces (every namespace when namespaces
// is nil) as the limits count them.
func Members(gws []v1alpha1.Gateway, namespaces map[string]bool) []Member {
	var out []Member
	admitted := func(conds []metav1.Condition, gen int64) bool {
		for _, c := range conds {
			if c.Type == v1alpha1.ConditionValidated {
				return c.Status == metav1.ConditionTrue && c.ObservedGeneration == gen
			}
		}
		return false
	}
	for _, g := range gws {
		if namespaces != nil && !namespaces[g.GetNamespace()] {
			continue
		}
		st := g.GetGatewayStatus()
		out = append(out, Member{Ref: v1alpha1.DescribeGateway(g), UID: g.GetUID(), Created: g.GetCreationTimestamp(),
			Usage: UsageOf(g.GetGatewaySpec(), g.GetWireGuard()), Admitted: admitted(st.Conditions, g.GetGeneration()), Established: st.ServiceCIDR != ""})
	}
	return out
}
