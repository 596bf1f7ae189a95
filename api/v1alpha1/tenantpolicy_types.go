package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Tenant limits that apply where a VPNTenantPolicy leaves a limit unset, and to every
// namespace no policy selects (the strict defaults, docs/security.md).
const (
	DefaultTenantGateways             = 3
	DefaultTenantTunnels              = 16
	DefaultTenantRoutedSubnets        = 8
	DefaultTenantExposures            = 32
	DefaultTenantReverseExposurePorts = 32
)

// LabelTenant is the namespace label the chart's default VPNTenantPolicy keys on: the
// default policy selects the namespaces without it, so a namespace labelled
// ipsec.bnerd.net/tenant=<name> belongs to the policy an admin wrote for that tenant
// and never to two. Only platform admins may set namespace labels.
const LabelTenant = "ipsec.bnerd.net/tenant"

// VPNTenantPolicySpec is what a platform admin allows the gateways of one tenant: the
// namespaces it selects. Gateway authors cannot write it (it is cluster-scoped); they
// decide only within it.
//
// +kubebuilder:validation:XValidation:rule="(has(self.namespaceSelector.matchLabels) && size(self.namespaceSelector.matchLabels) > 0) || (has(self.namespaceSelector.matchExpressions) && size(self.namespaceSelector.matchExpressions) > 0)",message="namespaceSelector must name at least one label or expression: a policy for every namespace selects them with an expression, such as the chart's default policy (ipsec.bnerd.net/tenant DoesNotExist)"
type VPNTenantPolicySpec struct {
	// NamespaceSelector selects the tenant's namespaces. A namespace selected by two
	// policies is refused by both (TenantPolicyConflict): its gateways go no further
	// until an admin makes the policies disjoint.
	NamespaceSelector metav1.LabelSelector `json:"namespaceSelector"`

	// RoutedSubnets are the ranges routed-mode tunnels' subnets must lie in. Empty:
	// routed mode is off for the tenant. A subnet inside them is still refused when it
	// overlaps anything the router or another tenant uses (docs/gateway.md).
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=18
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4 && cidr(self).masked() == cidr(self)",message="each routed subnet range must be an IPv4 network in CIDR notation with no host bits set, such as 10.40.0.0/16"
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || cidr(self).prefixLength() >= 8",message="a routed subnet range must be /8 or narrower"
	// +optional
	RoutedSubnets []string `json:"routedSubnets,omitempty"`

	// ExposureTargets are the ranges exposure targets may lie in besides the service
	// clusters whose ClusterLinks serve the gateway. Empty: only those linked clusters.
	// The operator's own ranges (the pool, the gateway network, special-purpose
	// addresses, other gateways' routed subnets) stay refused whatever this says.
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=18
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4 && cidr(self).masked() == cidr(self)",message="each exposure target range must be an IPv4 network in CIDR notation with no host bits set, such as 10.250.0.0/16"
	// +optional
	ExposureTargets []string `json:"exposureTargets,omitempty"`

	// FloatingIPs are the floating IPs (addresses in the operator's project) the
	// tenant's gateways may pin with spec.endpoint.floatingIP. Empty: no pins.
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=15
	// +kubebuilder:validation:items:XValidation:rule="isIP(self) && ip(self).family() == 4",message="each floating IP must be an IPv4 address such as 203.0.113.10"
	// +optional
	FloatingIPs []string `json:"floatingIPs,omitempty"`

	// Limits caps what the tenant's gateways hold together.
	// +kubebuilder:default={}
	// +optional
	Limits TenantLimits `json:"limits,omitempty"`
}

// TenantLimits caps the sum over every gateway (IPsecGateway and VPNGateway) of the
// selected namespaces. Gateways are counted oldest first, those already admitted at
// their current generation before the others: a gateway whose creation or change
// would pass a limit is refused (Validated=False/TenantLimitExceeded) and the ones
// admitted before it stay as they are.
type TenantLimits struct {
	// Gateways is the number of gateways.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	// +optional
	Gateways *int32 `json:"gateways,omitempty"`
	// Tunnels is the number of tunnels (WireGuard peers count as tunnels).
	// +kubebuilder:default=16
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	// +optional
	Tunnels *int32 `json:"tunnels,omitempty"`
	// RoutedSubnets is the number of routed-mode subnets, each a route on the shared
	// router.
	// +kubebuilder:default=8
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	// +optional
	RoutedSubnets *int32 `json:"routedSubnets,omitempty"`
	// Exposures is the number of exposures.
	// +kubebuilder:default=32
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	// +optional
	Exposures *int32 `json:"exposures,omitempty"`
	// ReverseExposurePorts is the number of reverse-exposure ports (a reverse exposure
	// without ports counts one): each is a rule per reverse source in the gateway's
	// security group.
	// +kubebuilder:default=32
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	// +optional
	ReverseExposurePorts *int32 `json:"reverseExposurePorts,omitempty"`
}

// TenantUsage is what a tenant's gateways hold, counted as TenantLimits caps it.
type TenantUsage struct {
	Gateways             int32 `json:"gateways"`
	Tunnels              int32 `json:"tunnels"`
	RoutedSubnets        int32 `json:"routedSubnets"`
	Exposures            int32 `json:"exposures"`
	ReverseExposurePorts int32 `json:"reverseExposurePorts"`
}

// VPNTenantPolicyStatus is the policy as the operator applies it.
type VPNTenantPolicyStatus struct {
	// ObservedGeneration is the generation the operator last reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Namespaces are the namespaces the policy selects, sorted.
	// +listType=set
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`
	// NamespaceCount is the number of selected namespaces.
	// +optional
	NamespaceCount int32 `json:"namespaceCount,omitempty"`
	// Usage is what the admitted gateways of the selected namespaces hold.
	// +optional
	Usage TenantUsage `json:"usage,omitempty"`
	// RefusedGateways is the number of gateways a limit refuses.
	// +optional
	RefusedGateways int32 `json:"refusedGateways,omitempty"`
	// Conditions: Validated, Exclusive (no namespace is selected by another policy
	// too), WithinLimits (no gateway is refused by a limit), and Ready summarising them.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// VPNTenantPolicy is a platform admin's decision about what one tenant's gateways may
// do: routed-mode ranges, exposure targets, floating IPs to pin, and limits. A
// namespace no policy selects gets the strict defaults: no routed mode, exposure
// targets only in linked service clusters, no pins, the default limits.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=vpntp;tenantpolicy,categories=bnerd-vpn
// +kubebuilder:printcolumn:name="Namespaces",type=integer,JSONPath=`.status.namespaceCount`
// +kubebuilder:printcolumn:name="Gateways",type=integer,JSONPath=`.status.usage.gateways`
// +kubebuilder:printcolumn:name="Max Gateways",type=integer,JSONPath=`.spec.limits.gateways`
// +kubebuilder:printcolumn:name="Tunnels",type=integer,JSONPath=`.status.usage.tunnels`
// +kubebuilder:printcolumn:name="Exposures",type=integer,JSONPath=`.status.usage.exposures`
// +kubebuilder:printcolumn:name="Refused",type=integer,JSONPath=`.status.refusedGateways`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VPNTenantPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the tenant may do.
	Spec VPNTenantPolicySpec `json:"spec"`
	// Status is the policy as applied.
	// +optional
	Status VPNTenantPolicyStatus `json:"status,omitempty"`
}

// VPNTenantPolicyList is a list of VPNTenantPolicies.
// +kubebuilder:object:root=true
type VPNTenantPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VPNTenantPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&VPNTenantPolicy{}, &VPNTenantPolicyList{})
}

// Values returns the limits with the defaults applied to the unset ones.
func (l TenantLimits) Values() TenantUsage {
	v := func(p *int32, def int32) int32 {
		if p == nil {
			return def
		}
		return *p
	}
	return TenantUsage{
		Gateways:             v(l.Gateways, DefaultTenantGateways),
		Tunnels:              v(l.Tunnels, DefaultTenantTunnels),
		RoutedSubnets:        v(l.RoutedSubnets, DefaultTenantRoutedSubnets),
		Exposures:            v(l.Exposures, DefaultTenantExposures),
		ReverseExposurePorts: v(l.ReverseExposurePorts, DefaultTenantReverseExposurePorts),
	}
}
