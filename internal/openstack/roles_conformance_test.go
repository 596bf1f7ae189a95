package openstack_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"bnerd.net/vpn-operator/internal/openstack"
)

// policyKind is how a target's policy treats a project's roles.
type policyKind int

const (
	// legacyKind: Zed's shipped defaults: any role of the project reads and writes.
	legacyKind policyKind = iota
	// readerOnlyRefusedKind: the "sim" shape: a token whose only role is reader may not
	// write; every other token may read and write.
	readerOnlyRefusedKind
	// secureRBACKind: the secure-RBAC defaults in full (2025.1): reader reads, member
	// writes; Keystone puts the roles member implies (reader) into the token.
	secureRBACKind
)

func policyOf(target string) policyKind {
	switch {
	case legacyPolicy(target):
		return legacyKind
	case target == targetSim2025 || target == targetReal25:
		return secureRBACKind
	default:
		return readerOnlyRefusedKind
	}
}

// What a credential with one role does, operation by operation, for the operator's
// project and a customer's: the reads and writes the operator makes, and the look at
// the project's own default security group the operator's role check relies on
// (openstack.ProbeOwnProject). The assertions are one table keyed by the target's
// policy. Under Zed's legacy defaults any role alone does everything. Under 2025.1's
// secure-RBAC defaults reader alone cannot write, and a role that is neither member nor
// reader (load-balancer_member) sees nothing of its own project: a lookup by name finds
// nothing, Nova refuses the read; member alone does everything there, because 2025.1's
// Keystone puts the reader that member implies into the token (Zed's did not: on a Zed
// cloud with the secure-RBAC defaults switched on, member alone reads nothing).
func TestConformanceLeastRoles(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		kind := policyOf(w.target)
		type op struct {
			name string
			run  func(c *openstack.Clients) error
		}
		readNetwork := op{"resolve its network", func(c *openstack.Clients) error {
			_, err := c.Networking.ResolveNetwork(ctx, "vpn-transit")
			return err
		}}
		readRouter := op{"resolve its router", func(c *openstack.Clients) error {
			_, err := c.Networking.ResolveRouter(ctx, "shoot--diehl--diehl01")
			return err
		}}
		readNova := op{"list a server's interfaces", func(c *openstack.Clients) error {
			_, err := c.Compute.ListServerInterfaces(ctx, w.serverA)
			return err
		}}
		probe := op{"see its default security group", func(c *openstack.Clients) error {
			info, err := c.Identity.TokenInfo(ctx)
			if err != nil {
				return err
			}
			return openstack.ProbeOwnProject(ctx, c.Networking, info.ProjectID)
		}}
		writeSG := func(cleanup *openstack.Clients) op {
			return op{"create a security group", func(c *openstack.Clients) error {
				g, err := c.Networking.CreateSecurityGroup(ctx, openstack.CreateSecurityGroupOpts{Name: "least-roles",
					Tags: openstack.Owner{Kind: "Test", Name: "least-roles", UID: "uid-least-roles"}.Tags()})
				if err == nil {
					_ = cleanup.Networking.DeleteSecurityGroup(context.Background(), g.ID)
				}
				return err
			}}
		}
		writePort := op{"create a port", func(c *openstack.Clients) error {
			p, err := c.Networking.CreatePort(ctx, openstack.CreatePortOpts{NetworkID: w.transit.ID, Name: "least-roles",
				Tags: openstack.Owner{Kind: "Test", Name: "least-roles-port", UID: "uid-least-roles-port"}.Tags()})
			if err == nil {
				_ = w.op.Networking.DeletePort(context.Background(), p.ID)
			}
			return err
		}}
		cases := []struct {
			cred string
			ops  []op
			// per policy kind, per op
			want map[policyKind][]verdict
		}{
			{"cf-operator-member-only", []op{readNetwork, readNova, probe, writeSG(w.op), writePort}, map[policyKind][]verdict{
				legacyKind:            {ok, ok, ok, ok, ok},
				readerOnlyRefusedKind: {ok, ok, ok, ok, ok},
				secureRBACKind:        {ok, ok, ok, ok, ok},
			}},
			{"cf-operator-lb-only", []op{readNetwork, readNova, probe, writeSG(w.op), writePort}, map[policyKind][]verdict{
				legacyKind:            {ok, ok, ok, ok, ok},
				readerOnlyRefusedKind: {ok, ok, ok, ok, ok},
				secureRBACKind:        {notFound, forbidden, notFound, forbidden, forbidden},
			}},
			{"cf-operator-reader-only", []op{readNetwork, readNova, probe, writeSG(w.op), writePort}, map[policyKind][]verdict{
				legacyKind:            {ok, ok, ok, ok, ok},
				readerOnlyRefusedKind: {ok, ok, ok, forbidden, forbidden},
				secureRBACKind:        {ok, ok, ok, forbidden, forbidden},
			}},
			{"cf-customer-member-only", []op{readRouter, probe, writeSG(w.cust)}, map[policyKind][]verdict{
				legacyKind:            {ok, ok, ok},
				readerOnlyRefusedKind: {ok, ok, ok},
				secureRBACKind:        {ok, ok, ok},
			}},
			{"cf-customer-reader-only", []op{readRouter, probe, writeSG(w.cust)}, map[policyKind][]verdict{
				legacyKind:            {ok, ok, ok},
				readerOnlyRefusedKind: {ok, ok, forbidden},
				secureRBACKind:        {ok, ok, forbidden},
			}},
		}
		for _, tc := range cases {
			t.Run(tc.cred, func(t *testing.T) {
				c := must(openstack.NewClients(ctx, w.cred(t, tc.cred), w.clientOpts)).get(t)
				// Whether the token carries the reader a member role implies.
				info := must(c.Identity.TokenInfo(ctx)).get(t)
				implied := slices.Contains(info.Roles, "member") && slices.Contains(info.Roles, "reader")
				if want := kind == secureRBACKind && strings.HasSuffix(tc.cred, "-member-only"); implied != want {
					t.Errorf("token roles %v: reader implied by member %v, want %v", info.Roles, implied, want)
				}
				for i, o := range tc.ops {
					err := o.run(c)
					var got verdict
					switch {
					case err == nil:
						got = ok
					case openstack.IsNotFound(err):
						got = notFound
					case openstack.IsForbidden(err):
						got = forbidden
					default:
						t.Errorf("%s: %v", o.name, err)
						continue
					}
					if exp := tc.want[kind][i]; got != exp {
						t.Errorf("%s: got %s (%v), want %s", o.name, got, err, exp)
					}
				}
			})
		}
	})
}

// verdict is how an operation ended: done, not found (hidden) or refused by policy.
type verdict int

const (
	ok verdict = iota
	notFound
	forbidden
)

func (v verdict) String() string { return [...]string{"ok", "not found", "forbidden"}[v] }
