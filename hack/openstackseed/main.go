// Command openstackseed applies seed files in the simulator's format (see
// internal/openstack/openstacksim.Seed) to a real OpenStack, so the same estate, with the same
// names, exists on both. hack/openstack.sh runs it in two steps:
//
//	openstackseed --state DIR --seed FILE... identity   projects, users, roles, catalog, application credentials
//	openstackseed --state DIR --seed FILE... estate     networks, subnets, ports, routers, RBAC, servers
//
// Both steps are idempotent: objects are found by name (and project) before anything is
// created. Into DIR it writes clouds.yaml (one entry per application credential, and
// "<user>-password" for users the seed lets authenticate with a password), one
// <cloud>.env per entry, and estate.json with the IDs of everything seeded, keyed
// "<project>/<name>" per kind. Secrets it generates (user passwords, application
// credential secrets) stay in DIR, which is test-only state.
//
// What a real cloud cannot do like the simulator: IDs are the cloud's, never the seed's;
// a seed's region must be RegionOne; tokenTTL, maxRoutes and adminOnlyFloatingIPAddress
// are the cloud's configuration and are ignored here.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	gcos "github.com/gophercloud/gophercloud/v2/openstack"

	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

const region = "RegionOne"

// host is the loopback address the cloud's services listen on (--host), authURL its
// Keystone.
var host, authURL string

func main() {
	state := flag.String("state", "", "state directory (written: clouds.yaml, *.env, estate.json, seed-secrets.json)")
	adminPW := flag.String("admin-password", "", "password of Keystone's bootstrap admin")
	servicePW := flag.String("service-password", "", "password of the service users (neutron, nova, placement, glance)")
	flag.StringVar(&host, "host", "127.0.0.1", "loopback address the services listen on")
	serialBoots := flag.Bool("serial-boots", false, "boot the seeded servers one after the other (each ACTIVE before the next is asked for)")
	var seeds multiFlag
	flag.Var(&seeds, "seed", "seed file (repeatable)")
	flag.Parse()
	if *state == "" || *adminPW == "" || len(seeds) == 0 || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: openstackseed --state DIR --admin-password PW --service-password PW --seed FILE... identity|estate")
		os.Exit(2)
	}
	authURL = "http://" + host + ":5000/v3"
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	s, err := newSeeder(ctx, *state, *adminPW, *servicePW, seeds)
	if err == nil {
		s.serialBoots = *serialBoots
		switch flag.Arg(0) {
		case "identity":
			err = s.identity(ctx)
		case "estate":
			err = s.estate(ctx)
		default:
			err = fmt.Errorf("unknown step %q", flag.Arg(0))
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "openstackseed: %v\n", err)
		os.Exit(1)
	}
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// secrets are kept across runs so a second `up` reuses what the first created.
type secrets struct {
	Users    map[string]string   `json:"users"`
	AppCreds map[string]appCred  `json:"appCreds"`
	Estate   map[string]stateMap `json:"-"`
}

type appCred struct {
	ID     string `json:"id"`
	Secret string `json:"secret"`
	User   string `json:"user"`
}

type stateMap map[string]string

type seeder struct {
	dir       string
	adminPW   string
	servicePW string
	seed      openstacksim.Seed   // all seed files merged (identities are found by name, so overlaps are fine)
	files     []openstacksim.Seed // each file on its own: names of networks and subnets are per file
	sec       secrets
	admin     *gophercloud.ProviderClient
	keystone  *gophercloud.ServiceClient
	log       func(format string, args ...any)
	// serialBoots: one server at a time (see --serial-boots).
	serialBoots bool
}

func newSeeder(ctx context.Context, dir, adminPW, servicePW string, files []string) (*seeder, error) {
	s := &seeder{dir: dir, adminPW: adminPW, servicePW: servicePW,
		log: func(f string, a ...any) { fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+f+"\n", a...) }}
	for _, f := range files {
		sd, err := openstacksim.LoadSeed(f)
		if err != nil {
			return nil, err
		}
		if sd.Region != "" && sd.Region != region {
			return nil, fmt.Errorf("%s: region %q; the real OpenStack has only %s", f, sd.Region, region)
		}
		s.files = append(s.files, *sd)
		s.seed.Projects = append(s.seed.Projects, sd.Projects...)
		s.seed.Users = append(s.seed.Users, sd.Users...)
		s.seed.Networks = append(s.seed.Networks, sd.Networks...)
		s.seed.Routers = append(s.seed.Routers, sd.Routers...)
		s.seed.Servers = append(s.seed.Servers, sd.Servers...)
		s.seed.RBACPolicies = append(s.seed.RBACPolicies, sd.RBACPolicies...)
	}
	s.sec = secrets{Users: map[string]string{}, AppCreds: map[string]appCred{}}
	if b, err := os.ReadFile(s.path("seed-secrets.json")); err == nil {
		if err := json.Unmarshal(b, &s.sec); err != nil {
			return nil, fmt.Errorf("seed-secrets.json: %w", err)
		}
	}
	p, err := s.passwordClient(ctx, "admin", adminPW, "admin")
	if err != nil {
		return nil, fmt.Errorf("bootstrap admin: %w", err)
	}
	s.admin = p
	if s.keystone, err = gcos.NewIdentityV3(p, gophercloud.EndpointOpts{}); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *seeder) path(name string) string { return filepath.Join(s.dir, name) }

func (s *seeder) saveSecrets() error {
	b, err := json.MarshalIndent(s.sec, "", " ")
	if err != nil {
		return err
	}
	return writeFile(s.path("seed-secrets.json"), b)
}

func writeFile(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (s *seeder) passwordClient(ctx context.Context, user, pw, project string) (*gophercloud.ProviderClient, error) {
	return gcos.AuthenticatedClient(ctx, gophercloud.AuthOptions{
		IdentityEndpoint: authURL, Username: user, Password: pw, DomainName: "Default", AllowReauth: true,
		Scope: &gophercloud.AuthScope{ProjectName: project, DomainName: "Default"},
	})
}

// --- raw REST: the seeder speaks plain JSON so every attribute (provider networks,
// microversions) is one map away.

type obj = map[string]any

func call(ctx context.Context, sc *gophercloud.ServiceClient, method, path string, body, out any, ok ...int) error {
	u := path
	if !strings.HasPrefix(path, "http") {
		u = sc.ServiceURL(strings.TrimPrefix(path, "/"))
	}
	opts := &gophercloud.RequestOpts{JSONBody: body, JSONResponse: out, OkCodes: ok}
	if body == nil {
		opts.JSONBody = nil
	}
	if out == nil {
		opts.KeepResponseBody = false
	}
	_, err := sc.Request(ctx, method, u, opts)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	return nil
}

func list(ctx context.Context, sc *gophercloud.ServiceClient, coll string, q url.Values) ([]obj, error) {
	var out map[string]json.RawMessage
	path := coll
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	if err := call(ctx, sc, "GET", path, nil, &out, 200); err != nil {
		return nil, err
	}
	key := strings.TrimSuffix(coll, "/detail")
	if i := strings.LastIndex(key, "/"); i >= 0 {
		key = key[i+1:]
	}
	key = strings.ReplaceAll(strings.TrimPrefix(key, "os-"), "-", "_")
	var items []obj
	if err := json.Unmarshal(out[key], &items); err != nil {
		return nil, fmt.Errorf("GET %s: no %q list: %w", path, key, err)
	}
	return items, nil
}

func str(o obj, k string) string {
	v, _ := o[k].(string)
	return v
}

func randomSecret() string {
	var b [18]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ------------------------------------------------------------------ identity

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

// ------------------------------------------------------------------ estate

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

const (
	imageName  = "bnerd-tiny"
	flavorName = "bnerd.tiny"
)

// servers boots the seeded servers (no network: the nodes' interfaces are the tests'
// business) on the fake hypervisor and waits for them to be ACTIVE.
// errBootFailed: Nova put a server into ERROR. On the all-in-one test clouds that is
// nearly always sqlite's "database is locked" under load in the conductor or compute
// service, not a property of the server, so the boot is tried again.
var errBootFailed = errors.New("failed to boot")

// servers boots the estate's servers, trying a boot that ended in ERROR up to twice
// more (a later pass deletes the ERROR server and boots it afresh).
func (s *seeder) servers(ctx context.Context, servers []openstacksim.SeedServer, projects map[string]*project, adminCompute *gophercloud.ServiceClient, ids stateMap) error {
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		if err = s.bootServers(ctx, servers, projects, adminCompute, ids); err == nil || !errors.Is(err, errBootFailed) {
			return err
		}
		if attempt < 3 {
			s.log("%v; booting again (attempt %d of 3)", err, attempt+1)
		}
	}
	return err
}

func (s *seeder) bootServers(ctx context.Context, servers []openstacksim.SeedServer, projects map[string]*project, adminCompute *gophercloud.ServiceClient, ids stateMap) error {
	image, err := gcos.NewImageV2(s.admin, gophercloud.EndpointOpts{Region: region})
	if err != nil {
		return err
	}
	imgs, err := list(ctx, image, "images", url.Values{"name": {imageName}})
	if err != nil {
		return err
	}
	var imageID string
	for _, im := range imgs {
		if str(im, "status") == "active" {
			imageID = str(im, "id")
		}
	}
	if imageID == "" {
		var im obj
		if err := call(ctx, image, "POST", "images", obj{"name": imageName, "disk_format": "raw",
			"container_format": "bare", "visibility": "public"}, &im, 201); err != nil {
			return err
		}
		imageID = str(im, "id")
		if _, err := image.Request(ctx, "PUT", image.ServiceURL("images", imageID, "file"), &gophercloud.RequestOpts{
			RawBody: strings.NewReader(strings.Repeat("\x00", 1<<16)), OkCodes: []int{204},
			MoreHeaders: map[string]string{"Content-Type": "application/octet-stream"},
		}); err != nil {
			return fmt.Errorf("image upload: %w", err)
		}
	}
	flavors, err := list(ctx, adminCompute, "flavors", nil)
	if err != nil {
		return err
	}
	var flavorID string
	for _, f := range flavors {
		if str(f, "name") == flavorName {
			flavorID = str(f, "id")
		}
	}
	if flavorID == "" {
		var out struct{ Flavor obj }
		if err := call(ctx, adminCompute, "POST", "flavors", obj{"flavor": obj{"name": flavorName, "ram": 64, "vcpus": 1, "disk": 1}}, &out, 200); err != nil {
			return err
		}
		flavorID = str(out.Flavor, "id")
	}
	// The compute host must be mapped into the cell before the scheduler can place.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		hv, err := list(ctx, adminCompute, "os-hypervisors", nil)
		if err == nil && len(hv) > 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no hypervisor in Nova after 5 minutes (%v)", err)
		}
		time.Sleep(time.Second)
	}
	type pending struct{ key, id string }
	var boot []pending
	for _, sv := range servers {
		pr := projects[sv.Project]
		if pr == nil {
			return fmt.Errorf("server %s: unknown project %s", sv.Name, sv.Project)
		}
		k := sv.Project + "/" + sv.Name
		have, err := list(ctx, pr.compute, "servers/detail", url.Values{"name": {"^" + sv.Name + "$"}})
		if err != nil {
			return err
		}
		var id string
		for _, h := range have {
			if str(h, "name") != sv.Name {
				continue
			}
			if str(h, "status") == "ERROR" {
				// A failed boot of an earlier run: replace it.
				if err := call(ctx, pr.compute, "DELETE", "servers/"+str(h, "id"), nil, nil, 204); err != nil {
					return err
				}
				if err := waitGone(ctx, pr.compute, str(h, "id")); err != nil {
					return err
				}
				continue
			}
			id = str(h, "id")
		}
		if id == "" {
			var out struct{ Server obj }
			if err := call(ctx, pr.compute, "POST", "servers", obj{"server": obj{"name": sv.Name, "imageRef": imageID,
				"flavorRef": flavorID, "networks": "none"}}, &out, 202); err != nil {
				return fmt.Errorf("server %s: %w", sv.Name, err)
			}
			id = str(out.Server, "id")
			s.log("booting server %s (%s)", k, id)
			if s.serialBoots {
				if err := waitActive(ctx, adminCompute, k, id, deadline); err != nil {
					return err
				}
			}
		}
		ids[k] = id
		boot = append(boot, pending{k, id})
	}
	for _, b := range boot {
		if err := waitActive(ctx, adminCompute, b.key, b.id, deadline); err != nil {
			return err
		}
	}
	return nil
}

// waitActive waits until a booting server is ACTIVE, failing on ERROR or at deadline.
func waitActive(ctx context.Context, adminCompute *gophercloud.ServiceClient, key, id string, deadline time.Time) error {
	for {
		var out struct{ Server obj }
		if err := call(ctx, adminCompute, "GET", "servers/"+id, nil, &out, 200); err != nil {
			return err
		}
		st := str(out.Server, "status")
		if st == "ACTIVE" {
			return nil
		}
		if st == "ERROR" {
			fault, _ := json.Marshal(out.Server["fault"])
			return fmt.Errorf("server %s %w: %s", key, errBootFailed, fault)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("server %s still %s after 5 minutes", key, st)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
