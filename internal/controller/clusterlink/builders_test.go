package clusterlink

import (
	"net/netip"
	"reflect"
	"testing"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
)

// The leg a link asks Neutron for, the routes it wants and the writes that get the
// router there, decided without an API server or OpenStack (the unit tier).

func rr(cidr, hop, ref string) v1alpha1.ReverseRoute {
	return v1alpha1.ReverseRoute{ServiceCIDR: cidr, NextHop: hop, GatewayRef: ref}
}

func route(dst, hop string) openstack.Route { return openstack.Route{Destination: dst, NextHop: hop} }

func TestOwnedForwardIsTheRecordAndTheSpecsPairOnly(t *testing.T) {
	link := &v1alpha1.ClusterLink{}
	link.Spec.ServiceClusterCIDR = "10.20.0.0/16"
	if got := ownedForward(link); len(got) != 0 {
		t.Errorf("no transit IP, no record: %v", got)
	}
	link.Status.TransitIP = "192.0.2.10"
	link.Status.ForwardRoutes = []v1alpha1.Route{{Destination: "10.30.0.0/16", NextHop: "192.0.2.10"}, {Destination: "10.30.0.0/16", NextHop: "192.0.2.10"}, {Destination: "10.20.0.0/16", NextHop: "192.0.2.10"}}
	want := []openstack.Route{route("10.30.0.0/16", "192.0.2.10"), route("10.20.0.0/16", "192.0.2.10")}
	if got := ownedForward(link); !reflect.DeepEqual(got, want) {
		t.Errorf("ownedForward = %v, want %v (each pair once, the spec's among them)", got, want)
	}
}

func TestReverseTargetOnlyForAnAllocatedGatewayWithReverseExposures(t *testing.T) {
	spec := &v1alpha1.GatewaySpec{ReverseExposures: []v1alpha1.ReverseExposure{{}}}
	st := &v1alpha1.GatewayStatus{ServiceCIDR: "100.64.7.0/24", PortFixedIP: "192.0.2.44"}
	for _, c := range []struct {
		name     string
		spec     *v1alpha1.GatewaySpec
		st       v1alpha1.GatewayStatus
		deleting bool
		want     openstack.Route
		ok       bool
	}{
		{name: "allocated", spec: spec, st: *st, want: route("100.64.7.0/24", "192.0.2.44"), ok: true},
		{name: "host bits masked", spec: spec, st: v1alpha1.GatewayStatus{ServiceCIDR: "100.64.7.9/24", PortFixedIP: "192.0.2.44"}, want: route("100.64.7.0/24", "192.0.2.44"), ok: true},
		{name: "deleting", spec: spec, st: *st, deleting: true},
		{name: "no reverse exposures", spec: &v1alpha1.GatewaySpec{}, st: *st},
		{name: "not allocated", spec: spec, st: v1alpha1.GatewayStatus{PortFixedIP: "192.0.2.44"}},
		{name: "no port yet", spec: spec, st: v1alpha1.GatewayStatus{ServiceCIDR: "100.64.7.0/24"}},
		{name: "IPv6 service CIDR", spec: spec, st: v1alpha1.GatewayStatus{ServiceCIDR: "fd00::/64", PortFixedIP: "192.0.2.44"}},
		{name: "IPv6 next hop", spec: spec, st: v1alpha1.GatewayStatus{ServiceCIDR: "100.64.7.0/24", PortFixedIP: "fd00::1"}},
	} {
		got, ok := reverseTarget(c.spec, &c.st, c.deleting)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: %v %t, want %v %t", c.name, got, ok, c.want, c.ok)
		}
	}
}

func TestReverseDiffTouchesOnlyWhatTheLinkOwns(t *testing.T) {
	a, b, c := rr("100.64.1.0/24", "192.0.2.1", "IPsecGateway/t/a"), rr("100.64.2.0/24", "192.0.2.2", "IPsecGateway/t/b"), rr("100.64.3.0/24", "192.0.2.3", "IPsecGateway/t/c")
	handMade := route("10.99.0.0/16", "192.0.2.99")
	onRouter := []openstack.Route{routeOf(a), routeOf(c), handMade}
	// a stays, b is new, c is owned but no longer desired, the hand-made one is not ours.
	add, remove, want := reverseDiff(onRouter, []v1alpha1.ReverseRoute{a, b, b}, []v1alpha1.ReverseRoute{a, c, c})
	if !reflect.DeepEqual(add, []openstack.Route{routeOf(b)}) {
		t.Errorf("add %v, want b once", add)
	}
	if !reflect.DeepEqual(remove, []openstack.Route{routeOf(c)}) {
		t.Errorf("remove %v, want c once (never the hand-made route)", remove)
	}
	if len(want) != 2 || !want[routeOf(a)] || !want[routeOf(b)] {
		t.Errorf("want %v", want)
	}
	// An owned route already gone from the router is not removed again.
	if _, remove, _ := reverseDiff([]openstack.Route{routeOf(a)}, []v1alpha1.ReverseRoute{a}, []v1alpha1.ReverseRoute{a, c}); len(remove) != 0 {
		t.Errorf("remove %v of a route not on the router", remove)
	}
}

func TestRecordedReverseKeepsWhatMayBeOnTheRouter(t *testing.T) {
	a, b, c := rr("100.64.1.0/24", "192.0.2.1", "IPsecGateway/t/a"), rr("100.64.2.0/24", "192.0.2.2", "IPsecGateway/t/b"), rr("100.64.3.0/24", "192.0.2.3", "IPsecGateway/t/c")
	desired, owned := []v1alpha1.ReverseRoute{a, b}, []v1alpha1.ReverseRoute{a, c}
	add, _, want := reverseDiff([]openstack.Route{routeOf(a), routeOf(c)}, desired, owned)
	for _, x := range []struct {
		name       string
		onRouter   []openstack.Route
		unanswered bool
		want       []v1alpha1.ReverseRoute
	}{
		// The add was refused (an answer): b is not there; c, whose removal failed, is.
		{name: "refused add, failed remove", onRouter: []openstack.Route{routeOf(a), routeOf(c)}, want: []v1alpha1.ReverseRoute{a, c}},
		// No answer: b may be there and stays on record until a read shows it absent.
		{name: "unanswered add", onRouter: []openstack.Route{routeOf(a), routeOf(c)}, unanswered: true, want: []v1alpha1.ReverseRoute{a, b, c}},
		{name: "both writes done", onRouter: []openstack.Route{routeOf(a), routeOf(b)}, want: []v1alpha1.ReverseRoute{a, b}},
	} {
		if got := recordedReverse(x.onRouter, desired, owned, want, add, x.unanswered); !reflect.DeepEqual(got, x.want) {
			t.Errorf("%s: recorded %v, want %v", x.name, got, x.want)
		}
	}
}

func TestOnlyNextHopsOnTheTransitSubnetAreUsable(t *testing.T) {
	in := []v1alpha1.ReverseRoute{rr("100.64.1.0/24", "192.0.2.1", "a"), rr("100.64.2.0/24", "198.51.100.2", "b"), rr("100.64.3.0/24", "not-an-ip", "c")}
	usable, skipped := onTransitSubnet(in, netip.MustParsePrefix("192.0.2.0/24"))
	if !reflect.DeepEqual(usable, in[:1]) || !reflect.DeepEqual(skipped, []string{"b", "c"}) {
		t.Errorf("usable %v, skipped %v", usable, skipped)
	}
	if in[1].GatewayRef != "b" {
		t.Error("onTransitSubnet changed its input")
	}
}

func TestWantedLegAtTheAddressTheLinkMayChoose(t *testing.T) {
	tn := &transitNet{network: &openstack.Network{ID: "transit"}, subnet: openstack.Subnet{ID: "transit-v4"}}
	link := &v1alpha1.ClusterLink{}
	link.Name, link.UID = "diehl", "5f0c3e7a-9d2b-4c1e-8a6f-1b2c3d4e5f60"
	link.Status.TransitIP = "192.0.2.10"
	got := wantedLeg(link, false, tn, "diehl-router")
	want := openstack.CreatePortOpts{
		NetworkID: "transit", SubnetID: "transit-v4",
		Name:        openstack.ResourceName(OwnerKind, "", "diehl"),
		Description: "ClusterLink diehl: leg of router diehl-router on the transit network",
		Tags:        owner(link).Tags(),
		IPAddress:   "192.0.2.10",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("same-tenant leg =\n%#v\nwant\n%#v", got, want)
	}
	// A cross-tenant leg is made at the pin, or where Neutron puts it: never at an
	// address the operator allocated on the customer's behalf.
	link.Spec.TransitIP = "192.0.2.77"
	if got := wantedLeg(link, true, tn, "diehl-router"); got.IPAddress != "192.0.2.77" {
		t.Errorf("cross-tenant leg with a pin at %q", got.IPAddress)
	}
	link.Spec.TransitIP = ""
	if got := wantedLeg(link, true, tn, "diehl-router"); got.IPAddress != "" {
		t.Errorf("cross-tenant leg without a pin at %q, want Neutron's choice", got.IPAddress)
	}
}
