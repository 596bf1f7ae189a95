package openstacksim

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"sigs.k8s.io/yaml"
)

// Seed is the initial estate. Objects refer to each other by name; IDs left
// empty are derived from the kind and name, so the same seed always yields
// the same IDs (stable across runs, handy in docs and scripts). Secrets left
// empty are generated randomly at start.
//
// Both json and yaml tags are given; the YAML is read via sigs.k8s.io/yaml,
// which honours the json tags.
type Seed struct {
	// Region names the catalog region; default "RegionOne".
	Region string `json:"region,omitempty" yaml:"region,omitempty"`
	// TokenTTL is the lifetime of issued tokens; default 1h.
	TokenTTL Duration `json:"tokenTTL,omitempty" yaml:"tokenTTL,omitempty"`
	// MaxRoutes caps a router's routes like Neutron's max_routes; 0 means
	// Neutron's default of 30, a negative value means unlimited.
	MaxRoutes int `json:"maxRoutes,omitempty" yaml:"maxRoutes,omitempty"`
	// AdminOnlyFloatingIPAddress enforces Neutron's default policy that only
	// an admin may pick a floating IP's address at create time. Off by
	// default so tests can claim specific addresses.
	AdminOnlyFloatingIPAddress bool `json:"adminOnlyFloatingIPAddress,omitempty" yaml:"adminOnlyFloatingIPAddress,omitempty"`
	// NeutronExtensions is the exact list of extension aliases Neutron presents, and
	// so how it behaves: tags in a create request are refused (ports: dropped, kept
	// with "tag-ports-during-bulk-creation"), as in every Neutron measured;
	// "tag-creation" changes nothing there (it is the API that adds several tags at
	// once, listed from 2024.2 on); without "extraroute-atomic" add/remove_extraroutes do not
	// exist; without "revision-if-match" If-Match is ignored. Default:
	// DefaultNeutronExtensions (a recent release); ZedNeutronExtensions is Zed's.
	NeutronExtensions []string `json:"neutronExtensions,omitempty" yaml:"neutronExtensions,omitempty"`
	// LegacyPolicy is the services' policy as Zed and older ship it
	// (enforce_new_defaults off): any role in a project may write, a reader-only
	// credential too. Off (the default) is the secure-RBAC defaults of newer
	// releases, where a reader may only read.
	LegacyPolicy bool `json:"legacyPolicy,omitempty" yaml:"legacyPolicy,omitempty"`
	// SecureRBAC is the secure-RBAC defaults in full, as 2025.1 ships them
	// (enforce_new_defaults and enforce_scope on): Neutron shows a project's objects
	// only to a token with reader (an external or shared network to anyone), Nova
	// refuses reads without reader, and writes to either need member; admin may do
	// everything. Without it (and without LegacyPolicy) only a reader-only token is
	// refused writes.
	SecureRBAC bool `json:"secureRBAC,omitempty" yaml:"secureRBAC,omitempty"`
	// ImpliedRoles puts into every token the roles its roles imply (admin implies
	// member, member implies reader), an application credential's too, as Keystone 27
	// (2025.1) does. Without it an application credential's token carries exactly the
	// roles it was made with, as Zed's Keystone did: under SecureRBAC one made with
	// member alone then reads nothing of its own project.
	ImpliedRoles bool `json:"impliedRoles,omitempty" yaml:"impliedRoles,omitempty"`

	Projects     []SeedProject `json:"projects,omitempty" yaml:"projects,omitempty"`
	Users        []SeedUser    `json:"users,omitempty" yaml:"users,omitempty"`
	Networks     []SeedNetwork `json:"networks,omitempty" yaml:"networks,omitempty"`
	Routers      []SeedRouter  `json:"routers,omitempty" yaml:"routers,omitempty"`
	Servers      []SeedServer  `json:"servers,omitempty" yaml:"servers,omitempty"`
	RBACPolicies []SeedRBAC    `json:"rbacPolicies,omitempty" yaml:"rbacPolicies,omitempty"`
}

// Duration reads "90s"/"1h" strings in YAML.
type Duration struct{ time.Duration }

func (d Duration) MarshalJSON() ([]byte, error) { return []byte(fmt.Sprintf("%q", d.String())), nil }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

type SeedProject struct {
	Name string `json:"name" yaml:"name"`
	ID   string `json:"id,omitempty" yaml:"id,omitempty"`
	// Quotas override Neutron's default quotas for this project, by resource
	// (network, subnet, port, router, floatingip, security_group,
	// security_group_rule, rbac_policy); -1 is unlimited.
	Quotas map[string]int `json:"quotas,omitempty" yaml:"quotas,omitempty"`
}

type SeedUser struct {
	Name    string   `json:"name" yaml:"name"`
	ID      string   `json:"id,omitempty" yaml:"id,omitempty"`
	Project string   `json:"project" yaml:"project"`
	Roles   []string `json:"roles,omitempty" yaml:"roles,omitempty"`
	// Password enables password auth only when AllowPassword is set; a user
	// without it is application-credential-only and password auth is 401.
	Password       string              `json:"password,omitempty" yaml:"password,omitempty"`
	AllowPassword  bool                `json:"allowPassword,omitempty" yaml:"allowPassword,omitempty"`
	AppCredentials []SeedAppCredential `json:"applicationCredentials,omitempty" yaml:"applicationCredentials,omitempty"`
}

type SeedAppCredential struct {
	Name   string `json:"name" yaml:"name"`
	ID     string `json:"id,omitempty" yaml:"id,omitempty"`
	Secret string `json:"secret,omitempty" yaml:"secret,omitempty"`
	// Roles default to the user's roles.
	Roles []string `json:"roles,omitempty" yaml:"roles,omitempty"`
}

type SeedNetwork struct {
	Name     string       `json:"name" yaml:"name"`
	ID       string       `json:"id,omitempty" yaml:"id,omitempty"`
	Project  string       `json:"project" yaml:"project"`
	Shared   bool         `json:"shared,omitempty" yaml:"shared,omitempty"`
	External bool         `json:"external,omitempty" yaml:"external,omitempty"`
	Tags     []string     `json:"tags,omitempty" yaml:"tags,omitempty"`
	Subnets  []SeedSubnet `json:"subnets,omitempty" yaml:"subnets,omitempty"`
	Ports    []SeedPort   `json:"ports,omitempty" yaml:"ports,omitempty"`
}

type SeedSubnet struct {
	Name string `json:"name" yaml:"name"`
	ID   string `json:"id,omitempty" yaml:"id,omitempty"`
	CIDR string `json:"cidr" yaml:"cidr"`
	// GatewayIP defaults to the first host address; "none" means no gateway.
	GatewayIP string `json:"gatewayIP,omitempty" yaml:"gatewayIP,omitempty"`
}

type SeedPort struct {
	Name        string   `json:"name" yaml:"name"`
	ID          string   `json:"id,omitempty" yaml:"id,omitempty"`
	Project     string   `json:"project,omitempty" yaml:"project,omitempty"` // default: the network's
	FixedIP     string   `json:"fixedIP,omitempty" yaml:"fixedIP,omitempty"`
	DeviceID    string   `json:"deviceID,omitempty" yaml:"deviceID,omitempty"`
	DeviceOwner string   `json:"deviceOwner,omitempty" yaml:"deviceOwner,omitempty"`
	Tags        []string `json:"tags,omitempty" yaml:"tags,omitempty"`
}

type SeedRouter struct {
	Name            string          `json:"name" yaml:"name"`
	ID              string          `json:"id,omitempty" yaml:"id,omitempty"`
	Project         string          `json:"project" yaml:"project"`
	ExternalGateway string          `json:"externalGateway,omitempty" yaml:"externalGateway,omitempty"` // network name
	Interfaces      []SeedInterface `json:"interfaces,omitempty" yaml:"interfaces,omitempty"`
	Routes          []Route         `json:"routes,omitempty" yaml:"routes,omitempty"`
	Tags            []string        `json:"tags,omitempty" yaml:"tags,omitempty"`
}

// SeedInterface attaches the router to a subnet (by subnet name) at IP
// (default: the subnet's gateway IP).
type SeedInterface struct {
	Subnet string `json:"subnet" yaml:"subnet"`
	IP     string `json:"ip,omitempty" yaml:"ip,omitempty"`
}

type SeedServer struct {
	Name    string `json:"name" yaml:"name"`
	ID      string `json:"id,omitempty" yaml:"id,omitempty"`
	Project string `json:"project" yaml:"project"`
	Status  string `json:"status,omitempty" yaml:"status,omitempty"` // default ACTIVE
	Host    string `json:"host,omitempty" yaml:"host,omitempty"`
}

// SeedRBAC shares Network (by name) with TargetProject (by name, or "*").
type SeedRBAC struct {
	Network       string `json:"network" yaml:"network"`
	TargetProject string `json:"targetProject" yaml:"targetProject"`
	Action        string `json:"action,omitempty" yaml:"action,omitempty"`   // default access_as_shared
	Project       string `json:"project,omitempty" yaml:"project,omitempty"` // owner; default the network's
}

// LoadSeed reads a YAML seed file.
func LoadSeed(path string) (*Seed, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := ParseSeed(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// ParseSeed parses YAML (or JSON); unknown fields are an error so a typo in
// a seed never silently drops an object.
func ParseSeed(data []byte) (*Seed, error) {
	var s Seed
	if err := yaml.UnmarshalStrict(data, &s); err != nil {
		return nil, fmt.Errorf("parse seed: %w", err)
	}
	return &s, nil
}
