package v1alpha1

// Condition types, reasons, annotations and finalizers of this API. The names are the
// specification's; controllers, the agent and the docs use these constants only.

// Condition types shared by every kind.
const (
	// ConditionReady summarises every other condition of the object.
	ConditionReady = "Ready"
	// ConditionValidated reports the semantic checks the schema cannot express.
	ConditionValidated = "Validated"
)

// Gateway condition types, one per reconcile phase, in reconcile order.
const (
	ConditionAllocated          = "Allocated"
	ConditionPortReady          = "PortReady"
	ConditionSecurityGroupReady = "SecurityGroupReady"
	ConditionFloatingIPReady    = "FloatingIPReady"
	ConditionRoutingReady       = "RoutingReady"
	ConditionNodeSelected       = "NodeSelected"
	ConditionPortAttached       = "PortAttached"
	ConditionWorkloadReady      = "WorkloadReady"
)

// ClusterLink condition types, in reconcile order.
const (
	ConditionTenantIsolationAttested = "TenantIsolationAttested"
	ConditionCredentialsResolved     = "CredentialsResolved"
	ConditionTransitIPAllocated      = "TransitIPAllocated"
	ConditionTransitNetworkShared    = "TransitNetworkShared"
	ConditionLegAttached             = "LegAttached"
	ConditionRouteInstalled          = "RouteInstalled"
	ConditionReverseRoutesInstalled  = "ReverseRoutesInstalled"
)

// Reasons shared by every kind.
const (
	ReasonReconciled   = "Reconciled"
	ReasonValid        = "Valid"
	ReasonInvalidSpec  = "InvalidSpec"
	ReasonNotReady     = "NotReady"
	ReasonInProgress   = "InProgress"
	ReasonDeleting     = "Deleting"
	ReasonNotRequired  = "NotRequired"
	ReasonOpenStackErr = "OpenStackError"
)

// Gateway reasons.
const (
	// ReasonPlaintextExposure: an exposure carries a protocol that is not encrypted end
	// to end (or every port) and does not set allowPlaintext.
	ReasonPlaintextExposure = "PlaintextExposure"
	ReasonUnsupported       = "Unsupported"
	ReasonAllocated         = "Allocated"
	ReasonAllocationFailed  = "AllocationFailed"
	ReasonPortReady         = "PortReady"
	ReasonPortFailed        = "EnsurePortFailed"
	// ReasonPeerSubnetOverlap: a tunnel's peer subnet overlaps the gateway network's subnet.
	ReasonPeerSubnetOverlap = "PeerSubnetOverlapsGatewayNetwork"
	ReasonSecurityGroup     = "SecurityGroupReady"
	ReasonSecurityGroupFail = "EnsureSecurityGroupFailed"
	ReasonFloatingIPReady   = "FloatingIPReady"
	ReasonFloatingIPFailed  = "EnsureFloatingIPFailed"
	ReasonFloatingIPInUse   = "FloatingIPInUse"
	ReasonFloatingIPMissing = "FloatingIPNotFound"
	ReasonRoutingReady      = "RoutingReady"
	ReasonRoutingFailed     = "EnsureRoutingFailed"
	// ReasonInternalSourcesMissing: routing is programmed but no internal source CIDRs are
	// configured, so the security group does not admit fabric-side initiators yet.
	ReasonInternalSourcesMissing = "InternalSourceCIDRsMissing"
	ReasonNodeSelected           = "NodeSelected"
	ReasonNoEligibleNode         = "NoEligibleNode"
	ReasonProviderIDUnparseable  = "ProviderIDUnparseable"
	ReasonPortAttached           = "Attached"
	ReasonPortAttachFailed       = "EnsurePortAttachedFailed"
	// ReasonAttaching and ReasonDetaching: PortAttached is Unknown while Nova finishes an
	// attach or detach the operator asked for; the gateway is polled meanwhile.
	ReasonAttaching        = "Attaching"
	ReasonDetaching        = "Detaching"
	ReasonWorkloadReady    = "WorkloadReady"
	ReasonWorkloadPending  = "WorkloadPending"
	ReasonWorkloadFailed   = "EnsureWorkloadFailed"
	ReasonPSKSecretMissing = "PreSharedKeyNotFound"
)

// ClusterLink reasons (the cross-tenant table of the specification, plus same-tenant ones).
const (
	ReasonAttested                      = "Attested"
	ReasonNotAttested                   = "NotAttested"
	ReasonResolved                      = "Resolved"
	ReasonSecretNotFound                = "SecretNotFound"
	ReasonSecretNamespaceNotAllowed     = "SecretNamespaceNotAllowed"
	ReasonSecretNameNotAllowed          = "SecretNameNotAllowed"
	ReasonCredentialsInvalid            = "CredentialsInvalid"
	ReasonAuthFailed                    = "AuthFailed"
	ReasonCredentialsAreOperatorProject = "CredentialsAreOperatorProject"
	ReasonCredentialsPrivileged         = "CredentialsPrivileged"
	ReasonCredentialsProjectMismatch    = "CredentialsProjectMismatch"
	ReasonCredentialsProjectChanged     = "CredentialsProjectChanged"
	ReasonCredentialsUnavailable        = "CredentialsUnavailable"
	ReasonShared                        = "Shared"
	ReasonEnsureNetworkSharedFailed     = "EnsureNetworkSharedFailed"
	ReasonNetworkVisibilityCheckFailed  = "NetworkVisibilityCheckFailed"
	ReasonTransitNetworkNotShared       = "TransitNetworkNotShared"
	ReasonTransitIPAllocated            = "TransitIPAllocated"
	ReasonTransitIPAllocationFailed     = "TransitIPAllocationFailed"
	ReasonAttached                      = "Attached"
	ReasonRouterResolveFailed           = "RouterResolveFailed"
	ReasonEnsureLegPortFailed           = "EnsureLegPortFailed"
	ReasonEnsureRouterHasPortFailed     = "EnsureRouterHasPortFailed"
	ReasonTransitIPMismatch             = "TransitIPMismatch"
	ReasonRouteInstalled                = "RouteInstalled"
	ReasonEnsureRouteFailed             = "EnsureRouteFailed"
	ReasonReverseRoutesInstalled        = "ReverseRoutesInstalled"
	ReasonEnsureReverseRoutesFailed     = "EnsureReverseRoutesFailed"
)

// Annotations.
const (
	// AnnotationCustomerAPIAccess must be exactly "none" on a cross-tenant ClusterLink: a
	// platform admin's attestation that the customer has no OpenStack API access of their
	// own into the linked project.
	AnnotationCustomerAPIAccess = "ipsec.bnerd.net/customer-openstack-api-access"
	// AnnotationAbandonCustomerResources set to "true" on a deleting cross-tenant
	// ClusterLink releases its finalizer without cleaning the customer side.
	AnnotationAbandonCustomerResources = "ipsec.bnerd.net/abandon-customer-resources"
)

// Finalizers.
const (
	FinalizerGateway     = "ipsec.bnerd.net/gateway-cleanup"
	FinalizerClusterLink = "ipsec.bnerd.net/clusterlink-cleanup"
)
