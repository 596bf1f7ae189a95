package product

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	v1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testenv"
	"bnerd.net/vpn-operator/internal/world"
)

// wgGateway is the WireGuard gateway of TestWireGuardOnTheNodeWorld.
var wgGateway = client.ObjectKey{Namespace: world.TenantNamespace, Name: "acme-wg"}

// TestWireGuardOnTheNodeWorld runs a WireGuard gateway (VPNGateway, protocol wireguard)
// on the node world from the released chart and images: its client site's router brings
// its side up with wg-quick (userspace wireguard-go: this kernel has no WireGuard) from
// what `kubectl vpn peer-config --format wireguard` prints; the client's host reaches an
// exposure and the service cluster reaches the client's host through a reverse exposure;
// `kubectl vpn diagnose` finds nothing wrong; a deleted gateway pod brings the traffic
// back, measured as for IPsec.
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
	get := func() *v1.VPNGateway {
		var gw v1.VPNGateway
		if err := w.Kube.Get(ctx, wgGateway, &gw); err != nil {
			t.Fatal(err)
		}
		return &gw
	}
	directory := func() string { return "https://" + vipOf(get().Status.Exposures, "directory") + ":636/" }
	wiki := func() string {
		return "https://" + vipOf(get().Status.ReverseExposures, "wiki") + ":" + world.WGSiteHostPort + "/"
	}

	applied := t.Run("applied WireGuard gateway: the client's wg-quick from peer-config reaches the exposure, the service cluster the reverse exposure", func(t *testing.T) {
		e.t = t
		start := time.Now()
		gw := &v1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Namespace: wgGateway.Namespace, Name: wgGateway.Name}, Spec: v1.VPNGatewaySpec{
			Protocol: v1.VPNProtocolWireGuard,
			WireGuard: &v1.WireGuardSpec{Peers: []v1.WireGuardPeer{{
				Name: "hq", PublicKey: site.Key.PublicKey().String(), AllowedIPs: []string{world.WGSiteLAN},
				Endpoint: &v1.WireGuardEndpoint{Address: world.WGSiteWANAddress, Port: world.WGSiteListenPort},
			}}},
			GatewaySpec: v1.GatewaySpec{
				Exposures: []v1.Exposure{{Name: "directory", Target: v1.Target{Address: world.DirectoryAddress, Ports: []v1.PortSpec{{Port: 636}}}}},
				ReverseExposures: []v1.ReverseExposure{{Name: "wiki", Tunnel: "hq",
					Target: v1.Target{Address: world.WGSiteHostAddress, Ports: []v1.PortSpec{{Port: 8443}}}}},
			},
		}}
		if err := w.Kube.Create(ctx, gw); err != nil {
			t.Fatal(err)
		}
		if err := w.Apply(ctx, "examples/clusterlink.yaml", &v1.ClusterLink{}, ""); err != nil {
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

	t.Run("WireGuard gateway pod deleted: traffic comes back", func(t *testing.T) {
		e.t = t
		for i := range 3 {
			old, err := w.GatewayPod(ctx, wgGateway.Namespace, wgGateway.Name)
			if err != nil || old == nil {
				t.Fatalf("the WireGuard gateway's pod: %v", err)
			}
			u := directory()
			start := time.Now()
			probed := make(chan struct{})
			var back time.Duration
			var backErr error
			go func() {
				back, backErr = backAgainFrom(ctx, world.WGSiteHostNamespace, u, world.DirectoryBody, start)
				close(probed)
			}()
			if err := w.Kube.Delete(ctx, old); err != nil {
				t.Fatal(err)
			}
			e.waitFor("a new pod carries the client's traffic", 3*time.Minute, func() bool {
				p, _ := w.GatewayPod(ctx, wgGateway.Namespace, wgGateway.Name)
				return p != nil && p.UID != old.UID && e.answers(world.WGSiteHostNamespace, u, world.DirectoryBody)
			})
			<-probed
			if backErr != nil {
				t.Fatal(backErr)
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

	t.Run("WireGuard gateway and link deleted: nothing is left", func(t *testing.T) {
		e.t = t
		for _, obj := range []client.Object{get(), &v1.ClusterLink{ObjectMeta: metav1.ObjectMeta{Name: "svc01-link"}}} {
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
			return err == nil && len(left) == 0 && len(pods.Items) == 0
		})
	})
}
