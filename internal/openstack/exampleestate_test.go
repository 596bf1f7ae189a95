package openstack_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

// The sandbox's example estate (examples/sim-estate.yaml), through the same credential
// paths the operator uses (an OS_* map as a Secret would hold, and clouds.yaml). On
// the real target it is the estate hack/openstack.sh seeded from that same file.
func TestConformanceExampleEstate(t *testing.T) {
	for _, tg := range activeTargets() {
		t.Run(tg.name, func(t *testing.T) {
			// Not in parallel: the clouds.yaml subtest sets the environment.
			o := outcome{ran: true}
			defer func() {
				o.failed, o.skipped = t.Failed(), t.Skipped()
				record("TestConformanceExampleEstate", tg.name, o)
			}()
			if tg.err != nil {
				t.Fatal(tg.err)
			}
			exampleEstate(t, tg.name)
		})
	}
}

func exampleEstate(t *testing.T, target string) {
	ctx := ctxT(t)
	opts := openstack.ClientOptions{Timeout: 60 * time.Second}
	var (
		cred    func(name string) openstack.Credential
		project func(name string) string
	)
	if isReal(target) {
		cloud := realCloud(t, target)
		cred = func(name string) openstack.Credential {
			c, err := cloud.Credential(name)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		project = func(name string) string {
			id, err := cloud.ID("projects", name)
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
	} else {
		seed, err := openstacksim.LoadSeed("../../examples/sim-estate.yaml")
		if err != nil {
			t.Fatal(err)
		}
		shape(seed, target)
		srv, err := openstacksim.Start(seed)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Close)
		cred = func(name string) openstack.Credential {
			id, secret, ok := srv.AppCredential(name)
			if !ok {
				t.Fatalf("estate lacks application credential %q", name)
			}
			return openstack.Credential{AuthURL: srv.AuthURL(), Region: srv.Region(), AppCredentialID: id, AppCredentialSecret: secret}
		}
		project = func(name string) string {
			p, ok := srv.ProjectByName(name)
			if !ok {
				t.Fatalf("estate lacks project %q", name)
			}
			return p.ID
		}
	}

	fromEnv := func(name string) *openstack.Clients {
		c := cred(name)
		secretData := map[string]string{
			openstack.EnvAuthURL: c.AuthURL + "/", openstack.EnvRegionName: c.Region,
			openstack.EnvAppCredentialID: c.AppCredentialID, openstack.EnvAppCredentialSecret: c.AppCredentialSecret + "\n",
		}
		parsed := must(openstack.CredentialFromEnv(func(k string) string { return secretData[k] })).get(t)
		return must(openstack.NewClients(ctx, parsed, opts)).get(t)
	}

	cases := []struct {
		cred, project string
		wantRole      string
		notRole       string
	}{
		{"vpn-operator", "vpn-operator", "member", "load-balancer_member"}, // application credential narrower than its user
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

	// Whether a reader-only credential may write is the policy's call: Zed's shipped
	// defaults let any role in the project write; the secure-RBAC defaults of newer
	// releases refuse (the operator never relies on either).
	t.Run("reader credential writes only under the legacy policy", func(t *testing.T) {
		ro := fromEnv("vpn-operator-readonly")
		if _, err := ro.Networking.GetNetwork(ctx, transit.ID); err != nil {
			t.Errorf("reader read: %v", err)
		}
		p, err := ro.Networking.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: transit.ID, Name: "reader-wrote-this"})
		if err == nil {
			_ = op.Networking.DeletePort(context.Background(), p.ID)
		}
		if legacyPolicy(target) && err != nil {
			t.Errorf("reader write under the legacy policy: %v", err)
		}
		if !legacyPolicy(target) && !openstack.IsForbidden(err) {
			t.Errorf("reader write under the secure-RBAC policy: want 403, got %v", err)
		}
	})

	t.Run("clouds.yaml", func(t *testing.T) {
		t.Setenv("OS_REGION_NAME", "")
		t.Setenv("OS_INTERFACE", "")
		c := cred("vpn-operator")
		doc := fmt.Sprintf("clouds:\n  sim:\n    auth:\n      auth_url: %s\n      application_credential_id: %s\n      application_credential_secret: %s\n    region_name: %s\n",
			c.AuthURL, c.AppCredentialID, c.AppCredentialSecret, c.Region)
		parsed := must(openstack.CredentialFromCloudsYAML([]byte(doc), "sim")).get(t)
		cl := must(openstack.NewClients(ctx, parsed, opts)).get(t)
		if info := must(cl.Identity.TokenInfo(ctx)).get(t); info.ProjectID != project("vpn-operator") {
			t.Errorf("clouds.yaml client scoped to %q", info.ProjectID)
		}
	})
}
