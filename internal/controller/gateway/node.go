package gateway

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/controller/outcome"
	"bnerd.net/vpn-operator/internal/gatewaypod"
	"bnerd.net/vpn-operator/internal/openstack"
)

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func controlPlane(n *corev1.Node) bool {
	for _, l := range []string{"node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"} {
		if _, ok := n.Labels[l]; ok {
			return true
		}
	}
	for _, t := range n.Spec.Taints {
		if (t.Key == "node-role.kubernetes.io/control-plane" || t.Key == "node-role.kubernetes.io/master") && t.Effect != corev1.TaintEffectPreferNoSchedule {
			return true
		}
	}
	return false
}

// eligible: a node a new gateway may be placed on.
func eligible(n *corev1.Node) bool {
	return nodeReady(n) && !n.Spec.Unschedulable && !controlPlane(n) && n.DeletionTimestamp.IsZero()
}

// Placement is the node choice for a gateway.
type Placement struct {
	// Node is the chosen node ("" when none is eligible).
	Node string
	// Grace is set while the gateway stays on its current node although that node is
	// not Ready: the time left before it moves, and since when the node is not Ready.
	Grace      time.Duration
	NotReadyAt time.Time
	// Full is set when eligible nodes exist but every one holds its maximum of
	// gateways (or was given up on for this gateway).
	Full bool
}

// Spread is what spreads new gateways over the eligible nodes: how many gateways each
// node holds (without the one being placed), the most a node may hold (0: no limit; a
// node's server has a bounded number of NIC slots), and nodes not to use for this
// gateway (a Nova attach to them failed).
type Spread struct {
	Load  map[string]int
	Max   int
	Avoid map[string]bool
}

// SelectNode keeps current while that node exists and is Ready (a gateway must not
// bounce between nodes), and also while it has stopped being Ready for less than grace
// (a node that flaps back keeps its gateways); else it picks the eligible node holding
// the fewest gateways, below the maximum, by name among equals, so no tenant fills one
// node. A deleted node (or one being deleted), and a node to avoid, is left at once.
// notReadySince is when the node stopped being Ready (its Ready condition's last
// transition).
func SelectNode(nodes []corev1.Node, current string, grace time.Duration, now time.Time, notReadySince func(*corev1.Node) time.Time, spread ...Spread) Placement {
	var sp Spread
	if len(spread) > 0 {
		sp = spread[0]
	}
	for i := range nodes {
		n := &nodes[i]
		if n.Name != current || current == "" || !n.DeletionTimestamp.IsZero() || sp.Avoid[current] {
			continue
		}
		if nodeReady(n) {
			return Placement{Node: current}
		}
		since := notReadySince(n)
		if left := grace - now.Sub(since); left > 0 {
			return Placement{Node: current, Grace: left, NotReadyAt: since}
		}
	}
	sort.Slice(nodes, func(i, j int) bool {
		li, lj := sp.Load[nodes[i].Name], sp.Load[nodes[j].Name]
		if li != lj {
			return li < lj
		}
		return nodes[i].Name < nodes[j].Name
	})
	full := false
	for i := range nodes {
		n := &nodes[i]
		if !eligible(n) {
			continue
		}
		if sp.Avoid[n.Name] || sp.Max > 0 && sp.Load[n.Name] >= sp.Max {
			full = true
			continue
		}
		return Placement{Node: n.Name}
	}
	return Placement{Full: full}
}

// nodeLoad counts the gateways on each node (from every gateway's status), without g.
func (r *Reconciler) nodeLoad(ctx context.Context, g *gateway) (map[string]int, error) {
	load := map[string]int{}
	err := r.eachGateway(ctx, func(o readOnlyGateway) {
		if o.meta.GetUID() != g.obj.GetUID() && o.status.NodeName != "" {
			load[o.status.NodeName]++
		}
	})
	return load, err
}

// avoidFor is how long a node whose Nova attach failed is not used for that gateway.
const avoidFor = 10 * time.Minute

// avoidNode remembers that attaching g's port to node failed.
func (r *Reconciler) avoidNode(g *gateway, node string) {
	r.novaMu.Lock()
	defer r.novaMu.Unlock()
	if r.avoid == nil {
		r.avoid = map[types.UID]map[string]time.Time{}
	}
	if r.avoid[g.obj.GetUID()] == nil {
		r.avoid[g.obj.GetUID()] = map[string]time.Time{}
	}
	r.avoid[g.obj.GetUID()][node] = time.Now()
}

// avoided lists the nodes g avoids now.
func (r *Reconciler) avoided(g *gateway) map[string]bool {
	r.novaMu.Lock()
	defer r.novaMu.Unlock()
	out := map[string]bool{}
	for n, at := range r.avoid[g.obj.GetUID()] {
		if time.Since(at) < avoidFor {
			out[n] = true
		}
	}
	return out
}

// ShapeNodes leaves out the nodes the gateway pod shape rules out, since a pinned pod
// never meets the scheduler: a node a new gateway does not fit (the shape's node selector,
// its NoSchedule and NoExecute taints against the tolerations), unless it is the
// gateway's current node and still keeps it (no lost label, no untolerated NoExecute
// taint that would evict the pod). A current node left out counts as gone: the gateway
// moves at once.
func ShapeNodes(nodes []corev1.Node, current string, pod gatewaypod.Shape) []corev1.Node {
	out := make([]corev1.Node, 0, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		if pod.Fits(n) || (n.Name == current && pod.Keeps(n)) {
			out = append(out, *n)
		}
	}
	return out
}

// notReadySince is when the node's Ready condition last changed; a node that reports
// no transition time is counted from when this process first saw it not Ready.
func (r *Reconciler) notReadySince(now time.Time) func(*corev1.Node) time.Time {
	return func(n *corev1.Node) time.Time {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && !c.LastTransitionTime.IsZero() && !c.LastTransitionTime.Time.After(now) {
				return c.LastTransitionTime.Time
			}
		}
		r.novaMu.Lock()
		defer r.novaMu.Unlock()
		if r.notReadySeen == nil {
			r.notReadySeen = map[string]time.Time{}
		}
		if t, ok := r.notReadySeen[n.Name]; ok {
			return t
		}
		r.notReadySeen[n.Name] = now
		return now
	}
}

// forgetReadyNodes drops the first-seen time of nodes that are Ready again.
func (r *Reconciler) forgetReadyNodes(nodes []corev1.Node) {
	r.novaMu.Lock()
	defer r.novaMu.Unlock()
	if len(r.notReadySeen) == 0 {
		return
	}
	for i := range nodes {
		if nodeReady(&nodes[i]) {
			delete(r.notReadySeen, nodes[i].Name)
		}
	}
}

// trustedNode: the gateway's recorded node is one the operator may have placed it on:
// the node whose server its port is attached to (the operator attached it there), or a
// node the placement rules would choose for it now (eligible, and the pod shape fits),
// or the node this process chose for it.
// Anything else (a control-plane node, a cordoned node the port is not on) was not
// written by the operator, and keeping it would pin the pod there.
func (r *Reconciler) trustedNode(g *gateway, nodes []corev1.Node, name string) bool {
	r.novaMu.Lock()
	mine := r.placed[g.obj.GetUID()] == name
	r.novaMu.Unlock()
	if mine {
		return true // this process chose it (a move may be under way, the node may have failed since)
	}
	for i := range nodes {
		n := &nodes[i]
		if n.Name != name {
			continue
		}
		if g.port != nil && g.port.DeviceID != "" {
			if server, err := openstack.ParseProviderID(n.Spec.ProviderID); err == nil && server == g.port.DeviceID {
				return true
			}
		}
		return eligible(n) && r.Config.GatewayPod.Fits(n)
	}
	// A node that is gone: placement moves the gateway anyway.
	return true
}

// ensureNodeSelected persists the node choice before anything is attached to it.
func (r *Reconciler) ensureNodeSelected(ctx context.Context, g *gateway) (bool, error) {
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes); err != nil {
		r.condFailed(g, v1alpha1.ConditionNodeSelected, v1alpha1.ReasonNoEligibleNode, fmt.Errorf("listing nodes: %w", err))
		return false, err
	}
	avoid := r.avoided(g)
	// A node declared failed by its gateways' silence (liveness.go) is left at once and
	// taken by none, like a node a Nova attach failed on.
	failed := r.failedNodeSet()
	for n := range failed {
		avoid[n] = true
	}
	now := time.Now()
	if cur := g.status.NodeName; cur != "" && !r.trustedNode(g, nodes.Items, cur) {
		r.statusForged(ctx, g, "nodeName", cur, "", "the node this gateway's port is attached to, or an eligible node,")
		g.status.NodeName = ""
	}
	shaped := ShapeNodes(nodes.Items, g.status.NodeName, r.Config.GatewayPod)
	p := SelectNode(shaped, g.status.NodeName, r.Config.NodeNotReadyGrace, now, r.notReadySince(now), Spread{Avoid: avoid})
	if p.Node == "" || p.Node != g.status.NodeName {
		// A new placement: count the gateways per node only now (a kept node needs no
		// count, which spares every converged gateway's reconcile a pass over the estate).
		load, err := r.nodeLoad(ctx, g)
		if err != nil {
			r.condFailed(g, v1alpha1.ConditionNodeSelected, v1alpha1.ReasonNoEligibleNode, fmt.Errorf("counting the gateways per node: %w", err))
			return false, err
		}
		p = SelectNode(shaped, g.status.NodeName, r.Config.NodeNotReadyGrace, now, r.notReadySince(now),
			Spread{Load: load, Max: r.Config.NodeMaxGateways, Avoid: avoid})
	}
	r.forgetReadyNodes(nodes.Items)
	if p.Node == "" {
		return r.noEligibleNode(g, p.Full, len(avoid) > 0)
	}
	name := p.Node
	if prev := g.status.NodeName; prev != name {
		r.nodeChanged(ctx, g, prev, name)
	}
	g.status.NodeName = name
	r.novaMu.Lock()
	if r.placed == nil {
		r.placed = map[types.UID]string{}
	}
	r.placed[g.obj.GetUID()] = name
	r.novaMu.Unlock()
	if p.Grace > 0 {
		// Look again when the grace period ends (a node turning Ready again wakes the
		// gateway through the node watch before that).
		g.recheckIn(p.Grace)
		r.condTrue(g, v1alpha1.ConditionNodeSelected, v1alpha1.ReasonNodeSelected, fmt.Sprintf(
			"gateway is pinned to node %s, which is not Ready since %s; it moves to another node if %s is not Ready again by %s",
			name, p.NotReadyAt.UTC().Format(time.RFC3339), name, p.NotReadyAt.Add(r.Config.NodeNotReadyGrace).UTC().Format(time.RFC3339)))
		return true, nil
	}
	r.condTrue(g, v1alpha1.ConditionNodeSelected, v1alpha1.ReasonNodeSelected, "gateway is pinned to node "+name)
	return true, nil
}

// noEligibleNode says why no node takes the gateway: none fits, or every one that does
// is full. While some node is avoided (a failed attach, a silent node), look again when
// the avoidance ends.
func (r *Reconciler) noEligibleNode(g *gateway, full, avoiding bool) (bool, error) {
	msg := "no Ready, schedulable, non-control-plane node that " + r.Config.GatewayPod.Describe() + "; waiting for one"
	if full {
		msg = fmt.Sprintf("every eligible node holds its maximum of %d gateways (IPSEC_NODE_MAX_GATEWAYS) or failed to take this gateway's port; waiting for room", r.Config.NodeMaxGateways)
	}
	r.condFalse(g, v1alpha1.ConditionNodeSelected, v1alpha1.ReasonNoEligibleNode, msg)
	if avoiding {
		return false, outcome.Wait(avoidFor, "%s", msg)
	}
	return false, nil
}

// nodeChanged logs a new placement and, when the gateway leaves a node, says why in a
// Warning event: the node's gateways fell silent (liveness), or it is gone or not Ready.
func (r *Reconciler) nodeChanged(ctx context.Context, g *gateway, prev, name string) {
	logr.FromContextOrDiscard(ctx).Info("gateway node selected", "node", name, "previous", prev)
	if prev == "" {
		return
	}
	if since, ok := r.nodeFailed(prev); ok {
		g.events.Transition(corev1.EventTypeWarning, "NodeChanged", "Reconcile",
			"the gateway pods on node %s stopped renewing their liveness leases at %s while the API server still called them ready (the node or its network is gone); moving the gateway to %s",
			prev, since.UTC().Format(time.RFC3339), name)
		return
	}
	g.events.Transition(corev1.EventTypeWarning, "NodeChanged", "Reconcile", "node %s is gone or not Ready; moving the gateway to %s", prev, name)
}

// ensurePortAttached converges the port's Nova attachment to the selected node's
// server: nothing when it is already there; otherwise detach it from whichever server
// holds it, then attach it. Nova finishes both on its own time: the phase asks once,
// records that it waits (PortAttached Unknown/Detaching or Attaching), and the gateway
// is polled every PortWait.Interval without holding a worker while Nova works.
func (r *Reconciler) ensurePortAttached(ctx context.Context, g *gateway) (bool, error) {
	var node corev1.Node
	if err := r.Client.Get(ctx, client.ObjectKey{Name: g.status.NodeName}, &node); err != nil {
		if apierrors.IsNotFound(err) {
			r.condFalse(g, v1alpha1.ConditionPortAttached, v1alpha1.ReasonPortAttachFailed, "node "+g.status.NodeName+" is gone")
			return false, nil
		}
		return r.portAttachFailed(g, err)
	}
	serverID, err := openstack.ParseProviderID(node.Spec.ProviderID)
	if err != nil {
		r.condFalse(g, v1alpha1.ConditionPortAttached, v1alpha1.ReasonProviderIDUnparseable,
			fmt.Sprintf("node %s: %v", node.Name, err))
		return false, nil
	}
	if g.port.DeviceID != "" && g.port.DeviceID != serverID {
		if ok, err := r.detachFromOtherServer(ctx, g, serverID); !ok {
			return false, err
		}
	}
	if g.port.DeviceID != serverID {
		if ok, err := r.attachToServer(ctx, g, node.Name, serverID); !ok {
			return false, err
		}
	}
	r.novaDone(g.obj.GetUID())
	g.status.ServerID = serverID
	r.condTrue(g, v1alpha1.ConditionPortAttached, v1alpha1.ReasonPortAttached,
		fmt.Sprintf("port %s is attached to server %s (node %s)", g.port.ID, serverID, node.Name))
	return true, nil
}

// portAttachFailed records a failure of the attach phase.
func (r *Reconciler) portAttachFailed(g *gateway, err error) (bool, error) {
	r.condFailed(g, v1alpha1.ConditionPortAttached, v1alpha1.ReasonPortAttachFailed, err)
	return false, err
}

// detachFromOtherServer asks Nova once to detach the port from the server that holds
// it and looks once; false (with the phase's answer) while Nova has not finished.
func (r *Reconciler) detachFromOtherServer(ctx context.Context, g *gateway, serverID string) (bool, error) {
	port := g.port
	op := novaOp{detach: true, port: port.ID, server: port.DeviceID}
	if !r.novaAsked(g, op, v1alpha1.ReasonDetaching) {
		logr.FromContextOrDiscard(ctx).Info("detaching gateway port from its previous server", "port", port.ID, "server", port.DeviceID)
		if err := r.OpenStack.Compute.DetachPort(ctx, port.DeviceID, port.ID); err != nil && !openstack.IsNotFound(err) {
			return r.portAttachFailed(g, err)
		}
		r.novaStart(g.obj.GetUID(), op)
		// Nova may have been quick: look once before polling.
		p, err := r.net().GetPort(ctx, port.ID)
		if err != nil {
			return r.portAttachFailed(g, err)
		}
		port = p
	}
	if port.DeviceID != "" && port.DeviceID != serverID {
		msg := op.waiting()
		r.condWaiting(g, v1alpha1.ConditionPortAttached, v1alpha1.ReasonDetaching, msg)
		return false, outcome.Wait(r.PortWait.Interval, "%s", msg)
	}
	g.port = port
	return true, nil
}

// attachToServer asks Nova once to attach the port to the node's server and looks
// once; false (with the phase's answer) while Nova has not finished, or when it refused
// or never finished (the next node takes the gateway).
func (r *Reconciler) attachToServer(ctx context.Context, g *gateway, nodeName, serverID string) (bool, error) {
	port := g.port
	op := novaOp{port: port.ID, server: serverID}
	if r.novaTimedOut(g, op) {
		// Nova took the request and never finished it: try another node.
		return r.attachFailed(g, nodeName, fmt.Errorf("Nova did not attach port %s to server %s within %s", port.ID, serverID, r.PortWait.Timeout))
	}
	if !r.novaAsked(g, op, v1alpha1.ReasonAttaching) {
		logr.FromContextOrDiscard(ctx).Info("attaching gateway port", "port", port.ID, "server", serverID, "node", nodeName)
		if _, err := r.OpenStack.Compute.AttachPort(ctx, serverID, port.ID); err != nil {
			if openstack.IsTransient(err) {
				return r.portAttachFailed(g, err)
			}
			// Refused (the server's NIC slots are full, the server is gone or not
			// ready): the next node takes the gateway.
			return r.attachFailed(g, nodeName, err)
		}
		r.novaStart(g.obj.GetUID(), op)
		p, err := r.net().GetPort(ctx, port.ID)
		if err != nil {
			return r.portAttachFailed(g, err)
		}
		port = p
	}
	if port.DeviceID != serverID {
		msg := op.waiting()
		r.condWaiting(g, v1alpha1.ConditionPortAttached, v1alpha1.ReasonAttaching, msg)
		return false, outcome.Wait(r.PortWait.Interval, "%s", msg)
	}
	g.port = port
	return true, nil
}

// attachFailed gives up on node for g (for avoidFor) and asks for another placement at
// once: the next reconcile's NodeSelected picks another node.
func (r *Reconciler) attachFailed(g *gateway, node string, err error) (bool, error) {
	r.avoidNode(g, node)
	r.novaDone(g.obj.GetUID())
	r.Log.Info("attaching the gateway's port failed; placing it on another node", "gateway", g.String(), "node", node, "error", err.Error())
	r.condFalse(g, v1alpha1.ConditionPortAttached, v1alpha1.ReasonPortAttachFailed,
		fmt.Sprintf("attaching the port to node %s failed (%s); the gateway is placed on another node", node, outcome.Describe(err)))
	return false, outcome.Wait(r.PortWait.Interval, "attach to node %s failed", node)
}
