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

// Gateway condition types that observe the running gateway rather than converge
// anything: the gateway pod as the kubelet reports it, and the tunnels as the pod's
// status agent reports them. They feed Ready after the phase conditions: a gateway is
// Ready only when every phase converged, its pod is ready and every tunnel is up.
const (
	ConditionPodReady  = "PodReady"
	ConditionTunnelsUp = "TunnelsUp"
)

// ConditionPodUpToDate says whether the gateway's pod runs the operator's current
// rendering, and where it stands in a staged rollout of a new one (new images, new pod
// settings: restarts are paced, one canary first, then a budget at a time). It is
// informational: a gateway waiting for its turn keeps its old pod and stays Ready.
const ConditionPodUpToDate = "PodUpToDate"

// PodUpToDate reasons.
const (
	// ReasonPodUpToDate: the Deployment carries the current rendering and nothing waits.
	ReasonPodUpToDate = "UpToDate"
	// ReasonRolloutWaiting: a new rendering waits for a rollout slot; the old pod runs.
	ReasonRolloutWaiting = "RolloutWaiting"
	// ReasonRolloutHalted: a new rendering waits because a gateway restarted earlier in
	// the rollout did not come back in time; the old pod runs.
	ReasonRolloutHalted = "RolloutHalted"
	// ReasonRolling: the pod restarts to the new rendering; the rollout waits for its pod
	// to be ready and its tunnels to be up again.
	ReasonRolling = "Rolling"
	// ReasonRolloutNotBack: this gateway restarted to the new rendering and did not come
	// back within the rollout timeout; the rollout is halted on it.
	ReasonRolloutNotBack = "RolloutNotBack"
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
	// ReasonStatusForged (an Event, on the gateway and on a ClusterLink): a status field
	// the operator acts on (serviceCIDR, portFixedIP, nodeName) differs from the
	// operator's own record of it (the allocator, the gateway's tagged Neutron port, the
	// placement rules). Someone other than the operator wrote it (the gateway pod's token
	// may write status); the value is never acted on, and the operator writes back its own.
	ReasonStatusForged          = "StatusForged"
	ReasonNoEligibleNode        = "NoEligibleNode"
	ReasonProviderIDUnparseable = "ProviderIDUnparseable"
	ReasonPortAttached          = "Attached"
	ReasonPortAttachFailed      = "EnsurePortAttachedFailed"
	// ReasonAttaching and ReasonDetaching: PortAttached is Unknown while Nova finishes an
	// attach or detach the operator asked for; the gateway is polled meanwhile.
	ReasonAttaching        = "Attaching"
	ReasonDetaching        = "Detaching"
	ReasonWorkloadReady    = "WorkloadReady"
	ReasonWorkloadPending  = "WorkloadPending"
	ReasonWorkloadFailed   = "EnsureWorkloadFailed"
	ReasonPSKSecretMissing = "PreSharedKeyNotFound"
	// ReasonPSKTooShort: a tunnel's pre-shared key is shorter than MinPSKLength bytes.
	ReasonPSKTooShort = "PreSharedKeyTooShort"
	// ReasonTargetInUnlinkedCluster: an exposure targets an address inside a ClusterLink's
	// serviceClusterCIDR, and that link does not serve this gateway.
	ReasonTargetInUnlinkedCluster = "ExposureTargetInUnlinkedCluster"
	// ReasonTargetOnGatewayNetwork: an exposure or reverse exposure targets an address on
	// the gateway network's own subnet (other gateways' ports, ClusterLink legs).
	ReasonTargetOnGatewayNetwork = "TargetOnGatewayNetwork"
	// ReasonPeerAddressNotAllowed: a tunnel's peer.address or a WireGuard peer's
	// endpoint lies in a range the operator uses itself (the service-CIDR pool, the
	// gateway network, the internal source networks).
	ReasonPeerAddressNotAllowed = "PeerAddressNotAllowed"
	// ReasonIntervalOutOfBounds: a tunnel's ike.lifetime, esp.lifetime or dpd.delay lies
	// outside the bounds that keep one gateway's rekeying and liveness checks from
	// loading the node its neighbours share (IntervalBounds). The API server refuses
	// such values; the operator reports objects stored before the rule.
	ReasonIntervalOutOfBounds = "IntervalOutOfBounds"
)

// PodReady reasons: the gateway pod as the kubelet reports it.
const (
	// ReasonPodReady: the pod runs on the pinned node and is ready.
	ReasonPodReady = "PodReady"
	// ReasonPodNotFound: no pod of the gateway's Deployment exists (yet).
	ReasonPodNotFound = "PodNotFound"
	// ReasonPodPending: the pod is not scheduled or its containers are not started yet
	// (image pulls, volumes, a sandbox still being created).
	ReasonPodPending = "PodPending"
	// ReasonPodNetworkFailed: the pod's sandbox cannot be created because a CNI plugin
	// fails; on a gateway that is mostly the host-device plugin not finding the port's
	// interface on the node ("failed to find host device"): the port is attached to
	// another node's server.
	ReasonPodNetworkFailed = "PodNetworkFailed"
	// ReasonPodOnWrongNode: the pod runs on another node than status.nodeName, whose
	// server holds the port.
	ReasonPodOnWrongNode = "PodOnWrongNode"
	// ReasonPodCrashLooping: a container of the pod keeps exiting (CrashLoopBackOff).
	ReasonPodCrashLooping = "PodCrashLooping"
	// ReasonPodNotReady: the pod runs but is not ready, or it failed.
	ReasonPodNotReady = "PodNotReady"
)

// TunnelsUp reasons: the tunnels as the gateway's status agent reports them.
const (
	// ReasonTunnelsUp: every tunnel of the spec has an IKE SA and an installed child SA.
	ReasonTunnelsUp = "TunnelsUp"
	// ReasonTunnelsDown: at least one tunnel is down or still connecting; the message
	// names each with its state and since when.
	ReasonTunnelsDown = "TunnelsDown"
	// ReasonTunnelsNotReported: no running status agent has reported yet (no pod, the
	// agent's container not running, or the report predates it).
	ReasonTunnelsNotReported = "TunnelsNotReported"
	// ReasonStatusAgentSilent: the status agent's last heartbeat is older than the
	// operator's stale-after time; its last report is shown as such, not as current.
	ReasonStatusAgentSilent = "StatusAgentSilent"
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
	// ReasonCredentialsRoleMissing: the credential lacks a role the link needs (member,
	// or reader on a cloud with the secure-RBAC policy defaults); the message names it.
	ReasonCredentialsRoleMissing       = "CredentialsRoleMissing"
	ReasonCredentialsProjectMismatch   = "CredentialsProjectMismatch"
	ReasonCredentialsProjectChanged    = "CredentialsProjectChanged"
	ReasonCredentialsUnavailable       = "CredentialsUnavailable"
	ReasonShared                       = "Shared"
	ReasonEnsureNetworkSharedFailed    = "EnsureNetworkSharedFailed"
	ReasonNetworkVisibilityCheckFailed = "NetworkVisibilityCheckFailed"
	ReasonTransitNetworkNotShared      = "TransitNetworkNotShared"
	ReasonTransitIPAllocated           = "TransitIPAllocated"
	ReasonTransitIPAllocationFailed    = "TransitIPAllocationFailed"
	ReasonAttached                     = "Attached"
	ReasonRouterResolveFailed          = "RouterResolveFailed"
	ReasonEnsureLegPortFailed          = "EnsureLegPortFailed"
	ReasonEnsureRouterHasPortFailed    = "EnsureRouterHasPortFailed"
	ReasonTransitIPMismatch            = "TransitIPMismatch"
	ReasonRouteInstalled               = "RouteInstalled"
	ReasonEnsureRouteFailed            = "EnsureRouteFailed"
	ReasonReverseRoutesInstalled       = "ReverseRoutesInstalled"
	ReasonEnsureReverseRoutesFailed    = "EnsureReverseRoutesFailed"
	// ReasonRouteLimitExceeded: Neutron refused the reverse routes because the service
	// cluster's router would carry more routes than the cloud's max_routes allows;
	// nothing of the refused batch was added.
	ReasonRouteLimitExceeded = "RouteLimitExceeded"
	// ReasonServiceClusterCIDROverlap: serviceClusterCIDR overlaps the service-CIDR pool,
	// the transit subnet or an older link's serviceClusterCIDR.
	ReasonServiceClusterCIDROverlap = "ServiceClusterCIDROverlap"
)

// ReasonTransitNetworkSharedWithAllProjects: the transit network is shared with every
// project of the cloud (its shared flag, or an access_as_shared RBAC policy with target
// "*"). Every ClusterLink refuses to build or change anything (on TransitIPAllocated, or
// TransitNetworkShared on a cross-tenant link) until an OpenStack admin removes it.
const ReasonTransitNetworkSharedWithAllProjects = "TransitNetworkSharedWithAllProjects"

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

// Labels.
const (
	// LabelCustomerProject on a namespace names the customer OpenStack project its
	// gateways belong to: a cross-tenant ClusterLink without gatewaySelector serves the
	// gateways of the namespaces labelled with its customerProjectID. Only platform
	// admins may set namespace labels (docs/security.md).
	LabelCustomerProject = "ipsec.bnerd.net/customer-project"
)

// Limits the API enforces.
const (
	// MinPSKLength is the shortest pre-shared key accepted, in bytes.
	MinPSKLength = 20
	// MinServiceClusterPrefix is the widest serviceClusterCIDR accepted (a /8).
	MinServiceClusterPrefix = 8
)

// Finalizers.
const (
	FinalizerGateway     = "ipsec.bnerd.net/gateway-cleanup"
	FinalizerClusterLink = "ipsec.bnerd.net/clusterlink-cleanup"
)

// AnnotationRotateWireGuardKey on a VPNGateway with protocol wireguard asks for a new
// gateway key pair: every new value rotates once. The new key is served on the
// gateway's other port while the previous one keeps serving until every peer has
// completed a handshake with the new key or the operator's overlap ends; a rotation
// during an overlap retires the key before the previous one at once.
const AnnotationRotateWireGuardKey = "ipsec.bnerd.net/rotate-wireguard-key"

// WireGuard gateway condition and reasons.
const (
	// ConditionWireGuardKeyReady: the gateway's key pair exists in its Secret and the
	// public key is published in status.wireguard (protocol wireguard only).
	ConditionWireGuardKeyReady = "WireGuardKeyReady"
	ReasonKeyReady             = "KeyReady"
	// ReasonKeyRotationPending: a rotated key is served and the previous one still is,
	// on its own port, until every peer has completed a handshake with the new key or
	// the overlap's deadline passes.
	ReasonKeyRotationPending = "KeyRotationPending"
	// ReasonPreviousKeyRetired: the overlap's deadline retired the previous key before
	// every peer had completed a handshake with the new one; the peers named in the
	// message are refused until they configure the new key.
	ReasonPreviousKeyRetired = "PreviousKeyRetired"
	ReasonKeyFailed          = "EnsureKeyFailed"
	// ReasonListenPortOpen: SecurityGroupReady is True, but a peer without a fixed
	// endpoint makes the WireGuard listen port open to every source address.
	ReasonListenPortOpen = "ListenPortOpenToAnywhere"
)

// Routed-mode reason.
const (
	// ReasonRoutedSubnetConflict: a routed tunnel's subnet overlaps something routing it
	// to this gateway would capture: the gateway network, the service CIDR pool, the
	// internal sources, a linked service cluster, another gateway's routed subnet, the
	// router's attached subnets or a route on it this gateway did not install, the
	// external network, an exposure-target range, or a gateway's peer address or
	// WireGuard endpoint. What the gateway had routed is withdrawn.
	ReasonRoutedSubnetConflict = "RoutedSubnetConflict"
)

// Tenant policy: the gateway's side. A refusal names the tenant's own policy (or says
// that the strict defaults apply), never another tenant's objects.
const (
	// ReasonTenantPolicyConflict (Validated): more than one VPNTenantPolicy selects the
	// gateway's namespace; nothing goes further until an admin makes them disjoint.
	ReasonTenantPolicyConflict = "TenantPolicyConflict"
	// ReasonTenantLimitExceeded (Validated): creating or changing the gateway would
	// pass one of its tenant's limits.
	ReasonTenantLimitExceeded = "TenantLimitExceeded"
	// ReasonExposureTargetNotAllowed (Validated): an exposure's target lies outside the
	// tenant's exposure targets and outside every linked cluster that serves the
	// gateway, or in a subnet routed to another gateway.
	ReasonExposureTargetNotAllowed = "ExposureTargetNotAllowed"
	// ReasonFloatingIPNotAllowed (Validated): the pinned floating IP is not one the
	// tenant's policy lists.
	ReasonFloatingIPNotAllowed = "FloatingIPNotAllowed"
	// ReasonFloatingIPReserved (FloatingIPReady): the pinned floating IP carries the
	// tag of another gateway (it pinned the address first, or the address is another
	// gateway's own).
	ReasonFloatingIPReserved = "FloatingIPReservedForAnother"
	// ReasonRoutedModeNotAllowed (RoutingReady): a routed tunnel's subnet lies outside
	// the tenant's routed-subnet ranges (none: routed mode is off for the tenant). What
	// the gateway had routed is withdrawn.
	ReasonRoutedModeNotAllowed = "RoutedSubnetNotAllowed"
)

// VPNTenantPolicy condition types and reasons.
const (
	// ConditionExclusive: no namespace the policy selects is selected by another.
	ConditionExclusive = "Exclusive"
	// ConditionWithinLimits: the gateways of the selected namespaces fit the limits.
	ConditionWithinLimits = "WithinLimits"

	ReasonNoOverlap     = "NoOverlap"
	ReasonPolicyOverlap = "PolicyOverlap"
	ReasonWithinLimits  = "WithinLimits"
	ReasonLimitExceeded = "LimitExceeded"
)
