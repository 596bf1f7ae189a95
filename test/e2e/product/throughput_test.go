package product

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/testinfra/world"
	"bnerd.net/vpn-operator/test/e2e/netns"
)

// throughputPort is the iperf3 server's port on the directory host, exposed by both
// gateways.
const throughputPort = 5201

// throughputRounds is how many IPsec/WireGuard pairs BenchmarkNodeWorldThroughput runs.
const throughputRounds = 3

// BenchmarkNodeWorldThroughput measures IPsec and WireGuard side by side through the node
// world: both gateways from the released chart and images on the real nodes, each with
// an exposure of an iperf3 server on the directory host (vpn01), the IPsec client site
// (strongSwan, configured by hand) and the WireGuard one (wg-quick from peer-config) each
// running iperf3 against its gateway's virtual IP, alternately, so each pair sees the
// same machine within half a minute. Both dataplanes are userspace here (libipsec,
// wireguard-go): this kernel has neither ESP nor WireGuard. A harness, run by hand as
// root:
//
//	go test -count=1 -run XXX -bench NodeWorldThroughput -benchtime 1x -timeout 30m ./test/e2e/product
//
// It reports Mbit/s and the ratio, per pair and as medians; figures go to
// docs/benchmarks.md. Nothing asserts them.
func BenchmarkNodeWorldThroughput(b *testing.B) {
	requirements(b)
	for _, bin := range []string{"iperf3", "wireguard-go", "wg", "wg-quick"} {
		if _, err := exec.LookPath(bin); err != nil {
			b.Fatalf("needs %s (hack/install-deps.sh)", bin)
		}
	}
	ctrllog.SetLogger(logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	w := bringUp(b, ctx)
	e := &env{t: b, ctx: ctx, w: w}
	e.prepare()
	wgSite, err := w.StartWireGuardSite(ctx)
	if err != nil {
		b.Fatal(err)
	}
	iperf := exec.Command("ip", "netns", "exec", world.DirectoryNamespace, "iperf3", "-s", "-B", world.DirectoryAddress, "-p", fmt.Sprint(throughputPort))
	if err := iperf.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = iperf.Process.Kill(); _ = iperf.Wait() }()
	exposure := v1alpha1.Exposure{Name: "iperf", Target: v1alpha1.Target{Address: world.DirectoryAddress, Ports: []v1alpha1.PortSpec{{Port: throughputPort}}}}

	ipsec := &v1alpha1.IPsecGateway{}
	if err := w.Load("examples/ipsecgateway.yaml", ipsec, world.TenantNamespace); err != nil {
		b.Fatal(err)
	}
	ipsec.Spec.Exposures = append(ipsec.Spec.Exposures, exposure)
	if err := w.Kube.Create(ctx, ipsec); err != nil {
		b.Fatal(err)
	}
	wg := &v1alpha1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Namespace: wgGateway.Namespace, Name: wgGateway.Name}, Spec: v1alpha1.VPNGatewaySpec{
		Protocol: v1alpha1.VPNProtocolWireGuard,
		WireGuard: &v1alpha1.WireGuardSpec{Peers: []v1alpha1.WireGuardPeer{{
			Name: "hq", PublicKey: wgSite.Key.PublicKey().String(), AllowedIPs: []string{world.WGSiteLAN},
			Endpoint: &v1alpha1.WireGuardEndpoint{Address: world.WGSiteWANAddress, Port: world.WGSiteListenPort},
		}}},
		GatewaySpec: v1alpha1.GatewaySpec{Exposures: []v1alpha1.Exposure{exposure}},
	}}
	if err := w.Kube.Create(ctx, wg); err != nil {
		b.Fatal(err)
	}
	e.waitFor("both gateways' floating IPs, service CIDRs and the WireGuard key", 3*time.Minute, func() bool {
		_ = w.Kube.Get(ctx, client.ObjectKeyFromObject(ipsec), ipsec)
		_ = w.Kube.Get(ctx, wgGateway, wg)
		return ipsec.Status.FloatingIP != "" && ipsec.Status.ServiceCIDR != "" && wg.Status.FloatingIP != "" &&
			wg.Status.ServiceCIDR != "" && wg.Status.WireGuard != nil && wg.Status.WireGuard.PublicKey != ""
	})
	if err := e.site.Configure(ipsec.Status.FloatingIP, ipsec.Status.ServiceCIDR, e.psk); err != nil {
		b.Fatal(err)
	}
	conf, err := w.KubectlVPN(ctx, nil, "peer-config", wg.Name, "-n", wg.Namespace, "--tunnel", "hq", "--format", "wireguard")
	if err != nil {
		b.Fatal(err)
	}
	if err := wgSite.Up(conf); err != nil {
		b.Fatal(err)
	}
	_ = w.Kube.Get(ctx, client.ObjectKeyFromObject(ipsec), ipsec)
	directory := "https://" + world.VIPOf(ipsec.Status.Exposures, "directory") + ":636/"
	e.waitFor("the IPsec client's host reaches the directory", 3*time.Minute, func() bool {
		return e.answers(world.SiteHostNamespace, directory, world.DirectoryBody)
	})
	_ = w.Kube.Get(ctx, wgGateway, wg)
	ipsecVIP, wgVIP := world.VIPOf(ipsec.Status.Exposures, "iperf"), world.VIPOf(wg.Status.Exposures, "iperf")
	e.waitFor("the WireGuard tunnel up", 3*time.Minute, func() bool {
		_ = w.Kube.Get(ctx, wgGateway, wg)
		return wg.Status.TunnelsReady == "1/1"
	})
	ipsecNode, wgNode := ipsec.Status.NodeName, wg.Status.NodeName

	run := func(ns, vip string) float64 {
		var out string
		var err error
		// The first attempt after a tunnel came up can meet the server still busy with
		// the previous client: try a few times.
		for range 5 {
			out, err = world.Exec(ns, "iperf3", "-c", vip, "-p", fmt.Sprint(throughputPort), "-t", "8", "-J")
			if err == nil {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil {
			b.Fatalf("iperf3 from %s to %s: %v\n%s", ns, vip, err, out)
		}
		mbits, err := netns.IperfMbits(out)
		if err != nil {
			b.Fatal(err)
		}
		return mbits
	}
	var ipsecs, wgs, ratios []float64
	b.ResetTimer()
	for i := 1; i <= throughputRounds; i++ {
		x := run(world.SiteHostNamespace, ipsecVIP)
		y := run(world.WGSiteHostNamespace, wgVIP)
		ipsecs, wgs, ratios = append(ipsecs, x), append(wgs, y), append(ratios, y/x)
		b.Logf("round %d: IPsec (libipsec) %.0f Mbit/s, WireGuard (wireguard-go) %.0f Mbit/s, ratio WireGuard/IPsec %.2f", i, x, y, y/x)
	}
	b.StopTimer()
	b.Logf("gateways on %s (IPsec) and %s (WireGuard); iperf3 server on the directory host %s", ipsecNode, wgNode, world.DirectoryAddress)
	b.ReportMetric(median(ipsecs), "Mbit/s-ipsec")
	b.ReportMetric(median(wgs), "Mbit/s-wireguard")
	b.ReportMetric(median(ratios), "ratio-wg/ipsec")
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
