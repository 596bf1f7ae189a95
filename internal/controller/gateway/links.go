package gateway

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/addrpolicy"
	"bnerd.net/vpn-operator/internal/linkselect"
)

// link is a ClusterLink as one gateway sees it.
type link struct {
	name   string
	cidr   netip.Prefix
	serves bool
	whom   string // linkselect.Describe
}

// links lists the active ClusterLinks and whether each serves g (from the cache), and
// records the labels of g's namespace. The links are read, never changed, so the list
// shares the cache's objects instead of a deep copy of each: every gateway reconcile
// reads them all, and a link's status can carry a route per gateway (at 1,000 gateways
// and 100 links the copies were about 4 % of the operator's allocations).
func (r *Reconciler) links(ctx context.Context, g *gateway) ([]link, error) {
	var list v1alpha1.ClusterLinkList
	if err := r.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing ClusterLinks: %w", err)
	}
	var ns corev1.Namespace
	if err := r.Client.Get(ctx, client.ObjectKey{Name: g.obj.GetNamespace()}, &ns); err != nil {
		return nil, fmt.Errorf("reading namespace %s: %w", g.obj.GetNamespace(), err)
	}
	g.nsLabels = ns.Labels
	var out []link
	for i := range list.Items {
		l := &list.Items[i]
		cidr, ok := linkselect.CIDR(l)
		if !ok || !linkselect.Active(l) {
			continue
		}
		serves, err := linkselect.Selects(l, ns.Labels, g.obj.GetLabels())
		if err != nil {
			continue // an invalid selector is refused by Validate, so Active is false
		}
		out = append(out, link{name: l.Name, cidr: cidr, serves: serves, whom: linkselect.Describe(l)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// addressPolicy is the operator's address policy for g: the pool, the allow-list, the
// internal source networks (peers only) and, once the port's subnet is known, the
// gateway network.
func (r *Reconciler) addressPolicy(g *gateway) addrpolicy.Policy {
	pol := addrpolicy.Policy{ServiceCIDRPool: r.Config.ServiceCIDRPool, ExposureTargets: r.Config.ExposureTargetCIDRs,
		InternalSources: r.Config.InternalSourceCIDRs}
	if p, err := netip.ParsePrefix(g.status.SubnetCIDR); err == nil {
		pol.GatewaySubnet = p
	}
	return pol
}

// unlinkedTargets lists the exposures that target a service cluster whose ClusterLink
// does not serve this gateway: its router has no route back to this gateway's port, and
// a tenant must not reach into another tenant's linked cluster through its own tunnel.
// The message names the exposure and its target only: the link serves another tenant,
// whose link name, service-cluster range and project go to the operator's log (details).
func unlinkedTargets(spec *v1alpha1.GatewaySpec, links []link) (errs field.ErrorList, names, details []string) {
	for i, e := range spec.Exposures {
		a, err := netip.ParseAddr(e.Target.Address)
		if err != nil {
			continue
		}
		for _, l := range links {
			if l.cidr.Contains(a) && !l.serves {
				errs = append(errs, field.Forbidden(field.NewPath("spec", "exposures").Index(i).Child("target", "address"),
					fmt.Sprintf("exposure %q targets %s, which lies in the service cluster of a ClusterLink that does not serve this gateway", e.Name, a)))
				names = append(names, e.Name)
				details = append(details, fmt.Sprintf("exposure %s targets %s in %s, the service cluster of ClusterLink %s, which serves %s", e.Name, a, l.cidr, l.name, l.whom))
			}
		}
	}
	return errs, names, details
}

// reverseSources are the networks the gateway's security group admits to its reverse
// exposures: the operator-wide internal source CIDRs (the gateway cluster's own fabric,
// never the gateway network) and the serviceClusterCIDR of every ClusterLink that
// serves this gateway, and of no other.
func (r *Reconciler) reverseSources(g *gateway) []netip.Prefix {
	seen := map[netip.Prefix]bool{}
	var out []netip.Prefix
	add := func(p netip.Prefix) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, p := range r.internalSources(g) {
		add(p)
	}
	for _, l := range g.links {
		if l.serves {
			add(l.cidr)
		}
	}
	return out
}

func linkNames(links []link, serving bool) string {
	var n []string
	for _, l := range links {
		if l.serves == serving {
			n = append(n, l.name)
		}
	}
	if len(n) == 0 {
		return "none"
	}
	return strings.Join(n, ", ")
}
