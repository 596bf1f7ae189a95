package openstack

import "context"

// Networking is the Neutron subset the operator uses. Every list is filtered
// (by tag, ID, network, device or project): the operator never asks for a
// whole collection, so a converged reconcile stays cheap on large clouds.
type Networking interface {
	GetNetwork(ctx context.Context, id string) (*Network, error)
	// ResolveNetwork accepts an ID or a name; an ambiguous name is an error.
	ResolveNetwork(ctx context.Context, nameOrID string) (*Network, error)
	GetSubnet(ctx context.Context, id string) (*Subnet, error)
	ListSubnets(ctx context.Context, networkID string) ([]Subnet, error)

	CreatePort(ctx context.Context, opts CreatePortOpts) (*Port, error)
	GetPort(ctx context.Context, id string) (*Port, error)
	ListPorts(ctx context.Context, opts ListPortsOpts) ([]Port, error)
	UpdatePortAllowedAddressPairs(ctx context.Context, portID string, pairs []AddressPair) (*Port, error)
	UpdatePortSecurityGroups(ctx context.Context, portID string, securityGroupIDs []string) (*Port, error)
	ReplacePortTags(ctx context.Context, portID string, tags []string) ([]string, error)
	DeletePort(ctx context.Context, id string) error

	CreateSecurityGroup(ctx context.Context, opts CreateSecurityGroupOpts) (*SecurityGroup, error)
	GetSecurityGroup(ctx context.Context, id string) (*SecurityGroup, error)
	ListSecurityGroups(ctx context.Context, tags []string) ([]SecurityGroup, error)
	DeleteSecurityGroup(ctx context.Context, id string) error
	CreateSecurityGroupRule(ctx context.Context, opts CreateSecurityGroupRuleOpts) (*SecurityGroupRule, error)
	// CreateSecurityGroupRules creates rules of one security group in one request
	// (Neutron's bulk create): all of them or, on any refusal, none.
	CreateSecurityGroupRules(ctx context.Context, opts []CreateSecurityGroupRuleOpts) ([]SecurityGroupRule, error)
	DeleteSecurityGroupRule(ctx context.Context, id string) error
	// SeesDefaultSecurityGroup reports whether the credential sees its project's
	// default security group (filtered by name and project), which tells whether the
	// cloud's policy lets it read its project's objects (see ProbeOwnProject).
	SeesDefaultSecurityGroup(ctx context.Context, projectID string) (bool, error)

	CreateFloatingIP(ctx context.Context, opts CreateFloatingIPOpts) (*FloatingIP, error)
	GetFloatingIP(ctx context.Context, id string) (*FloatingIP, error)
	// FindFloatingIPByAddress returns a NotFound error when no floating IP
	// with that address is visible.
	FindFloatingIPByAddress(ctx context.Context, address string) (*FloatingIP, error)
	ListFloatingIPs(ctx context.Context, opts ListFloatingIPsOpts) ([]FloatingIP, error)
	AssociateFloatingIP(ctx context.Context, floatingIPID, portID string) (*FloatingIP, error)
	DisassociateFloatingIP(ctx context.Context, floatingIPID string) (*FloatingIP, error)
	DeleteFloatingIP(ctx context.Context, id string) error
	// ReplaceFloatingIPTags sets a floating IP's tags (a pinned address carries the tag
	// of the gateway that holds it).
	ReplaceFloatingIPTags(ctx context.Context, floatingIPID string, tags []string) ([]string, error)

	GetRouter(ctx context.Context, id string) (*Router, error)
	// ResolveRouter accepts an ID or a name; an ambiguous name is an error.
	ResolveRouter(ctx context.Context, nameOrID string) (*Router, error)
	ListRouters(ctx context.Context, projectID string) ([]Router, error)
	AddRouterInterface(ctx context.Context, routerID, portID string) error
	RemoveRouterInterface(ctx context.Context, routerID, portID string) error
	// AddRouterRoutes and RemoveRouterRoutes use the extraroute-atomic API so
	// concurrent writers never lose each other's routes.
	AddRouterRoutes(ctx context.Context, routerID string, routes []Route) (*Router, error)
	RemoveRouterRoutes(ctx context.Context, routerID string, routes []Route) (*Router, error)

	// ShareNetwork creates an access_as_shared RBAC policy for networkID
	// targeting project targetProjectID.
	ShareNetwork(ctx context.Context, networkID, targetProjectID string) (*RBACPolicy, error)
	ListRBACPolicies(ctx context.Context, opts ListRBACPoliciesOpts) ([]RBACPolicy, error)
	DeleteRBACPolicy(ctx context.Context, id string) error

	// QuotaDetails reads a project's Neutron quotas with what is in use, by resource
	// (the quota_details extension).
	QuotaDetails(ctx context.Context, projectID string) (map[string]Quota, error)
}

// Compute is the Nova subset the operator uses: hot (de)attaching ports.
// Nova finishes both asynchronously; see WaitForPortDevice.
type Compute interface {
	ListServerInterfaces(ctx context.Context, serverID string) ([]ServerInterface, error)
	AttachPort(ctx context.Context, serverID, portID string) (*ServerInterface, error)
	DetachPort(ctx context.Context, serverID, portID string) error
}

// Identity answers who a credential is: project, roles, endpoints.
type Identity interface {
	TokenInfo(ctx context.Context) (*TokenInfo, error)
}

// Clients bundles one authenticated client set.
type Clients struct {
	Networking Networking
	Compute    Compute
	Identity   Identity
}

// CreatePortOpts describes a new port. Where Neutron takes tags in a port create
// (tag-ports-during-bulk-creation) they are sent with it, so the port is never visible untagged;
// elsewhere it is created with a marker description and tagged right after, and a
// lookup by the owner's tags adopts one a crash left half-tagged (see tagpending.go). Either
// way a crash never leaks an unfindable port.
type CreatePortOpts struct {
	NetworkID      string
	Name           string
	Description    string
	SubnetID       string // optional; with IPAddress, pins the fixed IP
	IPAddress      string // optional
	Tags           []string
	SecurityGroups []string // nil leaves Neutron's default; empty slice means none
}

// ListPortsOpts filters a port list; at least one field must be set.
type ListPortsOpts struct {
	Tags      []string // all must match
	NetworkID string
	DeviceID  string
	IPAddress string // fixed IP
	SubnetID  string // fixed IP subnet
	ProjectID string
	// Fields, when set, asks Neutron for only these attributes of each port (its
	// fields= query); the others come back zero. A caller that needs a few attributes
	// of every port of a network says which. It narrows the answer, not the filter.
	Fields []string
}

func (o ListPortsOpts) empty() bool {
	return len(o.Tags) == 0 && o.NetworkID == "" && o.DeviceID == "" &&
		o.IPAddress == "" && o.SubnetID == "" && o.ProjectID == ""
}

type CreateSecurityGroupOpts struct {
	Name        string
	Description string
	Tags        []string
}

type CreateSecurityGroupRuleOpts struct {
	SecurityGroupID string
	Direction       string
	EtherType       string
	Protocol        string
	PortRangeMin    int
	PortRangeMax    int
	RemoteIPPrefix  string
	Description     string
}

type CreateFloatingIPOpts struct {
	FloatingNetworkID string
	FloatingIPAddress string // optional: claim this specific address
	PortID            string // optional: associate at creation
	Description       string
	Tags              []string
}

// ListFloatingIPsOpts filters a floating IP list; at least one field must be set.
type ListFloatingIPsOpts struct {
	Tags              []string
	PortID            string
	FloatingIPAddress string
}

// ListRBACPoliciesOpts filters an RBAC policy list; at least one of ObjectID
// and TargetProject must be set.
type ListRBACPoliciesOpts struct {
	ObjectID      string
	ObjectType    string
	TargetProject string
	Action        string
}
