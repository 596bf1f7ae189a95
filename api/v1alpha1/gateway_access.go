package v1alpha1

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The two gateway kinds. A VPNGateway with protocol ipsec is an IPsecGateway in every
// respect but its kind; code that serves both reads them through Gateway, so no package
// outside this one switches on the kind.
const (
	KindIPsecGateway = "IPsecGateway"
	KindVPNGateway   = "VPNGateway"
)

// GatewayKinds are both gateway kinds, in the order the operator lists them.
var GatewayKinds = []string{KindIPsecGateway, KindVPNGateway}

// Gateway is what both gateway kinds share. Spec and status accessors return pointers
// into the object: a change through them is a change of the object.
//
// +kubebuilder:object:generate=false
type Gateway interface {
	client.Object
	// GatewayKind is KindIPsecGateway or KindVPNGateway (the object's TypeMeta may be
	// empty, as it is for objects read through a typed client).
	GatewayKind() string
	// GetGatewaySpec is the spec both kinds share.
	GetGatewaySpec() *GatewaySpec
	// GetGatewayStatus is the status.
	GetGatewayStatus() *GatewayStatus
	// GetWireGuard is the WireGuard section of a VPNGateway with protocol wireguard, and
	// nil for an IPsec gateway of either kind. A wireguard gateway without the section
	// (refused by validation) gets an empty one, so every reader stays on the WireGuard
	// path.
	GetWireGuard() *WireGuardSpec
	// ValidateSpec runs the semantic checks the schema cannot express.
	ValidateSpec() field.ErrorList
}

var (
	_ Gateway = &IPsecGateway{}
	_ Gateway = &VPNGateway{}
)

func (g *IPsecGateway) GatewayKind() string              { return KindIPsecGateway }
func (g *IPsecGateway) GetGatewaySpec() *GatewaySpec     { return &g.Spec }
func (g *IPsecGateway) GetGatewayStatus() *GatewayStatus { return &g.Status }
func (g *IPsecGateway) GetWireGuard() *WireGuardSpec     { return nil }
func (g *IPsecGateway) ValidateSpec() field.ErrorList    { return g.Spec.Validate() }
func (g *VPNGateway) GatewayKind() string                { return KindVPNGateway }
func (g *VPNGateway) GetGatewaySpec() *GatewaySpec       { return &g.Spec.GatewaySpec }
func (g *VPNGateway) GetGatewayStatus() *GatewayStatus   { return &g.Status }
func (g *VPNGateway) ValidateSpec() field.ErrorList      { return g.Spec.Validate() }
func (g *VPNGateway) GetWireGuard() *WireGuardSpec {
	if g.Spec.Protocol != VPNProtocolWireGuard {
		return nil
	}
	if g.Spec.WireGuard == nil {
		return &WireGuardSpec{}
	}
	return g.Spec.WireGuard
}

// NewGateway is an empty object of kind (nil for a kind that is no gateway's).
func NewGateway(kind string) Gateway {
	switch kind {
	case KindIPsecGateway:
		return &IPsecGateway{}
	case KindVPNGateway:
		return &VPNGateway{}
	}
	return nil
}

// NewGatewayList is an empty list of kind (nil for a kind that is no gateway's).
func NewGatewayList(kind string) client.ObjectList {
	switch kind {
	case KindIPsecGateway:
		return &IPsecGatewayList{}
	case KindVPNGateway:
		return &VPNGatewayList{}
	}
	return nil
}

// GatewayResource is the API resource (plural) of kind.
func GatewayResource(kind string) string {
	if kind == KindVPNGateway {
		return "vpngateways"
	}
	return "ipsecgateways"
}

// IsGatewayKind says whether kind is one of the gateway kinds.
func IsGatewayKind(kind string) bool {
	return kind == KindIPsecGateway || kind == KindVPNGateway
}

// ListGateways lists the gateways of both kinds the options select. The items point into
// the lists read, so with client.UnsafeDisableDeepCopy they are the cache's own objects:
// read them, never change them. A kind that cannot be listed does not keep the other's
// gateways back: they are returned with the error, which names the kind.
func ListGateways(ctx context.Context, c client.Reader, opts ...client.ListOption) ([]Gateway, error) {
	var ipsec IPsecGatewayList
	var vpn VPNGatewayList
	var errs []error
	if err := c.List(ctx, &ipsec, opts...); err != nil {
		errs = append(errs, fmt.Errorf("listing %ss: %w", KindIPsecGateway, err))
	}
	if err := c.List(ctx, &vpn, opts...); err != nil {
		errs = append(errs, fmt.Errorf("listing %ss: %w", KindVPNGateway, err))
	}
	out := make([]Gateway, 0, len(ipsec.Items)+len(vpn.Items))
	for i := range ipsec.Items {
		out = append(out, &ipsec.Items[i])
	}
	for i := range vpn.Items {
		out = append(out, &vpn.Items[i])
	}
	return out, errors.Join(errs...)
}

// DescribeGateway names a gateway in messages and claims: "<Kind> <namespace>/<name>".
func DescribeGateway(g Gateway) string {
	return g.GatewayKind() + " " + g.GetNamespace() + "/" + g.GetName()
}

// GatewayPhaseConditionTypes are an IPsec gateway's phase conditions in reconcile order;
// Ready summarises them (with the health conditions).
var GatewayPhaseConditionTypes = []string{
	ConditionValidated,
	ConditionAllocated,
	ConditionPortReady,
	ConditionSecurityGroupReady,
	ConditionFloatingIPReady,
	ConditionRoutingReady,
	ConditionNodeSelected,
	ConditionPortAttached,
	ConditionWorkloadReady,
}

// GatewayConditionTypesFor are the phase conditions of an IPsec gateway, or of a
// WireGuard one (which also has its key phase, after Validated).
func GatewayConditionTypesFor(wireGuard bool) []string {
	if !wireGuard {
		return GatewayPhaseConditionTypes
	}
	out := []string{GatewayPhaseConditionTypes[0], ConditionWireGuardKeyReady}
	return append(out, GatewayPhaseConditionTypes[1:]...)
}

// GatewayAgentStatusFields are the status fields (JSON names) the gateway pod's status
// agent owns and applies under its own field manager; the operator never writes them.
var GatewayAgentStatusFields = []string{"tunnels", "tunnelsReady", "tunnelsObservedTime", "interfacePublicKey"}

// WithoutAgentFields is the status less the fields the status agent owns
// (GatewayAgentStatusFields).
func (s GatewayStatus) WithoutAgentFields() GatewayStatus {
	s.Tunnels, s.TunnelsReady, s.TunnelsObservedTime, s.InterfacePublicKey = nil, "", nil, ""
	return s
}
