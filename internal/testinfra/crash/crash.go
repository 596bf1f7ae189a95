// Package crash injects the operator's death right after an OpenStack write took effect,
// for the controllers' crash-consistency tests: the write happened, its answer never
// arrived, and nothing after it ran. A fresh reconciler then plays the restarted operator.
package crash

import (
	"context"
	"errors"
	"sync"

	"bnerd.net/vpn-operator/internal/openstack"
)

// ErrCrash is what the write that "crashed" returns in place of its answer.
var ErrCrash = errors.New("simulated crash after a successful write")

// Point counts the OpenStack writes made through it and crashes after the At-th one
// succeeded (At 0: never, only count).
type Point struct {
	At    int
	mu    sync.Mutex
	n     int
	ops   []string
	fired bool
}

// After records a write named op that returned err and decides whether it crashes.
func (p *Point) After(op string, err error) error {
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	p.ops = append(p.ops, op)
	if p.At > 0 && p.n == p.At {
		p.fired = true
		return ErrCrash
	}
	return nil
}

// Fired reports whether the crash happened.
func (p *Point) Fired() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fired
}

// Writes is the successful writes so far, by name, in order.
func (p *Point) Writes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.ops...)
}

// Clients returns c with every Networking and Compute write going through p.
func Clients(c *openstack.Clients, p *Point) *openstack.Clients {
	return &openstack.Clients{Networking: Networking{c.Networking, p}, Compute: Compute{c.Compute, p}, Identity: c.Identity}
}

// Networking passes every write of the embedded Networking through P.
type Networking struct {
	openstack.Networking
	P *Point
}

func (n Networking) AddRouterInterface(ctx context.Context, router, port string) error {
	return n.P.After("AddRouterInterface", n.Networking.AddRouterInterface(ctx, router, port))
}
func (n Networking) AddRouterRoutes(ctx context.Context, id string, routes []openstack.Route) (*openstack.Router, error) {
	r, err := n.Networking.AddRouterRoutes(ctx, id, routes)
	if err = n.P.After("AddRouterRoutes", err); err != nil {
		return nil, err
	}
	return r, nil
}
func (n Networking) AssociateFloatingIP(ctx context.Context, id, port string) (*openstack.FloatingIP, error) {
	f, err := n.Networking.AssociateFloatingIP(ctx, id, port)
	if err = n.P.After("AssociateFloatingIP", err); err != nil {
		return nil, err
	}
	return f, nil
}
func (n Networking) CreateFloatingIP(ctx context.Context, o openstack.CreateFloatingIPOpts) (*openstack.FloatingIP, error) {
	f, err := n.Networking.CreateFloatingIP(ctx, o)
	if err = n.P.After("CreateFloatingIP", err); err != nil {
		return nil, err
	}
	return f, nil
}
func (n Networking) CreatePort(ctx context.Context, o openstack.CreatePortOpts) (*openstack.Port, error) {
	p, err := n.Networking.CreatePort(ctx, o)
	if err = n.P.After("CreatePort", err); err != nil {
		return nil, err
	}
	return p, nil
}
func (n Networking) CreateSecurityGroup(ctx context.Context, o openstack.CreateSecurityGroupOpts) (*openstack.SecurityGroup, error) {
	g, err := n.Networking.CreateSecurityGroup(ctx, o)
	if err = n.P.After("CreateSecurityGroup", err); err != nil {
		return nil, err
	}
	return g, nil
}
func (n Networking) CreateSecurityGroupRule(ctx context.Context, o openstack.CreateSecurityGroupRuleOpts) (*openstack.SecurityGroupRule, error) {
	r, err := n.Networking.CreateSecurityGroupRule(ctx, o)
	if err = n.P.After("CreateSecurityGroupRule", err); err != nil {
		return nil, err
	}
	return r, nil
}
func (n Networking) CreateSecurityGroupRules(ctx context.Context, o []openstack.CreateSecurityGroupRuleOpts) ([]openstack.SecurityGroupRule, error) {
	r, err := n.Networking.CreateSecurityGroupRules(ctx, o)
	if err = n.P.After("CreateSecurityGroupRules", err); err != nil {
		return nil, err
	}
	return r, nil
}
func (n Networking) DeleteFloatingIP(ctx context.Context, id string) error {
	return n.P.After("DeleteFloatingIP", n.Networking.DeleteFloatingIP(ctx, id))
}
func (n Networking) DeletePort(ctx context.Context, id string) error {
	return n.P.After("DeletePort", n.Networking.DeletePort(ctx, id))
}
func (n Networking) DeleteRBACPolicy(ctx context.Context, id string) error {
	return n.P.After("DeleteRBACPolicy", n.Networking.DeleteRBACPolicy(ctx, id))
}
func (n Networking) DeleteSecurityGroup(ctx context.Context, id string) error {
	return n.P.After("DeleteSecurityGroup", n.Networking.DeleteSecurityGroup(ctx, id))
}
func (n Networking) DeleteSecurityGroupRule(ctx context.Context, id string) error {
	return n.P.After("DeleteSecurityGroupRule", n.Networking.DeleteSecurityGroupRule(ctx, id))
}
func (n Networking) DisassociateFloatingIP(ctx context.Context, id string) (*openstack.FloatingIP, error) {
	f, err := n.Networking.DisassociateFloatingIP(ctx, id)
	if err = n.P.After("DisassociateFloatingIP", err); err != nil {
		return nil, err
	}
	return f, nil
}
func (n Networking) RemoveRouterInterface(ctx context.Context, router, port string) error {
	return n.P.After("RemoveRouterInterface", n.Networking.RemoveRouterInterface(ctx, router, port))
}
func (n Networking) RemoveRouterRoutes(ctx context.Context, id string, routes []openstack.Route) (*openstack.Router, error) {
	r, err := n.Networking.RemoveRouterRoutes(ctx, id, routes)
	if err = n.P.After("RemoveRouterRoutes", err); err != nil {
		return nil, err
	}
	return r, nil
}
func (n Networking) ReplaceFloatingIPTags(ctx context.Context, id string, tags []string) ([]string, error) {
	got, err := n.Networking.ReplaceFloatingIPTags(ctx, id, tags)
	if err = n.P.After("ReplaceFloatingIPTags", err); err != nil {
		return nil, err
	}
	return got, nil
}
func (n Networking) ReplacePortTags(ctx context.Context, id string, tags []string) ([]string, error) {
	got, err := n.Networking.ReplacePortTags(ctx, id, tags)
	if err = n.P.After("ReplacePortTags", err); err != nil {
		return nil, err
	}
	return got, nil
}
func (n Networking) ShareNetwork(ctx context.Context, network, project string) (*openstack.RBACPolicy, error) {
	p, err := n.Networking.ShareNetwork(ctx, network, project)
	if err = n.P.After("ShareNetwork", err); err != nil {
		return nil, err
	}
	return p, nil
}
func (n Networking) UpdatePortAllowedAddressPairs(ctx context.Context, id string, pairs []openstack.AddressPair) (*openstack.Port, error) {
	p, err := n.Networking.UpdatePortAllowedAddressPairs(ctx, id, pairs)
	if err = n.P.After("UpdatePortAllowedAddressPairs", err); err != nil {
		return nil, err
	}
	return p, nil
}
func (n Networking) UpdatePortSecurityGroups(ctx context.Context, id string, sgs []string) (*openstack.Port, error) {
	p, err := n.Networking.UpdatePortSecurityGroups(ctx, id, sgs)
	if err = n.P.After("UpdatePortSecurityGroups", err); err != nil {
		return nil, err
	}
	return p, nil
}

// Compute passes the port attach and detach through P.
type Compute struct {
	openstack.Compute
	P *Point
}

func (c Compute) AttachPort(ctx context.Context, server, port string) (*openstack.ServerInterface, error) {
	i, err := c.Compute.AttachPort(ctx, server, port)
	if err = c.P.After("AttachPort", err); err != nil {
		return nil, err
	}
	return i, nil
}
func (c Compute) DetachPort(ctx context.Context, server, port string) error {
	return c.P.After("DetachPort", c.Compute.DetachPort(ctx, server, port))
}

// The wrappers are the interfaces' own.
var (
	_ openstack.Networking = Networking{}
	_ openstack.Compute    = Compute{}
)
