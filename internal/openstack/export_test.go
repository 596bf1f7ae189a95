package openstack

import "slices"

// TokenOf returns the token a client set currently authenticates with, so a test can
// revoke it (the real Keystone's way of making a token expire).
func TokenOf(c *Clients) string {
	if id, ok := c.Identity.(*identity); ok {
		return id.provider.Token()
	}
	return ""
}

// PendingMarker is the description an object carries between its create and its tags
// (every object but a port on a Neutron with tag-ports-during-bulk-creation).
func PendingMarker(tags []string) string { return pendingMarker(tags) }

// FeaturesOf is what the seam makes of a Neutron listing aliases: the suite knows each
// simulator shape's features before it starts one.
func FeaturesOf(aliases []string) Features { return featuresOf(slices.Clone(aliases)) }
