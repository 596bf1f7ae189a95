package clusterlink

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

// routerWrites counts the add and remove calls of route sets on one router since the
// request log was last read up to mark.
func (h *harness) routerWrites(routerID string, since time.Time) (adds, removes int) {
	for _, rec := range h.sim.RequestLog() {
		if rec.Time.Before(since) || !strings.Contains(rec.Path, "/routers/"+routerID+"/") {
			continue
		}
		switch {
		case strings.HasSuffix(rec.Path, "/add_extraroutes"):
			adds++
		case strings.HasSuffix(rec.Path, "/remove_extraroutes"):
			removes++
		}
	}
	return adds, removes
}

// Who reaches whom is modelled: link A (same tenant, selecting tenant acme's
// namespaces) routes its service cluster back to gateway A only, link B (cross-tenant
// on the customer's own router, no selector) to the gateways of the namespace labelled
// with its customer project only. Gateway A's reverse virtual IPs are therefore routed
// from link A's cluster and not from link B's, and gateway B's the other way round.
// Changing a selector moves the routes with at most one atomic add and one atomic
// remove on the router.
func TestReverseRoutesFollowTheSelector(t *testing.T) {
	h := newHarness(t)
	labelNS(t, ensureNSName(t, "sel-acme"), map[string]string{"tenant": "acme"})
	customerNS(t, "sel-diehl", projDiehl)
	ipsecGateway(t, "sel-acme", "gw-a", true, "100.64.11.0/24", "10.254.0.111")
	ipsecGateway(t, "sel-diehl", "gw-b", true, "100.64.12.0/24", "10.254.0.112")
	ipsecGateway(t, "sel-other", "gw-c", true, "100.64.13.0/24", "10.254.0.113")
	h.secret("sel-b", "diehl", nil)

	h.newLink("sel-a", "shoot--services--svc01", svcCIDR, func(l *v1alpha1.ClusterLink) {
		l.Spec.GatewaySelector = &v1alpha1.GatewaySelector{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "acme"}}}
	})
	h.newLink("sel-b", diehlRouter, diehlCIDR, crossTenant(projDiehl))
	a := h.untilReady("sel-a")
	b := h.untilReady("sel-b")
	svc, diehl := h.router("shoot--services--svc01"), h.router(diehlRouter)
	if !hasRoute(svc, "100.64.11.0/24", "10.254.0.111") || len(svc.Routes) != 1 {
		t.Fatalf("link A's router routes %v; want gateway A's service CIDR only", svc.Routes)
	}
	if !hasRoute(diehl, "100.64.12.0/24", "10.254.0.112") || len(diehl.Routes) != 1 {
		t.Fatalf("link B's router routes %v; want gateway B's service CIDR only", diehl.Routes)
	}
	if len(a.Status.ReverseRoutes) != 1 || a.Status.ReverseRoutes[0].GatewayRef != "IPsecGateway/sel-acme/gw-a" ||
		len(b.Status.ReverseRoutes) != 1 || b.Status.ReverseRoutes[0].GatewayRef != "IPsecGateway/sel-diehl/gw-b" {
		t.Fatalf("status: A %v, B %v", a.Status.ReverseRoutes, b.Status.ReverseRoutes)
	}
	expectCond(t, b, v1alpha1.ConditionReverseRoutesInstalled, metav1.ConditionTrue, v1alpha1.ReasonReverseRoutesInstalled,
		"1 reverse route(s) on router "+diehlRouter+" to the gateways with reverse exposures this link serves (it serves the gateways in namespaces labelled ipsec.bnerd.net/customer-project="+projDiehl+")")

	// Widen A to the customer's namespace as well: one atomic add, nothing removed.
	mark := time.Now()
	h.update("sel-a", func(l *v1alpha1.ClusterLink) {
		l.Spec.GatewaySelector.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{"sel-acme", "sel-diehl"}}}}
	})
	h.until("sel-a", "two reverse routes", func(l *v1alpha1.ClusterLink) bool { return len(l.Status.ReverseRoutes) == 2 })
	if adds, removes := h.routerWrites(svc.ID, mark); adds != 1 || removes != 0 {
		t.Fatalf("widening the selector: %d adds and %d removes on the router, want 1 and 0", adds, removes)
	}
	// Move A to the customer's namespace only: at most one add and one remove.
	mark = time.Now()
	h.update("sel-a", func(l *v1alpha1.ClusterLink) {
		l.Spec.GatewaySelector.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.LabelCustomerProject: projDiehl}}
	})
	h.until("sel-a", "gateway B only", func(l *v1alpha1.ClusterLink) bool {
		return len(l.Status.ReverseRoutes) == 1 && l.Status.ReverseRoutes[0].GatewayRef == "IPsecGateway/sel-diehl/gw-b"
	})
	svc = h.router("shoot--services--svc01")
	if hasRoute(svc, "100.64.11.0/24", "10.254.0.111") || !hasRoute(svc, "100.64.12.0/24", "10.254.0.112") {
		t.Fatalf("after the move link A's router routes %v", svc.Routes)
	}
	if adds, removes := h.routerWrites(svc.ID, mark); adds > 1 || removes != 1 {
		t.Fatalf("moving the selector: %d adds and %d removes on the router, want at most 1 and exactly 1", adds, removes)
	}
	// Gateway C's namespace is nobody's: no link routes to it.
	for _, r := range []string{"shoot--services--svc01", diehlRouter} {
		if hasRoute(h.router(r), "100.64.13.0/24", "10.254.0.113") {
			t.Fatalf("%s routes to a gateway no link serves", r)
		}
	}
}

// ensureNSName creates a namespace and returns its name.
func ensureNSName(t *testing.T, ns string) string {
	t.Helper()
	ensureNS(t, ns)
	return ns
}

// A link removes only the forward routes it installed, as exact (destination, next
// hop) pairs recorded in status.forwardRoutes. The leg's transit IP is given to a
// gateway's port after the leg went out of band, and the gateway routes its service
// CIDR via it: neither a changed serviceClusterCIDR nor the link's deletion removes
// the gateway's route.
func TestForwardRoutesRemovedAsRecordedPairs(t *testing.T) {
	h := newHarness(t)
	h.newLink("fwd", "shoot--services--svc01", svcCIDR)
	l := h.untilReady("fwd")
	x := l.Status.TransitIP
	if fmt.Sprint(l.Status.ForwardRoutes) != fmt.Sprint([]v1alpha1.Route{{Destination: svcCIDR, NextHop: x}}) {
		t.Fatalf("status.forwardRoutes %v", l.Status.ForwardRoutes)
	}
	opID := h.opRouter().ID

	// The CIDR moves: the recorded pair goes, the new one is recorded and added.
	h.update("fwd", func(l *v1alpha1.ClusterLink) { l.Spec.ServiceClusterCIDR = "10.249.0.0/16" })
	l = h.until("fwd", "the moved route", func(l *v1alpha1.ClusterLink) bool {
		return len(l.Status.ForwardRoutes) == 1 && l.Status.ForwardRoutes[0].Destination == "10.249.0.0/16"
	})
	if op := h.opRouter(); hasRoute(op, svcCIDR, x) || !hasRoute(op, "10.249.0.0/16", x) {
		t.Fatalf("gateway router routes %v", op.Routes)
	}

	// The leg goes out of band; Neutron gives its address to a gateway's port, whose
	// route to its service CIDR goes via that address.
	if err := h.sim.DeletePort(l.Status.LegPortID); err != nil {
		t.Fatal(err)
	}
	gw := openstack.Owner{Kind: "IPsecGateway", Namespace: "tenant-x", Name: "gw", UID: "6f0c1b7e-0000-4000-8000-000000000002"}
	if _, err := h.sim.AddPort(openstacksim.Port{NetworkID: h.transitNetID(), Name: "gateway", Tags: gw.Tags(),
		FixedIPs: []openstacksim.FixedIP{{SubnetID: h.transitSubnetID(), IPAddress: x}}}); err != nil {
		t.Fatal(err)
	}
	if err := h.sim.AddRoute(opID, "100.64.9.0/24", x); err != nil {
		t.Fatal(err)
	}
	h.reconcile("fwd")
	h.delete("fwd")
	h.until("fwd", "gone", nil)
	op := h.opRouter()
	if !hasRoute(op, "100.64.9.0/24", x) {
		t.Fatalf("the link removed the gateway's route via its former transit IP: %v", op.Routes)
	}
	if hasRoute(op, "10.249.0.0/16", x) {
		t.Fatalf("the link's own route is left: %v", op.Routes)
	}
}

// serviceClusterCIDR must not overlap the service-CIDR pool, the transit subnet or an
// older link's; the older link keeps its network, and the younger one goes on once the
// older one is gone. Nothing is built for a refused link.
func TestServiceClusterCIDROverlaps(t *testing.T) {
	h := newHarness(t)
	for _, c := range []struct{ name, cidr, msg string }{
		{"in-pool", "100.64.0.0/12", "overlaps the service-CIDR pool 100.64.0.0/16"},
		{"on-transit", "10.254.0.0/16", "overlaps the transit subnet 10.254.0.0/24"},
	} {
		h.newLink(c.name, "shoot--services--svc02", c.cidr)
		l := h.untilCond(c.name, v1alpha1.ConditionValidated, v1alpha1.ReasonServiceClusterCIDROverlap)
		expectCond(t, l, v1alpha1.ConditionValidated, metav1.ConditionFalse, v1alpha1.ReasonServiceClusterCIDROverlap, "serviceClusterCIDR "+c.cidr+" "+c.msg)
		if l.Status.TransitIP != "" || len(h.linkPorts(l)) != 0 {
			t.Fatalf("%s: a refused link built something", c.name)
		}
		h.delete(c.name)
		h.until(c.name, "gone", nil)
	}
	h.newLink("older", "shoot--services--svc01", "10.251.0.0/16")
	h.untilReady("older")
	h.newLink("younger", "shoot--services--svc02", "10.251.128.0/17")
	l := h.untilCond("younger", v1alpha1.ConditionValidated, v1alpha1.ReasonServiceClusterCIDROverlap)
	expectCond(t, l, v1alpha1.ConditionValidated, metav1.ConditionFalse, v1alpha1.ReasonServiceClusterCIDROverlap,
		"serviceClusterCIDR 10.251.128.0/17 overlaps 10.251.0.0/16 of ClusterLink older, which is older and keeps it")
	if hasRoute(h.opRouter(), "10.251.128.0/17", "10.254.0.4") || len(h.linkPorts(l)) != 0 {
		t.Fatal("the younger link built something")
	}
	if o := h.get("older"); condStatus(o, v1alpha1.ConditionReady) != metav1.ConditionTrue {
		t.Fatal("the older link lost its readiness")
	}
	h.delete("older")
	h.until("older", "gone", nil)
	h.untilReady("younger")
}

// C1: a gateway's routed-mode subnet is a route on the same router; a link whose
// network overlaps one that is routed now is refused (the gateway was there first),
// and goes on once the gateway leaves routed mode.
func TestServiceClusterCIDROverlapsARoutedSubnet(t *testing.T) {
	h := newHarness(t)
	gw := ipsecGateway(t, "routed-overlap", "gw-r", false, gwCIDR(31), gwIP(31))
	gw.Spec.Tunnels[0].Mode = v1alpha1.TunnelModeRouted
	gw.Spec.Tunnels[0].Peer.Subnets = []string{"10.252.8.0/24"}
	if err := env.Client.Update(context.Background(), gw); err != nil {
		t.Fatal(err)
	}
	gw.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionRoutingReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonRoutingReady,
		ObservedGeneration: gw.Generation, LastTransitionTime: metav1.Now(), Message: "routed"}}
	if err := env.Client.Status().Update(context.Background(), gw); err != nil {
		t.Fatal(err)
	}
	h.newLink("over-routed", "shoot--services--svc02", "10.252.0.0/16")
	l := h.untilCond("over-routed", v1alpha1.ConditionValidated, v1alpha1.ReasonServiceClusterCIDROverlap)
	expectCond(t, l, v1alpha1.ConditionValidated, metav1.ConditionFalse, v1alpha1.ReasonServiceClusterCIDROverlap,
		"serviceClusterCIDR 10.252.0.0/16 overlaps 10.252.8.0/24, a routed-mode subnet of IPsecGateway routed-overlap/gw-r, which was there first and keeps it")
	if l.Status.TransitIP != "" || len(h.linkPorts(l)) != 0 {
		t.Fatal("a refused link built something")
	}
	deleteIPsecGateway(t, "routed-overlap", "gw-r")
	h.update("over-routed", func(l *v1alpha1.ClusterLink) {
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations["test/touch"] = "1"
	})
	h.untilReady("over-routed")
}

// Privileged roles: the specification's deny-list, and everything the operator does
// not know to be harmless (a cloud's policy can make any role privileged). An operator
// vouches for a role of its cloud with IPSEC_CLUSTERLINK_SAFE_ROLES.
func TestCrossTenantUnknownRolesRefused(t *testing.T) {
	h := newHarness(t)
	h.secret("custom", "diehl-custom", nil)
	h.newLink("custom", diehlRouter, diehlCIDR, crossTenant(projDiehl))
	l := h.untilCond("custom", v1alpha1.ConditionCredentialsResolved, v1alpha1.ReasonCredentialsPrivileged)
	expectCond(t, l, v1alpha1.ConditionCredentialsResolved, metav1.ConditionFalse, v1alpha1.ReasonCredentialsPrivileged,
		secretPrefix("custom")+"the credential's token carries the role(s) network_operator, which the operator does not know to be harmless")
	if len(h.sharesFor(projDiehl)) != 0 || len(h.linkPorts(l)) != 0 {
		t.Fatal("a refused credential changed OpenStack")
	}
	// The operator vouches for the role: a fresh reconciler with the setting.
	h.cfg.ClusterLinkSafeRoles = []string{"Network_Operator"}
	h.r = New(h.deps())
	h.untilReady("custom")
}

// The customer credential's OS_INTERFACE is ignored: the operator's own endpoint type
// is used, so a Secret cannot steer the operator to the catalog's internal or admin
// endpoints.
func TestCrossTenantOSInterfaceIgnored(t *testing.T) {
	h := newHarness(t)
	h.secret("iface", "diehl", map[string]string{openstack.EnvInterface: "admin"})
	h.newLink("iface", diehlRouter, diehlCIDR, crossTenant(projDiehl))
	h.untilReady("iface")
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.interfaces) == 0 {
		t.Fatal("no customer client was built")
	}
	for _, i := range h.interfaces {
		if i != "public" {
			t.Fatalf("a customer client was built for the %q interface, not the operator's", i)
		}
	}
}

// With a manager running, a refused credential is retried the moment its Secret is
// updated (the operator follows that one Secret, metadata only), not at the resync
// (an hour here).
func TestCredentialSecretUpdateRetriesAtOnce(t *testing.T) {
	h := newHarness(t)
	skip := true
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:     env.Scheme,
		Logger:     testLogger,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: &skip},
	})
	if err != nil {
		t.Fatal(err)
	}
	deps := h.deps()
	deps.Client, deps.APIReader = nil, nil
	deps.Config.ResyncInterval = time.Hour
	r := New(deps)
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	h.secret("retry", "diehl-admin", nil)
	h.newLink("retry", diehlRouter, diehlCIDR, crossTenant(projDiehl))
	waitFor(t, "the privileged credential refused", func() (bool, string) {
		l := h.get("retry")
		c := condOf(l, v1alpha1.ConditionCredentialsResolved)
		return c == v1alpha1.ReasonCredentialsPrivileged, dumpConds(l)
	})
	if got := r.secrets.Followed(); fmt.Sprint(got) != fmt.Sprint([]types.NamespacedName{{Namespace: credNS, Name: "clusterlink-retry"}}) {
		t.Fatalf("the operator follows %v, want exactly the link's own Secret", got)
	}
	h.secret("retry", "diehl", nil)
	waitFor(t, "the updated Secret picked up", func() (bool, string) {
		l := h.get("retry")
		return condStatus(l, v1alpha1.ConditionReady) == metav1.ConditionTrue, dumpConds(l)
	})
	h.delete("retry")
	waitFor(t, "retry gone", func() (bool, string) { return h.gone("retry"), "still there" })
	if got := r.secrets.Followed(); len(got) != 0 {
		t.Fatalf("still following %v after the link is gone", got)
	}
}

func condOf(l *v1alpha1.ClusterLink, t string) string {
	for _, c := range l.Status.Conditions {
		if c.Type == t {
			return c.Reason
		}
	}
	return ""
}

// A customer credential without a role the link needs is refused with
// CredentialsRoleMissing naming the role, before anything is shared, created or
// attached, and the same Secret version is not authenticated again: reader where the
// cloud has the secure-RBAC defaults (member alone sees nothing of its own project
// there), member everywhere. With both roles the link gets Ready (the control).
func TestCrossTenantCredentialsRoleMissing(t *testing.T) {
	h := newHarness(t, func(s *openstacksim.Seed) {
		s.SecureRBAC = true
		for i := range s.Users {
			switch s.Users[i].Name {
			case "vpn-operator":
				s.Users[i].Roles = []string{"member", "reader"}
				s.Users[i].AppCredentials = []openstacksim.SeedAppCredential{seedAppCred("operator", "member", "reader")}
			case "diehl-automation":
				s.Users[i].Roles = []string{"member", "reader"}
				s.Users[i].AppCredentials = append(s.Users[i].AppCredentials,
					seedAppCred("diehl-member-only", "member"), seedAppCred("diehl-reader-only", "reader"),
					seedAppCred("diehl-both", "member", "reader"))
			}
		}
	})
	for _, c := range []struct{ cred, role string }{{"diehl-member-only", "reader"}, {"diehl-reader-only", "member"}} {
		t.Run(c.cred, func(t *testing.T) {
			name := "roles-" + c.role
			shares := len(h.sim.RBACPolicies())
			h.secret(name, c.cred, nil)
			h.newLink(name, diehlRouter, diehlCIDR, crossTenant(projDiehl))
			res, _ := h.reconcile(name)
			l := h.get(name)
			cond := expectCond(t, l, v1alpha1.ConditionCredentialsResolved, metav1.ConditionFalse, v1alpha1.ReasonCredentialsRoleMissing,
				secretPrefix(name)+"the credential lacks the "+c.role+" role")
			if !strings.Contains(cond.Message, "member and reader") {
				t.Errorf("the message does not say which roles to grant: %s", cond.Message)
			}
			if res.RequeueAfter != h.cfg.ResyncInterval {
				t.Errorf("requeue %v, want the resync interval", res.RequeueAfter)
			}
			if len(h.sim.RBACPolicies()) != shares || len(h.linkPorts(l)) != 0 {
				t.Fatal("a credential lacking a role got the network shared or a leg made")
			}
			builds := h.builds.Load()
			if _, err := h.reconcile(name); err != nil {
				t.Fatal(err)
			}
			if h.builds.Load() != builds {
				t.Error("the refused Secret version was authenticated again")
			}
			h.secret(name, "diehl-both", nil)
			h.untilReady(name)
			h.delete(name)
			h.until(name, "gone", nil)
		})
	}
}
