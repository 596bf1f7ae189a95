package quota

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

type lines struct {
	mu sync.Mutex
	l  []string
}

func (c *lines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) { c.mu.Lock(); c.l = append(c.l, prefix+" "+args); c.mu.Unlock() }, funcr.Options{})
}

func (c *lines) has(s string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.l {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// The quotas are read from the simulator's Neutron quota API (quota_details), the
// gateway headroom is the scarcest of port, security group (and its rules) and floating
// IP, and the start-up check warns when the tenant policies allow more gateways than
// that: Neutron's default of 10 security groups against a policy allowing 20.
func TestQuotaHeadroomAndWarning(t *testing.T) {
	testenv.Need(t)
	seed := &openstacksim.Seed{
		Projects: []openstacksim.SeedProject{{Name: "ops", Quotas: map[string]int{"port": -1}}},
		Users: []openstacksim.SeedUser{{Name: "op", Project: "ops", Roles: []string{"member"},
			AppCredentials: []openstacksim.SeedAppCredential{{Name: "op"}}}},
	}
	s, err := openstacksim.Start(seed)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	id, secret, _ := s.AppCredential("op")
	ctx := context.Background()
	c, err := openstack.NewClients(ctx, openstack.Credential{AuthURL: s.AuthURL(), Region: s.Region(), AppCredentialID: id, AppCredentialSecret: secret}, openstack.ClientOptions{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := c.Identity.TokenInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := c.Networking.CreateSecurityGroup(ctx, openstack.CreateSecurityGroupOpts{Name: "g" + string(rune('a'+i))}); err != nil {
			t.Fatal(err)
		}
	}
	q, err := c.Networking.QuotaDetails(ctx, tok.ProjectID)
	if err != nil {
		t.Fatal(err)
	}
	if sg := q["security_group"]; sg.Limit != 10 || sg.Used != 3 || sg.Headroom() != 7 {
		t.Fatalf("security_group quota %+v, want limit 10 (Neutron's default), 3 used", sg)
	}
	if p := q["port"]; p.Limit != -1 || p.Headroom() != -1 {
		t.Fatalf("port quota %+v, want unlimited", p)
	}
	// Another project's quotas are not the operator's to read.
	if _, err := c.Networking.QuotaDetails(ctx, "someone-else"); err == nil {
		t.Fatal("read another project's quotas")
	}
	want := 7
	if r := q["security_group_rule"].Headroom() / 2; r < want {
		want = r
	}
	if fip := q["floatingip"].Headroom(); fip < want {
		want = fip
	}
	if got := GatewayHeadroom(q); got != want || got <= 0 {
		t.Fatalf("gateway headroom %d, want %d", got, want)
	}

	twenty := int32(20)
	pol := &v1alpha1.VPNTenantPolicy{ObjectMeta: metav1.ObjectMeta{Name: "quota-test-" + strings.ToLower(t.Name())},
		Spec: v1alpha1.VPNTenantPolicySpec{
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.LabelTenant: "quota-test"}},
			Limits:            v1alpha1.TenantLimits{Gateways: &twenty}}}
	if err := env.Client.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	defer env.Client.Delete(ctx, pol)

	logs := &lines{}
	w := &Watcher{Networking: c.Networking, ProjectID: tok.ProjectID, Reader: env.Client, Log: logs.logger()}
	w.read(ctx, true)
	if !logs.has("admit fewer new gateways than the tenant policies allow") || !logs.has(`"allowedByPolicies"=20`) {
		t.Fatalf("no warning of the quota running out before the policies' limits: %v", logs.l)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(w)
	if got := testutil.ToFloat64(gatewayGauge{w}); int(got) != want {
		t.Fatalf("bnerd_openstack_quota_gateway_headroom %v, want %d", got, want)
	}
	n, err := testutil.GatherAndCount(reg, "bnerd_openstack_quota_headroom")
	if err != nil || n < 4 {
		t.Fatalf("quota headroom series: %d %v", n, err)
	}

	// Raised for the operator's project (as examples/sim-estate.yaml does): no warning.
	logs2 := &lines{}
	s2, err := openstacksim.Start(&openstacksim.Seed{
		Projects: []openstacksim.SeedProject{{Name: "ops", Quotas: map[string]int{"port": -1, "security_group": -1, "security_group_rule": -1, "floatingip": -1}}},
		Users:    seed.Users,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	id2, secret2, _ := s2.AppCredential("op")
	c2, err := openstack.NewClients(ctx, openstack.Credential{AuthURL: s2.AuthURL(), Region: s2.Region(), AppCredentialID: id2, AppCredentialSecret: secret2}, openstack.ClientOptions{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w2 := &Watcher{Networking: c2.Networking, ProjectID: tok.ProjectID, Reader: env.Client, Log: logs2.logger()}
	w2.read(ctx, true)
	if logs2.has("WARNING") || !logs2.has(`"gatewayHeadroom"=-1`) {
		t.Fatalf("unlimited quotas: %v", logs2.l)
	}
}

// gatewayGauge exposes only the gateway headroom series of a Watcher.
type gatewayGauge struct{ w *Watcher }

func (g gatewayGauge) Describe(ch chan<- *prometheus.Desc) { ch <- descGateways }
func (g gatewayGauge) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric, 64)
	g.w.Collect(all)
	close(all)
	for m := range all {
		if m.Desc() == descGateways {
			ch <- m
		}
	}
}
