package openstack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Tags every operator-made OpenStack object carries. Together they name the
// Kubernetes owner, so a crashed reconcile can adopt what it already made
// instead of creating a duplicate, and a human can tell who made it.
const (
	TagManaged     = "bnerd-vpn-operator"
	TagKindPrefix  = "bnerd.net/kind="
	TagOwnerPrefix = "bnerd.net/owner="
	TagUIDPrefix   = "bnerd.net/uid="
	// TagPinnedByPrefix marks a floating IP a gateway pinned (spec.endpoint.floatingIP)
	// with that gateway's UID while the gateway holds it. A pinned address is not the
	// operator's (it never carries the owner tags and is never released); the tag keeps
	// another gateway from taking it while it is briefly unassociated.
	TagPinnedByPrefix = "bnerd.net/pinned-by="
	// TagServiceCIDRPrefix records, on a gateway's dedicated port, the /24 the operator
	// allocated to that gateway. The gateway's status also names it, but the gateway
	// pod may write its status; the port, in the operator's project, only the operator
	// writes. The allocator is rebuilt from these tags, and the ClusterLink controller
	// routes only a service CIDR its gateway's port carries.
	TagServiceCIDRPrefix = "bnerd.net/service-cidr="

	// MaxTagLength is Neutron's limit on one tag.
	MaxTagLength = 255
	// MaxNameLength keeps generated names readable in CLI tables and
	// within DNS-label size should they ever become dns_name.
	MaxNameLength = 63
)

// Owner identifies the Kubernetes object an OpenStack object belongs to.
// Namespace is empty for cluster-scoped kinds (ClusterLink).
type Owner struct {
	Kind      string
	Namespace string
	Name      string
	UID       string
}

func (o Owner) key() string {
	if o.Namespace == "" {
		return o.Name
	}
	return o.Namespace + "/" + o.Name
}

// Tags returns the full, deterministic tag set for objects o owns.
func (o Owner) Tags() []string {
	return []string{
		TagManaged,
		SanitizeTag(TagKindPrefix + o.Kind),
		SanitizeTag(TagOwnerPrefix + o.key()),
		SanitizeTag(TagUIDPrefix + o.UID),
	}
}

// Selector returns the tags a lookup filters by to find objects o owns.
// The UID, not the name, decides ownership: a CR deleted and recreated under
// the same name is a different owner.
func (o Owner) Selector() []string {
	return []string{TagManaged, SanitizeTag(TagUIDPrefix + o.UID)}
}

// OwnedBy reports whether tags carry o's selector.
func (o Owner) OwnedBy(tags []string) bool {
	return HasTags(tags, o.Selector()...)
}

// OwnerFromTags reads the owner back from an object's tags; ok is false for
// objects this operator did not tag.
func OwnerFromTags(tags []string) (o Owner, ok bool) {
	managed := false
	for _, t := range tags {
		switch {
		case t == TagManaged:
			managed = true
		case strings.HasPrefix(t, TagKindPrefix):
			o.Kind = strings.TrimPrefix(t, TagKindPrefix)
		case strings.HasPrefix(t, TagOwnerPrefix):
			key := strings.TrimPrefix(t, TagOwnerPrefix)
			if ns, name, found := strings.Cut(key, "/"); found {
				o.Namespace, o.Name = ns, name
			} else {
				o.Name = key
			}
		case strings.HasPrefix(t, TagUIDPrefix):
			o.UID = strings.TrimPrefix(t, TagUIDPrefix)
		}
	}
	return o, managed && o.UID != ""
}

// PinnedBy returns the UID a floating IP's pinned-by tag names ("" when untagged).
func PinnedBy(tags []string) string {
	for _, t := range tags {
		if strings.HasPrefix(t, TagPinnedByPrefix) {
			return strings.TrimPrefix(t, TagPinnedByPrefix)
		}
	}
	return ""
}

// WithPin returns tags with the pinned-by tag set to uid ("" removes it); the other
// tags stay as they are.
func WithPin(tags []string, uid string) []string {
	out := make([]string, 0, len(tags)+1)
	for _, t := range tags {
		if !strings.HasPrefix(t, TagPinnedByPrefix) {
			out = append(out, t)
		}
	}
	if uid != "" {
		out = append(out, SanitizeTag(TagPinnedByPrefix+uid))
	}
	return out
}

// ServiceCIDRTag returns the service CIDR a port's tag records ("" when untagged).
func ServiceCIDRTag(tags []string) string {
	for _, t := range tags {
		if strings.HasPrefix(t, TagServiceCIDRPrefix) {
			return strings.TrimPrefix(t, TagServiceCIDRPrefix)
		}
	}
	return ""
}

// WithServiceCIDR returns tags with the service-CIDR tag set to cidr ("" removes it);
// the other tags stay as they are.
func WithServiceCIDR(tags []string, cidr string) []string {
	out := make([]string, 0, len(tags)+1)
	for _, t := range tags {
		if !strings.HasPrefix(t, TagServiceCIDRPrefix) {
			out = append(out, t)
		}
	}
	if cidr != "" {
		out = append(out, SanitizeTag(TagServiceCIDRPrefix+cidr))
	}
	return out
}

// HasTags reports whether have contains every tag in want.
func HasTags(have []string, want ...string) bool {
	set := make(map[string]struct{}, len(have))
	for _, t := range have {
		set[t] = struct{}{}
	}
	for _, t := range want {
		if _, ok := set[t]; !ok {
			return false
		}
	}
	return true
}

// SanitizeTag makes s a valid Neutron tag that also survives a tag filter:
// commas (the filter separator) and control characters become '_', and a
// changed or over-long tag is cut and suffixed with a hash of the original so
// distinct inputs stay distinct. The result depends only on s.
func SanitizeTag(s string) string {
	clean := strings.Map(func(r rune) rune {
		if r == ',' || unicode.IsControl(r) || r == utf8.RuneError {
			return '_'
		}
		return r
	}, s)
	if clean == s && utf8.RuneCountInString(s) <= MaxTagLength {
		return s
	}
	// A replaced character could make two inputs collide; the hash of the
	// original keeps them apart.
	return truncateWithHash(clean, s, MaxTagLength)
}

// ResourceName builds "bnerd-vpn-<kind>-<namespace>-<name>" (namespace
// omitted when empty), shortened with a hash suffix beyond MaxNameLength.
// Names are for humans; the operator finds objects by tag or ID.
func ResourceName(kind, namespace, name string) string {
	parts := []string{"bnerd-vpn", strings.ToLower(kind)}
	if namespace != "" {
		parts = append(parts, namespace)
	}
	parts = append(parts, name)
	full := strings.Join(parts, "-")
	clean := strings.Map(func(r rune) rune {
		if r < utf8.RuneSelf && (r == '-' || r == '.' || r == '_' ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')) {
			return r
		}
		return '_'
	}, full)
	if clean == full && len(full) <= MaxNameLength {
		return full
	}
	return truncateWithHash(clean, full, MaxNameLength)
}

// truncateWithHash cuts s so that s + "-" + 8 hex digits of sha256(orig)
// fits max runes.
func truncateWithHash(s, orig string, max int) string {
	sum := sha256.Sum256([]byte(orig))
	suffix := "-" + hex.EncodeToString(sum[:4])
	keep := max - len(suffix)
	runes := []rune(s)
	if len(runes) > keep {
		runes = runes[:keep]
	}
	return strings.TrimRight(string(runes), "-") + suffix
}

// Recorded reads the object a status records by id, when it is still o's: nil (and no
// error) when nothing is recorded, the object is gone, or it no longer carries o's tags.
// Then the caller looks for o's objects by their tags, since a crash between a create
// and the status write, or a hand edit, may have left another one; any other error of
// the read stops the lookup. Every find-by-ID-else-by-tags of the reconcilers starts
// here, so a recorded ID is never trusted without the tags that make it o's.
func Recorded[T any](ctx context.Context, o Owner, id string, get func(context.Context, string) (*T, error), tags func(*T) []string) (*T, error) {
	if id == "" {
		return nil, nil
	}
	obj, err := get(ctx, id)
	switch {
	case err == nil && o.OwnedBy(tags(obj)):
		return obj, nil
	case err == nil, IsNotFound(err):
		return nil, nil
	}
	return nil, err
}

// PortTags and SecurityGroupTags are the tags Recorded checks.
func PortTags(p *Port) []string { return p.Tags }

// SecurityGroupTags: see PortTags.
func SecurityGroupTags(g *SecurityGroup) []string { return g.Tags }
