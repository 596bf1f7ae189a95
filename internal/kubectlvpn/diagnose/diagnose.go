// Package diagnose walks one gateway from its conditions down to its tunnels and says
// what is wrong first, with the runbook step that fixes it: the conditions in reconcile
// order, the OpenStack objects the operator made (port, security group rules, floating
// IP, the Nova attachment, routes, the transit network's sharing), the node and the pod,
// the status agent's view of the tunnels, and the exporter's view of charon and NAT.
//
// It only reads. The Kubernetes reads go through a client.Reader, OpenStack through the
// read-only OpenStack interface below, the exporter through a Metrics function (the API
// server's pod proxy in the plugin). Each source may be missing; its checks are then
// reported as skipped, and a diagnosis with skipped checks is never "all well".
package diagnose

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
)

// Status of one check.
type Status string

const (
	Pass    Status = "ok"
	Warn    Status = "warning"
	Fail    Status = "FAIL"
	Skipped Status = "skipped"
)

// Check is one finding.
type Check struct {
	// ID names the check (stable, for tests and scripts), e.g. "openstack.attachment".
	ID string
	// Title says what was checked.
	Title  string
	Status Status
	// Detail is what was found.
	Detail string
	// Fix is the step that fixes it (failures and warnings).
	Fix string
	// Runbook is the document section with the full procedure.
	Runbook string
	// Requested marks a check skipped because the caller asked for it.
	Requested bool `json:",omitempty"`
}

// Report is a gateway's diagnosis, checks in the order they were made.
type Report struct {
	Kind, Namespace, Name string
	Checks                []Check
}

// First returns the first failure, else the first warning, else nil.
func (r *Report) First() *Check {
	for _, want := range []Status{Fail, Warn} {
		for i := range r.Checks {
			if r.Checks[i].Status == want {
				return &r.Checks[i]
			}
		}
	}
	return nil
}

// Healthy is true only when every check passed: a skipped check is not a pass, unless
// the caller asked for it to be skipped.
func (r *Report) Healthy() bool {
	for _, c := range r.Checks {
		if c.Status != Pass && !(c.Status == Skipped && c.Requested) {
			return false
		}
	}
	return len(r.Checks) > 0
}

// OpenStack is the read-only subset of the OpenStack seam diagnose uses.
type OpenStack interface {
	GetPort(ctx context.Context, id string) (*openstack.Port, error)
	GetSecurityGroup(ctx context.Context, id string) (*openstack.SecurityGroup, error)
	GetFloatingIP(ctx context.Context, id string) (*openstack.FloatingIP, error)
	GetNetwork(ctx context.Context, id string) (*openstack.Network, error)
	ListRBACPolicies(ctx context.Context, opts openstack.ListRBACPoliciesOpts) ([]openstack.RBACPolicy, error)
	ResolveRouter(ctx context.Context, nameOrID string) (*openstack.Router, error)
	ListRouters(ctx context.Context, projectID string) ([]openstack.Router, error)
	ListServerInterfaces(ctx context.Context, serverID string) ([]openstack.ServerInterface, error)
}

// ReadOnly narrows an OpenStack client set to what diagnose may call.
func ReadOnly(c *openstack.Clients) OpenStack {
	return readOnly{c.Networking, c.Compute}
}

type readOnly struct {
	n openstack.Networking
	c openstack.Compute
}

func (r readOnly) GetPort(ctx context.Context, id string) (*openstack.Port, error) {
	return r.n.GetPort(ctx, id)
}
func (r readOnly) GetSecurityGroup(ctx context.Context, id string) (*openstack.SecurityGroup, error) {
	return r.n.GetSecurityGroup(ctx, id)
}
func (r readOnly) GetFloatingIP(ctx context.Context, id string) (*openstack.FloatingIP, error) {
	return r.n.GetFloatingIP(ctx, id)
}
func (r readOnly) GetNetwork(ctx context.Context, id string) (*openstack.Network, error) {
	return r.n.GetNetwork(ctx, id)
}
func (r readOnly) ListRBACPolicies(ctx context.Context, o openstack.ListRBACPoliciesOpts) ([]openstack.RBACPolicy, error) {
	return r.n.ListRBACPolicies(ctx, o)
}
func (r readOnly) ResolveRouter(ctx context.Context, nameOrID string) (*openstack.Router, error) {
	return r.n.ResolveRouter(ctx, nameOrID)
}
func (r readOnly) ListRouters(ctx context.Context, projectID string) ([]openstack.Router, error) {
	return r.n.ListRouters(ctx, projectID)
}
func (r readOnly) ListServerInterfaces(ctx context.Context, serverID string) ([]openstack.ServerInterface, error) {
	return r.c.ListServerInterfaces(ctx, serverID)
}

// Metrics fetches the exporter's /metrics of a gateway pod.
type Metrics func(ctx context.Context, namespace, pod string) ([]byte, error)

// Sources are where diagnose reads from.
type Sources struct {
	Kube client.Reader
	// OpenStack is nil when no credential was given: its checks are skipped.
	OpenStack OpenStack
	// OpenStackSkipReason says why OpenStack is nil.
	OpenStackSkipReason string
	// SkipOpenStack and SkipExporter: the caller asked not to check these; their checks
	// are reported as skipped on request and do not make the diagnosis incomplete.
	SkipOpenStack, SkipExporter bool
	// Router is the gateway cluster's router (name or ID) for the reverse-exposure route;
	// empty: every router of the port's project is searched.
	Router string
	// Metrics is nil when the exporter cannot be reached: its checks are skipped.
	Metrics Metrics
	// Now is the clock (tests); zero is time.Now.
	Now func() time.Time
}

// gw is the gateway under diagnosis, either kind.
type gw struct {
	kind   string
	obj    client.Object
	spec   *v1alpha1.GatewaySpec
	status *v1alpha1.GatewayStatus
	// wireguard is the WireGuard section of a VPNGateway with protocol wireguard, nil
	// for IPsec (v1alpha1.Gateway.GetWireGuard).
	wireguard  *v1alpha1.WireGuardSpec
	generation int64
}

// ErrNotFound means no gateway of that name exists.
var ErrNotFound = errors.New("gateway not found")

// Get reads the gateway: kind "" tries IPsecGateway, then VPNGateway.
func get(ctx context.Context, c client.Reader, kind, ns, name string) (*gw, error) {
	key := types.NamespacedName{Namespace: ns, Name: name}
	kinds := v1alpha1.GatewayKinds
	if kind != "" {
		kinds = []string{kind}
	}
	for _, k := range kinds {
		o := v1alpha1.NewGateway(k)
		if o == nil {
			continue
		}
		err := c.Get(ctx, key, o)
		if err == nil {
			return &gw{kind: k, obj: o, spec: o.GetGatewaySpec(), status: o.GetGatewayStatus(), wireguard: o.GetWireGuard(), generation: o.GetGeneration()}, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%w: no IPsecGateway or VPNGateway %s/%s", ErrNotFound, ns, name)
}

// run carries one diagnosis.
type run struct {
	ctx context.Context
	src Sources
	g   *gw
	rep *Report
	now time.Time

	port *openstack.Port
	pod  *corev1.Pod
}

func (r *run) add(c Check) { r.rep.Checks = append(r.rep.Checks, c) }

// Diagnose diagnoses gateway ns/name of the given kind ("" for either).
func Diagnose(ctx context.Context, src Sources, kind, ns, name string) (*Report, error) {
	g, err := get(ctx, src.Kube, kind, ns, name)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if src.Now != nil {
		now = src.Now()
	}
	r := &run{ctx: ctx, src: src, g: g, now: now, rep: &Report{Kind: g.kind, Namespace: ns, Name: name}}
	r.checkObject()
	r.checkConditions()
	r.checkOpenStack()
	r.checkNode()
	podOK := r.checkPod()
	r.checkTunnels(podOK)
	r.checkExporter(podOK)
	return r.rep, nil
}
