// Package openstack is the operator's only seam to OpenStack: one small
// interface per service (Networking, Compute, Identity), plain result structs,
// error classes, credentials and the tags that make every created object
// adoptable after a crash. The implementation speaks gophercloud v2, so the
// same code runs against a real cloud and against the simulator in sim/.
package openstack

// FixedIP is one address a port holds on a subnet.
type FixedIP struct {
	SubnetID  string
	IPAddress string
}

// AddressPair is an extra address (or CIDR) a port may send from; Neutron's
// anti-spoofing drops everything else.
type AddressPair struct {
	IPAddress  string
	MACAddress string
}

type Port struct {
	ID                  string
	Name                string
	Description         string
	NetworkID           string
	MACAddress          string
	FixedIPs            []FixedIP
	DeviceID            string
	DeviceOwner         string
	AllowedAddressPairs []AddressPair
	SecurityGroups      []string
	Tags                []string
	ProjectID           string
	Status              string
}

// FixedIPOn returns the port's first address on subnetID ("" matches any
// subnet), or "" when it has none there.
func (p *Port) FixedIPOn(subnetID string) string {
	for _, ip := range p.FixedIPs {
		if subnetID == "" || ip.SubnetID == subnetID {
			return ip.IPAddress
		}
	}
	return ""
}

type Subnet struct {
	ID        string
	Name      string
	NetworkID string
	CIDR      string
	GatewayIP string
	ProjectID string
}

type Network struct {
	ID        string
	Name      string
	ProjectID string
	Shared    bool
	External  bool
	Subnets   []string
	Tags      []string
}

type SecurityGroup struct {
	ID          string
	Name        string
	Description string
	ProjectID   string
	Tags        []string
	Rules       []SecurityGroupRule
}

// SecurityGroupRule mirrors Neutron's rule. A zero PortRangeMin/Max means
// "all ports", an empty Protocol "all protocols", as in Neutron.
type SecurityGroupRule struct {
	ID              string
	SecurityGroupID string
	Direction       string
	EtherType       string
	Protocol        string
	PortRangeMin    int
	PortRangeMax    int
	RemoteIPPrefix  string
	Description     string
}

type FloatingIP struct {
	ID                string
	Description       string
	FloatingIPAddress string
	FloatingNetworkID string
	PortID            string
	FixedIPAddress    string
	Tags              []string
	ProjectID         string
	Status            string
}

// Quota is one Neutron quota: its limit (-1: unlimited), what is used and reserved.
type Quota struct {
	Limit, Used, Reserved int
}

// Headroom is how many more the quota admits (-1: unlimited).
func (q Quota) Headroom() int {
	if q.Limit < 0 {
		return -1
	}
	return max(0, q.Limit-q.Used-q.Reserved)
}

type Route struct {
	Destination string
	NextHop     string
}

type Router struct {
	ID        string
	Name      string
	ProjectID string
	Routes    []Route
	Tags      []string
}

// HasRoute reports whether the router carries exactly this route.
func (r *Router) HasRoute(want Route) bool {
	for _, rt := range r.Routes {
		if rt == want {
			return true
		}
	}
	return false
}

type RBACPolicy struct {
	ID            string
	ObjectID      string
	ObjectType    string
	Action        string
	TargetProject string
	ProjectID     string
}

type ServerInterface struct {
	PortID     string
	NetworkID  string
	MACAddress string
	FixedIPs   []FixedIP
	PortState  string
}

// TokenInfo is what the operator needs to know about the identity a
// credential authenticates as. It never carries the token itself.
type TokenInfo struct {
	ProjectID       string
	ProjectName     string
	UserID          string
	Roles           []string
	NetworkEndpoint string
	ComputeEndpoint string
	Region          string
}

// Neutron constants the operator uses; spelled once here so callers do not
// scatter string literals.
const (
	DirectionIngress = "ingress"
	DirectionEgress  = "egress"
	EtherTypeIPv4    = "IPv4"
	EtherTypeIPv6    = "IPv6"
	ProtocolTCP      = "tcp"
	ProtocolUDP      = "udp"

	RBACActionAccessAsShared = "access_as_shared"
	RBACObjectNetwork        = "network"
)
