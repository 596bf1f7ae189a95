package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"

	"bnerd.net/vpn-operator/internal/openstack"
)

// checkOperatorRoles refuses to start when the operator's credential lacks a role it
// needs (openstack.CheckRoles), naming the role; a member credential without reader
// on a cloud that still runs the legacy policy defaults starts with a warning. The
// probe (a look at the project's own default security group, a passing fault waited
// out) is made only when the roles alone cannot tell.
func checkOperatorRoles(ctx context.Context, c *openstack.Clients, token *openstack.TokenInfo, log logr.Logger) error {
	var probe error
	if openstack.NeedsProbe(token.Roles) {
		err := waitOutFaults(ctx, log, func() error {
			probe = openstack.ProbeOwnProject(ctx, c.Networking, token.ProjectID)
			if errors.Is(probe, openstack.ErrProjectHidden) {
				return nil // a verdict, not a fault
			}
			return probe
		})
		if err != nil {
			return fmt.Errorf("checking the operator's OpenStack roles: %w", err)
		}
	}
	warning, err := openstack.CheckRoles(token.Roles, probe)
	if err != nil {
		return fmt.Errorf("checking the operator's OpenStack roles: %w", err)
	}
	if warning != "" {
		log.Info("WARNING: " + warning)
	}
	return nil
}
