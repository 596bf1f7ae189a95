// Package openstacksim is a stateful simulator of the Keystone v3, Neutron v2.0 and
// Nova v2.1 APIs the operator uses. It speaks the real wire format over HTTP,
// so gophercloud (and therefore the operator's own OpenStack seam) runs
// against it unchanged. It keeps state, answers with the refusals a real
// cloud gives (409 on an allocated address, 400 on a second router interface
// on one subnet, 403/404 by project scope, ...), counts every request and can
// inject latency, errors and dropped connections.
//
// The exported structs below are copies of the simulator's state; their JSON
// tags follow Neutron's and Nova's attribute names.
package openstacksim

import "time"

type Project struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	DomainID string `json:"domain_id"`
}

// User is a Keystone user with roles on exactly one project, which is all the
// operator's credentials ever need.
type User struct {
	ID            string   `json:"id"`
	Name          string   `json:"name"`
	ProjectID     string   `json:"default_project_id"`
	Roles         []string `json:"roles"`
	AllowPassword bool     `json:"-"`
}

// AppCredential is an application credential without its secret; use
// Server.AppCredential for the secret.
type AppCredential struct {
	ID        string   `json:"id"`
	Name      string   `json:"name"`
	UserID    string   `json:"user_id"`
	ProjectID string   `json:"project_id"`
	Roles     []string `json:"roles"`
}

type Network struct {
	ID             string    `json:"id"`
	Name           string    `json:"name"`
	Description    string    `json:"description"`
	ProjectID      string    `json:"project_id"`
	Shared         bool      `json:"shared"`
	External       bool      `json:"router:external"`
	AdminStateUp   bool      `json:"admin_state_up"`
	Status         string    `json:"status"`
	MTU            int       `json:"mtu"`
	Subnets        []string  `json:"subnets"`
	Tags           []string  `json:"tags"`
	RevisionNumber int       `json:"revision_number"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

type AllocationPool struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

type Subnet struct {
	ID              string           `json:"id"`
	Name            string           `json:"name"`
	Description     string           `json:"description"`
	NetworkID       string           `json:"network_id"`
	ProjectID       string           `json:"project_id"`
	CIDR            string           `json:"cidr"`
	GatewayIP       string           `json:"gateway_ip"`
	IPVersion       int              `json:"ip_version"`
	EnableDHCP      bool             `json:"enable_dhcp"`
	AllocationPools []AllocationPool `json:"allocation_pools"`
	Tags            []string         `json:"tags"`
	RevisionNumber  int              `json:"revision_number"`
	CreatedAt       time.Time        `json:"created_at"`
	UpdatedAt       time.Time        `json:"updated_at"`
}

type FixedIP struct {
	SubnetID  string `json:"subnet_id"`
	IPAddress string `json:"ip_address"`
}

type AddressPair struct {
	IPAddress  string `json:"ip_address"`
	MACAddress string `json:"mac_address"`
}

type Port struct {
	ID                  string        `json:"id"`
	Name                string        `json:"name"`
	Description         string        `json:"description"`
	NetworkID           string        `json:"network_id"`
	ProjectID           string        `json:"project_id"`
	MACAddress          string        `json:"mac_address"`
	FixedIPs            []FixedIP     `json:"fixed_ips"`
	DeviceID            string        `json:"device_id"`
	DeviceOwner         string        `json:"device_owner"`
	Status              string        `json:"status"`
	AdminStateUp        bool          `json:"admin_state_up"`
	SecurityGroups      []string      `json:"security_groups"`
	AllowedAddressPairs []AddressPair `json:"allowed_address_pairs"`
	PortSecurityEnabled bool          `json:"port_security_enabled"`
	HostID              string        `json:"binding:host_id"`
	Tags                []string      `json:"tags"`
	RevisionNumber      int           `json:"revision_number"`
	CreatedAt           time.Time     `json:"created_at"`
	UpdatedAt           time.Time     `json:"updated_at"`
}

type SecurityGroup struct {
	ID             string              `json:"id"`
	Name           string              `json:"name"`
	Description    string              `json:"description"`
	ProjectID      string              `json:"project_id"`
	Stateful       bool                `json:"stateful"`
	Rules          []SecurityGroupRule `json:"security_group_rules"`
	Tags           []string            `json:"tags"`
	RevisionNumber int                 `json:"revision_number"`
	CreatedAt      time.Time           `json:"created_at"`
	UpdatedAt      time.Time           `json:"updated_at"`
}

// SecurityGroupRule holds Neutron's rule. Zero PortRangeMin/Max and empty
// Protocol, RemoteIPPrefix and RemoteGroupID are sent as null on the wire,
// as Neutron does.
type SecurityGroupRule struct {
	ID              string    `json:"id"`
	SecurityGroupID string    `json:"security_group_id"`
	Direction       string    `json:"direction"`
	EtherType       string    `json:"ethertype"`
	Protocol        string    `json:"protocol"`
	PortRangeMin    int       `json:"port_range_min"`
	PortRangeMax    int       `json:"port_range_max"`
	RemoteIPPrefix  string    `json:"remote_ip_prefix"`
	RemoteGroupID   string    `json:"remote_group_id"`
	Description     string    `json:"description"`
	ProjectID       string    `json:"project_id"`
	RevisionNumber  int       `json:"revision_number"`
	CreatedAt       time.Time `json:"created_at"`
	UpdatedAt       time.Time `json:"updated_at"`
}

type FloatingIP struct {
	ID                string    `json:"id"`
	Description       string    `json:"description"`
	FloatingNetworkID string    `json:"floating_network_id"`
	FloatingIPAddress string    `json:"floating_ip_address"`
	PortID            string    `json:"port_id"`
	FixedIPAddress    string    `json:"fixed_ip_address"`
	RouterID          string    `json:"router_id"`
	ProjectID         string    `json:"project_id"`
	Status            string    `json:"status"`
	Tags              []string  `json:"tags"`
	RevisionNumber    int       `json:"revision_number"`
	CreatedAt         time.Time `json:"created_at"`
	UpdatedAt         time.Time `json:"updated_at"`
}

type Route struct {
	Destination string `json:"destination"`
	NextHop     string `json:"nexthop"`
}

type GatewayInfo struct {
	NetworkID        string    `json:"network_id"`
	EnableSNAT       bool      `json:"enable_snat"`
	ExternalFixedIPs []FixedIP `json:"external_fixed_ips"`
}

type Router struct {
	ID             string       `json:"id"`
	Name           string       `json:"name"`
	Description    string       `json:"description"`
	ProjectID      string       `json:"project_id"`
	Status         string       `json:"status"`
	AdminStateUp   bool         `json:"admin_state_up"`
	GatewayInfo    *GatewayInfo `json:"external_gateway_info"`
	Routes         []Route      `json:"routes"`
	Tags           []string     `json:"tags"`
	RevisionNumber int          `json:"revision_number"`
	CreatedAt      time.Time    `json:"created_at"`
	UpdatedAt      time.Time    `json:"updated_at"`
}

// HasRoute reports whether the router carries exactly this route.
func (r Router) HasRoute(rt Route) bool {
	for _, x := range r.Routes {
		if x == rt {
			return true
		}
	}
	return false
}

type RBACPolicy struct {
	ID            string `json:"id"`
	ObjectID      string `json:"object_id"`
	ObjectType    string `json:"object_type"`
	Action        string `json:"action"`
	TargetProject string `json:"target_tenant"`
	ProjectID     string `json:"project_id"`
}

// Instance is a Nova server. (Server is the simulator itself.)
type Instance struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	ProjectID string    `json:"tenant_id"`
	Status    string    `json:"status"`
	Host      string    `json:"OS-EXT-SRV-ATTR:host"`
	CreatedAt time.Time `json:"created"`
	UpdatedAt time.Time `json:"updated"`
}

// Neutron device owners the simulator itself assigns.
const (
	OwnerRouterInterface = "network:router_interface"
	OwnerRouterGateway   = "network:router_gateway"
	OwnerDHCP            = "network:dhcp"
	OwnerCompute         = "compute:nova"
)
