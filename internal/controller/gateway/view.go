package gateway

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/render"
)

// Kinds the reconciler serves. A VPNGateway with protocol ipsec is an IPsecGateway in
// every respect but its kind; both are adapted to one view so each phase exists once.
const (
	KindIPsecGateway = gatewayconfig.KindIPsecGateway
	KindVPNGateway   = gatewayconfig.KindVPNGateway
)

func resourceOf(kind string) string {
	if kind == KindVPNGateway {
		return "vpngateways"
	}
	return "ipsecgateways"
}

func newObject(kind string) client.Object {
	if kind == KindVPNGateway {
		return &v1alpha1.VPNGateway{}
	}
	return &v1alpha1.IPsecGateway{}
}

// gateway is the common view of both kinds. spec and status point into obj, so changes
// through them are changes of obj.
type gateway struct {
	kind     string
	obj      client.Object
	spec     *v1alpha1.GatewaySpec
	status   *v1alpha1.GatewayStatus
	validate func() field.ErrorList

	// base is the object as last read from or written to the API server; status
	// patches are computed against it.
	base client.Object

	// port is the dedicated port as read in this reconcile.
	port *openstack.Port

	// recheck, when set, brings the gateway back after that long although it
	// converged (its node's grace period ends then).
	recheck time.Duration
}

func viewOf(obj client.Object) (*gateway, error) {
	switch o := obj.(type) {
	case *v1alpha1.IPsecGateway:
		return &gateway{kind: KindIPsecGateway, obj: o, spec: &o.Spec, status: &o.Status,
			validate: o.Spec.Validate, base: o.DeepCopy()}, nil
	case *v1alpha1.VPNGateway:
		return &gateway{kind: KindVPNGateway, obj: o, spec: &o.Spec.GatewaySpec, status: &o.Status,
			validate: o.Spec.Validate, base: o.DeepCopy()}, nil
	}
	return nil, fmt.Errorf("not a gateway: %T", obj)
}

func (g *gateway) owner() openstack.Owner {
	return openstack.Owner{Kind: g.kind, Namespace: g.obj.GetNamespace(), Name: g.obj.GetName(), UID: string(g.obj.GetUID())}
}

func (g *gateway) ref() render.Gateway {
	return render.Gateway{
		APIVersion: v1alpha1.GroupVersion.String(),
		Kind:       g.kind,
		Resource:   resourceOf(g.kind),
		Namespace:  g.obj.GetNamespace(),
		Name:       g.obj.GetName(),
		UID:        g.obj.GetUID(),
	}
}

func (g *gateway) String() string {
	return g.kind + " " + g.obj.GetNamespace() + "/" + g.obj.GetName()
}

// pskSecretNames lists the Secrets the gateway's tunnels read their keys from.
func pskSecretNames(spec *v1alpha1.GatewaySpec) []string {
	seen := map[string]bool{}
	var out []string
	for _, t := range spec.Tunnels {
		if t.PreSharedKey.Name != "" && !seen[t.PreSharedKey.Name] {
			seen[t.PreSharedKey.Name] = true
			out = append(out, t.PreSharedKey.Name)
		}
	}
	return out
}
