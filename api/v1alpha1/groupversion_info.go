// Package v1alpha1 holds the ipsec.bnerd.net/v1alpha1 API: IPsecGateway, VPNGateway,
// ClusterLink and VPNTenantPolicy.
//
// +kubebuilder:object:generate=true
// +groupName=ipsec.bnerd.net
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "ipsec.bnerd.net", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
