package openstack

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
)

// The project roles the operator's credentials need. Under the secure-RBAC policy
// defaults (2025.1 ships them switched on) Neutron and Nova let member write and reader
// read a project's objects; under the legacy defaults (Zed) any role of the project reads
// and writes. Whether a credential made with member alone reads depends on Keystone as
// well: 2025.1's puts the reader that member implies into the token, Zed's put exactly
// the credential's roles, so on a cloud with Zed's Keystone and the secure-RBAC defaults
// switched on such a credential sees nothing of its own project. A credential made with
// reader alone cannot write under the secure-RBAC defaults.
const (
	RoleMember = "member"
	RoleReader = "reader"
	RoleAdmin  = "admin"
)

// NeededRoles are the roles a credential of the operator (its own, or a customer's for
// a cross-tenant ClusterLink) must carry on every release.
var NeededRoles = []string{RoleMember, RoleReader}

// ErrMissingRole marks a credential without a role the operator needs.
var ErrMissingRole = errors.New("the OpenStack credential lacks a role the operator needs")

// RoleError names the missing role and what it is for.
type RoleError struct {
	Missing string   // the role to add
	Roles   []string // the roles the token carries
	Why     string
}

func (e *RoleError) Error() string {
	roles := "none"
	if len(e.Roles) > 0 {
		roles = strings.Join(e.Roles, ", ")
	}
	return fmt.Sprintf("the credential lacks the %s role (its token carries: %s): %s; create the application credential with the roles %s",
		e.Missing, roles, e.Why, strings.Join(NeededRoles, " and "))
}

func (e *RoleError) Is(target error) bool { return target == ErrMissingRole }

func hasRoleFold(roles []string, want string) bool {
	return slices.ContainsFunc(roles, func(r string) bool { return strings.EqualFold(r, want) })
}

// NeedsProbe reports whether CheckRoles needs a probe (ProbeOwnProject) to judge roles:
// only a member without reader can work or not depending on the cloud's policy.
func NeedsProbe(roles []string) bool {
	return !hasRoleFold(roles, RoleAdmin) && hasRoleFold(roles, RoleMember) && !hasRoleFold(roles, RoleReader)
}

// ErrProjectHidden: the credential does not see its own project's objects.
var ErrProjectHidden = fmt.Errorf("%w: the project's own default security group is hidden from the credential", ErrNotFound)

// ProbeOwnProject looks, with net's credential, for its project's default security
// group, which every project has (Neutron makes it on the project's first look) and
// which the policy shows to whoever may read the project's objects. It returns nil when
// the group is visible, ErrProjectHidden when it is not, or the failure of the look.
func ProbeOwnProject(ctx context.Context, net Networking, projectID string) error {
	seen, err := net.SeesDefaultSecurityGroup(ctx, projectID)
	if err != nil {
		return err
	}
	if !seen {
		return ErrProjectHidden
	}
	return nil
}

func (n *networking) SeesDefaultSecurityGroup(ctx context.Context, projectID string) (bool, error) {
	gs, err := n.listSecurityGroups(ctx, groups.ListOpts{Name: "default", ProjectID: projectID})
	return len(gs) > 0, err
}

// CheckRoles judges a credential's roles. roles are its token's; probe is the outcome of
// ProbeOwnProject with the same credential (needed only when NeedsProbe), from which the
// check learns whether this cloud hides a project's objects from a token without reader.
//
//   - Without member (and not admin) the credential is refused on every release: every
//     write the operator makes needs member under the secure-RBAC defaults. (The
//     legacy defaults let any role write, reader too; the operator does not rely on
//     that, so a cloud's move to secure RBAC cannot break a running installation.)
//   - Without reader (and not admin) it is refused when the probe found the project
//     hidden: the cloud enforces the secure-RBAC defaults. When the probe saw the
//     project, the cloud runs the legacy defaults: the credential works now, and the
//     warning says that it stops working when the cloud moves on.
//   - A probe that failed otherwise (a fault, a timeout) is returned as it is, for the
//     caller to retry.
func CheckRoles(roles []string, probe error) (warning string, err error) {
	if hasRoleFold(roles, RoleAdmin) {
		return "", nil
	}
	if !hasRoleFold(roles, RoleMember) {
		return "", &RoleError{Missing: RoleMember, Roles: roles,
			Why: "writes (ports, security groups, floating IPs, router interfaces and routes, network shares, interface attachments) need it under the secure-RBAC policy defaults"}
	}
	if hasRoleFold(roles, RoleReader) {
		return "", nil
	}
	switch {
	case probe == nil:
		return "the credential lacks the reader role: this cloud's policy lets it read without, but a cloud with the secure-RBAC defaults (OpenStack 2023.2 and later) shows a project's objects only to reader; recreate the application credential with the roles " +
			strings.Join(NeededRoles, " and "), nil
	case errors.Is(probe, ErrProjectHidden):
		return "", &RoleError{Missing: RoleReader, Roles: roles,
			Why: "this cloud enforces the secure-RBAC policy defaults, which show a project's objects only to reader (the project's own default security group is hidden from it)"}
	default:
		return "", probe
	}
}
