package gateway

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// A gateway's missing security-group rules go to Neutron in one bulk request (a gateway
// served by a hundred links needs a hundred rules; one request each held a thousand
// gateways for minutes). A bulk refused because the group already holds one of the rules
// is redone rule by rule, the held one counting as created; a quota refusal fails the
// phase and stores nothing. Against the simulator, whose bulk create the conformance
// suite holds to the real Neutron's.
func TestCreateRulesInOneRequest(t *testing.T) {
	seed, err := openstacksim.LoadSeed(filepath.Join(testenv.RepoRoot(), "examples", "sim-estate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const quota = 40
	for i := range seed.Projects {
		if seed.Projects[i].Name == "vpn-operator" {
			seed.Projects[i].Quotas["security_group_rule"] = quota
		}
	}
	s, err := openstacksim.Start(seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	id, secret, _ := s.AppCredential("vpn-operator")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clients, err := openstack.NewClients(ctx, openstack.Credential{
		AuthURL: s.AuthURL(), Region: s.Region(), AppCredentialID: id, AppCredentialSecret: secret,
	}, openstack.ClientOptions{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Deps: Deps{OpenStack: clients}}
	sg, err := r.net().CreateSecurityGroup(ctx, openstack.CreateSecurityGroupOpts{Name: "bulk"})
	if err != nil {
		t.Fatal(err)
	}
	rules := func(from, n int) []openstack.CreateSecurityGroupRuleOpts {
		var out []openstack.CreateSecurityGroupRuleOpts
		for p := from; p < from+n; p++ {
			out = append(out, ruleKey{Protocol: openstack.ProtocolTCP, Min: p, Max: p, Remote: "10.251.0.0/16"}.createOpts(sg.ID))
		}
		return out
	}
	posts := func() int {
		n := 0
		for _, rec := range s.RequestLog() {
			if rec.Method == "POST" && strings.HasSuffix(rec.Path, "/security-group-rules") {
				n++
			}
		}
		return n
	}
	held := func() int {
		g, _ := s.SecurityGroup(sg.ID)
		return len(g.Rules)
	}
	start, before := posts(), held()

	if err := r.createRules(ctx, rules(1000, 5)); err != nil {
		t.Fatal(err)
	}
	if got := posts() - start; got != 1 {
		t.Errorf("5 rules took %d POSTs, want one bulk request", got)
	}
	if got := held() - before; got != 5 {
		t.Errorf("%d rules stored, want 5", got)
	}

	// 1004 is held already: the bulk is refused whole, then each rule is sent alone.
	start = posts()
	if err := r.createRules(ctx, rules(1004, 3)); err != nil {
		t.Fatalf("a held rule failed the phase: %v", err)
	}
	if got := posts() - start; got != 4 {
		t.Errorf("%d POSTs, want the refused bulk and 3 single creates", got)
	}
	if got := held() - before; got != 7 {
		t.Errorf("%d rules stored, want 7 (1000-1006)", got)
	}

	// One more rule than the quota leaves: refused as OverQuota, nothing stored, the
	// phase fails (a 409 that is not "the rule exists" is not success).
	q, err := r.net().QuotaDetails(ctx, sg.ProjectID)
	if err != nil {
		t.Fatal(err)
	}
	free := q["security_group_rule"].Headroom()
	if free < 2 || free > quota {
		t.Fatalf("headroom %d of quota %d", free, quota)
	}
	stored := held()
	err = r.createRules(ctx, rules(2000, free+1))
	if !openstack.IsConflict(err) || openstack.NeutronErrorType(err) != "OverQuota" {
		t.Fatalf("over the quota: want 409 OverQuota, got %v", err)
	}
	if held() != stored {
		t.Errorf("a refused bulk stored %d rules", held()-stored)
	}
	if err := r.createRules(ctx, rules(2000, free)); err != nil {
		t.Fatalf("up to the quota: %v", err)
	}
}
