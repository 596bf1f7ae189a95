// Command sandbox runs the product locally. By default (root) it runs the whole product
// (product.go, internal/testinfra/world): a control plane and two real nodes, the release pushed
// into a registry the nodes pull from, the OpenStack simulator, the packet fabric, the
// operator installed from the released chart, a client site with its own strongSwan; it applies the example gateway and
// ClusterLink, shows each phase converging, the tunnel up and traffic through it both
// ways, then deletes everything and shows nothing is left.
//
// With --objects-only (no root needed) it runs the lighter sandbox: a real
// kube-apiserver and etcd, the OpenStack simulator seeded with a realistic estate, three
// nodes whose providerIDs match seeded Nova servers, and the operator binary itself. It
// applies an example gateway, shows its progress, prints what it produced in Kubernetes
// and OpenStack, and then (by default) deletes it, checks that nothing is left behind and
// stops everything. With --stay either keeps running and prints how to explore it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	sigsyaml "sigs.k8s.io/yaml"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/conditions"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// The estate the sandbox seeds; examples/sim-estate.yaml holds the same names.
const (
	operatorCredential = "vpn-operator"
	gatewayNetwork     = "vpn-transit"
	externalNetwork    = "public"
	operatorRouter     = "shoot--services--vpn01"
	operatorNamespace  = "bnerd-vpn"
	tenantNamespace    = "tenant-a"
)

// openstackKind is --openstack: which OpenStack the story runs against.
var openstackKind string

var nodes = []struct{ name, serverID string }{
	{"vpn01-worker-a", "11111111-1111-4111-8111-111111111111"},
	{"vpn01-worker-b", "22222222-2222-4222-8222-222222222222"},
	{"vpn01-worker-c", "33333333-3333-4333-8333-333333333333"},
}

func main() {
	stay := flag.Bool("stay", false, "keep everything running after the gateway converged and print how to reach it")
	timeout := flag.Duration("timeout", 3*time.Minute, "how long to wait for the gateway to converge (and the ClusterLink to become Ready)")
	seedPath := flag.String("seed", "examples/sim-estate.yaml", "simulator seed")
	gatewayPath := flag.String("gateway", "examples/ipsecgateway.yaml", "gateway manifest to apply")
	linkPath := flag.String("clusterlink", "examples/clusterlink.yaml", "ClusterLink manifest to apply after the gateway (empty: none)")
	wireGuardPath := flag.String("wireguard", "examples/vpngateway-wireguard.yaml", "WireGuard gateway manifest the whole-product sandbox applies beside the IPsec one, with its own client site (empty: none)")
	objectsOnly := flag.Bool("objects-only", false, "run the objects-only sandbox (API server, simulator, operator binary; no root needed) instead of the whole product")
	flag.StringVar(&openstackKind, "openstack", "sim", "sim: the OpenStack simulator; real: the real OpenStack of hack/openstack.sh (brought up if it is not running; needs root); runs the objects-only story")
	flag.Parse()
	// The client's errors are returned and printed here; controller-runtime's own log
	// would only add its "log.SetLogger(...) was never called" stack dump.
	ctrllog.SetLogger(logr.Discard())

	var err error
	// The packet fabric plugs the simulator's attachments into the nodes; against a real
	// OpenStack the objects-only story runs.
	if *objectsOnly || openstackKind != "sim" {
		err = run(*stay, *timeout, *seedPath, *gatewayPath, *linkPath)
	} else {
		err = runProduct(*stay, *timeout, *gatewayPath, *linkPath, *wireGuardPath)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandbox: %v\n", err)
		os.Exit(1)
	}
}

var started = time.Now()

// step prints a progress line with the time since the sandbox started.
func step(format string, args ...any) {
	fmt.Printf("[%6.1fs] ==> "+format+"\n", append([]any{time.Since(started).Seconds()}, args...)...)
}

func run(stay bool, timeout time.Duration, seedPath, gatewayPath, linkPath string) (err error) {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	work, err := os.MkdirTemp("", "bnerd-sandbox-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	step("building the operator")
	opBin := filepath.Join(work, "bnerd-vpn-operator")
	build := exec.CommandContext(ctx, "go", "build", "-o", opBin, "./cmd/bnerd-vpn-operator")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the operator: %w", err)
	}

	step("starting kube-apiserver and etcd")
	env, err := testenv.Start()
	if err != nil {
		return err
	}
	defer func() {
		step("stopping the control plane")
		if stopErr := env.Stop(); stopErr != nil && err == nil {
			err = stopErr
		}
	}()
	kubeconfig, err := env.WriteKubeConfig(work)
	if err != nil {
		return err
	}
	c := env.Client

	os1, err := startCloud(ctx, openstackKind, seedPath)
	if err != nil {
		return err
	}
	defer os1.close()
	osEnv := os1.env()

	step("creating namespaces, nodes and the pre-shared key")
	if err := seedCluster(ctx, c, os1); err != nil {
		return err
	}

	step("starting the operator")
	logPath := filepath.Join(work, "operator.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	op := exec.Command(opBin, "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0")
	op.Env = append(os.Environ(), osEnv...)
	op.Env = append(op.Env,
		"KUBECONFIG="+kubeconfig,
		"POD_NAMESPACE="+operatorNamespace,
		"IPSEC_GATEWAY_NETWORK="+gatewayNetwork,
		"IPSEC_EXTERNAL_NETWORK="+externalNetwork,
		"IPSEC_ROUTER_ID="+operatorRouter,
		"IPSEC_INTERNAL_SOURCE_CIDRS=10.251.0.0/16",
		"IPSEC_RESYNC_INTERVAL=1m",
	)
	op.Stdout, op.Stderr = logFile, logFile
	if err := op.Start(); err != nil {
		return err
	}
	defer func() {
		_ = op.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = op.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = op.Process.Kill()
			<-done
		}
	}()

	step("applying %s", gatewayPath)
	gw := &v1alpha1.IPsecGateway{}
	if err := apply(ctx, c, gatewayPath, gw, tenantNamespace); err != nil {
		return err
	}
	// No kubelet runs here: the gateway converges (every phase True), but its pod never
	// runs, so Ready stays False with PodReady's reason, as it would in a real cluster.
	if err := waitReady(ctx, c, gw, func() []metav1.Condition { return gw.Status.Conditions }, v1alpha1.GatewayPhaseConditionTypes, timeout, objectsOnlyNotReady); err != nil {
		fmt.Printf("\noperator log (%s):\n", logPath)
		tail(logPath, 40)
		return err
	}
	step("gateway status (conditions shown above)")
	st := gw.Status.DeepCopy()
	st.Conditions = nil
	out, _ := sigsyaml.Marshal(st)
	fmt.Println(indent(string(out)))

	var link *v1alpha1.ClusterLink
	if linkPath != "" {
		step("applying %s", linkPath)
		link = &v1alpha1.ClusterLink{}
		if err := apply(ctx, c, linkPath, link, ""); err != nil {
			return err
		}
		if err := waitReady(ctx, c, link, func() []metav1.Condition { return link.Status.Conditions }, []string{v1alpha1.ConditionReady}, timeout, nil); err != nil {
			fmt.Printf("\noperator log (%s):\n", logPath)
			tail(logPath, 40)
			return err
		}
		step("ClusterLink status (conditions shown above)")
		ls := link.Status.DeepCopy()
		ls.Conditions = nil
		out, _ := sigsyaml.Marshal(ls)
		fmt.Println(indent(string(out)))
	}
	step("OpenStack objects the operator produced")
	os1.print(ctx)

	if stay {
		// Written outside the work dir, which is removed on exit, so a second shell can
		// keep using them while the sandbox runs.
		keep, err := os.MkdirTemp("", "bnerd-sandbox-keep-")
		if err != nil {
			return err
		}
		// The env file carries the simulator's credential: remove it when the sandbox stops.
		defer os.RemoveAll(keep)
		envPath := filepath.Join(keep, "env")
		kc := filepath.Join(keep, "kubeconfig")
		_ = os.WriteFile(kc, env.KubeConfig(), 0o600)
		lines := append([]string{"KUBECONFIG=" + kc}, osEnv...)
		_ = os.WriteFile(envPath, []byte("export "+strings.Join(lines, "\nexport ")+"\n"), 0o600)
		step("the sandbox stays up; press Ctrl-C to stop it")
		fmt.Printf("    source %s\n", envPath)
		fmt.Printf("    kubectl (built in %s) get ipsecgw -A\n", env.BinDir)
		fmt.Printf("    operator log: %s\n", logPath)
		<-ctx.Done()
		return nil
	}

	if link != nil {
		step("deleting the ClusterLink")
		if err := deleteAndWait(ctx, c, link, timeout); err != nil {
			return err
		}
	}
	step("deleting the gateway")
	if err := deleteAndWait(ctx, c, gw, timeout); err != nil {
		return err
	}
	left := os1.leftovers(ctx)
	if len(left) > 0 {
		return fmt.Errorf("the operator left OpenStack objects behind: %s", strings.Join(left, "; "))
	}
	step("the gateway and the ClusterLink are gone and left nothing in OpenStack; stopping")
	return nil
}

func seedCluster(ctx context.Context, c client.Client, os1 cloud) error {
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}},
		// Tenant acme's namespace: examples/vpntenantpolicy.yaml governs it.
		{ObjectMeta: metav1.ObjectMeta{Name: tenantNamespace, Labels: map[string]string{v1alpha1.LabelTenant: "acme"}}},
	} {
		if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	if err := apply(ctx, c, "examples/vpntenantpolicy.yaml", &v1alpha1.VPNTenantPolicy{}, ""); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for _, n := range nodes {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: map[string]string{"kubernetes.io/hostname": n.name}},
			Spec:       corev1.NodeSpec{ProviderID: "openstack:///" + os1.serverID(n.name)},
		}
		if err := c.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		// No kubelet runs here, so the sandbox reports the nodes Ready itself.
		node.Status.Conditions = []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
		}}
		if err := c.Status().Update(ctx, node); err != nil {
			return err
		}
	}
	psk := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "hq-psk", Namespace: tenantNamespace},
		StringData: map[string]string{"psk": "sandbox-only-" + fmt.Sprint(time.Now().UnixNano())},
	}
	if err := c.Create(ctx, psk); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// apply creates the object of a one-document manifest; namespace is the default for a
// namespaced object that names none.
func apply(ctx context.Context, c client.Client, path string, obj client.Object, namespace string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := yaml.NewYAMLOrJSONDecoder(f, 4096).Decode(obj); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if obj.GetNamespace() == "" {
		obj.SetNamespace(namespace)
	}
	return c.Create(ctx, obj)
}

// objectsOnlyNotReady says why a converged gateway of the objects-only sandbox is not
// Ready: its nodes are API objects that no kubelet serves.
func objectsOnlyNotReady(*metav1.Condition) string {
	return "the objects-only sandbox's nodes are API objects without a kubelet, so no gateway pod runs"
}

// waitReady re-reads obj and prints every change of its conditions until every condition
// of want is True for its current generation. Once converged, a Ready that is not True is
// printed with what notReady says it waits for (nil: nothing is said).
func waitReady(ctx context.Context, c client.Client, obj client.Object, conds func() []metav1.Condition, want []string, timeout time.Duration, notReady func(*metav1.Condition) string) error {
	key := client.ObjectKeyFromObject(obj)
	kind := fmt.Sprintf("%T", obj)[len("*v1alpha1."):]
	name := key.String()
	if key.Namespace == "" {
		name = key.Name
	}
	what := "Ready"
	if len(want) > 1 || want[0] != v1alpha1.ConditionReady {
		what = "converged"
	}
	deadline := time.Now().Add(timeout)
	seen := map[string]string{}
	start := time.Now()
	for {
		if err := c.Get(ctx, key, obj); err != nil {
			return err
		}
		for _, cond := range conds() {
			line := fmt.Sprintf("%s=%s %s %s", cond.Type, cond.Status, cond.Reason, cond.Message)
			if seen[cond.Type] != line {
				seen[cond.Type] = line
				fmt.Printf("    %6.1fs  %-23s %-7s %-26s %s\n", time.Since(start).Seconds(), cond.Type, cond.Status, cond.Reason, cond.Message)
			}
		}
		done := true
		for _, t := range want {
			done = done && conditions.IsTrue(conds(), t, obj.GetGeneration())
		}
		if done {
			step("%s %s is %s after %.1fs", kind, name, what, time.Since(start).Seconds())
			if r := conditions.Get(conds(), v1alpha1.ConditionReady); what == "converged" && r != nil && r.Status != metav1.ConditionTrue && notReady != nil {
				step("%s %s: Ready=%s/%s (%s)", kind, name, r.Status, r.Reason, notReady(r))
			}
			return nil
		}
		if time.Now().After(deadline) {
			// The conditions still missing, in the error: it is printed last, after the
			// teardown's lines, where a truncated log still shows it.
			var missing []string
			for _, t := range want {
				if !conditions.IsTrue(conds(), t, obj.GetGeneration()) {
					line := seen[t]
					if line == "" {
						line = t + " not reported"
					}
					missing = append(missing, line)
				}
			}
			return fmt.Errorf("%s %s not %s after %s; not yet: %s", kind, name, what, timeout, strings.Join(missing, "; "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// deleteAndWait deletes obj and waits until its finalizer has run and it is gone.
func deleteAndWait(ctx context.Context, c client.Client, obj client.Object, timeout time.Duration) error {
	if err := c.Delete(ctx, obj); err != nil {
		return err
	}
	key := client.ObjectKeyFromObject(obj)
	deadline := time.Now().Add(timeout)
	for {
		err := c.Get(ctx, key, obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: the finalizer did not finish in time", key)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// tagged reports whether the operator made the object: the seam's own owner tag.
func tagged(tags []string) bool { return openstack.HasTags(tags, openstack.TagManaged) }

func printOpenStack(s *openstacksim.Server) {
	for _, p := range s.Ports() {
		if !tagged(p.Tags) {
			continue
		}
		var ips []string
		for _, f := range p.FixedIPs {
			ips = append(ips, f.IPAddress)
		}
		var pairs []string
		for _, a := range p.AllowedAddressPairs {
			pairs = append(pairs, a.IPAddress)
		}
		fmt.Printf("    port %s  %s  mac %s  device %s  allowed-address-pairs %v\n", p.ID, strings.Join(ips, ","), p.MACAddress, p.DeviceID, pairs)
	}
	for _, f := range s.FloatingIPs() {
		if tagged(f.Tags) {
			fmt.Printf("    floating IP %s -> port %s\n", f.FloatingIPAddress, f.PortID)
		}
	}
	for _, g := range s.SecurityGroups() {
		if !tagged(g.Tags) {
			continue
		}
		fmt.Printf("    security group %s\n", g.Name)
		var rules []string
		for _, r := range g.Rules {
			if r.Direction != "ingress" {
				continue
			}
			proto := r.Protocol
			if proto == "" {
				proto = "any"
			}
			rules = append(rules, fmt.Sprintf("      ingress %s %d-%d from %s", proto, r.PortRangeMin, r.PortRangeMax, r.RemoteIPPrefix))
		}
		sort.Strings(rules)
		fmt.Println(strings.Join(rules, "\n"))
	}
	for _, r := range s.Routers() {
		for _, rt := range r.Routes {
			fmt.Printf("    router %s route %s via %s\n", r.Name, rt.Destination, rt.NextHop)
		}
	}
	for _, n := range nodes {
		if ifs := s.ServerInterfaces(n.serverID); len(ifs) > 0 {
			fmt.Printf("    server %s (%s) interfaces %v\n", n.name, n.serverID, ifs)
		}
	}
}

func leftovers(s *openstacksim.Server) []string {
	var left []string
	for _, p := range s.Ports() {
		if tagged(p.Tags) {
			left = append(left, "port "+p.ID)
		}
	}
	for _, f := range s.FloatingIPs() {
		if tagged(f.Tags) {
			left = append(left, "floating IP "+f.FloatingIPAddress)
		}
	}
	for _, g := range s.SecurityGroups() {
		if tagged(g.Tags) {
			left = append(left, "security group "+g.ID)
		}
	}
	for _, r := range s.Routers() {
		for _, rt := range r.Routes {
			if strings.HasPrefix(rt.Destination, "100.64.") || rt.Destination == "10.251.0.0/16" {
				left = append(left, fmt.Sprintf("route %s via %s on %s", rt.Destination, rt.NextHop, r.Name))
			}
		}
	}
	return left
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

func tail(path string, n int) {
	data, err := os.ReadFile(path)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	fmt.Println(indent(strings.Join(lines, "\n")))
}
