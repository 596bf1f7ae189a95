package gateway

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/conditions"
	"bnerd.net/vpn-operator/internal/controller/skeleton"
	"bnerd.net/vpn-operator/internal/operatorconfig"
	"bnerd.net/vpn-operator/internal/render"
)

// HealthConditionTypes observe the running gateway instead of converging anything: the
// pod as its kubelet reports it and the tunnels as its status agent reports them. Ready
// summarises them after the phase conditions (v1alpha1.GatewayPhaseConditionTypes).
var HealthConditionTypes = []string{v1alpha1.ConditionPodReady, v1alpha1.ConditionTunnelsUp}

// ObservationConditionTypes are every condition observe writes: the health conditions,
// and PodUpToDate (where the gateway stands in a paced restart), which does not feed
// Ready: a gateway waiting for its turn keeps its running pod.
var ObservationConditionTypes = append(slices.Clone(HealthConditionTypes), v1alpha1.ConditionPodUpToDate)

// startingUp are the False reasons every new or moved gateway passes through while its
// pod starts (and Ready with them): their Events are Normal, not Warnings. A pod that
// stays there is visible in the condition, and the chart's pod-not-ready alert pages on it.
var startingUp = map[string]bool{v1alpha1.ReasonPodNotFound: true, v1alpha1.ReasonPodPending: true,
	// A paced restart waiting or under way is progress, not a failure.
	v1alpha1.ReasonRolloutWaiting: true, v1alpha1.ReasonRolling: true, v1alpha1.ReasonRolloutHalted: true}

// PendingRecheck is how often a Pending gateway pod is looked at again. A sandbox the
// CNI plugins cannot set up (the host-device plugin not finding the port's interface on
// a wrong node) shows only in the pod's Events, and the pod's own status does not
// change while the kubelet retries, so no watch event would report it.
const PendingRecheck = 15 * time.Second

// observe reads the gateway's pod and its status agent's report and records PodReady,
// TunnelsUp and status.tunnelSummary. It returns when the gateway should be looked at
// again even if nothing changes (0: only when something changes): when the agent's
// report goes stale, or while the pod is Pending.
func (r *Reconciler) observe(ctx context.Context, g *gateway) (time.Duration, error) {
	pod, terminating, err := r.currentPod(ctx, g)
	if err != nil {
		return 0, fmt.Errorf("listing the gateway's pods: %w", err)
	}
	next := r.ensurePodReady(ctx, g, pod, terminating)
	if d := r.ensureTunnelsUp(g, pod); d > 0 && (next == 0 || d < next) {
		next = d
	}
	d, err := r.ensurePodUpToDate(ctx, g)
	if d > 0 && (next == 0 || d < next) {
		next = d
	}
	return next, err
}

func (r *Reconciler) now() time.Time {
	if r.Clock != nil {
		return r.Clock()
	}
	return time.Now()
}

func (r *Reconciler) staleAfter() time.Duration {
	if r.Config.StatusAgentStaleAfter > 0 {
		return r.Config.StatusAgentStaleAfter
	}
	return operatorconfig.DefaultStatusAgentStaleAfter
}

// currentPod is the newest pod of the gateway's Deployment that is not being deleted,
// and the name of a terminating one when there is no other.
func (r *Reconciler) currentPod(ctx context.Context, g *gateway) (*corev1.Pod, string, error) {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(g.obj.GetNamespace()), client.MatchingLabels(render.SelectorLabels(g.ref()))); err != nil {
		return nil, "", err
	}
	var cur *corev1.Pod
	terminating := ""
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			terminating = p.Name
			continue
		}
		if cur == nil || cur.CreationTimestamp.Before(&p.CreationTimestamp) ||
			cur.CreationTimestamp.Equal(&p.CreationTimestamp) && p.Name > cur.Name {
			cur = p
		}
	}
	return cur, terminating, nil
}

// ensurePodReady records the pod as the kubelet reports it. It returns PendingRecheck
// while the pod is Pending, 0 otherwise.
func (r *Reconciler) ensurePodReady(ctx context.Context, g *gateway, pod *corev1.Pod, terminating string) time.Duration {
	const cond = v1alpha1.ConditionPodReady
	dep := render.DeploymentName(g.obj.GetName())
	if pod == nil {
		msg := fmt.Sprintf("no pod of Deployment %s exists", dep)
		if terminating != "" {
			msg += fmt.Sprintf(" (pod %s is terminating)", terminating)
		}
		r.condFalse(g, cond, v1alpha1.ReasonPodNotFound, msg)
		return 0
	}
	node := g.status.NodeName
	if node != "" && pod.Spec.NodeName != "" && pod.Spec.NodeName != node {
		r.condFalse(g, cond, v1alpha1.ReasonPodOnWrongNode, fmt.Sprintf(
			"pod %s runs on node %s, but the gateway's port is attached to node %s's server: the pod cannot get its second interface there",
			pod.Name, pod.Spec.NodeName, node))
		return 0
	}
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		r.condFalse(g, cond, v1alpha1.ReasonPodNotReady, fmt.Sprintf("pod %s has %s: %s", pod.Name, strings.ToLower(string(pod.Status.Phase)), orNoDetail(joinNonEmpty(pod.Status.Reason, pod.Status.Message))))
		return 0
	}
	if cs := crashLooping(pod); cs != nil {
		r.condFalse(g, cond, v1alpha1.ReasonPodCrashLooping, fmt.Sprintf("pod %s: container %s is in CrashLoopBackOff after %d restarts%s",
			pod.Name, cs.Name, cs.RestartCount, lastExit(cs)))
		return 0
	}
	if pod.Status.Phase == corev1.PodPending || pod.Status.Phase == "" {
		if pod.Spec.NodeName != "" {
			if msg, ok := r.sandboxFailure(ctx, pod); ok {
				r.condFalse(g, cond, v1alpha1.ReasonPodNetworkFailed, msg)
				return PendingRecheck
			}
		}
		detail := pendingDetail(pod)
		if pod.Spec.NodeName == "" && pod.Spec.SchedulerName == render.SchedulerName {
			detail = waitingForBinding(g, pod, terminating)
		}
		r.condFalse(g, cond, v1alpha1.ReasonPodPending, fmt.Sprintf("pod %s is Pending: %s", pod.Name, detail))
		return PendingRecheck
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			r.condTrue(g, cond, v1alpha1.ReasonPodReady, fmt.Sprintf("pod %s runs on node %s and is ready", pod.Name, pod.Spec.NodeName))
			return 0
		}
	}
	r.condFalse(g, cond, v1alpha1.ReasonPodNotReady, fmt.Sprintf("pod %s runs but is not ready: %s", pod.Name, notReadyDetail(pod)))
	return 0
}

// crashLooping is the first container waiting in CrashLoopBackOff.
func crashLooping(pod *corev1.Pod) *corev1.ContainerStatus {
	all := append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
	for i := range all {
		if w := all[i].State.Waiting; w != nil && w.Reason == "CrashLoopBackOff" {
			return &all[i]
		}
	}
	return nil
}

func lastExit(cs *corev1.ContainerStatus) string {
	t := cs.LastTerminationState.Terminated
	if t == nil {
		return ""
	}
	s := fmt.Sprintf("; it last exited with code %d", t.ExitCode)
	if d := joinNonEmpty(t.Reason, firstLine(t.Message)); d != "" {
		s += " (" + d + ")"
	}
	return s
}

// pendingDetail says why a Pending pod waits: the scheduler's message, or the first
// container waiting for something other than its turn.
func pendingDetail(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
			return "not scheduled: " + orNoDetail(joinNonEmpty(c.Reason, c.Message))
		}
	}
	if d := waitingDetail(pod); d != "" {
		return d
	}
	if pod.Spec.NodeName != "" {
		return "its sandbox and containers are being created on node " + pod.Spec.NodeName
	}
	return "waiting to be scheduled"
}

func notReadyDetail(pod *corev1.Pod) string {
	if d := waitingDetail(pod); d != "" {
		return d
	}
	for _, c := range pod.Status.Conditions {
		if (c.Type == corev1.ContainersReady || c.Type == corev1.PodReady) && c.Status != corev1.ConditionTrue && c.Message != "" {
			return c.Message
		}
	}
	return "no further detail"
}

// waitingDetail names the first container waiting for a reason worth telling (not the
// ordinary ContainerCreating / PodInitializing).
func waitingDetail(pod *corev1.Pod) string {
	all := append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
	for _, cs := range all {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" {
			return fmt.Sprintf("container %s is waiting: %s", cs.Name, orNoDetail(joinNonEmpty(w.Reason, firstLine(w.Message))))
		}
	}
	return ""
}

// sandboxIDs are the container and sandbox IDs in the kubelet's messages: they change
// with every retry and would make every recheck a new message.
var sandboxIDs = regexp.MustCompile(`\b[0-9a-f]{32,64}\b`)

// sandboxFailure reads the pod's Warning events for a sandbox the CNI plugins could not
// set up: the kubelet reports it only there (FailedCreatePodSandBox), the pod's status
// stays Pending/ContainerCreating. The read goes around the cache (Events are not
// cached) and happens only for a scheduled Pending pod.
func (r *Reconciler) sandboxFailure(ctx context.Context, pod *corev1.Pod) (string, bool) {
	reader := r.apiReader()
	var events corev1.EventList
	if err := reader.List(ctx, &events, client.InNamespace(pod.Namespace), client.MatchingFields{"involvedObject.uid": string(pod.UID)}); err != nil {
		if !apierrors.IsForbidden(err) {
			r.Log.V(1).Info("reading the gateway pod's events", "pod", pod.Namespace+"/"+pod.Name, "error", err.Error())
		}
		return "", false
	}
	var newest *corev1.Event
	for i := range events.Items {
		e := &events.Items[i]
		if e.Type != corev1.EventTypeWarning || e.Reason != "FailedCreatePodSandBox" {
			continue
		}
		if newest == nil || eventTime(newest).Before(eventTime(e)) {
			newest = e
		}
	}
	if newest == nil {
		return "", false
	}
	text := sandboxIDs.ReplaceAllString(newest.Message, "<id>")
	if i := strings.Index(text, "failed to find host device"); i >= 0 {
		return fmt.Sprintf("pod %s cannot start on node %s: the host-device plugin does not find the port's interface (MAC %s) there: %s. The port is attached to another server than this node's: check PortAttached and the pod's node",
			pod.Name, pod.Spec.NodeName, orText(podPortMAC(pod), "unknown"), firstLine(text[i:])), true
	}
	return fmt.Sprintf("pod %s cannot start on node %s: its network sandbox is not created: %s", pod.Name, pod.Spec.NodeName, firstLine(text)), true
}

func podPortMAC(pod *corev1.Pod) string { return pod.Annotations[render.AnnotationPortMAC] }

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// agentStarted is when the pod's status-agent container started, nil unless it runs.
func agentStarted(pod *corev1.Pod) *metav1.Time {
	if pod == nil {
		return nil
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == render.ContainerStatus && cs.State.Running != nil {
			t := cs.State.Running.StartedAt
			return &t
		}
	}
	return nil
}

// ensureTunnelsUp records the tunnels as the status agent of the current pod reports
// them. A report is current only while a status agent runs, it was written since that
// agent started (its kubelet and the agent share the node's clock), and its heartbeat
// is younger than the stale-after time; otherwise TunnelsUp is Unknown and
// status.tunnelSummary is "?/<tunnels>". It returns the time until a current report
// goes stale (0 when it is not current).
func (r *Reconciler) ensureTunnelsUp(g *gateway, pod *corev1.Pod) time.Duration {
	const cond = v1alpha1.ConditionTunnelsUp
	st := g.status
	total := len(g.remotes())
	st.TunnelSummary = fmt.Sprintf("?/%d", total)
	last := ""
	if st.TunnelsReady != "" && st.TunnelsObservedTime != nil {
		last = fmt.Sprintf("; its last report (%s up at %s) is not current", st.TunnelsReady, st.TunnelsObservedTime.UTC().Format(time.RFC3339))
	}
	started := agentStarted(pod)
	hb := st.TunnelsObservedTime
	switch {
	case pod == nil:
		r.setCond(g, cond, metav1.ConditionUnknown, v1alpha1.ReasonTunnelsNotReported, "no gateway pod runs, so nothing observes the tunnels"+last)
		return 0
	case started == nil:
		r.setCond(g, cond, metav1.ConditionUnknown, v1alpha1.ReasonTunnelsNotReported,
			fmt.Sprintf("container %s of pod %s is not running, so nothing observes the tunnels%s", render.ContainerStatus, pod.Name, last))
		return 0
	case hb == nil || hb.Before(started):
		r.setCond(g, cond, metav1.ConditionUnknown, v1alpha1.ReasonTunnelsNotReported,
			fmt.Sprintf("the status agent of pod %s (started %s) has not reported yet%s", pod.Name, started.UTC().Format(time.RFC3339), last))
		return 0
	}
	stale := r.staleAfter()
	age := r.now().Sub(hb.Time)
	if age > stale {
		r.setCond(g, cond, metav1.ConditionUnknown, v1alpha1.ReasonStatusAgentSilent,
			fmt.Sprintf("the status agent of pod %s last reported at %s, more than %s ago%s", pod.Name, hb.UTC().Format(time.RFC3339), stale, last))
		return 0
	}
	up, down := tunnelsFromReport(g, st.Tunnels)
	st.TunnelSummary = fmt.Sprintf("%d/%d", up, total)
	if len(down) == 0 {
		r.condTrue(g, cond, v1alpha1.ReasonTunnelsUp, fmt.Sprintf("%d/%d tunnels up", up, total))
	} else {
		r.condFalse(g, cond, v1alpha1.ReasonTunnelsDown, fmt.Sprintf("%d/%d tunnels up; not up: %s", up, total, strings.Join(down, "; ")))
	}
	// Look again just after the report would go stale.
	return stale - age + time.Second
}

// tunnelsFromReport counts the gateway's tunnels (WireGuard: peers) the report has Up
// and describes the others with their state, since when, and why.
func tunnelsFromReport(g *gateway, report []v1alpha1.TunnelState) (int, []string) {
	byName := map[string]v1alpha1.TunnelState{}
	for _, t := range report {
		byName[t.Name] = t
	}
	up := 0
	var down []string
	for _, t := range g.remotes() {
		s, ok := byName[t.name]
		switch {
		case !ok:
			down = append(down, t.name+" not reported yet")
		case s.State == "Up":
			up++
		default:
			d := t.name + " " + s.State
			if s.LastTransitionTime != nil {
				d += " since " + s.LastTransitionTime.UTC().Format(time.RFC3339)
			}
			switch {
			case s.Reason != "" && s.Message != "":
				d += " (" + s.Reason + ": " + s.Message + ")"
			case s.Reason != "":
				d += " (" + s.Reason + ")"
			case s.Message != "":
				d += " (" + s.Message + ")"
			}
			down = append(down, d)
		}
	}
	sort.Strings(down)
	return up, down
}

// summarize derives Ready: the first phase condition that is not True blocks it;
// then the pod and the tunnels (a silent status agent makes Ready Unknown, like a node
// whose kubelet stopped reporting); True only when the gateway carries traffic on every
// tunnel.
func (r *Reconciler) summarize(g *gateway) {
	conds := g.status.Conditions
	switch blocking, health := conditions.Summary(conds, skeleton.Conditions(r.phases(g))...), conditions.Summary(conds, HealthConditionTypes...); {
	case blocking != nil:
		r.setCond(g, v1alpha1.ConditionReady, metav1.ConditionFalse, blocking.Reason, blocking.Type+": "+blocking.Message)
	case health != nil:
		status := metav1.ConditionFalse
		if health.Status == metav1.ConditionUnknown {
			status = metav1.ConditionUnknown
		}
		r.setCond(g, v1alpha1.ConditionReady, status, health.Reason,
			fmt.Sprintf("the OpenStack and Kubernetes objects are converged, but %s is %s: %s", health.Type, health.Status, health.Message))
	default:
		r.setCond(g, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReconciled,
			"every phase is converged, the gateway pod is ready and every tunnel is up")
	}
	g.status.ObservedGeneration = g.obj.GetGeneration()
}

// observationsOnly reports whether two statuses differ only in what observe and
// summarize write (PodReady, TunnelsUp, Ready, tunnelSummary) and in the status agent's
// fields: a write of those in between changes no decision a phase made.
func observationsOnly(a, b *v1alpha1.GatewayStatus) bool {
	strip := func(s *v1alpha1.GatewayStatus) v1alpha1.GatewayStatus {
		c := s.DeepCopy().WithoutAgentFields()
		c.TunnelSummary = ""
		var kept []metav1.Condition
		for _, cd := range c.Conditions {
			if cd.Type != v1alpha1.ConditionReady && !slices.Contains(ObservationConditionTypes, cd.Type) {
				kept = append(kept, cd)
			}
		}
		c.Conditions = kept
		return c
	}
	return equality.Semantic.DeepEqual(strip(a), strip(b))
}

func joinNonEmpty(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, ": ")
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

func orNoDetail(s string) string { return orText(s, "no further detail") }

func orText(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// healthReconciler keeps one kind's PodReady, TunnelsUp and Ready current between the
// reconciles of the phases: on every change of the gateway's pod, of the status agent's
// report, and when that report goes stale. It reads only the manager's cache (plus a
// Pending pod's Events) and makes no OpenStack call, so a tunnel flap or a pod restart
// costs no reconcile of the OpenStack phases.
type healthReconciler struct {
	r    *Reconciler
	kind string
}

func (h healthReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	res, err := h.reconcile(ctx, req)
	if h.r.ObserveHealth != nil {
		h.r.ObserveHealth(h.kind, req.NamespacedName, err)
	}
	return res, err
}

func (h healthReconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r := h.r
	obj := v1alpha1.NewGateway(h.kind)
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	g, err := viewOf(obj)
	if err != nil {
		return ctrl.Result{}, err
	}
	// The phases' reconcile observes a gateway itself while it creates, changes or
	// deletes it: a gateway it has not taken up yet (no finalizer), one it is deleting,
	// or one whose spec it has not reconciled yet is its alone. Ready for a newer
	// generation is never written from an older one's phases.
	if !obj.GetDeletionTimestamp().IsZero() || !controllerutil.ContainsFinalizer(obj, v1alpha1.FinalizerGateway) ||
		g.status.ObservedGeneration != obj.GetGeneration() {
		return ctrl.Result{}, nil
	}
	ctx = logr.NewContext(ctx, r.Log.WithValues("kind", h.kind, "gateway", req.String()))
	next, err := r.observe(ctx, g)
	if err != nil {
		return ctrl.Result{}, err
	}
	r.summarize(g)
	if err := r.persist(ctx, g); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

// healthChanged passes the gateway events the observations depend on: the informer's
// initial list (an operator that starts has to schedule every report's stale check),
// a change of the status agent's report, and a heartbeat while TunnelsUp is not known
// (a silent agent is back). A heartbeat on a current report does not pass: the stale
// check requeued at the report's deadline sees it. Spec changes are the phases'
// reconcile's, which observes too; a change of PodReady or TunnelsUp it wrote passes.
var healthChanged = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return true },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := statusOf(e.ObjectOld), statusOf(e.ObjectNew)
		if o.TunnelsReady != n.TunnelsReady || !equality.Semantic.DeepEqual(o.Tunnels, n.Tunnels) {
			return true
		}
		// An observation written by the phases' reconcile, which observes too: it may
		// have been computed from a report older than the one it was written over (its
		// status write retries on top of a status-agent write), so look again. Looking
		// again writes nothing when it was current; for a restart the phases' reconcile
		// just admitted, it schedules the look at the restart's deadline.
		for _, t := range ObservationConditionTypes {
			oc, nc := conditions.Get(o.Conditions, t), conditions.Get(n.Conditions, t)
			if (oc == nil) != (nc == nil) || oc != nil && (oc.Status != nc.Status || oc.Reason != nc.Reason || oc.Message != nc.Message) {
				return true
			}
		}
		if equality.Semantic.DeepEqual(o.TunnelsObservedTime, n.TunnelsObservedTime) {
			return false
		}
		c := conditions.Get(n.Conditions, v1alpha1.ConditionTunnelsUp)
		return c == nil || c.Status == metav1.ConditionUnknown
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// mapPod wakes the gateway of one kind whose pod changed (by the pod's labels).
func mapPod(kind string) handler.MapFunc {
	return func(_ context.Context, o client.Object) []reconcile.Request {
		l := o.GetLabels()
		if l[render.LabelName] != render.AppName || l[render.LabelKind] != strings.ToLower(kind) || l[render.LabelInstance] == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: l[render.LabelInstance]}}}
	}
}

// GatewayPodSelector selects every gateway pod: the operator's pod cache holds only these.
func GatewayPodSelector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{render.LabelName: render.AppName})
}
