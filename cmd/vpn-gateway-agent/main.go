// Command vpn-gateway-agent runs the gateway pod's agent roles: init-nat (policy routing
// and the NAT/guard ruleset, kept converged), strongswan-loader (swanctl config into
// charon over VICI), status-agent (tunnel state into the gateway's status) and
// ipsec-exporter (Prometheus metrics).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	govici "github.com/strongswan/govici/vici"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/exporter"
	"bnerd.net/vpn-operator/internal/agent/nat"
	"bnerd.net/vpn-operator/internal/agent/routing"
	"bnerd.net/vpn-operator/internal/agent/source"
	"bnerd.net/vpn-operator/internal/agent/status"
	"bnerd.net/vpn-operator/internal/agent/vici"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

const usage = `usage: vpn-gateway-agent <role> [flags]

roles:
  init-nat           policy routing on the port interface and the NAT/guard nftables table
  charon             render strongswan.conf and run charon-systemd in the foreground
  strongswan-loader  load swanctl connections and shared keys into charon over VICI
  status-agent       write tunnel state into the gateway object's status (with
                     --load-secrets-file it also runs the loader, as in the gateway pod)
  ipsec-exporter     serve Prometheus metrics

run "vpn-gateway-agent <role> -h" for the role's flags`

// common are the config-source flags every role shares.
type common struct {
	configFile, swanctlFile, secretsFile string
	kubeconfig, namespace                string
	configMap, secret                    string
}

func (c *common) register(fs *flag.FlagSet, needSecrets bool) {
	fs.StringVar(&c.configFile, "config-file", "", "read "+gatewayconfig.ConfigMapKeyConfig+" from this file (siblings "+gatewayconfig.ConfigMapKeySwanctl+" and "+gatewayconfig.SecretKeySecrets+") instead of the API")
	fs.StringVar(&c.swanctlFile, "swanctl-file", "", "swanctl.conf path with --config-file (default: beside it)")
	if needSecrets {
		fs.StringVar(&c.secretsFile, "secrets-file", "", "secrets.conf path with --config-file (default: beside it)")
		fs.StringVar(&c.secret, "secret", "", "name of the gateway's Secret holding "+gatewayconfig.SecretKeySecrets)
	}
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig (default: in-cluster)")
	fs.StringVar(&c.namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the ConfigMap and Secret (env POD_NAMESPACE)")
	fs.StringVar(&c.configMap, "configmap", "", "name of the gateway's ConfigMap")
}

func (c *common) restConfig() (*rest.Config, error) {
	if c.kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	}
	return rest.InClusterConfig()
}

// run starts the configured source and returns its snapshot channel.
func (c *common) run(ctx context.Context, needSecrets bool) (chan source.Snapshot, error) {
	out := make(chan source.Snapshot, 1)
	if c.configFile != "" {
		f := source.NewFiles(c.configFile, c.swanctlFile, c.secretsFile)
		go func() { _ = f.Run(ctx, out) }()
		return out, nil
	}
	if c.configMap == "" || c.namespace == "" || (needSecrets && c.secret == "") {
		return nil, errors.New("either --config-file or --namespace and --configmap (and --secret) are required")
	}
	rc, err := c.restConfig()
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	a := &source.API{Client: cs, Namespace: c.namespace, ConfigMap: c.configMap}
	if needSecrets {
		a.Secret = c.secret
	}
	go func() {
		if err := a.Run(ctx, out); err != nil {
			log.Printf("config source: %v", err)
		}
	}()
	return out, nil
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
	checker := nat.NewDriftChecker(prog)
	snaps, err := c.run(ctx, false)
	if err != nil {
		return err
	}
	var st exporter.NATState
	var cfg *gatewayconfig.Config
	var model *gatewayconfig.NAT
	record := func(d time.Duration, err error) {
		st.Applies++
		st.LastApplySeconds = d.Seconds()
		st.LastApplyUnixSeconds = time.Now().Unix()
		if err != nil {
			st.ApplyErrors++
		}
		if *stateFile != "" {
			if werr := exporter.WriteNATState(*stateFile, st); werr != nil {
				log.Printf("writing state file: %v", werr)
			}
		}
	}
	routeParams := func() routing.Params {
		p := routing.Params{
			Interface: *iface, PortFixedIP: cfg.PortFixedIP, SubnetCIDR: cfg.SubnetCIDR,
			SubnetGatewayIP: cfg.SubnetGatewayIP, ServiceGatewayAddress: cfg.GatewayAddress,
			Table: *routeTable, Priority: *rulePrio,
		}
		if opts.Guard == nat.GuardInterface {
			p.TunnelInterface = *tunIface
		}
		for _, t := range cfg.Tunnels {
			p.PeerAddresses = append(p.PeerAddresses, t.PeerAddress)
		}
		return p
	}
	apply := func(reason string) {
		d, full, err := prog.Timed(ctx, model)
		record(d, err)
		if err != nil {
			log.Printf("NAT apply (%s) failed after %s: %v", reason, d, err)
			return
		}
		log.Printf("NAT applied (%s, full=%v) in %s", reason, full, d)
	}
	// Forwarding on the port and the tunnel device: a pod's namespace does not
	// necessarily forward (see routing.EnsureForwarding); the tunnel device is recreated
	// whenever charon restarts, so this runs on every tick.
	forwarding := func() {
		if err := routing.EnsureForwarding(*iface, *tunIface); err != nil {
			log.Printf("forwarding: %v", err)
		}
	}
	forwarding()
	tick := time.NewTicker(*drift)
	defer tick.Stop()
	ticks := 0
	routeTick := time.NewTicker(5 * time.Second)
	defer routeTick.Stop()
	for {
		select {
		case <-ctx.Done():
			// The table stays: the guard must outlive the agent.
			return nil
		case s := <-snaps:
			if len(s.Config) == 0 {
				log.Printf("no %s yet", gatewayconfig.ConfigMapKeyConfig)
				continue
			}
			nc, err := gatewayconfig.Unmarshal(s.Config)
			if err != nil {
				// Keep the last good ruleset: dropping it would open the guard.
				record(0, err)
				log.Printf("config rejected, keeping the current ruleset: %v", err)
				continue
			}
			nm, err := gatewayconfig.NATModel(nc)
			if err != nil {
				record(0, err)
				log.Printf("NAT model: %v", err)
				continue
			}
			cfg, model = nc, nm
			if err := routing.Apply(routeParams()); err != nil {
				log.Printf("policy routing: %v", err)
			}
			apply("config")
		case <-tick.C:
			forwarding()
			if model == nil {
				continue
			}
			if prog.Applied() == nil {
				apply("retry")
				continue
			}
			ticks++
			msg, err := checker.Check(*elementEvery <= 1 || ticks%*elementEvery == 0)
			if err != nil {
				log.Printf("drift check: %v", err)
				continue
			}
			if msg != "" {
				log.Printf("drift detected: %s; repairing", msg)
				st.DriftRepairs++
				prog.Invalidate()
				apply("drift")
			}
		case <-routeTick.C:
			if cfg != nil {
				if err := routing.Apply(routeParams()); err != nil {
					log.Printf("policy routing: %v", err)
				}
			}
		}
	}
}

func runLoader(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("strongswan-loader", flag.ExitOnError)
	var c common
	c.register(fs, true)
	sock := fs.String("vici-socket", "/var/run/charon.vici", "charon's VICI socket")
	interval := fs.Duration("interval", 2*time.Second, "how often charon is re-checked (restarts, lost SAs)")
	_ = fs.Parse(args)
	snaps, err := c.run(ctx, true)
	if err != nil {
		return err
	}
	loadLoop(ctx, snaps, *sock, *interval, "")
	return nil
}

// loadLoop keeps charon's connections and shared keys equal to the latest snapshot. With
// secretsFile set, the keys come from that file (the gateway's Secret mounted as a
// volume) instead of the snapshot, so the pod needs no API access to its Secret.
func loadLoop(ctx context.Context, snaps <-chan source.Snapshot, sock string, interval time.Duration, secretsFile string) {
	l := &vici.Loader{Socket: sock, Logf: log.Printf}
	var cur source.Snapshot
	waiting := false
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case cur = <-snaps:
		case <-tick.C:
		}
		if secretsFile != "" {
			data, err := os.ReadFile(secretsFile)
			if err != nil {
				log.Printf("load: reading shared keys: %v", err)
				continue
			}
			cur.Secrets = string(data)
		}
		if !cur.Complete(true) {
			continue
		}
		// IKE may only start once the port's policy routing is in place (init-nat installs
		// it, in whatever order the containers start); SAs from another address are ended.
		if cfg, err := gatewayconfig.Unmarshal(cur.Config); err == nil && cfg.PortFixedIP != "" {
			l.LocalAddress = cfg.PortFixedIP
			if ok, err := routing.InPlace(cfg.PortFixedIP, routing.DefaultTable); !ok {
				if !waiting {
					log.Printf("load: waiting for the port's policy routing before loading connections (%v)", err)
				}
				waiting = true
				continue
			}
			waiting = false
		}
		if _, err := l.Apply(ctx, cur.Swanctl, cur.Secrets); err != nil {
			log.Printf("load: %v", err)
		}
	}
}

// runCharon renders strongswan.conf for the pod's dataplane and replaces itself with
// charon-systemd in the foreground, so charon is the container's main process and its
// exit is the container's exit.
func runCharon(args []string) error {
	fs := flag.NewFlagSet("charon", flag.ExitOnError)
	sock := fs.String("vici-socket", "/var/run/charon.vici", "charon's VICI socket")
	dataplane := fs.String("dataplane", string(gatewayconfig.DataplaneKernel), "kernel (XFRM) or libipsec (userspace ESP over a TUN device)")
	conf := fs.String("conf", "/var/run/charon/strongswan.conf", "where to write the rendered strongswan.conf")
	bin := fs.String("charon", "/usr/sbin/charon-systemd", "charon binary to run")
	_ = fs.Parse(args)
	if gatewayconfig.DataplaneMode(*dataplane) == gatewayconfig.DataplaneLibipsec {
		if err := ensureTUN(); err != nil {
			return err
		}
	}
	text, err := gatewayconfig.RenderStrongswanConf(gatewayconfig.StrongswanOptions{Mode: gatewayconfig.DataplaneMode(*dataplane), VICISocket: *sock})
	if err != nil {
		return err
	}
	if err := os.WriteFile(*conf, []byte(text), 0o644); err != nil {
		return err
	}
	env := append(os.Environ(), "STRONGSWAN_CONF="+*conf)
	return syscall.Exec(*bin, []string{*bin}, env)
}

// tunnelNames tracks the tunnels of the latest valid config.
type tunnelNames struct {
	mu    sync.Mutex
	names []string
	ref   gatewayconfig.GatewayRef
}

func (t *tunnelNames) follow(ctx context.Context, snaps chan source.Snapshot) {
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-snaps:
			cfg, err := gatewayconfig.Unmarshal(s.Config)
			if err != nil {
				log.Printf("config: %v", err)
				continue
			}
			t.mu.Lock()
			t.names = gatewayconfig.ConnectionNames(cfg)
			t.ref = cfg.Gateway
			t.mu.Unlock()
		}
	}
}

func (t *tunnelNames) get() ([]string, gatewayconfig.GatewayRef) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.names...), t.ref
}

func listSAs(sock string) exporter.Source {
	return func(ctx context.Context) (map[string][]vici.IKESA, error) {
		s, err := govici.NewSession(govici.WithSocketPath(sock))
		if err != nil {
			return nil, err
		}
		defer s.Close()
		return vici.ListSAs(ctx, s)
	}
}

// watchEvents calls onEvent for every IKE/child state event; it reconnects when charon
// restarts.
func watchEvents(ctx context.Context, sock string, onEvent func(govici.Event)) {
	for ctx.Err() == nil {
		s, err := govici.NewSession(govici.WithSocketPath(sock))
		if err == nil {
			if err = s.Subscribe("ike-updown", "child-updown", "ike-rekey", "child-rekey"); err == nil {
				ch := make(chan govici.Event, 64)
				s.NotifyEvents(ch)
			loop:
				for {
					select {
					case <-ctx.Done():
						break loop
					case ev, ok := <-ch:
						if !ok {
							break loop
						}
						onEvent(ev)
					}
				}
			}
			s.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func runStatus(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("status-agent", flag.ExitOnError)
	var c common
	c.register(fs, false)
	sock := fs.String("vici-socket", "/var/run/charon.vici", "charon's VICI socket")
	interval := fs.Duration("interval", 10*time.Second, "poll interval besides VICI events")
	loadSecrets := fs.String("load-secrets-file", "", "also load the connections into charon, with the shared keys read from this file")
	_ = fs.Parse(args)
	snaps, err := c.run(ctx, false)
	if err != nil {
		return err
	}
	if *loadSecrets != "" {
		loadSnaps, err := c.run(ctx, false)
		if err != nil {
			return err
		}
		go loadLoop(ctx, loadSnaps, *sock, 2*time.Second, *loadSecrets)
	}
	rc, err := c.restConfig()
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	cl, err := client.New(rc, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	var tn tunnelNames
	go tn.follow(ctx, snaps)
	kick := make(chan struct{}, 1)
	go watchEvents(ctx, *sock, func(govici.Event) {
		select {
		case kick <- struct{}{}:
		default:
		}
	})
	sas := listSAs(*sock)
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-kick:
		}
		names, ref := tn.get()
		if len(names) == 0 {
			continue
		}
		cur, err := sas(ctx)
		if err != nil {
			// charon unreachable: every tunnel is down, which is worth reporting.
			cur = nil
		}
		tunnels, ready := status.Compute(names, cur, time.Now())
		w := &status.Writer{Client: cl, Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name}
		if wrote, err := w.Write(ctx, tunnels, ready); err != nil {
			log.Printf("status: %v", err)
		} else if wrote {
			log.Printf("status: tunnels %s", ready)
		}
	}
}

func runExporter(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ipsec-exporter", flag.ExitOnError)
	var c common
	c.register(fs, false)
	sock := fs.String("vici-socket", "/var/run/charon.vici", "charon's VICI socket")
	listen := fs.String("listen", ":9903", "metrics listen address")
	stateFile := fs.String("nat-state-file", "", "init-nat's state file")
	_ = fs.Parse(args)
	snaps, err := c.run(ctx, false)
	if err != nil {
		return err
	}
	var tn tunnelNames
	go tn.follow(ctx, snaps)
	var mu sync.Mutex
	rekeys := map[string]uint64{}
	go watchEvents(ctx, *sock, func(ev govici.Event) {
		if ev.Name != "ike-rekey" && ev.Name != "child-rekey" {
			return
		}
		mu.Lock()
		for _, k := range ev.Message.Keys() {
			rekeys[k]++
		}
		mu.Unlock()
	})
	col := &exporter.Collector{
		Tunnels:      func() []string { n, _ := tn.get(); return n },
		SAs:          listSAs(*sock),
		NATStateFile: *stateFile,
		Rekeys: func() map[string]uint64 {
			mu.Lock()
			defer mu.Unlock()
			out := map[string]uint64{}
			for k, v := range rekeys {
				out[k] = v
			}
			return out
		},
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	log.Printf("metrics on %s", *listen)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// ensureTUN creates /dev/net/tun, which libipsec opens and container runtimes do not
// provide (the device cgroup allows it; creating the node takes CAP_MKNOD).
func ensureTUN() error {
	const dev = "/dev/net/tun"
	if _, err := os.Stat(dev); err == nil {
		return nil
	}
	if err := os.MkdirAll("/dev/net", 0o755); err != nil {
		return fmt.Errorf("creating /dev/net: %w", err)
	}
	if err := syscall.Mknod(dev, syscall.S_IFCHR|0o666, int(unix.Mkdev(10, 200))); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("creating %s (libipsec needs it; the container needs CAP_MKNOD): %w", dev, err)
	}
	return nil
}
