package openstack_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/gophercloud/gophercloud/v2"
	gcos "github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/attachinterfaces"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/rbacpolicies"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"

	"bnerd.net/vpn-operator/internal/testinfra/realstack"
)

// adminFIPDescription marks the floating IPs the suite makes as an admin.
const adminFIPDescription = "bnerd-vpn-operator conformance suite"

// sweeper puts the real conformance estate (the cf- projects) back as the seeding left
// it: no interfaces on its servers, no routes, no router interfaces or routers the
// seeding did not make, no floating IPs, RBAC policies, extra ports or security
// groups. It works as an admin with gophercloud directly, so it does not depend on the
// seam it helps to test, and it reads each collection once (an admin sees every
// project's objects) to stay cheap between tests.
type sweeper struct {
	nc, cc   *gophercloud.ServiceClient
	projects []string
	servers  []string
	routers  []string // seeded
	ports    []string // seeded
	networks []string
	gateways map[string]string // seeded subnet -> gateway IP
	admin    string
}

// sweepers: one per real OpenStack, made on its first sweep.
var (
	sweepMu  sync.Mutex
	sweepers = map[*realstack.Cloud]*sweeper{}
)

func newSweeper(ctx context.Context, c *realstack.Cloud) (*sweeper, error) {
	cred, err := c.Credential("cf-admin")
	if err != nil {
		return nil, err
	}
	provider, err := gcos.AuthenticatedClient(ctx, gophercloud.AuthOptions{IdentityEndpoint: cred.AuthURL,
		ApplicationCredentialID: cred.AppCredentialID, ApplicationCredentialSecret: cred.AppCredentialSecret, AllowReauth: true})
	if err != nil {
		return nil, err
	}
	eo := gophercloud.EndpointOpts{Region: "RegionOne"}
	s := &sweeper{gateways: map[string]string{}}
	if s.nc, err = gcos.NewNetworkV2(provider, eo); err != nil {
		return nil, err
	}
	if s.cc, err = gcos.NewComputeV2(provider, eo); err != nil {
		return nil, err
	}
	s.projects = mapValues(c.IDs("projects", "cf-"))
	s.servers = mapValues(c.IDs("servers", "cf-"))
	s.routers = mapValues(c.IDs("routers", "cf-"))
	s.ports = mapValues(c.IDs("ports", "cf-"))
	s.networks = mapValues(c.IDs("networks", "cf-"))
	s.admin, _ = c.ID("projects", "admin")
	for _, id := range c.IDs("subnets", "cf-") {
		sn, err := subnets.Get(ctx, s.nc, id).Extract()
		if err != nil {
			return nil, err
		}
		s.gateways[sn.ID] = sn.GatewayIP
	}
	return s, nil
}

func sweepReal(ctx context.Context, c *realstack.Cloud) error {
	sweepMu.Lock()
	s := sweepers[c]
	if s == nil {
		var err error
		if s, err = newSweeper(ctx, c); err != nil {
			sweepMu.Unlock()
			return err
		}
		sweepers[c] = s
	}
	sweepMu.Unlock()
	return s.sweep(ctx)
}

func (s *sweeper) sweep(ctx context.Context) error {
	var errs []error
	keep := func(err error) {
		if err != nil && !gophercloud.ResponseCodeIs(err, 404) {
			errs = append(errs, err)
		}
	}
	ours := func(project string) bool { return slices.Contains(s.projects, project) }

	pages, err := ports.List(s.nc, ports.ListOpts{}).AllPages(ctx)
	if err != nil {
		return err
	}
	allPorts, _ := ports.ExtractPorts(pages)

	// Servers: unplug what is attached (Nova clears device_id in the background; the
	// port goes below anyway).
	for _, p := range allPorts {
		if slices.Contains(s.servers, p.DeviceID) {
			keep(attachinterfaces.Delete(ctx, s.cc, p.DeviceID, p.ID).ExtractErr())
		}
	}
	// Floating IPs of the cf projects, and those an admin pinned for the suite.
	if pages, err := floatingips.List(s.nc, floatingips.ListOpts{}).AllPages(ctx); err == nil {
		fips, _ := floatingips.ExtractFloatingIPs(pages)
		for _, f := range fips {
			if ours(f.ProjectID) || (f.ProjectID == s.admin && f.Description == adminFIPDescription) {
				keep(floatingips.Delete(ctx, s.nc, f.ID).ExtractErr())
			}
		}
	} else {
		keep(err)
	}
	// Routers: no routes, only the seeded interfaces, only the seeded routers.
	pages, err = routers.List(s.nc, routers.ListOpts{}).AllPages(ctx)
	if err != nil {
		return err
	}
	rs, _ := routers.ExtractRouters(pages)
	removed := map[string]bool{}
	for _, r := range rs {
		if !ours(r.ProjectID) {
			continue
		}
		if len(r.Routes) > 0 {
			none := []routers.Route{}
			_, err := routers.Update(ctx, s.nc, r.ID, routers.UpdateOpts{Routes: &none}).Extract()
			keep(err)
		}
		seeded := slices.Contains(s.routers, r.ID)
		for _, leg := range allPorts {
			if leg.DeviceID != r.ID || leg.DeviceOwner != "network:router_interface" {
				continue
			}
			if seeded && len(leg.FixedIPs) == 1 && s.gateways[leg.FixedIPs[0].SubnetID] == leg.FixedIPs[0].IPAddress {
				continue
			}
			_, err := routers.RemoveInterface(ctx, s.nc, r.ID, routers.RemoveInterfaceOpts{PortID: leg.ID}).Extract()
			keep(err)
			removed[leg.ID] = true
		}
		if !seeded {
			keep(routers.Delete(ctx, s.nc, r.ID).ExtractErr())
		}
	}
	// Ports the tests made: in the cf projects, or anyone's on a cf network.
	for _, p := range allPorts {
		if removed[p.ID] || slices.Contains(s.ports, p.ID) || strings.HasPrefix(p.DeviceOwner, "network:") {
			continue
		}
		if ours(p.ProjectID) || slices.Contains(s.networks, p.NetworkID) {
			keep(ports.Delete(ctx, s.nc, p.ID).ExtractErr())
		}
	}
	if pages, err := rbacpolicies.List(s.nc, rbacpolicies.ListOpts{ObjectType: "network"}).AllPages(ctx); err == nil {
		ps, _ := rbacpolicies.ExtractRBACPolicies(pages)
		for _, p := range ps {
			if slices.Contains(s.networks, p.ObjectID) {
				keep(rbacpolicies.Delete(ctx, s.nc, p.ID).ExtractErr())
			}
		}
	} else {
		keep(err)
	}
	if pages, err := groups.List(s.nc, groups.ListOpts{}).AllPages(ctx); err == nil {
		gs, _ := groups.ExtractGroups(pages)
		for _, g := range gs {
			if ours(g.ProjectID) && g.Name != "default" {
				keep(groups.Delete(ctx, s.nc, g.ID).ExtractErr())
			}
		}
	} else {
		keep(err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("sweep: %w", errors.Join(errs...))
	}
	return nil
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}
