package openstack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/attributestags"
)

// Neutron takes no tags in a create request (every release measured, Zed and 2025.1): a
// security group or floating IP create with "tags" is refused, a port create silently
// drops them unless the ML2 driver behind tag-ports-during-bulk-creation is on. So the
// seam creates the object untagged, then sets its tags, then its description. Between
// the create and the tags the object carries a marker description derived from the
// owner's UID tag instead of its own; a lookup by the owner's tags that finds nothing
// also looks for that marker, and finishes the tagging of what a crash left behind. So a
// crash at any point leaves at most one object to adopt and nothing unfindable.

// pendingPrefix starts the marker description of an object whose tags are not set yet.
const pendingPrefix = "bnerd-vpn-operator: tags pending for "

// pendingMarker is the marker for an object carrying tags, or "" when the tags name no
// owner (nothing would look such an object up by tag).
func pendingMarker(tags []string) string {
	for _, t := range tags {
		if strings.HasPrefix(t, TagUIDPrefix) {
			sum := sha256.Sum256([]byte(t))
			return pendingPrefix + hex.EncodeToString(sum[:12])
		}
	}
	return ""
}

// finishTagging sets tags on resource id (created untagged) and then, when the create
// used the marker, the real description. On failure it deletes the object, so a failed
// call never leaves an untagged object behind, and says so.
func (n *networking) finishTagging(ctx context.Context, resource, id string, tags []string, marker string,
	setDescription func(context.Context) error, remove func(context.Context) error) ([]string, error) {
	got, err := attributestags.ReplaceAll(ctx, n.c, resource, id, replaceTags{tags: tags}).Extract()
	if err == nil && marker != "" {
		err = setDescription(ctx)
	}
	if err != nil {
		err = wrapErr("tag "+strings.TrimSuffix(resource, "s")+" "+id+" after create", err)
		if derr := remove(ctx); derr != nil && !IsNotFound(derr) {
			return nil, errors.Join(err, fmt.Errorf("and deleting it failed, so it stays with marker %q: %w", marker, derr))
		}
		return nil, fmt.Errorf("%w (the untagged object was deleted)", err)
	}
	return got, nil
}

// selectorMarker is the marker a lookup by tags looks for: only a selector naming an
// owner UID has one.
func selectorMarker(tags []string) string { return pendingMarker(sanitizeTags(tags)) }
