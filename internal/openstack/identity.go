package openstack

import (
	"context"
	"fmt"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/tokens"
)

type identity struct {
	provider *gophercloud.ProviderClient
	idClient *gophercloud.ServiceClient
	network  string
	compute  string
	region   string
}

var _ Identity = (*identity)(nil)

// tokenResult is what both token results (create and get) offer.
type tokenResult interface {
	ExtractProject() (*tokens.Project, error)
	ExtractRoles() ([]tokens.Role, error)
	ExtractUser() (*tokens.User, error)
}

// TokenInfo reads the current token's scope and roles from the last
// authentication, so it costs no request; only a client that was handed a
// bare token falls back to asking Keystone.
func (i *identity) TokenInfo(ctx context.Context) (*TokenInfo, error) {
	var res tokenResult
	switch r := i.provider.GetAuthResult().(type) {
	case tokens.CreateResult:
		res = r
	case *tokens.CreateResult:
		res = r
	case tokens.GetResult:
		res = r
	case *tokens.GetResult:
		res = r
	default:
		g := tokens.Get(ctx, i.idClient, i.provider.Token())
		if g.Err != nil {
			return nil, wrapErr("keystone: validate token", g.Err)
		}
		res = g
	}
	info := &TokenInfo{NetworkEndpoint: i.network, ComputeEndpoint: i.compute, Region: i.region}
	project, err := res.ExtractProject()
	if err != nil {
		return nil, fmt.Errorf("keystone: read token project: %w", err)
	}
	if project != nil {
		info.ProjectID, info.ProjectName = project.ID, project.Name
	}
	user, err := res.ExtractUser()
	if err != nil {
		return nil, fmt.Errorf("keystone: read token user: %w", err)
	}
	if user != nil {
		info.UserID = user.ID
	}
	roles, err := res.ExtractRoles()
	if err != nil {
		return nil, fmt.Errorf("keystone: read token roles: %w", err)
	}
	for _, r := range roles {
		info.Roles = append(info.Roles, r.Name)
	}
	return info, nil
}
