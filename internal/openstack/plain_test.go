package openstack

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
)

// groupJSON is a security group as Neutron answers GET /v2.0/security-groups/{id}: rules
// with and without ports and prefixes, timestamps as 2025.1 writes them ("Z") and, on
// one rule, as older releases did (no zone), which the plain decoding skips either way.
func groupJSON(n int) string {
	var rs []string
	for i := range n {
		rs = append(rs, fmt.Sprintf(`{"id": "r%d", "tenant_id": "p1", "security_group_id": "g1", "ethertype": "IPv4",
 "direction": "ingress", "protocol": "udp", "port_range_min": %d, "port_range_max": %d, "remote_ip_prefix": "10.%d.0.0/24",
 "remote_group_id": null, "remote_address_group_id": null, "normalized_cidr": "10.%d.0.0/24", "description": "link %d",
 "tags": [], "created_at": "2026-12-06T03:40:15Z", "updated_at": "2026-12-06T03:40:15Z", "revision_number": 0, "project_id": "p1"}`,
			i, 4500, 4500, i%250, i%250, i))
	}
	rs = append(rs, `{"id": "egress", "tenant_id": "p1", "security_group_id": "g1", "ethertype": "IPv4", "direction": "egress",
 "protocol": null, "port_range_min": null, "port_range_max": null, "remote_ip_prefix": null, "remote_group_id": null,
 "description": "", "created_at": "2019-06-30T04:15:37", "updated_at": "2019-06-30T04:15:37", "revision_number": 0, "project_id": "p1"}`)
	return `{"security_group": {"id": "g1", "name": "bnerd-gw", "tenant_id": "p1", "description": "the gateway's port",
 "stateful": true, "tags": ["bnerd-vpn-operator", "bnerd-owner=ns/gw"], "created_at": "2026-12-06T03:40:15Z",
 "updated_at": "2026-12-06T03:40:16Z", "revision_number": 3, "project_id": "p1", "security_group_rules": [` + strings.Join(rs, ",") + `]}}`
}

// The plain decoding gives the seam's types exactly what gophercloud's own decoding
// gives them, for a group and for the rules a bulk create answers with.
func TestPlainDecodingMatchesGophercloud(t *testing.T) {
	body := []byte(groupJSON(30))
	want, err := groupByGophercloud(body)
	if err != nil {
		t.Fatal(err)
	}
	got, err := groupPlainly(body)
	if err != nil {
		t.Fatal(err)
	}
	if len(want.Rules) != 31 || want.Tags == nil || want.Rules[3].PortRangeMin != 4500 || want.Rules[30].RemoteIPPrefix != "" {
		t.Fatalf("the reference decoding is not what the body says: %+v", want)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("plain decoding of a group:\n got %+v\nwant %+v", got, want)
	}

	rulesBody, err := json.Marshal(map[string]any{"security_group_rules": json.RawMessage(ruleList(body))})
	if err != nil {
		t.Fatal(err)
	}
	var theirRules struct {
		Rules []rules.SecGroupRule `json:"security_group_rules"`
	}
	var ourRules struct {
		Rules []plainRule `json:"security_group_rules"`
	}
	if err := json.Unmarshal(rulesBody, &theirRules); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(rulesBody, &ourRules); err != nil {
		t.Fatal(err)
	}
	if len(ourRules.Rules) != len(theirRules.Rules) || len(ourRules.Rules) != 31 {
		t.Fatalf("%d rules decoded, gophercloud %d", len(ourRules.Rules), len(theirRules.Rules))
	}
	for i := range ourRules.Rules {
		if got, want := ourRules.Rules[i].rule(), toRule(theirRules.Rules[i]); got != want {
			t.Errorf("rule %d:\n got %+v\nwant %+v", i, got, want)
		}
	}
}

// routerJSON is a router as Neutron answers GET /v2.0/routers/{id} or a route add: a
// route per reverse-exposure gateway.
func routerJSON(n int) string {
	var rs []string
	for i := range n {
		rs = append(rs, fmt.Sprintf(`{"destination": "100.64.%d.%d/32", "nexthop": "10.254.%d.%d"}`, i/250, i%250, i/250, 1+i%250))
	}
	return `{"router": {"id": "r1", "name": "bnerd-operator", "tenant_id": "p1", "admin_state_up": true, "status": "ACTIVE",
 "external_gateway_info": {"network_id": "ext", "external_fixed_ips": [{"subnet_id": "s1", "ip_address": "203.0.113.2"}], "enable_snat": true},
 "description": "", "availability_zones": ["nova"], "availability_zone_hints": [], "routes": [` + strings.Join(rs, ",") + `],
 "distributed": false, "ha": false, "flavor_id": null, "revision_number": 1012, "tags": ["bnerd-vpn-operator"],
 "created_at": "2026-12-06T03:40:15Z", "updated_at": "2026-12-06T03:52:01Z", "project_id": "p1"}}`
}

// The plain decoding of a router gives the seam's Router what gophercloud's does.
func TestPlainRouterMatchesGophercloud(t *testing.T) {
	body := []byte(routerJSON(300))
	want, err := routerByGophercloud(body)
	if err != nil {
		t.Fatal(err)
	}
	got, err := routerPlainly(body)
	if err != nil {
		t.Fatal(err)
	}
	if len(want.Routes) != 300 || want.Routes[299].NextHop != "10.254.1.50" || want.ProjectID != "p1" || len(want.Tags) != 1 {
		t.Fatalf("the reference decoding is not what the body says: %+v", want)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("plain decoding of a router:\n got %+v\nwant %+v", got, want)
	}
}

// ruleList is the group body's rule array.
func ruleList(body []byte) []byte {
	var g struct {
		Group struct {
			Rules json.RawMessage `json:"security_group_rules"`
		} `json:"security_group"`
	}
	_ = json.Unmarshal(body, &g)
	return g.Group.Rules
}

// The two ways of decoding each answer, into the seam's types.

func routerByGophercloud(body []byte) (Router, error) {
	var out struct {
		Router routers.Router `json:"router"`
	}
	err := json.Unmarshal(body, &out)
	return toRouter(out.Router), err
}

func routerPlainly(body []byte) (Router, error) {
	var out routerBody
	err := json.Unmarshal(body, &out)
	return toRouter(routers.Router(out.Router)), err
}

func groupByGophercloud(body []byte) (SecurityGroup, error) {
	var out struct {
		Group groups.SecGroup `json:"security_group"`
	}
	err := json.Unmarshal(body, &out)
	return toSecurityGroup(out.Group), err
}

func groupPlainly(body []byte) (SecurityGroup, error) {
	var out struct {
		Group plainGroup `json:"security_group"`
	}
	err := json.Unmarshal(body, &out)
	return out.Group.group(), err
}

// benchBothWays times gophercloud's decoding of body and the plain one, side by side.
func benchBothWays[T any](b *testing.B, body []byte, gophercloud, plain func([]byte) (T, error)) {
	for _, way := range []struct {
		name   string
		decode func([]byte) (T, error)
	}{{"gophercloud", gophercloud}, {"plain", plain}} {
		b.Run(way.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := way.decode(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Decoding the operator's router with 1,000 routes, both ways, side by side:
// go test -run XXX -bench DecodeRouter -benchmem ./internal/openstack/
func BenchmarkDecodeRouter(b *testing.B) {
	benchBothWays(b, []byte(routerJSON(1000)), routerByGophercloud, routerPlainly)
}

// Decoding a gateway's group with 200 rules (one per ClusterLink and more), both ways,
// side by side: go test -run XXX -bench DecodeSecurityGroup -benchmem ./internal/openstack/
func BenchmarkDecodeSecurityGroup(b *testing.B) {
	benchBothWays(b, []byte(groupJSON(200)), groupByGophercloud, groupPlainly)
}
