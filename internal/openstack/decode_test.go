package openstack_test

import (
	"slices"
	"testing"

	"bnerd.net/vpn-operator/internal/openstack"
)

// A Neutron with pagination_max_limit set pages every list the request did not limit
// (the real clouds here do not set it, so the simulator stands in): the seam's port list,
// which decodes each page itself, follows every next link and keeps the fields it asked.
func TestPortListFollowsNeutronsPages(t *testing.T) {
	w := buildWorld(t, targetSim)
	ctx := ctxT(t)
	n := w.op.Networking
	var want []string
	for range 5 {
		want = append(want, must(n.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID, Tags: []string{"paged"}})).get(t).ID)
	}
	slices.Sort(want)

	const route = "GET network:/ports"
	w.srv.SetPageSize(2)
	w.requests.reset()
	ps := must(n.ListPorts(ctx, openstack.ListPortsOpts{Tags: []string{"paged"}, Fields: []string{"id", "tags"}})).get(t)
	var got []string
	for _, p := range ps {
		got = append(got, p.ID)
		if !slices.Equal(p.Tags, []string{"paged"}) || p.NetworkID != "" {
			t.Errorf("port %s: tags %v, network %q (asked for id and tags only)", p.ID, p.Tags, p.NetworkID)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("listed %v, want %v", got, want)
	}
	if pages := w.requests.count(route); pages != 3 {
		t.Errorf("%d requests for 5 ports at 2 a page, want 3 (%s)", pages, w.requests)
	}
}
