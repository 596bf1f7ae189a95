package gateway

import (
	"context"
	"fmt"
	"net/netip"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/conditions"
)

// +kubebuilder:rbac:groups=ipsec.bnerd.net,resources=clusterlinks,verbs=get;list;watch

// routedConflict explains why a routed tunnel's subnet cannot be routed to this gateway,
// or returns "". The operator's router holds one route per network, so a routed subnet
// must not overlap the service CIDR pool (every gateway's virtual IPs), the fabric's
// internal sources (they would be routed into the tunnel), a linked service cluster, or
// another gateway's routed subnet; of two gateways claiming overlapping subnets, the
// older keeps them. (The gateway network's subnet is refused earlier, by PortReady.)
func (r *Reconciler) routedConflict(ctx context.Context, g *gateway, routed []string) (string, error) {
	var mine []netip.Prefix
	for _, s := range routed {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Sprintf("routed subnet %q is not a network", s), nil
		}
		mine = append(mine, p)
	}
	overlap := func(p netip.Prefix) (netip.Prefix, bool) {
		for _, m := range mine {
			if m.Overlaps(p) {
				return m, true
			}
		}
		return netip.Prefix{}, false
	}
	if m, ok := overlap(r.Config.ServiceCIDRPool); ok && r.Config.ServiceCIDRPool.IsValid() {
		return fmt.Sprintf("routed subnet %s overlaps the service CIDR pool %s, where every gateway's virtual IPs live", m, r.Config.ServiceCIDRPool), nil
	}
	for _, in := range r.Config.InternalSourceCIDRs {
		if m, ok := overlap(in); ok {
			return fmt.Sprintf("routed subnet %s overlaps the internal source CIDR %s: the fabric's own network would be routed into the tunnel", m, in), nil
		}
	}
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	var links v1alpha1.ClusterLinkList
	if err := reader.List(ctx, &links); err != nil {
		return "", fmt.Errorf("listing ClusterLinks to check routed subnets: %w", err)
	}
	for _, l := range links.Items {
		if p, err := netip.ParsePrefix(l.Spec.ServiceClusterCIDR); err == nil {
			if m, ok := overlap(p); ok {
				return fmt.Sprintf("routed subnet %s overlaps %s, the service cluster of ClusterLink %s", m, p, l.Name), nil
			}
		}
	}
	type claim struct {
		who     string
		created int64
		uid     string
		subnets []string
		routed  bool
	}
	var claims []claim
	var ipsec v1alpha1.IPsecGatewayList
	if err := reader.List(ctx, &ipsec); err != nil {
		return "", fmt.Errorf("listing IPsecGateways to check routed subnets: %w", err)
	}
	for i := range ipsec.Items {
		o := &ipsec.Items[i]
		claims = append(claims, claim{KindIPsecGateway + " " + o.Namespace + "/" + o.Name, o.CreationTimestamp.UnixNano(), string(o.UID), routedSubnets(&o.Spec), routesNow(&o.Status, o.Generation)})
	}
	var vpn v1alpha1.VPNGatewayList
	if err := reader.List(ctx, &vpn); err != nil {
		return "", fmt.Errorf("listing VPNGateways to check routed subnets: %w", err)
	}
	for i := range vpn.Items {
		o := &vpn.Items[i]
		claims = append(claims, claim{KindVPNGateway + " " + o.Namespace + "/" + o.Name, o.CreationTimestamp.UnixNano(), string(o.UID), routedSubnets(&o.Spec.GatewaySpec), routesNow(&o.Status, o.Generation)})
	}
	sort.Slice(claims, func(i, j int) bool {
		if claims[i].created != claims[j].created {
			return claims[i].created < claims[j].created
		}
		return claims[i].uid < claims[j].uid
	})
	self := string(g.obj.GetUID())
	created := g.obj.GetCreationTimestamp().UnixNano()
	mineRouted := routesNow(g.status, g.obj.GetGeneration())
	for _, c := range claims {
		if c.uid == self {
			continue
		}
		// The gateway that routes the subnet now keeps it; between two that do not (or,
		// after a race, both do), the older (creation time, then UID: creation times
		// have whole seconds).
		older := c.created < created || (c.created == created && c.uid < self)
		if c.routed != mineRouted {
			older = c.routed
		}
		if !older {
			continue
		}
		for _, s := range c.subnets {
			if p, err := netip.ParsePrefix(s); err == nil {
				if m, ok := overlap(p); ok {
					return fmt.Sprintf("routed subnet %s overlaps %s, routed to %s (the gateway that routes it first keeps it)", m, p, c.who), nil
				}
			}
		}
	}
	return "", nil
}

// routesNow: the gateway's RoutingReady is True for its current generation with its
// routed destinations in place (not NotRequired).
func routesNow(st *v1alpha1.GatewayStatus, gen int64) bool {
	c := conditions.Get(st.Conditions, v1alpha1.ConditionRoutingReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == gen && c.Reason != v1alpha1.ReasonNotRequired
}
