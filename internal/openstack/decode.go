package openstack

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
)

// Answers that grow with the estate (a router carrying a route per gateway, every port
// of the transit network, a security group's rules created in bulk) are decoded once,
// straight into gophercloud's types. gophercloud's Extract decodes a body into a map,
// then encodes it and decodes it twice more (and a paged list decodes every page once
// more to see whether it is empty). At 1,000 gateways one list of the transit network's
// ports held about 19 MB while it was decoded, and these answers were more than half of
// the bytes the operator allocated (docs/benchmarks.md, "Large answers decoded once").

// requestInto sends a request through the service client, as gophercloud's own request
// functions do (the same authentication, retries and error values), and decodes the
// answer into out. ok are the expected status codes (none: gophercloud's defaults for
// the method).
func requestInto(ctx context.Context, c *gophercloud.ServiceClient, method, url string, body, out any, ok ...int) error {
	resp, err := c.Request(ctx, method, url, &gophercloud.RequestOpts{JSONBody: body, KeepResponseBody: true, OkCodes: ok})
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	return json.NewDecoder(resp.Body).Decode(out)
}

// maxPages bounds a paged list: a Neutron whose next link never ends (or points back at
// the same page) fails the list instead of looping.
const maxPages = 10000

// listInto reads a Neutron collection page by page from url (Neutron pages only when
// the request or its pagination_max_limit asks), decoding each page once into a fresh
// P and handing it to add; next returns the page's links.
func listInto[P any](ctx context.Context, c *gophercloud.ServiceClient, url string, add func(*P), next func(*P) []gophercloud.Link) error {
	seen := map[string]bool{}
	for pages := 0; url != ""; pages++ {
		if pages == maxPages || seen[url] {
			return fmt.Errorf("the list's next link %s repeats or never ends", url)
		}
		seen[url] = true
		var page P
		if err := requestInto(ctx, c, http.MethodGet, url, nil, &page, http.StatusOK); err != nil {
			return err
		}
		add(&page)
		n, err := gophercloud.ExtractNextURL(next(&page))
		if err != nil {
			return err
		}
		url = n
	}
	return nil
}

// plainRouter is a router decoded by encoding/json alone, as plainRule is a rule: its
// UnmarshalJSON decodes the router, every route of it, twice on today's Neutron.
type plainRouter routers.Router

// plainRule is a security-group rule decoded by encoding/json alone: the same fields
// and tags as gophercloud's, without its UnmarshalJSON. That one decodes each rule twice
// on today's Neutron: first in an older time format, which fails on the "Z" Neutron
// sends, then again in RFC 3339 (and a group's own UnmarshalJSON does the same around
// its rules, so a rule read with its group was decoded four times). Nothing here reads
// the timestamps, which this decoding skips.
type plainRule rules.SecGroupRule

// plainGroup is a security group decoded the same way, its rules as plainRules (the
// outer Rules field hides the embedded one of the same JSON name).
type plainGroup struct {
	groupFields
	Rules []plainRule `json:"security_group_rules"`
}

// groupFields are gophercloud's security group's fields, without its UnmarshalJSON.
type groupFields groups.SecGroup

func (r plainRule) rule() SecurityGroupRule { return toRule(rules.SecGroupRule(r)) }

func (g plainGroup) group() SecurityGroup {
	out := toSecurityGroup(groups.SecGroup(g.groupFields))
	out.Rules = nil
	for _, r := range g.Rules {
		out.Rules = append(out.Rules, r.rule())
	}
	return out
}
