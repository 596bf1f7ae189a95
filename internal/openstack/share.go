package openstack

import (
	"context"
	"fmt"
)

// RBACTargetEveryProject is the target of an RBAC policy that applies to every project.
const RBACTargetEveryProject = "*"

// NetworkShareReader is what reading a network's sharing needs (Networking has it).
type NetworkShareReader interface {
	GetNetwork(ctx context.Context, id string) (*Network, error)
	ListRBACPolicies(ctx context.Context, opts ListRBACPoliciesOpts) ([]RBACPolicy, error)
}

// NetworkShare is how a network is shared.
type NetworkShare struct {
	Network *Network
	// Flag: the network's shared attribute is set (openstack network create --share, or
	// network set --share). Neutron shows it to the owner when a wildcard policy exists.
	Flag bool
	// Wildcard are the access_as_shared policies with target "*": every project may put
	// ports on the network.
	Wildcard []RBACPolicy
	// PerProject are the access_as_shared policies with one project as target.
	PerProject []RBACPolicy
}

// EveryProject reports whether every project of the cloud may use the network: the
// shared flag or a wildcard policy.
func (s NetworkShare) EveryProject() bool { return s.Flag || len(s.Wildcard) > 0 }

// How says how the network is shared with every project, and what an OpenStack admin
// runs to undo it; "" when it is not.
func (s NetworkShare) How() string {
	id := s.Network.ID
	switch {
	case s.Flag:
		return fmt.Sprintf("network %s has shared=True (remove it: openstack network set --no-share %s)", id, id)
	case len(s.Wildcard) > 0:
		return fmt.Sprintf("RBAC policy %s shares network %s with every project, target * (remove it: openstack network rbac delete %s)", s.Wildcard[0].ID, id, s.Wildcard[0].ID)
	}
	return ""
}

// ReadNetworkShare reads the network and its access_as_shared RBAC policies (the ones
// the caller may see: an owner sees every policy on its own network).
func ReadNetworkShare(ctx context.Context, n NetworkShareReader, networkID string) (NetworkShare, error) {
	net, err := n.GetNetwork(ctx, networkID)
	if err != nil {
		return NetworkShare{}, err
	}
	pols, err := n.ListRBACPolicies(ctx, ListRBACPoliciesOpts{ObjectID: net.ID, ObjectType: RBACObjectNetwork, Action: RBACActionAccessAsShared})
	if err != nil {
		return NetworkShare{Network: net}, err
	}
	s := NetworkShare{Network: net, Flag: net.Shared}
	for _, p := range pols {
		if p.ObjectID != net.ID || p.Action != RBACActionAccessAsShared {
			continue
		}
		if p.TargetProject == RBACTargetEveryProject {
			s.Wildcard = append(s.Wildcard, p)
		} else {
			s.PerProject = append(s.PerProject, p)
		}
	}
	return s, nil
}
