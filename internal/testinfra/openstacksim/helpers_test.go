package openstacksim

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
)

const estatePath = "../../../examples/sim-estate.yaml"

// startEstate runs the example estate, with the route limit lifted unless
// a test sets its own.
func startEstate(t testing.TB) *Server {
	t.Helper()
	seed, err := LoadSeed(estatePath)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

type clients struct {
	provider *gophercloud.ProviderClient
	network  *gophercloud.ServiceClient
	compute  *gophercloud.ServiceClient
}

// login authenticates a seeded application credential the way the
// operator does and builds Neutron and Nova clients from the catalog.
func login(t testing.TB, s *Server, cred string) clients {
	t.Helper()
	id, secret, ok := s.AppCredential(cred)
	if !ok {
		t.Fatalf("no application credential %q", cred)
	}
	pc, err := openstack.AuthenticatedClient(context.Background(), gophercloud.AuthOptions{
		IdentityEndpoint:            s.AuthURL(),
		ApplicationCredentialID:     id,
		ApplicationCredentialSecret: secret,
		AllowReauth:                 true,
	})
	if err != nil {
		t.Fatalf("authenticate %s: %v", cred, err)
	}
	eo := gophercloud.EndpointOpts{Region: s.Region()}
	nc, err := openstack.NewNetworkV2(pc, eo)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := openstack.NewComputeV2(pc, eo)
	if err != nil {
		t.Fatal(err)
	}
	return clients{provider: pc, network: nc, compute: cc}
}

// wantErr asserts an HTTP status and that the body names the expected
// error type (Neutron's "type", Nova's top-level key).
func wantErr(t testing.TB, err error, status int, bodyContains string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want HTTP %d (%s), got success", status, bodyContains)
	}
	if !gophercloud.ResponseCodeIs(err, status) {
		t.Fatalf("want HTTP %d, got %v", status, err)
	}
	var ue gophercloud.ErrUnexpectedResponseCode
	if !errors.As(err, &ue) {
		t.Fatalf("not an HTTP status error: %v", err)
	}
	if !strings.Contains(string(ue.Body), bodyContains) {
		t.Fatalf("want body containing %q, got %s", bodyContains, ue.Body)
	}
}

func must[T any](t testing.TB) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func ok(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ctx() context.Context { return context.Background() }
