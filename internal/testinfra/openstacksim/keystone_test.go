package openstacksim

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/tokens"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
)

func TestAppCredentialTokenCarriesProjectRolesAndCatalog(t *testing.T) {
	s := startEstate(t)
	c := login(t, s, "vpn-operator")
	res, ok := c.provider.GetAuthResult().(tokens.CreateResult)
	if !ok {
		t.Fatalf("auth result is %T", c.provider.GetAuthResult())
	}
	proj := must[*tokens.Project](t)(res.ExtractProject())
	want, _ := s.ProjectByName("vpn-operator")
	if proj.ID != want.ID || proj.Name != "vpn-operator" {
		t.Fatalf("project = %+v, want %+v", proj, want)
	}
	roles := must[[]tokens.Role](t)(res.ExtractRoles())
	// Exactly the application credential's roles (examples/sim-estate.yaml), not the
	// user's load-balancer_member.
	if len(roles) != 2 || roles[0].Name != "member" || roles[1].Name != "reader" || roles[0].ID == "" {
		t.Fatalf("roles = %+v", roles)
	}
	tok := must[*tokens.Token](t)(res.ExtractToken())
	if tok.ExpiresAt.IsZero() || tok.ID == "" {
		t.Fatalf("token = %+v", tok)
	}
	if got := c.network.Endpoint; got != s.URL()+"/network/" {
		t.Fatalf("network endpoint %q", got)
	}
	if got := c.network.ResourceBase; got != s.URL()+"/network/v2.0/" {
		t.Fatalf("network resource base %q", got)
	}
	if got := c.compute.Endpoint; got != s.URL()+"/compute/v2.1/" {
		t.Fatalf("compute endpoint %q", got)
	}
	// The internal interface is published too.
	if _, err := openstack.NewNetworkV2(c.provider, gophercloud.EndpointOpts{Region: s.Region(), Availability: gophercloud.AvailabilityInternal}); err != nil {
		t.Fatal(err)
	}
	// A wrong region has no endpoint.
	if _, err := openstack.NewNetworkV2(c.provider, gophercloud.EndpointOpts{Region: "Elsewhere"}); err == nil {
		t.Fatal("endpoint found for unknown region")
	}
}

func TestTokenValidation(t *testing.T) {
	s := startEstate(t)
	c := login(t, s, "vpn-operator")
	idc := must[*gophercloud.ServiceClient](t)(openstack.NewIdentityV3(c.provider, gophercloud.EndpointOpts{}))
	own := c.provider.Token()
	got := tokens.Get(ctx(), idc, own)
	if got.Err != nil {
		t.Fatalf("validate own token: %v", got.Err)
	}
	if p := must[*tokens.Project](t)(got.ExtractProject()); p.Name != "vpn-operator" {
		t.Fatalf("validated project %q", p.Name)
	}
	wantErr(t, tokens.Get(ctx(), idc, "gAAAAnot-a-token").Err, 404, "Could not find token")
	valid, err := tokens.Validate(ctx(), idc, own)
	if err != nil || !valid {
		t.Fatalf("Validate = %v, %v", valid, err)
	}
	valid, err = tokens.Validate(ctx(), idc, "bogus")
	if err != nil || valid {
		t.Fatalf("Validate(bogus) = %v, %v", valid, err)
	}
}

func TestAuthRefusals(t *testing.T) {
	seed := must[*Seed](t)(LoadSeed(estatePath))
	seed.Users = append(seed.Users, SeedUser{Name: "human", Project: "vpn-operator", Roles: []string{"member"},
		Password: "pw-human", AllowPassword: true})
	seed.Users[1].Password = "pw-never-usable" // vpn-operator: application credentials only
	s, err := Start(seed)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	auth := func(o gophercloud.AuthOptions) error {
		o.IdentityEndpoint = s.AuthURL()
		_, err := openstack.AuthenticatedClient(ctx(), o)
		return err
	}
	id, _, _ := s.AppCredential("vpn-operator")
	wantErr(t, auth(gophercloud.AuthOptions{ApplicationCredentialID: id, ApplicationCredentialSecret: "wrong"}), 401, "requires authentication")
	wantErr(t, auth(gophercloud.AuthOptions{Username: "vpn-operator", Password: "pw-never-usable", DomainName: "Default",
		TenantName: "vpn-operator"}), 401, "requires authentication")
	if err := auth(gophercloud.AuthOptions{Username: "human", Password: "pw-human", DomainName: "Default",
		TenantName: "vpn-operator"}); err != nil {
		t.Fatalf("password user: %v", err)
	}
	wantErr(t, auth(gophercloud.AuthOptions{Username: "human", Password: "nope", DomainName: "Default"}), 401, "requires authentication")
	// Application credential by name and user.
	_, secret, _ := s.AppCredential("vpn-operator")
	if err := auth(gophercloud.AuthOptions{ApplicationCredentialName: "vpn-operator", ApplicationCredentialSecret: secret,
		Username: "vpn-operator", DomainName: "Default"}); err != nil {
		t.Fatalf("app credential by name: %v", err)
	}
}

func TestNeutronAndNovaRequireAValidToken(t *testing.T) {
	s := startEstate(t)
	for _, path := range []string{"/network/v2.0/ports", "/compute/v2.1/servers/11111111-1111-4111-8111-111111111111"} {
		for _, tok := range []string{"", "gAAAAforged"} {
			req, _ := http.NewRequest("GET", s.URL()+path, nil)
			if tok != "" {
				req.Header.Set("X-Auth-Token", tok)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), s.AuthURL()) {
				t.Fatalf("%s with token %q: %d %s", path, tok, resp.StatusCode, body)
			}
		}
	}
	// Through gophercloud without reauth: a stale token is a 401 error.
	c := login(t, s, "vpn-operator")
	pc := *c.provider
	pc.ReauthFunc = nil
	pc.SetToken("gAAAAstale")
	nc := *c.network
	nc.ProviderClient = &pc
	_, err := ports.Get(ctx(), &nc, "x").Extract()
	wantErr(t, err, 401, "requires authentication")

	// With reauth, an expired token is renewed transparently.
	s.ExpireTokens()
	if _, err := ports.List(c.network, ports.ListOpts{NetworkID: "none"}).AllPages(ctx()); err != nil {
		t.Fatalf("after token expiry: %v", err)
	}
	if n := s.Counters().Tokens; n < 2 {
		t.Fatalf("expected a re-authentication, tokens issued = %d", n)
	}
}

func TestReaderRoleCannotWrite(t *testing.T) {
	s := startEstate(t)
	c := login(t, s, "vpn-operator-readonly")
	transit, _ := s.NetworkByName("vpn-transit")
	_, err := ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: transit.ID}).Extract()
	wantErr(t, err, 403, "PolicyNotAuthorized")
	all := must[[]ports.Port](t)(extractPorts(c, ports.ListOpts{NetworkID: transit.ID}))
	if !slices.ContainsFunc(all, func(p ports.Port) bool { return p.DeviceOwner == "network:dhcp" }) {
		t.Fatalf("reader should see the transit ports, got %d", len(all))
	}
}

func extractPorts(c clients, o ports.ListOpts) ([]ports.Port, error) {
	pages, err := ports.List(c.network, o).AllPages(ctx())
	if err != nil {
		return nil, err
	}
	return ports.ExtractPorts(pages)
}
