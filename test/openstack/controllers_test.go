package realopenstack

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/controller/clusterlink"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/realstack"
)

// A gateway on the real OpenStack: its port, security group and floating IP made and
// tagged, the port hot-attached to the Nova server behind the chosen Node; a steady
// state that writes nothing; a delete that leaves nothing in Neutron or Nova.
func TestGatewayLifecycle(t *testing.T) { forReleases(t, gatewayLifecycle) }

func gatewayLifecycle(t *testing.T, rel realstack.Release) {
	r := newRig(t, rel)
	r.psk("hq-psk", "correct horse battery staple")
	r.createGateway("acme", false)
	gw := r.gatewayReady("acme")
	st := gw.Status

	port, err := r.os.Networking.GetPort(r.ctx, st.PortID)
	if err != nil {
		t.Fatal(err)
	}
	owner := openstack.Owner{UID: string(gw.UID)}
	if !owner.OwnedBy(port.Tags) || port.FixedIPOn("") != st.PortFixedIP || port.MACAddress != st.PortMACAddress {
		t.Errorf("port %+v does not match status %+v", port, st)
	}
	if st.NodeName != r.nodeName("worker-a") || st.ServerID != r.servers[r.nodeName("worker-a")] || port.DeviceID != st.ServerID ||
		!strings.HasPrefix(port.DeviceOwner, "compute:") {
		t.Errorf("node %s, server %s, port device %s (%s): want the port on worker-a's server", st.NodeName, st.ServerID, port.DeviceID, port.DeviceOwner)
	}
	ifs, err := r.os.Compute.ListServerInterfaces(r.ctx, st.ServerID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(ifs, func(i openstack.ServerInterface) bool { return i.PortID == port.ID }) {
		t.Errorf("Nova does not list the port on the server: %+v", ifs)
	}
	if len(port.SecurityGroups) != 1 || port.SecurityGroups[0] != st.SecurityGroupID {
		t.Errorf("port security groups %v, want [%s]", port.SecurityGroups, st.SecurityGroupID)
	}
	// Nothing is routed to a gateway without reverse exposures.
	if len(port.AllowedAddressPairs) != 0 {
		t.Errorf("allowed address pairs %+v, want none", port.AllowedAddressPairs)
	}
	sg, err := r.os.Networking.GetSecurityGroup(r.ctx, st.SecurityGroupID)
	if err != nil {
		t.Fatal(err)
	}
	var ingress []string
	for _, rule := range sg.Rules {
		if rule.Direction == openstack.DirectionIngress {
			ingress = append(ingress, rule.Protocol+"/"+strconv.Itoa(rule.PortRangeMin)+" from "+rule.RemoteIPPrefix)
		}
	}
	slices.Sort(ingress)
	if want := []string{"udp/4500 from 198.51.100.7/32", "udp/500 from 198.51.100.7/32"}; !slices.Equal(ingress, want) {
		t.Errorf("ingress rules %v, want %v", ingress, want)
	}
	fip, err := r.os.Networking.GetFloatingIP(r.ctx, st.FloatingIPID)
	if err != nil {
		t.Fatal(err)
	}
	if fip.PortID != port.ID || fip.FloatingIPAddress != st.FloatingIP || !owner.OwnedBy(fip.Tags) {
		t.Errorf("floating IP %+v", fip)
	}
	// No reverse exposures, no route.
	if got := routesMatching(r.router(r.os, r.cfg.Router), st.ServiceCIDR, st.PortFixedIP); len(got) != 0 {
		t.Errorf("routes for a gateway without reverse exposures: %v", got)
	}

	r.steadyState(gw)

	r.deleteAndWait(gw)
	r.audit(gw.UID)
	if _, err := r.os.Networking.GetFloatingIP(r.ctx, st.FloatingIPID); !openstack.IsNotFound(err) {
		t.Errorf("floating IP after delete: %v", err)
	}
	ifs, err = r.os.Compute.ListServerInterfaces(r.ctx, st.ServerID)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(ifs, func(i openstack.ServerInterface) bool { return i.PortID == st.PortID }) {
		t.Errorf("Nova still lists the deleted gateway's port: %+v", ifs)
	}
}

// A reverse-exposure gateway with its route on the gateway cluster's router, a
// same-tenant ClusterLink to svc01 and a cross-tenant ClusterLink to the customer's
// diehl01 with the customer's real application credential: each Ready with its
// fabric, the reverse routes on both service routers, a steady state that writes
// nothing, and deletes that unbind in order and leave nothing behind.
func TestReverseGatewayAndClusterLinks(t *testing.T) { forReleases(t, reverseGatewayAndClusterLinks) }

func reverseGatewayAndClusterLinks(t *testing.T, rel realstack.Release) {
	r := newRig(t, rel)
	r.psk("hq-psk", "correct horse battery staple")
	r.createGateway("erp", true)
	gw := r.gatewayReady("erp")
	gst := gw.Status
	opRouter := r.router(r.os, r.cfg.Router)
	if got := routesMatching(opRouter, gst.ServiceCIDR, ""); len(got) != 1 || got[0].NextHop != gst.PortFixedIP {
		t.Fatalf("operator router routes for %s: %v, want one via %s", gst.ServiceCIDR, got, gst.PortFixedIP)
	}
	reverse := openstack.Route{Destination: gst.ServiceCIDR, NextHop: gst.PortFixedIP}
	port, err := r.os.Networking.GetPort(r.ctx, gst.PortID)
	if err != nil {
		t.Fatal(err)
	}
	if len(port.AllowedAddressPairs) != 1 || port.AllowedAddressPairs[0].IPAddress != gst.ServiceCIDR {
		t.Errorf("allowed address pairs %+v, want %s (the routed service CIDR)", port.AllowedAddressPairs, gst.ServiceCIDR)
	}

	// Same tenant: svc01.
	same := &v1alpha1.ClusterLink{ObjectMeta: metav1.ObjectMeta{Name: r.linkName("svc01")},
		Spec: v1alpha1.ClusterLinkSpec{ServiceClusterRouter: "shoot--services--svc01", ServiceClusterCIDR: "10.251.0.0/16"}}
	if err := env.Client.Create(r.ctx, same); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.deleteAndWait(same) })
	sl := r.linkReady(same.Name)
	svcRouter := r.router(r.os, "shoot--services--svc01")
	leg, err := r.os.Networking.GetPort(r.ctx, sl.Status.LegPortID)
	if err != nil {
		t.Fatal(err)
	}
	if leg.DeviceID != svcRouter.ID || leg.FixedIPOn("") != sl.Status.TransitIP || !(openstack.Owner{UID: string(sl.UID)}).OwnedBy(leg.Tags) {
		t.Errorf("same-tenant leg %+v", leg)
	}
	if !r.router(r.os, r.cfg.Router).HasRoute(openstack.Route{Destination: "10.251.0.0/16", NextHop: sl.Status.TransitIP}) {
		t.Errorf("no route to svc01 via %s", sl.Status.TransitIP)
	}
	eventually(t, "reverse route on svc01's router", func() (bool, string) {
		rt := r.router(r.os, "shoot--services--svc01")
		return rt.HasRoute(reverse), fmtRoutes(rt)
	})

	// reverseRouteMode Aggregate on the real Neutron: the pool via the gateway cluster's
	// router's transit address replaces the per-gateway route (added first), and the
	// switch back restores it.
	opPorts, err := r.os.Networking.ListPorts(r.ctx, openstack.ListPortsOpts{DeviceID: opRouter.ID})
	if err != nil {
		t.Fatal(err)
	}
	var opTransit string
	for _, p := range opPorts {
		for _, f := range p.FixedIPs {
			if a, err := netip.ParseAddr(f.IPAddress); err == nil && netip.MustParsePrefix("10.254.0.0/24").Contains(a) {
				opTransit = a.String()
			}
		}
	}
	if opTransit == "" {
		t.Fatalf("the gateway cluster's router has no port on the transit subnet: %+v", opPorts)
	}
	setMode := func(mode string) {
		t.Helper()
		var l v1alpha1.ClusterLink
		if err := env.Client.Get(r.ctx, types.NamespacedName{Name: same.Name}, &l); err != nil {
			t.Fatal(err)
		}
		l.Spec.ReverseRouteMode = mode
		if err := env.Client.Update(r.ctx, &l); err != nil {
			t.Fatal(err)
		}
	}
	pool := openstack.Route{Destination: r.cfg.ServiceCIDRPool.String(), NextHop: opTransit}
	setMode(v1alpha1.ReverseRouteAggregate)
	eventually(t, "the aggregate route alone on svc01's router", func() (bool, string) {
		rt := r.router(r.os, "shoot--services--svc01")
		return rt.HasRoute(pool) && !rt.HasRoute(reverse), fmtRoutes(rt)
	})
	// The router changes before the status that records it (the stale route is removed,
	// then the status written), so the status is waited for, not read once: a CI run
	// read it between the two on both real releases.
	eventually(t, "the Aggregate link's status records the pool route alone", func() (bool, string) {
		l := r.linkReady(same.Name)
		ok := l.Status.ReverseRouteMode == v1alpha1.ReverseRouteAggregate && len(l.Status.ReverseRoutes) == 1 && l.Status.ReverseRoutes[0].GatewayRef == v1alpha1.AggregateGatewayRef
		return ok, fmt.Sprintf("mode %q, reverse routes %v", l.Status.ReverseRouteMode, l.Status.ReverseRoutes)
	})
	setMode(v1alpha1.ReverseRoutePerGateway)
	eventually(t, "the per-gateway route back on svc01's router", func() (bool, string) {
		rt := r.router(r.os, "shoot--services--svc01")
		return rt.HasRoute(reverse) && !rt.HasRoute(pool), fmtRoutes(rt)
	})
	sl = r.linkReady(same.Name)

	// Cross tenant: diehl01, with the customer's own application credential.
	custProject, err := r.cloud.ID("projects", "customer-diehl")
	if err != nil {
		t.Fatal(err)
	}
	custCred, err := r.cloud.Credential("customer-diehl")
	if err != nil {
		t.Fatal(err)
	}
	// A cross-tenant link without a gatewaySelector serves the gateways of the
	// namespaces labelled for its customer project (docs/security.md).
	var nsObj corev1.Namespace
	if err := env.Client.Get(r.ctx, types.NamespacedName{Name: r.ns}, &nsObj); err != nil {
		t.Fatal(err)
	}
	if nsObj.Labels == nil {
		nsObj.Labels = map[string]string{}
	}
	nsObj.Labels[v1alpha1.LabelCustomerProject] = custProject
	if err := env.Client.Update(r.ctx, &nsObj); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.cfg.ClusterLinkCredentialsNamespace, Name: clusterlink.SecretNamePrefix + r.linkName("diehl01")},
		Data: map[string][]byte{openstack.EnvAppCredentialID: []byte(custCred.AppCredentialID), openstack.EnvAppCredentialSecret: []byte(custCred.AppCredentialSecret)}}
	if err := env.Client.Create(r.ctx, secret); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(r.ctx, secret) })
	cross := &v1alpha1.ClusterLink{
		ObjectMeta: metav1.ObjectMeta{Name: r.linkName("diehl01"), Annotations: map[string]string{v1alpha1.AnnotationCustomerAPIAccess: "none"}},
		Spec: v1alpha1.ClusterLinkSpec{ServiceClusterRouter: "shoot--diehl--diehl01", ServiceClusterCIDR: "10.234.0.0/16",
			CredentialsSecretRef: &v1alpha1.SecretRef{Name: secret.Name, Namespace: secret.Namespace}, CustomerProjectID: custProject},
	}
	if err := env.Client.Create(r.ctx, cross); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.deleteAndWait(cross) })
	cl := r.linkReady(cross.Name)
	transit, err := r.os.Networking.ResolveNetwork(r.ctx, r.cfg.GatewayNetwork)
	if err != nil {
		t.Fatal(err)
	}
	shares, err := r.os.Networking.ListRBACPolicies(r.ctx, openstack.ListRBACPoliciesOpts{ObjectID: transit.ID, TargetProject: custProject})
	if err != nil {
		t.Fatal(err)
	}
	if len(shares) != 1 {
		t.Errorf("RBAC shares of the transit network with the customer: %+v", shares)
	}
	custRouter := r.router(r.customer, "shoot--diehl--diehl01")
	cleg, err := r.customer.Networking.GetPort(r.ctx, cl.Status.LegPortID)
	if err != nil {
		t.Fatal(err)
	}
	if cleg.ProjectID != custProject || cleg.DeviceID != custRouter.ID || cleg.FixedIPOn("") != cl.Status.TransitIP {
		t.Errorf("customer leg %+v: want the customer's port on %s at %s", cleg, custRouter.ID, cl.Status.TransitIP)
	}
	if a, err := netip.ParseAddr(cl.Status.TransitIP); err != nil || !netip.MustParsePrefix("10.254.0.0/24").Contains(a) {
		t.Errorf("transit IP %q", cl.Status.TransitIP)
	}
	forward := openstack.Route{Destination: "10.234.0.0/16", NextHop: cl.Status.TransitIP}
	if !r.router(r.os, r.cfg.Router).HasRoute(forward) {
		t.Errorf("no operator route %+v", forward)
	}
	eventually(t, "reverse route on diehl01's router", func() (bool, string) {
		rt := r.router(r.customer, "shoot--diehl--diehl01")
		return rt.HasRoute(reverse), fmtRoutes(rt)
	})
	cl = r.linkReady(cross.Name)

	r.steadyState(gw, same, cl)

	// Unbind the cross-tenant link: the customer's reverse route and the operator's
	// route before the leg, the leg before the share.
	mark := r.osWrites.mark()
	r.deleteAndWait(cl)
	writes := r.osWrites.since(mark)
	last := func(op string) int {
		i := -1
		for j, w := range writes {
			if strings.HasPrefix(w, op) {
				i = j
			}
		}
		return i
	}
	first := func(op string) int {
		return slices.IndexFunc(writes, func(w string) bool { return strings.HasPrefix(w, op) })
	}
	routesOut, legOut := last("PUT /v2.0/routers/{id}/remove_extraroutes"), first("PUT /v2.0/routers/{id}/remove_router_interface")
	if routesOut < 0 || legOut < 0 || routesOut > legOut || first("DELETE /v2.0/rbac-policies/{id}") >= 0 {
		t.Errorf("unbind order (routes, then the leg; the share stays): %v", writes)
	}
	if rt := r.router(r.customer, "shoot--diehl--diehl01"); len(rt.Routes) != 0 {
		t.Errorf("customer router routes after unbind: %v", rt.Routes)
	}
	if r.router(r.os, r.cfg.Router).HasRoute(forward) {
		t.Error("operator route to the customer after unbind")
	}
	if _, err := r.customer.Networking.GetPort(r.ctx, cl.Status.LegPortID); !openstack.IsNotFound(err) {
		t.Errorf("customer leg after unbind: %v", err)
	}
	// The share stays (it may serve other links of the project, or be hand-made);
	// decommissioning it is the documented manual step, which works now that no port
	// of the customer's uses the network.
	shares, err = r.os.Networking.ListRBACPolicies(r.ctx, openstack.ListRBACPoliciesOpts{ObjectID: transit.ID, TargetProject: custProject})
	if err != nil || len(shares) != 1 {
		t.Fatalf("RBAC share after unbind: %+v, %v; want the one share kept", shares, err)
	}
	if err := r.os.Networking.DeleteRBACPolicy(r.ctx, shares[0].ID); err != nil {
		t.Errorf("decommissioning the share: %v", err)
	}

	r.deleteAndWait(same)
	if rt := r.router(r.os, "shoot--services--svc01"); rt.HasRoute(reverse) {
		t.Errorf("svc01 keeps the reverse route: %v", rt.Routes)
	}
	r.deleteAndWait(gw)
	if got := routesMatching(r.router(r.os, r.cfg.Router), "", gst.PortFixedIP); len(got) != 0 {
		t.Errorf("operator router keeps routes via the deleted gateway: %v", got)
	}
	if got := routesMatching(r.router(r.os, r.cfg.Router), "", sl.Status.TransitIP); len(got) != 0 {
		t.Errorf("operator router keeps routes via the deleted svc01 leg: %v", got)
	}
	r.audit([]types.UID{gw.UID, sl.UID, cl.UID}...)
}

func fmtRoutes(rt *openstack.Router) string {
	var parts []string
	for _, x := range rt.Routes {
		parts = append(parts, x.Destination+" via "+x.NextHop)
	}
	return strings.Join(parts, ", ")
}
