package openstacksim

import (
	"fmt"
	"slices"
	"strings"
)

// apply builds the initial state from a seed; any inconsistency (unknown
// reference, duplicate name, address conflict) is an error.
func (st *state) apply(seed *Seed) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.region = seed.Region
	if st.region == "" {
		st.region = "RegionOne"
	}
	switch {
	case seed.MaxRoutes == 0:
		st.maxRoutes = 30
	case seed.MaxRoutes < 0:
		st.maxRoutes = 0
	default:
		st.maxRoutes = seed.MaxRoutes
	}
	st.adminOnlyFIPAddr = seed.AdminOnlyFloatingIPAddress
	st.extensions = slices.Clone(DefaultNeutronExtensions)
	if len(seed.NeutronExtensions) > 0 {
		st.extensions = slices.Clone(seed.NeutronExtensions)
	}
	st.quotas = map[string]map[string]int{}
	st.legacyPolicy = seed.LegacyPolicy
	st.secureRBAC = seed.SecureRBAC && !seed.LegacyPolicy
	st.impliedRoles = seed.ImpliedRoles

	projectByName := map[string]string{}
	project := func(name, what string) (string, error) {
		if id, ok := projectByName[name]; ok {
			return id, nil
		}
		return "", fmt.Errorf("%s: unknown project %q", what, name)
	}
	for _, p := range seed.Projects {
		if p.Name == "" {
			return fmt.Errorf("project without name")
		}
		if _, dup := projectByName[p.Name]; dup {
			return fmt.Errorf("duplicate project %q", p.Name)
		}
		id := firstNonEmpty(p.ID, seedID("project", p.Name))
		st.projects[id] = &Project{ID: id, Name: p.Name, DomainID: "default"}
		projectByName[p.Name] = id
		for res, n := range p.Quotas {
			if _, known := defaultQuotas[res]; !known {
				return fmt.Errorf("project %s: quota of unknown resource %q", p.Name, res)
			}
			if st.quotas[id] == nil {
				st.quotas[id] = map[string]int{}
			}
			st.quotas[id][res] = n
		}
	}

	appCredNames := map[string]bool{}
	for _, u := range seed.Users {
		pid, err := project(u.Project, "user "+u.Name)
		if err != nil {
			return err
		}
		uid := firstNonEmpty(u.ID, seedID("user", u.Name))
		if _, dup := st.users[uid]; dup {
			return fmt.Errorf("duplicate user %q", u.Name)
		}
		st.users[uid] = &userRec{User: User{ID: uid, Name: u.Name, ProjectID: pid, Roles: cloneStrings(u.Roles),
			AllowPassword: u.AllowPassword}, password: u.Password}
		for _, ac := range u.AppCredentials {
			if ac.Name == "" || appCredNames[ac.Name] {
				return fmt.Errorf("user %s: application credential name %q empty or not unique", u.Name, ac.Name)
			}
			appCredNames[ac.Name] = true
			roles := ac.Roles
			if len(roles) == 0 {
				roles = u.Roles
			}
			id := firstNonEmpty(ac.ID, seedID("appcred", ac.Name))
			st.appCreds[id] = &appCredRec{AppCredential: AppCredential{ID: id, Name: ac.Name, UserID: uid, ProjectID: pid,
				Roles: cloneStrings(roles)}, secret: firstNonEmpty(ac.Secret, randomSecret())}
		}
	}

	netByName := map[string]*Network{}
	subnetByName := map[string]*Subnet{}
	for _, sn := range seed.Networks {
		pid, err := project(sn.Project, "network "+sn.Name)
		if err != nil {
			return err
		}
		if _, dup := netByName[sn.Name]; dup {
			return fmt.Errorf("duplicate network %q", sn.Name)
		}
		n := st.newNetwork(firstNonEmpty(sn.ID, seedID("network", sn.Name)), sn.Name, pid, sn.Shared, sn.External, sn.Tags)
		netByName[sn.Name] = n
		for _, ss := range sn.Subnets {
			if _, dup := subnetByName[ss.Name]; dup {
				return fmt.Errorf("duplicate subnet %q", ss.Name)
			}
			gw := ss.GatewayIP
			if strings.EqualFold(gw, "none") {
				gw = ""
			}
			sub, e := st.newSubnet(firstNonEmpty(ss.ID, seedID("subnet", ss.Name)), ss.Name, n, ss.CIDR, gw, ss.GatewayIP == "")
			if e != nil {
				return fmt.Errorf("subnet %s: %s", ss.Name, e.msg)
			}
			subnetByName[ss.Name] = sub
		}
		for _, sp := range sn.Ports {
			ppid := pid
			if sp.Project != "" {
				if ppid, err = project(sp.Project, "port "+sp.Name); err != nil {
					return err
				}
			}
			spec := portSpec{id: firstNonEmpty(sp.ID, seedID("port", sn.Name+"/"+sp.Name)), networkID: n.ID, projectID: ppid,
				name: sp.Name, deviceID: sp.DeviceID, deviceOwner: sp.DeviceOwner, tags: sp.Tags, securityGroups: &[]string{}}
			if sp.FixedIP != "" {
				spec.fixedIPs, spec.explicitIPs = []FixedIP{{IPAddress: sp.FixedIP}}, true
			}
			if _, e := st.createPort(&caller{projectID: ppid, admin: true}, spec); e != nil {
				return fmt.Errorf("port %s: %s", sp.Name, e.msg)
			}
		}
	}

	routerNames := map[string]bool{}
	for _, sr := range seed.Routers {
		pid, err := project(sr.Project, "router "+sr.Name)
		if err != nil {
			return err
		}
		if routerNames[sr.Name] {
			return fmt.Errorf("duplicate router %q", sr.Name)
		}
		routerNames[sr.Name] = true
		gw := ""
		if sr.ExternalGateway != "" {
			n := netByName[sr.ExternalGateway]
			if n == nil {
				return fmt.Errorf("router %s: unknown network %q", sr.Name, sr.ExternalGateway)
			}
			gw = n.ID
		}
		rt, e := st.newRouter(firstNonEmpty(sr.ID, seedID("router", sr.Name)), sr.Name, pid, gw, sr.Tags)
		if e != nil {
			return fmt.Errorf("router %s: %s", sr.Name, e.msg)
		}
		admin := &caller{projectID: pid, admin: true}
		for _, si := range sr.Interfaces {
			sub := subnetByName[si.Subnet]
			if sub == nil {
				return fmt.Errorf("router %s: unknown subnet %q", sr.Name, si.Subnet)
			}
			ip := firstNonEmpty(si.IP, sub.GatewayIP)
			p, e := st.createPort(admin, portSpec{id: seedID("port", sr.Name+"/"+si.Subnet), networkID: sub.NetworkID,
				projectID: pid, deviceOwner: OwnerRouterInterface, explicitIPs: true,
				fixedIPs: []FixedIP{{SubnetID: sub.ID, IPAddress: ip}}})
			if e == nil {
				e = st.attachInterface(admin, rt, p)
			}
			if e != nil {
				return fmt.Errorf("router %s interface on %s: %s", sr.Name, si.Subnet, e.msg)
			}
		}
		routes, e := st.validateRoutes(rt, sr.Routes)
		if e == nil {
			routes = uniqueRoutes(routes)
			e = st.checkMaxRoutes(len(routes))
		}
		if e != nil {
			return fmt.Errorf("router %s: %s", sr.Name, e.msg)
		}
		rt.Routes = routes
	}

	for _, ss := range seed.Servers {
		pid, err := project(ss.Project, "server "+ss.Name)
		if err != nil {
			return err
		}
		id := firstNonEmpty(ss.ID, seedID("server", ss.Name))
		if _, dup := st.servers[id]; dup {
			return fmt.Errorf("duplicate server %q", ss.Name)
		}
		t := now()
		st.servers[id] = &Instance{ID: id, Name: ss.Name, ProjectID: pid, Status: firstNonEmpty(ss.Status, "ACTIVE"),
			Host: firstNonEmpty(ss.Host, ss.Name), CreatedAt: t, UpdatedAt: t}
		st.order(id)
	}

	for _, sr := range seed.RBACPolicies {
		n := netByName[sr.Network]
		if n == nil {
			return fmt.Errorf("rbac policy: unknown network %q", sr.Network)
		}
		target := sr.TargetProject
		if target != "*" {
			if id, ok := projectByName[target]; ok {
				target = id
			}
		}
		owner := n.ProjectID
		if sr.Project != "" {
			var err error
			if owner, err = project(sr.Project, "rbac policy"); err != nil {
				return err
			}
		}
		if _, e := st.createRBAC(&caller{projectID: owner, admin: true}, "network", n.ID,
			firstNonEmpty(sr.Action, "access_as_shared"), target, owner); e != nil {
			return fmt.Errorf("rbac policy on %s: %s", sr.Network, e.msg)
		}
	}
	return nil
}
