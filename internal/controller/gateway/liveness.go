package gateway

import (
	"context"
	"fmt"
	"sort"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// Node failure timed from the failure (issue: a powered-off node cost its clients the
// node's NotReady, 40-50 s on a default cluster, before anything moved). Every gateway
// pod's status agent renews its gateway's liveness Lease (render.LivenessLease) every
// third of the liveness timeout. The operator watches the Leases and declares a node
// failed when every gateway pod on it that the API server still calls ready has gone
// silent for the timeout: a kubelet that is alive reports a crashed or hung pod not
// ready long before, so silence from pods the API server still calls ready means the node
// or its network is gone. The gateways pinned there move at once; the Nova detach from
// the node's server is the fence (the old pod, should it still run, no longer has the
// port), and the stranded pod is deleted so the Recreate Deployment can start the new one.
//
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;delete

// livenessQuarantine is how long a node declared failed is left alone: no gateway is
// placed on it and none stays. A node that really died is NotReady by then and the
// usual rules keep it out; one that came back (a healed partition) takes gateways again,
// at once if the node controller had marked it NotReady and it turned Ready since. It
// also keeps a flapping node from pulling gateways back and forth.
const livenessQuarantine = 2 * time.Minute

// LeaseView is what the failure decision needs of one liveness Lease: the node of the
// pod renewing it (one the API server calls ready) and whether it went silent.
type LeaseView struct {
	Node   string
	Silent bool
}

// FailedNodes decides which nodes failed: those whose every watched gateway pod is
// silent. When more than half of the worker nodes would fail at once, none does (held
// lists them): that many silent nodes at the same moment points at the control plane or
// the operator's own connection, not at the nodes, and moving every gateway would cost
// every client its tunnel for nothing.
func FailedNodes(views []LeaseView, workers int) (failed, held []string) {
	silent, alive := map[string]bool{}, map[string]bool{}
	for _, v := range views {
		if v.Node == "" {
			continue
		}
		if v.Silent {
			silent[v.Node] = true
		} else {
			alive[v.Node] = true
		}
	}
	for n := range silent {
		if !alive[n] {
			failed = append(failed, n)
		}
	}
	sort.Strings(failed)
	if 2*len(failed) > workers {
		return nil, failed
	}
	return failed, nil
}

// nodeFailure is a node declared failed by its gateways' silence.
type nodeFailure struct {
	since time.Time // when its last gateway pod's renewal was seen
	at    time.Time // when it was declared
}

// leaseSeen is when this process last saw a Lease change (its resourceVersion): silence
// is measured on the operator's own clock from that, never from the renewal time the
// pod wrote (the node's clock), and a freshly started operator gives every Lease a full
// timeout before it judges.
type leaseSeen struct {
	version string
	at      time.Time
}

// livenessMonitor reads the Leases, the gateway pods and the nodes from the cache each
// tick. Every replica observes (a warm standby knows how long each Lease has been silent
// when it takes over, so a leader lost with the node costs the leader Lease's expiry, not
// that plus a liveness timeout); only the elected one declares failed nodes
// (Reconciler.failedNodes) and moves gateways.
type livenessMonitor struct {
	r *Reconciler
	// elected is closed once this replica leads (the manager's Elected()).
	elected <-chan struct{}
	seen    map[types.UID]leaseSeen
	// heldLogged keeps the guard's log line to one per held set.
	heldLogged string
}

// NeedLeaderElection: no, every replica observes; check acts only when elected.
func (m *livenessMonitor) NeedLeaderElection() bool { return false }

func (m *livenessMonitor) leading() bool {
	if m.elected == nil {
		return true
	}
	select {
	case <-m.elected:
		return true
	default:
		return false
	}
}

func (m *livenessMonitor) Start(ctx context.Context) error {
	tick := m.r.Config.GatewayLivenessTimeout / 12
	if tick < 250*time.Millisecond {
		tick = 250 * time.Millisecond
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := m.check(ctx, m.r.now()); err != nil {
			m.r.Log.Error(err, "liveness check")
		}
	}
}

func (m *livenessMonitor) check(ctx context.Context, now time.Time) error {
	r := m.r
	// Read-only lists from the cache, twice a second or so: no deep copies.
	var leases coordinationv1.LeaseList
	if err := r.Client.List(ctx, &leases, client.MatchingLabelsSelector{Selector: GatewayPodSelector()}, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing the liveness leases: %w", err)
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.MatchingLabelsSelector{Selector: GatewayPodSelector()}, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing the gateway pods: %w", err)
	}
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing the nodes: %w", err)
	}
	views, lastSeen := m.observe(leases.Items, pods.Items, now)
	if !m.leading() {
		return nil // a standby only keeps its observations current
	}
	failed, held := FailedNodes(views, workerCount(nodes.Items))
	if key := fmt.Sprint(held); len(held) > 0 && key != m.heldLogged {
		r.Log.Info("WARNING: the gateway pods of more than half of the worker nodes stopped renewing their liveness leases at once; moving none (the control plane or the operator's connection is the likelier cause)", "nodes", held)
	}
	m.heldLogged = fmt.Sprint(held)
	alive := map[string]bool{}
	for _, v := range views {
		if !v.Silent {
			alive[v.Node] = true
		}
	}
	back := readyAgain(nodes.Items)
	for _, n := range r.declareFailed(failed, alive, back, lastSeen, now) {
		m.wakeGatewaysOn(ctx, n)
	}
	return nil
}

// observe notes when each lease last changed (a lease's renewals are judged by this
// operator's clock, never the pod's) and returns, per judged pod, its node and whether
// its lease fell silent, with the last renewal seen per node.
func (m *livenessMonitor) observe(leases []coordinationv1.Lease, pods []corev1.Pod, now time.Time) ([]LeaseView, map[string]time.Time) {
	byName := map[types.NamespacedName]*corev1.Pod{}
	for i := range pods {
		p := &pods[i]
		byName[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = p
	}
	if m.seen == nil {
		m.seen = map[types.UID]leaseSeen{}
	}
	present := map[types.UID]bool{}
	var views []LeaseView
	lastSeen := map[string]time.Time{}
	for i := range leases {
		l := &leases[i]
		present[l.UID] = true
		s, ok := m.seen[l.UID]
		if !ok || s.version != l.ResourceVersion {
			s = leaseSeen{version: l.ResourceVersion, at: now}
			m.seen[l.UID] = s
		}
		if l.Spec.HolderIdentity == nil {
			continue // no pod has renewed it yet
		}
		p := byName[types.NamespacedName{Namespace: l.Namespace, Name: *l.Spec.HolderIdentity}]
		if p == nil || p.Spec.NodeName == "" || !p.DeletionTimestamp.IsZero() || !podReady(p) {
			// Nothing to judge: the pod is gone, not placed, going, or its kubelet
			// already reports it not ready (a live kubelet, a pod problem).
			continue
		}
		silent := now.Sub(s.at) > m.r.Config.GatewayLivenessTimeout
		views = append(views, LeaseView{Node: p.Spec.NodeName, Silent: silent})
		if s.at.After(lastSeen[p.Spec.NodeName]) {
			lastSeen[p.Spec.NodeName] = s.at
		}
	}
	for uid := range m.seen {
		if !present[uid] {
			delete(m.seen, uid)
		}
	}
	return views, lastSeen
}

// workerCount counts the nodes outside the control plane.
func workerCount(nodes []corev1.Node) int {
	n := 0
	for i := range nodes {
		if !controlPlane(&nodes[i]) {
			n++
		}
	}
	return n
}

// readyAgain is when each node's Ready condition last turned True: a declared node whose
// kubelet is heard again after the declaration (the node controller had given up on it,
// and the kubelet reported back, a healed partition).
func readyAgain(nodes []corev1.Node) map[string]time.Time {
	back := map[string]time.Time{}
	for i := range nodes {
		n := &nodes[i]
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				back[n.Name] = c.LastTransitionTime.Time
			}
		}
	}
	return back
}

// declareFailed records the nodes just found failed and forgets those whose quarantine
// ended, whose gateway pods renew again, or that turned Ready after they were declared
// (readySince: when each Ready node's condition last turned True); it returns the newly
// declared ones.
func (r *Reconciler) declareFailed(failed []string, alive map[string]bool, readySince, lastSeen map[string]time.Time, now time.Time) []string {
	r.novaMu.Lock()
	defer r.novaMu.Unlock()
	if r.failedNodes == nil {
		r.failedNodes = map[string]nodeFailure{}
	}
	for n, f := range r.failedNodes {
		if t, ok := readySince[n]; alive[n] || now.Sub(f.at) > livenessQuarantine || ok && t.After(f.at) {
			delete(r.failedNodes, n)
		}
	}
	var fresh []string
	for _, n := range failed {
		if _, ok := r.failedNodes[n]; ok {
			continue
		}
		r.failedNodes[n] = nodeFailure{since: lastSeen[n], at: now}
		fresh = append(fresh, n)
	}
	return fresh
}

// nodeFailed reports whether the node is declared failed, and since when its gateway
// pods are silent.
func (r *Reconciler) nodeFailed(node string) (time.Time, bool) {
	r.novaMu.Lock()
	defer r.novaMu.Unlock()
	f, ok := r.failedNodes[node]
	return f.since, ok
}

// failedNodeSet is the nodes declared failed, for placement to avoid.
func (r *Reconciler) failedNodeSet() map[string]bool {
	r.novaMu.Lock()
	defer r.novaMu.Unlock()
	out := map[string]bool{}
	for n := range r.failedNodes {
		out[n] = true
	}
	return out
}

// wakeGatewaysOn enqueues every gateway pinned to the node.
func (m *livenessMonitor) wakeGatewaysOn(ctx context.Context, node string) {
	r := m.r
	var names []string
	for _, kind := range v1alpha1.GatewayKinds {
		gws, err := r.listGateways(ctx, kind)
		if err != nil {
			r.Log.Error(err, "listing gateways to move off a failed node", "node", node)
			continue
		}
		for _, g := range gws {
			if g.status.NodeName != node {
				continue
			}
			names = append(names, g.String())
			select {
			case r.wake[kind] <- event.GenericEvent{Object: g.obj}:
			default:
				// The queue is full; the node watch or the resync reconciles it.
			}
		}
	}
	r.Log.Info("node declared failed: its gateway pods stopped renewing their liveness leases while the API server still calls them ready; moving its gateways",
		"node", node, "timeout", r.Config.GatewayLivenessTimeout.String(), "gateways", names)
}

// podReady: the API server's last word on the pod is Ready.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
