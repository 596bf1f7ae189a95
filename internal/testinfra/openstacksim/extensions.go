package openstacksim

import (
	"fmt"
	"net/http"
	"slices"
)

// DefaultNeutronExtensions is what the simulator presents unless seeded otherwise: a
// recent Neutron with the ML2 driver that keeps a port's tags in its create
// (tag-ports-during-bulk-creation). Its tag-creation is what 2025.1 lists: the API that
// adds several tags at once, which the simulator does not serve (the seam never calls
// it); no create request but a port's keeps tags.
var DefaultNeutronExtensions = []string{
	"allowed-address-pairs", "external-net", "extraroute", "extraroute-atomic", "pagination", "port-security",
	"project-id", "rbac-policies", "revision-if-match", "router", "security-group", "sorting",
	"standard-attr-description", "standard-attr-revisions", "standard-attr-tag", "standard-attr-timestamp",
	"tag-creation", "tag-ports-during-bulk-creation",
}

// ZedNeutronExtensions is what Neutron 21 (Zed) with ML2/Open vSwitch and the router
// plugin presents, as the real one of hack/openstack.sh lists it: no tag-creation,
// and no tag-ports-during-bulk-creation without that ML2 extension driver.
var ZedNeutronExtensions = []string{
	"address-group", "address-scope", "agent", "agent-resources-synced", "allowed-address-pairs",
	"auto-allocated-topology", "availability_zone", "availability_zone_filter", "binding", "binding-extended",
	"default-subnetpools", "dhcp_agent_scheduler", "dvr", "empty-string-filtering", "ext-gw-mode", "external-net",
	"extra_dhcp_opt", "extraroute", "extraroute-atomic", "filter-validation", "fip-port-details", "flavors",
	"floating-ip-port-forwarding-detail", "floatingip-pools", "ip-substring-filtering", "l3-flavors", "l3-ha",
	"l3-port-ip-change-not-allowed", "l3_agent_scheduler", "multi-provider", "net-mtu", "net-mtu-writable",
	"network-ip-availability", "network_availability_zone", "pagination", "port-device-profile",
	"port-mac-address-regenerate", "port-mac-override", "port-numa-affinity-policy", "port-security",
	"port-security-groups-filtering", "project-id", "provider", "quota-check-limit", "quota_details", "quotas",
	"rbac-address-group", "rbac-address-scope", "rbac-policies", "rbac-security-groups", "rbac-subnetpool",
	"revision-if-match", "router", "router-admin-state-down-before-update", "router_availability_zone",
	"security-group", "security-groups-normalized-cidr", "security-groups-remote-address-group",
	"security-groups-shared-filtering", "service-type", "sorting", "standard-attr-description",
	"standard-attr-revisions", "standard-attr-tag", "standard-attr-timestamp", "stateful-security-group",
	"subnet-service-types", "subnet_allocation", "subnet_onboard", "subnetpool-prefix-ops",
}

// Neutron2025NeutronExtensions is what Neutron 26 (2025.1) with ML2/Open vSwitch and the
// router plugin presents, as the real one of hack/openstack.sh --release 2025.1 lists it:
// tag-creation (the API adding several tags at once), no tag-ports-during-bulk-creation
// without that ML2 extension driver.
var Neutron2025NeutronExtensions = []string{
	"address-group", "address-scope", "agent", "agent-resources-synced", "allowed-address-pairs",
	"auto-allocated-topology", "availability_zone", "availability_zone_filter", "binding", "binding-extended",
	"default-subnetpools", "dhcp_agent_scheduler", "dvr", "empty-string-filtering", "ext-gw-mode", "external-net",
	"extra_dhcp_opt", "extraroute", "extraroute-atomic", "filter-validation", "fip-port-details", "flavors",
	"floating-ip-port-forwarding-detail", "floatingip-pools", "ip-substring-filtering", "l3-flavors", "l3-ha",
	"l3-port-ip-change-not-allowed", "l3_agent_scheduler", "multi-provider", "net-mtu", "net-mtu-writable",
	"network-ip-availability", "network_availability_zone", "network_ha", "pagination", "port-device-profile",
	"port-mac-address-regenerate", "port-mac-override", "port-numa-affinity-policy", "port-numa-affinity-policy-socket",
	"port-security", "port-security-groups-filtering", "project-id", "provider", "quota-check-limit",
	"quota-check-limit-default", "quota_details", "quotas", "rbac-address-group", "rbac-address-scope",
	"rbac-policies", "rbac-security-groups", "rbac-subnetpool", "revision-if-match", "router",
	"router-admin-state-down-before-update", "router_availability_zone", "security-group",
	"security-groups-default-rules", "security-groups-normalized-cidr", "security-groups-remote-address-group",
	"security-groups-rules-belongs-to-default-sg", "security-groups-shared-filtering", "service-type", "sorting",
	"standard-attr-description", "standard-attr-revisions", "standard-attr-tag", "standard-attr-timestamp",
	"stateful-security-group", "subnet-external-network", "subnet-service-types", "subnet_allocation",
	"subnet_onboard", "subnetpool-prefix-ops", "tag-creation",
}

func (st *state) hasExt(alias string) bool { return slices.Contains(st.extensions, alias) }

// tagsAtCreate answers how a create request's tags are treated: kept, dropped (a
// port on a Neutron without tag creation) or refused (any other resource there).
func (st *state) tagsAtCreate(port bool, tags []string) (keep []string, e *apiError) {
	if len(tags) == 0 || port && st.hasExt("tag-ports-during-bulk-creation") {
		return tags, nil
	}
	if port {
		return nil, nil
	}
	return nil, errf(400, "HTTPBadRequest", "Attribute 'tags' not allowed in POST")
}

// defaultQuotas are Neutron's.
var defaultQuotas = map[string]int{
	"network": 100, "subnet": 100, "port": 500, "router": 10, "floatingip": 50,
	"security_group": 10, "security_group_rule": 100, "rbac_policy": 10,
}

// quotaDetails answers GET /v2.0/quotas/{project}/details.json as Neutron's
// quota_details extension: per resource the limit, what the project holds and what is
// reserved (always 0 here). A project reads its own; an admin any.
func (s *Server) quotaDetails(w http.ResponseWriter, r *http.Request, c *caller) {
	project := r.PathValue("id")
	st := s.st
	st.mu.RLock()
	defer st.mu.RUnlock()
	if !owns(c, project) {
		writeError(w, svcNetwork, errf(403, "PolicyNotAuthorized", "rule:get_quota is disallowed by policy"))
		return
	}
	out := map[string]any{}
	for kind := range defaultQuotas {
		limit, ok := st.quotas[project][kind]
		if !ok {
			limit = defaultQuotas[kind]
		}
		out[kind] = map[string]int{"limit": limit, "used": st.countOwned(project, kind), "reserved": 0}
	}
	writeJSON(w, 200, map[string]any{"quota": out})
}

// checkQuota refuses one more resource of kind for project once it holds its quota.
func (st *state) checkQuota(project, kind string) *apiError {
	return st.checkQuotaN(project, kind, 1)
}

// checkQuotaN refuses a request for n more of kind that would go over the project's
// quota (a bulk create is counted as a whole).
func (st *state) checkQuotaN(project, kind string, n int) *apiError {
	limit, ok := st.quotas[project][kind]
	if !ok {
		limit = defaultQuotas[kind]
	}
	if limit < 0 {
		return nil
	}
	if st.countOwned(project, kind)+n > limit {
		return errf(409, "OverQuota", "Quota exceeded for resources: ['%s'].", kind)
	}
	return nil
}

func (st *state) countOwned(project, kind string) int {
	n := 0
	switch kind {
	case "network":
		for _, x := range st.networks {
			if x.ProjectID == project {
				n++
			}
		}
	case "subnet":
		for _, x := range st.subnets {
			if x.ProjectID == project {
				n++
			}
		}
	case "port":
		n = len(st.portsByProject[project])
	case "router":
		for _, x := range st.routers {
			if x.ProjectID == project {
				n++
			}
		}
	case "floatingip":
		for _, x := range st.fips {
			if x.ProjectID == project {
				n++
			}
		}
	case "security_group":
		for _, x := range st.sgs {
			if x.ProjectID == project {
				n++
			}
		}
	case "security_group_rule":
		for _, x := range st.sgs {
			if x.ProjectID == project {
				n += len(x.Rules)
			}
		}
	case "rbac_policy":
		for _, x := range st.rbac {
			if x.ProjectID == project {
				n++
			}
		}
	default:
		panic(fmt.Sprintf("quota of unknown resource %q", kind))
	}
	return n
}
