// Package gateway reconciles IPsecGateways and VPNGateways: a /24 and virtual IPs, a
// dedicated Neutron port with its security group, floating IP and (for reverse
// exposures) routing, the port hot-attached to the pinned node's server, and the gateway
// pod with its configuration. Each phase is one ensure-function with one condition,
// run in order, its result persisted to status before the next phase depends on it.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/conditions"
	"bnerd.net/vpn-operator/internal/controller/namedwatch"
	"bnerd.net/vpn-operator/internal/controller/outcome"
	"bnerd.net/vpn-operator/internal/controller/skeleton"
	"bnerd.net/vpn-operator/internal/freshread"
	"bnerd.net/vpn-operator/internal/ipam"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/operatorconfig"
	"bnerd.net/vpn-operator/internal/rollout"
	"bnerd.net/vpn-operator/internal/statuswrite"
)

// Deps are the reconciler's collaborators. Zero-valued optional fields are filled by
// SetupWithManager from the manager. The first seven mean what they mean in the
// ClusterLink reconciler's Deps; the rest are the gateways' own.
type Deps struct {
	// Client reads (from the cache) and writes the API server. Required.
	Client client.Client
	// APIReader reads around the cache; used once to rebuild the allocations from every
	// gateway's status. Default: the manager's API reader.
	APIReader client.Reader
	// OpenStack is the operator's own client set (Networking and Compute). Required.
	OpenStack *openstack.Clients
	// Config is the operator configuration.
	Config operatorconfig.Config
	// Recorder emits Events (events.k8s.io). Default: the manager's recorder.
	Recorder events.EventRecorder
	// Clock stamps conditions; nil is time.Now.
	Clock conditions.Clock
	// SkipNameValidation lets several managers in one process (tests) register the
	// same controller names.
	SkipNameValidation bool

	// Log is the base logger. Default: the manager's logger.
	Log logr.Logger
	// PortWait paces waiting for Nova to finish attaching or detaching the port: the
	// gateway is reconciled again every Interval (default 2 s) until the port shows the
	// result, and the request is sent to Nova again when Timeout (default 2 minutes)
	// passed without one. No reconcile waits: the worker is free in between.
	PortWait openstack.WaitOpts
	// Begin and Observe, when set, are called before and after every reconcile
	// (benchmarks and tests count reconciles and busy workers with them).
	Begin   func(kind string, key types.NamespacedName)
	Observe func(kind string, key types.NamespacedName, err error)
	// ObserveHealth, when set, is called after every reconcile of the health
	// controllers (PodReady, TunnelsUp).
	ObserveHealth func(kind string, key types.NamespacedName, err error)
}

// Reconciler reconciles both gateway kinds.
type Reconciler struct {
	Deps

	poolMu sync.Mutex
	pool   *ipam.ServiceCIDRPool

	resolveMu  sync.Mutex
	networkID  string
	externalID string
	routerID   string
	projectID  string
	// subnets caches subnet CIDRs by ID (they never change).
	subnets map[string]netip.Prefix
	// routerReads shares the operator router's reads among the gateways reconciling at
	// the same moment (gatewayRouter).
	routerReads freshread.Group[string, *openstack.Router]

	// nova remembers, per gateway UID, the attach or detach this process asked Nova
	// for and when, so a poll does not ask again while Nova works.
	novaMu sync.Mutex
	nova   map[types.UID]novaOp
	// notReadySeen: when this process first saw a node without a Ready transition time
	// not Ready (guarded by novaMu).
	notReadySeen map[string]time.Time
	// avoid: per gateway, the nodes a Nova attach failed on, and when (guarded by
	// novaMu).
	avoid map[types.UID]map[string]time.Time
	// placed: per gateway, the node this process last chose for it (guarded by novaMu);
	// a recorded node is trusted when it is this one (see trustedNode).
	placed map[types.UID]string
	// failedNodes: the nodes the liveness monitor declared failed (liveness.go; guarded
	// by novaMu).
	failedNodes map[string]nodeFailure

	// acted remembers the acted-on status values this process wrote lately, per gateway
	// (see actedOnWrittenByOthers).
	actedMu sync.Mutex
	acted   map[types.UID][]actedOnWrite

	backoff       map[string]*outcome.Backoff // per kind
	healthBackoff map[string]*outcome.Backoff // per kind, the health controllers'

	// secrets follows the Secrets the gateways name, metadata only (nil: not followed,
	// a test running the reconciler without a manager).
	secrets *namedwatch.Watcher

	// legacyDone remembers the gateways whose Secret of rendered keys (earlier
	// releases) this process has removed or found absent.
	legacyMu   sync.Mutex
	legacyDone map[types.UID]bool

	// storedMu guards stored: per gateway, its last rendered Deployment spec as the API
	// server stores it (from a server-side dry run), with the rendering's hash, so that
	// judging drift costs no request while neither changes (see applyDeployment).
	storedMu sync.Mutex
	stored   map[types.UID]storedRendering
	// waitingSpec: per gateway whose restart waits for the rollout gate, a hash of its
	// live Deployment spec when this process first made it wait (guarded by storedMu).
	waitingSpec map[types.UID]string

	// gate paces the restarts a new rendering of the operator's causes (rollout.go);
	// resumeMu serialises its one-time resumption from the Deployments.
	gate     *rollout.Gate
	resumeMu sync.Mutex

	// wake, per kind, carries gateways to reconcile now for something that happened to
	// another one (a /24 they wait for was released).
	wake map[string]chan event.GenericEvent

	// stores are the gateways' informer stores, read in place by eachGateway (nil: a
	// client other than the manager's; every read lists through it).
	stores gatewayStores

	// fresh remembers this process's status writes, so a reconcile from a cache that
	// does not show the last one yet waits a moment instead of working from it.
	fresh *statuswrite.Freshness
}

// New returns a reconciler; register it with SetupWithManager.
func New(deps Deps) *Reconciler {
	r := &Reconciler{Deps: deps, nova: map[types.UID]novaOp{}, backoff: map[string]*outcome.Backoff{}, healthBackoff: map[string]*outcome.Backoff{},
		legacyDone: map[types.UID]bool{}, stored: map[types.UID]storedRendering{}, waitingSpec: map[types.UID]string{}, wake: map[string]chan event.GenericEvent{}, fresh: statuswrite.NewFreshness()}
	for _, kind := range v1alpha1.GatewayKinds {
		r.backoff[kind] = outcome.NewBackoff(0, 0)
		r.healthBackoff[kind] = outcome.NewBackoff(0, 0)
		r.wake[kind] = make(chan event.GenericEvent, wakeBuffer)
	}
	r.gate = r.newGate()
	if r.PortWait.Interval <= 0 {
		r.PortWait.Interval = 2 * time.Second
	}
	if r.PortWait.Timeout <= 0 {
		r.PortWait.Timeout = 2 * time.Minute
	}
	return r
}

// kindReconciler binds the shared reconciler to one kind for controller-runtime.
type kindReconciler struct {
	r    *Reconciler
	kind string
}

func (k kindReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if k.r.Begin != nil {
		k.r.Begin(k.kind, req.NamespacedName)
	}
	res, err := k.r.result(ctx, k.kind, req)
	if k.r.Observe != nil {
		k.r.Observe(k.kind, req.NamespacedName, err)
	}
	return res, err
}

// result reconciles one gateway and turns the outcome into controller-runtime's answer
// (see outcome.Backoff.Result): refusals wait for a change or the resync, waits on Nova
// poll, transient failures back off.
func (r *Reconciler) result(ctx context.Context, kind string, req reconcile.Request) (ctrl.Result, error) {
	err := r.reconcile(ctx, kind, req.NamespacedName)
	if outcome.IsTerminal(err) {
		// Recorded in the condition (and an Event when it changed); one log line per
		// attempt, and attempts come only from changes and the resync.
		r.Log.Info("OpenStack refused a request; waiting for a change", "kind", kind, "gateway", req.String(), "error", err.Error())
	}
	return r.backoff[kind].Result(req, err, r.Config.ResyncInterval)
}

// phases are the steps of one gateway's reconcile, in order (see skeleton.Phase). Each
// builds on all before it: a phase that stops marks the conditions after it that no
// phase evaluated yet "waiting for" it (waiting), and Ready names the first one not
// True.
func (r *Reconciler) phases(g *gateway) []skeleton.Phase[*gateway] {
	return skeleton.BlockRest([]skeleton.Phase[*gateway]{
		{Cond: v1alpha1.ConditionValidated, Run: r.ensureValidated},
		// The key lives in its Secret, found again by name: nothing to record first. An
		// IPsec gateway runs it too, to remove a key left from its WireGuard past.
		{Cond: v1alpha1.ConditionWireGuardKeyReady, Run: r.ensureWireGuardKey, Unlisted: g.wg == nil},
		{Cond: v1alpha1.ConditionAllocated, Run: r.ensureAllocated, Record: true},
		{Cond: v1alpha1.ConditionPortReady, Run: r.ensurePort},
		{Cond: v1alpha1.ConditionSecurityGroupReady, Run: r.ensureSecurityGroup},
		{Cond: v1alpha1.ConditionFloatingIPReady, Run: r.ensureFloatingIP},
		{Cond: v1alpha1.ConditionRoutingReady, Run: r.ensureRouting},
		{Cond: v1alpha1.ConditionNodeSelected, Run: r.ensureNodeSelected, Record: true},
		{Cond: v1alpha1.ConditionPortAttached, Run: r.ensurePortAttached},
		{Cond: v1alpha1.ConditionWorkloadReady, Run: r.ensureWorkload},
	})
}

// waiting marks the conditions a stopped phase blocks, never evaluated, "waiting for"
// it: a new gateway's status lists every phase from its first write. No Event: nothing
// happened to them (and their first True is as quiet as from absent, skeleton.FirstTrue).
func (r *Reconciler) waiting(g *gateway, blocked string, next []string) {
	skeleton.MarkWaiting(conditions.Setter{Conditions: &g.status.Conditions, Generation: g.obj.GetGeneration(), Now: r.Clock}, blocked, next)
}

// reconcile runs the phases of one gateway (or its deletion). The error says how it
// ended: nil when converged, else classified by outcome.
func (r *Reconciler) reconcile(ctx context.Context, kind string, key types.NamespacedName) error {
	log := r.Log.WithValues("kind", kind, "gateway", key.String())
	ctx = logr.NewContext(ctx, log)
	obj := v1alpha1.NewGateway(kind)
	if err := r.Client.Get(ctx, key, obj); err != nil {
		return client.IgnoreNotFound(err)
	}
	g, err := viewOf(obj)
	if err != nil {
		return err
	}
	if r.statusWriter().Behind(obj) {
		return outcome.Wait(cacheCatchUp, "the cache does not show the last status write yet")
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		return r.finalize(ctx, g)
	}
	if added, err := skeleton.AddFinalizer(ctx, r.Client, obj, v1alpha1.FinalizerGateway); err != nil {
		return err
	} else if added {
		g.base = obj.DeepCopyObject().(client.Object)
	}

	runErr, perr := skeleton.Runner[*gateway]{Persist: r.persist, Waiting: r.waiting}.Run(ctx, g, r.phases(g))
	if perr != nil {
		return perr
	}
	// The pod and the tunnels are read whatever the phases did: a pod from before may
	// still run (or not) while a later phase fails.
	if _, err := r.observe(ctx, g); err != nil {
		runErr = errors.Join(runErr, err)
	}
	r.summarize(g)
	if err := r.persist(ctx, g); err != nil {
		return errors.Join(runErr, err)
	}
	if runErr == nil && g.recheck > 0 {
		return outcome.Wait(g.recheck, "looking again in %s: a node grace period or a key rotation's overlap ends", g.recheck.Round(time.Second))
	}
	return runErr
}

// setCond records a condition and, when it changed, an Event (sent once the status write
// records the change): a state change is news, a repeated one is not (a converged
// gateway emits nothing), and neither is a phase completing for the first time on the
// way to Ready (skeleton.FirstTrue): Ready=True announces the convergence.
func (r *Reconciler) setCond(g *gateway, condType string, status metav1.ConditionStatus, reason, message string) {
	// A copy: Set updates the condition in place, and a pointer into the slice would
	// compare the new condition with itself (no Event for any change but the first).
	var prev *metav1.Condition
	if c := conditions.Get(g.status.Conditions, condType); c != nil {
		cp := *c
		prev = &cp
	}
	s := conditions.Setter{Conditions: &g.status.Conditions, Generation: g.obj.GetGeneration(), Now: r.Clock}
	if !s.Set(condType, status, reason, message) {
		return
	}
	if prev != nil && prev.Status == status && prev.Reason == reason && prev.Message == message {
		return // only the observed generation moved
	}
	if condType != v1alpha1.ConditionReady && skeleton.FirstTrue(prev, status) {
		return
	}
	g.events.Transition(eventType(status, reason), reason, "Reconcile", "%s=%s: %s", condType, status, message)
}

// eventType: a Warning when something failed, Normal for progress (True, or Unknown
// while waiting on OpenStack).
func eventType(status metav1.ConditionStatus, reason string) string {
	if status == metav1.ConditionFalse && !startingUp[reason] {
		return corev1.EventTypeWarning
	}
	return corev1.EventTypeNormal
}

// event gathers the Event of something the reconcile did (see skeleton.Events).
func (r *Reconciler) event(g *gateway, status metav1.ConditionStatus, reason, format string, args ...any) {
	g.events.Add(eventType(status, reason), reason, "Reconcile", format, args...)
}

func (r *Reconciler) condTrue(g *gateway, condType, reason, message string) {
	r.setCond(g, condType, metav1.ConditionTrue, reason, message)
}

func (r *Reconciler) condFalse(g *gateway, condType, reason, message string) {
	r.setCond(g, condType, metav1.ConditionFalse, reason, message)
}

// condWaiting records a phase that waits on OpenStack to finish something it started.
func (r *Reconciler) condWaiting(g *gateway, condType, reason, message string) {
	r.setCond(g, condType, metav1.ConditionUnknown, reason, message)
}

// condFailed records a phase that failed with err, saying what happens next.
func (r *Reconciler) condFailed(g *gateway, condType, reason string, err error) {
	r.setCond(g, condType, metav1.ConditionFalse, reason, outcome.Describe(err))
}

// persist writes the operator's part of the status when it differs from what was last
// read or written: a server-side apply under the operator's field manager, guarded by
// the resourceVersion of that read. A status-agent write in between is no conflict
// (statuswrite retries on top of it), and neither is a write of the observations only
// (the health controller's PodReady, TunnelsUp and Ready): the write is rebased onto the
// fresh object with the observations read again. Any other change of the operator's
// own fields makes the write fail, and the retry starts from a fresh read instead of
// overwriting (an allocation is never silently lost or doubled). The Events gathered so
// far are sent when the status is on record (see skeleton.Events for a failed write).
func (r *Reconciler) persist(ctx context.Context, g *gateway) error {
	err := r.writeStatus(ctx, g)
	if err != nil {
		g.events.WriteFailed(r.Recorder, g.obj)
		return err
	}
	g.events.Emit(r.Recorder, g.obj)
	return nil
}

func (r *Reconciler) writeStatus(ctx context.Context, g *gateway) error {
	base := statusOf(g.base).WithoutAgentFields()
	cur := g.status.WithoutAgentFields()
	if equality.Semantic.DeepEqual(base, cur) {
		return nil
	}
	w := r.statusWriter()
	r.writingActedOn(g.obj.GetUID(), actedOnOf(g.status))
	err := w.Apply(ctx, g.obj, g.base)
	if apierrors.IsConflict(err) {
		rebased, rerr := r.rebase(ctx, g)
		if rerr != nil {
			return fmt.Errorf("writing status: %w (and rebasing it: %v)", err, rerr)
		}
		if rebased {
			err = w.Apply(ctx, g.obj, g.base)
		}
	}
	if err != nil {
		return fmt.Errorf("writing status: %w", err)
	}
	g.base = g.obj.DeepCopyObject().(client.Object)
	return nil
}

// cacheCatchUp is how soon a reconcile that found the cache behind tries again.
const cacheCatchUp = 50 * time.Millisecond

func (r *Reconciler) statusWriter() statuswrite.Writer {
	return statuswrite.Writer{Client: r.Client, Reader: r.APIReader, Manager: statuswrite.ManagerOperator, Exclude: v1alpha1.GatewayAgentStatusFields, Fresh: r.fresh}
}

// apiReader reads past the cache, from the API server, when the reconciler has a reader
// for that (Deps.APIReader), else through the client.
func (r *Reconciler) apiReader() client.Reader {
	if r.APIReader == nil {
		return r.Client
	}
	return r.APIReader
}

// rebase makes the fresh object the base of g's status write when the only change since
// g's read is of the observations: g keeps what its phases decided, and reads the pod
// and the report again onto it. false: something else changed, start over.
func (r *Reconciler) rebase(ctx context.Context, g *gateway) (bool, error) {
	reader := r.apiReader()
	fresh := v1alpha1.NewGateway(g.kind)
	if err := reader.Get(ctx, client.ObjectKeyFromObject(g.obj), fresh); err != nil {
		return false, err
	}
	if fresh.GetGeneration() != g.base.GetGeneration() || !observationsOnly(statusOf(g.base), statusOf(fresh)) {
		return false, nil
	}
	fs := statusOf(fresh)
	for _, t := range append([]string{v1alpha1.ConditionReady}, ObservationConditionTypes...) {
		conditions.Setter{Conditions: &g.status.Conditions}.Remove(t)
		if c := conditions.Get(fs.Conditions, t); c != nil {
			g.status.Conditions = append(g.status.Conditions, *c)
		}
	}
	g.status.TunnelSummary = fs.TunnelSummary
	g.status.Tunnels, g.status.TunnelsReady, g.status.TunnelsObservedTime = fs.Tunnels, fs.TunnelsReady, fs.TunnelsObservedTime
	g.base = fresh
	g.obj.SetResourceVersion(fresh.GetResourceVersion())
	if _, err := r.observe(ctx, g); err != nil {
		return false, err
	}
	r.summarize(g)
	return true, nil
}

func statusOf(obj client.Object) *v1alpha1.GatewayStatus {
	if g, ok := obj.(v1alpha1.Gateway); ok {
		return g.GetGatewayStatus()
	}
	return &v1alpha1.GatewayStatus{}
}

// ensureValidated refuses a spec the schema could not judge, before any OpenStack call.
func (r *Reconciler) ensureValidated(ctx context.Context, g *gateway) (bool, error) {
	if errs := g.validate(); len(errs) > 0 {
		// A spec whose only faults are intervals outside the bounds (an object stored
		// before the CRD's rule) gets its own reason; any other fault is InvalidSpec
		// with every error, the intervals' included.
		reason := v1alpha1.ReasonInvalidSpec
		if len(g.spec.IntervalsOutOfBounds()) == len(errs) {
			reason = v1alpha1.ReasonIntervalOutOfBounds
		}
		r.condFalse(g, v1alpha1.ConditionValidated, reason, errs.ToAggregate().Error())
		return false, nil
	}
	if errs := g.spec.PlaintextExposures(); len(errs) > 0 {
		r.condFalse(g, v1alpha1.ConditionValidated, v1alpha1.ReasonPlaintextExposure, errs.ToAggregate().Error())
		return false, nil
	}
	if errs := g.validateAddresses(r.addressPolicy(g)); len(errs) > 0 {
		r.condFalse(g, v1alpha1.ConditionValidated, v1alpha1.ReasonInvalidSpec, errs.ToAggregate().Error())
		return false, nil
	}
	// A peer inside a range the operator uses would have the pod route that range's
	// /32 out of its port and the security group admit IKE from it: refused before
	// anything is built for it.
	if errs := g.validatePeerAddresses(r.addressPolicy(g)); len(errs) > 0 {
		r.condFalse(g, v1alpha1.ConditionValidated, v1alpha1.ReasonPeerAddressNotAllowed, errs.ToAggregate().Error())
		return false, nil
	}
	links, err := r.links(ctx, g)
	if err != nil {
		r.condFailed(g, v1alpha1.ConditionValidated, v1alpha1.ReasonInvalidSpec, err)
		return false, err
	}
	g.links = links
	if errs, names, details := unlinkedTargets(g.spec, links); len(errs) > 0 {
		logr.FromContextOrDiscard(ctx).Info("exposure refused: its target lies in a linked cluster that does not serve the gateway", "details", details)
		r.condFalse(g, v1alpha1.ConditionValidated, v1alpha1.ReasonTargetInUnlinkedCluster, errs.ToAggregate().Error())
		return false, r.withdrawExposures(ctx, g, names)
	}
	// What the tenant's policy allows (docs/security.md): a refusal stops the gateway
	// here, and a running gateway stops serving the exposures it concerns.
	reason, msg, exposures, err := r.tenantRefusal(ctx, g)
	if err != nil {
		r.condFailed(g, v1alpha1.ConditionValidated, v1alpha1.ReasonInvalidSpec, err)
		return false, err
	}
	if reason != "" {
		r.condFalse(g, v1alpha1.ConditionValidated, reason, msg)
		return false, r.withdrawExposures(ctx, g, exposures)
	}
	r.condTrue(g, v1alpha1.ConditionValidated, v1alpha1.ReasonValid, "spec is valid and within "+g.policy.Describe())
	return true, nil
}
