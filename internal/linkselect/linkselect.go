// Package linkselect decides which gateways a ClusterLink serves. Both reconcilers use
// it: the ClusterLink's to route its service cluster's router only to the gateways it
// serves, the gateway's to admit only the service clusters that serve it and to refuse
// an exposure into a service cluster that does not.
package linkselect

import (
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// Selects reports whether link serves a gateway labelled gwLabels in a namespace
// labelled nsLabels:
//   - spec.gatewaySelector set: its namespaceSelector must match the namespace and its
//     selector the gateway (an unset one matches everything);
//   - unset on a same-tenant link: every gateway (the specification's estate-wide
//     behaviour);
//   - unset on a cross-tenant link: the gateways of namespaces labelled
//     ipsec.bnerd.net/customer-project=<spec.customerProjectID>.
//
// A cross-tenant link serves only namespaces carrying that label, whatever its
// selector says: the selector can narrow a customer's link, never widen it beyond the
// customer's namespaces.
func Selects(link *v1alpha1.ClusterLink, nsLabels, gwLabels map[string]string) (bool, error) {
	if link.Spec.CredentialsSecretRef != nil {
		p := link.Spec.CustomerProjectID
		if p == "" || nsLabels[v1alpha1.LabelCustomerProject] != p {
			return false, nil
		}
	}
	sel := link.Spec.GatewaySelector
	if sel == nil {
		return true, nil
	}
	for _, x := range []struct {
		s *metav1.LabelSelector
		l map[string]string
	}{{sel.NamespaceSelector, nsLabels}, {sel.Selector, gwLabels}} {
		if x.s == nil {
			continue
		}
		s, err := metav1.LabelSelectorAsSelector(x.s)
		if err != nil {
			return false, err
		}
		if !s.Matches(labels.Set(x.l)) {
			return false, nil
		}
	}
	return true, nil
}

// Describe says in words whom link serves, for condition messages.
func Describe(link *v1alpha1.ClusterLink) string {
	sel := link.Spec.GatewaySelector
	switch {
	case sel != nil:
		ns, gw := "every namespace", "every gateway"
		if sel.NamespaceSelector != nil {
			ns = "namespaces matching " + metav1.FormatLabelSelector(sel.NamespaceSelector)
		}
		if sel.Selector != nil {
			gw = "gateways matching " + metav1.FormatLabelSelector(sel.Selector)
		}
		if link.Spec.CredentialsSecretRef != nil {
			ns += fmt.Sprintf(" labelled %s=%s", v1alpha1.LabelCustomerProject, link.Spec.CustomerProjectID)
		}
		return gw + " in " + ns
	case link.Spec.CredentialsSecretRef == nil:
		return "every gateway of the estate"
	default:
		p := link.Spec.CustomerProjectID
		if errs := validation.IsValidLabelValue(p); len(errs) > 0 {
			return fmt.Sprintf("no gateway (customerProjectID %q cannot be a label value, so no namespace can carry %s; set spec.gatewaySelector)", p, v1alpha1.LabelCustomerProject)
		}
		return fmt.Sprintf("the gateways in namespaces labelled %s=%s", v1alpha1.LabelCustomerProject, p)
	}
}

// Active reports whether link takes part in serving at all: not being deleted, a spec
// that passes Validate, and not refused by its reconciler (Validated=False, for example
// a serviceClusterCIDR overlapping an older link's).
func Active(link *v1alpha1.ClusterLink) bool {
	if !link.DeletionTimestamp.IsZero() || len(link.Spec.Validate()) > 0 {
		return false
	}
	return !meta.IsStatusConditionFalse(link.Status.Conditions, v1alpha1.ConditionValidated)
}

// CIDR is the link's serviceClusterCIDR, or false when it does not parse.
func CIDR(link *v1alpha1.ClusterLink) (netip.Prefix, bool) {
	p, err := netip.ParsePrefix(link.Spec.ServiceClusterCIDR)
	return p, err == nil && p.Addr().Is4()
}
