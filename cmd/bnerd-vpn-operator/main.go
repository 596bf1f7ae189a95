// Command bnerd-vpn-operator reconciles IPsecGateways, VPNGateways and ClusterLinks.
//
// Configuration comes from flags or the environment (see internal/operatorconfig); the
// OpenStack credential from OS_* variables, or from a clouds.yaml named by
// OS_CLIENT_CONFIG_FILE and OS_CLOUD.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/controller/clusterlink"
	"bnerd.net/vpn-operator/internal/controller/gateway"
	"bnerd.net/vpn-operator/internal/controller/tenantpolicy"
	"bnerd.net/vpn-operator/internal/gatewaymetrics"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/operatorconfig"
	"bnerd.net/vpn-operator/internal/preflight"
	"bnerd.net/vpn-operator/internal/quota"
	"bnerd.net/vpn-operator/internal/version"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bnerd-vpn-operator: %v\n", err)
		os.Exit(1)
	}
}

// flags are the process's own settings; the operator configuration is operatorconfig.
type flags struct {
	metricsAddr, probeAddr string
	// metricsSecure serves the metrics over HTTPS to authenticated and authorised
	// clients only; metricsCertDir holds its tls.crt and tls.key (empty: self-signed).
	metricsSecure  bool
	metricsCertDir string
	leaderElect    bool
	profiling      bool
	showVersion    bool
	zap            zap.Options

	// The leader election's timing (controller-runtime's defaults: 15 s, 10 s, 2 s). A
	// leader lost with its node is replaced after the Lease duration: shorter settings
	// shorten that gap and make a slow API server cost the leader its Lease sooner.
	leaseDuration, renewDeadline, retryPeriod time.Duration
}

// parseFlags reads the command line and the environment.
func parseFlags(args []string, getenv func(string) string) (flags, operatorconfig.Config, error) {
	var f flags
	fs := flag.NewFlagSet("bnerd-vpn-operator", flag.ContinueOnError)
	metricsAddr := fs.String("metrics-bind-address", ":8443", "address of the operator's Prometheus metrics")
	metricsSecure := fs.Bool("metrics-secure", true, "serve the metrics over HTTPS to clients the API server authenticates (TokenReview) and authorises (SubjectAccessReview: get on the non-resource URL /metrics); false serves plain HTTP to anyone, for local use only")
	metricsCertDir := fs.String("metrics-cert-dir", "", "directory with the metrics server's tls.crt and tls.key (reloaded when they change); empty: a self-signed certificate made at start")
	probeAddr := fs.String("health-probe-bind-address", ":8081", "address of the health and readiness probes")
	// On by default: the service-CIDR and transit-IP allocators live in memory, so two
	// replicas reconciling at once could hand out the same /24 or transit IP.
	leaderElect := fs.Bool("leader-elect", true, "elect a leader so only one replica reconciles (turn off only for a single replica that must start without a Lease)")
	leaseDuration := fs.Duration("leader-election-lease-duration", 15*time.Second, "how long a standby waits after the leader's last renewal before it takes the leader Lease")
	renewDeadline := fs.Duration("leader-election-renew-deadline", 10*time.Second, "how long the leader keeps trying to renew its Lease before it gives up leading (and exits)")
	retryPeriod := fs.Duration("leader-election-retry-period", 2*time.Second, "how often the leader renews, and a standby tries to take, the leader Lease")
	showVersion := fs.Bool("version", false, "print the version and exit")
	profiling := fs.Bool("profiling", false, "also serve Go's pprof profiles under /debug/pprof/ on the metrics address")
	f.zap.BindFlags(fs)
	cfg, err := operatorconfig.Load(fs, args, getenv)
	f.metricsAddr, f.probeAddr, f.leaderElect, f.showVersion, f.profiling = *metricsAddr, *probeAddr, *leaderElect, *showVersion, *profiling
	f.metricsSecure, f.metricsCertDir = *metricsSecure, *metricsCertDir
	f.leaseDuration, f.renewDeadline, f.retryPeriod = *leaseDuration, *renewDeadline, *retryPeriod
	// client-go's own rule, checked here so a bad setting is one clear error at start.
	if err == nil && (f.retryPeriod <= 0 || f.renewDeadline <= f.retryPeriod*6/5 || f.leaseDuration <= f.renewDeadline) {
		err = fmt.Errorf("leader election: the lease duration (%s) must exceed the renew deadline (%s), which must exceed 1.2 times the retry period (%s)",
			f.leaseDuration, f.renewDeadline, f.retryPeriod)
	}
	return f, cfg, err
}

// The metrics filter (--metrics-secure) asks the API server who a scraper is and whether
// it may get /metrics:
//
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// LeaderElectionID is the Lease the replicas compete for, in the operator namespace.
const LeaderElectionID = "bnerd-vpn-operator.ipsec.bnerd.net"

// managerOptions are the manager's settings. There is one resync mechanism: each
// reconcile asks to come back after cfg.ResyncInterval; the informers keep
// controller-runtime's default resync (10 h), which the reconcilers do not rely on.
func managerOptions(f flags, cfg operatorconfig.Config, scheme *runtime.Scheme) ctrl.Options {
	metrics := metricsserver.Options{BindAddress: f.metricsAddr}
	if f.metricsSecure {
		// The per-gateway series name every tenant's namespaces, gateways, nodes and
		// floating IPs: only a client the API server vouches for, and allows to get
		// /metrics, reads them (the chart's metrics-reader ClusterRole). The filter asks
		// the API server with a TokenReview and a SubjectAccessReview (the operator's
		// ClusterRole may create both); it guards the pprof handlers too.
		metrics.SecureServing = true
		metrics.FilterProvider = filters.WithAuthenticationAndAuthorization
		metrics.CertDir = f.metricsCertDir
		// HTTP/1.1 only, as controller-runtime's scaffold does: HTTP/2's stream resets
		// (CVE-2023-44487, CVE-2023-39325) are not worth it for one scrape at a time.
		metrics.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	}
	if f.profiling {
		metrics.ExtraHandlers = map[string]http.Handler{
			"/debug/pprof/":        http.HandlerFunc(pprof.Index),
			"/debug/pprof/cmdline": http.HandlerFunc(pprof.Cmdline),
			"/debug/pprof/profile": http.HandlerFunc(pprof.Profile),
			"/debug/pprof/symbol":  http.HandlerFunc(pprof.Symbol),
			"/debug/pprof/trace":   http.HandlerFunc(pprof.Trace),
		}
	}
	return ctrl.Options{
		Scheme:  scheme,
		Metrics: metrics,
		// Of the pods, Leases and the kinds a gateway owns, only the gateways' own
		// (gateway.CacheScope), not every one of the cluster.
		Cache: cache.Options{
			ByObject: gateway.CacheScope(),
			// Nothing reads managedFields from the cache (status is written by
			// server-side apply, which the API server merges); dropping them keeps a
			// large estate's cache a good deal smaller.
			DefaultTransform: cache.TransformStripManagedFields(),
		},
		HealthProbeBindAddress:  f.probeAddr,
		LeaderElection:          f.leaderElect,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: cfg.Namespace,
		// The process exits right after the manager stops, so handing the Lease over at
		// once is safe and saves the next replica a lease duration.
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &f.leaseDuration,
		RenewDeadline:                 &f.renewDeadline,
		RetryPeriod:                   &f.retryPeriod,
		// A read of a Secret through the manager's client goes to the API server, never
		// into a cluster-wide informer: the operator keeps no Secret in memory. (It reads
		// a tunnel's key only to check it, a ClusterLink's credential to use it, and
		// follows both by name, metadata only.)
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	}
}

func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return scheme, nil
}

func run() error {
	f, cfg, err := parseFlags(os.Args[1:], os.Getenv)
	if err != nil {
		return err
	}
	if f.showVersion {
		fmt.Println(version.Version)
		return nil
	}
	if err := cfg.Required(); err != nil {
		return err
	}
	if f.leaderElect && cfg.Namespace == "" {
		return fmt.Errorf("leader election needs the operator namespace for its Lease: set POD_NAMESPACE (or --namespace), or run a single replica with --leader-elect=false")
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&f.zap)))
	log := ctrl.Log.WithName("setup")
	log.Info("starting", "version", version.Version)
	// Keep the Go heap under the container's memory limit (90 % of it): with a large
	// estate the heap otherwise grows to about twice what is live between collections
	// and meets the OOM killer first. A GOMEMLIMIT in the environment wins.
	if limit, err := memlimit.SetGoMemLimitWithOpts(memlimit.WithRatio(0.9), memlimit.WithProvider(memlimit.FromCgroup)); err != nil {
		log.Info("the container's memory limit is unknown; the Go heap is not limited", "error", err.Error())
	} else if limit > 0 {
		log.Info("Go memory limit set to 90 % of the container's", "bytes", limit)
	}

	cred, tlsConfig, err := loadCredential()
	if err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	authCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// The credential is never logged; its redacted String() is safe, but there is no
	// need for even that.
	osOpts := openstack.ClientOptions{UserAgent: "bnerd-vpn-operator/" + version.Version,
		Timeout: cfg.OpenStackTimeout, QPS: cfg.OpenStackQPS, Burst: cfg.OpenStackBurst, TLSConfig: tlsConfig}
	osClients, token, err := connectOpenStack(authCtx, cred, osOpts, log)
	if err != nil {
		return err
	}
	log.Info("authenticated to OpenStack", "project", token.ProjectID, "region", token.Region)
	if err := checkOperatorRoles(authCtx, osClients, token, log); err != nil {
		return err
	}
	// Neutron's extensions decide which path the seam takes (tags with or after the
	// create, atomic or revision-checked routes); without a required one the operator
	// cannot work, and says which.
	features, err := discoverFeatures(authCtx, osClients.Networking, log)
	if err != nil {
		return err
	}
	log.Info("Neutron extensions", "portTagsAtCreate", features.PortTagCreation,
		"extrarouteAtomic", features.ExtraRouteAtomic)

	scheme, err := newScheme()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), managerOptions(f, cfg, scheme))
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := setupControllers(mgr, cfg, osClients, osOpts, cred, token.ProjectID); err != nil {
		return err
	}

	// Per-gateway series independent of the gateway pods' own scrape (the chart's alerts
	// join them against it), read from the manager's cache at scrape time.
	if err := crmetrics.Registry.Register(&gatewaymetrics.Collector{Reader: mgr.GetClient(), Log: ctrl.Log.WithName("gateway-metrics")}); err != nil {
		return fmt.Errorf("registering the gateway metrics: %w", err)
	}

	// The Neutron quotas every tenant's gateways share: read now and at every resync,
	// a warning when they admit fewer gateways than the tenant policies allow.
	quotas := &quota.Watcher{Networking: osClients.Networking, ProjectID: token.ProjectID, Reader: mgr.GetAPIReader(),
		Interval: cfg.ResyncInterval, Log: ctrl.Log.WithName("quota")}
	if err := mgr.Add(quotas); err != nil {
		return err
	}
	if err := crmetrics.Registry.Register(quotas); err != nil {
		return fmt.Errorf("registering the quota metrics: %w", err)
	}

	log.Info("starting the manager")
	return mgr.Start(ctx)
}

// setupControllers adds the health checks, both reconcilers and the preflight to mgr:
// everything the binary runs but the metrics registration (a process-wide registry).
func setupControllers(mgr ctrl.Manager, cfg operatorconfig.Config, osClients *openstack.Clients, osOpts openstack.ClientOptions, cred openstack.Credential, projectID string) error {
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}

	gw := gateway.New(gateway.Deps{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		OpenStack: osClients,
		Config:    cfg,
		Log:       ctrl.Log.WithName("gateway"),
	})
	if err := gw.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the gateway controller: %w", err)
	}
	cl := clusterlink.New(clusterlink.Deps{
		Client:            mgr.GetClient(),
		APIReader:         mgr.GetAPIReader(),
		OpenStack:         osClients,
		OperatorProjectID: projectID,
		AuthURL:           cred.AuthURL,
		Region:            cred.Region,
		Interface:         cred.Interface,
		CustomerClients: func(ctx context.Context, c openstack.Credential) (*openstack.Clients, error) {
			// Each customer credential is its own project: its own budget at the cloud.
			return openstack.NewClients(ctx, c, osOpts)
		},
		Config: cfg,
	})
	if err := cl.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the ClusterLink controller: %w", err)
	}

	if err := (&tenantpolicy.Reconciler{Client: mgr.GetClient(), Log: ctrl.Log.WithName("tenantpolicy")}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the VPNTenantPolicy controller: %w", err)
	}

	// The preflight warns and never blocks: the operator cannot fix the cluster setting.
	return mgr.Add(preflightRunnable{mgr: mgr, networking: osClients.Networking, transit: cfg.GatewayNetwork})
}

// connectOpenStack authenticates and reads the operator's token. A passing fault of the
// cloud (a 5xx, a 429, a timeout) is waited out (waitOutFaults): an operator that exits
// on one 503 at start would sit in CrashLoopBackOff for longer than the fault lasted. A
// refusal (a wrong credential, a missing endpoint) ends the start at once.
func connectOpenStack(ctx context.Context, cred openstack.Credential, opts openstack.ClientOptions, log logr.Logger) (*openstack.Clients, *openstack.TokenInfo, error) {
	var (
		clients *openstack.Clients
		token   *openstack.TokenInfo
	)
	err := waitOutFaults(ctx, log, func() error {
		c, err := openstack.NewClients(ctx, cred, opts)
		if err != nil {
			return fmt.Errorf("authenticating to OpenStack: %w", err)
		}
		t, err := c.Identity.TokenInfo(ctx)
		if err != nil {
			return fmt.Errorf("reading the operator's OpenStack token: %w", err)
		}
		clients, token = c, t
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return clients, token, nil
}

// discoverFeatures reads Neutron's extensions, waiting out a passing fault as
// connectOpenStack does (found by the chaos soak: one 503 of the extension list ended
// the start). A missing required extension ends the start at once, naming it.
func discoverFeatures(ctx context.Context, net openstack.Networking, log logr.Logger) (openstack.Features, error) {
	var features openstack.Features
	err := waitOutFaults(ctx, log, func() error {
		f, err := openstack.DiscoverFeatures(ctx, net)
		if err != nil {
			return fmt.Errorf("checking Neutron's extensions: %w", err)
		}
		features = f
		return nil
	})
	return features, err
}

// waitOutFaults runs try until it succeeds, fails with something other than a passing
// fault of the cloud (openstack.IsTransient), or ctx ends; between attempts it waits
// with backoff (0.5 s doubling to 10 s, never shorter than a Retry-After).
func waitOutFaults(ctx context.Context, log logr.Logger, try func() error) error {
	delay := 500 * time.Millisecond
	for {
		err := try()
		if err == nil {
			return nil
		}
		if !openstack.IsTransient(err) || ctx.Err() != nil {
			return err
		}
		if d := openstack.RetryAfter(err); d > delay {
			delay = d
		}
		log.Info("OpenStack is not answering yet; trying again", "after", delay.String(), "error", err.Error())
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		if delay *= 2; delay > 10*time.Second {
			delay = 10 * time.Second
		}
	}
}

type preflightRunnable struct {
	mgr        ctrl.Manager
	networking openstack.Networking
	transit    string
}

func (p preflightRunnable) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("preflight")
	preflight.CheckCiliumExclusive(ctx, p.mgr.GetAPIReader(), log)
	preflight.CheckTransitNetworkShare(ctx, p.networking, p.transit, log)
	return nil
}

// loadCredential reads the operator's OpenStack credential: a clouds.yaml when OS_CLOUD
// is set (from OS_CLIENT_CONFIG_FILE, default ./clouds.yaml), else the OS_* variables;
// with the TLS settings of a private CA (OS_CACERT, or the entry's cacert), which every
// client the operator builds uses, the ClusterLinks' customer clients included.
func loadCredential() (openstack.Credential, *tls.Config, error) {
	return openstack.LoadCloud(os.Getenv, os.ReadFile, "clouds.yaml")
}
