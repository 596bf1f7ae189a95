package openstack_test

// Conformance: every method of the seam, driven through gophercloud over HTTP against
// every target (see target_test.go), including the refusals the operator relies on.
// An assertion states what the real OpenStack does; where the simulator differed, the
// simulator was changed, never the assertion (see docs/openstack-fidelity.md).

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	gcos "github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"

	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

const deadID = "00000000-0000-4000-8000-00000000dead"

// transitPort creates a tagged port on the transit network.
func (w *world) transitPort(t *testing.T, c *openstack.Clients, name, ip string) *openstack.Port {
	t.Helper()
	opts := openstack.CreatePortOpts{NetworkID: w.transit.ID, Name: name,
		Tags: openstack.Owner{Kind: "Test", Name: name, UID: "uid-" + name}.Tags()}
	if ip != "" {
		opts.SubnetID, opts.IPAddress = w.transitSub.ID, ip
	}
	return must(c.Networking.CreatePort(ctxT(t), opts)).get(t)
}

// rawNetwork is a plain gophercloud Neutron client for what the seam does not offer
// (creating routers, raw bodies, pagination); cred picks whose.
func (w *world) rawNetwork(t *testing.T, cred openstack.Credential) *gophercloud.ServiceClient {
	t.Helper()
	ctx := ctxT(t)
	ao := gophercloud.AuthOptions{IdentityEndpoint: cred.AuthURL,
		ApplicationCredentialID: cred.AppCredentialID, ApplicationCredentialSecret: cred.AppCredentialSecret}
	provider, err := gcos.AuthenticatedClient(ctx, ao)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := gcos.NewNetworkV2(provider, gophercloud.EndpointOpts{Region: w.region})
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

// ---------------------------------------------------------------- identity

func TestConformanceIdentity(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		cases := []struct {
			name    string
			clients *openstack.Clients
			project string
			roles   []string
		}{
			// An application credential's token carries exactly its roles (Keystone does
			// not add implied ones).
			{"operator", w.op, w.projOperator, []string{"load-balancer_member", "member", "reader"}},
			{"customer", w.cust, w.projCustomer, []string{"member", "reader"}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				before := w.requests.total()
				info := must(tc.clients.Identity.TokenInfo(ctx)).get(t)
				if info.ProjectID != tc.project || info.ProjectName == "" || info.UserID == "" {
					t.Errorf("token info %+v", info)
				}
				if !sameSet(info.Roles, tc.roles) {
					t.Errorf("roles %v, want %v", info.Roles, tc.roles)
				}
				if info.Region != w.region || !strings.HasPrefix(info.NetworkEndpoint, w.networkURL) ||
					!strings.HasPrefix(info.ComputeEndpoint, w.computeURL) {
					t.Errorf("catalog: %+v", info)
				}
				if after := w.requests.total(); after != before {
					t.Errorf("TokenInfo made %d requests; it must read the cached auth result", after-before)
				}
			})
		}
	})
}

func TestConformancePasswordAuth(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		c := must(openstack.NewClients(ctx, w.operatorPassword, w.clientOpts)).get(t)
		if info := must(c.Identity.TokenInfo(ctx)).get(t); info.ProjectID != w.projOperator {
			t.Errorf("password token scoped to %q", info.ProjectID)
		}
		if _, err := c.Networking.GetNetwork(ctx, w.transit.ID); err != nil {
			t.Errorf("password client cannot read: %v", err)
		}
	})
}

func TestConformanceAuthRefusals(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		wrongSecret := w.operatorCred
		wrongSecret.AppCredentialSecret = "definitely-wrong-secret-value"
		_, err := openstack.NewClients(ctx, wrongSecret, w.clientOpts)
		if !openstack.IsUnauthorized(err) {
			t.Errorf("wrong secret: want IsUnauthorized, got %v", err)
		}
		if err != nil && (strings.Contains(err.Error(), wrongSecret.AppCredentialSecret) ||
			strings.Contains(err.Error(), w.operatorCred.AppCredentialSecret)) {
			t.Errorf("auth error leaks a secret: %v", err)
		}

		// An application credential Keystone does not know (deleted, or never made) is a
		// 404, not a 401: Keystone looks it up before it checks the secret.
		unknown := w.operatorCred
		unknown.AppCredentialID = "0123456789abcdef0123456789abcdef"
		if _, err := openstack.NewClients(ctx, unknown, w.clientOpts); !openstack.IsNotFound(err) || openstack.IsTransient(err) {
			t.Errorf("unknown application credential: want 404, got %v", err)
		}

		wrongPassword := w.operatorPassword
		wrongPassword.Password = "not-" + w.operatorPassword.Password
		_, err = openstack.NewClients(ctx, wrongPassword, w.clientOpts)
		if !openstack.IsUnauthorized(err) || strings.Contains(fmt.Sprint(err), w.operatorPassword.Password) {
			t.Errorf("wrong password: %v", err)
		}

		wrongRegion := w.operatorCred
		wrongRegion.Region = "NoSuchRegion"
		if _, err := openstack.NewClients(ctx, wrongRegion, w.clientOpts); err == nil {
			t.Error("a region missing from the catalog must fail client construction")
		}

		if _, err := openstack.NewClients(ctx, openstack.Credential{AuthURL: w.authURL}, w.clientOpts); !errors.Is(err, openstack.ErrInvalidCredential) {
			t.Errorf("incomplete credential: %v", err)
		}
	})
}

func TestConformanceReauthAfterTokenExpiry(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		w.expireToken(t, w.op)
		w.requests.reset()
		if _, err := w.op.Networking.GetNetwork(ctx, w.transit.ID); err != nil {
			t.Fatalf("after token expiry the client must re-authenticate: %v", err)
		}
		if n := w.requests.count("POST identity:/auth/tokens"); n != 1 {
			t.Errorf("re-authentications: %d, want 1 (%s)", n, w.requests)
		}
		if info := must(w.op.Identity.TokenInfo(ctx)).get(t); info.ProjectID != w.projOperator {
			t.Errorf("token info after reauth: %+v", info)
		}
	})
}

func TestConformanceClientCache(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		cache := openstack.NewClientCache(func(ctx context.Context, cred openstack.Credential) (*openstack.Clients, error) {
			return openstack.NewClients(ctx, cred, w.clientOpts)
		})
		cust := w.customerCred
		c1 := must(cache.Get(ctx, "diehl01", "uid-1/rv-1", cust)).get(t)
		c2 := must(cache.Get(ctx, "diehl01", "uid-1/rv-1", cust)).get(t)
		if c1 != c2 {
			t.Error("unchanged Secret version rebuilt the clients")
		}
		if n := w.requests.count("POST identity:/auth/tokens"); n != 1 {
			t.Errorf("Keystone token requests: %d, want 1", n)
		}
		must(cache.Get(ctx, "diehl01", "uid-1/rv-2", cust)).get(t)
		if n := w.requests.count("POST identity:/auth/tokens"); n != 2 {
			t.Errorf("a new Secret version must re-authenticate: %d token requests", n)
		}
		bad := cust
		bad.AppCredentialSecret = "rotated-to-garbage"
		if _, err := cache.Get(ctx, "diehl01", "uid-1/rv-3", bad); !openstack.IsUnauthorized(err) {
			t.Errorf("refused credential: %v", err)
		}
	})
}

// ---------------------------------------------------------------- extensions

// The seam finds what Neutron offers; the simulator presents the shape it was seeded
// with, the real Zed its own (no tag-ports-during-bulk-creation, but extraroute-atomic).
func TestConformanceExtensions(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		f := must(openstack.DiscoverFeatures(ctxT(t), w.op.Networking)).get(t)
		for _, a := range openstack.RequiredExtensions {
			if !f.Has(a) {
				t.Errorf("missing %s in %v", a, f.Extensions)
			}
		}
		if w.target != targetOld && !f.ExtraRouteAtomic || !f.RevisionIfMatch {
			t.Errorf("extraroute-atomic %v, revision-if-match %v", f.ExtraRouteAtomic, f.RevisionIfMatch)
		}
		if zedShaped(w.target) && f.PortTagCreation {
			t.Errorf("Zed's Neutron takes no tags at create: %+v", f)
		}
		if f.Missing() != nil {
			t.Errorf("missing %v", f.Missing())
		}
		// Without extraroute-atomic the atomic calls are not there at all.
		if !f.ExtraRouteAtomic {
			nc := w.rawNetwork(t, w.operatorCred)
			_, err := nc.Put(ctxT(t), nc.ServiceURL("routers", w.vpnRouter.ID, "add_extraroutes"), map[string]any{"router": map[string]any{"routes": []any{}}}, nil, nil)
			if !gophercloud.ResponseCodeIs(err, 404) {
				t.Errorf("add_extraroutes without extraroute-atomic: want 404, got %v", err)
			}
		}
	})
}

// ---------------------------------------------------------------- networks

func TestConformanceNetworksAndSubnets(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		n := w.op.Networking

		got := must(n.GetNetwork(ctx, w.transit.ID)).get(t)
		if got.Name != "vpn-transit" || got.ProjectID != w.projOperator || got.Shared || got.External ||
			!slices.Contains(got.Subnets, w.transitSub.ID) {
			t.Errorf("transit network %+v", got)
		}
		if byID := must(n.ResolveNetwork(ctx, w.transit.ID)).get(t); byID.ID != w.transit.ID {
			t.Errorf("resolve by ID gave %+v", byID)
		}
		if !w.public.External || w.public.ProjectID != w.projAdmin {
			t.Errorf("public network %+v", w.public)
		}
		sub := must(n.GetSubnet(ctx, w.transitSub.ID)).get(t)
		if sub.CIDR != "10.254.0.0/24" || sub.GatewayIP != "10.254.0.1" || sub.NetworkID != w.transit.ID {
			t.Errorf("transit subnet %+v", sub)
		}

		for name, err := range map[string]error{
			"get unknown network":      second(n.GetNetwork(ctx, deadID)),
			"resolve unknown name":     second(n.ResolveNetwork(ctx, "no-such-network")),
			"get unknown subnet":       second(n.GetSubnet(ctx, deadID)),
			"customer sees no transit": second(w.cust.Networking.GetNetwork(ctx, w.transit.ID)),
		} {
			if !openstack.IsNotFound(err) {
				t.Errorf("%s: want IsNotFound, got %v", name, err)
			}
		}
		if _, err := n.ListSubnets(ctx, ""); !errors.Is(err, openstack.ErrUnfiltered) {
			t.Errorf("unfiltered subnet list: %v", err)
		}
	})
}

// ---------------------------------------------------------------- ports

func TestConformancePortCreateAndGet(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		n := w.op.Networking
		owner := openstack.Owner{Kind: "IPsecGateway", Namespace: "tenant-a", Name: "gw1", UID: "0b7c8f1e"}
		sg := must(n.CreateSecurityGroup(ctx, openstack.CreateSecurityGroupOpts{Name: "gw1-sg", Description: "gw1", Tags: owner.Tags()})).get(t)
		if sg.Description != "gw1" || !openstack.HasTags(sg.Tags, owner.Tags()...) {
			t.Errorf("security group %+v", sg)
		}
		w.requests.reset()

		cases := []struct {
			name string
			opts openstack.CreatePortOpts
			ip   string
		}{
			{"pinned address with SG", openstack.CreatePortOpts{NetworkID: w.transit.ID, SubnetID: w.transitSub.ID, IPAddress: "10.254.0.40",
				Name: openstack.ResourceName("gw", "tenant-a", "gw1"), Description: "gateway port", Tags: owner.Tags(), SecurityGroups: []string{sg.ID}}, "10.254.0.40"},
			{"allocated address", openstack.CreatePortOpts{NetworkID: w.transit.ID, Name: "auto", Tags: openstack.Owner{Kind: "T", Name: "auto", UID: "uid-auto"}.Tags()}, ""},
			{"subnet only, untagged", openstack.CreatePortOpts{NetworkID: w.transit.ID, SubnetID: w.transitSub.ID, Name: "subnet-only"}, ""},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				p := must(n.CreatePort(ctx, tc.opts)).get(t)
				ip := p.FixedIPOn(w.transitSub.ID)
				if tc.ip != "" && ip != tc.ip {
					t.Errorf("fixed IP %q, want %q", ip, tc.ip)
				}
				if a, err := netip.ParseAddr(ip); err != nil || !netip.MustParsePrefix("10.254.0.0/24").Contains(a) {
					t.Errorf("fixed IP %q outside the transit subnet", ip)
				}
				if p.NetworkID != w.transit.ID || p.Name != tc.opts.Name || p.MACAddress == "" || p.ProjectID != w.projOperator {
					t.Errorf("port %+v", p)
				}
				if !sameSet(p.Tags, tc.opts.Tags) {
					t.Errorf("tags %v, want %v", p.Tags, tc.opts.Tags)
				}
				if tc.opts.SecurityGroups != nil && !slices.Equal(p.SecurityGroups, tc.opts.SecurityGroups) {
					t.Errorf("security groups %v", p.SecurityGroups)
				}
				if p.Description != tc.opts.Description {
					t.Errorf("description %q, want %q", p.Description, tc.opts.Description)
				}
				again := must(n.GetPort(ctx, p.ID)).get(t)
				if again.ID != p.ID || again.FixedIPOn("") != ip || !sameSet(again.Tags, tc.opts.Tags) || again.Description != tc.opts.Description {
					t.Errorf("GetPort %+v differs from create %+v", again, p)
				}
			})
		}
		// With tag-ports-during-bulk-creation the tags travel in the create; without it
		// they follow in one
		// request per tagged port, and the marker description in another.
		tagPuts, descPuts := w.requests.count("PUT network:/ports/{id}/tags"), w.requests.count("PUT network:/ports/{id}")
		if w.features.PortTagCreation && (tagPuts != 0 || descPuts != 0) {
			t.Errorf("tags must be sent with the create: %s", w.requests)
		}
		if !w.features.PortTagCreation && (tagPuts != 2 || descPuts != 2) {
			t.Errorf("tags set after the create: %d tag and %d description updates, want 2 and 2: %s", tagPuts, descPuts, w.requests)
		}
	})
}

func sameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// How tags persist when they travel in a create request, straight against the API: a
// port keeps them only with the tag-ports-during-bulk-creation driver (dropped
// otherwise), every other create refuses them, on Zed and on 2025.1 (which lists
// tag-creation: the API to add several tags at once, not tags in a create).
func TestConformanceTagsInCreateRequest(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		nc := w.rawNetwork(t, w.operatorCred)
		var port struct {
			Port struct {
				ID   string   `json:"id"`
				Tags []string `json:"tags"`
			} `json:"port"`
		}
		_, err := nc.Post(ctx, nc.ServiceURL("ports"), map[string]any{"port": map[string]any{
			"network_id": w.transit.ID, "name": "raw-tags", "tags": []string{"b", "a"}}}, &port, &gophercloud.RequestOpts{OkCodes: []int{201}})
		if err != nil {
			t.Fatal(err)
		}
		stored := must(w.op.Networking.GetPort(ctx, port.Port.ID)).get(t).Tags
		if w.features.PortTagCreation {
			if !sameSet(port.Port.Tags, []string{"a", "b"}) || !sameSet(stored, []string{"a", "b"}) {
				t.Errorf("tags in the create: answered %v, stored %v", port.Port.Tags, stored)
			}
		} else if len(port.Port.Tags) != 0 || len(stored) != 0 {
			t.Errorf("without tag creation the port's tags are dropped: answered %v, stored %v", port.Port.Tags, stored)
		}
		_, err = nc.Post(ctx, nc.ServiceURL("security-groups"), map[string]any{"security_group": map[string]any{
			"name": "raw-tags", "tags": []string{"a"}}}, nil, &gophercloud.RequestOpts{OkCodes: []int{201}})
		if !gophercloud.ResponseCodeIs(err, 400) || !strings.Contains(err.Error(), "HTTPBadRequest") {
			t.Errorf("security group with tags: want 400 HTTPBadRequest, got %v", err)
		}
	})
}

// The tag API itself: a tag list with a duplicate is refused, a comma is a legal
// character (only the filter syntax splits on it), and a port shows its tags sorted.
func TestConformanceTagReplace(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		n := w.op.Networking
		p := w.transitPort(t, w.op, "tagrep", "")
		nc := w.rawNetwork(t, w.operatorCred)
		put := func(tags []string) error {
			_, err := nc.Put(ctx, nc.ServiceURL("ports", p.ID, "tags"), map[string]any{"tags": tags}, nil, &gophercloud.RequestOpts{OkCodes: []int{200}})
			return err
		}
		if err := put([]string{"x", "x"}); !gophercloud.ResponseCodeIs(err, 400) || openstack.NeutronErrorType(err) != "" && !strings.Contains(err.Error(), "InvalidInput") {
			t.Errorf("duplicate tags: want 400 InvalidInput, got %v", err)
		}
		if err := put([]string{"x,y"}); err != nil {
			t.Errorf("a comma inside a tag: %v", err)
		}
		if err := put([]string{"c", "a", "b"}); err != nil {
			t.Fatal(err)
		}
		if got := must(n.GetPort(ctx, p.ID)).get(t).Tags; !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Errorf("stored tags %v, want sorted [a b c]", got)
		}
	})
}

func TestConformancePortRefusals(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		n := w.op.Networking
		w.transitPort(t, w.op, "first", "10.254.0.50")

		type refusal struct {
			err    error
			status int
			typ    string
		}
		create := func(c *openstack.Clients, o openstack.CreatePortOpts) error {
			return second(c.Networking.CreatePort(ctx, o))
		}
		for name, r := range map[string]refusal{
			"address in use":       {create(w.op, openstack.CreatePortOpts{NetworkID: w.transit.ID, SubnetID: w.transitSub.ID, IPAddress: "10.254.0.50"}), 409, "IpAddressAlreadyAllocated"},
			"router leg's address": {create(w.op, openstack.CreatePortOpts{NetworkID: w.transit.ID, SubnetID: w.transitSub.ID, IPAddress: "10.254.0.1"}), 409, "IpAddressAlreadyAllocated"},
			"outside the subnet":   {create(w.op, openstack.CreatePortOpts{NetworkID: w.transit.ID, SubnetID: w.transitSub.ID, IPAddress: "10.99.0.5"}), 400, "InvalidIpForSubnet"},
			"outside the network":  {create(w.op, openstack.CreatePortOpts{NetworkID: w.transit.ID, IPAddress: "10.99.0.5"}), 400, "InvalidIpForNetwork"},
			"broadcast address":    {create(w.op, openstack.CreatePortOpts{NetworkID: w.transit.ID, SubnetID: w.transitSub.ID, IPAddress: "10.254.0.255"}), 400, "InvalidIpForSubnet"},
			"unknown network":      {create(w.op, openstack.CreatePortOpts{NetworkID: deadID}), 404, "NetworkNotFound"},
			"customer, unshared":   {create(w.cust, openstack.CreatePortOpts{NetworkID: w.transit.ID}), 404, "NetworkNotFound"},
			"another's port":       {second(n.GetPort(ctx, w.otherPortID)), 404, "PortNotFound"},
			"deleting another's":   {n.DeletePort(ctx, w.otherPortID), 404, "PortNotFound"},
		} {
			if openstack.StatusCode(r.err) != r.status || openstack.NeutronErrorType(r.err) != r.typ {
				t.Errorf("%s: want %d %s, got %v (type %q)", name, r.status, r.typ, r.err, openstack.NeutronErrorType(r.err))
			}
		}
		if _, err := w.admin.Networking.GetPort(ctx, w.otherPortID); err != nil {
			t.Errorf("another project's port was deleted: %v", err)
		}
	})
}

func TestConformancePortList(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		n := w.op.Networking
		ownerA := openstack.Owner{Kind: "IPsecGateway", Namespace: "ns", Name: "a", UID: "uid-a"}
		ownerB := openstack.Owner{Kind: "IPsecGateway", Namespace: "ns", Name: "b", UID: "uid-b"}
		pa := must(n.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID, SubnetID: w.transitSub.ID, IPAddress: "10.254.0.61", Tags: ownerA.Tags()})).get(t)
		pb := must(n.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID, SubnetID: w.transitSub.ID, IPAddress: "10.254.0.62", Tags: ownerB.Tags()})).get(t)
		must(w.op.Compute.AttachPort(ctx, w.serverA, pb.ID)).get(t)
		must(openstack.WaitForPortDevice(ctx, n, pb.ID, w.serverA, openstack.WaitOpts{Interval: 50 * time.Millisecond})).get(t)

		ids := func(ps []openstack.Port) []string {
			var out []string
			for _, p := range ps {
				out = append(out, p.ID)
			}
			slices.Sort(out)
			return out
		}
		both := []string{pa.ID, pb.ID}
		slices.Sort(both)
		cases := []struct {
			name string
			opts openstack.ListPortsOpts
			want []string
		}{
			{"by owner selector", openstack.ListPortsOpts{Tags: ownerA.Selector()}, []string{pa.ID}},
			{"by managed tag", openstack.ListPortsOpts{Tags: []string{openstack.TagManaged}}, both},
			{"by tag and network", openstack.ListPortsOpts{Tags: ownerB.Selector(), NetworkID: w.transit.ID}, []string{pb.ID}},
			{"by tag, wrong network", openstack.ListPortsOpts{Tags: ownerB.Selector(), NetworkID: w.public.ID}, nil},
			{"by fixed IP", openstack.ListPortsOpts{IPAddress: "10.254.0.61"}, []string{pa.ID}},
			{"by fixed IP and subnet", openstack.ListPortsOpts{IPAddress: "10.254.0.62", SubnetID: w.transitSub.ID, NetworkID: w.transit.ID}, []string{pb.ID}},
			{"by device", openstack.ListPortsOpts{DeviceID: w.serverA}, []string{pb.ID}},
			{"by device and tag", openstack.ListPortsOpts{DeviceID: w.serverA, Tags: ownerA.Selector()}, nil},
			{"by unknown tag", openstack.ListPortsOpts{Tags: []string{"nobody"}}, nil},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				got := ids(must(n.ListPorts(ctx, tc.opts)).get(t))
				if !slices.Equal(got, tc.want) {
					t.Errorf("got %v, want %v", got, tc.want)
				}
			})
		}
		t.Run("a comma in a tag cannot split the filter", func(t *testing.T) {
			odd := must(n.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID, Tags: []string{"odd,tag"}})).get(t)
			if got := ids(must(n.ListPorts(ctx, openstack.ListPortsOpts{Tags: []string{"odd,tag"}})).get(t)); !slices.Equal(got, []string{odd.ID}) {
				t.Errorf("same tag as filter: %v", got)
			}
			if got := must(n.ListPorts(ctx, openstack.ListPortsOpts{Tags: []string{"odd"}})).get(t); len(got) != 0 {
				t.Errorf("a fragment of the tag matched: %+v", got)
			}
			if strings.Contains(strings.Join(odd.Tags, "|"), ",") {
				t.Errorf("stored tag kept its comma: %v", odd.Tags)
			}
		})
		t.Run("by network includes router leg", func(t *testing.T) {
			ps := must(n.ListPorts(ctx, openstack.ListPortsOpts{NetworkID: w.transit.ID})).get(t)
			var leg bool
			for _, p := range ps {
				leg = leg || (p.DeviceID == w.vpnRouter.ID && p.FixedIPOn("") == "10.254.0.1")
			}
			if !leg || len(ps) < 3 {
				t.Errorf("network listing %+v", ps)
			}
		})
		t.Run("by network, only the attributes asked for", func(t *testing.T) {
			// What a ClusterLink reads of every transit port before it allocates an address.
			fields := []string{"id", "fixed_ips", "device_id", "device_owner", "tags"}
			ps := must(n.ListPorts(ctx, openstack.ListPortsOpts{NetworkID: w.transit.ID, Fields: fields})).get(t)
			sorted := func(s []string) []string { return slices.Sorted(slices.Values(s)) }
			var leg, a, b bool
			for _, p := range ps {
				if p.NetworkID != "" || p.MACAddress != "" || p.Status != "" || p.ProjectID != "" || len(p.SecurityGroups) != 0 {
					t.Errorf("port %s came with attributes not asked for: %+v", p.ID, p)
				}
				switch p.ID {
				case pa.ID:
					a = p.FixedIPOn(w.transitSub.ID) == "10.254.0.61" && slices.Equal(sorted(p.Tags), sorted(pa.Tags))
				case pb.ID:
					b = p.DeviceID == w.serverA && p.FixedIPOn(w.transitSub.ID) == "10.254.0.62" && slices.Equal(sorted(p.Tags), sorted(pb.Tags))
				}
				if p.DeviceID == w.vpnRouter.ID && p.FixedIPOn("") == "10.254.0.1" {
					leg = strings.HasPrefix(p.DeviceOwner, "network:router_interface")
				}
			}
			if !a || !b || !leg {
				t.Errorf("tagged port with its address and tags %v, attached port with its device %v, router leg with its owner %v, in %+v", a, b, leg, ps)
			}
		})
		t.Run("unfiltered is refused without a request", func(t *testing.T) {
			before := w.requests.total()
			if _, err := n.ListPorts(ctx, openstack.ListPortsOpts{}); !errors.Is(err, openstack.ErrUnfiltered) {
				t.Errorf("got %v", err)
			}
			if w.requests.total() != before {
				t.Error("an unfiltered list reached the API")
			}
		})
	})
}

// Neutron's four tag filters, straight against the API: tags (all of), tags-any,
// not-tags (not all of) and not-tags-any (none of).
func TestConformanceTagFilters(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		n := w.op.Networking
		mk := func(name string, tags ...string) string {
			return must(n.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID, Name: name, Tags: tags})).get(t).ID
		}
		ab, a, b, c := mk("tf-ab", "tf-a", "tf-b"), mk("tf-a", "tf-a"), mk("tf-b", "tf-b"), mk("tf-c", "tf-c")
		nc := w.rawNetwork(t, w.operatorCred)
		list := func(q string) []string {
			var out struct {
				Ports []struct {
					ID string `json:"id"`
				} `json:"ports"`
			}
			if _, err := nc.Get(ctx, nc.ServiceURL("ports")+"?network_id="+w.transit.ID+"&"+q, &out, nil); err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, p := range out.Ports {
				if slices.Contains([]string{ab, a, b, c}, p.ID) {
					ids = append(ids, p.ID)
				}
			}
			slices.Sort(ids)
			return ids
		}
		sorted := func(v ...string) []string { slices.Sort(v); return v }
		for q, want := range map[string][]string{
			"tags=tf-a":                   sorted(ab, a),
			"tags=tf-a,tf-b":              sorted(ab),
			"tags=tf-a&tags=tf-b":         sorted(ab),
			"tags-any=tf-a,tf-c":          sorted(ab, a, c),
			"not-tags=tf-a,tf-b":          sorted(a, b, c),
			"not-tags-any=tf-a,tf-b":      sorted(c),
			"tags=tf-b&not-tags-any=tf-a": sorted(b),
		} {
			if got := list(q); !slices.Equal(got, want) {
				t.Errorf("%s: got %v, want %v", q, got, want)
			}
		}
	})
}

// Pagination: with limit, Neutron pages by ID and links the next page; the seam's
// lists follow every link.
func TestConformancePagination(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		n := w.op.Networking
		tag := "page-test"
		var want []string
		for i := range 5 {
			want = append(want, must(n.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID, Name: fmt.Sprint("pg", i), Tags: []string{tag}})).get(t).ID)
		}
		slices.Sort(want)
		nc := w.rawNetwork(t, w.operatorCred)
		var got []string
		url := nc.ServiceURL("ports") + "?tags=" + tag + "&limit=2"
		pages := 0
		for url != "" && pages < 10 {
			var out struct {
				Ports []struct {
					ID string `json:"id"`
				} `json:"ports"`
				Links []struct {
					Rel  string `json:"rel"`
					Href string `json:"href"`
				} `json:"ports_links"`
			}
			if _, err := nc.Get(ctx, url, &out, nil); err != nil {
				t.Fatal(err)
			}
			pages++
			if len(out.Ports) > 2 {
				t.Errorf("page %d has %d ports, limit 2", pages, len(out.Ports))
			}
			for _, p := range out.Ports {
				got = append(got, p.ID)
			}
			url = ""
			for _, l := range out.Links {
				if l.Rel == "next" {
					url = l.Href
				}
			}
		}
		if !slices.IsSorted(got) || !slices.Equal(got, want) {
			t.Errorf("paged by ID: got %v, want %v", got, want)
		}
		if pages != 3 {
			t.Errorf("%d pages of 5 ports at limit 2, want 3", pages)
		}
		if all := must(n.ListPorts(ctx, openstack.ListPortsOpts{Tags: []string{tag}})).get(t); len(all) != 5 {
			t.Errorf("the seam listed %d of 5", len(all))
		}
	})
}

func TestConformancePortUpdates(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		n := w.op.Networking
		p := w.transitPort(t, w.op, "upd", "")

		sg1 := must(n.CreateSecurityGroup(ctx, openstack.CreateSecurityGroupOpts{Name: "one"})).get(t)
		sg2 := must(n.CreateSecurityGroup(ctx, openstack.CreateSecurityGroupOpts{Name: "two"})).get(t)
		got := must(n.UpdatePortSecurityGroups(ctx, p.ID, []string{sg1.ID, sg2.ID})).get(t)
		if !sameSet(got.SecurityGroups, []string{sg1.ID, sg2.ID}) {
			t.Errorf("security groups %v", got.SecurityGroups)
		}
		if got := must(n.UpdatePortSecurityGroups(ctx, p.ID, []string{})).get(t); len(got.SecurityGroups) != 0 {
			t.Errorf("no security group: %v", got.SecurityGroups)
		}
		err := second(n.UpdatePortSecurityGroups(ctx, p.ID, []string{deadID}))
		if !openstack.IsNotFound(err) || openstack.NeutronErrorType(err) != "SecurityGroupNotFound" {
			t.Errorf("unknown security group: want 404 SecurityGroupNotFound, got %v", err)
		}

		adopted := openstack.Owner{Kind: "ClusterLink", Name: "svc01-link", UID: "uid-cl"}.Tags()
		tags := must(n.ReplacePortTags(ctx, p.ID, adopted)).get(t)
		if !sameSet(tags, adopted) {
			t.Errorf("replaced tags %v", tags)
		}
		if again := must(n.GetPort(ctx, p.ID)).get(t); !sameSet(again.Tags, adopted) {
			t.Errorf("tags after replace %v", again.Tags)
		}
		if got := must(n.ReplacePortTags(ctx, p.ID, nil)).get(t); len(got) != 0 {
			t.Errorf("clearing tags left %v", got)
		}
		if again := must(n.GetPort(ctx, p.ID)).get(t); len(again.Tags) != 0 {
			t.Errorf("tags after clear %v", again.Tags)
		}
		// Retagging a port of another project the caller cannot see: Zed answers 404;
		// 2025.1's tag API looks the port up whoever owns it, then refuses by policy.
		_, err = n.ReplacePortTags(ctx, w.otherPortID, adopted)
		if policyOf(w.target) == secureRBACKind {
			if !openstack.IsForbidden(err) {
				t.Errorf("retagging another project's port: want 403, got %v", err)
			}
		} else if !openstack.IsNotFound(err) {
			t.Errorf("retagging another project's port: want 404, got %v", err)
		}
		if _, err := n.UpdatePortAllowedAddressPairs(ctx, deadID, nil); !openstack.IsNotFound(err) {
			t.Errorf("update unknown port: %v", err)
		}
	})
}

// Allowed-address pairs: Neutron fills in the port's MAC, keeps a CIDR as given,
// answers the pairs ordered by MAC and address, refuses duplicates and malformed
// addresses, and clears with an empty list.
func TestConformanceAllowedAddressPairs(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		n := w.op.Networking
		p := w.transitPort(t, w.op, "aap", "")
		pairs := []openstack.AddressPair{{IPAddress: "100.64.3.0/24"}, {IPAddress: "100.64.4.7/24"}, {IPAddress: "10.0.0.1", MACAddress: "fa:16:3e:00:00:01"}}
		got := must(n.UpdatePortAllowedAddressPairs(ctx, p.ID, pairs)).get(t)
		want := []openstack.AddressPair{{IPAddress: "100.64.3.0/24", MACAddress: p.MACAddress}, {IPAddress: "100.64.4.7/24", MACAddress: p.MACAddress},
			{IPAddress: "10.0.0.1", MACAddress: "fa:16:3e:00:00:01"}}
		slices.SortFunc(want, func(a, b openstack.AddressPair) int {
			return strings.Compare(a.MACAddress+" "+a.IPAddress, b.MACAddress+" "+b.IPAddress)
		})
		if !slices.Equal(got.AllowedAddressPairs, want) {
			t.Errorf("pairs %+v, want %+v", got.AllowedAddressPairs, want)
		}
		for name, tc := range map[string]struct {
			pairs []openstack.AddressPair
			typ   string
		}{
			"duplicate": {[]openstack.AddressPair{{IPAddress: "100.64.3.0/24"}, {IPAddress: "100.64.3.0/24"}}, "DuplicateAddressPairInRequest"},
			"malformed": {[]openstack.AddressPair{{IPAddress: "nope"}}, "HTTPBadRequest"},
		} {
			err := second(n.UpdatePortAllowedAddressPairs(ctx, p.ID, tc.pairs))
			if !openstack.IsBadRequest(err) || openstack.NeutronErrorType(err) != tc.typ {
				t.Errorf("%s: want 400 %s, got %v", name, tc.typ, err)
			}
		}
		if again := must(n.GetPort(ctx, p.ID)).get(t); !slices.Equal(again.AllowedAddressPairs, want) {
			t.Errorf("a refused update changed the pairs: %+v", again.AllowedAddressPairs)
		}
		if got := must(n.UpdatePortAllowedAddressPairs(ctx, p.ID, nil)).get(t); len(got.AllowedAddressPairs) != 0 {
			t.Errorf("clearing pairs left %+v", got.AllowedAddressPairs)
		}
	})
}

func TestConformancePortDelete(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		n := w.op.Networking
		p := w.transitPort(t, w.op, "del", "10.254.0.70")
		if err := n.DeletePort(ctx, p.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := n.GetPort(ctx, p.ID); !openstack.IsNotFound(err) {
			t.Errorf("deleted port still readable: %v", err)
		}
		if err := n.DeletePort(ctx, p.ID); !openstack.IsNotFound(err) {
			t.Errorf("second delete: want 404, got %v", err)
		}
		// The address is free again.
		w.transitPort(t, w.op, "reuse", "10.254.0.70")
	})
}

// Crash safety where tags follow the create: an object left with the marker
// description is found by the owner's tag lookup, tagged and returned. Not applicable
// where a port's tags travel in its create (tag-ports-during-bulk-creation).
func TestConformanceAdoptHalfTaggedObjects(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		owner := openstack.Owner{Kind: "IPsecGateway", Namespace: "ns", Name: "crash", UID: "uid-crash"}
		// What a crash right after the create leaves: the marker, no tags.
		withMarker := must(w.op.Networking.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID, Name: "crashed",
			Description: openstack.PendingMarker(owner.Tags())})).get(t)
		sg := must(w.op.Networking.CreateSecurityGroup(ctx, openstack.CreateSecurityGroupOpts{Name: "crashed",
			Description: openstack.PendingMarker(owner.Tags())})).get(t)
		ps := must(w.op.Networking.ListPorts(ctx, openstack.ListPortsOpts{Tags: owner.Selector(), NetworkID: w.transit.ID})).get(t)
		if len(ps) != 1 || ps[0].ID != withMarker.ID || !owner.OwnedBy(ps[0].Tags) || ps[0].Description != "" {
			t.Fatalf("adopted ports %+v", ps)
		}
		again := must(w.op.Networking.GetPort(ctx, withMarker.ID)).get(t)
		if !owner.OwnedBy(again.Tags) || again.Description != "" {
			t.Errorf("stored after adoption %+v", again)
		}
		gs := must(w.op.Networking.ListSecurityGroups(ctx, owner.Selector())).get(t)
		if len(gs) != 1 || gs[0].ID != sg.ID || !owner.OwnedBy(gs[0].Tags) {
			t.Errorf("adopted security groups %+v", gs)
		}
		// Found by tag now: a second lookup writes nothing.
		w.requests.reset()
		must(w.op.Networking.ListPorts(ctx, openstack.ListPortsOpts{Tags: owner.Selector()})).get(t)
		if w.requests.writes() != 0 {
			t.Errorf("a lookup of tagged objects wrote: %s", w.requests)
		}
	}, onlyWhen(func(f openstack.Features) bool { return !f.PortTagCreation }, "port tags travel in the port create"))
}

// ---------------------------------------------------------------- security groups

func TestConformanceSecurityGroups(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		n := w.op.Networking
		owner := openstack.Owner{Kind: "IPsecGateway", Namespace: "ns", Name: "gw", UID: "uid-sg"}
		sg := must(n.CreateSecurityGroup(ctx, openstack.CreateSecurityGroupOpts{
			Name: openstack.ResourceName("sg", "ns", "gw"), Description: "ike", Tags: owner.Tags()})).get(t)
		if sg.Name != "bnerd-vpn-sg-ns-gw" || sg.ProjectID != w.projOperator || !openstack.HasTags(sg.Tags, owner.Tags()...) || sg.Description != "ike" {
			t.Errorf("created %+v", sg)
		}
		// Like Neutron, a new group allows all egress.
		if len(sg.Rules) != 2 || sg.Rules[0].Direction != "egress" || sg.Rules[1].Direction != "egress" {
			t.Errorf("default rules %+v", sg.Rules)
		}
		must(n.CreateSecurityGroup(ctx, openstack.CreateSecurityGroupOpts{Name: "unrelated", Tags: []string{"x"}})).get(t)

		listed := must(n.ListSecurityGroups(ctx, owner.Selector())).get(t)
		if len(listed) != 1 || listed[0].ID != sg.ID {
			t.Errorf("list by selector %+v", listed)
		}
		if _, err := n.ListSecurityGroups(ctx, nil); !errors.Is(err, openstack.ErrUnfiltered) {
			t.Errorf("unfiltered SG list: %v", err)
		}
		err := second(n.CreateSecurityGroup(ctx, openstack.CreateSecurityGroupOpts{Name: "default"}))
		if !openstack.IsConflict(err) || openstack.NeutronErrorType(err) != "SecurityGroupDefaultAlreadyExists" {
			t.Errorf("a second default group: want 409 SecurityGroupDefaultAlreadyExists, got %v", err)
		}

		// In use by a port: Neutron refuses the delete.
		p := must(n.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID, SecurityGroups: []string{sg.ID}})).get(t)
		err = n.DeleteSecurityGroup(ctx, sg.ID)
		if !openstack.IsConflict(err) || openstack.NeutronErrorType(err) != "SecurityGroupInUse" {
			t.Errorf("delete SG in use: want 409 SecurityGroupInUse, got %v", err)
		}
		must(n.UpdatePortSecurityGroups(ctx, p.ID, []string{})).get(t)
		if err := n.DeleteSecurityGroup(ctx, sg.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := n.GetSecurityGroup(ctx, sg.ID); !openstack.IsNotFound(err) || openstack.NeutronErrorType(err) != "SecurityGroupNotFound" {
			t.Errorf("deleted SG readable: %v", err)
		}
		if err := n.DeleteSecurityGroup(ctx, sg.ID); !openstack.IsNotFound(err) {
			t.Errorf("second SG delete: %v", err)
		}
	})
}

// Rules: duplicates (also spelled differently: a protocol number, a host address) are
// 409 SecurityGroupRuleExists; contradictions are 400 with Neutron's types; a prefix
// is stored as given; a bulk create stores all its rules or none.
func TestConformanceSecurityGroupRules(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		n := w.op.Networking
		sg := must(n.CreateSecurityGroup(ctx, openstack.CreateSecurityGroupOpts{Name: "rules"})).get(t)
		rule := func(proto string, lo, hi int, prefix string) openstack.CreateSecurityGroupRuleOpts {
			return openstack.CreateSecurityGroupRuleOpts{SecurityGroupID: sg.ID, Direction: openstack.DirectionIngress,
				EtherType: openstack.EtherTypeIPv4, Protocol: proto, PortRangeMin: lo, PortRangeMax: hi, RemoteIPPrefix: prefix}
		}
		ike := rule("udp", 500, 500, "198.51.100.7/32")
		created := []*openstack.SecurityGroupRule{must(n.CreateSecurityGroupRule(ctx, ike)).get(t)}
		r := created[0]
		if r.SecurityGroupID != sg.ID || r.Protocol != "udp" || r.PortRangeMin != 500 || r.PortRangeMax != 500 ||
			r.RemoteIPPrefix != "198.51.100.7/32" || r.Direction != "ingress" {
			t.Errorf("rule %+v", r)
		}
		unmasked := must(n.CreateSecurityGroupRule(ctx, rule("tcp", 22, 22, "10.254.0.5/24"))).get(t)
		if unmasked.RemoteIPPrefix != "10.254.0.5/24" {
			t.Errorf("prefix stored as %q, want it as given", unmasked.RemoteIPPrefix)
		}
		created = append(created, unmasked, must(n.CreateSecurityGroupRule(ctx, rule("", 0, 0, "10.254.0.0/24"))).get(t))

		for name, ro := range map[string]openstack.CreateSecurityGroupRuleOpts{
			"same rule":              ike,
			"protocol by number":     rule("17", 500, 500, "198.51.100.7/32"),
			"host address as prefix": rule("udp", 500, 500, "198.51.100.7"),
			"default egress":         {SecurityGroupID: sg.ID, Direction: "egress", EtherType: "IPv4"},
		} {
			err := second(n.CreateSecurityGroupRule(ctx, ro))
			if !openstack.IsConflict(err) || openstack.NeutronErrorType(err) != "SecurityGroupRuleExists" {
				t.Errorf("%s: want 409 SecurityGroupRuleExists, got %v", name, err)
			}
		}
		for name, tc := range map[string]struct {
			opts openstack.CreateSecurityGroupRuleOpts
			typ  string
		}{
			"IPv6 rule, IPv4 prefix": {openstack.CreateSecurityGroupRuleOpts{SecurityGroupID: sg.ID, Direction: "ingress", EtherType: "IPv6", RemoteIPPrefix: "10.0.0.0/8"}, "SecurityGroupRuleParameterConflict"},
			"ports without protocol": {rule("", 22, 22, ""), "SecurityGroupProtocolRequiredWithPorts"},
			"inverted port range":    {rule("tcp", 30, 22, ""), "SecurityGroupInvalidPortRange"},
		} {
			err := second(n.CreateSecurityGroupRule(ctx, tc.opts))
			if !openstack.IsBadRequest(err) || openstack.NeutronErrorType(err) != tc.typ {
				t.Errorf("%s: want 400 %s, got %v", name, tc.typ, err)
			}
		}

		// Bulk create, one POST for several rules of the group: all stored, each returned
		// as stored. A bulk request holding one rule the group already has is refused as
		// a whole, 409 SecurityGroupRuleExists, and stores none of the others (the
		// operator then creates them one by one).
		bulk := must(n.CreateSecurityGroupRules(ctx, []openstack.CreateSecurityGroupRuleOpts{
			rule("tcp", 443, 443, "10.254.1.0/24"), rule("udp", 53, 53, "10.254.1.0/24")})).get(t)
		if len(bulk) != 2 || bulk[0].SecurityGroupID != sg.ID || bulk[0].ID == "" || bulk[0].ID == bulk[1].ID ||
			bulk[0].Protocol != "tcp" || bulk[0].PortRangeMin != 443 || bulk[1].Protocol != "udp" || bulk[1].RemoteIPPrefix != "10.254.1.0/24" {
			t.Errorf("bulk create returned %+v", bulk)
		}
		for i := range bulk {
			created = append(created, &bulk[i])
		}
		held := len(must(n.GetSecurityGroup(ctx, sg.ID)).get(t).Rules)
		err := second(n.CreateSecurityGroupRules(ctx, []openstack.CreateSecurityGroupRuleOpts{rule("tcp", 80, 80, "10.254.2.0/24"), ike}))
		if !openstack.IsRuleExists(err) {
			t.Errorf("bulk create with a held rule: want 409 SecurityGroupRuleExists, got %v", err)
		}
		if left := len(must(n.GetSecurityGroup(ctx, sg.ID)).get(t).Rules); left != held {
			t.Errorf("a refused bulk create left %d rules in the group, want %d (none of it stored)", left, held)
		}

		got := must(n.GetSecurityGroup(ctx, sg.ID)).get(t)
		for _, want := range created {
			if !slices.ContainsFunc(got.Rules, func(r openstack.SecurityGroupRule) bool { return r.ID == want.ID }) {
				t.Errorf("rule %s missing from group %+v", want.ID, got.Rules)
			}
		}
		if err := n.DeleteSecurityGroupRule(ctx, created[0].ID); err != nil {
			t.Fatal(err)
		}
		if err := n.DeleteSecurityGroupRule(ctx, created[0].ID); !openstack.IsNotFound(err) || openstack.NeutronErrorType(err) != "SecurityGroupRuleNotFound" {
			t.Errorf("second rule delete: %v", err)
		}
		got = must(n.GetSecurityGroup(ctx, sg.ID)).get(t)
		if slices.ContainsFunc(got.Rules, func(r openstack.SecurityGroupRule) bool { return r.ID == created[0].ID }) {
			t.Error("deleted rule still in group")
		}
		if _, err := w.cust.Networking.GetSecurityGroup(ctx, sg.ID); !openstack.IsNotFound(err) {
			t.Errorf("customer reading operator SG: %v", err)
		}
	})
}

// ---------------------------------------------------------------- floating IPs

func TestConformanceFloatingIPs(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		n := w.op.Networking
		owner := openstack.Owner{Kind: "IPsecGateway", Namespace: "ns", Name: "gw", UID: "uid-fip"}

		fip := must(n.CreateFloatingIP(ctx, openstack.CreateFloatingIPOpts{FloatingNetworkID: w.public.ID, Tags: owner.Tags(), Description: "gw"})).get(t)
		addr, err := netip.ParseAddr(fip.FloatingIPAddress)
		if err != nil || !netip.MustParsePrefix("203.0.113.0/24").Contains(addr) || fip.FloatingNetworkID != w.public.ID ||
			fip.PortID != "" || !openstack.HasTags(fip.Tags, owner.Tags()...) || fip.ProjectID != w.projOperator {
			t.Errorf("created %+v", fip)
		}
		if got := must(n.GetFloatingIP(ctx, fip.ID)).get(t); got.FloatingIPAddress != fip.FloatingIPAddress || !openstack.HasTags(got.Tags, owner.Tags()...) {
			t.Errorf("get %+v", got)
		}
		if got := must(n.FindFloatingIPByAddress(ctx, fip.FloatingIPAddress)).get(t); got.ID != fip.ID {
			t.Errorf("find by address %+v", got)
		}
		if _, err := n.FindFloatingIPByAddress(ctx, "198.51.100.254"); !openstack.IsNotFound(err) {
			t.Errorf("find unknown address: %v", err)
		}
		if got := must(n.ListFloatingIPs(ctx, openstack.ListFloatingIPsOpts{Tags: owner.Selector()})).get(t); len(got) != 1 || got[0].ID != fip.ID {
			t.Errorf("list by tags %+v", got)
		}
		if _, err := n.ListFloatingIPs(ctx, openstack.ListFloatingIPsOpts{}); !errors.Is(err, openstack.ErrUnfiltered) {
			t.Errorf("unfiltered FIP list: %v", err)
		}
		err = second(n.CreateFloatingIP(ctx, openstack.CreateFloatingIPOpts{FloatingNetworkID: w.transit.ID}))
		if !openstack.IsBadRequest(err) || openstack.NeutronErrorType(err) != "BadRequest" {
			t.Errorf("FIP on an internal network: want 400 BadRequest, got %v", err)
		}

		port := w.transitPort(t, w.op, "fip-port", "10.254.0.80")
		assoc := must(n.AssociateFloatingIP(ctx, fip.ID, port.ID)).get(t)
		if assoc.PortID != port.ID || assoc.FixedIPAddress != "10.254.0.80" {
			t.Errorf("associated %+v", assoc)
		}
		if got := must(n.ListFloatingIPs(ctx, openstack.ListFloatingIPsOpts{PortID: port.ID})).get(t); len(got) != 1 || got[0].ID != fip.ID {
			t.Errorf("list by port %+v", got)
		}
		second := must(n.CreateFloatingIP(ctx, openstack.CreateFloatingIPOpts{FloatingNetworkID: w.public.ID})).get(t)
		err = errOf(n.AssociateFloatingIP(ctx, second.ID, port.ID))
		if !openstack.IsConflict(err) || openstack.NeutronErrorType(err) != "FloatingIPPortAlreadyAssociated" {
			t.Errorf("second FIP on one fixed IP: want 409 FloatingIPPortAlreadyAssociated, got %v", err)
		}
		// The service network's subnet has no router with a gateway on public.
		svcNet := must(n.ResolveNetwork(ctx, "svc01-net")).get(t)
		unreachable := must(n.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: svcNet.ID, Name: "unreachable"})).get(t)
		err = errOf(n.AssociateFloatingIP(ctx, second.ID, unreachable.ID))
		if !openstack.IsNotFound(err) || openstack.NeutronErrorType(err) != "ExternalGatewayForFloatingIPNotFound" {
			t.Errorf("FIP to an unreachable subnet: want 404 ExternalGatewayForFloatingIPNotFound, got %v", err)
		}
		dis := must(n.DisassociateFloatingIP(ctx, fip.ID)).get(t)
		if dis.PortID != "" || dis.FixedIPAddress != "" {
			t.Errorf("disassociated %+v", dis)
		}
		// Deleting the port takes the association with it.
		must(n.AssociateFloatingIP(ctx, fip.ID, port.ID)).get(t)
		if err := n.DeletePort(ctx, port.ID); err != nil {
			t.Fatal(err)
		}
		if got := must(n.GetFloatingIP(ctx, fip.ID)).get(t); got.PortID != "" || got.FixedIPAddress != "" {
			t.Errorf("FIP of a deleted port %+v", got)
		}
		if err := n.DeleteFloatingIP(ctx, fip.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := n.GetFloatingIP(ctx, fip.ID); !openstack.IsNotFound(err) || openstack.NeutronErrorType(err) != "FloatingIPNotFound" {
			t.Errorf("deleted FIP readable: %v", err)
		}
		if err := n.DeleteFloatingIP(ctx, fip.ID); !openstack.IsNotFound(err) {
			t.Errorf("second FIP delete: %v", err)
		}
		if _, err := w.cust.Networking.GetFloatingIP(ctx, second.ID); !openstack.IsNotFound(err) {
			t.Errorf("customer reading operator FIP: %v", err)
		}
	})
}

func errOf[T any](_ T, err error) error { return err }

// Choosing the address: Neutron's default policy lets only an admin pick a floating
// IP's address; a member gets one allocated (and the operator adopts a pinned address
// an admin allocated, never claims one itself).
func TestConformanceFloatingIPAddressChoice(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		// A free address: allocate one, note it, give it back.
		probe := must(w.admin.Networking.CreateFloatingIP(ctx, openstack.CreateFloatingIPOpts{FloatingNetworkID: w.public.ID, Description: adminFIPDescription})).get(t)
		addr := probe.FloatingIPAddress
		if err := w.admin.Networking.DeleteFloatingIP(ctx, probe.ID); err != nil {
			t.Fatal(err)
		}
		err := second(w.op.Networking.CreateFloatingIP(ctx, openstack.CreateFloatingIPOpts{FloatingNetworkID: w.public.ID, FloatingIPAddress: addr}))
		if !openstack.IsForbidden(err) || openstack.NeutronErrorType(err) != "PolicyNotAuthorized" {
			t.Errorf("a member picking the address: want 403 PolicyNotAuthorized, got %v", err)
		}
		pinned := must(w.admin.Networking.CreateFloatingIP(ctx, openstack.CreateFloatingIPOpts{FloatingNetworkID: w.public.ID,
			FloatingIPAddress: addr, Description: adminFIPDescription})).get(t)
		t.Cleanup(func() { _ = w.admin.Networking.DeleteFloatingIP(context.Background(), pinned.ID) })
		if pinned.FloatingIPAddress != addr {
			t.Errorf("pinned %+v", pinned)
		}
		err = second(w.admin.Networking.CreateFloatingIP(ctx, openstack.CreateFloatingIPOpts{FloatingNetworkID: w.public.ID,
			FloatingIPAddress: addr, Description: adminFIPDescription}))
		if !openstack.IsConflict(err) {
			t.Errorf("claiming a taken address: want 409, got %v (type %q)", err, openstack.NeutronErrorType(err))
		}
		// The operator's project cannot see the admin's address.
		if _, err := w.op.Networking.FindFloatingIPByAddress(ctx, addr); !openstack.IsNotFound(err) {
			t.Errorf("another project's FIP by address: %v", err)
		}
	})
}

// ---------------------------------------------------------------- routers

// createRouter makes a router behind the seam's back (the seam never creates routers),
// as a human with the CLI would.
func (w *world) createRouter(t *testing.T, name string) string {
	t.Helper()
	nc := w.rawNetwork(t, w.operatorCred)
	r, err := routers.Create(ctxT(t), nc, routers.CreateOpts{Name: name}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	return r.ID
}

func TestConformanceRouterLookup(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		n := w.op.Networking
		w.createRouter(t, "twin")
		twinRouter2 := w.createRouter(t, "twin")
		if w.vpnRouter.ProjectID != w.projOperator || w.vpnRouter.Name != "shoot--services--vpn01" {
			t.Errorf("resolved %+v", w.vpnRouter)
		}
		if got := must(n.GetRouter(ctx, w.vpnRouter.ID)).get(t); got.Name != "shoot--services--vpn01" {
			t.Errorf("get %+v", got)
		}
		if got := must(n.ResolveRouter(ctx, w.svcRouter.ID)).get(t); got.ID != w.svcRouter.ID {
			t.Errorf("resolve by ID %+v", got)
		}
		if got := must(n.ResolveRouter(ctx, twinRouter2)).get(t); got.ID != twinRouter2 {
			t.Errorf("resolve a twin by ID %+v", got)
		}
		if _, err := n.ResolveRouter(ctx, "twin"); !errors.Is(err, openstack.ErrAmbiguous) {
			t.Errorf("ambiguous name: %v", err)
		}
		if _, err := n.ResolveRouter(ctx, "no-such-router"); !openstack.IsNotFound(err) {
			t.Errorf("unknown router: %v", err)
		}
		if _, err := w.cust.Networking.ResolveRouter(ctx, "shoot--services--vpn01"); !openstack.IsNotFound(err) {
			t.Errorf("customer resolving operator router: %v", err)
		}
		err := second(w.cust.Networking.GetRouter(ctx, w.vpnRouter.ID))
		if !openstack.IsNotFound(err) || openstack.NeutronErrorType(err) != "RouterNotFound" {
			t.Errorf("customer getting operator router: %v", err)
		}

		all := must(n.ListRouters(ctx, w.projOperator)).get(t)
		var names []string
		for _, r := range all {
			names = append(names, r.Name)
			if r.ProjectID != w.projOperator {
				t.Errorf("foreign router listed: %+v", r)
			}
		}
		slices.Sort(names)
		if want := []string{"shoot--services--svc01", "shoot--services--vpn01", "twin", "twin"}; !slices.Equal(names, want) {
			t.Errorf("project routers %v, want %v", names, want)
		}
		if _, err := n.ListRouters(ctx, ""); !errors.Is(err, openstack.ErrUnfiltered) {
			t.Errorf("unfiltered router list: %v", err)
		}
	})
}

func TestConformanceRouterInterfaces(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		n := w.op.Networking
		leg := w.transitPort(t, w.op, "svc01-leg", "10.254.0.3")
		if err := n.AddRouterInterface(ctx, w.svcRouter.ID, leg.ID); err != nil {
			t.Fatal(err)
		}
		got := must(n.GetPort(ctx, leg.ID)).get(t)
		if got.DeviceID != w.svcRouter.ID || got.DeviceOwner != openstacksim.OwnerRouterInterface {
			t.Errorf("leg after attach %+v", got)
		}
		// A router port goes only through the router API.
		err := n.DeletePort(ctx, leg.ID)
		if !openstack.IsConflict(err) || openstack.NeutronErrorType(err) != "ServicePortInUse" {
			t.Errorf("deleting a router interface port: want 409 ServicePortInUse, got %v", err)
		}

		second := w.transitPort(t, w.op, "svc01-leg-2", "10.254.0.4")
		err = n.AddRouterInterface(ctx, w.svcRouter.ID, second.ID)
		if !openstack.IsBadRequest(err) || !strings.Contains(err.Error(), w.transitSub.ID) {
			t.Errorf("second leg on one subnet: want 400 naming the subnet, got %v", err)
		}
		if err := n.AddRouterInterface(ctx, w.vpnRouter.ID, leg.ID); !openstack.IsConflict(err) {
			t.Errorf("port already on another router: want 409, got %v (type %q)", err, openstack.NeutronErrorType(err))
		}
		if err := n.AddRouterInterface(ctx, w.svcRouter.ID, deadID); !openstack.IsNotFound(err) {
			t.Errorf("unknown port: %v", err)
		}

		if err := n.RemoveRouterInterface(ctx, w.svcRouter.ID, leg.ID); err != nil {
			t.Fatal(err)
		}
		if err := n.RemoveRouterInterface(ctx, w.svcRouter.ID, second.ID); !openstack.IsNotFound(err) {
			t.Errorf("removing a port that is not an interface: want 404, got %v (type %q)", err, openstack.NeutronErrorType(err))
		}
		// Removing the interface deletes its port.
		if _, err := n.GetPort(ctx, leg.ID); !openstack.IsNotFound(err) {
			t.Errorf("leg after detach: %v", err)
		}
		// With the subnet free again the second leg attaches.
		if err := n.AddRouterInterface(ctx, w.svcRouter.ID, second.ID); err != nil {
			t.Errorf("attach after detach: %v", err)
		}
	})
}

func TestConformanceCrossTenantLink(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		// The customer cannot see the transit network until the operator shares it.
		if _, err := w.cust.Networking.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID}); !openstack.IsNotFound(err) {
			t.Fatalf("before share: %v", err)
		}
		pol := must(w.op.Networking.ShareNetwork(ctx, w.transit.ID, w.projCustomer)).get(t)
		if pol.ObjectID != w.transit.ID || pol.TargetProject != w.projCustomer || pol.Action != openstack.RBACActionAccessAsShared ||
			pol.ObjectType != openstack.RBACObjectNetwork || pol.ProjectID != w.projOperator {
			t.Errorf("policy %+v", pol)
		}
		visible := must(w.cust.Networking.GetNetwork(ctx, w.transit.ID)).get(t)
		if visible.ID != w.transit.ID || visible.ProjectID != w.projOperator {
			t.Errorf("customer view %+v", visible)
		}
		if subs := must(w.cust.Networking.ListSubnets(ctx, w.transit.ID)).get(t); len(subs) != 1 || subs[0].ID != w.transitSub.ID {
			t.Errorf("customer's view of the subnets %+v", subs)
		}
		owner := openstack.Owner{Kind: "ClusterLink", Name: "diehl01", UID: "uid-diehl"}
		// On a network it does not own, the customer may not pick an address.
		err := second(w.cust.Networking.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID,
			SubnetID: w.transitSub.ID, IPAddress: "10.254.0.9", Tags: owner.Tags()}))
		if !openstack.IsForbidden(err) || openstack.NeutronErrorType(err) != "PolicyNotAuthorized" {
			t.Errorf("customer picking a transit address: want 403 PolicyNotAuthorized, got %v", err)
		}
		leg := must(w.cust.Networking.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID,
			SubnetID: w.transitSub.ID, Tags: owner.Tags(), Name: openstack.ResourceName("leg", "", "diehl01")})).get(t)
		legIP := leg.FixedIPOn(w.transitSub.ID)
		if leg.ProjectID != w.projCustomer || legIP == "" || !owner.OwnedBy(leg.Tags) {
			t.Errorf("leg %+v", leg)
		}
		// The network's owner sees the customer's port on its network.
		if got := must(w.op.Networking.GetPort(ctx, leg.ID)).get(t); got.ProjectID != w.projCustomer {
			t.Errorf("operator's view of the leg %+v", got)
		}
		if err := w.cust.Networking.AddRouterInterface(ctx, w.customerRtr.ID, leg.ID); err != nil {
			t.Fatalf("customer router leg: %v", err)
		}
		// A port of the operator's project cannot join the customer's router.
		opLeg := w.transitPort(t, w.op, "op-leg", "10.254.0.10")
		if err := w.cust.Networking.AddRouterInterface(ctx, w.customerRtr.ID, opLeg.ID); !openstack.IsNotFound(err) {
			t.Errorf("foreign port on customer router: want 404, got %v (type %q)", err, openstack.NeutronErrorType(err))
		}
		// The operator's route to the customer's cluster, via the leg.
		rt := openstack.Route{Destination: "10.234.0.0/16", NextHop: legIP}
		if r := must(w.op.Networking.AddRouterRoutes(ctx, w.vpnRouter.ID, []openstack.Route{rt})).get(t); !r.HasRoute(rt) {
			t.Errorf("route missing: %+v", r.Routes)
		}
		// The customer's reverse route towards a gateway's service CIDR.
		rev := openstack.Route{Destination: "100.64.7.0/24", NextHop: "10.254.0.40"}
		if r := must(w.cust.Networking.AddRouterRoutes(ctx, w.customerRtr.ID, []openstack.Route{rev})).get(t); !r.HasRoute(rev) {
			t.Errorf("reverse route missing: %+v", r.Routes)
		}
		// The customer finds its own leg by tag.
		if got := must(w.cust.Networking.ListPorts(ctx, openstack.ListPortsOpts{Tags: owner.Selector()})).get(t); len(got) != 1 {
			t.Errorf("customer list by tag %+v", got)
		}
		// The operator cannot unshare while the customer's leg uses the network.
		err = w.op.Networking.DeleteRBACPolicy(ctx, pol.ID)
		if !openstack.IsConflict(err) || openstack.NeutronErrorType(err) != "RbacPolicyInUse" {
			t.Errorf("unsharing in use: want 409 RbacPolicyInUse, got %v", err)
		}
		// Nor delete the customer's router port.
		err = w.op.Networking.DeletePort(ctx, leg.ID)
		if !openstack.IsConflict(err) || openstack.NeutronErrorType(err) != "ServicePortInUse" {
			t.Errorf("operator deleting the customer's router port: want 409 ServicePortInUse, got %v", err)
		}

		// Unbinding: Neutron refuses to remove the leg while a route still uses it, so
		// reverse routes go first; removing the interface deletes the port.
		err = w.cust.Networking.RemoveRouterInterface(ctx, w.customerRtr.ID, leg.ID)
		if !openstack.IsConflict(err) || openstack.NeutronErrorType(err) != "RouterInterfaceInUseByRoute" {
			t.Errorf("leg removal with a route via it: want 409 RouterInterfaceInUseByRoute, got %v", err)
		}
		must(w.cust.Networking.RemoveRouterRoutes(ctx, w.customerRtr.ID, []openstack.Route{rev})).get(t)
		if err := w.cust.Networking.RemoveRouterInterface(ctx, w.customerRtr.ID, leg.ID); err != nil {
			t.Fatalf("leg removal: %v", err)
		}
		if _, err := w.cust.Networking.GetPort(ctx, leg.ID); !openstack.IsNotFound(err) {
			t.Errorf("leg port after interface removal: %v", err)
		}
		if err := w.cust.Networking.DeletePort(ctx, leg.ID); !openstack.IsNotFound(err) {
			t.Errorf("deleting the already removed leg: want 404 (treat as done), got %v", err)
		}
		// Neutron does not check routes when unsharing: the operator removes its route
		// itself (unbind order), the policy can go now.
		if err := w.op.Networking.DeleteRBACPolicy(ctx, pol.ID); err != nil {
			t.Errorf("unshare after the leg is gone: %v", err)
		}
		must(w.op.Networking.RemoveRouterRoutes(ctx, w.vpnRouter.ID, []openstack.Route{rt})).get(t)
	})
}

// A plain (unattached) port of the customer on the operator's network: the network's
// owner may delete it.
func TestConformanceNetworkOwnerDeletesCustomerPort(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		pol := must(w.op.Networking.ShareNetwork(ctx, w.transit.ID, w.projCustomer)).get(t)
		p := must(w.cust.Networking.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID})).get(t)
		if err := w.op.Networking.DeletePort(ctx, p.ID); err != nil {
			t.Errorf("network owner deleting a customer's port: %v", err)
		}
		if err := w.op.Networking.DeleteRBACPolicy(ctx, pol.ID); err != nil {
			t.Errorf("unshare: %v", err)
		}
	})
}

// ---------------------------------------------------------------- extraroute-atomic

func TestConformanceRoutes(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		n := w.op.Networking
		r1 := openstack.Route{Destination: "10.251.0.0/16", NextHop: "10.254.0.3"}
		r2 := openstack.Route{Destination: "100.64.1.0/24", NextHop: "10.254.0.40"}

		got := must(n.AddRouterRoutes(ctx, w.vpnRouter.ID, []openstack.Route{r1, r2})).get(t)
		if !got.HasRoute(r1) || !got.HasRoute(r2) {
			t.Errorf("after add %+v", got.Routes)
		}
		if got := must(n.AddRouterRoutes(ctx, w.vpnRouter.ID, []openstack.Route{r1})).get(t); len(got.Routes) != 2 {
			t.Errorf("re-adding a route must not duplicate it: %+v", got.Routes)
		}
		got = must(n.RemoveRouterRoutes(ctx, w.vpnRouter.ID, []openstack.Route{r1})).get(t)
		if got.HasRoute(r1) || !got.HasRoute(r2) {
			t.Errorf("after remove %+v", got.Routes)
		}
		if got := must(n.RemoveRouterRoutes(ctx, w.vpnRouter.ID, []openstack.Route{r1})).get(t); !got.HasRoute(r2) || len(got.Routes) != 1 {
			t.Errorf("removing an absent route: %+v", got.Routes)
		}
		if got := must(n.GetRouter(ctx, w.vpnRouter.ID)).get(t); len(got.Routes) != 1 || !got.HasRoute(r2) {
			t.Errorf("stored routes %+v", got.Routes)
		}

		// The same destination via another next hop is a second route, not a replacement.
		r2b := openstack.Route{Destination: r2.Destination, NextHop: "10.254.0.41"}
		if got := must(n.AddRouterRoutes(ctx, w.vpnRouter.ID, []openstack.Route{r2b})).get(t); !got.HasRoute(r2) || !got.HasRoute(r2b) || len(got.Routes) != 2 {
			t.Errorf("same destination, other next hop: %+v", got.Routes)
		}
		// A destination that is not a network address is kept as given, not masked.
		odd := openstack.Route{Destination: "10.97.1.5/16", NextHop: "10.254.0.40"}
		if got := must(n.AddRouterRoutes(ctx, w.vpnRouter.ID, []openstack.Route{odd})).get(t); !got.HasRoute(odd) {
			t.Errorf("unmasked destination stored as %+v", got.Routes)
		}
		if got := must(n.RemoveRouterRoutes(ctx, w.vpnRouter.ID, []openstack.Route{odd})).get(t); got.HasRoute(odd) || len(got.Routes) != 2 {
			t.Errorf("removing it as given: %+v", got.Routes)
		}

		for name, tc := range map[string]struct {
			rt  openstack.Route
			typ string
		}{
			"next hop off every subnet": {openstack.Route{Destination: "10.99.0.0/16", NextHop: "192.0.2.1"}, "InvalidRoutes"},
			"next hop is the router":    {openstack.Route{Destination: "10.99.0.0/16", NextHop: "10.254.0.1"}, "InvalidRoutes"},
			"malformed destination":     {openstack.Route{Destination: "not-a-cidr", NextHop: "10.254.0.3"}, "AddrFormatError"},
		} {
			err := second(n.AddRouterRoutes(ctx, w.vpnRouter.ID, []openstack.Route{tc.rt}))
			if !openstack.IsBadRequest(err) || openstack.NeutronErrorType(err) != tc.typ {
				t.Errorf("%s: want 400 %s, got %v", name, tc.typ, err)
			}
		}
		// A refused batch adds nothing, not even its valid routes.
		bad := []openstack.Route{{Destination: "10.96.0.0/16", NextHop: "10.254.0.40"}, {Destination: "10.95.0.0/16", NextHop: "192.0.2.1"}}
		if _, err := n.AddRouterRoutes(ctx, w.vpnRouter.ID, bad); !openstack.IsBadRequest(err) {
			t.Errorf("batch with an invalid route: %v", err)
		}
		if got := must(n.GetRouter(ctx, w.vpnRouter.ID)).get(t); got.HasRoute(bad[0]) {
			t.Errorf("a refused batch added %+v", bad[0])
		}
		if _, err := n.AddRouterRoutes(ctx, deadID, []openstack.Route{r1}); !openstack.IsNotFound(err) {
			t.Errorf("unknown router: %v", err)
		}
		if _, err := w.cust.Networking.AddRouterRoutes(ctx, w.vpnRouter.ID, []openstack.Route{r1}); !openstack.IsNotFound(err) {
			t.Errorf("customer routing on operator router: %v", err)
		}
		if n := w.requests.count("PUT network:/routers/{id}"); w.features.ExtraRouteAtomic && n != 0 {
			t.Errorf("routes must go through add/remove_extraroutes, never a router update: %s", w.requests)
		}
	})
}

func TestConformanceConcurrentRoutesLoseNone(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		perWriter := 12 // 24 routes stay under Neutron's default max_routes of 30
		if w.real() {
			perWriter = 5
		}
		var wg sync.WaitGroup
		errs := make(chan error, 2*perWriter)
		for writer := range 2 {
			// Writer 0 shares the world's client (the seam must be safe for concurrent
			// reconcilers); writer 1 is a second client, as a second replica would be.
			c := w.op
			if writer == 1 {
				c = must(openstack.NewClients(ctx, w.operatorCred, w.clientOpts)).get(t)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perWriter {
					rt := openstack.Route{Destination: fmt.Sprintf("100.%d.%d.0/24", 64+writer, i), NextHop: "10.254.0.40"}
					if _, err := c.Networking.AddRouterRoutes(ctx, w.vpnRouter.ID, []openstack.Route{rt}); err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		got := must(w.op.Networking.GetRouter(ctx, w.vpnRouter.ID)).get(t)
		if len(got.Routes) != 2*perWriter {
			t.Fatalf("router has %d routes, want %d", len(got.Routes), 2*perWriter)
		}
		for writer := range 2 {
			for i := range perWriter {
				rt := openstack.Route{Destination: fmt.Sprintf("100.%d.%d.0/24", 64+writer, i), NextHop: "10.254.0.40"}
				if !got.HasRoute(rt) {
					t.Errorf("lost %+v", rt)
				}
			}
		}
	})
}

// Neutron's max_routes (30 by default) caps a router's routes.
func TestConformanceMaxRoutes(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		var rs []openstack.Route
		for i := range 31 {
			rs = append(rs, openstack.Route{Destination: fmt.Sprintf("100.66.%d.0/24", i), NextHop: "10.254.0.40"})
		}
		must(w.op.Networking.AddRouterRoutes(ctx, w.vpnRouter.ID, rs[:30])).get(t)
		err := second(w.op.Networking.AddRouterRoutes(ctx, w.vpnRouter.ID, rs[30:]))
		if !openstack.IsBadRequest(err) || openstack.NeutronErrorType(err) != "RoutesExhausted" {
			t.Errorf("31st route: want 400 RoutesExhausted, got %v", err)
		}
	})
}

// ---------------------------------------------------------------- RBAC

func TestConformanceRBAC(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		n := w.op.Networking
		pol := must(n.ShareNetwork(ctx, w.transit.ID, w.projCustomer)).get(t)

		for name, opts := range map[string]openstack.ListRBACPoliciesOpts{
			"by object":            {ObjectID: w.transit.ID},
			"by target":            {TargetProject: w.projCustomer},
			"by object and target": {ObjectID: w.transit.ID, TargetProject: w.projCustomer, Action: openstack.RBACActionAccessAsShared, ObjectType: openstack.RBACObjectNetwork},
		} {
			got := must(n.ListRBACPolicies(ctx, opts)).get(t)
			if len(got) != 1 || got[0].ID != pol.ID {
				t.Errorf("%s: %+v", name, got)
			}
		}
		if got := must(n.ListRBACPolicies(ctx, openstack.ListRBACPoliciesOpts{TargetProject: w.projOther})).get(t); len(got) != 0 {
			t.Errorf("policies for an unrelated project: %+v", got)
		}
		if _, err := n.ListRBACPolicies(ctx, openstack.ListRBACPoliciesOpts{}); !errors.Is(err, openstack.ErrUnfiltered) {
			t.Errorf("unfiltered RBAC list: %v", err)
		}

		_, err := n.ShareNetwork(ctx, w.transit.ID, w.projCustomer)
		if !openstack.IsConflict(err) || openstack.NeutronErrorType(err) != "DuplicateRbacPolicy" {
			t.Errorf("duplicate share: want 409 DuplicateRbacPolicy, got %v (type %q)", err, openstack.NeutronErrorType(err))
		}
		// The customer sees the network now but may not share it onwards: Neutron
		// refuses in its validation, as bad input.
		_, err = w.cust.Networking.ShareNetwork(ctx, w.transit.ID, w.projOther)
		if !openstack.IsBadRequest(err) || openstack.NeutronErrorType(err) != "InvalidInput" {
			t.Errorf("share by non-owner: want 400 InvalidInput, got %v", err)
		}
		// The target sees neither the owner's policy nor any other.
		if got := must(w.cust.Networking.ListRBACPolicies(ctx, openstack.ListRBACPoliciesOpts{ObjectID: w.transit.ID})).get(t); len(got) != 0 {
			t.Errorf("customer sees the owner's policies: %+v", got)
		}
		if got := must(w.cust.Networking.ListRBACPolicies(ctx, openstack.ListRBACPoliciesOpts{TargetProject: w.projCustomer})).get(t); len(got) != 0 {
			t.Errorf("customer sees policies targeting it: %+v", got)
		}
		// An unrelated project sees nothing of the network.
		if _, err := w.other.Networking.GetNetwork(ctx, w.transit.ID); !openstack.IsNotFound(err) {
			t.Errorf("unrelated project: %v", err)
		}
		if err := w.cust.Networking.DeleteRBACPolicy(ctx, pol.ID); !openstack.IsNotFound(err) || openstack.NeutronErrorType(err) != "RbacPolicyNotFound" {
			t.Errorf("customer deleting the policy: want 404 RbacPolicyNotFound, got %v", err)
		}

		if err := n.DeleteRBACPolicy(ctx, pol.ID); err != nil {
			t.Fatal(err)
		}
		if err := n.DeleteRBACPolicy(ctx, pol.ID); !openstack.IsNotFound(err) {
			t.Errorf("second RBAC delete: %v", err)
		}
		if _, err := w.cust.Networking.GetNetwork(ctx, w.transit.ID); !openstack.IsNotFound(err) {
			t.Errorf("network still visible after unshare: %v", err)
		}
	})
}

// Neutron's rbac_policy quota (10 per project by default).
func TestConformanceRBACQuota(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		var err error
		made := 0
		for i := range 11 {
			// Neutron does not check that a target project exists.
			target := fmt.Sprintf("%032x", 0xbadc0de+i)
			if _, err = w.op.Networking.ShareNetwork(ctx, w.transit.ID, target); err != nil {
				break
			}
			made++
		}
		if made != 10 || !openstack.IsConflict(err) || openstack.NeutronErrorType(err) != "OverQuota" {
			t.Errorf("made %d policies, then %v (type %q); want 10, then 409 OverQuota", made, err, openstack.NeutronErrorType(err))
		}
	})
}

func TestConformanceUnshareRefusedWhileInUse(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		pol := must(w.op.Networking.ShareNetwork(ctx, w.transit.ID, w.projCustomer)).get(t)
		p := must(w.cust.Networking.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID})).get(t)
		err := w.op.Networking.DeleteRBACPolicy(ctx, pol.ID)
		if !openstack.IsConflict(err) || openstack.NeutronErrorType(err) != "RbacPolicyInUse" {
			t.Errorf("unsharing a network the customer uses: want 409 RbacPolicyInUse, got %v", err)
		}
		if err := w.cust.Networking.DeletePort(ctx, p.ID); err != nil {
			t.Fatal(err)
		}
		if err := w.op.Networking.DeleteRBACPolicy(ctx, pol.ID); err != nil {
			t.Errorf("unshare once the port is gone: %v", err)
		}
	})
}

// ---------------------------------------------------------------- Nova

func TestConformanceNovaAttachDetach(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		n, c := w.op.Networking, w.op.Compute
		wait := openstack.WaitOpts{Interval: 100 * time.Millisecond, Timeout: 60 * time.Second}
		p := w.transitPort(t, w.op, "gw-port", "10.254.0.40")

		before := must(c.ListServerInterfaces(ctx, w.serverA)).get(t)
		iface := must(c.AttachPort(ctx, w.serverA, p.ID)).get(t)
		if iface.PortID != p.ID || iface.MACAddress != p.MACAddress || iface.NetworkID != w.transit.ID {
			t.Errorf("attach answered %+v", iface)
		}
		// Nova answers the attach once the port is bound to the server.
		if now := must(n.GetPort(ctx, p.ID)).get(t); now.DeviceID != w.serverA || !strings.HasPrefix(now.DeviceOwner, "compute:") {
			t.Errorf("port when the attach answered %+v", now)
		}
		after := must(c.ListServerInterfaces(ctx, w.serverA)).get(t)
		if len(after) != len(before)+1 || !slices.ContainsFunc(after, func(i openstack.ServerInterface) bool {
			return i.PortID == p.ID && i.MACAddress == p.MACAddress && len(i.FixedIPs) == 1 && i.FixedIPs[0].IPAddress == "10.254.0.40"
		}) {
			t.Errorf("interfaces after attach %+v", after)
		}

		// Moving nodes: the port is held by server A, so attaching it to B conflicts.
		if _, err := c.AttachPort(ctx, w.serverB, p.ID); !openstack.IsConflict(err) {
			t.Errorf("attach of a port in use: want 409, got %v", err)
		}
		if err := c.DetachPort(ctx, w.serverA, p.ID); err != nil {
			t.Fatal(err)
		}
		cleared := must(openstack.WaitForPortDevice(ctx, n, p.ID, "", wait)).get(t)
		if cleared.DeviceID != "" || cleared.DeviceOwner != "" {
			t.Errorf("port after detach %+v", cleared)
		}
		if got := must(c.ListServerInterfaces(ctx, w.serverA)).get(t); len(got) != len(before) {
			t.Errorf("interfaces after detach %+v", got)
		}
		// Now it can move.
		must(c.AttachPort(ctx, w.serverB, p.ID)).get(t)
		must(openstack.WaitForPortDevice(ctx, n, p.ID, w.serverB, wait)).get(t)
		// Detaching from a server that does not hold the port is accepted and does
		// nothing: Nova checks only later, in the background. (Asked of the server the
		// port has left, never of one it moves to later: Nova's compute reads the
		// server's interfaces when it gets to the request, so a detach from B still
		// queued when the port arrived on B would take it off B.)
		if err := c.DetachPort(ctx, w.serverA, p.ID); err != nil {
			t.Errorf("detach from the wrong server: want 202, got %v", err)
		}

		if _, err := c.AttachPort(ctx, deadID, p.ID); !openstack.IsNotFound(err) {
			t.Errorf("unknown server: want 404, got %v", err)
		}
		if _, err := c.ListServerInterfaces(ctx, w.serverOther); !openstack.IsNotFound(err) {
			t.Errorf("another project's server: want 404, got %v", err)
		}
		if _, err := c.AttachPort(ctx, w.serverA, w.otherPortID); !openstack.IsNotFound(err) && !openstack.IsForbidden(err) && !openstack.IsBadRequest(err) {
			t.Errorf("another project's port: want a refusal, got %v", err)
		}
		if err := c.DetachPort(ctx, w.serverB, p.ID); err != nil {
			t.Fatal(err)
		}
		must(openstack.WaitForPortDevice(ctx, n, p.ID, "", wait)).get(t)
	})
}

// Nova finishing in the background: the API answers before device_id changes, and
// only the wait helper tells when it did. The simulator's delays stand in for a busy
// Nova; the real one attaches synchronously (see NovaAttachDetach). Simulator only.
func TestConformanceNovaAsync(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		n, c := w.op.Networking, w.op.Compute
		wait := openstack.WaitOpts{Interval: 10 * time.Millisecond, Timeout: 30 * time.Second}

		w.srv.SetNovaDelays(100*time.Millisecond, 100*time.Millisecond)
		p := w.transitPort(t, w.op, "async", "")
		must(c.AttachPort(ctx, w.serverA, p.ID)).get(t)
		if got := must(openstack.WaitForPortDevice(ctx, n, p.ID, w.serverA, wait)).get(t); got.DeviceID != w.serverA {
			t.Fatalf("after attach wait: %+v", got)
		}
		if err := c.DetachPort(ctx, w.serverA, p.ID); err != nil {
			t.Fatal(err)
		}
		if got := must(openstack.WaitForPortDevice(ctx, n, p.ID, "", wait)).get(t); got.DeviceID != "" {
			t.Fatalf("after detach wait: %+v", got)
		}

		// A Nova that never finishes: the wait gives up within its bound and says so
		// as a transient error.
		w.srv.SetNovaDelays(time.Hour, time.Hour)
		stuck := w.transitPort(t, w.op, "stuck", "")
		must(c.AttachPort(ctx, w.serverA, stuck.ID)).get(t)
		got, err := openstack.WaitForPortDevice(ctx, n, stuck.ID, w.serverA, openstack.WaitOpts{Interval: 10 * time.Millisecond, Timeout: 100 * time.Millisecond})
		if !errors.Is(err, openstack.ErrWaitTimeout) || !openstack.IsTransient(err) {
			t.Errorf("stuck attach: want ErrWaitTimeout, got %v", err)
		}
		if got == nil || got.DeviceID != "" {
			t.Errorf("stuck attach must return the last port read: %+v", got)
		}
	}, onlySim("delays Nova on purpose"))
}

// ---------------------------------------------------------------- accounting and faults

func TestConformanceReadOnlySequenceWritesNothing(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		owner := openstack.Owner{Kind: "IPsecGateway", Namespace: "ns", Name: "gw", UID: "uid-ro"}
		p := w.transitPort(t, w.op, "ro", "")
		must(w.op.Networking.CreateSecurityGroup(ctx, openstack.CreateSecurityGroupOpts{Name: "ro", Tags: owner.Tags()})).get(t)
		w.requests.reset()

		n := w.op.Networking
		// What a converged reconcile reads.
		must(n.GetNetwork(ctx, w.transit.ID)).get(t)
		must(n.GetSubnet(ctx, w.transitSub.ID)).get(t)
		must(n.ListPorts(ctx, openstack.ListPortsOpts{Tags: openstack.Owner{Kind: "Test", Name: "ro", UID: "uid-ro"}.Selector()})).get(t)
		must(n.GetPort(ctx, p.ID)).get(t)
		must(n.ListSecurityGroups(ctx, owner.Selector())).get(t)
		must(n.ListFloatingIPs(ctx, openstack.ListFloatingIPsOpts{PortID: p.ID})).get(t)
		must(n.GetRouter(ctx, w.vpnRouter.ID)).get(t)
		must(n.ResolveRouter(ctx, "shoot--services--svc01")).get(t)
		must(n.ListRouters(ctx, w.projOperator)).get(t)
		must(n.ListRBACPolicies(ctx, openstack.ListRBACPoliciesOpts{ObjectID: w.transit.ID})).get(t)
		must(w.op.Compute.ListServerInterfaces(ctx, w.serverA)).get(t)
		must(w.op.Identity.TokenInfo(ctx)).get(t)

		if w.requests.writes() != 0 {
			t.Errorf("read-only sequence wrote: %s", w.requests)
		}
		if w.requests.total() != 11 {
			t.Errorf("%d requests, want 11: %s", w.requests.total(), w.requests)
		}
	})
}

// Injected faults (errors, Retry-After, latency, dropped and hung connections) are
// classified as the operator relies on. Simulator only.
func TestConformanceFaults(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		n := w.op.Networking
		portPath := "/network/v2.0/ports/*"
		p := w.transitPort(t, w.op, "faulty", "")

		cases := []struct {
			name       string
			fault      openstacksim.Fault
			retryAfter time.Duration
		}{
			{"500", openstacksim.Fault{Method: "GET", PathPattern: portPath, Status: 500}, 0},
			{"502", openstacksim.Fault{Method: "GET", PathPattern: portPath, Status: 502}, 0},
			{"503", openstacksim.Fault{Method: "GET", PathPattern: portPath, Status: 503}, 0},
			{"429 with Retry-After", openstacksim.Fault{Method: "GET", PathPattern: portPath, Status: 429, RetryAfter: 2 * time.Second}, 2 * time.Second},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				remove := w.srv.Inject(tc.fault)
				_, err := n.GetPort(ctx, p.ID)
				remove()
				if !openstack.IsTransient(err) || openstack.IsNotFound(err) || openstack.StatusCode(err) != tc.fault.Status {
					t.Fatalf("want transient %d, got %v", tc.fault.Status, err)
				}
				if got := openstack.RetryAfter(err); got != tc.retryAfter {
					t.Errorf("RetryAfter = %v, want %v", got, tc.retryAfter)
				}
				if _, err := n.GetPort(ctx, p.ID); err != nil {
					t.Errorf("after removing the fault: %v", err)
				}
			})
		}

		t.Run("one-shot fault", func(t *testing.T) {
			w.srv.Inject(openstacksim.Fault{Method: "GET", PathPattern: portPath, Status: 503, Count: 1})
			if _, err := n.GetPort(ctx, p.ID); !openstack.IsTransient(err) {
				t.Errorf("first call: %v", err)
			}
			if _, err := n.GetPort(ctx, p.ID); err != nil {
				t.Errorf("second call: %v", err)
			}
		})

		t.Run("latency is observed", func(t *testing.T) {
			const lat = 200 * time.Millisecond
			remove := w.srv.Inject(openstacksim.Fault{Method: "GET", PathPattern: portPath, Latency: lat})
			defer remove()
			start := time.Now()
			got, err := n.GetPort(ctx, p.ID)
			// A lower bound only: a slow machine can only make it longer.
			if err != nil || got.ID != p.ID || time.Since(start) < lat {
				t.Errorf("latency not applied: %v after %v", err, time.Since(start))
			}
		})

		t.Run("dropped connection", func(t *testing.T) {
			remove := w.srv.Inject(openstacksim.Fault{Method: "POST", PathPattern: "/network/v2.0/ports", Drop: true})
			defer remove()
			_, err := n.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID})
			if err == nil || !openstack.IsTransient(err) || openstack.StatusCode(err) != 0 {
				t.Errorf("dropped create: want a transient transport error, got %v", err)
			}
		})

		t.Run("hung request hits the client timeout", func(t *testing.T) {
			short := must(openstack.NewClients(ctx, w.operatorCred, openstack.ClientOptions{Timeout: 300 * time.Millisecond})).get(t)
			remove := w.srv.Inject(openstacksim.Fault{Method: "GET", PathPattern: portPath, Hang: true})
			defer remove()
			_, err := short.Networking.GetPort(ctx, p.ID)
			if err == nil || !openstack.IsTransient(err) {
				t.Errorf("hung request: want transient timeout, got %v", err)
			}
		})

		t.Run("refusals are not transient", func(t *testing.T) {
			remove := w.srv.Inject(openstacksim.Fault{Method: "GET", PathPattern: portPath, Status: 403})
			defer remove()
			_, err := n.GetPort(ctx, p.ID)
			if !openstack.IsForbidden(err) || openstack.IsTransient(err) {
				t.Errorf("403: %v", err)
			}
		})

		// Eight requests met a fault (the latency one is answered). The simulator counts
		// a request when its handler returns, and the dropped and the hung one return
		// after the client has seen the connection close or given up, so their counts
		// may land a moment after the client's error: wait for them.
		deadline := time.Now().Add(10 * time.Second)
		for w.srv.Counters().Faulted < 8 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if c := w.srv.Counters(); c.Faulted != 8 {
			t.Errorf("faulted requests counted: %d, want 8", c.Faulted)
		}
	}, onlySim("injects faults"))
}

// A failed tag update after the create must not leave an untagged object behind.
// Simulator only (the fault is injected), and only where a port's tags follow its
// create.
func TestConformanceFailedTaggingLeavesNothing(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		owner := openstack.Owner{Kind: "IPsecGateway", Namespace: "ns", Name: "tagfail", UID: "uid-tagfail"}
		remove := w.srv.Inject(openstacksim.Fault{Method: "PUT", PathPattern: "/network/v2.0/ports/*/tags", Status: 503, Count: 1})
		defer remove()
		_, err := w.op.Networking.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID, Name: "tagfail", Tags: owner.Tags()})
		if !openstack.IsTransient(err) {
			t.Fatalf("want the transient tagging failure, got %v", err)
		}
		for _, p := range w.srv.Ports() {
			if p.Name == "tagfail" {
				t.Errorf("an untagged port stayed behind: %+v", p)
			}
		}
	}, onlySim("injects a fault into the tag update"),
		onlyWhen(func(f openstack.Features) bool { return !f.PortTagCreation }, "tags travel in the port create"))
}

// A pinned floating IP's tag (bnerd.net/pinned-by=<uid>) is written with the tag API on
// an address the operator did not allocate, read back with it, and removed again
// without touching the other tags.
func TestConformanceFloatingIPTags(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		n := w.op.Networking
		fip := must(n.CreateFloatingIP(ctx, openstack.CreateFloatingIPOpts{FloatingNetworkID: w.public.ID, Description: "pinned"})).get(t)
		t.Cleanup(func() { _ = n.DeleteFloatingIP(context.Background(), fip.ID) })
		if _, err := n.ReplaceFloatingIPTags(ctx, fip.ID, openstack.WithPin([]string{"keep"}, "uid-a")); err != nil {
			t.Fatal(err)
		}
		got := must(n.GetFloatingIP(ctx, fip.ID)).get(t)
		if openstack.PinnedBy(got.Tags) != "uid-a" || !slices.Contains(got.Tags, "keep") {
			t.Fatalf("tags %v, want keep and the pin of uid-a", got.Tags)
		}
		if _, err := n.ReplaceFloatingIPTags(ctx, fip.ID, openstack.WithPin(got.Tags, "")); err != nil {
			t.Fatal(err)
		}
		if got := must(n.GetFloatingIP(ctx, fip.ID)).get(t); openstack.PinnedBy(got.Tags) != "" || !slices.Equal(got.Tags, []string{"keep"}) {
			t.Fatalf("tags after unpinning %v, want [keep]", got.Tags)
		}
	})
}

// A project reads its own Neutron quotas with their usage (quota_details, what kubectl
// vpn check reports): the limits are Neutron's defaults or the project's, usage follows
// a create and a delete; another project's quotas are not the operator's to read.
func TestConformanceQuotaUsage(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		qr, ok := w.op.Networking.(openstack.QuotaReader)
		if !ok {
			t.Fatal("the seam's Networking does not read quotas")
		}
		before := must(qr.QuotaDetails(ctx, w.projOperator)).get(t)
		for _, res := range []string{openstack.QuotaPort, openstack.QuotaFloatingIP, openstack.QuotaSecurityGroup, openstack.QuotaSecurityGroupRule, openstack.QuotaRBACPolicy} {
			q, ok := before[res]
			if !ok || (q.Limit == 0 && q.Used == 0) || (q.Limit >= 0 && q.Used > q.Limit) {
				t.Errorf("%s: %+v", res, q)
			}
		}
		owner := openstack.Owner{Kind: "Test", Name: "quota", UID: "uid-quota"}
		sg := must(w.op.Networking.CreateSecurityGroup(ctx, openstack.CreateSecurityGroupOpts{Name: "quota", Tags: owner.Tags()})).get(t)
		during := must(qr.QuotaDetails(ctx, w.projOperator)).get(t)
		if err := w.op.Networking.DeleteSecurityGroup(ctx, sg.ID); err != nil {
			t.Fatal(err)
		}
		after := must(qr.QuotaDetails(ctx, w.projOperator)).get(t)
		sgBefore, sgDuring, sgAfter := before[openstack.QuotaSecurityGroup], during[openstack.QuotaSecurityGroup], after[openstack.QuotaSecurityGroup]
		if sgDuring.Used != sgBefore.Used+1 || sgAfter.Used != sgBefore.Used || sgDuring.Limit != sgBefore.Limit {
			t.Errorf("security_group usage %d, with one more %d, after its delete %d (limit %d, %d)", sgBefore.Used, sgDuring.Used, sgAfter.Used, sgBefore.Limit, sgDuring.Limit)
		}
		// A new group comes with its default egress rules, counted against the rule quota.
		if during[openstack.QuotaSecurityGroupRule].Used <= before[openstack.QuotaSecurityGroupRule].Used {
			t.Errorf("security_group_rule usage %d with the new group, %d before", during[openstack.QuotaSecurityGroupRule].Used, before[openstack.QuotaSecurityGroupRule].Used)
		}
		if _, err := qr.QuotaDetails(ctx, w.projCustomer); !openstack.IsForbidden(err) && !openstack.IsNotFound(err) {
			t.Errorf("the operator reading the customer's quotas: want a refusal, got %v", err)
		}
	})
}
