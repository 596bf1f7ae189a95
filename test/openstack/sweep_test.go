package realopenstack

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/gophercloud/gophercloud/v2"
	gcos "github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/attachinterfaces"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/rbacpolicies"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"

	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/realstack"
)

// sweepEstate removes what an earlier, interrupted run left in the example estate's
// projects: objects carrying the operator's tag, routes on the estate's routers and
// RBAC shares of the transit network. It works as the estate's admin, with gophercloud
// directly, and says what it removed; a clean estate costs a few reads.
func sweepEstate(ctx context.Context, c *realstack.Cloud) ([]string, error) {
	cred, err := c.Credential("admin")
	if err != nil {
		return nil, err
	}
	provider, err := gcos.AuthenticatedClient(ctx, gophercloud.AuthOptions{IdentityEndpoint: cred.AuthURL,
		ApplicationCredentialID: cred.AppCredentialID, ApplicationCredentialSecret: cred.AppCredentialSecret})
	if err != nil {
		return nil, err
	}
	eo := gophercloud.EndpointOpts{Region: "RegionOne"}
	nc, err := gcos.NewNetworkV2(provider, eo)
	if err != nil {
		return nil, err
	}
	cc, err := gcos.NewComputeV2(provider, eo)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	keep := func(what string, err error) {
		switch {
		case err == nil:
			removed = append(removed, what)
		case !gophercloud.ResponseCodeIs(err, 404):
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	projects := map[string]bool{}
	for _, name := range []string{"vpn-operator", "customer-diehl"} {
		if id, err := c.ID("projects", name); err == nil {
			projects[id] = true
		}
	}
	for key, id := range c.IDs("routers", "") {
		if strings.HasPrefix(key, "cf-") {
			continue
		}
		r, err := routers.Get(ctx, nc, id).Extract()
		if err != nil {
			return nil, err
		}
		if len(r.Routes) > 0 {
			none := []routers.Route{}
			_, err := routers.Update(ctx, nc, id, routers.UpdateOpts{Routes: &none}).Extract()
			keep(fmt.Sprintf("routes %v of %s", r.Routes, key), err)
		}
	}
	pages, err := ports.List(nc, ports.ListOpts{Tags: openstack.TagManaged}).AllPages(ctx)
	if err != nil {
		return nil, err
	}
	tagged, _ := ports.ExtractPorts(pages)
	for _, p := range tagged {
		if !projects[p.ProjectID] {
			continue
		}
		switch {
		case p.DeviceOwner == "network:router_interface":
			_, err := routers.RemoveInterface(ctx, nc, p.DeviceID, routers.RemoveInterfaceOpts{PortID: p.ID}).Extract()
			keep("router leg "+p.ID, err)
		default:
			if strings.HasPrefix(p.DeviceOwner, "compute:") {
				keep("interface "+p.ID, attachinterfaces.Delete(ctx, cc, p.DeviceID, p.ID).ExtractErr())
			}
			keep("port "+p.ID, ports.Delete(ctx, nc, p.ID).ExtractErr())
		}
	}
	if pages, err := floatingips.List(nc, floatingips.ListOpts{Tags: openstack.TagManaged}).AllPages(ctx); err == nil {
		fips, _ := floatingips.ExtractFloatingIPs(pages)
		for _, f := range fips {
			if projects[f.ProjectID] {
				keep("floating IP "+f.FloatingIP, floatingips.Delete(ctx, nc, f.ID).ExtractErr())
			}
		}
	} else {
		errs = append(errs, err)
	}
	if pages, err := groups.List(nc, groups.ListOpts{Tags: openstack.TagManaged}).AllPages(ctx); err == nil {
		gs, _ := groups.ExtractGroups(pages)
		for _, g := range gs {
			if projects[g.ProjectID] {
				keep("security group "+g.ID, groups.Delete(ctx, nc, g.ID).ExtractErr())
			}
		}
	} else {
		errs = append(errs, err)
	}
	if transit, err := c.ID("networks", "vpn-operator/vpn-transit"); err == nil {
		pages, err := rbacpolicies.List(nc, rbacpolicies.ListOpts{ObjectID: transit}).AllPages(ctx)
		if err != nil {
			return nil, err
		}
		ps, _ := rbacpolicies.ExtractRBACPolicies(pages)
		for _, p := range ps {
			keep("RBAC policy "+p.ID, rbacpolicies.Delete(ctx, nc, p.ID).ExtractErr())
		}
	}
	return removed, errors.Join(errs...)
}
