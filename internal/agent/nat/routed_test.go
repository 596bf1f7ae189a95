package nat

import (
	"context"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"
)

func TestRoutedRules(t *testing.T) {
	for _, guard := range []GuardMode{GuardInterface, GuardXFRM} {
		fake := knftables.NewFake(knftables.IPv4Family, DefaultTable)
		p, err := NewWithInterface(fake, Options{Guard: guard})
		if err != nil {
			t.Fatal(err)
		}
		m := model(2)
		m.PeerSubnets = []string{"172.16.5.0/24", "198.51.100.0/24"}
		m.RoutedSubnets = []string{"172.16.5.0/24"}
		m.InternalSources = []string{"10.250.0.0/16", "10.254.0.0/24"}
		if _, err := p.Sync(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		d := fake.Dump()
		from := `iifname "ipsec0"`
		if guard == GuardXFRM {
			from = "meta ipsec exists"
		}
		for _, want := range []string{
			"ip saddr { 172.16.5.0/24 } accept",
			"ip daddr { 172.16.5.0/24 } accept",
			from + " ip saddr { 172.16.5.0/24 } ip daddr { 10.250.0.0/16, 10.254.0.0/24 } accept",
			"ip saddr { 10.250.0.0/16, 10.254.0.0/24 } ip daddr { 172.16.5.0/24 } accept",
		} {
			if !strings.Contains(d, want) {
				t.Errorf("%s: ruleset lacks %q:\n%s", guard, want, d)
			}
		}
		// Order decides: no SNAT before the routed accept, the guard before the forward
		// accepts, the catch-all drops after them.
		before := func(a, b string) {
			t.Helper()
			ia, ib := strings.Index(d, a), strings.Index(d, b)
			if ia < 0 || ib < 0 || ia > ib {
				t.Errorf("%s: %q must come before %q:\n%s", guard, a, b, d)
			}
		}
		before("ip daddr { 172.16.5.0/24 } accept", "snat ip to 100.64.7.1")
		before("ip saddr { 10.250.0.0/16, 10.254.0.0/24 } ip daddr { 172.16.5.0/24 } accept", "ip daddr @peer_subnets ct status & dnat == 0 counter drop")
		if guard == GuardInterface {
			before(`ip daddr @peer_subnets oifname != "ipsec0" counter drop`, "ip saddr { 10.250.0.0/16, 10.254.0.0/24 } ip daddr { 172.16.5.0/24 } accept")
		}

		// Without internal sources the routed subnets skip SNAT but nothing is forwarded
		// to or from them by its real address.
		m.InternalSources = nil
		if full, err := p.Sync(context.Background(), m); err != nil || !full {
			t.Fatalf("mode change must be a full sync: full=%v %v", full, err)
		}
		if d := fake.Dump(); strings.Contains(d, "10.254.0.0/24") || !strings.Contains(d, "ip saddr { 172.16.5.0/24 } accept") {
			t.Errorf("%s: without internal sources:\n%s", guard, d)
		}
		// And with no routed tunnel, nothing of it remains.
		m.RoutedSubnets = nil
		if _, err := p.Sync(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		if d := fake.Dump(); strings.Contains(d, "ip saddr { 172.16.5.0/24 }") || strings.Contains(d, "ip daddr { 172.16.5.0/24 }") {
			t.Errorf("%s: routed rules left behind:\n%s", guard, d)
		}
	}
}

// The kernel accepts the routed rules (inline interval sets) as rendered.
func TestRoutedRulesRealTable(t *testing.T) {
	inNetns(t, func() {
		p, err := New(Options{})
		if err != nil {
			t.Error(err)
			return
		}
		m := model(3)
		m.PeerSubnets = []string{"172.16.5.0/24", "172.16.6.0/24", "198.51.100.0/24"}
		m.RoutedSubnets = []string{"172.16.5.0/24", "172.16.6.0/24"}
		m.InternalSources = []string{"10.250.0.0/16", "10.254.0.0/24"}
		if _, err := p.Sync(context.Background(), m); err != nil {
			t.Errorf("sync: %v", err)
			return
		}
		if msg, err := NewDriftChecker(p).Check(true); msg != "" || err != nil {
			t.Errorf("fresh routed table reported drift %q %v", msg, err)
		}
	})
}
