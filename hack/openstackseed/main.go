// Command openstackseed applies seed files in the simulator's format (see
// internal/testinfra/openstacksim.Seed) to a real OpenStack, so the same estate, with the same
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
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
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
