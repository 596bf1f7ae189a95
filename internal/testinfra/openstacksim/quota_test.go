package openstacksim

import (
	"strings"
	"testing"
)

// A seed raises (or lifts) a project's quotas; an unknown resource is a seed error.
func TestSeedQuotas(t *testing.T) {
	st := newState()
	seed := &Seed{Projects: []SeedProject{
		{Name: "raised", Quotas: map[string]int{"security_group": 2, "rbac_policy": -1}},
		{Name: "default"},
	}}
	if err := st.apply(seed); err != nil {
		t.Fatal(err)
	}
	raised, def := seedID("project", "raised"), seedID("project", "default")
	for i := range 2 {
		if e := st.checkQuota(raised, "security_group"); e != nil {
			t.Fatalf("group %d: %v", i, e)
		}
		st.newSecurityGroup(raised, "g", "", nil)
	}
	if e := st.checkQuota(raised, "security_group"); e == nil || e.status != 409 || e.typ != "OverQuota" {
		t.Errorf("third group: want 409 OverQuota, got %v", e)
	}
	for range 20 {
		st.rbac[newID()] = &RBACPolicy{ProjectID: raised}
	}
	if e := st.checkQuota(raised, "rbac_policy"); e != nil {
		t.Errorf("unlimited RBAC quota refused: %v", e)
	}
	for range 10 {
		st.rbac[newID()] = &RBACPolicy{ProjectID: def}
	}
	if e := st.checkQuota(def, "rbac_policy"); e == nil {
		t.Error("Neutron's default of 10 RBAC policies not enforced")
	}

	bad := &Seed{Projects: []SeedProject{{Name: "x", Quotas: map[string]int{"loadbalancer": 1}}}}
	if err := newState().apply(bad); err == nil || !strings.Contains(err.Error(), "loadbalancer") {
		t.Errorf("unknown quota resource: %v", err)
	}
}
