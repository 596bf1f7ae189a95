package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testinfra/fabric"
	"bnerd.net/vpn-operator/internal/testinfra/world"
)

// productNotReady says why a gateway whose pod is ready (PodReady is among the
// conditions waited for) is not Ready yet: its tunnel needs the client's side, which the
// sandbox's client site configures only now.
func productNotReady(r *metav1.Condition) string {
	if r.Reason == v1alpha1.ReasonTunnelsDown || r.Reason == v1alpha1.ReasonTunnelsNotReported {
		return "the gateway pod runs on its node; the tunnel waits for the client site, which configures its side next"
	}
	return "the gateway pod runs on its node; Ready waits for: " + r.Message
}

// runProduct is the full sandbox: the whole product on this machine (internal/testinfra/world) with
// the examples applied, a client's tunnel carrying traffic both ways, and everything
// deleted and checked gone at the end. It needs root.
func runProduct(stay bool, timeout time.Duration, gatewayPath, linkPath, wireGuardPath string) (err error) {
	if why := world.Requirements(); why != "" {
		return fmt.Errorf("%s; run `make sandbox SANDBOX_ARGS=--objects-only` for the objects-only sandbox", why)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	step("starting the product world: control plane and two real nodes, the release pushed to the world's registry, OpenStack simulator, packet fabric, the operator installed from the released chart (helm install oci://...)")
	w, err := world.Up(ctx, world.Options{Progress: func(format string, args ...any) { fmt.Printf("    "+format+"\n", args...) }})
	if err != nil {
		return err
	}
	keepLogs := false
	defer func() {
		step("stopping the world")
		if derr := w.Down(); derr != nil && err == nil {
			err = derr
		}
		if err != nil || keepLogs {
			fmt.Printf("    logs kept in %s\n", w.Dir())
		} else {
			_ = os.RemoveAll(w.Dir())
		}
	}()
	fail := func(e error) error {
		if out, lerr := w.KubectlRun(context.Background(), "logs", "-n", world.OperatorNamespace, "deploy/"+world.ReleaseName, "--tail", "30"); lerr == nil {
			fmt.Printf("\noperator log (last lines):\n%s\n", indent(out))
		}
		return e
	}
	for _, p := range w.Timings {
		fmt.Printf("    %-75s %6.1fs\n", p.Phase, p.Duration.Seconds())
	}
	step("release %s in the world's registry %s: the operator installed with helm install %s --version %s; the nodes pull %s, %s, %s, %s",
		w.Release.Version, w.Registry, w.Release.Chart, w.Release.Version, w.Images["operator"], w.Images["gateway"], w.Images["gateway-wireguard"], w.Images["status-agent"])

	step("service cluster hosts: the portal %s:443 in svc01, the directory %s:636 in vpn01 (HTTPS)", world.ServiceHostAddress, world.DirectoryAddress)
	if err := w.StartServiceHosts(); err != nil {
		return err
	}
	step("client site: its own strongSwan at %s, configured by hand; host %s serving :%s", world.SiteWANAddress, world.SiteHostAddress, world.SiteHostPort)
	site, err := w.StartSite(ctx)
	if err != nil {
		return err
	}
	psk := fmt.Sprintf("sandbox-only-%d", time.Now().UnixNano())
	if err := w.PrepareTenant(ctx, psk); err != nil {
		return err
	}

	step("applying %s", gatewayPath)
	applied := time.Now()
	gw := &v1alpha1.IPsecGateway{}
	if err := w.Apply(ctx, gatewayPath, gw, world.TenantNamespace); err != nil {
		return err
	}
	// Ready also needs the tunnel, which needs the client's side: wait for the objects and
	// the pod, then let the client configure, then wait for Ready.
	converged := append(append([]string{}, v1alpha1.GatewayPhaseConditionTypes...), v1alpha1.ConditionPodReady)
	if err := waitReady(ctx, w.Kube, gw, func() []metav1.Condition { return gw.Status.Conditions }, converged, timeout, productNotReady); err != nil {
		return fail(err)
	}
	step("the client configures its side by hand: remote %s (also its IKE identity), remote_ts %s, the pre-shared key", gw.Status.FloatingIP, gw.Status.ServiceCIDR)
	if err := site.Configure(gw.Status.FloatingIP, gw.Status.ServiceCIDR, psk); err != nil {
		return err
	}
	if err := world.Poll(ctx, 100*time.Millisecond, timeout, "tunnelsReady 1/1", func() (bool, error) {
		g, err := w.Gateway(ctx)
		if err == nil {
			gw = g
		}
		return err == nil && gw.Status.TunnelsReady == "1/1", nil
	}); err != nil {
		return fail(err)
	}
	step("tunnel up: tunnelsReady %s, %.1fs after the apply", gw.Status.TunnelsReady, time.Since(applied).Seconds())
	if err := waitReady(ctx, w.Kube, gw, func() []metav1.Condition { return gw.Status.Conditions }, []string{v1alpha1.ConditionReady}, timeout, nil); err != nil {
		return fail(err)
	}
	// The status agent can report the tunnel before the kubelet reports the pod Running.
	var pod *corev1.Pod
	if err := world.Poll(ctx, 100*time.Millisecond, timeout, "the gateway pod Running", func() (bool, error) {
		p, err := w.GatewayPod(ctx, world.TenantNamespace, gw.Name)
		pod = p
		return p != nil, err
	}); err != nil {
		return fail(err)
	}
	net1, _ := w.InPod(pod, render.ContainerExporter, "ip", "-br", "link", "show", render.NIC2Interface)
	step("gateway pod %s is %s on %s (pinned: status.nodeName %s); in the pod: %s", pod.Name, pod.Status.Phase, pod.Spec.NodeName, gw.Status.NodeName, strings.Join(strings.Fields(net1), " "))
	if !strings.Contains(strings.ToLower(net1), strings.ToLower(gw.Status.PortMACAddress)) {
		return fail(fmt.Errorf("net1 in the pod does not carry the port's MAC %s", gw.Status.PortMACAddress))
	}
	out, _ := sigsyaml.Marshal(gw.Status.Tunnels)
	fmt.Println(indent(strings.TrimSpace(string(out))))

	var link *v1alpha1.ClusterLink
	if linkPath != "" {
		step("applying %s", linkPath)
		link = &v1alpha1.ClusterLink{}
		if err := w.Apply(ctx, linkPath, link, ""); err != nil {
			return err
		}
		if err := waitReady(ctx, w.Kube, link, func() []metav1.Condition { return link.Status.Conditions }, []string{v1alpha1.ConditionReady}, timeout, nil); err != nil {
			return fail(err)
		}
	}

	requests := []request{
		{"client host " + world.SiteHostAddress, world.SiteHostNamespace, "exposure portal (svc01)", "https://" + world.VIPOf(gw.Status.Exposures, "portal") + ":443/", world.ServiceHostBody},
		{"client host " + world.SiteHostAddress, world.SiteHostNamespace, "exposure directory (vpn01)", "https://" + world.VIPOf(gw.Status.Exposures, "directory") + ":636/", world.DirectoryBody},
		{"service cluster host " + world.ServiceHostAddress, world.ServiceHostNamespace, "reverse exposure erp (client)", "https://" + world.VIPOf(gw.Status.ReverseExposures, "erp") + ":" + world.SiteHostPort + "/", world.SiteHostBody},
	}
	if link == nil {
		requests = requests[1:2]
	}
	if err := answered(ctx, timeout, "the tunnel", requests); err != nil {
		return fail(err)
	}
	if out, err := site.Swanctl("--list-sas"); err == nil {
		step("the client's view (swanctl --list-sas at the client site)")
		fmt.Println(indent(strings.TrimSpace(out)))
	}

	var wg *v1alpha1.VPNGateway
	if wireGuardPath != "" {
		if wg, err = runWireGuard(ctx, w, timeout, wireGuardPath); err != nil {
			return fail(err)
		}
	}

	step("OpenStack objects the operator produced (read through the OpenStack API)")
	if err := printCloud(ctx, w); err != nil {
		return err
	}

	if stay {
		keepLogs = true
		step("the sandbox stays up; press Ctrl-C to delete everything and stop")
		fmt.Printf("    export KUBECONFIG=%s   # kubectl: %s\n", w.KubeConfig, w.Kubectl)
		fmt.Printf("    ip netns exec %s curl -k https://%s/         # the client host through the tunnel\n", world.SiteHostNamespace, world.VIPOf(gw.Status.Exposures, "portal"))
		if wg != nil {
			fmt.Printf("    ip netns exec %s curl -k https://%s/         # the WireGuard client host through its tunnel\n", world.WGSiteHostNamespace, world.VIPOf(wg.Status.Exposures, "portal"))
		}
		fmt.Printf("    namespaces: nodes %s, fabric %s, upstream %s, client %s/%s, WireGuard client %s/%s\n", nodeNamespaces(w), w.Fabric.FabricNamespace(), w.Fabric.UpstreamNamespace(), world.SiteNamespace, world.SiteHostNamespace, world.WGSiteNamespace, world.WGSiteHostNamespace)
		<-ctx.Done()
		ctx = context.Background()
	}

	if link != nil {
		step("deleting the ClusterLink")
		if err := deleteAndWait(ctx, w.Kube, link, timeout); err != nil {
			return fail(err)
		}
	}
	step("deleting the gateway")
	if err := deleteAndWait(ctx, w.Kube, gw, timeout); err != nil {
		return fail(err)
	}
	if wg != nil {
		step("deleting the WireGuard gateway")
		if err := deleteAndWait(ctx, w.Kube, wg, timeout); err != nil {
			return fail(err)
		}
	}
	var left []string
	err = world.Poll(ctx, 250*time.Millisecond, timeout, "nothing left", func() (bool, error) {
		l, err := w.Leftovers(ctx, world.TenantNamespace)
		left = l
		return err == nil && len(l) == 0, err
	})
	if err != nil {
		return fail(fmt.Errorf("left behind: %s (%v)", strings.Join(left, "; "), err))
	}
	step("nothing is left: no OpenStack port, floating IP, security group or route of the gateway or the link; no NIC stand-in, XFRM state, nftables table or gateway container on any node; no gateway object in Kubernetes")
	return nil
}

// request is one request through a tunnel: from a namespace, and the body that means
// it answered.
type request struct{ from, fromNS, what, url, want string }

// answered polls each request until it answers, and prints the answer.
func answered(ctx context.Context, timeout time.Duration, through string, requests []request) error {
	for _, r := range requests {
		var body string
		err := world.Poll(ctx, 200*time.Millisecond, timeout, r.what+" answering", func() (bool, error) {
			b, err := world.Get(ctx, r.fromNS, r.url, 2*time.Second)
			body = b
			return err == nil && strings.HasPrefix(b, r.want), nil
		})
		if err != nil {
			return err
		}
		step("%s -> %s (%s) through %s: %q", r.from, r.url, r.what, through, body)
	}
	return nil
}

func nodeNamespaces(w *world.World) string {
	var out []string
	for _, n := range w.Nodes {
		out = append(out, n.Namespace)
	}
	return strings.Join(out, ", ")
}

// printCloud prints what the operator made, as the fabric reads it.
func printCloud(ctx context.Context, w *world.World) error {
	r, err := fabric.NewReader(ctx, fabric.Credential{AuthURL: w.AdminEnv["OS_AUTH_URL"], Region: w.AdminEnv["OS_REGION_NAME"],
		ID: w.AdminEnv["OS_APPLICATION_CREDENTIAL_ID"], Secret: w.AdminEnv["OS_APPLICATION_CREDENTIAL_SECRET"]})
	if err != nil {
		return err
	}
	snap, err := r.Read(ctx)
	if err != nil {
		return err
	}
	tagged := func(t []string) bool { return openstack.HasTags(t, openstack.TagManaged) }
	servers := map[string]string{}
	for _, n := range w.Nodes {
		servers[n.ServerID] = n.Name
	}
	for _, p := range snap.Ports {
		if !tagged(p.Tags) {
			continue
		}
		var ips, pairs []string
		for _, f := range p.FixedIPs {
			ips = append(ips, f.IPAddress)
		}
		for _, a := range p.AllowedAddressPairs {
			pairs = append(pairs, a.IPAddress)
		}
		where := p.DeviceOwner
		if n, ok := servers[p.DeviceID]; ok {
			where = "attached to " + n + "'s server"
		}
		fmt.Printf("    port %s  %s  mac %s  %s  allowed-address-pairs %v\n", p.ID, strings.Join(ips, ","), p.MACAddress, where, pairs)
	}
	for _, f := range snap.FloatingIPs {
		if tagged(f.Tags) {
			fmt.Printf("    floating IP %s -> %s\n", f.FloatingIP, f.FixedIP)
		}
	}
	for _, g := range snap.SecurityGroups {
		if !tagged(g.Tags) {
			continue
		}
		var rules []string
		for _, x := range g.Rules {
			if x.Direction != "ingress" {
				continue
			}
			proto := x.Protocol
			if proto == "" {
				proto = "any"
			}
			rules = append(rules, fmt.Sprintf("      ingress %s %d-%d from %s", proto, x.PortRangeMin, x.PortRangeMax, x.RemoteIPPrefix))
		}
		sort.Strings(rules)
		fmt.Printf("    security group %s (enforced on the port by the fabric)\n%s\n", g.Name, strings.Join(rules, "\n"))
	}
	for _, rt := range snap.Routers {
		for _, x := range rt.Routes {
			fmt.Printf("    router %s route %s via %s\n", rt.Name, x.DestinationCIDR, x.NextHop)
		}
	}
	return nil
}
