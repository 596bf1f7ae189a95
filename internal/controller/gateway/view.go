package gateway

import (
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/addrpolicy"
	"bnerd.net/vpn-operator/internal/controller/skeleton"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/tenancy"
)

// gateway is the common view of both kinds. spec and status point into obj, so changes
// through them are changes of obj.
type gateway struct {
	kind     string
	obj      client.Object
	spec     *v1alpha1.GatewaySpec
	status   *v1alpha1.GatewayStatus
	validate func() field.ErrorList
	// wg is the WireGuard section of a VPNGateway with protocol wireguard (nil: IPsec).
	wg *v1alpha1.WireGuardSpec

	// base is the object as last read from or written to the API server; status
	// patches are computed against it.
	base client.Object

	// port is the dedicated port as read in this reconcile.
	port *openstack.Port
	// links are the active ClusterLinks as read in this reconcile's validation.
	links []link
	// nsLabels are the labels of the gateway's namespace, and policy the tenant policy
	// that governs it, as read in this reconcile's validation.
	nsLabels map[string]string
	policy   tenancy.Policy

	// events are this reconcile's Events, emitted once the status write that records
	// them succeeded (persist).
	events skeleton.Events

	// recheck, when set, brings the gateway back after that long although it
	// converged (its node's grace period ends then, or a key rotation's overlap).
	recheck time.Duration
}

// recheckIn asks for the gateway back after d at the latest.
func (g *gateway) recheckIn(d time.Duration) {
	if d > 0 && (g.recheck == 0 || d < g.recheck) {
		g.recheck = d
	}
}

func viewOf(obj client.Object) (*gateway, error) {
	o, ok := obj.(v1alpha1.Gateway)
	if !ok {
		return nil, fmt.Errorf("not a gateway: %T", obj)
	}
	return &gateway{kind: o.GatewayKind(), obj: o, spec: o.GetGatewaySpec(), status: o.GetGatewayStatus(),
		validate: o.ValidateSpec, wg: o.GetWireGuard(), base: o.DeepCopyObject().(client.Object)}, nil
}

func (g *gateway) owner() openstack.Owner {
	return openstack.Owner{Kind: g.kind, Namespace: g.obj.GetNamespace(), Name: g.obj.GetName(), UID: string(g.obj.GetUID())}
}

func (g *gateway) ref() render.Gateway {
	return render.Gateway{
		APIVersion: v1alpha1.GroupVersion.String(),
		Kind:       g.kind,
		Resource:   v1alpha1.GatewayResource(g.kind),
		Namespace:  g.obj.GetNamespace(),
		Name:       g.obj.GetName(),
		UID:        g.obj.GetUID(),
	}
}

func (g *gateway) String() string {
	return g.kind + " " + g.obj.GetNamespace() + "/" + g.obj.GetName()
}

// validateAddresses checks the spec's targets and the client's networks (tunnels'
// subnets or WireGuard peers' allowed IPs) against the operator's address policy.
func (g *gateway) validateAddresses(pol addrpolicy.Policy) field.ErrorList {
	return append(g.spec.ValidateAddresses(pol), g.wg.ValidateAddresses(pol)...)
}

// validatePeerAddresses checks the tunnels' peer addresses (or the WireGuard peers'
// endpoints) against the operator's own ranges.
func (g *gateway) validatePeerAddresses(pol addrpolicy.Policy) field.ErrorList {
	return g.spec.ValidatePeerAddresses(pol, g.wg)
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

// remote is a tunnel or WireGuard peer and the client's networks behind it.
type remote struct {
	name    string
	subnets []string
	routed  bool
}

// remotes lists the gateway's tunnels (or WireGuard peers) with their networks.
func (g *gateway) remotes() []remote {
	var out []remote
	if g.wg != nil {
		for _, p := range g.wg.Peers {
			out = append(out, remote{name: p.Name, subnets: p.AllowedIPs})
		}
		return out
	}
	for _, t := range g.spec.Tunnels {
		out = append(out, remote{name: t.Name, subnets: t.Peer.Subnets, routed: t.Mode == v1alpha1.TunnelModeRouted})
	}
	return out
}

// routedSubnets lists the subnets of the gateway's routed-mode tunnels, sorted.
func routedSubnets(spec *v1alpha1.GatewaySpec) []string {
	var out []string
	for _, t := range spec.Tunnels {
		if t.Mode == v1alpha1.TunnelModeRouted {
			out = append(out, t.Peer.Subnets...)
		}
	}
	sort.Strings(out)
	return out
}

// conditionTypes are the phase conditions Ready summarises for this gateway: a WireGuard
// gateway also has its key phase.
