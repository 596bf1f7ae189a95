package linkselect

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// M3: a cross-tenant link serves only the customer's namespaces whatever its selector
// says; a same-tenant link's selector decides alone.
func TestCrossTenantSelectorsNeverWiden(t *testing.T) {
	cross := func(sel *v1alpha1.GatewaySelector) *v1alpha1.ClusterLink {
		return &v1alpha1.ClusterLink{Spec: v1alpha1.ClusterLinkSpec{ServiceClusterCIDR: "10.234.0.0/16", GatewaySelector: sel,
			CredentialsSecretRef: &v1alpha1.SecretRef{Name: "clusterlink-x", Namespace: "creds"}, CustomerProjectID: "c0ffee"}}
	}
	customer := map[string]string{v1alpha1.LabelCustomerProject: "c0ffee", "tier": "prod"}
	other := map[string]string{"tier": "prod"}
	gwLabels := map[string]string{"link": "acme"}
	for _, tc := range []struct {
		name string
		link *v1alpha1.ClusterLink
		ns   map[string]string
		want bool
	}{
		{"no selector, customer namespace", cross(nil), customer, true},
		{"no selector, another namespace", cross(nil), other, false},
		{"gateway labels only, another namespace", cross(&v1alpha1.GatewaySelector{Selector: &metav1.LabelSelector{MatchLabels: gwLabels}}), other, false},
		{"empty selector, another namespace", cross(&v1alpha1.GatewaySelector{}), other, false},
		{"namespace selector matching another namespace", cross(&v1alpha1.GatewaySelector{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "prod"}}}), other, false},
		{"namespace selector, customer namespace", cross(&v1alpha1.GatewaySelector{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "prod"}}}), customer, true},
		{"same tenant, gateway labels", &v1alpha1.ClusterLink{Spec: v1alpha1.ClusterLinkSpec{GatewaySelector: &v1alpha1.GatewaySelector{Selector: &metav1.LabelSelector{MatchLabels: gwLabels}}}}, other, true},
	} {
		got, err := Selects(tc.link, tc.ns, gwLabels)
		if err != nil || got != tc.want {
			t.Errorf("%s: %v %v, want %v", tc.name, got, err, tc.want)
		}
	}
}
