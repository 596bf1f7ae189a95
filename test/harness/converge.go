package harness

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/linkselect"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

// Gateway is either kind of gateway, as read from the API server.
type Gateway struct {
	Kind   string
	Object client.Object
	Spec   *v1alpha1.GatewaySpec
	Status *v1alpha1.GatewayStatus
}

// Ref is "<Kind> <namespace>/<name>".
func (g Gateway) Ref() string {
	return g.Kind + " " + g.Object.GetNamespace() + "/" + g.Object.GetName()
}

// ListGateways lists both kinds in every namespace.
func ListGateways(ctx context.Context, c client.Reader) ([]Gateway, error) {
	gws, err := v1alpha1.ListGateways(ctx, c)
	if err != nil {
		return nil, err
	}
	out := make([]Gateway, 0, len(gws))
	for _, g := range gws {
		out = append(out, Gateway{Kind: g.GatewayKind(), Object: g, Spec: g.GetGatewaySpec(), Status: g.GetGatewayStatus()})
	}
	return out, nil
}

// converged: Ready=True for the object's current generation, and not being deleted.
func converged(obj client.Object, conds []metav1.Condition, observed int64) (bool, string) {
	if !obj.GetDeletionTimestamp().IsZero() {
		return false, "still being deleted"
	}
	c := meta.FindStatusCondition(conds, v1alpha1.ConditionReady)
	switch {
	case c == nil:
		return false, "no Ready condition"
	case observed != obj.GetGeneration() || c.ObservedGeneration != obj.GetGeneration():
		return false, fmt.Sprintf("generation %d not observed yet (status %d, Ready %d)", obj.GetGeneration(), observed, c.ObservedGeneration)
	case c.Status != metav1.ConditionTrue:
		return false, fmt.Sprintf("Ready=%s %s: %s", c.Status, c.Reason, c.Message)
	}
	return true, ""
}

// gatewayConverged: every phase condition True for the gateway's current generation, and
// not being deleted: its OpenStack and Kubernetes objects are converged. Ready also needs
// a running pod and its status agent's report of the tunnels (PodReady, TunnelsUp),
// which no kubelet provides against envtest; the phases are what the operator owns.
func gatewayConverged(g Gateway) (bool, string) {
	obj := g.Object
	if !obj.GetDeletionTimestamp().IsZero() {
		return false, "still being deleted"
	}
	if g.Status.ObservedGeneration != obj.GetGeneration() {
		return false, fmt.Sprintf("generation %d not observed yet (status %d)", obj.GetGeneration(), g.Status.ObservedGeneration)
	}
	for _, t := range v1alpha1.GatewayPhaseConditionTypes {
		c := meta.FindStatusCondition(g.Status.Conditions, t)
		switch {
		case c == nil:
			return false, "no " + t + " condition"
		case c.ObservedGeneration != obj.GetGeneration():
			return false, fmt.Sprintf("%s of generation %d, not %d", t, c.ObservedGeneration, obj.GetGeneration())
		case c.Status != metav1.ConditionTrue:
			return false, fmt.Sprintf("%s=%s %s: %s", t, c.Status, c.Reason, c.Message)
		}
	}
	return true, ""
}

// NotConverged lists every gateway that is not converged (gatewayConverged) and every
// ClusterLink that is not Ready for its current generation (or still being deleted),
// with why: empty when everything converged.
func NotConverged(ctx context.Context, c client.Reader) ([]string, error) {
	var out []string
	gws, err := ListGateways(ctx, c)
	if err != nil {
		return nil, err
	}
	for _, g := range gws {
		if ok, why := gatewayConverged(g); !ok {
			out = append(out, g.Ref()+": "+why)
		}
	}
	var links v1alpha1.ClusterLinkList
	if err := c.List(ctx, &links); err != nil {
		return nil, err
	}
	var nsList corev1.NamespaceList
	if err := c.List(ctx, &nsList); err != nil {
		return nil, err
	}
	nsLabels := map[string]map[string]string{}
	for _, n := range nsList.Items {
		nsLabels[n.Name] = n.Labels
	}
	for i := range links.Items {
		l := &links.Items[i]
		if ok, why := converged(l, l.Status.Conditions, l.Status.ObservedGeneration); !ok {
			out = append(out, "ClusterLink "+l.Name+": "+why)
			continue
		}
		// Ready is the link's word as of its last reconcile; a gateway that gained or
		// moved its reverse route since then reaches the link through a fan-out a few
		// seconds later. Converged means the recorded routes are the ones the link
		// serves now.
		want, err := reverseRoutesServed(l, gws, nsLabels)
		if err != nil {
			return nil, err
		}
		have := make([]string, 0, len(l.Status.ReverseRoutes))
		for _, x := range l.Status.ReverseRoutes {
			have = append(have, x.ServiceCIDR+" via "+x.NextHop)
		}
		sort.Strings(have)
		if strings.Join(have, ",") != strings.Join(want, ",") {
			out = append(out, fmt.Sprintf("ClusterLink %s: reverse routes %v, serving %v", l.Name, have, want))
		}
	}
	sort.Strings(out)
	return out, nil
}

// reverseRoutesServed lists "<service CIDR> via <port address>" of every gateway with
// reverse exposures (and both addresses in its status) that the link serves, sorted.
func reverseRoutesServed(l *v1alpha1.ClusterLink, gws []Gateway, nsLabels map[string]map[string]string) ([]string, error) {
	var out []string
	for _, g := range gws {
		if len(g.Spec.ReverseExposures) == 0 || g.Status.ServiceCIDR == "" || g.Status.PortFixedIP == "" || !g.Object.GetDeletionTimestamp().IsZero() {
			continue
		}
		ok, err := linkselect.Selects(l, nsLabels[g.Object.GetNamespace()], g.Object.GetLabels())
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, g.Status.ServiceCIDR+" via "+g.Status.PortFixedIP)
		}
	}
	sort.Strings(out)
	return out, nil
}

// BuildAuditInput describes the live gateways and ClusterLinks, from their status on the
// API server, for Audit. deleted are the UIDs of objects deleted during the run.
func BuildAuditInput(ctx context.Context, c client.Reader, s *openstacksim.Server, baseline *Snapshot, deleted []string) (AuditInput, error) {
	in := AuditInput{
		Baseline: baseline,
		OwnerOf: func(tags []string) (string, bool) {
			o, ok := openstack.OwnerFromTags(tags)
			return o.UID, ok
		},
		Deleted: deleted,
	}
	rt, ok := s.RouterByName(GatewayRouter)
	if !ok {
		return in, fmt.Errorf("no router %s", GatewayRouter)
	}
	in.GatewayRouterID = rt.ID
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return in, err
	}
	servers := map[string]string{}
	for _, n := range nodes.Items {
		if id, err := openstack.ParseProviderID(n.Spec.ProviderID); err == nil {
			servers[n.Name] = id
		}
	}
	gws, err := ListGateways(ctx, c)
	if err != nil {
		return in, err
	}
	for _, g := range gws {
		ag := AuditGateway{
			Owner: string(g.Object.GetUID()), Name: g.Ref(), ServiceCIDR: g.Status.ServiceCIDR,
			PortID: g.Status.PortID, ServerID: servers[g.Status.NodeName], Reverse: len(g.Spec.ReverseExposures) > 0,
		}
		for _, e := range g.Status.Exposures {
			ag.VirtualIPs = append(ag.VirtualIPs, e.VirtualIP)
		}
		for _, e := range g.Status.ReverseExposures {
			ag.VirtualIPs = append(ag.VirtualIPs, e.VirtualIP)
		}
		in.Gateways = append(in.Gateways, ag)
	}
	var links v1alpha1.ClusterLinkList
	if err := c.List(ctx, &links); err != nil {
		return in, err
	}
	var nsList corev1.NamespaceList
	if err := c.List(ctx, &nsList); err != nil {
		return in, err
	}
	nsLabels := map[string]map[string]string{}
	for _, n := range nsList.Items {
		nsLabels[n.Name] = n.Labels
	}
	for i := range links.Items {
		l := &links.Items[i]
		// Which gateways' reverse routes belong on the link's router: the tenancy rules
		// (gatewaySelector, or the default of the link's kind).
		serves := []string{}
		for _, g := range gws {
			ok, err := linkselect.Selects(l, nsLabels[g.Object.GetNamespace()], g.Object.GetLabels())
			if err != nil {
				return in, err
			}
			if ok {
				serves = append(serves, string(g.Object.GetUID()))
			}
		}
		in.Links = append(in.Links, AuditLink{
			Owner: string(l.UID), Name: l.Name, TransitIP: l.Status.TransitIP, LegPortID: l.Status.LegPortID,
			RouterID: l.Status.RouterID, ServiceClusterCIDR: l.Spec.ServiceClusterCIDR, Serves: serves,
		})
	}
	return in, nil
}

// Summarize shortens a long list for a failure message.
func Summarize(items []string, max int) string {
	if len(items) <= max {
		return strings.Join(items, "\n  ")
	}
	return strings.Join(items[:max], "\n  ") + fmt.Sprintf("\n  ... and %d more", len(items)-max)
}
