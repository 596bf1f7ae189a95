package main

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/gophercloud/gophercloud/v2"
	gcos "github.com/gophercloud/gophercloud/v2/openstack"

	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

// The identity step: projects, users, roles, the catalog, application credentials and
// clouds.yaml.

func (s *seeder) identity(ctx context.Context) error {
	ks := s.keystone
	roles := map[string]string{}
	rs, err := list(ctx, ks, "roles", nil)
	if err != nil {
		return err
	}
	for _, r := range rs {
		roles[str(r, "name")] = str(r, "id")
	}
	want := []string{"admin", "member", "reader", "service"}
	for _, u := range s.seed.Users {
		want = append(want, u.Roles...)
		for _, ac := range u.AppCredentials {
			want = append(want, ac.Roles...)
		}
	}
	for _, name := range want {
		if roles[name] != "" {
			continue
		}
		var out struct{ Role obj }
		if err := call(ctx, ks, "POST", "roles", obj{"role": obj{"name": name}}, &out, 201); err != nil {
			return err
		}
		roles[name] = str(out.Role, "id")
	}

	projects := map[string]string{}
	ensureProject := func(name string) error {
		if projects[name] != "" {
			return nil
		}
		ps, err := list(ctx, ks, "projects", url.Values{"name": {name}, "domain_id": {"default"}})
		if err != nil {
			return err
		}
		if len(ps) > 0 {
			projects[name] = str(ps[0], "id")
			return nil
		}
		var out struct{ Project obj }
		if err := call(ctx, ks, "POST", "projects", obj{"project": obj{"name": name, "domain_id": "default"}}, &out, 201); err != nil {
			return err
		}
		projects[name] = str(out.Project, "id")
		return nil
	}
	for _, p := range append([]openstacksim.SeedProject{{Name: "service"}}, s.seed.Projects...) {
		if err := ensureProject(p.Name); err != nil {
			return err
		}
	}

	users := map[string]string{}
	ensureUser := func(name, password, project string, grant []string) error {
		us, err := list(ctx, ks, "users", url.Values{"name": {name}, "domain_id": {"default"}})
		if err != nil {
			return err
		}
		if len(us) == 0 {
			var out struct{ User obj }
			if err := call(ctx, ks, "POST", "users", obj{"user": obj{"name": name, "password": password,
				"domain_id": "default", "default_project_id": projects[project]}}, &out, 201); err != nil {
				return err
			}
			users[name] = str(out.User, "id")
		} else {
			users[name] = str(us[0], "id")
			// The password must be the one this run knows (a lost state means a reset).
			// Only a wrong one is changed: a change revokes the user's tokens, which
			// running services (Nova's, for Placement) would trip over.
			if _, err := gcos.AuthenticatedClient(ctx, gophercloud.AuthOptions{IdentityEndpoint: authURL,
				Username: name, Password: password, DomainName: "Default"}); err != nil {
				if err := call(ctx, ks, "PATCH", "users/"+users[name], obj{"user": obj{"password": password}}, nil, 200); err != nil {
					return err
				}
			}
		}
		for _, r := range grant {
			if err := call(ctx, ks, "PUT", fmt.Sprintf("projects/%s/users/%s/roles/%s", projects[project], users[name], roles[r]), nil, nil, 204); err != nil {
				return err
			}
		}
		return nil
	}
	for _, svc := range []string{"neutron", "nova", "placement", "glance"} {
		if err := ensureUser(svc, s.servicePW, "service", []string{"admin", "service"}); err != nil {
			return err
		}
	}
	for _, u := range s.seed.Users {
		pw := u.Password
		if pw == "" {
			if pw = s.sec.Users[u.Name]; pw == "" {
				pw = randomSecret()
			}
		}
		s.sec.Users[u.Name] = pw
		if err := ensureUser(u.Name, pw, u.Project, u.Roles); err != nil {
			return err
		}
	}
	if err := s.saveSecrets(); err != nil {
		return err
	}

	// The catalog: Keystone's own endpoint comes from the bootstrap.
	for _, e := range []struct{ typ, name, url string }{
		{"network", "neutron", "http://" + host + ":9696"},
		{"compute", "nova", "http://" + host + ":8774/v2.1"},
		{"placement", "placement", "http://" + host + ":8778"},
		{"image", "glance", "http://" + host + ":9292"},
	} {
		svcs, err := list(ctx, ks, "services", url.Values{"type": {e.typ}})
		if err != nil {
			return err
		}
		var sid string
		if len(svcs) > 0 {
			sid = str(svcs[0], "id")
		} else {
			var out struct{ Service obj }
			if err := call(ctx, ks, "POST", "services", obj{"service": obj{"type": e.typ, "name": e.name}}, &out, 201); err != nil {
				return err
			}
			sid = str(out.Service, "id")
		}
		eps, err := list(ctx, ks, "endpoints", url.Values{"service_id": {sid}})
		if err != nil {
			return err
		}
		have := map[string]bool{}
		for _, ep := range eps {
			have[str(ep, "interface")] = true
		}
		for _, itf := range []string{"public", "internal", "admin"} {
			if have[itf] {
				continue
			}
			if err := call(ctx, ks, "POST", "endpoints", obj{"endpoint": obj{"service_id": sid, "interface": itf,
				"url": e.url, "region_id": region}}, nil, 201); err != nil {
				return err
			}
		}
	}

	// Application credentials: a user creates its own; the secret is shown once.
	for _, u := range s.seed.Users {
		for _, ac := range u.AppCredentials {
			if err := s.ensureAppCred(ctx, u, ac, users[u.Name]); err != nil {
				return fmt.Errorf("application credential %s: %w", ac.Name, err)
			}
		}
	}
	if err := s.saveSecrets(); err != nil {
		return err
	}
	return s.writeClouds()
}

func (s *seeder) ensureAppCred(ctx context.Context, u openstacksim.SeedUser, ac openstacksim.SeedAppCredential, userID string) error {
	if have, ok := s.sec.AppCreds[ac.Name]; ok {
		// Still valid? Authenticating with it is the proof.
		if _, err := gcos.AuthenticatedClient(ctx, gophercloud.AuthOptions{IdentityEndpoint: authURL,
			ApplicationCredentialID: have.ID, ApplicationCredentialSecret: have.Secret}); err == nil {
			return nil
		}
	}
	pc, err := s.passwordClient(ctx, u.Name, s.sec.Users[u.Name], u.Project)
	if err != nil {
		return err
	}
	ks, err := gcos.NewIdentityV3(pc, gophercloud.EndpointOpts{})
	if err != nil {
		return err
	}
	existing, err := list(ctx, ks, "users/"+userID+"/application_credentials", url.Values{"name": {ac.Name}})
	if err != nil {
		return err
	}
	for _, e := range existing {
		if err := call(ctx, ks, "DELETE", "users/"+userID+"/application_credentials/"+str(e, "id"), nil, nil, 204); err != nil {
			return err
		}
	}
	roles := ac.Roles
	if len(roles) == 0 {
		roles = u.Roles
	}
	var rl []obj
	for _, r := range roles {
		rl = append(rl, obj{"name": r})
	}
	body := obj{"name": ac.Name, "description": "seeded by hack/openstack.sh", "roles": rl}
	if ac.Secret != "" {
		body["secret"] = ac.Secret
	}
	var out struct {
		AC obj `json:"application_credential"`
	}
	if err := call(ctx, ks, "POST", "users/"+userID+"/application_credentials", obj{"application_credential": body}, &out, 201); err != nil {
		return err
	}
	s.sec.AppCreds[ac.Name] = appCred{ID: str(out.AC, "id"), Secret: str(out.AC, "secret"), User: u.Name}
	s.log("application credential %s created for %s", ac.Name, u.Name)
	return nil
}

// writeClouds writes clouds.yaml and one env file per cloud.
func (s *seeder) writeClouds() error {
	type cloud struct {
		name string
		env  [][2]string
	}
	var clouds []cloud
	names := make([]string, 0, len(s.sec.AppCreds))
	for n := range s.sec.AppCreds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		ac := s.sec.AppCreds[n]
		clouds = append(clouds, cloud{n, [][2]string{
			{"OS_AUTH_TYPE", "v3applicationcredential"}, {"OS_AUTH_URL", authURL}, {"OS_REGION_NAME", region},
			{"OS_INTERFACE", "public"}, {"OS_IDENTITY_API_VERSION", "3"},
			{"OS_APPLICATION_CREDENTIAL_ID", ac.ID}, {"OS_APPLICATION_CREDENTIAL_SECRET", ac.Secret},
		}})
	}
	pw := func(name, user, password, project string) cloud {
		return cloud{name, [][2]string{
			{"OS_AUTH_TYPE", "password"}, {"OS_AUTH_URL", authURL}, {"OS_REGION_NAME", region},
			{"OS_INTERFACE", "public"}, {"OS_IDENTITY_API_VERSION", "3"},
			{"OS_USERNAME", user}, {"OS_PASSWORD", password}, {"OS_PROJECT_NAME", project},
			{"OS_USER_DOMAIN_NAME", "Default"}, {"OS_PROJECT_DOMAIN_NAME", "Default"},
		}}
	}
	clouds = append(clouds, pw("bootstrap-admin", "admin", s.adminPW, "admin"))
	for _, u := range s.seed.Users {
		if u.AllowPassword {
			clouds = append(clouds, pw(u.Name+"-password", u.Name, s.sec.Users[u.Name], u.Project))
		}
	}
	var y strings.Builder
	y.WriteString("# Written by hack/openstack.sh (test-only credentials).\nclouds:\n")
	yamlKey := map[string]string{
		"OS_AUTH_URL": "auth_url", "OS_APPLICATION_CREDENTIAL_ID": "application_credential_id",
		"OS_APPLICATION_CREDENTIAL_SECRET": "application_credential_secret", "OS_USERNAME": "username",
		"OS_PASSWORD": "password", "OS_PROJECT_NAME": "project_name", "OS_USER_DOMAIN_NAME": "user_domain_name",
		"OS_PROJECT_DOMAIN_NAME": "project_domain_name",
	}
	for _, c := range clouds {
		var env strings.Builder
		env.WriteString("unset OS_CLOUD OS_AUTH_TYPE OS_USERNAME OS_USER_ID OS_PASSWORD OS_PROJECT_NAME OS_PROJECT_ID OS_USER_DOMAIN_NAME OS_PROJECT_DOMAIN_NAME OS_APPLICATION_CREDENTIAL_ID OS_APPLICATION_CREDENTIAL_SECRET\n")
		fmt.Fprintf(&y, "  %s:\n    auth:\n", c.name)
		auth := ""
		for _, kv := range c.env {
			fmt.Fprintf(&env, "export %s=%s\n", kv[0], kv[1])
			if k := yamlKey[kv[0]]; k != "" {
				fmt.Fprintf(&y, "      %s: %q\n", k, kv[1])
			}
			if kv[0] == "OS_AUTH_TYPE" {
				auth = kv[1]
			}
		}
		fmt.Fprintf(&y, "    auth_type: %s\n    region_name: %s\n    interface: public\n    identity_api_version: 3\n", auth, region)
		if err := writeFile(s.path(c.name+".env"), []byte(env.String())); err != nil {
			return err
		}
	}
	return writeFile(s.path("clouds.yaml"), []byte(y.String()))
}
