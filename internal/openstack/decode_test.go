package openstack_test

import (
	"slices"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

// A Neutron with pagination_max_limit set pages every list the request did not limit
// (the real clouds here do not set it, so the simulator stands in): the seam's port list,
// which decodes each page itself, follows every next link and keeps the fields it asked.
func TestPortListFollowsNeutronsPages(t *testing.T) {
	seed, err := openstacksim.LoadSeed(conformanceEstate)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := openstacksim.Start(seed)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := ctxT(t)
	id, secret, _ := srv.AppCredential("cf-operator")
	c := must(openstack.NewClients(ctx, openstack.Credential{AuthURL: srv.AuthURL(), Region: srv.Region(),
		AppCredentialID: id, AppCredentialSecret: secret}, openstack.ClientOptions{Timeout: 10 * time.Second})).get(t)
	n := c.Networking
	transit := must(n.ResolveNetwork(ctx, "vpn-transit")).get(t)
	var want []string
	for range 5 {
		want = append(want, must(n.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: transit.ID, Tags: []string{"paged"}})).get(t).ID)
	}
	slices.Sort(want)

	const route = "GET /network/v2.0/ports"
	srv.SetPageSize(2)
	before := srv.Counters().ByRoute[route]
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
	if pages := srv.Counters().ByRoute[route] - before; pages != 3 {
		t.Errorf("%d requests for 5 ports at 2 a page, want 3", pages)
	}
}
