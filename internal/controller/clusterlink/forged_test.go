package clusterlink

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/render"
)

// podClient is a client with the gateway pod's identity: the ServiceAccount, Role and
// RoleBinding the operator renders for it exist, and the client impersonates that
// ServiceAccount, so a write is judged by the API server as the pod's would be.
func podClient(t *testing.T, kind, resource string, gw client.Object) client.Client {
	t.Helper()
	ctx := context.Background()
	g := render.Gateway{APIVersion: v1alpha1.GroupVersion.String(), Kind: kind, Resource: resource,
		Namespace: gw.GetNamespace(), Name: gw.GetName(), UID: gw.GetUID()}
	for _, o := range []client.Object{render.ServiceAccount(g), render.Role(g, v1alpha1.GroupVersion.Group, "hq-psk"), render.RoleBinding(g)} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + gw.GetNamespace() + ":" + render.ServiceAccountName(gw.GetName())}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// forgeStatus writes status fields the operator owns with the pod's token, through
// the status subresource, as a compromised container of the gateway pod could.
func forgeStatus(t *testing.T, pod client.Client, gw client.Object, fields map[string]string) {
	t.Helper()
	var body strings.Builder
	body.WriteString(`{"status":{`)
	first := true
	for k, v := range fields {
		if !first {
			body.WriteString(",")
		}
		first = false
		fmt.Fprintf(&body, "%q:%q", k, v)
	}
	body.WriteString("}}")
	var err error
	for range 50 { // the RBAC cache may lag the binding's create
		obj := gw.DeepCopyObject().(client.Object)
		if err = pod.Status().Patch(context.Background(), obj, client.RawPatch(types.MergePatchType, []byte(body.String()))); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the pod's token could not patch its gateway's status: %v", err)
}

// What the gateway pod may write, ClusterLink does not route: a service CIDR or next
// hop in status that the gateway's tagged port does not record installs no route on
// the service cluster's router, and the link says so with StatusForged (finding H2 of
// the security review). Negative control: with desiredReverse taking status as it is,
// the forged routes appear on the router and this test fails.
func TestForgedGatewayStatusInstallsNoRoute(t *testing.T) {
	h := newHarness(t)
	ipsecGateway(t, "forge-victim", "gw", true, gwCIDR(41), gwIP(41))
	g := ipsecGateway(t, "forge-attacker", "gw", true, gwCIDR(42), gwIP(42))
	h.newLink("forge", "shoot--services--svc01", svcCIDR)
	h.untilReady("forge")
	svc := h.router("shoot--services--svc01")
	if !hasRoute(svc, gwCIDR(41), gwIP(41)) || !hasRoute(svc, gwCIDR(42), gwIP(42)) {
		t.Fatalf("the honest routes are missing: %v", svc.Routes)
	}
	pod := podClient(t, "IPsecGateway", "ipsecgateways", g)

	for _, c := range []struct{ name, cidr, nextHop string }{
		{"a network outside the pool via another leg", "10.0.0.0/8", "10.254.0.7"},
		{"the victim's /24 via the attacker's port", gwCIDR(41), gwIP(42)},
		{"its own /24 via the victim's port", gwCIDR(42), gwIP(41)},
		{"a free /24 of the pool via its own port", gwCIDR(43), gwIP(42)},
	} {
		{
			t.Logf("forging %s: %s via %s", c.name, c.cidr, c.nextHop)
			forgeStatus(t, pod, g, map[string]string{"serviceCIDR": c.cidr, "portFixedIP": c.nextHop})
			l := h.until("forge", "the link to see the forged status", func(l *v1alpha1.ClusterLink) bool {
				cond := meta.FindStatusCondition(l.Status.Conditions, v1alpha1.ConditionReverseRoutesInstalled)
				return cond != nil && strings.Contains(cond.Message, "IPsecGateway/forge-attacker/gw: ") && strings.Contains(cond.Message, c.cidr)
			})
			svc := h.router("shoot--services--svc01")
			if hasRoute(svc, c.cidr, c.nextHop) {
				t.Fatalf("a forged route %s via %s was installed: %v", c.cidr, c.nextHop, svc.Routes)
			}
			if !hasRoute(svc, gwCIDR(41), gwIP(41)) {
				t.Fatalf("the victim's route is gone: %v", svc.Routes)
			}
			for _, x := range l.Status.ReverseRoutes {
				if x.GatewayRef == "IPsecGateway/forge-attacker/gw" {
					t.Fatalf("the link records a route for the forged status: %v", x)
				}
			}
			if len(h.rec.find("forge", v1alpha1.ReasonStatusForged)) == 0 {
				t.Fatal("no StatusForged Event on the link")
			}
		}
	}
	// Back to the truth (the gateway reconciler writes it back): routed again.
	forgeStatus(t, env.Client, g, map[string]string{"serviceCIDR": gwCIDR(42), "portFixedIP": gwIP(42)})
	h.until("forge", "the honest route again", func(l *v1alpha1.ClusterLink) bool {
		return hasRoute(h.router("shoot--services--svc01"), gwCIDR(42), gwIP(42))
	})

	// A port made by an earlier release records no service CIDR yet: its own address
	// still decides, so it keeps its route across the upgrade, and a forged next hop
	// is still refused.
	legacy := ipsecGateway(t, "forge-legacy", "gw", true, gwCIDR(44), gwIP(44))
	makeGatewayPort(t, "IPsecGateway", legacy, "", gwIP(44))
	h.until("forge", "the legacy gateway's route", func(l *v1alpha1.ClusterLink) bool {
		return hasRoute(h.router("shoot--services--svc01"), gwCIDR(44), gwIP(44))
	})
	forgeStatus(t, podClient(t, "IPsecGateway", "ipsecgateways", legacy), legacy, map[string]string{"portFixedIP": gwIP(41)})
	h.until("forge", "the legacy gateway's forged next hop refused", func(l *v1alpha1.ClusterLink) bool {
		cond := meta.FindStatusCondition(l.Status.Conditions, v1alpha1.ConditionReverseRoutesInstalled)
		return cond != nil && strings.Contains(cond.Message, "IPsecGateway/forge-legacy/gw: ")
	})
	if svc := h.router("shoot--services--svc01"); hasRoute(svc, gwCIDR(44), gwIP(41)) || !hasRoute(svc, gwCIDR(41), gwIP(41)) {
		t.Fatalf("the legacy gateway's forged next hop: routes %v", svc.Routes)
	}
}
