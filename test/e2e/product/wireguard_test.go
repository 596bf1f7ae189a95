package product

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
	"bnerd.net/vpn-operator/internal/testinfra/world"
)

// wgGateway is the WireGuard gateway of TestWireGuardOnTheNodeWorld.
var wgGateway = client.ObjectKey{Namespace: world.TenantNamespace, Name: "acme-wg"}

// TestWireGuardOnTheNodeWorld runs a WireGuard gateway (VPNGateway, protocol wireguard)
// on the node world from the released chart and images: its client site's router brings
// its side up with wg-quick (userspace wireguard-go: this kernel has no WireGuard) from
// what `kubectl vpn peer-config --format wireguard` prints; the client's host reaches an
// exposure and the service cluster reaches the client's host through a reverse exposure;
// `kubectl vpn diagnose` finds nothing wrong; with the wireguard container killed no
// plaintext to the client's subnet reaches the public segment (and without the guard it
// does); a deleted gateway pod and a powered-off node bring the traffic back, measured as
// for IPsec.
func TestWireGuardOnTheNodeWorld(t *testing.T) {
	requirements(t)
	for _, b := range []string{"wireguard-go", "wg", "wg-quick"} {
		if _, err := exec.LookPath(b); err != nil {
			testenv.SkipDataplane(t, "the WireGuard product e2e needs "+b+" (hack/install-deps.sh)")
		}
	}
	ctrllog.SetLogger(logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	w := bringUp(t, ctx)
	e := &env{t: t, ctx: ctx, w: w}
	if err := w.StartServiceHosts(); err != nil {
		t.Fatal(err)
	}
	site, err := w.StartWireGuardSite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.PrepareTenant(ctx, "unused-by-wireguard"); err != nil {
		t.Fatal(err)
	}
	get := func() *v1alpha1.VPNGateway {
		var gw v1alpha1.VPNGateway
		if err := w.Kube.Get(ctx, wgGateway, &gw); err != nil {
			t.Fatal(err)
		}
		return &gw
	}
	directory := func() string { return "https://" + world.VIPOf(get().Status.Exposures, "directory") + ":636/" }
	wiki := func() string {
		return "https://" + world.VIPOf(get().Status.ReverseExposures, "wiki") + ":" + world.WGSiteHostPort + "/"
	}

	applied := t.Run("applied WireGuard gateway: the client's wg-quick from peer-config reaches the exposure, the service cluster the reverse exposure", func(t *testing.T) {
		e.t = t
		start := time.Now()
		gw := &v1alpha1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Namespace: wgGateway.Namespace, Name: wgGateway.Name}, Spec: v1alpha1.VPNGatewaySpec{
			Protocol: v1alpha1.VPNProtocolWireGuard,
			WireGuard: &v1alpha1.WireGuardSpec{Peers: []v1alpha1.WireGuardPeer{{
				Name: "hq", PublicKey: site.Key.PublicKey().String(), AllowedIPs: []string{world.WGSiteLAN},
				Endpoint: &v1alpha1.WireGuardEndpoint{Address: world.WGSiteWANAddress, Port: world.WGSiteListenPort},
			}}},
			GatewaySpec: v1alpha1.GatewaySpec{
				Exposures: []v1alpha1.Exposure{{Name: "directory", Target: v1alpha1.Target{Address: world.DirectoryAddress, Ports: []v1alpha1.PortSpec{{Port: 636}}}}},
				ReverseExposures: []v1alpha1.ReverseExposure{{Name: "wiki", Tunnel: "hq",
					Target: v1alpha1.Target{Address: world.WGSiteHostAddress, Ports: []v1alpha1.PortSpec{{Port: 8443}}}}},
			},
		}}
		if err := w.Kube.Create(ctx, gw); err != nil {
			t.Fatal(err)
		}
		if err := w.Apply(ctx, "examples/clusterlink.yaml", &v1alpha1.ClusterLink{}, ""); err != nil {
			t.Fatal(err)
		}
		e.waitFor("floating IP, service CIDR and the gateway's public key", 3*time.Minute, func() bool {
			s := get().Status
			return s.FloatingIP != "" && s.ServiceCIDR != "" && s.WireGuard != nil && s.WireGuard.PublicKey != ""
		})
		conf, err := w.KubectlVPN(ctx, nil, "peer-config", wgGateway.Name, "-n", wgGateway.Namespace, "--tunnel", "hq", "--format", "wireguard")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("kubectl vpn peer-config --format wireguard:\n%s", conf)
		if err := site.Up(conf); err != nil {
			t.Fatal(err)
		}
		e.waitFor("the client's host reaches the directory through the tunnel", 3*time.Minute, func() bool {
			return e.answers(world.WGSiteHostNamespace, directory(), world.DirectoryBody)
		})
		e.figure("wireguard: apply -> exposure answering (client host -> directory VIP)", time.Since(start))
		e.waitFor("the service cluster reaches the client's wiki through the reverse exposure", 2*time.Minute, func() bool {
			return e.answers(world.ServiceHostNamespace, wiki(), world.WGSiteHostBody)
		})
		e.figure("wireguard: apply -> reverse exposure answering (svc01 host -> wiki VIP)", time.Since(start))
		e.waitFor("tunnelsReady 1/1", time.Minute, func() bool { return get().Status.TunnelsReady == "1/1" })
		show, _ := site.Show()
		t.Logf("client: wg show\n%s", show)
		if !strings.Contains(show, "latest handshake") || !strings.Contains(show, get().Status.FloatingIP) {
			t.Errorf("the client's interface has no handshake with the gateway's floating IP %s:\n%s", get().Status.FloatingIP, show)
		}
		pod, err := w.GatewayPod(ctx, wgGateway.Namespace, wgGateway.Name)
		if err != nil || pod == nil {
			t.Fatalf("the WireGuard gateway's pod: %v", err)
		}
		for _, c := range pod.Status.ContainerStatuses {
			if c.Name == render.ContainerWireGuard && !strings.HasPrefix(c.Image, w.Registry+"/") {
				t.Errorf("the wireguard container runs %s, not the release's image from %s", c.Image, w.Registry)
			}
			if c.Name == render.ContainerWireGuard && c.Image != w.Images["gateway-wireguard"] {
				t.Errorf("the wireguard container runs %s, want the released %s", c.Image, w.Images["gateway-wireguard"])
			}
		}
	})

	if !applied {
		t.Fatal("the WireGuard gateway never carried the client's traffic: the steps after it need it")
	}

	t.Run("kubectl vpn diagnose finds nothing wrong with the WireGuard gateway", func(t *testing.T) {
		var env []string
		for k, v := range w.OperatorEnv {
			if strings.HasPrefix(k, "OS_") {
				env = append(env, k+"="+v)
			}
		}
		out, err := w.KubectlVPN(ctx, env, "diagnose", wgGateway.Name, "-n", wgGateway.Namespace, "--router", world.OperatorRouter)
		t.Logf("kubectl vpn diagnose:\n%s", out)
		if err != nil {
			t.Errorf("diagnose reports a problem or could not finish: %v", err)
		}
	})

	t.Run("listen port admitted from the peer's endpoint only, by the fabric; a removed rule is restored", func(t *testing.T) {
		e.t = t
		pod, err := w.GatewayPod(ctx, wgGateway.Namespace, wgGateway.Name)
		if err != nil || pod == nil {
			t.Fatalf("the WireGuard gateway's pod: %v", err)
		}
		pid, err := w.PodPID(pod, render.ContainerWireGuard)
		if err != nil {
			t.Fatal(err)
		}
		fip := get().Status.FloatingIP
		port := v1alpha1.DefaultWireGuardListenPort
		// Datagrams to the listen port from a new source port of the peer's endpoint
		// address (not its WireGuard port, so not the tunnel's own flow and its
		// connection state) and from the upstream network, an address no peer has; the
		// capture on the pod's port interface sees what the fabric let through. The
		// capture sees both directions and the peer listens on the same port, so the
		// gateway's own handshakes to the peer (dst port 51820, to the peer's address) are
		// not strangers: only datagrams to an address other than the peer's count.
		send := func(ns string) {
			_, _ = world.Exec(ns, "bash", "-c", fmt.Sprintf("for i in 1 2 3 4 5; do echo probe > /dev/udp/%s/%d; sleep 0.1; done", fip, port))
		}
		fromPeer := fmt.Sprintf("udp dst port %d and src host %s and not src port %d", port, world.WGSiteWANAddress, world.WGSiteListenPort)
		fromStranger := fmt.Sprintf("udp dst port %d and not src host %s and not dst host %s", port, world.WGSiteWANAddress, world.WGSiteWANAddress)
		probe := func(name string) (peer, stranger int) {
			c, err := w.StartCapture(name, "pid:"+pid, render.NIC2Interface)
			if err != nil {
				t.Fatal(err)
			}
			send(world.WGSiteNamespace)
			send(w.Fabric.UpstreamNamespace())
			time.Sleep(500 * time.Millisecond)
			c.Stop()
			p, err := c.Packets(fromPeer)
			if err != nil {
				t.Fatal(err)
			}
			s, err := c.Packets(fromStranger)
			if err != nil {
				t.Fatal(err)
			}
			return len(p), len(s)
		}
		if peer, stranger := probe("listen-port-admitted"); peer == 0 || stranger > 0 {
			t.Fatalf("at the pod's port: %d datagrams from the peer's address (want some), %d from elsewhere (want none)", peer, stranger)
		}

		r, err := w.CloudReader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		page, err := rules.List(r.Network(), rules.ListOpts{SecGroupID: get().Status.SecurityGroupID, Direction: "ingress", Protocol: "udp",
			RemoteIPPrefix: world.WGSiteWANAddress + "/32"}).AllPages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := rules.ExtractRules(page)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != 1 || rs[0].PortRangeMin != int(port) {
			t.Fatalf("want one rule admitting udp/%d from %s/32, got %+v", port, world.WGSiteWANAddress, rs)
		}
		if err := rules.Delete(ctx, r.Network(), rs[0].ID).ExtractErr(); err != nil {
			t.Fatal(err)
		}
		e.waitFor("the peer's new flows dropped without the rule", time.Minute, func() bool {
			peer, _ := probe("listen-port-removed")
			return peer == 0
		})
		gw := get()
		if gw.Annotations == nil {
			gw.Annotations = map[string]string{}
		}
		gw.Annotations["e2e.bnerd.net/poke"] = time.Now().Format(time.RFC3339Nano)
		if err := w.Kube.Update(ctx, gw); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		e.waitFor("the operator restored the rule: the peer's datagrams arrive again", 2*time.Minute, func() bool {
			peer, stranger := probe("listen-port-restored")
			if stranger > 0 {
				t.Fatalf("%d datagrams from an address no peer has reached the pod", stranger)
			}
			return peer > 0
		})
		e.figure("wireguard: reconcile -> listen-port rule restored, admitted", time.Since(start))
	})

	t.Run("wireguard container killed: no plaintext to the client's subnet on the public segment", func(t *testing.T) {
		e.t = t
		pod, err := w.GatewayPod(ctx, wgGateway.Namespace, wgGateway.Name)
		if err != nil || pod == nil {
			t.Fatalf("the WireGuard gateway's pod: %v", err)
		}
		restarts := func() int32 {
			p, _ := w.GatewayPod(ctx, wgGateway.Namespace, wgGateway.Name)
			if p == nil {
				return -1
			}
			for _, c := range p.Status.ContainerStatuses {
				if c.Name == render.ContainerWireGuard {
					return c.RestartCount
				}
			}
			return -1
		}
		traffic := func() func() (int64, int64) {
			return e.requests(request{world.WGSiteHostNamespace, directory(), world.DirectoryBody},
				request{world.ServiceHostNamespace, wiki(), world.WGSiteHostBody})
		}
		backUp := func() {
			e.waitFor("tunnel and traffic back", 3*time.Minute, func() bool {
				return get().Status.TunnelsReady == "1/1" && e.answers(world.WGSiteHostNamespace, directory(), world.DirectoryBody) &&
					e.answers(world.ServiceHostNamespace, wiki(), world.WGSiteHostBody)
			})
		}
		// The pod also opens connections from its port's address to the client's host
		// while the interface is gone: the guard's output rule covers those, and without
		// it they leave in the clear through the port and the router, for certain.
		portIP := get().Status.PortFixedIP
		clientHost := "https://" + world.WGSiteHostAddress + ":" + world.WGSiteHostPort + "/"
		fromPod := func(p *corev1.Pod) {
			_, _ = w.InPod(p, render.ContainerExporter, "curl", "-sk", "--max-time", "1", "--interface", portIP, clientHost)
		}
		const plaintextWG = "ip and net " + world.WGSiteLAN

		// Negative control: the same kill with the guard's rules removed must put
		// plaintext on the public segment, or the capture below proves nothing.
		t.Run("negative control: without the guard the capture sees plaintext", func(t *testing.T) {
			e.t = t
			defer e.unguard(pod, render.WireGuardInterfaces)()
			cap := e.publicCapture("wireguard-kill-unguarded")
			defer cap.Stop()
			stop := traffic()
			time.Sleep(time.Second)
			if err := w.KillContainer(pod, render.ContainerWireGuard); err != nil {
				t.Fatal(err)
			}
			var leaked []string
			e.waitFor("plaintext on the public segment without the guard", time.Minute, func() bool {
				fromPod(pod)
				leaked, _ = cap.Packets(plaintextWG)
				return len(leaked) > 0
			})
			stop()
			t.Logf("without the guard, %d plaintext packets reached the public segment, e.g. %s", len(leaked), leaked[0])
		})
		e.t = t
		e.waitFor("wireguard restarted after the control", 2*time.Minute, func() bool { return restarts() >= 1 })
		backUp()

		pod, _ = w.GatewayPod(ctx, wgGateway.Namespace, wgGateway.Name)
		before := restarts()
		cap := e.publicCapture("wireguard-kill-guarded")
		stop := traffic()
		time.Sleep(time.Second)
		start := time.Now()
		if err := w.KillContainer(pod, render.ContainerWireGuard); err != nil {
			t.Fatal(err)
		}
		// The guarded pod tries its own connections too, from the kill until the new
		// interface is up.
		e.waitFor("wireguard restarted", 2*time.Minute, func() bool {
			fromPod(pod)
			return restarts() > before
		})
		backUp()
		e.figure("wireguard: wireguard container killed -> traffic back", time.Since(start))
		time.Sleep(time.Second)
		ok, failed := stop()
		cap.Stop()
		leaked, err := cap.Packets(plaintextWG)
		if err != nil {
			t.Fatal(err)
		}
		if len(leaked) > 0 {
			t.Errorf("%d plaintext packets to or from the client's subnet on the public segment while the WireGuard interface was gone, e.g. %s", len(leaked), leaked[0])
		}
		all, _ := cap.Packets("ip")
		t.Logf("guarded: %d requests answered, %d not while the interface was gone; %d packets captured, 0 plaintext", ok, failed, len(all))
		if failed == 0 {
			t.Errorf("no request failed while the wireguard container was down: the kill did not interrupt anything, so the capture proves nothing")
		}
	})

	t.Run("WireGuard containers start in any order and restart alone; handshakes only on NIC2", func(t *testing.T) {
		e.startOrdersOf(t, orderedGateway{
			name:       wgGateway.Name,
			containers: []string{render.ContainerInitNAT, render.ContainerWireGuard, render.ContainerStatus},
			wire:       fmt.Sprintf("udp port %d", v1alpha1.DefaultWireGuardListenPort),
			working: func() bool {
				return get().Status.TunnelsReady == "1/1" && e.answers(world.WGSiteHostNamespace, directory(), world.DirectoryBody)
			},
			figurePrefix: "wireguard: ",
		})
	})

	t.Run("WireGuard gateway pod deleted: traffic comes back", func(t *testing.T) {
		e.t = t
		// The operator and the gateway's own template back after the steps before.
		e.waitFor("the gateway converged", 3*time.Minute, func() bool {
			p, _ := w.GatewayPod(ctx, wgGateway.Namespace, wgGateway.Name)
			return p != nil && p.Spec.Containers[0].Command == nil && podReady(p) &&
				e.answers(world.WGSiteHostNamespace, directory(), world.DirectoryBody)
		})
		for i := range 3 {
			old, err := w.GatewayPod(ctx, wgGateway.Namespace, wgGateway.Name)
			if err != nil || old == nil {
				t.Fatalf("the WireGuard gateway's pod: %v", err)
			}
			u := directory()
			start := time.Now()
			backAfter := probeBack(ctx, world.WGSiteHostNamespace, u, world.DirectoryBody, start)
			if err := w.Kube.Delete(ctx, old); err != nil {
				t.Fatal(err)
			}
			e.waitFor("a new pod carries the client's traffic", 3*time.Minute, func() bool {
				p, _ := w.GatewayPod(ctx, wgGateway.Namespace, wgGateway.Name)
				return p != nil && p.UID != old.UID && e.answers(world.WGSiteHostNamespace, u, world.DirectoryBody)
			})
			back, err := backAfter()
			if err != nil {
				t.Fatal(err)
			}
			e.figure("wireguard: gateway pod deleted -> traffic back", back)
			if i == 0 {
				e.waitFor("the reverse exposure answers again", time.Minute, func() bool {
					return e.answers(world.ServiceHostNamespace, wiki(), world.WGSiteHostBody)
				})
			}
			e.waitFor("the replacement pod ready", time.Minute, func() bool {
				p, _ := w.GatewayPod(ctx, wgGateway.Namespace, wgGateway.Name)
				return p != nil && podReady(p)
			})
		}
	})

	// lostNode is the node powered off: its kubelet never finishes the old pod's deletion.
	var lostNode string
	t.Run("WireGuard gateway's node powered off with the operator's leader on it: the gateway moves before NotReady and traffic comes back", func(t *testing.T) {
		e.t = t
		from := get().Status.NodeName
		e.leaderOn(from)
		u := directory()
		start := time.Now()
		backAfter := probeBack(ctx, world.WGSiteHostNamespace, u, world.DirectoryBody, start)
		if err := w.PowerOffNode(from); err != nil {
			t.Fatal(err)
		}
		lostNode = from
		var to string
		readyAtMove := false
		e.waitFor("the gateway moved to another node", 3*time.Minute, func() bool {
			to = get().Status.NodeName
			if to == "" || to == from {
				return false
			}
			var n corev1.Node
			readyAtMove = w.Kube.Get(ctx, client.ObjectKey{Name: from}, &n) == nil && nodeReady(&n)
			return true
		})
		e.figure("wireguard: node powered off -> gateway pinned to another node", time.Since(start))
		if !readyAtMove {
			t.Errorf("node %s was no longer Ready when the gateway moved: the move did not come from the liveness Lease", from)
		}
		e.waitFor("traffic through the moved gateway", 5*time.Minute, func() bool {
			p, _ := w.GatewayPod(ctx, wgGateway.Namespace, wgGateway.Name)
			return p != nil && p.Spec.NodeName == to && e.answers(world.WGSiteHostNamespace, u, world.DirectoryBody)
		})
		back, err := backAfter()
		if err != nil {
			t.Fatal(err)
		}
		e.figure("wireguard: node powered off -> traffic back", back)
		e.waitFor("the reverse exposure answers again", time.Minute, func() bool {
			return e.answers(world.ServiceHostNamespace, wiki(), world.WGSiteHostBody)
		})
	})

	t.Run("key rotated: the client keeps its tunnel on the old key, switches from peer-config to the new key and port, the old key is retired", func(t *testing.T) {
		e.t = t
		old := get().Status.WireGuard
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			gw := get()
			if gw.Annotations == nil {
				gw.Annotations = map[string]string{}
			}
			gw.Annotations[v1alpha1.AnnotationRotateWireGuardKey] = "node-world"
			return w.Kube.Update(ctx, gw)
		})
		if err != nil {
			t.Fatal(err)
		}
		rotated := time.Now()
		e.waitFor("both keys published", time.Minute, func() bool {
			ws := get().Status.WireGuard
			return ws.PreviousPublicKey == old.PublicKey && ws.PublicKey != old.PublicKey && ws.PreviousListenPort == old.ListenPort
		})
		cur := get().Status.WireGuard
		if cur.ListenPort == old.ListenPort || cur.ListenPort == 0 {
			t.Fatalf("the new key is not on the gateway's other port: %+v (before %+v)", cur, old)
		}
		// The client stays on the old key while the kubelet mounts the new one: a request
		// counts as lost when it and its immediate retry both fail.
		requests, lost := 0, 0
		e.waitFor("the pod serves the new key (status.interfacePublicKey)", 5*time.Minute, func() bool {
			requests++
			if !e.answers(world.WGSiteHostNamespace, directory(), world.DirectoryBody) && !e.answers(world.WGSiteHostNamespace, directory(), world.DirectoryBody) {
				lost++
			}
			return get().Status.InterfacePublicKey == cur.PublicKey
		})
		e.figure("wireguard rotation: annotation -> the pod serves the new key beside the old", time.Since(rotated))
		if lost != 0 {
			t.Errorf("the client on the old key lost %d of %d requests while the new key was mounted", lost, requests)
		}
		if !e.answers(world.WGSiteHostNamespace, directory(), world.DirectoryBody) {
			t.Error("the client on the old key gets no answer with both keys served")
		}
		conf, err := w.KubectlVPN(ctx, nil, "peer-config", wgGateway.Name, "-n", wgGateway.Namespace, "--tunnel", "hq", "--format", "wireguard")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"PublicKey = " + cur.PublicKey, fmt.Sprintf(":%d\n", cur.ListenPort), "still served on UDP " + fmt.Sprint(old.ListenPort)} {
			if !strings.Contains(conf, want) {
				t.Errorf("peer-config during the overlap lacks %q:\n%s", want, conf)
			}
		}
		switched := time.Now()
		if err := site.Up(conf); err != nil {
			t.Fatal(err)
		}
		e.waitFor("the client reaches the directory on the new key", 2*time.Minute, func() bool {
			return e.answers(world.WGSiteHostNamespace, directory(), world.DirectoryBody)
		})
		e.figure("wireguard rotation: client switched (wg-quick down/up) -> exposure answering", time.Since(switched))
		e.waitFor("the previous key retired once the peer completed a handshake with the new one", 2*time.Minute, func() bool {
			gw := get()
			c := meta.FindStatusCondition(gw.Status.Conditions, v1alpha1.ConditionWireGuardKeyReady)
			return gw.Status.WireGuard.PreviousPublicKey == "" && c != nil && c.Reason == v1alpha1.ReasonKeyReady
		})
		pod, err := w.GatewayPod(ctx, wgGateway.Namespace, wgGateway.Name)
		if err != nil || pod == nil {
			t.Fatalf("the WireGuard gateway's pod: %v", err)
		}
		retired := time.Now()
		// The kubelet takes the previous key's file away and the wireguard container the
		// old key's device with it.
		oldDevice := "wg0"
		if old.ListenPort != v1alpha1.WireGuardKeyPort(get().Spec.WireGuard, 0) {
			oldDevice = "wg1"
		}
		e.waitFor("the retired key's device gone from the pod", 5*time.Minute, func() bool {
			out, err := w.InPod(pod, render.ContainerInitNAT, "ip", "-o", "link", "show")
			return err == nil && !strings.Contains(out, ": "+oldDevice+":")
		})
		e.figure("wireguard rotation: previous key retired -> its device gone from the pod", time.Since(retired))
		e.waitFor("the reverse exposure answers through the new key", time.Minute, func() bool {
			return e.answers(world.ServiceHostNamespace, wiki(), world.WGSiteHostBody)
		})
	})

	t.Run("WireGuard gateway and link deleted: nothing is left", func(t *testing.T) {
		e.t = t
		for _, obj := range []client.Object{get(), &v1alpha1.ClusterLink{ObjectMeta: metav1.ObjectMeta{Name: "svc01-link"}}} {
			if err := w.Kube.Delete(ctx, obj); err != nil {
				t.Fatal(err)
			}
		}
		var left []string
		e.waitFor("nothing left", 3*time.Minute, func() bool {
			var err error
			left, err = w.Leftovers(ctx, world.TenantNamespace)
			var pods corev1.PodList
			_ = w.Kube.List(ctx, &pods, client.InNamespace(world.TenantNamespace))
			running := 0
			for _, p := range pods.Items {
				if p.Spec.NodeName != lostNode || lostNode == "" {
					running++
				}
			}
			return err == nil && len(left) == 0 && running == 0
		})
	})
}
