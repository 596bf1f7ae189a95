package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/conditions"
	"bnerd.net/vpn-operator/internal/operatorconfig"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/rollout"
)

// A new rendering of a gateway's pod that comes from the operator (new images, new pod
// settings, a new release's rendering) restarts the pod and drops its clients' traffic
// for the restart. Such restarts are paced across the estate (internal/rollout): one
// canary, then at most the budget at once, each waited for until its pod is ready and
// the tunnels that were up before it are up again; a restart that does not come back
// within the timeout halts the rest, which keep their old pods. Not paced: a gateway
// whose pod must move (another node, another port), one whose pod is not ready anyway,
// and the first rendering of a new gateway.

// newGate builds the reconciler's rollout gate from the configuration.
func (r *Reconciler) newGate() *rollout.Gate {
	budget, err := rollout.ParseBudget(r.Config.GatewayRolloutBudget)
	if err != nil {
		// The configuration is validated where it is loaded; a Config built in Go
		// without the setting takes the default.
		budget, _ = rollout.ParseBudget(operatorconfig.DefaultGatewayRolloutBudget)
	}
	timeout := r.Config.GatewayRolloutTimeout
	if timeout <= 0 {
		timeout = operatorconfig.DefaultGatewayRolloutTimeout
	}
	return &rollout.Gate{Budget: budget, Timeout: timeout, Now: r.now, Wake: r.wakeForRollout}
}

// wakeForRollout enqueues a gateway whose paced restart may go now.
func (r *Reconciler) wakeForRollout(gw rollout.Gateway) {
	obj := v1alpha1.NewGateway(gw.Kind)
	obj.SetNamespace(gw.Key.Namespace)
	obj.SetName(gw.Key.Name)
	select {
	case r.wake[gw.Kind] <- event.GenericEvent{Object: obj}:
	default:
		// The queue is full; the resync reconciles it.
	}
}

// resumeRollout hands the gate the restarts a previous operator process started and did
// not see complete (their Deployments carry render.AnnotationRolloutStarted), once,
// before the gate decides anything: they hold their slots, and their deadlines run from
// when they were started.
func (r *Reconciler) resumeRollout(ctx context.Context) error {
	if r.gate.Resumed() {
		return nil
	}
	r.resumeMu.Lock()
	defer r.resumeMu.Unlock()
	if r.gate.Resumed() {
		return nil
	}
	var list appsv1.DeploymentList
	if err := r.Client.List(ctx, &list, client.MatchingLabels{render.LabelManagedBy: render.ManagedBy}); err != nil {
		return fmt.Errorf("listing gateway Deployments for restarts in progress: %w", err)
	}
	rolling := map[rollout.Gateway]time.Time{}
	for i := range list.Items {
		d := &list.Items[i]
		at, ok := d.Annotations[render.AnnotationRolloutStarted]
		owner := metav1.GetControllerOf(d)
		if !ok || owner == nil || (owner.Kind != v1alpha1.KindIPsecGateway && owner.Kind != v1alpha1.KindVPNGateway) {
			continue
		}
		since, err := time.Parse(time.RFC3339, at)
		if err != nil {
			since = r.now() // unreadable: its deadline runs from now
		}
		rolling[rollout.Gateway{UID: owner.UID, Kind: owner.Kind, Key: types.NamespacedName{Namespace: d.Namespace, Name: owner.Name}}] = since
	}
	r.gate.Resume(rolling)
	return nil
}

// paceRestart decides whether applying a new rendering to the live Deployment waits for
// the rollout gate (true: leave live as it is). An admitted restart is marked on live,
// which the caller writes with the rendering.
func (r *Reconciler) paceRestart(ctx context.Context, g *gateway, live *appsv1.Deployment, stored appsv1.DeploymentSpec, drift []string) (bool, error) {
	uid := g.obj.GetUID()
	log := logr.FromContextOrDiscard(ctx)
	podReady := conditions.Get(g.status.Conditions, v1alpha1.ConditionPodReady)
	switch {
	case !render.RestartsPod(drift):
		r.gate.Withdraw(uid)
		return false, nil
	case render.Moves(stored, live.Spec):
		// The old pod cannot carry the tunnels where the port now is: no reason to wait.
		r.gate.Withdraw(uid)
		return false, nil
	case podReady == nil || podReady.Status != metav1.ConditionTrue:
		// Nothing runs that a restart would interrupt.
		r.gate.Withdraw(uid)
		return false, nil
	case r.changedWhileWaiting(uid, live):
		// Someone changed the Deployment while it waited: the old rendering is not known
		// to this process, so the new one goes on now (and reverts the change).
		r.gate.Withdraw(uid)
		log.Info("the gateway Deployment changed while its restart waited for a rollout slot; applying the new rendering now", "deployment", live.Name)
		r.event(g, metav1.ConditionFalse, "SecurityDriftReverted", "Deployment %s changed while its restart waited for a rollout slot: the current rendering is applied now", live.Name)
		return false, nil
	}
	if err := r.resumeRollout(ctx); err != nil {
		return false, err
	}
	d := r.gate.Admit(rollout.Gateway{UID: uid, Kind: g.kind, Key: client.ObjectKeyFromObject(g.obj)})
	if !d.Admitted {
		return true, nil
	}
	r.forgetWaiting(uid)
	if live.Annotations == nil {
		live.Annotations = map[string]string{}
	}
	if _, ok := live.Annotations[render.AnnotationRolloutStarted]; !ok {
		live.Annotations[render.AnnotationRolloutStarted] = d.Since.UTC().Format(time.RFC3339)
		live.Annotations[render.AnnotationRolloutTunnels] = strconv.Itoa(tunnelsUpNow(g))
	}
	log.Info("restarting the gateway pod for the operator's new rendering", "deployment", live.Name, "slots", d.Slots)
	return false, nil
}

// changedWhileWaiting remembers the live Deployment spec a waiting gateway had when this
// process first made it wait, and reports whether it has changed since.
func (r *Reconciler) changedWhileWaiting(uid types.UID, live *appsv1.Deployment) bool {
	js, err := json.Marshal(live.Spec)
	if err != nil {
		return true
	}
	sum := sha256.Sum256(js)
	h := hex.EncodeToString(sum[:])
	r.storedMu.Lock()
	defer r.storedMu.Unlock()
	prev, ok := r.waitingSpec[uid]
	if !ok {
		r.waitingSpec[uid] = h
		return false
	}
	return prev != h
}

func (r *Reconciler) forgetWaiting(uid types.UID) {
	r.storedMu.Lock()
	delete(r.waitingSpec, uid)
	r.storedMu.Unlock()
}

// tunnelsUpNow is the number of tunnels the gateway's last observation had up (0 when it
// had no current report).
func tunnelsUpNow(g *gateway) int {
	up, _, _ := strings.Cut(g.status.TunnelSummary, "/")
	n, err := strconv.Atoi(up)
	if err != nil {
		return 0
	}
	return n
}

// completeRestart removes a paced restart's marks from the gateway's Deployment. It reads
// the Deployment whole first: the cached one has no pod template (withoutPodTemplate),
// and written back it would lose it. (An update, not a patch: the operator's role has no
// patch on Deployments.)
func (r *Reconciler) completeRestart(ctx context.Context, cached *appsv1.Deployment) error {
	dep, err := r.wholeDeployment(ctx, cached)
	if err != nil {
		return err
	}
	delete(dep.Annotations, render.AnnotationRolloutStarted)
	delete(dep.Annotations, render.AnnotationRolloutTunnels)
	if err := r.Client.Update(ctx, dep); err != nil {
		return fmt.Errorf("completing the restart of Deployment %s: %w", dep.Name, err)
	}
	return nil
}

// ensurePodUpToDate records where the gateway stands in a paced restart (PodUpToDate)
// and completes its restart when the new pod is ready and the tunnels that were up
// before are up again. It runs after the pod and the tunnels were observed. It returns
// when to look again (a restart's deadline), 0 for only on a change.
func (r *Reconciler) ensurePodUpToDate(ctx context.Context, g *gateway) (time.Duration, error) {
	const cond = v1alpha1.ConditionPodUpToDate
	tunnelsUp := tunnelsUpNow(g)
	uid := g.obj.GetUID()
	if err := r.resumeRollout(ctx); err != nil {
		return 0, err
	}
	r.gate.Known(uid)
	if since, overdue, ok := r.gate.Rolling(uid); ok {
		dep := &appsv1.Deployment{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: g.obj.GetNamespace(), Name: render.DeploymentName(g.obj.GetName())}, dep); err != nil {
			return 0, fmt.Errorf("reading the Deployment of a restart in progress: %w", client.IgnoreNotFound(err))
		}
		before, _ := strconv.Atoi(dep.Annotations[render.AnnotationRolloutTunnels])
		before = min(before, len(g.remotes()))
		podReady := conditions.Get(g.status.Conditions, v1alpha1.ConditionPodReady)
		ready := podReady != nil && podReady.Status == metav1.ConditionTrue
		// The Deployment controller has replaced the pod: it saw this rendering, and
		// every replica it runs is of it.
		replaced := dep.Status.ObservedGeneration >= dep.Generation && dep.Status.UpdatedReplicas >= 1 && dep.Status.Replicas == dep.Status.UpdatedReplicas
		if replaced && ready && tunnelsUp >= before {
			if err := r.completeRestart(ctx, dep); err != nil {
				return 0, err
			}
			r.gate.Back(uid)
			logr.FromContextOrDiscard(ctx).Info("the gateway is back after its paced restart", "deployment", dep.Name, "after", r.now().Sub(since).Round(time.Second).String())
			r.condTrue(g, cond, v1alpha1.ReasonPodUpToDate, fmt.Sprintf("the pod runs the current rendering; it restarted at %s and was back (ready, %d tunnels up) after %s",
				since.UTC().Format(time.RFC3339), tunnelsUp, r.now().Sub(since).Round(time.Second)))
			return 0, nil
		}
		state := fmt.Sprintf("Deployment replaced the pod: %v, pod ready: %v, tunnels up: %s of the %d up before", replaced, ready, strconv.Itoa(tunnelsUp), before)
		if overdue {
			if c := conditions.Get(g.status.Conditions, cond); c == nil || c.Reason != v1alpha1.ReasonRolloutNotBack {
				// The halt begins: the waiting gateways say so.
				r.gate.WakeWaiting()
			}
			logr.FromContextOrDiscard(ctx).Info("a gateway restarted for the operator's new rendering is not back; the rollout is halted", "deployment", dep.Name, "since", since)
			r.condFalse(g, cond, v1alpha1.ReasonRolloutNotBack, fmt.Sprintf("restarted at %s for the operator's new rendering and not back within %s (%s): the rollout of the other gateways is halted until it is",
				since.UTC().Format(time.RFC3339), r.gate.Timeout, state))
			return 0, nil
		}
		r.condFalse(g, cond, v1alpha1.ReasonRolling, fmt.Sprintf("restarting since %s for the operator's new rendering (%s)", since.UTC().Format(time.RFC3339), state))
		return since.Add(r.gate.Timeout).Sub(r.now()) + time.Second, nil
	}
	if ahead, slots, halted, ok := r.gate.Queue(uid); ok {
		if halted {
			r.condFalse(g, cond, v1alpha1.ReasonRolloutHalted, fmt.Sprintf(
				"a new rendering of the pod waits: the rollout is halted because a gateway restarted earlier did not come back within %s (the operator's log names it); the current pod keeps running", r.gate.Timeout))
		} else {
			r.condFalse(g, cond, v1alpha1.ReasonRolloutWaiting, fmt.Sprintf(
				"a new rendering of the pod waits for a rollout slot: %d gateways restart or wait ahead of it and %d may restart at once (one canary first); the current pod keeps running", ahead, slots))
		}
		return 0, nil
	}
	r.condTrue(g, cond, v1alpha1.ReasonPodUpToDate, "no restart of the pod waits or is in progress")
	return 0, nil
}
