package gateway

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/controller/outcome"
	"bnerd.net/vpn-operator/internal/openstack"
)

var providerIDRe = regexp.MustCompile(`^openstack://[^/]*/([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$`)

// ErrProviderIDUnparseable: a node's providerID does not name an OpenStack server.
var ErrProviderIDUnparseable = errors.New("providerID does not name an OpenStack server")

// ParseProviderID returns the Nova server ID of openstack:///<uuid> or
// openstack://<region>/<uuid>.
func ParseProviderID(pid string) (string, error) {
	m := providerIDRe.FindStringSubmatch(pid)
	if m == nil {
		return "", fmt.Errorf("%w: %q (want openstack:///<server-uuid>)", ErrProviderIDUnparseable, pid)
	}
	return m[1], nil
}

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
}

// SelectNode keeps current while that node exists and is Ready (a gateway must not
// bounce between nodes), and also while it has stopped being Ready for less than grace
// (a node that flaps back keeps its gateways); else it picks the first eligible node by
// name. A deleted node (or one being deleted) is left at once. notReadySince is when
// the node stopped being Ready (its Ready condition's last transition).
func SelectNode(nodes []corev1.Node, current string, grace time.Duration, now time.Time, notReadySince func(*corev1.Node) time.Time) Placement {
	for i := range nodes {
		n := &nodes[i]
		if n.Name != current || current == "" || !n.DeletionTimestamp.IsZero() {
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
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	for i := range nodes {
		if eligible(&nodes[i]) {
			return Placement{Node: nodes[i].Name}
		}
	}
	return Placement{}
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

// ensureNodeSelected persists the node choice before anything is attached to it.
func (r *Reconciler) ensureNodeSelected(ctx context.Context, g *gateway) (bool, error) {
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes); err != nil {
		r.condFailed(g, v1alpha1.ConditionNodeSelected, v1alpha1.ReasonNoEligibleNode, fmt.Errorf("listing nodes: %w", err))
		return false, err
	}
	now := time.Now()
	p := SelectNode(nodes.Items, g.status.NodeName, r.Config.NodeNotReadyGrace, now, r.notReadySince(now))
	r.forgetReadyNodes(nodes.Items)
	if p.Node == "" {
		r.condFalse(g, v1alpha1.ConditionNodeSelected, v1alpha1.ReasonNoEligibleNode,
			"no Ready, schedulable, non-control-plane node; waiting for one")
		return false, nil
	}
	name := p.Node
	if prev := g.status.NodeName; prev != name {
		logr.FromContextOrDiscard(ctx).Info("gateway node selected", "node", name, "previous", prev)
		if prev != "" && r.Recorder != nil {
			r.Recorder.Eventf(g.obj, nil, corev1.EventTypeWarning, "NodeChanged", "Reconcile", "node %s is gone or not Ready; moving the gateway to %s", prev, name)
		}
	}
	g.status.NodeName = name
	if p.Grace > 0 {
		// Look again when the grace period ends (a node turning Ready again wakes the
		// gateway through the node watch before that).
		g.recheck = p.Grace
		r.condTrue(g, v1alpha1.ConditionNodeSelected, v1alpha1.ReasonNodeSelected, fmt.Sprintf(
			"gateway is pinned to node %s, which is not Ready since %s; it moves to another node if %s is not Ready again by %s",
			name, p.NotReadyAt.UTC().Format(time.RFC3339), name, p.NotReadyAt.Add(r.Config.NodeNotReadyGrace).UTC().Format(time.RFC3339)))
		return true, nil
	}
	r.condTrue(g, v1alpha1.ConditionNodeSelected, v1alpha1.ReasonNodeSelected, "gateway is pinned to node "+name)
	return true, nil
}

// ensurePortAttached converges the port's Nova attachment to the selected node's
// server: nothing when it is already there; otherwise detach it from whichever server
// holds it, then attach it. Nova finishes both on its own time: the phase asks once,
// records that it waits (PortAttached Unknown/Detaching or Attaching), and the gateway
// is polled every PortWait.Interval without holding a worker while Nova works.
func (r *Reconciler) ensurePortAttached(ctx context.Context, g *gateway) (bool, error) {
	log := logr.FromContextOrDiscard(ctx)
	fail := func(err error) (bool, error) {
		r.condFailed(g, v1alpha1.ConditionPortAttached, v1alpha1.ReasonPortAttachFailed, err)
		return false, err
	}
	var node corev1.Node
	if err := r.Client.Get(ctx, client.ObjectKey{Name: g.status.NodeName}, &node); err != nil {
		if apierrors.IsNotFound(err) {
			r.condFalse(g, v1alpha1.ConditionPortAttached, v1alpha1.ReasonPortAttachFailed, "node "+g.status.NodeName+" is gone")
			return false, nil
		}
		return fail(err)
	}
	serverID, err := ParseProviderID(node.Spec.ProviderID)
	if err != nil {
		r.condFalse(g, v1alpha1.ConditionPortAttached, v1alpha1.ReasonProviderIDUnparseable,
			fmt.Sprintf("node %s: %v", node.Name, err))
		return false, nil
	}
	uid := g.obj.GetUID()
	port := g.port
	if port.DeviceID != "" && port.DeviceID != serverID {
		op := novaOp{detach: true, port: port.ID, server: port.DeviceID}
		if !r.novaAsked(g, op, v1alpha1.ReasonDetaching) {
			log.Info("detaching gateway port from its previous server", "port", port.ID, "server", port.DeviceID)
			if err := r.OpenStack.Compute.DetachPort(ctx, port.DeviceID, port.ID); err != nil && !openstack.IsNotFound(err) {
				return fail(err)
			}
			r.novaStart(uid, op)
			// Nova may have been quick: look once before polling.
			p, err := r.net().GetPort(ctx, port.ID)
			if err != nil {
				return fail(err)
			}
			port = p
		}
		if port.DeviceID != "" && port.DeviceID != serverID {
			msg := op.waiting()
			r.condWaiting(g, v1alpha1.ConditionPortAttached, v1alpha1.ReasonDetaching, msg)
			return false, outcome.Wait(r.PortWait.Interval, "%s", msg)
		}
		g.port = port
	}
	if port.DeviceID != serverID {
		op := novaOp{port: port.ID, server: serverID}
		if !r.novaAsked(g, op, v1alpha1.ReasonAttaching) {
			log.Info("attaching gateway port", "port", port.ID, "server", serverID, "node", node.Name)
			if _, err := r.OpenStack.Compute.AttachPort(ctx, serverID, port.ID); err != nil {
				return fail(err)
			}
			r.novaStart(uid, op)
			p, err := r.net().GetPort(ctx, port.ID)
			if err != nil {
				return fail(err)
			}
			port = p
		}
		if port.DeviceID != serverID {
			msg := op.waiting()
			r.condWaiting(g, v1alpha1.ConditionPortAttached, v1alpha1.ReasonAttaching, msg)
			return false, outcome.Wait(r.PortWait.Interval, "%s", msg)
		}
		g.port = port
	}
	r.novaDone(uid)
	g.status.ServerID = serverID
	r.condTrue(g, v1alpha1.ConditionPortAttached, v1alpha1.ReasonPortAttached,
		fmt.Sprintf("port %s is attached to server %s (node %s)", port.ID, serverID, node.Name))
	return true, nil
}
