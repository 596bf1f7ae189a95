package gateway

import (
	"net/netip"
	"testing"

	"github.com/go-logr/logr"

	"bnerd.net/vpn-operator/internal/ipam"
)

// The allocations rebuilt at start, decided without an API server (the unit tier): the
// port's record wins over the status (the gateway pod may write its status, only the
// operator its port), a port left by a deleted gateway holds nothing, and of two
// statuses naming one /24 the older gateway keeps it.
func TestRestoreAllocations(t *testing.T) {
	pool, err := ipam.NewServiceCIDRPool(netip.MustParsePrefix("100.64.0.0/16"))
	if err != nil {
		t.Fatal(err)
	}
	claims := []statusClaim{
		{uid: "young", cidr: "100.64.3.0/24", who: "IPsecGateway t/young", created: 30},
		{uid: "forged", cidr: "100.64.9.0/24", who: "IPsecGateway t/forged", created: 10},
		{uid: "old", cidr: "100.64.3.0/24", who: "IPsecGateway t/old", created: 20},
		{uid: "fresh", who: "IPsecGateway t/fresh", created: 40},
	}
	recorded := []recordedCIDR{
		{uid: "forged", cidr: "100.64.1.0/24", port: "p-forged"},
		{uid: "deleted", cidr: "100.64.2.0/24", port: "p-deleted"},
	}
	restoreAllocations(logr.Discard(), pool, claims, recorded)
	for uid, want := range map[string]string{"forged": "100.64.1.0/24", "old": "100.64.3.0/24", "young": "", "fresh": "", "deleted": ""} {
		got := ""
		if p, ok := pool.Lookup(uid); ok {
			got = p.String()
		}
		if got != want {
			t.Errorf("%s holds %q, want %q", uid, got, want)
		}
	}
	if pool.Len() != 2 {
		t.Errorf("%d allocations, want 2", pool.Len())
	}
}
