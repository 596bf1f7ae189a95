package gateway

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
)

// The port a gateway asks Neutron for, decided without an API server (the unit tier).
func TestWantedPort(t *testing.T) {
	obj := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "hq", UID: "0b7c8f1e-3b0d-4a57-9d1e-7d2f4c1a9e10"}}
	g := &gateway{kind: v1alpha1.KindIPsecGateway, obj: obj, status: &v1alpha1.GatewayStatus{ServiceCIDR: "100.64.7.0/24"}}
	got := wantedPort(g, "net-1")
	want := openstack.CreatePortOpts{
		NetworkID:   "net-1",
		Name:        "bnerd-vpn-ipsecgateway-tenant-a-hq",
		Description: "bnerd-vpn-operator: dedicated port of IPsecGateway tenant-a/hq",
		Tags: []string{"bnerd-vpn-operator", "bnerd.net/kind=IPsecGateway", "bnerd.net/owner=tenant-a/hq",
			"bnerd.net/uid=0b7c8f1e-3b0d-4a57-9d1e-7d2f4c1a9e10", openstack.TagServiceCIDRPrefix + "100.64.7.0/24"},
		SecurityGroups: []string{},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("wantedPort =\n%#v\nwant\n%#v", got, want)
	}
	// Created before any group of its own, and never with the project's default one.
	if got.SecurityGroups == nil {
		t.Error("SecurityGroups is nil: Neutron would give the port the project's default group")
	}
	// Found again by its owner's tags, whatever status says.
	if !g.owner().OwnedBy(got.Tags) {
		t.Error("the port's tags do not make it the gateway's")
	}
}
