package openstack_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

// A Neutron without an extension the operator cannot do without is refused, naming
// every missing one; one with neither extraroute-atomic nor revision-if-match too.
func TestDiscoverFeaturesRefusesMissingExtensions(t *testing.T) {
	drop := func(from []string, gone ...string) []string {
		return slices.DeleteFunc(slices.Clone(from), func(a string) bool { return slices.Contains(gone, a) })
	}
	cases := []struct {
		name    string
		exts    []string
		missing []string
	}{
		{"no tags, no RBAC", drop(openstacksim.ZedNeutronExtensions, "standard-attr-tag", "rbac-policies"), []string{"standard-attr-tag", "rbac-policies"}},
		{"no way to change routes safely", drop(openstacksim.ZedNeutronExtensions, "extraroute-atomic", "revision-if-match"), []string{"extraroute-atomic (or revision-if-match)"}},
		{"no allowed-address pairs", drop(openstacksim.DefaultNeutronExtensions, "allowed-address-pairs"), []string{"allowed-address-pairs"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seed, err := openstacksim.LoadSeed(conformanceEstate)
			if err != nil {
				t.Fatal(err)
			}
			seed.NeutronExtensions = tc.exts
			srv, err := openstacksim.Start(seed)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			id, secret, _ := srv.AppCredential("cf-operator")
			c := must(openstack.NewClients(ctxT(t), openstack.Credential{AuthURL: srv.AuthURL(), Region: srv.Region(),
				AppCredentialID: id, AppCredentialSecret: secret}, openstack.ClientOptions{Timeout: 10 * time.Second})).get(t)
			f, err := openstack.DiscoverFeatures(ctxT(t), c.Networking)
			if !errors.Is(err, openstack.ErrMissingExtensions) {
				t.Fatalf("want ErrMissingExtensions, got %v", err)
			}
			if !slices.Equal(f.Missing(), tc.missing) {
				t.Errorf("missing %v, want %v", f.Missing(), tc.missing)
			}
			for _, m := range tc.missing {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("the error %q does not name %s", err, m)
				}
			}
		})
	}
}
