// Package realstack finds the real OpenStack that hack/openstack.sh runs for the tests:
// which targets a test run asks for (BNERD_OPENSTACK), whether a missing real OpenStack
// fails or skips (BNERD_REQUIRE_OPENSTACK), and the credentials and object IDs the
// script's seeding wrote into its state directory.
package realstack

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/openstack"
)

const (
	// TargetsEnv lists the targets tests run against, comma-separated: "sim" (the
	// simulator, in every extension shape it offers) and "real" (hack/openstack.sh's
	// OpenStack). Default "sim".
	TargetsEnv = "BNERD_OPENSTACK"
	// RequireEnv, when 1, turns a missing real OpenStack into a failure when "real"
	// is asked for. The project's test command sets it as root, as CI runs.
	RequireEnv = "BNERD_REQUIRE_OPENSTACK"
	// StateEnv names hack/openstack.sh's state directory; default: the script's own
	// default (`hack/openstack.sh --print-state`).
	StateEnv = "BNERD_OPENSTACK_STATE"
)

// Targets returns the targets asked for.
func Targets() []string {
	v := os.Getenv(TargetsEnv)
	if strings.TrimSpace(v) == "" {
		return []string{"sim"}
	}
	var out []string
	for _, t := range strings.Split(v, ",") {
		if t = strings.TrimSpace(t); t != "" && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// Wants reports whether target is asked for.
func Wants(target string) bool { return slices.Contains(Targets(), target) }

// Required reports whether a missing real OpenStack must fail the tests.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// Cloud is a running real OpenStack, as the seeding described it.
type Cloud struct {
	Dir    string
	clouds []byte
	estate estate
}

type estate struct {
	Projects map[string]string `json:"projects"`
	Networks map[string]string `json:"networks"`
	Subnets  map[string]string `json:"subnets"`
	Ports    map[string]string `json:"ports"`
	Routers  map[string]string `json:"routers"`
	Servers  map[string]string `json:"servers"`
	Users    map[string]string `json:"users"`
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// StateDir is where hack/openstack.sh keeps its state.
func StateDir() string {
	if d := os.Getenv(StateEnv); d != "" {
		return d
	}
	out, err := exec.Command("bash", filepath.Join(repoRoot(), "hack", "openstack.sh"), "--print-state").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// ErrNotRunning means there is no real OpenStack to test against.
var ErrNotRunning = errors.New("no real OpenStack: run `sudo bash hack/openstack.sh up` (make test does) or set " + StateEnv)

// Load reads the state directory and checks that Keystone answers.
func Load() (*Cloud, error) {
	dir := StateDir()
	if dir == "" {
		return nil, ErrNotRunning
	}
	c := &Cloud{Dir: dir}
	var err error
	if c.clouds, err = os.ReadFile(filepath.Join(dir, "clouds.yaml")); err != nil {
		return nil, fmt.Errorf("%w (%v)", ErrNotRunning, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "estate.json"))
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", ErrNotRunning, err)
	}
	if err := json.Unmarshal(b, &c.estate); err != nil {
		return nil, fmt.Errorf("%s/estate.json: %w", dir, err)
	}
	hc := http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(AuthURL)
	if err != nil {
		return nil, fmt.Errorf("%w (Keystone: %v)", ErrNotRunning, err)
	}
	_ = resp.Body.Close()
	return c, nil
}

// AuthURL is the real Keystone's.
const AuthURL = "http://127.0.0.1:5000/v3"

// Credential returns the clouds.yaml entry name (an application credential by its
// seed name, "<user>-password", or "bootstrap-admin").
func (c *Cloud) Credential(name string) (openstack.Credential, error) {
	return openstack.CredentialFromCloudsYAML(c.clouds, name)
}

// ID returns the ID of a seeded object: kind is projects, networks, subnets, ports,
// routers, servers or users; key is "<project>/<name>" (projects and users: the name).
func (c *Cloud) ID(kind, key string) (string, error) {
	m, ok := c.seeded(kind)
	if !ok {
		return "", fmt.Errorf("unknown kind %q", kind)
	}
	id, ok := m[key]
	if !ok {
		return "", fmt.Errorf("the seeded estate has no %s %q", kind, key)
	}
	return id, nil
}

// seeded is the seeded estate's IDs of one kind by key; false for an unknown kind.
func (c *Cloud) seeded(kind string) (map[string]string, bool) {
	m, ok := map[string]map[string]string{
		"projects": c.estate.Projects, "networks": c.estate.Networks, "subnets": c.estate.Subnets,
		"ports": c.estate.Ports, "routers": c.estate.Routers, "servers": c.estate.Servers, "users": c.estate.Users,
	}[kind]
	return m, ok
}

// IDs returns every seeded object of kind whose key starts with prefix.
func (c *Cloud) IDs(kind, prefix string) map[string]string {
	m, _ := c.seeded(kind)
	out := map[string]string{}
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out
}

// Need returns the real OpenStack for a test, or skips it with the reason (not asked
// for, or not running), or fails it when RequireEnv is set.
func Need(t testing.TB) *Cloud {
	t.Helper()
	if !Wants("real") && !Required() {
		t.Skipf("real OpenStack not asked for (%s=real, as make test sets it)", TargetsEnv)
	}
	c, err := Load()
	if err != nil {
		if Required() {
			t.Fatalf("%v (and %s=1 requires the real OpenStack)", err, RequireEnv)
		}
		t.Skip(err.Error())
	}
	return c
}
