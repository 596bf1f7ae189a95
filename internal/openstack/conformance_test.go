package openstack_test

// Conformance: every method of the seam, driven through gophercloud over
// HTTP against the simulator, including the refusals the operator relies on.

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
	"bnerd.net/vpn-operator/internal/openstack/sim"
)

const (
	projAdmin    = "0000000000000000000000000000ad01"
	projOperator = "0000000000000000000000000000a001"
	projCustomer = "0000000000000000000000000000c001"
	projOther    = "0000000000000000000000000000e001"

	serverA     = "5e7e7000-0000-4000-8000-00000000000a"
	serverB     = "5e7e7000-0000-4000-8000-00000000000b"
	serverOther = "5e7e7000-0000-4000-8000-0000000000e1"

	otherPortID = "9047e000-0000-4000-8000-0000000000e1"

	opPassword = "op-password-never-logged"
)

var conformanceSeed = `
region: RegionOne
maxRoutes: -1
projects:
- {name: admin, id: ` + projAdmin + `}
- {name: vpn-operator, id: ` + projOperator + `}
- {name: customer, id: ` + projCustomer + `}
- {name: other, id: ` + projOther + `}
users:
- name: operator
  project: vpn-operator
  roles: [member, load-balancer_member]
  password: ` + opPassword + `
  allowPassword: true
  applicationCredentials: [{name: operator}]
- name: customer
  project: customer
  roles: [member]
  applicationCredentials: [{name: customer}]
- name: other
  project: other
  roles: [member]
  applicationCredentials: [{name: other}]
networks:
- name: public
  project: admin
  external: true
  subnets: [{name: public-subnet, cidr: 203.0.113.0/24}]
- name: vpn-transit
  project: vpn-operator
  subnets: [{name: vpn-transit-subnet, cidr: 10.254.0.0/24, gatewayIP: 10.254.0.1}]
- name: svc01-net
  project: vpn-operator
  subnets: [{name: svc01-subnet, cidr: 10.251.0.0/24}]
- name: diehl-net
  project: customer
  subnets: [{name: diehl-subnet, cidr: 10.234.0.0/24}]
- name: other-net
  project: other
  subnets: [{name: other-subnet, cidr: 10.9.0.0/24}]
  ports: [{name: other-port, id: ` + otherPortID + `, fixedIP: 10.9.0.50}]
routers:
- name: shoot--services--vpn01
  project: vpn-operator
  externalGateway: public
  interfaces: [{subnet: vpn-transit-subnet}]
- name: shoot--services--svc01
  project: vpn-operator
  interfaces: [{subnet: svc01-subnet}]
- name: shoot--diehl--diehl01
  project: customer
  interfaces: [{subnet: diehl-subnet}]
servers:
- {name: vpn01-worker-a, id: ` + serverA + `, project: vpn-operator}
- {name: vpn01-worker-b, id: ` + serverB + `, project: vpn-operator}
- {name: other-vm, id: ` + serverOther + `, project: other}
`

type world struct {
	srv          *sim.Server
	op, cust     *openstack.Clients
	transit      *openstack.Network
	transitSub   *openstack.Subnet
	public       *openstack.Network
	vpnRouter    *openstack.Router
	svcRouter    *openstack.Router
	customerRtr  *openstack.Router
	clientOpts   openstack.ClientOptions
	operatorCred openstack.Credential
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// must(call()).get(t) fails the test on an error; Go cannot pass a
// multi-value call alongside t.
func must[T any](v T, err error) result[T] { return result[T]{v, err} }

type result[T any] struct {
	v   T
	err error
}

func (r result[T]) get(t *testing.T) T {
	t.Helper()
	if r.err != nil {
		t.Fatalf("unexpected error: %v", r.err)
	}
	return r.v
}

func appCred(t *testing.T, srv *sim.Server, name string) openstack.Credential {
	t.Helper()
	id, secret, ok := srv.AppCredential(name)
	if !ok {
		t.Fatalf("seed has no application credential %q", name)
	}
	return openstack.Credential{AuthURL: srv.AuthURL(), Region: srv.Region(), AppCredentialID: id, AppCredentialSecret: secret}
}

func newWorld(t *testing.T) *world {
	t.Helper()
	seed, err := sim.ParseSeed([]byte(conformanceSeed))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := sim.Start(seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	ctx := ctxT(t)
	w := &world{srv: srv, clientOpts: openstack.ClientOptions{Timeout: 10 * time.Second}}
	w.operatorCred = appCred(t, srv, "operator")
	w.op = must(openstack.NewClients(ctx, w.operatorCred, w.clientOpts)).get(t)
	w.cust = must(openstack.NewClients(ctx, appCred(t, srv, "customer"), w.clientOpts)).get(t)
	n := w.op.Networking
	w.transit = must(n.ResolveNetwork(ctx, "vpn-transit")).get(t)
	subs := must(n.ListSubnets(ctx, w.transit.ID)).get(t)
	if len(subs) != 1 {
		t.Fatalf("transit subnets: %+v", subs)
	}
	w.transitSub = &subs[0]
	w.public = must(n.ResolveNetwork(ctx, "public")).get(t)
	w.vpnRouter = must(n.ResolveRouter(ctx, "shoot--services--vpn01")).get(t)
	w.svcRouter = must(n.ResolveRouter(ctx, "shoot--services--svc01")).get(t)
	w.customerRtr = must(w.cust.Networking.ResolveRouter(ctx, "shoot--diehl--diehl01")).get(t)
	srv.ResetCounters()
	return w
}

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

func simPort(t *testing.T, srv *sim.Server, id string) (sim.Port, bool) {
	t.Helper()
	return srv.Port(id)
}

// ---------------------------------------------------------------- identity

func TestConformanceIdentity(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	cases := []struct {
		name    string
		clients *openstack.Clients
		project string
		roles   []string
	}{
		{"operator", w.op, projOperator, []string{"member", "load-balancer_member"}},
		{"customer", w.cust, projCustomer, []string{"member"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := w.srv.Counters().Total()
			info := must(tc.clients.Identity.TokenInfo(ctx)).get(t)
			if info.ProjectID != tc.project || info.ProjectName == "" || info.UserID == "" {
				t.Errorf("token info %+v", info)
			}
			for _, r := range tc.roles {
				if !slices.Contains(info.Roles, r) {
					t.Errorf("roles %v lack %q", info.Roles, r)
				}
			}
			if info.Region != w.srv.Region() || !strings.HasPrefix(info.NetworkEndpoint, w.srv.URL()) ||
				!strings.HasPrefix(info.ComputeEndpoint, w.srv.URL()) {
				t.Errorf("catalog: %+v", info)
			}
			if after := w.srv.Counters().Total(); after != before {
				t.Errorf("TokenInfo made %d requests; it must read the cached auth result", after-before)
			}
		})
	}
}

func TestConformancePasswordAuth(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	cred := openstack.Credential{AuthURL: w.srv.AuthURL(), Region: w.srv.Region(),
		Username: "operator", Password: opPassword, ProjectName: "vpn-operator"}
	c := must(openstack.NewClients(ctx, cred, w.clientOpts)).get(t)
	if info := must(c.Identity.TokenInfo(ctx)).get(t); info.ProjectID != projOperator {
		t.Errorf("password token scoped to %q", info.ProjectID)
	}
	if _, err := c.Networking.GetNetwork(ctx, w.transit.ID); err != nil {
		t.Errorf("password client cannot read: %v", err)
	}
}

func TestConformanceAuthRefusals(t *testing.T) {
	w := newWorld(t)
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

	wrongPassword := openstack.Credential{AuthURL: w.srv.AuthURL(), Region: w.srv.Region(),
		Username: "operator", Password: "not-" + opPassword, ProjectName: "vpn-operator"}
	_, err = openstack.NewClients(ctx, wrongPassword, w.clientOpts)
	if !openstack.IsUnauthorized(err) || strings.Contains(fmt.Sprint(err), opPassword) {
		t.Errorf("wrong password: %v", err)
	}

	wrongRegion := w.operatorCred
	wrongRegion.Region = "NoSuchRegion"
	if _, err := openstack.NewClients(ctx, wrongRegion, w.clientOpts); err == nil {
		t.Error("a region missing from the catalog must fail client construction")
	}

	if _, err := openstack.NewClients(ctx, openstack.Credential{AuthURL: w.srv.AuthURL()}, w.clientOpts); !errors.Is(err, openstack.ErrInvalidCredential) {
		t.Errorf("incomplete credential: %v", err)
	}
}

func TestConformanceReauthAfterTokenExpiry(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	w.srv.ExpireTokens()
	if _, err := w.op.Networking.GetNetwork(ctx, w.transit.ID); err != nil {
		t.Fatalf("after token expiry the client must re-authenticate: %v", err)
	}
	if c := w.srv.Counters(); c.Tokens < 1 {
		t.Errorf("no re-authentication recorded: %+v", c)
	}
	if info := must(w.op.Identity.TokenInfo(ctx)).get(t); info.ProjectID != projOperator {
		t.Errorf("token info after reauth: %+v", info)
	}
}

func TestConformanceClientCache(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	cache := openstack.NewClientCache(func(ctx context.Context, cred openstack.Credential) (*openstack.Clients, error) {
		return openstack.NewClients(ctx, cred, w.clientOpts)
	})
	cust := appCred(t, w.srv, "customer")
	c1 := must(cache.Get(ctx, "diehl01", "uid-1/rv-1", cust)).get(t)
	c2 := must(cache.Get(ctx, "diehl01", "uid-1/rv-1", cust)).get(t)
	if c1 != c2 {
		t.Error("unchanged Secret version rebuilt the clients")
	}
	if n := w.srv.Counters().Tokens; n != 1 {
		t.Errorf("Keystone token requests: %d, want 1", n)
	}
	must(cache.Get(ctx, "diehl01", "uid-1/rv-2", cust)).get(t)
	if n := w.srv.Counters().Tokens; n != 2 {
		t.Errorf("a new Secret version must re-authenticate: %d token requests", n)
	}
	bad := cust
	bad.AppCredentialSecret = "rotated-to-garbage"
	if _, err := cache.Get(ctx, "diehl01", "uid-1/rv-3", bad); !openstack.IsUnauthorized(err) {
		t.Errorf("refused credential: %v", err)
	}
}

// ---------------------------------------------------------------- networks

func TestConformanceNetworksAndSubnets(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	n := w.op.Networking

	got := must(n.GetNetwork(ctx, w.transit.ID)).get(t)
	if got.Name != "vpn-transit" || got.ProjectID != projOperator || got.Shared || got.External ||
		!slices.Contains(got.Subnets, w.transitSub.ID) {
		t.Errorf("transit network %+v", got)
	}
	if byID := must(n.ResolveNetwork(ctx, w.transit.ID)).get(t); byID.ID != w.transit.ID {
		t.Errorf("resolve by ID gave %+v", byID)
	}
	if !w.public.External {
		t.Errorf("public network not external: %+v", w.public)
	}
	sub := must(n.GetSubnet(ctx, w.transitSub.ID)).get(t)
	if sub.CIDR != "10.254.0.0/24" || sub.GatewayIP != "10.254.0.1" || sub.NetworkID != w.transit.ID {
		t.Errorf("transit subnet %+v", sub)
	}

	for name, err := range map[string]error{
		"get unknown network":      second(n.GetNetwork(ctx, "00000000-0000-4000-8000-00000000dead")),
		"resolve unknown name":     second(n.ResolveNetwork(ctx, "no-such-network")),
		"get unknown subnet":       second(n.GetSubnet(ctx, "00000000-0000-4000-8000-00000000dead")),
		"customer sees no transit": second(w.cust.Networking.GetNetwork(ctx, w.transit.ID)),
	} {
		if !openstack.IsNotFound(err) {
			t.Errorf("%s: want IsNotFound, got %v", name, err)
		}
	}
	if _, err := n.ListSubnets(ctx, ""); !errors.Is(err, openstack.ErrUnfiltered) {
		t.Errorf("unfiltered subnet list: %v", err)
	}
}

func second[T any](_ T, err error) error { return err }

// ---------------------------------------------------------------- ports

func TestConformancePortCreateAndGet(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	n := w.op.Networking
	owner := openstack.Owner{Kind: "IPsecGateway", Namespace: "tenant-a", Name: "gw1", UID: "0b7c8f1e"}
	sg := must(n.CreateSecurityGroup(ctx, openstack.CreateSecurityGroupOpts{Name: "gw1-sg", Tags: owner.Tags()})).get(t)

	cases := []struct {
		name string
		opts openstack.CreatePortOpts
		ip   string
	}{
		{"pinned address with SG", openstack.CreatePortOpts{NetworkID: w.transit.ID, SubnetID: w.transitSub.ID, IPAddress: "10.254.0.40",
			Name: openstack.ResourceName("gw", "tenant-a", "gw1"), Description: "gateway port", Tags: owner.Tags(), SecurityGroups: []string{sg.ID}}, "10.254.0.40"},
		{"allocated address", openstack.CreatePortOpts{NetworkID: w.transit.ID, Name: "auto", Tags: owner.Tags()}, ""},
		{"subnet only", openstack.CreatePortOpts{NetworkID: w.transit.ID, SubnetID: w.transitSub.ID, Name: "subnet-only"}, ""},
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
			if p.NetworkID != w.transit.ID || p.Name != tc.opts.Name || p.MACAddress == "" || p.ProjectID != projOperator {
				t.Errorf("port %+v", p)
			}
			if !openstack.HasTags(p.Tags, tc.opts.Tags...) || len(p.Tags) != len(tc.opts.Tags) {
				t.Errorf("tags %v, want %v", p.Tags, tc.opts.Tags)
			}
			if tc.opts.SecurityGroups != nil && !slices.Equal(p.SecurityGroups, tc.opts.SecurityGroups) {
				t.Errorf("security groups %v", p.SecurityGroups)
			}
			if tc.opts.Description != "" && p.Description != tc.opts.Description {
				t.Errorf("description %q", p.Description)
			}
			// The simulator's own state agrees, tags included (set at create).
			sp, ok := simPort(t, w.srv, p.ID)
			if !ok || !openstack.HasTags(sp.Tags, tc.opts.Tags...) {
				t.Errorf("sim state %+v", sp)
			}
			again := must(n.GetPort(ctx, p.ID)).get(t)
			if again.ID != p.ID || again.FixedIPOn("") != ip || !slices.Equal(again.Tags, p.Tags) {
				t.Errorf("GetPort %+v differs from create %+v", again, p)
			}
		})
	}
	if c := w.srv.Counters(); c.ByRoute["PUT /network/v2.0/ports/{id}/tags"] != 0 {
		t.Errorf("tags must be sent with the create, not afterwards: %v", c.ByRoute)
	}
}

func TestConformancePortRefusals(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	n := w.op.Networking
	w.transitPort(t, w.op, "first", "10.254.0.50")

	_, err := n.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID, SubnetID: w.transitSub.ID, IPAddress: "10.254.0.50"})
	if !openstack.IsConflict(err) || openstack.NeutronErrorType(err) != "IpAddressAlreadyAllocated" {
		t.Errorf("address in use: want 409 IpAddressAlreadyAllocated, got %v (type %q)", err, openstack.NeutronErrorType(err))
	}
	// The router's own leg holds .1.
	if _, err := n.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID, SubnetID: w.transitSub.ID, IPAddress: "10.254.0.1"}); !openstack.IsConflict(err) {
		t.Errorf("router leg address: want conflict, got %v", err)
	}
	if _, err := n.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID, SubnetID: w.transitSub.ID, IPAddress: "10.99.0.5"}); !openstack.IsBadRequest(err) {
		t.Errorf("address outside the subnet: want 400, got %v", err)
	}
	if _, err := n.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: "00000000-0000-4000-8000-00000000dead"}); !openstack.IsNotFound(err) {
		t.Errorf("unknown network: want 404, got %v", err)
	}
	if _, err := w.cust.Networking.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID}); !openstack.IsNotFound(err) {
		t.Errorf("customer on an unshared network: want 404, got %v", err)
	}
	if _, err := n.GetPort(ctx, otherPortID); !openstack.IsNotFound(err) {
		t.Errorf("another project's port: want 404, got %v", err)
	}
	if err := n.DeletePort(ctx, otherPortID); !openstack.IsNotFound(err) {
		t.Errorf("deleting another project's port: want 404, got %v", err)
	}
	if _, ok := simPort(t, w.srv, otherPortID); !ok {
		t.Error("another project's port was deleted")
	}
}

func TestConformancePortList(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	n := w.op.Networking
	ownerA := openstack.Owner{Kind: "IPsecGateway", Namespace: "ns", Name: "a", UID: "uid-a"}
	ownerB := openstack.Owner{Kind: "IPsecGateway", Namespace: "ns", Name: "b", UID: "uid-b"}
	pa := must(n.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID, SubnetID: w.transitSub.ID, IPAddress: "10.254.0.61", Tags: ownerA.Tags()})).get(t)
	pb := must(n.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID, SubnetID: w.transitSub.ID, IPAddress: "10.254.0.62", Tags: ownerB.Tags()})).get(t)
	must(w.op.Compute.AttachPort(ctx, serverA, pb.ID)).get(t)
	must(openstack.WaitForPortDevice(ctx, n, pb.ID, serverA, openstack.WaitOpts{Interval: 10 * time.Millisecond})).get(t)

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
		{"by device", openstack.ListPortsOpts{DeviceID: serverA}, []string{pb.ID}},
		{"by device and tag", openstack.ListPortsOpts{DeviceID: serverA, Tags: ownerA.Selector()}, nil},
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
	t.Run("unfiltered is refused without a request", func(t *testing.T) {
		before := w.srv.Counters().Total()
		if _, err := n.ListPorts(ctx, openstack.ListPortsOpts{}); !errors.Is(err, openstack.ErrUnfiltered) {
			t.Errorf("got %v", err)
		}
		if w.srv.Counters().Total() != before {
			t.Error("an unfiltered list reached the API")
		}
	})
}

func TestConformancePortUpdates(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	n := w.op.Networking
	p := w.transitPort(t, w.op, "upd", "")

	pairs := []openstack.AddressPair{{IPAddress: "100.64.3.0/24"}, {IPAddress: "100.64.4.0/24"}}
	got := must(n.UpdatePortAllowedAddressPairs(ctx, p.ID, pairs)).get(t)
	if len(got.AllowedAddressPairs) != 2 || got.AllowedAddressPairs[0].IPAddress != "100.64.3.0/24" {
		t.Errorf("pairs %+v", got.AllowedAddressPairs)
	}
	for _, ap := range got.AllowedAddressPairs {
		if ap.MACAddress != p.MACAddress {
			t.Errorf("pair MAC %q, want the port's %q (Neutron fills it)", ap.MACAddress, p.MACAddress)
		}
	}
	if got := must(n.UpdatePortAllowedAddressPairs(ctx, p.ID, nil)).get(t); len(got.AllowedAddressPairs) != 0 {
		t.Errorf("clearing pairs left %+v", got.AllowedAddressPairs)
	}

	sg1 := must(n.CreateSecurityGroup(ctx, openstack.CreateSecurityGroupOpts{Name: "one"})).get(t)
	sg2 := must(n.CreateSecurityGroup(ctx, openstack.CreateSecurityGroupOpts{Name: "two"})).get(t)
	got = must(n.UpdatePortSecurityGroups(ctx, p.ID, []string{sg1.ID, sg2.ID})).get(t)
	if s := slices.Sorted(slices.Values(got.SecurityGroups)); !slices.Equal(s, slices.Sorted(slices.Values([]string{sg1.ID, sg2.ID}))) {
		t.Errorf("security groups %v", got.SecurityGroups)
	}
	if _, err := n.UpdatePortSecurityGroups(ctx, p.ID, []string{"00000000-0000-4000-8000-00000000dead"}); !openstack.IsNotFound(err) {
		t.Errorf("unknown security group: want 404, got %v", err)
	}

	adopted := openstack.Owner{Kind: "ClusterLink", Name: "svc01-link", UID: "uid-cl"}.Tags()
	tags := must(n.ReplacePortTags(ctx, p.ID, adopted)).get(t)
	if !slices.Equal(slices.Sorted(slices.Values(tags)), slices.Sorted(slices.Values(adopted))) {
		t.Errorf("replaced tags %v", tags)
	}
	if again := must(n.GetPort(ctx, p.ID)).get(t); !openstack.HasTags(again.Tags, adopted...) || len(again.Tags) != len(adopted) {
		t.Errorf("tags after replace %v", again.Tags)
	}
	if got := must(n.ReplacePortTags(ctx, p.ID, nil)).get(t); len(got) != 0 {
		t.Errorf("clearing tags left %v", got)
	}
	if again := must(n.GetPort(ctx, p.ID)).get(t); len(again.Tags) != 0 {
		t.Errorf("tags after clear %v", again.Tags)
	}
	if _, err := n.ReplacePortTags(ctx, otherPortID, adopted); !openstack.IsNotFound(err) {
		t.Errorf("retagging another project's port: want 404, got %v", err)
	}

	if _, err := n.UpdatePortAllowedAddressPairs(ctx, "00000000-0000-4000-8000-00000000dead", pairs); !openstack.IsNotFound(err) {
		t.Errorf("update unknown port: %v", err)
	}
}

func TestConformancePortDelete(t *testing.T) {
	w := newWorld(t)
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
}

// ---------------------------------------------------------------- security groups

func TestConformanceSecurityGroups(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	n := w.op.Networking
	owner := openstack.Owner{Kind: "IPsecGateway", Namespace: "ns", Name: "gw", UID: "uid-sg"}
	sg := must(n.CreateSecurityGroup(ctx, openstack.CreateSecurityGroupOpts{
		Name: openstack.ResourceName("sg", "ns", "gw"), Description: "ike", Tags: owner.Tags()})).get(t)
	if sg.Name != "bnerd-vpn-sg-ns-gw" || sg.ProjectID != projOperator || !openstack.HasTags(sg.Tags, owner.Tags()...) {
		t.Errorf("created %+v", sg)
	}
	must(n.CreateSecurityGroup(ctx, openstack.CreateSecurityGroupOpts{Name: "unrelated", Tags: []string{"x"}})).get(t)

	listed := must(n.ListSecurityGroups(ctx, owner.Selector())).get(t)
	if len(listed) != 1 || listed[0].ID != sg.ID {
		t.Errorf("list by selector %+v", listed)
	}
	if _, err := n.ListSecurityGroups(ctx, nil); !errors.Is(err, openstack.ErrUnfiltered) {
		t.Errorf("unfiltered SG list: %v", err)
	}

	rules := []openstack.CreateSecurityGroupRuleOpts{
		{SecurityGroupID: sg.ID, Direction: openstack.DirectionIngress, EtherType: openstack.EtherTypeIPv4, Protocol: openstack.ProtocolUDP, PortRangeMin: 500, PortRangeMax: 500, RemoteIPPrefix: "198.51.100.7/32"},
		{SecurityGroupID: sg.ID, Direction: openstack.DirectionIngress, EtherType: openstack.EtherTypeIPv4, Protocol: openstack.ProtocolUDP, PortRangeMin: 4500, PortRangeMax: 4500, RemoteIPPrefix: "198.51.100.7/32"},
		{SecurityGroupID: sg.ID, Direction: openstack.DirectionIngress, EtherType: openstack.EtherTypeIPv4, RemoteIPPrefix: "10.254.0.0/24"},
	}
	var created []*openstack.SecurityGroupRule
	for _, ro := range rules {
		r := must(n.CreateSecurityGroupRule(ctx, ro)).get(t)
		if r.SecurityGroupID != sg.ID || r.Protocol != ro.Protocol || r.PortRangeMin != ro.PortRangeMin ||
			r.PortRangeMax != ro.PortRangeMax || r.RemoteIPPrefix != ro.RemoteIPPrefix || r.Direction != ro.Direction {
			t.Errorf("rule %+v from %+v", r, ro)
		}
		created = append(created, r)
	}
	_, err := n.CreateSecurityGroupRule(ctx, rules[0])
	if !openstack.IsConflict(err) {
		t.Errorf("duplicate rule: want 409, got %v", err)
	}
	if typ := openstack.NeutronErrorType(err); typ != "SecurityGroupRuleExists" {
		t.Errorf("duplicate rule type %q", typ)
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
	if err := n.DeleteSecurityGroupRule(ctx, created[0].ID); !openstack.IsNotFound(err) {
		t.Errorf("second rule delete: %v", err)
	}
	got = must(n.GetSecurityGroup(ctx, sg.ID)).get(t)
	if slices.ContainsFunc(got.Rules, func(r openstack.SecurityGroupRule) bool { return r.ID == created[0].ID }) {
		t.Error("deleted rule still in group")
	}

	// In use by a port: Neutron refuses the delete.
	p := must(n.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID, SecurityGroups: []string{sg.ID}})).get(t)
	if err := n.DeleteSecurityGroup(ctx, sg.ID); !openstack.IsConflict(err) {
		t.Errorf("delete SG in use: want 409, got %v", err)
	}
	must(n.UpdatePortSecurityGroups(ctx, p.ID, []string{})).get(t)
	if err := n.DeleteSecurityGroup(ctx, sg.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := n.GetSecurityGroup(ctx, sg.ID); !openstack.IsNotFound(err) {
		t.Errorf("deleted SG readable: %v", err)
	}
	if _, err := w.cust.Networking.GetSecurityGroup(ctx, got.ID); !openstack.IsNotFound(err) {
		t.Errorf("customer reading operator SG: %v", err)
	}
}

// ---------------------------------------------------------------- floating IPs

func TestConformanceFloatingIPs(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	n := w.op.Networking
	owner := openstack.Owner{Kind: "IPsecGateway", Namespace: "ns", Name: "gw", UID: "uid-fip"}

	fip := must(n.CreateFloatingIP(ctx, openstack.CreateFloatingIPOpts{FloatingNetworkID: w.public.ID, Tags: owner.Tags(), Description: "gw"})).get(t)
	addr, err := netip.ParseAddr(fip.FloatingIPAddress)
	if err != nil || !netip.MustParsePrefix("203.0.113.0/24").Contains(addr) || fip.FloatingNetworkID != w.public.ID ||
		fip.PortID != "" || !openstack.HasTags(fip.Tags, owner.Tags()...) {
		t.Errorf("created %+v", fip)
	}
	if got := must(n.GetFloatingIP(ctx, fip.ID)).get(t); got.FloatingIPAddress != fip.FloatingIPAddress {
		t.Errorf("get %+v", got)
	}
	if got := must(n.FindFloatingIPByAddress(ctx, fip.FloatingIPAddress)).get(t); got.ID != fip.ID {
		t.Errorf("find by address %+v", got)
	}
	if _, err := n.FindFloatingIPByAddress(ctx, "203.0.113.254"); !openstack.IsNotFound(err) {
		t.Errorf("find unknown address: %v", err)
	}
	if got := must(n.ListFloatingIPs(ctx, openstack.ListFloatingIPsOpts{Tags: owner.Selector()})).get(t); len(got) != 1 || got[0].ID != fip.ID {
		t.Errorf("list by tags %+v", got)
	}
	if _, err := n.ListFloatingIPs(ctx, openstack.ListFloatingIPsOpts{}); !errors.Is(err, openstack.ErrUnfiltered) {
		t.Errorf("unfiltered FIP list: %v", err)
	}

	// A pinned address (migration) and its double claim.
	pinned := must(n.CreateFloatingIP(ctx, openstack.CreateFloatingIPOpts{FloatingNetworkID: w.public.ID, FloatingIPAddress: "203.0.113.77"})).get(t)
	if pinned.FloatingIPAddress != "203.0.113.77" {
		t.Errorf("pinned %+v", pinned)
	}
	if _, err := n.CreateFloatingIP(ctx, openstack.CreateFloatingIPOpts{FloatingNetworkID: w.public.ID, FloatingIPAddress: "203.0.113.77"}); !openstack.IsConflict(err) {
		t.Errorf("claiming a taken address: want 409, got %v", err)
	}
	if _, err := n.CreateFloatingIP(ctx, openstack.CreateFloatingIPOpts{FloatingNetworkID: w.transit.ID}); !openstack.IsBadRequest(err) && !openstack.IsNotFound(err) {
		t.Errorf("FIP on an internal network: want 400/404, got %v", err)
	}

	port := w.transitPort(t, w.op, "fip-port", "10.254.0.80")
	assoc := must(n.AssociateFloatingIP(ctx, fip.ID, port.ID)).get(t)
	if assoc.PortID != port.ID || assoc.FixedIPAddress != "10.254.0.80" {
		t.Errorf("associated %+v", assoc)
	}
	if got := must(n.ListFloatingIPs(ctx, openstack.ListFloatingIPsOpts{PortID: port.ID})).get(t); len(got) != 1 || got[0].ID != fip.ID {
		t.Errorf("list by port %+v", got)
	}
	if _, err := n.AssociateFloatingIP(ctx, pinned.ID, port.ID); !openstack.IsConflict(err) {
		t.Errorf("second FIP on one fixed IP: want 409, got %v", err)
	}
	dis := must(n.DisassociateFloatingIP(ctx, fip.ID)).get(t)
	if dis.PortID != "" || dis.FixedIPAddress != "" {
		t.Errorf("disassociated %+v", dis)
	}
	if err := n.DeleteFloatingIP(ctx, fip.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := n.GetFloatingIP(ctx, fip.ID); !openstack.IsNotFound(err) {
		t.Errorf("deleted FIP readable: %v", err)
	}
	if err := n.DeleteFloatingIP(ctx, fip.ID); !openstack.IsNotFound(err) {
		t.Errorf("second FIP delete: %v", err)
	}
	if _, err := w.cust.Networking.GetFloatingIP(ctx, pinned.ID); !openstack.IsNotFound(err) {
		t.Errorf("customer reading operator FIP: %v", err)
	}
}

// ---------------------------------------------------------------- routers

// createRouter makes a router behind the seam's back (the seam never
// creates routers), as a human with the CLI would.
func (w *world) createRouter(t *testing.T, name string) string {
	t.Helper()
	ctx := ctxT(t)
	provider, err := gcos.AuthenticatedClient(ctx, gophercloud.AuthOptions{IdentityEndpoint: w.srv.AuthURL(),
		ApplicationCredentialID: w.operatorCred.AppCredentialID, ApplicationCredentialSecret: w.operatorCred.AppCredentialSecret})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := gcos.NewNetworkV2(provider, gophercloud.EndpointOpts{Region: w.srv.Region()})
	if err != nil {
		t.Fatal(err)
	}
	r, err := routers.Create(ctx, nc, routers.CreateOpts{Name: name}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	return r.ID
}

func TestConformanceRouterLookup(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	n := w.op.Networking
	w.createRouter(t, "twin")
	twinRouter2 := w.createRouter(t, "twin")
	if w.vpnRouter.ProjectID != projOperator || w.vpnRouter.Name != "shoot--services--vpn01" {
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
	if _, err := w.cust.Networking.GetRouter(ctx, w.vpnRouter.ID); !openstack.IsNotFound(err) {
		t.Errorf("customer getting operator router: %v", err)
	}

	all := must(n.ListRouters(ctx, projOperator)).get(t)
	var names []string
	for _, r := range all {
		names = append(names, r.Name)
		if r.ProjectID != projOperator {
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
}

func TestConformanceRouterInterfaces(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	n := w.op.Networking
	leg := w.transitPort(t, w.op, "svc01-leg", "10.254.0.3")
	if err := n.AddRouterInterface(ctx, w.svcRouter.ID, leg.ID); err != nil {
		t.Fatal(err)
	}
	got := must(n.GetPort(ctx, leg.ID)).get(t)
	if got.DeviceID != w.svcRouter.ID || got.DeviceOwner != sim.OwnerRouterInterface {
		t.Errorf("leg after attach %+v", got)
	}

	second := w.transitPort(t, w.op, "svc01-leg-2", "10.254.0.4")
	err := n.AddRouterInterface(ctx, w.svcRouter.ID, second.ID)
	if !openstack.IsBadRequest(err) || !strings.Contains(err.Error(), "subnet") {
		t.Errorf("second leg on one subnet: want 400 naming the subnet, got %v", err)
	}
	if err := n.AddRouterInterface(ctx, w.vpnRouter.ID, leg.ID); !openstack.IsConflict(err) {
		t.Errorf("port already on another router: want 409, got %v", err)
	}
	if err := n.AddRouterInterface(ctx, w.svcRouter.ID, "00000000-0000-4000-8000-00000000dead"); !openstack.IsNotFound(err) {
		t.Errorf("unknown port: %v", err)
	}

	if err := n.RemoveRouterInterface(ctx, w.svcRouter.ID, leg.ID); err != nil {
		t.Fatal(err)
	}
	if err := n.RemoveRouterInterface(ctx, w.svcRouter.ID, second.ID); !openstack.IsNotFound(err) {
		t.Errorf("removing a port that is not an interface: want 404, got %v", err)
	}
	// Neutron deletes a port when its router interface is removed; a
	// simulator that keeps it must at least clear the binding.
	if p, err := n.GetPort(ctx, leg.ID); err == nil {
		if p.DeviceID != "" || p.DeviceOwner != "" {
			t.Errorf("leg after detach %+v", p)
		}
	} else if !openstack.IsNotFound(err) {
		t.Errorf("leg after detach: %v", err)
	}
	// With the subnet free again the second leg attaches.
	if err := n.AddRouterInterface(ctx, w.svcRouter.ID, second.ID); err != nil {
		t.Errorf("attach after detach: %v", err)
	}
}

func TestConformanceCrossTenantLink(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	// The customer cannot see the transit network until the operator shares it.
	if _, err := w.cust.Networking.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID}); !openstack.IsNotFound(err) {
		t.Fatalf("before share: %v", err)
	}
	pol := must(w.op.Networking.ShareNetwork(ctx, w.transit.ID, projCustomer)).get(t)
	if pol.ObjectID != w.transit.ID || pol.TargetProject != projCustomer || pol.Action != openstack.RBACActionAccessAsShared ||
		pol.ObjectType != openstack.RBACObjectNetwork || pol.ProjectID != projOperator {
		t.Errorf("policy %+v", pol)
	}
	visible := must(w.cust.Networking.GetNetwork(ctx, w.transit.ID)).get(t)
	if visible.ID != w.transit.ID {
		t.Errorf("customer view %+v", visible)
	}
	owner := openstack.Owner{Kind: "ClusterLink", Name: "diehl01", UID: "uid-diehl"}
	leg := must(w.cust.Networking.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID,
		SubnetID: w.transitSub.ID, IPAddress: "10.254.0.9", Tags: owner.Tags(), Name: openstack.ResourceName("leg", "", "diehl01")})).get(t)
	if leg.ProjectID != projCustomer {
		t.Errorf("leg project %q", leg.ProjectID)
	}
	if err := w.cust.Networking.AddRouterInterface(ctx, w.customerRtr.ID, leg.ID); err != nil {
		t.Fatalf("customer router leg: %v", err)
	}
	// A port of the operator's project cannot join the customer's router.
	opLeg := w.transitPort(t, w.op, "op-leg", "10.254.0.10")
	if err := w.cust.Networking.AddRouterInterface(ctx, w.customerRtr.ID, opLeg.ID); !openstack.IsNotFound(err) && !openstack.IsForbidden(err) {
		t.Errorf("foreign port on customer router: want 404/403, got %v", err)
	}
	// The operator's route to the customer's cluster, via the leg.
	rt := openstack.Route{Destination: "10.234.0.0/16", NextHop: "10.254.0.9"}
	r := must(w.op.Networking.AddRouterRoutes(ctx, w.vpnRouter.ID, []openstack.Route{rt})).get(t)
	if !r.HasRoute(rt) {
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

	// Unbinding: Neutron refuses to remove the leg while a route still uses
	// it, so reverse routes go first; removing the interface deletes the port.
	if err := w.cust.Networking.RemoveRouterInterface(ctx, w.customerRtr.ID, leg.ID); !openstack.IsConflict(err) {
		t.Errorf("leg removal with a route via it: want 409, got %v", err)
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
}

func TestConformanceRoutes(t *testing.T) {
	w := newWorld(t)
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
	if simR, ok := w.srv.RouterByName("shoot--services--vpn01"); !ok || len(simR.Routes) != 1 {
		t.Errorf("sim router %+v", simR)
	}

	for name, rt := range map[string]openstack.Route{
		"next hop off every subnet": {Destination: "10.99.0.0/16", NextHop: "192.0.2.1"},
		"malformed destination":     {Destination: "not-a-cidr", NextHop: "10.254.0.3"},
	} {
		if _, err := n.AddRouterRoutes(ctx, w.vpnRouter.ID, []openstack.Route{rt}); !openstack.IsBadRequest(err) {
			t.Errorf("%s: want 400, got %v", name, err)
		}
	}
	if _, err := n.AddRouterRoutes(ctx, "00000000-0000-4000-8000-00000000dead", []openstack.Route{r1}); !openstack.IsNotFound(err) {
		t.Errorf("unknown router: %v", err)
	}
	if _, err := w.cust.Networking.AddRouterRoutes(ctx, w.vpnRouter.ID, []openstack.Route{r1}); !openstack.IsNotFound(err) {
		t.Errorf("customer routing on operator router: %v", err)
	}
	if c := w.srv.Counters(); c.ByRoute["PUT /network/v2.0/routers/{id}"] != 0 {
		t.Errorf("routes must go through add/remove_extraroutes, never a router update: %v", c.ByRoute)
	}
}

func TestConformanceConcurrentRoutesLoseNone(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	const perWriter = 50
	var wg sync.WaitGroup
	errs := make(chan error, 2*perWriter)
	for writer := range 2 {
		// Writer 0 shares the world's client (the seam must be safe for
		// concurrent reconcilers); writer 1 is a second client, as a second
		// operator replica would be.
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
}

// ---------------------------------------------------------------- RBAC

func TestConformanceRBAC(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	n := w.op.Networking
	pol := must(n.ShareNetwork(ctx, w.transit.ID, projCustomer)).get(t)

	for name, opts := range map[string]openstack.ListRBACPoliciesOpts{
		"by object":            {ObjectID: w.transit.ID},
		"by target":            {TargetProject: projCustomer},
		"by object and target": {ObjectID: w.transit.ID, TargetProject: projCustomer, Action: openstack.RBACActionAccessAsShared, ObjectType: openstack.RBACObjectNetwork},
	} {
		got := must(n.ListRBACPolicies(ctx, opts)).get(t)
		if len(got) != 1 || got[0].ID != pol.ID {
			t.Errorf("%s: %+v", name, got)
		}
	}
	if got := must(n.ListRBACPolicies(ctx, openstack.ListRBACPoliciesOpts{TargetProject: projOther})).get(t); len(got) != 0 {
		t.Errorf("policies for an unrelated project: %+v", got)
	}
	if _, err := n.ListRBACPolicies(ctx, openstack.ListRBACPoliciesOpts{}); !errors.Is(err, openstack.ErrUnfiltered) {
		t.Errorf("unfiltered RBAC list: %v", err)
	}

	_, err := n.ShareNetwork(ctx, w.transit.ID, projCustomer)
	if !openstack.IsConflict(err) || openstack.NeutronErrorType(err) != "DuplicateRbacPolicy" {
		t.Errorf("duplicate share: want 409 DuplicateRbacPolicy, got %v (type %q)", err, openstack.NeutronErrorType(err))
	}
	// The customer can see the network now but may not share it onwards.
	_, err = w.cust.Networking.ShareNetwork(ctx, w.transit.ID, projOther)
	if !openstack.IsForbidden(err) {
		t.Errorf("share by non-owner: want 403, got %v", err)
	}
	// The customer cannot see the operator's policy.
	if got := must(w.cust.Networking.ListRBACPolicies(ctx, openstack.ListRBACPoliciesOpts{ObjectID: w.transit.ID})).get(t); len(got) != 0 {
		t.Errorf("customer sees the owner's policies: %+v", got)
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
}

func TestConformanceUnshareRefusedWhileInUse(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	pol := must(w.op.Networking.ShareNetwork(ctx, w.transit.ID, projCustomer)).get(t)
	must(w.cust.Networking.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID})).get(t)
	if err := w.op.Networking.DeleteRBACPolicy(ctx, pol.ID); !openstack.IsConflict(err) {
		t.Errorf("unsharing a network the customer uses: want 409, got %v", err)
	}
}

// ---------------------------------------------------------------- Nova

func TestConformanceNovaAttachDetach(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	n, c := w.op.Networking, w.op.Compute
	wait := openstack.WaitOpts{Interval: 10 * time.Millisecond, Timeout: 30 * time.Second}
	p := w.transitPort(t, w.op, "gw-port", "10.254.0.40")

	before := must(c.ListServerInterfaces(ctx, serverA)).get(t)
	iface := must(c.AttachPort(ctx, serverA, p.ID)).get(t)
	if iface.PortID != p.ID {
		t.Errorf("attach answered %+v", iface)
	}
	attached := must(openstack.WaitForPortDevice(ctx, n, p.ID, serverA, wait)).get(t)
	if attached.DeviceID != serverA || !strings.HasPrefix(attached.DeviceOwner, "compute:") {
		t.Errorf("port after attach %+v", attached)
	}
	after := must(c.ListServerInterfaces(ctx, serverA)).get(t)
	if len(after) != len(before)+1 || !slices.ContainsFunc(after, func(i openstack.ServerInterface) bool {
		return i.PortID == p.ID && i.MACAddress == p.MACAddress && len(i.FixedIPs) == 1 && i.FixedIPs[0].IPAddress == "10.254.0.40"
	}) {
		t.Errorf("interfaces after attach %+v", after)
	}
	if ifs := w.srv.ServerInterfaces(serverA); !slices.Contains(ifs, p.ID) {
		t.Errorf("sim interfaces %+v", ifs)
	}

	// Moving nodes: the port is held by server A, so attaching it to B conflicts.
	if _, err := c.AttachPort(ctx, serverB, p.ID); !openstack.IsConflict(err) {
		t.Errorf("attach of a port in use: want 409, got %v", err)
	}

	if err := c.DetachPort(ctx, serverA, p.ID); err != nil {
		t.Fatal(err)
	}
	cleared := must(openstack.WaitForPortDevice(ctx, n, p.ID, "", wait)).get(t)
	if cleared.DeviceID != "" || cleared.DeviceOwner != "" {
		t.Errorf("port after detach %+v", cleared)
	}
	if got := must(c.ListServerInterfaces(ctx, serverA)).get(t); len(got) != len(before) {
		t.Errorf("interfaces after detach %+v", got)
	}
	// Now it can move.
	must(c.AttachPort(ctx, serverB, p.ID)).get(t)
	must(openstack.WaitForPortDevice(ctx, n, p.ID, serverB, wait)).get(t)

	if err := c.DetachPort(ctx, serverA, p.ID); !openstack.IsNotFound(err) {
		t.Errorf("detach from the wrong server: want 404, got %v", err)
	}
	if _, err := c.AttachPort(ctx, "00000000-0000-4000-8000-00000000dead", p.ID); !openstack.IsNotFound(err) {
		t.Errorf("unknown server: want 404, got %v", err)
	}
	if _, err := c.ListServerInterfaces(ctx, serverOther); !openstack.IsNotFound(err) {
		t.Errorf("another project's server: want 404, got %v", err)
	}
	if _, err := c.AttachPort(ctx, serverA, otherPortID); !openstack.IsNotFound(err) && !openstack.IsForbidden(err) && !openstack.IsBadRequest(err) {
		t.Errorf("another project's port: want a refusal, got %v", err)
	}
}

// Nova finishing in the background, as real clouds do: the API answers
// before device_id changes, and only the wait helper tells when it did.
func TestConformanceNovaAsync(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	n, c := w.op.Networking, w.op.Compute
	wait := openstack.WaitOpts{Interval: 10 * time.Millisecond, Timeout: 30 * time.Second}

	w.srv.SetNovaDelays(100*time.Millisecond, 100*time.Millisecond)
	p := w.transitPort(t, w.op, "async", "")
	must(c.AttachPort(ctx, serverA, p.ID)).get(t)
	if got := must(openstack.WaitForPortDevice(ctx, n, p.ID, serverA, wait)).get(t); got.DeviceID != serverA {
		t.Fatalf("after attach wait: %+v", got)
	}
	if err := c.DetachPort(ctx, serverA, p.ID); err != nil {
		t.Fatal(err)
	}
	if got := must(openstack.WaitForPortDevice(ctx, n, p.ID, "", wait)).get(t); got.DeviceID != "" {
		t.Fatalf("after detach wait: %+v", got)
	}

	// A Nova that never finishes: the wait gives up within its bound and
	// says so as a transient error.
	w.srv.SetNovaDelays(time.Hour, time.Hour)
	stuck := w.transitPort(t, w.op, "stuck", "")
	must(c.AttachPort(ctx, serverA, stuck.ID)).get(t)
	got, err := openstack.WaitForPortDevice(ctx, n, stuck.ID, serverA, openstack.WaitOpts{Interval: 10 * time.Millisecond, Timeout: 100 * time.Millisecond})
	if !errors.Is(err, openstack.ErrWaitTimeout) || !openstack.IsTransient(err) {
		t.Errorf("stuck attach: want ErrWaitTimeout, got %v", err)
	}
	if got == nil || got.DeviceID != "" {
		t.Errorf("stuck attach must return the last port read: %+v", got)
	}
}

// ---------------------------------------------------------------- accounting and faults

func TestConformanceReadOnlySequenceWritesNothing(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	owner := openstack.Owner{Kind: "IPsecGateway", Namespace: "ns", Name: "gw", UID: "uid-ro"}
	p := w.transitPort(t, w.op, "ro", "")
	must(w.op.Networking.CreateSecurityGroup(ctx, openstack.CreateSecurityGroupOpts{Name: "ro", Tags: owner.Tags()})).get(t)
	w.srv.ResetCounters()

	n := w.op.Networking
	// What a converged reconcile reads.
	must(n.GetNetwork(ctx, w.transit.ID)).get(t)
	must(n.GetSubnet(ctx, w.transitSub.ID)).get(t)
	must(n.ListPorts(ctx, openstack.ListPortsOpts{Tags: owner.Selector()})).get(t)
	must(n.GetPort(ctx, p.ID)).get(t)
	must(n.ListSecurityGroups(ctx, owner.Selector())).get(t)
	must(n.ListFloatingIPs(ctx, openstack.ListFloatingIPsOpts{PortID: p.ID})).get(t)
	must(n.GetRouter(ctx, w.vpnRouter.ID)).get(t)
	must(n.ResolveRouter(ctx, "shoot--services--svc01")).get(t)
	must(n.ListRouters(ctx, projOperator)).get(t)
	must(n.ListRBACPolicies(ctx, openstack.ListRBACPoliciesOpts{ObjectID: w.transit.ID})).get(t)
	must(w.op.Compute.ListServerInterfaces(ctx, serverA)).get(t)
	must(w.op.Identity.TokenInfo(ctx)).get(t)

	c := w.srv.Counters()
	if c.Writes != 0 {
		t.Errorf("read-only sequence wrote %d times: %v", c.Writes, c.ByRoute)
	}
	if c.Reads < 11 {
		t.Errorf("reads %d: the counters did not see the sequence (%v)", c.Reads, c.ByRoute)
	}
}

func TestConformanceFaults(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	n := w.op.Networking
	portPath := "/network/v2.0/ports/*"
	p := w.transitPort(t, w.op, "faulty", "")

	cases := []struct {
		name       string
		fault      sim.Fault
		retryAfter time.Duration
	}{
		{"500", sim.Fault{Method: "GET", PathPattern: portPath, Status: 500}, 0},
		{"502", sim.Fault{Method: "GET", PathPattern: portPath, Status: 502}, 0},
		{"503", sim.Fault{Method: "GET", PathPattern: portPath, Status: 503}, 0},
		{"429 with Retry-After", sim.Fault{Method: "GET", PathPattern: portPath, Status: 429, RetryAfter: 2 * time.Second}, 2 * time.Second},
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
		w.srv.Inject(sim.Fault{Method: "GET", PathPattern: portPath, Status: 503, Count: 1})
		if _, err := n.GetPort(ctx, p.ID); !openstack.IsTransient(err) {
			t.Errorf("first call: %v", err)
		}
		if _, err := n.GetPort(ctx, p.ID); err != nil {
			t.Errorf("second call: %v", err)
		}
	})

	t.Run("latency is observed", func(t *testing.T) {
		const lat = 200 * time.Millisecond
		remove := w.srv.Inject(sim.Fault{Method: "GET", PathPattern: portPath, Latency: lat})
		defer remove()
		start := time.Now()
		got, err := n.GetPort(ctx, p.ID)
		// A lower bound only: a slow machine can only make it longer.
		if err != nil || got.ID != p.ID || time.Since(start) < lat {
			t.Errorf("latency not applied: %v after %v", err, time.Since(start))
		}
	})

	t.Run("dropped connection", func(t *testing.T) {
		remove := w.srv.Inject(sim.Fault{Method: "POST", PathPattern: "/network/v2.0/ports", Drop: true})
		defer remove()
		_, err := n.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID})
		if err == nil || !openstack.IsTransient(err) || openstack.StatusCode(err) != 0 {
			t.Errorf("dropped create: want a transient transport error, got %v", err)
		}
	})

	t.Run("hung request hits the client timeout", func(t *testing.T) {
		short := must(openstack.NewClients(ctx, w.operatorCred, openstack.ClientOptions{Timeout: 300 * time.Millisecond})).get(t)
		remove := w.srv.Inject(sim.Fault{Method: "GET", PathPattern: portPath, Hang: true})
		defer remove()
		_, err := short.Networking.GetPort(ctx, p.ID)
		if err == nil || !openstack.IsTransient(err) {
			t.Errorf("hung request: want transient timeout, got %v", err)
		}
	})

	t.Run("refusals are not transient", func(t *testing.T) {
		remove := w.srv.Inject(sim.Fault{Method: "GET", PathPattern: portPath, Status: 403})
		defer remove()
		_, err := n.GetPort(ctx, p.ID)
		if !openstack.IsForbidden(err) || openstack.IsTransient(err) {
			t.Errorf("403: %v", err)
		}
	})

	if c := w.srv.Counters(); c.Faulted < 8 {
		t.Errorf("faulted requests counted: %d", c.Faulted)
	}
}

// ---------------------------------------------------------------- the example estate

// The sandbox's example estate, through the same credential paths the
// operator uses (an OS_* map as a Secret would hold, and clouds.yaml).
func TestConformanceExampleEstate(t *testing.T) {
	const path = "../../examples/sim-estate.yaml"
	seed, err := sim.LoadSeed(path)
	if err != nil {
		t.Fatalf("the example estate %s does not load: %v", path, err)
	}
	srv, err := sim.Start(seed)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := ctxT(t)
	opts := openstack.ClientOptions{Timeout: 10 * time.Second}
	project := func(name string) string {
		p, ok := srv.ProjectByName(name)
		if !ok {
			t.Fatalf("estate lacks project %q", name)
		}
		return p.ID
	}

	fromEnv := func(name string) *openstack.Clients {
		id, secret, ok := srv.AppCredential(name)
		if !ok {
			t.Fatalf("estate lacks application credential %q", name)
		}
		secretData := map[string]string{
			openstack.EnvAuthURL: srv.AuthURL() + "/", openstack.EnvRegionName: srv.Region(),
			openstack.EnvAppCredentialID: id, openstack.EnvAppCredentialSecret: secret + "\n",
		}
		cred := must(openstack.CredentialFromEnv(func(k string) string { return secretData[k] })).get(t)
		return must(openstack.NewClients(ctx, cred, opts)).get(t)
	}

	cases := []struct {
		cred, project string
		wantRole      string
		notRole       string
	}{
		{"vpn-operator", "vpn-operator", "member", "load-balancer_member"}, // app credential narrower than its user
		{"vpn-operator-readonly", "vpn-operator", "reader", "member"},
		{"customer-diehl", "customer-diehl", "member", "admin"},
		{"admin", "admin", "admin", ""},
	}
	for _, tc := range cases {
		t.Run("token/"+tc.cred, func(t *testing.T) {
			info := must(fromEnv(tc.cred).Identity.TokenInfo(ctx)).get(t)
			if info.ProjectID != project(tc.project) || !slices.Contains(info.Roles, tc.wantRole) ||
				(tc.notRole != "" && slices.Contains(info.Roles, tc.notRole)) {
				t.Errorf("token info %+v", info)
			}
		})
	}

	op := fromEnv("vpn-operator")
	transit := must(op.Networking.ResolveNetwork(ctx, "vpn-transit")).get(t)
	vpn01 := must(op.Networking.ResolveRouter(ctx, "shoot--services--vpn01")).get(t)
	must(op.Networking.ResolveRouter(ctx, "shoot--services--svc01")).get(t)
	legs := must(op.Networking.ListPorts(ctx, openstack.ListPortsOpts{NetworkID: transit.ID, DeviceID: vpn01.ID})).get(t)
	if len(legs) != 1 || legs[0].FixedIPOn("") != "10.254.0.1" {
		t.Errorf("gateway router leg on transit: %+v", legs)
	}
	if _, err := fromEnv("customer-diehl").Networking.ResolveRouter(ctx, "shoot--diehl--diehl01"); err != nil {
		t.Errorf("customer router: %v", err)
	}
	if _, err := op.Networking.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: transit.ID, SubnetID: transit.Subnets[0], IPAddress: "10.254.0.2"}); !openstack.IsConflict(err) {
		t.Errorf("the DHCP port's address: want 409, got %v", err)
	}

	t.Run("reader credential may not write", func(t *testing.T) {
		ro := fromEnv("vpn-operator-readonly")
		if _, err := ro.Networking.GetNetwork(ctx, transit.ID); err != nil {
			t.Errorf("reader read: %v", err)
		}
		_, err := ro.Networking.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: transit.ID})
		if !openstack.IsForbidden(err) {
			t.Errorf("reader write: want 403, got %v", err)
		}
	})

	t.Run("clouds.yaml", func(t *testing.T) {
		t.Setenv("OS_REGION_NAME", "")
		t.Setenv("OS_INTERFACE", "")
		id, secret, _ := srv.AppCredential("vpn-operator")
		doc := fmt.Sprintf("clouds:\n  sim:\n    auth:\n      auth_url: %s\n      application_credential_id: %s\n      application_credential_secret: %s\n    region_name: %s\n",
			srv.AuthURL(), id, secret, srv.Region())
		cred := must(openstack.CredentialFromCloudsYAML([]byte(doc), "sim")).get(t)
		c := must(openstack.NewClients(ctx, cred, opts)).get(t)
		if info := must(c.Identity.TokenInfo(ctx)).get(t); info.ProjectID != project("vpn-operator") {
			t.Errorf("clouds.yaml client scoped to %q", info.ProjectID)
		}
	})
}
