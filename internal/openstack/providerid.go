package openstack

import (
	"errors"
	"fmt"
	"regexp"
)

// providerIDRe matches the providerID the OpenStack cloud controller manager gives a
// node: openstack:///<server-uuid> or openstack://<region>/<server-uuid>.
var providerIDRe = regexp.MustCompile(`^openstack://[^/]*/([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$`)

// ErrProviderIDUnparseable: a node's providerID does not name an OpenStack server.
var ErrProviderIDUnparseable = errors.New("providerID does not name an OpenStack server")

// ParseProviderID returns the Nova server ID of openstack:///<uuid> or
// openstack://<region>/<uuid>. It lives with the OpenStack seam, not with the gateway
// controller, so that read-only callers (diagnose, the cluster check) need not import a
// controller.
func ParseProviderID(pid string) (string, error) {
	m := providerIDRe.FindStringSubmatch(pid)
	if m == nil {
		return "", fmt.Errorf("%w: %q (want openstack:///<server-uuid>)", ErrProviderIDUnparseable, pid)
	}
	return m[1], nil
}
