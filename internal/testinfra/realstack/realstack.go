// Package realstack finds the real OpenStacks that hack/openstack.sh runs for the tests:
// which targets a test run asks for (BNERD_OPENSTACK), whether a missing real OpenStack
// fails or skips (BNERD_REQUIRE_OPENSTACK), and the credentials and object IDs the
// script's seeding wrote into its state directory. Two releases run side by side: Zed
// (Debian 12's packages, the legacy policy defaults; target "real") and 2025.1 (Debian
// 13's, the secure-RBAC defaults with scope enforcement; target "real-2025.1").
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
	// simulator, in every extension shape it offers), "real" (hack/openstack.sh's Zed)
	// and "real-2025.1" (its 2025.1). Default "sim".
	TargetsEnv = "BNERD_OPENSTACK"
	// RequireEnv, when 1, turns a missing real OpenStack into a failure: Zed's always
	// (as before there were two), 2025.1's when "real-2025.1" is asked for. The
	// project's test command sets it as root, as CI runs.
	RequireEnv = "BNERD_REQUIRE_OPENSTACK"
	// StateEnv names the Zed OpenStack's state directory; default: the script's own
	// default (`hack/openstack.sh --print-state`). Release.StateEnv names each
	// release's.
	StateEnv = "BNERD_OPENSTACK_STATE"
)

// Release is an OpenStack release hack/openstack.sh can run.
type Release string

const (
	// Zed is Debian 12's OpenStack, run with its shipped (legacy) policy defaults, on
	// 127.0.0.1.
	Zed Release = "zed"
	// R2025_1 is Debian 13's OpenStack 2025.1, run in a Debian 13 root file system with
	// its shipped defaults: the secure-RBAC policies with scope enforcement. On 127.0.0.2,
	// so it runs beside Zed.
	R2025_1 Release = "2025.1"
)

// Releases are the releases hack/openstack.sh runs, oldest first.
var Releases = []Release{Zed, R2025_1}

// Target is the release's name among the targets of TargetsEnv.
func (r Release) Target() string {
	if r == Zed {
		return "real"
	}
	return "real-" + string(r)
}

// StateEnv is the variable naming the release's state directory.
func (r Release) StateEnv() string {
	if r == Zed {
		return StateEnv
	}
	return StateEnv + "_" + strings.ReplaceAll(string(r), ".", "_")
}

// Host is the loopback address the release's services listen on.
func (r Release) Host() string {
	if r == Zed {
		return "127.0.0.1"
	}
	return "127.0.0.2"
}

// AuthURL is the release's Keystone.
func (r Release) AuthURL() string { return "http://" + r.Host() + ":5000/v3" }

// LegacyPolicy reports whether the release runs the policy defaults from before
// secure RBAC (any role in a project may read and write there).
func (r Release) LegacyPolicy() bool { return r == Zed }

// Asked reports whether the run asks for the release (TargetsEnv names its target).
func (r Release) Asked() bool { return Wants(r.Target()) }

// Demanded reports whether a missing release fails the run: Zed whenever RequireEnv is
// set (what make test does as root), a newer release when it is also asked for.
func (r Release) Demanded() bool { return Required() && (r == Zed || r.Asked()) }

// Wanted are the releases the run asks for or demands, oldest first.
func Wanted() []Release {
	var out []Release
	for _, r := range Releases {
		if r.Asked() || r.Demanded() {
			out = append(out, r)
		}
	}
	return out
}

// ReleaseOfTarget returns the release a target names ("real", "real-2025.1").
func ReleaseOfTarget(target string) (Release, bool) {
	for _, r := range Releases {
		if r.Target() == target {
			return r, true
		}
	}
	return "", false
}

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
	Dir     string
	Release Release
	clouds  []byte
	estate  estate
}

// AuthURL is the cloud's Keystone.
func (c *Cloud) AuthURL() string { return c.Release.AuthURL() }

// Target is the cloud's name among the targets of TargetsEnv.
func (c *Cloud) Target() string { return c.Release.Target() }

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

// StateDir is where hack/openstack.sh keeps the Zed OpenStack's state.
func StateDir() string { return Zed.StateDir() }

// StateDir is where hack/openstack.sh keeps the release's state.
func (r Release) StateDir() string {
	if d := os.Getenv(r.StateEnv()); d != "" {
		return d
	}
	out, err := exec.Command("bash", filepath.Join(repoRoot(), "hack", "openstack.sh"), "--release", string(r), "--print-state").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// ErrNotRunning means there is no real OpenStack to test against.
var ErrNotRunning = errors.New("no real OpenStack: run `sudo bash hack/openstack.sh up` (make test does) or set " + StateEnv)

// notRunning names the release and how to start it.
func (r Release) notRunning() error {
	if r == Zed {
		return ErrNotRunning
	}
	return fmt.Errorf("%w (OpenStack %s: `sudo bash hack/openstack.sh --release %s up`, or set %s)", ErrNotRunning, r, r, r.StateEnv())
}

// Load reads the Zed OpenStack's state directory and checks that Keystone answers.
func Load() (*Cloud, error) { return LoadRelease(Zed) }

// LoadRelease reads the release's state directory and checks that its Keystone answers.
func LoadRelease(r Release) (*Cloud, error) {
	notRunning := r.notRunning()
	dir := r.StateDir()
	if dir == "" {
		return nil, notRunning
	}
	if b, err := os.ReadFile(filepath.Join(dir, "release")); err == nil && strings.TrimSpace(string(b)) != string(r) {
		return nil, fmt.Errorf("%s holds OpenStack %s, not %s", dir, strings.TrimSpace(string(b)), r)
	}
	c := &Cloud{Dir: dir, Release: r}
	var err error
	if c.clouds, err = os.ReadFile(filepath.Join(dir, "clouds.yaml")); err != nil {
		return nil, fmt.Errorf("%w (%v)", notRunning, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "estate.json"))
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", notRunning, err)
	}
	if err := json.Unmarshal(b, &c.estate); err != nil {
		return nil, fmt.Errorf("%s/estate.json: %w", dir, err)
	}
	hc := http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(r.AuthURL())
	if err != nil {
		return nil, fmt.Errorf("%w (Keystone: %v)", notRunning, err)
	}
	_ = resp.Body.Close()
	return c, nil
}

// AuthURL is the Zed OpenStack's Keystone (Cloud.AuthURL is any release's).
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

// Need returns the Zed OpenStack for a test, or skips it with the reason (not asked
// for, or not running), or fails it when RequireEnv is set.
func Need(t testing.TB) *Cloud { t.Helper(); return NeedRelease(t, Zed) }

// NeedRelease returns the release's OpenStack for a test, or skips it with the reason
// (not asked for, or not running), or fails it when the release is demanded.
func NeedRelease(t testing.TB, r Release) *Cloud {
	t.Helper()
	if !r.Asked() && !r.Demanded() {
		t.Skipf("real OpenStack %s not asked for (%s=%s, as make test sets it)", r, TargetsEnv, r.Target())
	}
	c, err := LoadRelease(r)
	if err != nil {
		if r.Demanded() {
			t.Fatalf("%v (and %s=1 requires the real OpenStack %s)", err, RequireEnv, r)
		}
		t.Skip(err.Error())
	}
	return c
}
