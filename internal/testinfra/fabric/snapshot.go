package fabric

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"
)

// Snapshot is the part of Neutron's state the fabric wires: read in one pass, with an
// admin credential (the fabric stands in for Neutron's agents, which see every project).
type Snapshot struct {
	Networks       []Network
	Subnets        []Subnet
	Ports          []Port
	Routers        []Router
	FloatingIPs    []FloatingIP
	SecurityGroups []SecurityGroup
}

type Network struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	External bool   `json:"router:external"`
}

type Subnet struct {
	ID        string `json:"id"`
	NetworkID string `json:"network_id"`
	CIDR      string `json:"cidr"`
	GatewayIP string `json:"gateway_ip"`
	IPVersion int    `json:"ip_version"`
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
	NetworkID           string        `json:"network_id"`
	MACAddress          string        `json:"mac_address"`
	FixedIPs            []FixedIP     `json:"fixed_ips"`
	DeviceID            string        `json:"device_id"`
	DeviceOwner         string        `json:"device_owner"`
	SecurityGroups      []string      `json:"security_groups"`
	AllowedAddressPairs []AddressPair `json:"allowed_address_pairs"`
	PortSecurityEnabled *bool         `json:"port_security_enabled"`
	Tags                []string      `json:"tags"`
}

type Route struct {
	DestinationCIDR string `json:"destination"`
	NextHop         string `json:"nexthop"`
}

type GatewayInfo struct {
	NetworkID        string    `json:"network_id"`
	EnableSNAT       *bool     `json:"enable_snat"`
	ExternalFixedIPs []FixedIP `json:"external_fixed_ips"`
}

type Router struct {
	ID          string       `json:"id"`
	Name        string       `json:"name"`
	GatewayInfo *GatewayInfo `json:"external_gateway_info"`
	Routes      []Route      `json:"routes"`
}

type FloatingIP struct {
	ID                string   `json:"id"`
	FloatingIP        string   `json:"floating_ip_address"`
	FloatingNetworkID string   `json:"floating_network_id"`
	PortID            string   `json:"port_id"`
	FixedIP           string   `json:"fixed_ip_address"`
	RouterID          string   `json:"router_id"`
	Tags              []string `json:"tags"`
}

type SecurityGroupRule struct {
	Direction      string
	EtherType      string
	Protocol       string
	PortRangeMin   int
	PortRangeMax   int
	RemoteIPPrefix string
	RemoteGroupID  string
}

type SecurityGroup struct {
	ID    string
	Name  string
	Tags  []string
	Rules []SecurityGroupRule
}

// Reader reads Snapshots from an OpenStack cloud.
type Reader struct {
	network *gophercloud.ServiceClient
}

// Credential is an application credential (the fabric's admin identity).
type Credential struct {
	AuthURL, Region, ID, Secret string
}

// NewReader authenticates and locates Neutron in the catalog.
func NewReader(ctx context.Context, c Credential) (*Reader, error) {
	provider, err := openstack.NewClient(c.AuthURL)
	if err != nil {
		return nil, err
	}
	provider.HTTPClient = http.Client{Timeout: 10 * time.Second}
	ao := gophercloud.AuthOptions{
		IdentityEndpoint: c.AuthURL, ApplicationCredentialID: c.ID, ApplicationCredentialSecret: c.Secret,
		AllowReauth: true,
	}
	if err := openstack.AuthenticateV3(ctx, provider, &ao, gophercloud.EndpointOpts{}); err != nil {
		return nil, fmt.Errorf("keystone: %w", err)
	}
	nc, err := openstack.NewNetworkV2(provider, gophercloud.EndpointOpts{Region: c.Region})
	if err != nil {
		return nil, fmt.Errorf("network endpoint: %w", err)
	}
	return &Reader{network: nc}, nil
}

// Network is the Neutron client (the same admin identity), for tests that change the
// cloud under the fabric.
func (r *Reader) Network() *gophercloud.ServiceClient { return r.network }

// Read lists everything the fabric needs.
func (r *Reader) Read(ctx context.Context) (*Snapshot, error) {
	var s Snapshot
	page, err := networks.List(r.network, networks.ListOpts{}).AllPages(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing networks: %w", err)
	}
	if err := networks.ExtractNetworksInto(page, &s.Networks); err != nil {
		return nil, err
	}
	page, err = subnets.List(r.network, subnets.ListOpts{}).AllPages(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing subnets: %w", err)
	}
	sns, err := subnets.ExtractSubnets(page)
	if err != nil {
		return nil, err
	}
	for _, sn := range sns {
		s.Subnets = append(s.Subnets, Subnet{ID: sn.ID, NetworkID: sn.NetworkID, CIDR: sn.CIDR, GatewayIP: sn.GatewayIP, IPVersion: sn.IPVersion})
	}
	page, err = ports.List(r.network, ports.ListOpts{}).AllPages(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing ports: %w", err)
	}
	if err := ports.ExtractPortsInto(page, &s.Ports); err != nil {
		return nil, err
	}
	page, err = routers.List(r.network, routers.ListOpts{}).AllPages(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing routers: %w", err)
	}
	if err := routers.ExtractRoutersInto(page, &s.Routers); err != nil {
		return nil, err
	}
	page, err = floatingips.List(r.network, floatingips.ListOpts{}).AllPages(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing floating IPs: %w", err)
	}
	if err := floatingips.ExtractFloatingIPsInto(page, &s.FloatingIPs); err != nil {
		return nil, err
	}
	page, err = groups.List(r.network, groups.ListOpts{}).AllPages(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing security groups: %w", err)
	}
	gs, err := groups.ExtractGroups(page)
	if err != nil {
		return nil, err
	}
	for _, g := range gs {
		sg := SecurityGroup{ID: g.ID, Name: g.Name, Tags: g.Tags}
		for _, r := range g.Rules {
			sg.Rules = append(sg.Rules, SecurityGroupRule{
				Direction: r.Direction, EtherType: r.EtherType, Protocol: r.Protocol,
				PortRangeMin: r.PortRangeMin, PortRangeMax: r.PortRangeMax,
				RemoteIPPrefix: r.RemoteIPPrefix, RemoteGroupID: r.RemoteGroupID,
			})
		}
		s.SecurityGroups = append(s.SecurityGroups, sg)
	}
	return &s, nil
}
