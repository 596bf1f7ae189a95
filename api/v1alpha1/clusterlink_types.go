package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterLinkSpec is the desired fabric between the transit network and a service cluster.
//
// +kubebuilder:validation:XValidation:rule="!has(self.credentialsSecretRef) || has(self.customerProjectID)",message="customerProjectID is required when credentialsSecretRef is set: a cross-tenant link must name the customer project it expects"
// +kubebuilder:validation:XValidation:rule="has(self.credentialsSecretRef) || !has(self.customerProjectID)",message="customerProjectID is only allowed on a cross-tenant link (one with credentialsSecretRef)"
// +kubebuilder:validation:XValidation:rule="has(oldSelf.credentialsSecretRef) == has(self.credentialsSecretRef)",message="credentialsSecretRef cannot be added to or removed from an existing ClusterLink: switching between same-tenant and cross-tenant means deleting and recreating the link"
// +kubebuilder:validation:XValidation:rule="!has(self.credentialsSecretRef) || !has(self.gatewaySelector) || (has(self.gatewaySelector.namespaceSelector) && ((has(self.gatewaySelector.namespaceSelector.matchLabels) && size(self.gatewaySelector.namespaceSelector.matchLabels) > 0) || (has(self.gatewaySelector.namespaceSelector.matchExpressions) && size(self.gatewaySelector.namespaceSelector.matchExpressions) > 0)))",message="a cross-tenant link's gatewaySelector must select namespaces by label: an empty selector, or one on gateway labels only (which tenants set), would let any tenant opt in; omit gatewaySelector to serve the namespaces labelled ipsec.bnerd.net/customer-project=<customerProjectID>"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.customerProjectID) || (has(self.customerProjectID) && self.customerProjectID == oldSelf.customerProjectID)",message="customerProjectID is immutable once set: it can be neither changed nor removed"
// +kubebuilder:validation:XValidation:rule="!has(self.credentialsSecretRef) || !has(self.reverseRouteMode) || self.reverseRouteMode == 'PerGateway'",message="reverseRouteMode Aggregate is for same-tenant links only: a cross-tenant link's router gets a route per gateway it serves, never one to the whole service-CIDR pool"
type ClusterLinkSpec struct {
	// ServiceClusterRouter is the service cluster's Neutron router, by name or ID,
	// resolved at every reconcile. The leg port on the transit network is attached to it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	ServiceClusterRouter string `json:"serviceClusterRouter"`

	// ServiceClusterCIDR is the service cluster's network, routed on the gateway
	// cluster's router via the leg's transit IP.
	// It must be /8 or narrower, must not overlap a special-purpose range, the service-CIDR
	// pool, the transit subnet or another link's serviceClusterCIDR.
	// +kubebuilder:validation:MaxLength=18
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4 && cidr(self).masked() == cidr(self)",message="serviceClusterCIDR must be an IPv4 network in CIDR notation with no host bits set, such as 10.251.0.0/16"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self).prefixLength() >= 8",message="serviceClusterCIDR must be /8 or narrower: a wider route would capture traffic far beyond one service cluster"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self).ip().family() != 4 || !['0.0.0.0/8', '127.0.0.0/8', '169.254.0.0/16', '224.0.0.0/4', '240.0.0.0/4'].exists(r, cidr(r).containsIP(cidr(self).ip()) || cidr(self).containsIP(cidr(r).ip()))",message="serviceClusterCIDR must not overlap a special-purpose range (0.0.0.0/8, loopback 127.0.0.0/8, link-local 169.254.0.0/16, multicast 224.0.0.0/4, reserved 240.0.0.0/4)"
	ServiceClusterCIDR string `json:"serviceClusterCIDR"`

	// GatewaySelector says which gateways this link serves: only they get a reverse
	// route on this link's router, only their security groups admit this link's
	// serviceClusterCIDR, and only they may expose targets inside it. Absent: a
	// same-tenant link serves every gateway of the estate; a cross-tenant link serves
	// the gateways in namespaces labelled ipsec.bnerd.net/customer-project=<customerProjectID>.
	// On a cross-tenant link that label is always required as well, and the selector
	// must name a namespace label (gateway labels are the tenants' to set).
	// +optional
	GatewaySelector *GatewaySelector `json:"gatewaySelector,omitempty"`

	// TransitIP pins the leg's address on the transit subnet (for example to adopt a
	// hand-made leg). Unset: the lowest free address from .3 upward.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="transitIP must be an IPv4 address such as 10.254.0.3"
	// +optional
	TransitIP string `json:"transitIP,omitempty"`

	// CredentialsSecretRef makes this a cross-tenant link: the customer's application
	// credential, in the operator's credentials namespace, named clusterlink-<link name>.
	// It can be neither added nor removed after creation.
	// +optional
	CredentialsSecretRef *SecretRef `json:"credentialsSecretRef,omitempty"`

	// CustomerProjectID is the OpenStack project the customer credential must
	// authenticate into; required with credentialsSecretRef, refused without it,
	// immutable once set.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9-]+$`
	// +optional
	CustomerProjectID string `json:"customerProjectID,omitempty"`

	// ReverseRouteMode says how the service cluster's router reaches the reverse
	// exposures of the gateways this link serves. PerGateway: one route per gateway,
	// its service CIDR via its port's transit address (the router needs as many routes
	// as there are such gateways, and Neutron caps routes per router, 30 by default).
	// Aggregate: one route, the whole service-CIDR pool via the gateway cluster's
	// router on the transit network, which already routes each gateway's service CIDR
	// to its port; which gateways the link's service cluster can reach is then decided
	// by the gateways' security groups (only the gateways the link serves admit its
	// serviceClusterCIDR), not by the route set. Same-tenant links only. Unset: the
	// operator's default (IPSEC_CLUSTERLINK_REVERSE_ROUTE_MODE, PerGateway unless the
	// platform set it); a cross-tenant link always uses PerGateway.
	// +kubebuilder:validation:Enum=PerGateway;Aggregate
	// +optional
	ReverseRouteMode string `json:"reverseRouteMode,omitempty"`
}

// Reverse-route modes of a ClusterLink (spec.reverseRouteMode).
const (
	ReverseRoutePerGateway = "PerGateway"
	ReverseRouteAggregate  = "Aggregate"
)

// AggregateGatewayRef is status.reverseRoutes[].gatewayRef of the one route of a link in
// reverseRouteMode Aggregate: it serves every gateway the link serves.
const AggregateGatewayRef = "*"

// SecretRef names a Secret in a given namespace.
type SecretRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Namespace of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
}

// GatewaySelector selects gateways (IPsecGateways and VPNGateways) by the labels of
// their namespace and their own labels; both must match.
type GatewaySelector struct {
	// NamespaceSelector selects the gateways' namespaces. Unset: every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// Selector selects gateways by their own labels. Unset: every gateway of the
	// selected namespaces.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// Route is one static route a ClusterLink installed.
type Route struct {
	// Destination of the route.
	Destination string `json:"destination"`
	// NextHop of the route.
	NextHop string `json:"nextHop"`
}

// ReverseRoute is a route on the service cluster's router back to a gateway's service
// CIDR, so the service cluster can reach that gateway's reverse exposures.
type ReverseRoute struct {
	// ServiceCIDR of the gateway (the route's destination).
	ServiceCIDR string `json:"serviceCIDR"`
	// NextHop is the gateway's port fixed IP on the transit network (Aggregate: the
	// gateway cluster's router's address on it).
	NextHop string `json:"nextHop"`
	// GatewayRef names the gateway as <Kind>/<namespace>/<name>; "*" for the one route
	// of reverseRouteMode Aggregate (the service-CIDR pool via the gateway cluster's
	// router), which serves them all.
	GatewayRef string `json:"gatewayRef"`
}

// ClusterLinkStatus is the observed fabric of a ClusterLink.
type ClusterLinkStatus struct {
	// ObservedGeneration is the generation the operator last reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// TransitIP is the leg's address on the transit subnet, persisted before use.
	// +optional
	TransitIP string `json:"transitIP,omitempty"`
	// LegPortID is the Neutron ID of the leg port.
	// +optional
	LegPortID string `json:"legPortID,omitempty"`
	// RouterID is the resolved ID of spec.serviceClusterRouter.
	// +optional
	RouterID string `json:"routerID,omitempty"`
	// CustomerProjectID is the project the leg was built in (cross-tenant links).
	// +optional
	CustomerProjectID string `json:"customerProjectID,omitempty"`
	// ForwardRoutes are the routes this link installed (or adopted) on the gateway
	// cluster's router; deletion and a changed serviceClusterCIDR remove exactly these.
	// +optional
	ForwardRoutes []Route `json:"forwardRoutes,omitempty"`
	// ReverseRoutes are the routes on the service cluster's router to every gateway the
	// link serves that has reverse exposures.
	// +optional
	ReverseRoutes []ReverseRoute `json:"reverseRoutes,omitempty"`
	// ReverseRouteMode is the reverse-route mode in effect: spec.reverseRouteMode, or the
	// operator's default when unset.
	// +optional
	ReverseRouteMode string `json:"reverseRouteMode,omitempty"`
	// Conditions report each reconcile phase and the Ready summary.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ClusterLink plumbs a service cluster's router into the transit network: a leg port
// attached to its router and a route on the gateway cluster's router, kept converged.
// With credentialsSecretRef it links a service cluster in another OpenStack project.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=clink,categories=bnerd-vpn
// +kubebuilder:printcolumn:name="Router",type=string,JSONPath=`.spec.serviceClusterRouter`
// +kubebuilder:printcolumn:name="CIDR",type=string,JSONPath=`.spec.serviceClusterCIDR`
// +kubebuilder:printcolumn:name="Transit IP",type=string,JSONPath=`.status.transitIP`
// +kubebuilder:printcolumn:name="Reverse",type=string,JSONPath=`.status.reverseRouteMode`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterLink struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired link.
	Spec ClusterLinkSpec `json:"spec"`
	// Status is the link as the operator observed it.
	// +optional
	Status ClusterLinkStatus `json:"status,omitempty"`
}

// ClusterLinkList is a list of ClusterLinks.
// +kubebuilder:object:root=true
type ClusterLinkList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterLink `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ClusterLink{}, &ClusterLinkList{})
}
