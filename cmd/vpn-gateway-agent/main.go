// Command vpn-gateway-agent runs the gateway pod's agent roles: init-nat (policy routing
// and the NAT/guard ruleset, kept converged), charon (strongswan.conf, then charon
// itself), strongswan-loader (swanctl config into charon over VICI), status-agent
// (tunnel state into the gateway's status) and ipsec-exporter (Prometheus metrics).
// The roles' logic lives in internal/agent/...; this file only wires flags to it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	govici "github.com/strongswan/govici/vici"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/charon"
	"bnerd.net/vpn-operator/internal/agent/downcause"
	"bnerd.net/vpn-operator/internal/agent/exporter"
	"bnerd.net/vpn-operator/internal/agent/initnat"
	"bnerd.net/vpn-operator/internal/agent/loader"
	"bnerd.net/vpn-operator/internal/agent/nat"
	"bnerd.net/vpn-operator/internal/agent/psk"
	"bnerd.net/vpn-operator/internal/agent/routing"
	"bnerd.net/vpn-operator/internal/agent/source"
	"bnerd.net/vpn-operator/internal/agent/statefile"
	"bnerd.net/vpn-operator/internal/agent/status"
	"bnerd.net/vpn-operator/internal/agent/vici"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

const usage = `usage: vpn-gateway-agent <role> [flags]

roles:
  init-nat           policy routing on the port interface and the NAT/guard nftables table
  charon             render strongswan.conf and run charon-systemd in the foreground
  strongswan-loader  load swanctl connections and shared keys into charon over VICI
  status-agent       write tunnel state into the gateway object's status (with --load
                     it also runs the loader, as in the gateway pod)
  ipsec-exporter     serve Prometheus metrics
  wireguard          create and configure a WireGuard gateway's interface (kernel, or
                     wireguard-go in this process where the kernel has no WireGuard)

run "vpn-gateway-agent <role> -h" for the role's flags`

// common are the config-source flags every role shares.
type common struct {
	configFile, secretsFile string
	kubeconfig, namespace   string
	configMap               string
}

func (c *common) register(fs *flag.FlagSet, needSecrets bool) {
	fs.StringVar(&c.configFile, "config-file", "", "read "+gatewayconfig.ConfigMapKeyConfig+" from this file (with the keys in a sibling "+gatewayconfig.SecretKeySecrets+") instead of the API")
	if needSecrets {
		fs.StringVar(&c.secretsFile, "secrets-file", "", gatewayconfig.SecretKeySecrets+" path with --config-file (default: beside it); without --config-file each tunnel's Secret is read through the API")
	}
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig (default: in-cluster)")
	fs.StringVar(&c.namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the ConfigMap and the pre-shared key Secrets (env POD_NAMESPACE)")
	fs.StringVar(&c.configMap, "configmap", "", "name of the gateway's ConfigMap")
}

func (c *common) restConfig() (*rest.Config, error) {
	if c.kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	}
	return rest.InClusterConfig()
}

func (c *common) clientset() (kubernetes.Interface, error) {
	rc, err := c.restConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(rc)
}

// run starts the configured source and returns its snapshot channel (one slot: the
// newest snapshot wins).
func (c *common) run(ctx context.Context) (chan source.Snapshot, error) {
	out := make(chan source.Snapshot, 1)
	if c.configFile != "" {
		f := source.NewFiles(c.configFile, c.secretsFile)
		go func() { _ = f.Run(ctx, out) }()
		return out, nil
	}
	if c.configMap == "" || c.namespace == "" {
		return nil, errors.New("either --config-file or --namespace and --configmap are required")
	}
	cs, err := c.clientset()
	if err != nil {
		return nil, err
	}
	a := &source.API{Client: cs, Namespace: c.namespace, ConfigMap: c.configMap}
	go func() {
		if err := a.Run(ctx, out); err != nil {
			log.Printf("config source: %v", err)
		}
	}()
	return out, nil
}

// keys is the loader's key source: each tunnel's Secret through the API, or (file mode)
// the secrets file read with the config.
func (c *common) keys(ctx context.Context) (psk.Source, error) {
	if c.configFile != "" {
		return nil, nil
	}
	cs, err := c.clientset()
	if err != nil {
		return nil, err
	}
	return psk.NewAPI(ctx, cs, c.namespace, log.Printf), nil
}

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	role, args := os.Args[1], os.Args[2:]
	var err error
	switch role {
	case "init-nat":
		err = runInitNAT(ctx, args)
	case "charon":
		err = runCharon(args)
	case "strongswan-loader":
		err = runLoader(ctx, args)
	case "status-agent":
		err = runStatus(ctx, args)
	case "ipsec-exporter":
		err = runExporter(ctx, args)
	case "wireguard":
		err = runWireGuard(ctx, args)
	default:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		log.Fatalf("%s: %v", role, err)
	}
}

func runInitNAT(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("init-nat", flag.ExitOnError)
	var c common
	c.register(fs, false)
	iface := fs.String("interface", "net1", "the dedicated port's interface")
	tunIface := fs.String("tunnel-interface", "ipsec0", "tunnel device (libipsec) for --guard=interface")
	guard := fs.String("guard", string(nat.GuardInterface), "fail-closed guard: interface (libipsec TUN device) or xfrm (kernel IPsec)")
	mtu := fs.Int("tunnel-mtu", 1400, "tunnel MTU bounding the MSS of SYNs from the tunnel")
	table := fs.String("table", nat.DefaultTable, "nftables table owned by the agent")
	routeTable := fs.Int("route-table", routing.DefaultTable, "policy routing table")
	rulePrio := fs.Int("rule-priority", routing.DefaultPriority, "first policy rule priority (must exceed charon's 220)")
	drift := fs.Duration("drift-interval", 500*time.Millisecond, "how often the table, chains and rules are checked for drift")
	elementEvery := fs.Int("drift-element-every", 10, "count set and map elements on every Nth drift check (element dumps grow with exposures)")
	stateFile := fs.String("state-file", "", "write NAT apply statistics here for ipsec-exporter")
	_ = fs.Parse(args)

	opts := nat.Options{Table: *table, Guard: nat.GuardMode(*guard), TunnelMTU: *mtu, PortInterface: *iface}
	if opts.Guard == nat.GuardInterface {
		opts.TunnelInterface = *tunIface
	}
	prog, err := nat.New(opts)
	if err != nil {
		return err
	}
	r := &initnat.Runner{
		Config: initnat.Config{
			Interface: *iface, TunnelInterface: opts.TunnelInterface,
			RouteTable: *routeTable, RulePriority: *rulePrio,
			DriftInterval: *drift, ElementEvery: *elementEvery, StateFile: *stateFile,
		},
		NAT: prog, Drift: nat.NewDriftChecker(prog), Route: routing.Apply, ReadFile: os.ReadFile,
		Forward: routing.EnsureForwarding, Logf: log.Printf,
	}
	if *stateFile != "" {
		r.WriteState = func(st statefile.NATState) error { return statefile.WriteNATState(*stateFile, st) }
	}
	// Refuse before reading any config when forwarding cannot be had: the pod would look
	// healthy while no exposure passes.
	_ = r.Forward(*iface)
	if err := initnat.CheckForwarding(os.ReadFile, *iface); err != nil {
		return err
	}
	snaps, err := c.run(ctx)
	if err != nil {
		return err
	}
	return r.Run(ctx, snaps)
}

func runLoader(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("strongswan-loader", flag.ExitOnError)
	var c common
	c.register(fs, true)
	sock := fs.String("vici-socket", "/var/run/charon.vici", "charon's VICI socket")
	interval := fs.Duration("interval", 2*time.Second, "how often charon is re-checked (restarts, lost SAs)")
	var r retries
	r.register(fs)
	_ = fs.Parse(args)
	snaps, err := c.run(ctx)
	if err != nil {
		return err
	}
	keys, err := c.keys(ctx)
	if err != nil {
		return err
	}
	tn := &source.Tunnels{Logf: log.Printf}
	tunnelSnaps, loadSnaps := make(chan source.Snapshot, 1), make(chan source.Snapshot, 1)
	go source.Fanout(ctx, snaps, tunnelSnaps, loadSnaps)
	go tn.Follow(ctx, tunnelSnaps)
	causes := &downcause.Tracker{PeerTunnel: tn.ByPeer}
	go (&vici.Watcher{Dial: vici.DialEvents(*sock), Events: []string{"log"}, OnEvent: func(ev govici.Event) { causes.Observe(ev) }, Logf: log.Printf}).Run(ctx)
	(&loader.Loop{Applier: r.loader(*sock, causes), Keys: keys, Interval: *interval, PortRouting: portRouting, ServiceAddress: routing.HasLocalAddress, Logf: log.Printf}).Run(ctx, loadSnaps)
	return nil
}

// retries are the loader's backoff flags.
type retries struct{ initial, max time.Duration }

func (r *retries) register(fs *flag.FlagSet) {
	fs.DurationVar(&r.initial, "retry-initial", 5*time.Second, "wait after a tunnel's first failed attempt; doubled per further failure")
	fs.DurationVar(&r.max, "retry-max", 5*time.Minute, "longest wait between attempts of a tunnel that does not come up (a peer that never answers is retried at charon's retransmission pace instead)")
}

func (r *retries) loader(sock string, causes *downcause.Tracker) *vici.Syncer {
	return &vici.Syncer{Socket: sock, Logf: log.Printf, Causes: causes, RetryInitial: r.initial, RetryMax: r.max}
}

// runCharon renders strongswan.conf for the pod's dataplane, clears kernel IPsec state a
// killed charon left behind, and replaces itself with charon-systemd in the foreground.
func runCharon(args []string) error {
	fs := flag.NewFlagSet("charon", flag.ExitOnError)
	sock := fs.String("vici-socket", "/var/run/charon.vici", "charon's VICI socket")
	dataplane := fs.String("dataplane", string(gatewayconfig.DataplaneKernel), "kernel (XFRM) or libipsec (userspace ESP over a TUN device)")
	conf := fs.String("conf", "/var/run/charon/strongswan.conf", "where to write the rendered strongswan.conf")
	bin := fs.String("charon", "/usr/sbin/charon-systemd", "charon binary to run")
	private := fs.Bool("private-dir", false, "close the directories of --conf and --vici-socket to all but root and root's group (mode 0750)")
	_ = fs.Parse(args)
	st, err := charon.Prepare(charon.Options{Dataplane: gatewayconfig.DataplaneMode(*dataplane), VICISocket: *sock, Conf: *conf, Binary: *bin, PrivateDir: *private,
		TUNDevice: "/dev/net/tun", FlushXFRM: charon.FlushXFRM, Logf: log.Printf}, os.Environ())
	if err != nil {
		return err
	}
	return syscall.Exec(st.Path, st.Argv, st.Env)
}

func runStatus(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("status-agent", flag.ExitOnError)
	var c common
	c.register(fs, true)
	sock := fs.String("vici-socket", "/var/run/charon.vici", "charon's VICI socket")
	interval := fs.Duration("interval", 10*time.Second, "poll interval besides VICI events")
	heartbeat := fs.Duration("heartbeat", gatewayconfig.DefaultStatusAgentHeartbeat, "longest time between two status writes while nothing changes (the operator calls a report stale after its IPSEC_STATUS_AGENT_STALE_AFTER)")
	load := fs.Bool("load", false, "also load the connections into charon, with each tunnel's pre-shared key read from its Secret (or the secrets file with --config-file)")
	wgState := fs.String("wireguard-state-file", "", "a WireGuard gateway: report its peers from the wireguard role's state file (no charon)")
	publishConfig := fs.String("publish-config", "", "write the configuration (gateway.json, no key) to this file for the containers that read it without API access")
	ipsecState := fs.String("ipsec-state-file", "", "write the tunnels' SAs, rekey counts and failure causes to this file every second, for ipsec-exporter --ipsec-state-file")
	livenessLease := fs.String("liveness-lease", "", "renew this Lease (in --namespace) with the pod's name (env POD_NAME) as the holder every --liveness-interval: the operator's sign that the pod's node is alive")
	livenessInterval := fs.Duration("liveness-interval", 2*time.Second, "how often the liveness Lease is renewed")
	var r retries
	r.register(fs)
	_ = fs.Parse(args)
	snaps, err := c.run(ctx)
	if err != nil {
		return err
	}
	if *publishConfig != "" {
		rest, pub := make(chan source.Snapshot, 1), make(chan source.Snapshot, 1)
		go source.Fanout(ctx, snaps, rest, pub)
		go source.Publish(ctx, pub, *publishConfig, log.Printf)
		snaps = rest
	}
	rc, err := c.restConfig()
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	if err := coordinationv1.AddToScheme(scheme); err != nil { // the liveness Lease
		return err
	}
	cl, err := client.New(rc, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	if *livenessLease != "" {
		go (&status.Renewer{Client: cl, Key: client.ObjectKey{Namespace: c.namespace, Name: *livenessLease}, Holder: os.Getenv("POD_NAME"),
			Interval: *livenessInterval, Logf: log.Printf}).Run(ctx)
	}
	if *wgState != "" {
		runWireGuardStatus(ctx, snaps, cl, *wgState, *interval, *heartbeat)
		return nil
	}
	tn := &source.Tunnels{Logf: log.Printf}
	causes := &downcause.Tracker{PeerTunnel: tn.ByPeer}
	var plans func(string) vici.Plan
	tunnelSnaps := snaps
	var waiting func() map[string]string
	if *load {
		keys, err := c.keys(ctx)
		if err != nil {
			return err
		}
		// One watch feeds both loops.
		tunnelSnaps = make(chan source.Snapshot, 1)
		loadSnaps := make(chan source.Snapshot, 1)
		go source.Fanout(ctx, snaps, tunnelSnaps, loadSnaps)
		ld := r.loader(*sock, causes)
		plans = ld.Plan
		l := &loader.Loop{Applier: ld, Keys: keys, Interval: 2 * time.Second, PortRouting: portRouting, ServiceAddress: routing.HasLocalAddress, Logf: log.Printf}
		waiting = l.Waiting
		go l.Run(ctx, loadSnaps)
	}
	go tn.Follow(ctx, tunnelSnaps)
	kicks, kick := status.Kicker()
	var rekeys exporter.Rekeys
	go (&vici.Watcher{
		Dial: vici.DialEvents(*sock), Events: []string{"ike-updown", "child-updown", "ike-rekey", "child-rekey", "log"},
		OnConnect: kick, OnEvent: func(ev govici.Event) {
			rekeys.Observe(ev)
			// Every SA event, and a log line that changes a tunnel's cause.
			if ev.Name != "log" || causes.Observe(ev) {
				kick()
			}
		}, Logf: log.Printf,
	}).Run(ctx)
	if *ipsecState != "" {
		go (&exporter.Publisher{File: *ipsecState, Interval: exporter.DefaultIPsecStateInterval, Tunnels: tn.Names, SAs: vici.ListSAsOn(*sock),
			Rekeys: rekeys.Counts, Causes: causes, Logf: log.Printf}).Run(ctx)
	}
	(&status.Agent{Tunnels: tn.Get, SAs: vici.ListSAsOn(*sock), Notes: status.Notes(causes, plans, nil), Waiting: waiting, Write: status.ClientWriter(cl, *heartbeat), Kick: kicks, Interval: *interval, Logf: log.Printf}).Run(ctx)
	return nil
}

func runExporter(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ipsec-exporter", flag.ExitOnError)
	var c common
	c.register(fs, false)
	sock := fs.String("vici-socket", "/var/run/charon.vici", "charon's VICI socket")
	listen := fs.String("listen", ":9903", "metrics listen address")
	stateFile := fs.String("nat-state-file", "", "init-nat's state file")
	wgState := fs.String("wireguard-state-file", "", "a WireGuard gateway: per-peer metrics from the wireguard role's state file (no charon)")
	ipsecState := fs.String("ipsec-state-file", "", "tunnel metrics from the status agent's state file (status-agent --ipsec-state-file) instead of charon's VICI socket")
	_ = fs.Parse(args)
	snaps, err := c.run(ctx)
	if err != nil {
		return err
	}
	tn := &source.Tunnels{Logf: log.Printf}
	go tn.Follow(ctx, snaps)
	if *wgState != "" {
		return serveMetrics(ctx, *listen, &exporter.WireGuardCollector{Peers: tn.Names, StateFile: *wgState, NATStateFile: *stateFile})
	}
	if *ipsecState != "" {
		src := &exporter.IPsecStateFile{Path: *ipsecState}
		return serveMetrics(ctx, *listen, &exporter.Collector{Tunnels: tn.Names, SAs: src.SAs, NATStateFile: *stateFile, Rekeys: src.Rekeys, Causes: src})
	}
	var rekeys exporter.Rekeys
	causes := &downcause.Tracker{PeerTunnel: tn.ByPeer}
	go (&vici.Watcher{Dial: vici.DialEvents(*sock), Events: []string{"ike-rekey", "child-rekey", "log"}, OnEvent: func(ev govici.Event) {
		rekeys.Observe(ev)
		causes.Observe(ev)
	}, Logf: log.Printf}).Run(ctx)
	col := &exporter.Collector{Tunnels: tn.Names, SAs: vici.ListSAsOn(*sock), NATStateFile: *stateFile, Rekeys: rekeys.Counts, Causes: causes}
	return serveMetrics(ctx, *listen, col)
}

func serveMetrics(ctx context.Context, listen string, col prometheus.Collector) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	log.Printf("metrics on %s", ln.Addr())
	return exporter.Serve(ctx, ln, col)
}

// portRouting reports whether init-nat's policy routing for the port's address is in
// place (read-only: the loader's container has no NET_ADMIN).
func portRouting(portFixedIP string) (bool, error) {
	return routing.InPlace(portFixedIP, routing.DefaultTable)
}
