package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	gcos "github.com/gophercloud/gophercloud/v2/openstack"

	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

// The estate step: networks, subnets, ports, routers, RBAC; servers are in servers.go.

// project is one project's view: a client acting as a member of it (the first seeded
// user there), or the admin for projects without users.
type project struct {
	name, id string
	net      *gophercloud.ServiceClient
	compute  *gophercloud.ServiceClient
}

type estate struct {
	Projects map[string]string `json:"projects"`
	Networks stateMap          `json:"networks"`
	Subnets  stateMap          `json:"subnets"`
	Ports    stateMap          `json:"ports"`
	Routers  stateMap          `json:"routers"`
	Servers  stateMap          `json:"servers"`
	Users    stateMap          `json:"users"`
}

func newEstate() estate {
	return estate{Projects: map[string]string{}, Networks: stateMap{}, Subnets: stateMap{}, Ports: stateMap{},
		Routers: stateMap{}, Servers: stateMap{}, Users: stateMap{}}
}

func (e *estate) merge(o estate) {
	for _, m := range []struct{ dst, src map[string]string }{
		{e.Projects, o.Projects}, {e.Networks, o.Networks}, {e.Subnets, o.Subnets}, {e.Ports, o.Ports},
		{e.Routers, o.Routers}, {e.Servers, o.Servers}, {e.Users, o.Users},
	} {
		for k, v := range m.src {
			m.dst[k] = v
		}
	}
}

func (s *seeder) estate(ctx context.Context) error {
	es := newEstate()
	adminNet, err := gcos.NewNetworkV2(s.admin, gophercloud.EndpointOpts{Region: region})
	if err != nil {
		return err
	}
	adminCompute, err := gcos.NewComputeV2(s.admin, gophercloud.EndpointOpts{Region: region})
	if err != nil {
		return err
	}
	adminCompute.Microversion = "2.37"
	projects := map[string]*project{}
	for _, p := range s.seed.Projects {
		if projects[p.Name] != nil {
			continue
		}
		ps, err := list(ctx, s.keystone, "projects", url.Values{"name": {p.Name}, "domain_id": {"default"}})
		if err != nil || len(ps) == 0 {
			return fmt.Errorf("project %s missing; run the identity step first (%v)", p.Name, err)
		}
		pr := &project{name: p.Name, id: str(ps[0], "id"), net: adminNet, compute: adminCompute}
		for _, u := range s.seed.Users {
			if u.Project != p.Name || !slices.Contains(u.Roles, "member") {
				continue
			}
			pc, err := s.passwordClient(ctx, u.Name, s.sec.Users[u.Name], u.Project)
			if err != nil {
				return fmt.Errorf("user %s: %w", u.Name, err)
			}
			if pr.net, err = gcos.NewNetworkV2(pc, gophercloud.EndpointOpts{Region: region}); err != nil {
				return err
			}
			if pr.compute, err = gcos.NewComputeV2(pc, gophercloud.EndpointOpts{Region: region}); err != nil {
				return err
			}
			pr.compute.Microversion = "2.37"
			break
		}
		projects[p.Name] = pr
		es.Projects[p.Name] = pr.id
	}
	// Neutron quotas the seed raises (PUT replaces only the resources named).
	for _, p := range s.seed.Projects {
		if len(p.Quotas) == 0 {
			continue
		}
		if err := call(ctx, adminNet, "PUT", "quotas/"+projects[p.Name].id, obj{"quota": p.Quotas}, nil, 200); err != nil {
			return fmt.Errorf("quotas of %s: %w", p.Name, err)
		}
	}
	// The files share external networks (found by name): those come first, then the
	// files run side by side, then every server boots at once.
	for _, sd := range s.files {
		ext := openstacksim.Seed{}
		for _, n := range sd.Networks {
			if n.External {
				ext.Networks = append(ext.Networks, n)
			}
		}
		if err := s.applyFile(ctx, ext, projects, adminNet, adminCompute, &es); err != nil {
			return err
		}
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		errs    []error
		servers []openstacksim.SeedServer
	)
	for _, sd := range s.files {
		servers = append(servers, sd.Servers...)
		sd.Servers = nil
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := newEstate()
			err := s.applyFile(ctx, sd, projects, adminNet, adminCompute, &mine)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			es.merge(mine)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if len(servers) > 0 {
		if err := s.servers(ctx, servers, projects, adminCompute, es.Servers); err != nil {
			return err
		}
	}
	for _, u := range s.seed.Users {
		us, err := list(ctx, s.keystone, "users", url.Values{"name": {u.Name}, "domain_id": {"default"}})
		if err == nil && len(us) > 0 {
			es.Users[u.Name] = str(us[0], "id")
		}
	}
	b, err := json.MarshalIndent(es, "", " ")
	if err != nil {
		return err
	}
	return writeFile(s.path("estate.json"), b)
}

// applyFile seeds one file's networks, routers, RBAC policies and servers.
func (s *seeder) applyFile(ctx context.Context, sd openstacksim.Seed, projects map[string]*project, adminNet, adminCompute *gophercloud.ServiceClient, es *estate) error {
	key := func(project, name string) string { return project + "/" + name }

	// Networks, subnets and their seeded ports.
	subnetByName := map[string]obj{}
	netIDByName := map[string]string{}
	for _, n := range sd.Networks {
		pr := projects[n.Project]
		if pr == nil {
			return fmt.Errorf("network %s: unknown project %s", n.Name, n.Project)
		}
		sc := pr.net
		body := obj{"name": n.Name}
		if n.External {
			sc = adminNet
			body["router:external"] = true
			body["provider:network_type"] = "flat"
			body["provider:physical_network"] = "public"
			body["project_id"] = pr.id
		}
		if n.Shared {
			sc = adminNet
			body["shared"] = true
			body["project_id"] = pr.id
		}
		netObj, err := findOrCreate(ctx, sc, "networks", "network", url.Values{"name": {n.Name}, "project_id": {pr.id}}, body)
		if err != nil {
			return fmt.Errorf("network %s: %w", n.Name, err)
		}
		netID := str(netObj, "id")
		es.Networks[key(n.Project, n.Name)] = netID
		netIDByName[n.Name] = netID
		if len(n.Tags) > 0 {
			if err := call(ctx, sc, "PUT", "networks/"+netID+"/tags", obj{"tags": n.Tags}, nil, 200); err != nil {
				return err
			}
		}
		for _, sn := range n.Subnets {
			body := obj{"name": sn.Name, "network_id": netID, "cidr": sn.CIDR, "ip_version": 4}
			if strings.EqualFold(sn.GatewayIP, "none") {
				body["gateway_ip"] = nil
			} else if sn.GatewayIP != "" {
				body["gateway_ip"] = sn.GatewayIP
			}
			if pfx, err := netip.ParsePrefix(sn.CIDR); err == nil && pfx.Addr().Is6() {
				body["ip_version"] = 6
			}
			if n.External || n.Shared {
				body["project_id"] = pr.id
			}
			sub, err := findOrCreate(ctx, sc, "subnets", "subnet", url.Values{"name": {sn.Name}, "network_id": {netID}}, body)
			if err != nil {
				return fmt.Errorf("subnet %s: %w", sn.Name, err)
			}
			subnetByName[sn.Name] = sub
			es.Subnets[key(n.Project, sn.Name)] = str(sub, "id")
		}
		for _, sp := range n.Ports {
			owner := n.Project
			if sp.Project != "" {
				owner = sp.Project
			}
			ppr := projects[owner]
			psc := ppr.net
			body := obj{"name": sp.Name, "network_id": netID}
			if owner != n.Project {
				psc = adminNet
				body["project_id"] = ppr.id
			}
			if sp.FixedIP != "" {
				body["fixed_ips"] = []obj{{"ip_address": sp.FixedIP}}
			}
			if sp.DeviceOwner != "" {
				body["device_owner"] = sp.DeviceOwner
			}
			if sp.DeviceID != "" {
				body["device_id"] = sp.DeviceID
			}
			// Seeded ports carry no security group, as in the simulator.
			body["security_groups"] = []string{}
			port, err := findOrCreate(ctx, psc, "ports", "port", url.Values{"name": {sp.Name}, "network_id": {netID}}, body)
			if err != nil {
				return fmt.Errorf("port %s: %w", sp.Name, err)
			}
			if len(sp.Tags) > 0 {
				if err := call(ctx, psc, "PUT", "ports/"+str(port, "id")+"/tags", obj{"tags": sp.Tags}, nil, 200); err != nil {
					return err
				}
			}
			es.Ports[key(owner, sp.Name)] = str(port, "id")
		}
	}

	// Routers: external gateway, interfaces (at the subnet's gateway or a given IP), routes.
	for _, r := range sd.Routers {
		pr := projects[r.Project]
		if pr == nil {
			return fmt.Errorf("router %s: unknown project %s", r.Name, r.Project)
		}
		body := obj{"name": r.Name}
		if r.ExternalGateway != "" {
			ext := netIDByName[r.ExternalGateway]
			if ext == "" {
				return fmt.Errorf("router %s: unknown external network %s", r.Name, r.ExternalGateway)
			}
			body["external_gateway_info"] = obj{"network_id": ext}
		}
		rt, err := findOrCreate(ctx, pr.net, "routers", "router", url.Values{"name": {r.Name}, "project_id": {pr.id}}, body)
		if err != nil {
			return fmt.Errorf("router %s: %w", r.Name, err)
		}
		rid := str(rt, "id")
		es.Routers[key(r.Project, r.Name)] = rid
		for _, itf := range r.Interfaces {
			sub := subnetByName[itf.Subnet]
			if sub == nil {
				return fmt.Errorf("router %s: unknown subnet %s", r.Name, itf.Subnet)
			}
			have, err := list(ctx, pr.net, "ports", url.Values{"device_id": {rid}, "network_id": {str(sub, "network_id")}})
			if err != nil {
				return err
			}
			if len(have) > 0 {
				continue
			}
			req := obj{"subnet_id": str(sub, "id")}
			if itf.IP != "" && itf.IP != str(sub, "gateway_ip") {
				var out struct{ Port obj }
				if err := call(ctx, pr.net, "POST", "ports", obj{"port": obj{"network_id": str(sub, "network_id"),
					"fixed_ips": []obj{{"subnet_id": str(sub, "id"), "ip_address": itf.IP}}}}, &out, 201); err != nil {
					return err
				}
				req = obj{"port_id": str(out.Port, "id")}
			}
			if err := call(ctx, pr.net, "PUT", "routers/"+rid+"/add_router_interface", req, nil, 200); err != nil {
				return fmt.Errorf("router %s interface on %s: %w", r.Name, itf.Subnet, err)
			}
		}
		if len(r.Routes) > 0 {
			var routes []obj
			for _, x := range r.Routes {
				routes = append(routes, obj{"destination": x.Destination, "nexthop": x.NextHop})
			}
			if err := call(ctx, pr.net, "PUT", "routers/"+rid+"/add_extraroutes", obj{"router": obj{"routes": routes}}, nil, 200); err != nil {
				return err
			}
		}
		if len(r.Tags) > 0 {
			if err := call(ctx, pr.net, "PUT", "routers/"+rid+"/tags", obj{"tags": r.Tags}, nil, 200); err != nil {
				return err
			}
		}
	}

	for _, p := range sd.RBACPolicies {
		owner := projects[p.Project]
		if p.Project == "" {
			for _, n := range sd.Networks {
				if n.Name == p.Network {
					owner = projects[n.Project]
				}
			}
		}
		target := p.TargetProject
		if target != "*" {
			tp := projects[p.TargetProject]
			if tp == nil {
				return fmt.Errorf("RBAC policy on %s: unknown project %s", p.Network, p.TargetProject)
			}
			target = tp.id
		}
		action := p.Action
		if action == "" {
			action = "access_as_shared"
		}
		netID := netIDByName[p.Network]
		have, err := list(ctx, owner.net, "rbac-policies", url.Values{"object_id": {netID}, "target_tenant": {target}, "action": {action}})
		if err != nil {
			return err
		}
		if len(have) == 0 {
			if err := call(ctx, owner.net, "POST", "rbac-policies", obj{"rbac_policy": obj{"object_type": "network",
				"object_id": netID, "action": action, "target_tenant": target}}, nil, 201); err != nil {
				return err
			}
		}
	}

	if len(sd.Servers) > 0 {
		return s.servers(ctx, sd.Servers, projects, adminCompute, es.Servers)
	}
	return nil
}

// findOrCreate returns the one object q selects, or creates it from body.
func findOrCreate(ctx context.Context, sc *gophercloud.ServiceClient, coll, kind string, q url.Values, body obj) (obj, error) {
	have, err := list(ctx, sc, coll, q)
	if err != nil {
		return nil, err
	}
	switch len(have) {
	case 0:
	case 1:
		return have[0], nil
	default:
		return nil, fmt.Errorf("%d %s match %v", len(have), coll, q)
	}
	out := map[string]obj{}
	if err := call(ctx, sc, "POST", coll, obj{kind: body}, &out, 201); err != nil {
		return nil, err
	}
	return out[kind], nil
}

func waitGone(ctx context.Context, sc *gophercloud.ServiceClient, id string) error {
	for range 240 {
		err := call(ctx, sc, "GET", "servers/"+id, nil, nil, 200)
		if gophercloud.ResponseCodeIs(err, 404) {
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("server %s not gone after 2 minutes", id)
}
