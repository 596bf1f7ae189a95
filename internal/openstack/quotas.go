package openstack

import "context"

// Neutron quota resource names a gateway consumes: a port, a floating IP, a security
// group and its rules; a ClusterLink a port, and a cross-tenant one an RBAC policy.
const (
	QuotaPort              = "port"
	QuotaFloatingIP        = "floatingip"
	QuotaSecurityGroup     = "security_group"
	QuotaSecurityGroupRule = "security_group_rule"
	QuotaRBACPolicy        = "rbac_policy"
)

// QuotaReader reads a project's Neutron quotas with what is in use, by resource (the
// quota_details extension). The seam's Networking implements it (networking.go);
// kubectl vpn check needs no more of it.
type QuotaReader interface {
	QuotaDetails(ctx context.Context, projectID string) (map[string]Quota, error)
}

var _ QuotaReader = (*networking)(nil)
