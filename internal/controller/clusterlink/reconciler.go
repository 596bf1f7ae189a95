// Package clusterlink reconciles ClusterLinks: a leg port on the transit network
// attached to a service cluster's router, a route on the gateway cluster's router to
// the service cluster's CIDR, and the reverse routes on the service cluster's router to
// every gateway with reverse exposures. Cross-tenant links do the customer-side half
// with the customer's own application credential, after the checks the specification
// demands of it.
package clusterlink

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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/conditions"
	"bnerd.net/vpn-operator/internal/controller/namedwatch"
	"bnerd.net/vpn-operator/internal/controller/outcome"
	"bnerd.net/vpn-operator/internal/controller/skeleton"
	"bnerd.net/vpn-operator/internal/freshread"
	"bnerd.net/vpn-operator/internal/ipam"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/operatorconfig"
	"bnerd.net/vpn-operator/internal/statuswrite"
)

// CredentialRequeue is the fixed retry of the credential reasons a human fixes by
// editing the Secret or the link (SecretNotFound, CredentialsInvalid, AuthFailed, ...).
const CredentialRequeue = 15 * time.Second

// Deps are the reconciler's collaborators. The first seven mean what they mean in the
// gateway reconciler's Deps, with the same defaults (filled by SetupWithManager from the
// manager); the rest are the link's own.
type Deps struct {
	// Client reads (from the cache) and writes the API server. Required.
	Client client.Client
	// APIReader reads around the cache: credential Secrets (a rotated one is seen at
	// once) and objects whose status write lost a race. Default: the manager's API
	// reader (without a manager: Client).
	APIReader client.Reader
	// OpenStack is the operator's own client set (Networking, Compute, Identity).
	// Required.
	OpenStack *openstack.Clients
	// Config is the operator configuration (transit network, router, credentials
	// namespace, resync interval).
	Config operatorconfig.Config
	// Recorder emits Events (events.k8s.io). Default: the manager's recorder.
	Recorder events.EventRecorder
	// Clock stamps conditions; nil is time.Now.
	Clock conditions.Clock
	// SkipNameValidation lets several managers in one process (tests) register the
	// same controller names.
	SkipNameValidation bool

	// OperatorProjectID is the project the operator's credential is scoped to.
	OperatorProjectID string
	// AuthURL and Region are the operator's own Keystone endpoint and region; a
	// customer Secret may only repeat them.
	AuthURL string
	Region  string
	// Interface is the operator's own endpoint type; a customer credential uses it
	// too, whatever OS_INTERFACE its Secret carries.
	Interface string
	// CustomerClients authenticates a customer credential (production:
	// openstack.NewClients with fixed options; tests point it at the simulator).
	CustomerClients openstack.Builder
	// FanOutDelay overrides the default FanOutDelay (tests).
	FanOutDelay time.Duration
}

// Reconciler reconciles ClusterLinks.
type Reconciler struct {
	Deps
	reader client.Reader
	claims *ipam.TransitClaims
	cache  *openstack.ClientCache
	// occupied shares the transit network's port list among the links allocating at
	// the same moment (occupiedTransitIPs).
	occupied freshread.Group[string, map[netip.Addr]*openstack.Port]

	mu       sync.Mutex
	refusals map[types.UID]refusal // per link: a refused Secret version
	verified map[types.UID]string  // per link: Secret version whose token passed the checks
	// per Aggregate link: its last reverse-route pass left the pool route on its router
	// (the fan-out skips gains such a route reaches; see fanOut)
	aggregateRouted map[types.UID]bool
	// per link: the fan-out has queued it after FanOutDelay and that reconcile has not
	// started yet, so another change within the delay needs no second add (see fanOut)
	fanOutQueued map[string]bool

	netMu      sync.Mutex
	transit    *transitNet // resolved once; the transit network does not move
	opRouterID string      // the gateway cluster's router, resolved once
	// opRouterTransitIP is that router's address on the transit subnet, the next hop of
	// an Aggregate link's one reverse route; resolved once per router ID.
	opRouterTransitIP, opRouterTransitFor string

	backoff *outcome.Backoff

	// secrets follows each cross-tenant link's credential Secret, metadata only (nil
	// without a manager).
	secrets *namedwatch.Watcher

	// wake carries links to reconcile now for something that happened to another one
	// (a router or a transit IP it waits for was released).
	wake chan event.GenericEvent

	fanOutDelay time.Duration

	// fresh remembers this process's status writes (see statuswrite.Freshness).
	fresh *statuswrite.Freshness
}

// New builds a Reconciler.
func New(deps Deps) *Reconciler {
	r := &Reconciler{
		Deps:            deps,
		reader:          deps.APIReader,
		claims:          ipam.NewTransitClaims(),
		refusals:        map[types.UID]refusal{},
		verified:        map[types.UID]string{},
		aggregateRouted: map[types.UID]bool{},
		fanOutQueued:    map[string]bool{},
		backoff:         outcome.NewBackoff(0, 0),
		wake:            make(chan event.GenericEvent, wakeBuffer),
		fresh:           statuswrite.NewFreshness(),
	}
	r.fanOutDelay = deps.FanOutDelay
	if r.fanOutDelay <= 0 {
		r.fanOutDelay = FanOutDelay
	}
	if r.reader == nil {
		r.reader = deps.Client
	}
	build := deps.CustomerClients
	if build == nil {
		build = func(ctx context.Context, c openstack.Credential) (*openstack.Clients, error) {
			return openstack.NewClients(ctx, c, openstack.ClientOptions{})
		}
	}
	r.cache = openstack.NewClientCache(build)
	if r.Config.ResyncInterval <= 0 {
		r.Config.ResyncInterval = operatorconfig.DefaultResyncInterval
	}
	if r.Config.ClusterLinkCredentialsNamespace == "" {
		r.Config.ClusterLinkCredentialsNamespace = operatorconfig.DefaultClusterLinkCredentialsNamespace
	}
	return r
}

// Claims exposes the in-memory transit-IP claims (diagnostics and tests).
func (r *Reconciler) Claims() *ipam.TransitClaims { return r.claims }

// SetupWithManager registers the controller: ClusterLinks themselves, and both gateway
// kinds mapped onto every ClusterLink when their reverse-route inputs change.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.APIReader == nil {
		r.reader = mgr.GetAPIReader()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder("bnerd-vpn-operator")
	}
	workers := r.Config.MaxConcurrentReconciles
	if workers < 1 {
		workers = 1
	}
	meta, err := metadata.NewForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	r.secrets = namedwatch.New(meta, namedwatch.SecretsResource, "Secret")
	if err := mgr.Add(r.secrets); err != nil {
		return err
	}
	opts := controller.Options{MaxConcurrentReconciles: workers, RateLimiter: r.backoff}
	if r.SkipNameValidation {
		// Set only when asked: a non-nil value would override the manager's own setting.
		opts.SkipNameValidation = &r.SkipNameValidation
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("clusterlink").
		For(&v1alpha1.ClusterLink{}, linkChanged()).
		Watches(&v1alpha1.IPsecGateway{}, r.fanOut(), gatewayPredicate()).
		Watches(&v1alpha1.VPNGateway{}, r.fanOut(), gatewayPredicate()).
		// A namespace's labels decide which links serve its gateways.
		Watches(&corev1.Namespace{}, r.fanOut(), namespaceLabelsChanged()).
		// A link created, deleted or re-specified can lift or cause another's overlap.
		Watches(&v1alpha1.ClusterLink{}, r.fanOut(), linkSpecOrLifecycle()).
		WatchesRawSource(r.secrets.Source(handler.EnqueueRequestsFromMapFunc(credentialLink))).
		WatchesRawSource(source.Channel(r.wake, &handler.EnqueueRequestForObject{})).
		WithOptions(opts).
		Complete(r)
}

// linkCtx carries one reconcile's state.
type linkCtx struct {
	link *v1alpha1.ClusterLink
	orig *v1alpha1.ClusterLinkStatus
	// base is the object as last read from or written to the API server: the status
	// write is guarded by its resourceVersion.
	base   *v1alpha1.ClusterLink
	set    conditions.Setter
	log    logr.Logger
	cross  bool
	secret string // "<ns>/<name>" of a cross-tenant link's Secret, for messages

	legClients *openstack.Clients // the leg's clients: the customer's on a cross-tenant link, else the operator's
	projectID  string             // the project the leg lives in
	tn         *transitNet
	router     *openstack.Router // the service cluster's router
	port       *openstack.Port   // the leg port
	attached   bool
	// events are the condition transitions and the explicit Events gathered on the way,
	// sent once the status write that records them succeeded. Messages are built from
	// names and IDs only, never Secret data.
	events skeleton.Events
}

func (lc *linkCtx) eventf(typ, reason, format string, args ...any) {
	lc.events.Add(typ, reason, "Reconcile", format, args...)
}

// legPrefix and opPrefix name the credential that failed a step on a cross-tenant
// link, as the specification asks; a same-tenant link has one credential only.
func (lc *linkCtx) legPrefix() string {
	if !lc.cross {
		return ""
	}
	return "customer credential (secret " + lc.secret + "): "
}

func (lc *linkCtx) opPrefix() string {
	if !lc.cross {
		return ""
	}
	return "operator credential: "
}

// +kubebuilder:rbac:groups=ipsec.bnerd.net,resources=clusterlinks,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=ipsec.bnerd.net,resources=clusterlinks/status,verbs=patch
// +kubebuilder:rbac:groups=ipsec.bnerd.net,resources=ipsecgateways;vpngateways,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile converges one ClusterLink and answers controller-runtime through outcome:
// refusals wait for a change or the resync, transient failures back off.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.fanOutStarted(req.Name)
	err := r.reconcile(ctx, req)
	if outcome.IsTerminal(err) {
		log.FromContext(ctx).Info("OpenStack refused a request; waiting for a change", "clusterlink", req.Name, "error", err.Error())
	}
	return r.backoff.Result(req, err, r.Config.ResyncInterval)
}

func (r *Reconciler) reconcile(ctx context.Context, req ctrl.Request) error {
	link := &v1alpha1.ClusterLink{}
	if err := r.Client.Get(ctx, req.NamespacedName, link); err != nil {
		return client.IgnoreNotFound(err)
	}
	if r.statusWriter().Behind(link) {
		// The cache does not show this process's last status write yet: deciding from
		// it would end in a failed write (and, for a link still allocating, a second
		// estate-wide claim listing).
		return outcome.Wait(cacheCatchUp, "the cache does not show the last status write yet")
	}
	lc := &linkCtx{
		link:  link,
		orig:  link.Status.DeepCopy(),
		base:  link.DeepCopy(),
		set:   conditions.Setter{Conditions: &link.Status.Conditions, Generation: link.Generation, Now: r.Clock},
		log:   log.FromContext(ctx).WithValues("clusterlink", link.Name),
		cross: link.Spec.CredentialsSecretRef != nil,
	}
	if lc.cross {
		lc.secret = link.Spec.CredentialsSecretRef.Namespace + "/" + link.Spec.CredentialsSecretRef.Name
	}

	if !link.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, lc)
	}
	if added, err := skeleton.AddFinalizer(ctx, r.Client, link, v1alpha1.FinalizerClusterLink); err != nil {
		return err
	} else if added {
		lc.base = link.DeepCopy()
	}

	err := r.converge(ctx, lc)
	link.Status.ObservedGeneration = link.Generation
	r.summarize(lc)
	if werr := r.writeStatus(ctx, lc); werr != nil {
		return errors.Join(err, werr)
	}
	lc.events.Emit(r.Recorder, lc.link)
	return err
}

// summarize derives Ready from the conditions of the link's phases (a same-tenant link
// has none of the cross-tenant ones).
func (r *Reconciler) summarize(lc *linkCtx) {
	if !lc.cross {
		for _, t := range crossTenantConditions {
			lc.set.Remove(t)
		}
	}
	types := skeleton.Conditions(r.phases(lc))
	// A phase that failed names Ready before one that was merely not reached.
	for _, t := range types {
		if c := conditions.Get(lc.link.Status.Conditions, t); c != nil && c.Status == metav1.ConditionFalse {
			lc.set.False(v1alpha1.ConditionReady, c.Reason, c.Type+": "+c.Message)
			return
		}
	}
	if blocking := conditions.Summary(lc.link.Status.Conditions, types...); blocking != nil {
		lc.set.False(v1alpha1.ConditionReady, blocking.Reason, blocking.Type+": "+blocking.Message)
		return
	}
	lc.set.True(v1alpha1.ConditionReady, v1alpha1.ReasonReconciled, "the service cluster is linked into the transit network")
}

// writeStatus writes the status when it changed: a server-side apply under the
// operator's field manager, guarded by the resourceVersion of the last read or write
// (the convention both reconcilers share). A concurrent change of the status fails the
// write, and the reconcile starts again from a fresh read.
func (r *Reconciler) writeStatus(ctx context.Context, lc *linkCtx) error {
	if equality.Semantic.DeepEqual(*lc.orig, lc.link.Status) {
		return nil
	}
	if err := r.statusWriter().Apply(ctx, lc.link, lc.base); err != nil {
		// The transitions are not on record: the next reconcile, from a fresh read,
		// finds them again and tells them then (skeleton.Events).
		lc.events.WriteFailed(r.Recorder, lc.link)
		return fmt.Errorf("writing status: %w", err)
	}
	lc.orig = lc.link.Status.DeepCopy()
	lc.base = lc.link.DeepCopy()
	return nil
}

// cacheCatchUp is how soon a reconcile that found the cache behind tries again.
const cacheCatchUp = 50 * time.Millisecond

func (r *Reconciler) statusWriter() statuswrite.Writer {
	return statuswrite.Writer{Client: r.Client, Reader: r.reader, Manager: statuswrite.ManagerOperator, Fresh: r.fresh}
}

// persist writes the status now: an allocation must be on record before anything
// outside the API server depends on it.
func (r *Reconciler) persist(ctx context.Context, lc *linkCtx) error {
	return r.writeStatus(ctx, lc)
}

// transitionEvents records an Event for every condition whose status or reason moved,
// but for a condition set True for the first time (skeleton.FirstTrue: the actions'
// Events tell the link's first convergence) and a condition only marked waiting.
func transitionEvents(lc *linkCtx, before []metav1.Condition) {
	for _, c := range lc.link.Status.Conditions {
		if c.Type == v1alpha1.ConditionReady {
			continue
		}
		var prev *metav1.Condition
		for i := range before {
			if before[i].Type == c.Type {
				prev = &before[i]
			}
		}
		if prev != nil && prev.Status == c.Status && prev.Reason == c.Reason || skeleton.FirstTrue(prev, c.Status) {
			continue
		}
		if skeleton.IsWaiting(&c) && (prev == nil || skeleton.IsWaiting(prev)) {
			continue // a phase not reached yet: nothing happened to it
		}
		typ := corev1.EventTypeNormal
		if c.Status == metav1.ConditionFalse {
			typ = corev1.EventTypeWarning
		}
		note := c.Type + " " + string(c.Status)
		if c.Message != "" {
			note += ": " + c.Message
		}
		lc.events.Transition(typ, c.Reason, "Reconcile", "%s", note)
	}
}
