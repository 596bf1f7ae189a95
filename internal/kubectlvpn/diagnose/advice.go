package diagnose

import (
	"strings"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// TroubleshootingDoc is the runbook every finding links into; its headings are the
// condition reasons and the findings below (a test keeps both in step).
const TroubleshootingDoc = "docs/runbooks/troubleshooting.md"

// Anchor is the link to a heading of the troubleshooting runbook.
func Anchor(heading string) string { return anchor(heading) }

// NudgeAnnotation is the annotation the findings suggest to make the operator converge
// at once: an annotation change is one of the updates the gateway and ClusterLink
// controllers react to (status writes and label changes are not); the operator gives the
// annotation and its value no meaning.
const NudgeAnnotation = "ipsec.bnerd.net/reconcile-requested"

// anchor is the GitHub-style anchor of a heading.
func anchor(heading string) string {
	h := strings.ToLower(heading)
	var b strings.Builder
	for _, r := range h {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return TroubleshootingDoc + "#" + b.String()
}

// Findings of checks beyond the conditions, each with its troubleshooting heading.
const (
	FindingPortMissing     = "Port missing"
	FindingPortDetached    = "Port detached"
	FindingPortSecGroups   = "Port security groups changed"
	FindingSecGroupMissing = "Security group missing"
	FindingIKERuleMissing  = "IKE rule missing"
	FindingFloatingIPMoved = "Floating IP not on the port"
	FindingRouteMissing    = "Route missing"
	FindingAddressPair     = "Allowed address pair missing"
	FindingTransitShared   = "Transit network shared with every project"
	FindingNodeGone        = "Node gone or not ready"
	FindingNodeServer      = "Node server mismatch"
	FindingNoPod           = "No gateway pod"
	FindingPodWrongNode    = "Pod on the wrong node"
	FindingPodNoSecondNIC  = "Pod without its second interface"
	FindingPodNotReady     = "Pod not ready"
	FindingTunnelDown      = "Tunnel down"
	FindingStatusAgent     = "Status agent silent"
	FindingCharonDown      = "Charon unreachable"
	FindingNATNotApplied   = "NAT not applied"
	FindingNATErrors       = "NAT apply errors"
	FindingStaleGeneration = "Operator behind the spec"
	FindingGatewayDeleting = "Gateway being deleted"
	FindingWireGuardKey    = "WireGuard gateway key"
	FindingWireGuardDown   = "WireGuard interface unobservable"
	FindingListenPort      = "WireGuard listen port rule missing"
)

// Findings lists every finding heading (for the documentation test).
var Findings = []string{
	FindingPortMissing, FindingPortDetached, FindingPortSecGroups, FindingSecGroupMissing, FindingIKERuleMissing,
	FindingFloatingIPMoved, FindingRouteMissing, FindingAddressPair, FindingTransitShared, FindingNodeGone,
	FindingNodeServer, FindingNoPod, FindingPodWrongNode, FindingPodNoSecondNIC, FindingPodNotReady,
	FindingTunnelDown, FindingStatusAgent, FindingCharonDown, FindingNATNotApplied, FindingNATErrors,
	FindingStaleGeneration, FindingGatewayDeleting, FindingWireGuardKey, FindingWireGuardDown, FindingListenPort,
}

// reconcileNudge is how to make the operator converge now instead of at its next resync:
// a changed annotation wakes the object's controller.
const reconcileNudge = "kubectl annotate %s %s -n %s " + NudgeAnnotation + "=\"$(date +%%s)\" --overwrite"

// reasonFix is the short fix of each gateway condition reason (the full entry is in the
// troubleshooting runbook under the reason's own heading).
var reasonFix = map[string]string{
	v1alpha1.ReasonInvalidSpec:              "Fix the field the message names in the gateway's spec; nothing was created in OpenStack.",
	v1alpha1.ReasonKeyFailed:                "Read the API error: the operator must create and update the Secret <name>-gateway-wireguard in the gateway's namespace (kubectl auth can-i).",
	v1alpha1.ReasonKeyRotationPending:       "Give every client the new status.wireguard.publicKey with status.wireguard.listenPort as its endpoint's port (kubectl vpn peer-config --format wireguard); the previous key keeps serving on its own port until each peer has completed a handshake with the new one or the overlap ends.",
	v1alpha1.ReasonPreviousKeyRetired:       "Configure the clients named in the condition with status.wireguard.publicKey and status.wireguard.listenPort (kubectl vpn peer-config --format wireguard): the key they use is no longer served.",
	v1alpha1.ReasonListenPortOpen:           "Give every peer a fixed spec.wireguard.peers[].endpoint so the listen port is admitted from those addresses only; a roaming peer needs it open to everyone.",
	v1alpha1.ReasonRoutedSubnetConflict:     "Renumber or drop the routed tunnel's subnet the message names, or switch that tunnel to mode snat: the router cannot route one network to two places, nor a network it already uses.",
	v1alpha1.ReasonRoutedModeNotAllowed:     "The tenant's VPNTenantPolicy does not allow this routed subnet (kubectl vpn tenant <namespace>): ask a platform admin to add the range to its routedSubnets, or switch the tunnel to mode snat.",
	v1alpha1.ReasonExposureTargetNotAllowed: "The exposure's target is outside what the tenant may reach (kubectl vpn tenant <namespace>): ask a platform admin to add the range to the VPNTenantPolicy's exposureTargets, or remove the exposure.",
	v1alpha1.ReasonTenantLimitExceeded:      "The tenant's gateways hold what its VPNTenantPolicy allows (kubectl vpn tenant <namespace>): remove something, or ask a platform admin to raise the limit.",
	v1alpha1.ReasonTenantPolicyConflict:     "Two VPNTenantPolicies select this namespace: a platform admin makes their namespace selectors disjoint (kubectl get vpntenantpolicies).",
	v1alpha1.ReasonFloatingIPNotAllowed:     "The pinned floating IP is not in the tenant's VPNTenantPolicy floatingIPs: ask a platform admin to add it, or drop spec.endpoint.floatingIP.",
	v1alpha1.ReasonFloatingIPReserved:       "Another gateway holds the pinned floating IP (its bnerd.net/pinned-by tag); it is free once that gateway is deleted or stops pinning it.",
	v1alpha1.ReasonPlaintextExposure:        "Expose the service's TLS port, or set allowPlaintext: true on that exposure after deciding the plaintext hop is acceptable.",
	v1alpha1.ReasonAllocationFailed:         "Free or widen the pool (IPSEC_SERVICE_CIDR_POOL), move a pinned virtual IP into its range, or pick a /24 that does not overlap the client's networks.",
	v1alpha1.ReasonPortFailed:               "Read the OpenStack error in the message: quota (openstack quota show), the gateway network's name (IPSEC_GATEWAY_NETWORK) or the operator's credential.",
	v1alpha1.ReasonIntervalOutOfBounds:      "Set the tunnel's ike.lifetime (10m-24h), esp.lifetime (5m-8h) or dpd.delay (10s-1h) the message names inside its bounds; nothing is built until then.",
	v1alpha1.ReasonPeerAddressNotAllowed:    "Use the client's real address in spec.tunnels[].peer.address (or spec.wireguard.peers[].endpoint.address): it lies in the operator's own ranges the message names (service-CIDR pool, gateway network, internal source CIDRs).",
	v1alpha1.ReasonPeerSubnetOverlap:        "A client network overlaps the gateway network's subnet; remove it from spec.tunnels[].peer.subnets (the client must renumber or NAT it).",
	v1alpha1.ReasonSecurityGroupFail:        "Read the OpenStack error: security group or rule quota (openstack quota show), or the operator's credential.",
	v1alpha1.ReasonFloatingIPMissing:        "The pinned spec.endpoint.floatingIP does not exist in the operator's project: check the address, or allocate it there (openstack floating ip create --floating-ip-address).",
	v1alpha1.ReasonFloatingIPInUse:          "Disassociate the pinned floating IP from what holds it (the old VM): openstack floating ip unset --port <address>. The gateway takes it at its next reconcile.",
	v1alpha1.ReasonFloatingIPFailed:         "Read the OpenStack error: floating IP quota, the external network (IPSEC_EXTERNAL_NETWORK), or the operator's credential.",
	v1alpha1.ReasonRoutingFailed:            "Read the OpenStack error: the router (IPSEC_ROUTER_ID) must exist and take extra routes (quota max_routes).",
	v1alpha1.ReasonInternalSourcesMissing:   "Set internalSourceCIDRs (chart) / IPSEC_INTERNAL_SOURCE_CIDRS so the security group admits the fabric to the reverse exposures.",
	v1alpha1.ReasonNoEligibleNode:           "Make a worker node Ready and schedulable (kubectl get nodes); control-plane nodes are never chosen, and the node must carry the gateway pods' node selector and tolerate their taints (chart values gatewayPods.nodeSelector and gatewayPods.tolerations).",
	v1alpha1.ReasonProviderIDUnparseable:    "The node's spec.providerID must be openstack:///<server-uuid>: fix the cloud provider's node registration.",
	v1alpha1.ReasonPortAttachFailed:         "Read the Nova error: the server's interface limit, or a port still attached elsewhere (openstack port show <status.portID> -c device_id).",
	v1alpha1.ReasonAttaching:                "Wait: Nova is attaching the port to the node's server (the message names both); the operator looks every 2 s and asks Nova again after 2 minutes without a result. If it stays Attaching for minutes, check that server: openstack server show <server> -c status -c OS-EXT-STS:task_state.",
	v1alpha1.ReasonDetaching:                "Wait: Nova is detaching the port from the server the message names before it is attached to the node's server; the operator looks every 2 s and asks again after 2 minutes without a result. If it stays Detaching for minutes, check that server: openstack server show <server> -c status -c OS-EXT-STS:task_state.",
	v1alpha1.ReasonWorkloadPending:          "The gateway's status lacks an allocation yet; wait for the phases before it, or look at the first condition that is not True.",
	v1alpha1.ReasonWorkloadFailed:           "Read the API error: the operator's RBAC (kubectl auth can-i), or the Multus NetworkAttachmentDefinition CRD missing.",
	v1alpha1.ReasonPSKSecretMissing:         "Create the Secret the message names in the gateway's namespace with the key it names (kubectl create secret generic <name> --from-literal=psk=...).",
	v1alpha1.ReasonOpenStackErr:             "Read the OpenStack error in the message; the operator retries with backoff.",
	v1alpha1.ReasonDeleting:                 "The finalizer waits for OpenStack cleanup; read the message for the failing step (it is retried).",
	v1alpha1.ReasonNotReady:                 "Look at the first condition that is not True.",
	v1alpha1.ReasonInProgress:               "Wait: the operator is converging this phase.",
}

// GatewayReasons are the reasons a gateway's phase conditions can carry when not True
// (or True with a warning), for the documentation test.
var GatewayReasons = func() []string {
	var out []string
	for r := range reasonFix {
		out = append(out, r)
	}
	return out
}()

// fixFor returns the fix and runbook link of a condition reason.
func fixFor(reason string) (string, string) {
	if f, ok := reasonFix[reason]; ok {
		return f, anchor(reason)
	}
	return "Read the condition's message.", anchor("Conditions")
}
