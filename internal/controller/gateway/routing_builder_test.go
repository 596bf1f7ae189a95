package gateway

import (
	"reflect"
	"testing"

	"bnerd.net/vpn-operator/internal/openstack"
)

// The router routes a gateway converges, decided without an API server (the unit tier).
func TestRouteDiff(t *testing.T) {
	const fixed, cidr = "192.0.2.10", "100.64.7.0/24"
	rt := &openstack.Router{ID: "r1", Routes: []openstack.Route{
		{Destination: cidr, NextHop: "192.0.2.99"},           // our CIDR via another hop: goes
		{Destination: "10.20.0.0/16", NextHop: fixed},        // a withdrawn remote subnet: goes
		{Destination: "10.30.0.0/16", NextHop: fixed},        // still wanted: stays
		{Destination: "10.40.0.0/16", NextHop: "192.0.2.11"}, // another gateway's: stays
	}}
	stale, add := routeDiff(rt, []string{cidr, "10.30.0.0/16", "10.50.0.0/16"}, cidr, fixed)
	wantStale := []openstack.Route{{Destination: cidr, NextHop: "192.0.2.99"}, {Destination: "10.20.0.0/16", NextHop: fixed}}
	wantAdd := []openstack.Route{{Destination: cidr, NextHop: fixed}, {Destination: "10.50.0.0/16", NextHop: fixed}}
	if !reflect.DeepEqual(stale, wantStale) || !reflect.DeepEqual(add, wantAdd) {
		t.Errorf("routeDiff = stale %v, add %v; want %v, %v", stale, add, wantStale, wantAdd)
	}
	// Converged: nothing to do.
	rt.Routes = []openstack.Route{{Destination: cidr, NextHop: fixed}, {Destination: "10.40.0.0/16", NextHop: "192.0.2.11"}}
	if stale, add := routeDiff(rt, []string{cidr}, cidr, fixed); len(stale)+len(add) != 0 {
		t.Errorf("a converged router: stale %v, add %v", stale, add)
	}
	// A gateway that routes nothing any more (its routes withdrawn) leaves others' alone.
	if stale, _ := routeDiff(rt, nil, cidr, fixed); !reflect.DeepEqual(stale, []openstack.Route{{Destination: cidr, NextHop: fixed}}) {
		t.Errorf("withdrawn: stale %v", stale)
	}
	// Our CIDR via another hop is only ours to fix while we route it.
	rt.Routes = []openstack.Route{{Destination: cidr, NextHop: "192.0.2.99"}}
	if stale, add := routeDiff(rt, nil, cidr, fixed); len(stale)+len(add) != 0 {
		t.Errorf("not routing the CIDR: stale %v, add %v", stale, add)
	}
}
