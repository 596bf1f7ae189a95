package gateway

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/addrpolicy"
	"bnerd.net/vpn-operator/internal/conditions"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/tenancy"
)

// +kubebuilder:rbac:groups=ipsec.bnerd.net,resources=vpntenantpolicies,verbs=get;list;watch

// indexRouted indexes gateways with routed-mode tunnels, so the exposure check reads
// only those (not the whole estate) to keep exposures out of other tenants' routed
// subnets.
const indexRouted = "ipsec.bnerd.net/routed"

// tenantPolicy resolves the policy that governs g's namespace (from the cache).
func (r *Reconciler) tenantPolicy(ctx context.Context, g *gateway) (tenancy.Policy, error) {
	var list v1alpha1.VPNTenantPolicyList
	if err := r.Client.List(ctx, &list); err != nil {
		return tenancy.Policy{}, fmt.Errorf("listing VPNTenantPolicies: %w", err)
	}
	return tenancy.For(list.Items, g.obj.GetNamespace(), g.nsLabels), nil
}

// tenantNamespaces lists the namespaces of the tenant pol governs: the namespaces the
// policy selects, or (the strict defaults) g's namespace alone.
func (r *Reconciler) tenantNamespaces(ctx context.Context, g *gateway, pol tenancy.Policy) ([]string, error) {
	namespaces := []string{g.obj.GetNamespace()}
	if pol.Name == "" {
		return namespaces, nil
	}
	var p v1alpha1.VPNTenantPolicy
	if err := r.Client.Get(ctx, client.ObjectKey{Name: pol.Name}, &p); err != nil {
		return nil, fmt.Errorf("reading VPNTenantPolicy %s: %w", pol.Name, err)
	}
	var nss corev1.NamespaceList
	if err := r.Client.List(ctx, &nss); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	namespaces = namespaces[:0]
	for _, ns := range nss.Items {
		if tenancy.Selects(&p, ns.Labels) {
			namespaces = append(namespaces, ns.Name)
		}
	}
	if !slices.Contains(namespaces, g.obj.GetNamespace()) {
		namespaces = append(namespaces, g.obj.GetNamespace())
	}
	return namespaces, nil
}

// tenantUsage adds up what the gateways of the namespaces use. It builds nothing per
// gateway: every reconcile counts its whole tenant, and when the total fits (the common
// case) no one is refused, so the members need not be listed (tenancy.Admit).
func (r *Reconciler) tenantUsage(ctx context.Context, namespaces []string) (v1alpha1.TenantUsage, error) {
	var total v1alpha1.TenantUsage
	for _, ns := range namespaces {
		err := r.eachGateway(ctx, func(g readOnlyGateway) {
			total = tenancy.Add(total, tenancy.UsageOf(g.spec, g.wg))
		}, client.InNamespace(ns))
		if err != nil {
			return total, fmt.Errorf("listing the gateways of namespace %s: %w", ns, err)
		}
	}
	return total, nil
}

// tenantMembers lists every gateway of the namespaces as the limits count them.
func (r *Reconciler) tenantMembers(ctx context.Context, namespaces []string) ([]tenancy.Member, error) {
	var out []tenancy.Member
	for _, ns := range namespaces {
		err := r.eachGateway(ctx, func(g readOnlyGateway) {
			out = append(out, tenancy.Member{
				Ref: g.kind + " " + g.meta.GetNamespace() + "/" + g.meta.GetName(), UID: g.meta.GetUID(), Created: g.meta.GetCreationTimestamp(),
				Usage:       tenancy.UsageOf(g.spec, g.wg),
				Admitted:    conditions.IsTrue(g.status.Conditions, v1alpha1.ConditionValidated, g.meta.GetGeneration()),
				Established: g.status.ServiceCIDR != "",
			})
		}, client.InNamespace(ns))
		if err != nil {
			return nil, fmt.Errorf("listing the gateways of namespace %s: %w", ns, err)
		}
	}
	return out, nil
}

// readOnlyGateway is a gateway from the cache, not copied: read it, never change it.
type readOnlyGateway struct {
	kind   string
	meta   metav1.Object
	spec   *v1alpha1.GatewaySpec
	wg     *v1alpha1.WireGuardSpec
	status *v1alpha1.GatewayStatus
}

// eachGateway calls f for every gateway of both kinds the options select, straight from
// the cache (no deep copy): the tenant, placement and exposure checks read every
// gateway of a tenant or the estate on each reconcile, and copying them all would make
// a large estate's convergence quadratic in memory traffic.
func (r *Reconciler) eachGateway(ctx context.Context, f func(readOnlyGateway), opts ...client.ListOption) error {
	each := func(o v1alpha1.Gateway) {
		f(readOnlyGateway{kind: o.GatewayKind(), meta: o, spec: o.GetGatewaySpec(), wg: o.GetWireGuard(), status: o.GetGatewayStatus()})
	}
	var lo client.ListOptions
	lo.ApplyOptions(opts)
	if r.stores != nil && lo.FieldSelector == nil && lo.LabelSelector == nil && lo.Limit == 0 {
		// A namespace or the estate: from the stores, without the list's copy.
		return r.stores.each(lo.Namespace, each)
	}
	gws, err := v1alpha1.ListGateways(ctx, r.Client, append(opts, client.UnsafeDisableDeepCopy)...)
	if err != nil {
		return err
	}
	for _, o := range gws {
		each(o)
	}
	return nil
}

// tenantRefusal checks g against its tenant's policy, before anything is built: one
// policy must govern the namespace, the pinned floating IP must be one it lists, every
// exposure target must lie in a linked cluster that serves g or in the policy's
// exposure targets (and never in another gateway's routed subnet), and g must fit the
// tenant's limits. It returns the reason and message of the first refusal, and the
// names of the exposures a refusal concerns (withdrawn from a running gateway).
func (r *Reconciler) tenantRefusal(ctx context.Context, g *gateway) (reason, msg string, exposures []string, err error) {
	pol, err := r.tenantPolicy(ctx, g)
	if err != nil {
		return "", "", nil, err
	}
	g.policy = pol
	if pol.Conflicting > 1 {
		return v1alpha1.ReasonTenantPolicyConflict, fmt.Sprintf(
			"namespace %s is selected by %d VPNTenantPolicies, so none of them applies and the gateway goes no further; a platform admin must make the policies' namespace selectors disjoint (their Exclusive condition names the overlap)",
			g.obj.GetNamespace(), pol.Conflicting), nil, nil
	}
	if g.spec.Endpoint != nil && g.spec.Endpoint.FloatingIP != "" {
		a, perr := netip.ParseAddr(g.spec.Endpoint.FloatingIP)
		if perr == nil && !pol.FloatingIPAllowed(a) {
			return v1alpha1.ReasonFloatingIPNotAllowed, fmt.Sprintf(
				"spec.endpoint.floatingIP %s is not a floating IP %s lets this namespace pin; a platform admin adds it to the policy's floatingIPs",
				a, pol.Describe()), nil, nil
		}
	}
	if errs, names, err := r.targetRefusals(ctx, g, pol); err != nil {
		return "", "", nil, err
	} else if len(errs) > 0 {
		return v1alpha1.ReasonExposureTargetNotAllowed, errs.ToAggregate().Error(), names, nil
	}
	namespaces, err := r.tenantNamespaces(ctx, g, pol)
	if err != nil {
		return "", "", nil, err
	}
	if total, err := r.tenantUsage(ctx, namespaces); err != nil || len(tenancy.Exceeded(total, pol.Limits)) == 0 {
		return "", "", nil, err // everything fits: no one is refused
	}
	members, err := r.tenantMembers(ctx, namespaces)
	if err != nil {
		return "", "", nil, err
	}
	if ref, refused := tenancy.RefusalOf(second(tenancy.Admit(pol.Limits, members)), g.obj.GetUID()); refused {
		return v1alpha1.ReasonTenantLimitExceeded, fmt.Sprintf(
			"this gateway would take its tenant past the limits of %s: %s; the gateways admitted before it keep theirs. Remove something, or ask a platform admin to raise the limits",
			pol.Describe(), strings.Join(ref.Passes, ", ")), nil, nil
	}
	return "", "", nil, nil
}

func second[A, B any](_ A, b B) B { return b }

// targetRefusals lists the exposures whose targets the tenant may not reach: a target
// must lie in the service cluster of a ClusterLink serving g or in the policy's
// exposure targets, and never in a subnet routed to another gateway (that client's own
// network: the gateway network is no internal source, so a tenant cannot reach another
// tenant's client through its exposures either).
func (r *Reconciler) targetRefusals(ctx context.Context, g *gateway, pol tenancy.Policy) (field.ErrorList, []string, error) {
	if len(g.spec.Exposures) == 0 {
		return nil, nil, nil
	}
	routed, err := r.othersRoutedSubnets(ctx, g)
	if err != nil {
		return nil, nil, err
	}
	var errs field.ErrorList
	var names []string
	for i, e := range g.spec.Exposures {
		a, err := netip.ParseAddr(e.Target.Address)
		if err != nil {
			continue
		}
		p := field.NewPath("spec", "exposures").Index(i).Child("target", "address")
		inRouted := false
		for _, s := range routed {
			if s.Contains(a) {
				inRouted = true
				break
			}
		}
		if inRouted {
			errs = append(errs, field.Forbidden(p, fmt.Sprintf("exposure %q targets %s, which lies in a subnet routed to another gateway: its client's network is no exposure target", e.Name, a)))
			names = append(names, e.Name)
			continue
		}
		linked := false
		for _, l := range g.links {
			if l.serves && l.cidr.Contains(a) {
				linked = true
				break
			}
		}
		if !linked && !pol.TargetAllowed(a) {
			errs = append(errs, field.Forbidden(p, fmt.Sprintf("exposure %q targets %s, outside the service clusters of the ClusterLinks serving this gateway and outside the exposure targets %s allows (%s)",
				e.Name, a, pol.Describe(), prefixList(pol.ExposureTargets))))
			names = append(names, e.Name)
		}
	}
	return errs, names, nil
}

func prefixList(ps []netip.Prefix) string {
	if len(ps) == 0 {
		return "none"
	}
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

// othersRoutedSubnets lists the routed-mode subnets of every other gateway (from the
// cache, through the index of routed gateways).
func (r *Reconciler) othersRoutedSubnets(ctx context.Context, g *gateway) ([]netip.Prefix, error) {
	var out []netip.Prefix
	collect := func(o readOnlyGateway) {
		if o.meta.GetUID() == g.obj.GetUID() {
			return
		}
		for _, s := range routedSubnets(o.spec) {
			if p, err := netip.ParsePrefix(s); err == nil {
				out = append(out, p.Masked())
			}
		}
	}
	if err := r.eachGateway(ctx, collect, client.MatchingFields{indexRouted: "true"}); err != nil {
		// A client without the index (a reconciler run outside a manager): all.
		out = nil
		if err := r.eachGateway(ctx, collect); err != nil {
			return nil, fmt.Errorf("listing the routed gateways: %w", err)
		}
	}
	return out, nil
}

// withdrawExposures takes the named exposures out of a running gateway's
// configuration: a gateway refused for them at Validated goes no further, and must not
// keep serving what is no longer allowed. The agent applies the change live (an
// exposure removed is a map element deleted). Nothing else in the configuration moves.
func (r *Reconciler) withdrawExposures(ctx context.Context, g *gateway, names []string) error {
	if len(names) == 0 {
		return nil
	}
	var cm corev1.ConfigMap
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: g.obj.GetNamespace(), Name: render.ConfigMapName(g.obj.GetName())}, &cm)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	raw, ok := cm.Data[gatewayconfig.ConfigMapKeyConfig]
	if !ok {
		return nil
	}
	cfg, err := gatewayconfig.Unmarshal([]byte(raw))
	if err != nil {
		return nil // not a configuration the agent would load either
	}
	drop := map[string]bool{}
	for _, n := range names {
		drop[n] = true
	}
	kept := cfg.Exposures[:0]
	for _, e := range cfg.Exposures {
		if !drop[e.Name] {
			kept = append(kept, e)
		}
	}
	if len(kept) == len(cfg.Exposures) {
		return nil
	}
	cfg.Exposures = kept
	out, err := gatewayconfig.Marshal(cfg)
	if err != nil {
		return err
	}
	cm.Data[gatewayconfig.ConfigMapKeyConfig] = string(out)
	logr.FromContextOrDiscard(ctx).Info("withdrawing exposures the tenant policy refuses from the running gateway", "exposures", strings.Join(names, ","))
	return r.Client.Update(ctx, &cm)
}

// internalSources are the operator's internal source CIDRs for g with the gateway
// network taken out: every gateway's port lives there, and a gateway never admits,
// forwards to a routed client or reverse-DNATs traffic from another gateway's port.
func (r *Reconciler) internalSources(g *gateway) []netip.Prefix {
	sub, err := netip.ParsePrefix(g.status.SubnetCIDR)
	if err != nil {
		return r.Config.InternalSourceCIDRs
	}
	return addrpolicy.Without(r.Config.InternalSourceCIDRs, sub)
}

// untrustedSources are what g's pod drops traffic from: the gateway network, but for
// its own port's address.
func (r *Reconciler) untrustedSources(g *gateway) []netip.Prefix {
	sub, err := netip.ParsePrefix(g.status.SubnetCIDR)
	if err != nil {
		return nil
	}
	return []netip.Prefix{sub.Masked()}
}
