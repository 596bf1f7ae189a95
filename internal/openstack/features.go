package openstack

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions"
)

// Neutron extension aliases the operator looks for.
const (
	ExtSecurityGroup    = "security-group"
	ExtRouter           = "router"
	ExtExternalNet      = "external-net"
	ExtExtraRoute       = "extraroute"
	ExtExtraRouteAtomic = "extraroute-atomic"
	ExtRevisionIfMatch  = "revision-if-match"
	ExtStandardAttrTag  = "standard-attr-tag"
	// ExtTagCreation is listed from 2024.2 on: POST .../tags adds several tags at once.
	// It does not make a create request keep its tags (see Features).
	ExtTagCreation         = "tag-creation"
	ExtTagPortsAtCreation  = "tag-ports-during-bulk-creation"
	ExtAllowedAddressPairs = "allowed-address-pairs"
	ExtRBACPolicies        = "rbac-policies"
)

// RequiredExtensions are the Neutron extensions the operator cannot work without: its
// objects are found by tag, its gateways need their own security group, floating IP,
// allowed-address pairs and router routes, and cross-tenant links share the transit
// network by RBAC.
var RequiredExtensions = []string{
	ExtSecurityGroup, ExtRouter, ExtExternalNet, ExtExtraRoute, ExtStandardAttrTag,
	ExtAllowedAddressPairs, ExtRBACPolicies,
}

// Features is what the cloud's Neutron offers beyond the required set, and so which
// path the seam takes.
//
// Tags never travel in the create of a security group or floating IP: no Neutron the
// project has measured takes them there. Zed refuses them (400), and so does 2025.1,
// although it lists tag-creation: that extension is the API that adds several tags to
// an existing resource at once (POST /v2.0/<resources>/<id>/tags), not tags in a
// create request. The seam creates such an object with a marker description, tags it,
// then sets its description (tagpending.go), on every release.
type Features struct {
	// Extensions are every alias Neutron lists.
	Extensions []string
	// PortTagCreation: a port create keeps its tags (the ML2 extension driver behind
	// tag-ports-during-bulk-creation). Without it Neutron accepts "tags" in a port
	// create and silently drops them (Zed and 2025.1 alike), and the port is tagged
	// right after the create, as the other objects are.
	PortTagCreation bool
	// ExtraRouteAtomic: routes are added and removed by the atomic calls. Without it
	// routes are replaced with a revision-checked router update (revision-if-match).
	ExtraRouteAtomic bool
	// RevisionIfMatch: updates can be made conditional on the revision number.
	RevisionIfMatch bool
}

// Has reports whether Neutron lists alias.
func (f Features) Has(alias string) bool { return slices.Contains(f.Extensions, alias) }

// Missing lists the required extensions Neutron lacks, plus one name for the route
// update path when neither extraroute-atomic nor revision-if-match is there.
func (f Features) Missing() []string {
	var out []string
	for _, a := range RequiredExtensions {
		if !f.Has(a) {
			out = append(out, a)
		}
	}
	if !f.ExtraRouteAtomic && !f.RevisionIfMatch {
		out = append(out, ExtExtraRouteAtomic+" (or "+ExtRevisionIfMatch+")")
	}
	return out
}

// ErrMissingExtensions marks a Neutron without an extension the operator needs.
var ErrMissingExtensions = fmt.Errorf("Neutron lacks required extensions")

// Check returns an error naming every missing required extension.
func (f Features) Check() error {
	if m := f.Missing(); len(m) > 0 {
		return fmt.Errorf("%w: %s", ErrMissingExtensions, strings.Join(m, ", "))
	}
	return nil
}

func featuresOf(aliases []string) Features {
	sort.Strings(aliases)
	f := Features{Extensions: aliases}
	f.PortTagCreation = f.Has(ExtTagPortsAtCreation)
	f.ExtraRouteAtomic = f.Has(ExtExtraRouteAtomic)
	f.RevisionIfMatch = f.Has(ExtRevisionIfMatch)
	return f
}

// featureCache discovers the extensions once per client; a failed discovery is not
// remembered, so the next call asks again.
type featureCache struct {
	mu    sync.Mutex
	known *Features
}

func (n *networking) features(ctx context.Context) (Features, error) {
	n.feat.mu.Lock()
	defer n.feat.mu.Unlock()
	if n.feat.known != nil {
		return *n.feat.known, nil
	}
	pages, err := extensions.List(n.c).AllPages(ctx)
	if err != nil {
		return Features{}, wrapErr("list Neutron extensions", err)
	}
	all, err := extensions.ExtractExtensions(pages)
	if err != nil {
		return Features{}, wrapErr("list Neutron extensions", err)
	}
	aliases := make([]string, 0, len(all))
	for _, e := range all {
		aliases = append(aliases, e.Alias)
	}
	f := featuresOf(aliases)
	n.feat.known = &f
	return f, nil
}

// FeatureSource is implemented by the seam's Networking: what the cloud's Neutron
// offers, discovered once and cached.
type FeatureSource interface {
	Features(ctx context.Context) (Features, error)
}

func (n *networking) Features(ctx context.Context) (Features, error) { return n.features(ctx) }

// DiscoverFeatures asks the Networking client which extensions Neutron offers and
// fails, naming them, when a required one is missing. The operator calls it at start.
func DiscoverFeatures(ctx context.Context, net Networking) (Features, error) {
	src, ok := net.(FeatureSource)
	if !ok {
		return Features{}, fmt.Errorf("the networking client cannot list Neutron's extensions")
	}
	f, err := src.Features(ctx)
	if err != nil {
		return f, err
	}
	return f, f.Check()
}
