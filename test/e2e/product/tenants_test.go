package product

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/nat"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testinfra/world"
)

// Tenant A (namespace intruderNS) and tenant B (the examples' tenant acme, namespace
// tenant-a) on one estate, on the real node world: B's example gateway with its tunnel up
// and its reverse exposure linked to the service cluster svc01, and B's routed gateway
// (examples/ipsecgateway-routed.yaml); A's gateway beside them.
const (
	intruderNS     = "tenant-b"
	intruderGW     = "intruder"
	intruderPolicy = "intruder"
)

// TestTenantsOnTheNodeWorld: the gateway network is never a source (H1 of the security
// review) and exposure targets are bound to their tenant (H3), end to end. A's gateway
// pod cannot reach B's reverse virtual IP from its port (the fabric enforces B's
// security group, which no longer admits the transit network; with a rule admitting A's
// port added by hand, B's pod drops it itself); the service cluster still reaches it;
// A's exposure towards B's routed client is refused and reaches no NAT map of A's pod.
func TestTenantsOnTheNodeWorld(t *testing.T) {
	requirements(t)
	ctrllog.SetLogger(logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	w := bringUp(t, ctx)
	e := &env{t: t, ctx: ctx, w: w}
	e.prepare()

	t.Run("tenant B: the example gateway's tunnel, exposures and reverse exposure", e.applyGateway)
	t.Run("tenant B: the cluster link serves the reverse exposure", e.applyLink)
	t.Run("tenant B: a routed gateway routes its client network", e.routedGateway)
	t.Run("tenant A: a gateway beside them", e.intruderGateway)
	t.Run("A's gateway pod cannot reach B's reverse exposure; the service cluster can", e.noCrossTenantReverse)
	t.Run("A's exposure towards B's routed client is refused", e.noExposureIntoRoutedClient)
}

func (e *env) secret(ns, name, psk string) {
	e.t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: map[string]string{"psk": psk}}
	if err := e.w.Kube.Create(e.ctx, s); err != nil {
		e.t.Fatal(err)
	}
}

func condition(conds []metav1.Condition, typ string) *metav1.Condition {
	return meta.FindStatusCondition(conds, typ)
}

func (e *env) routedGateway(t *testing.T) {
	e.t = t
	e.secret(world.TenantNamespace, "plant-psk", e.psk+"-plant")
	e.secret(world.TenantNamespace, "office-psk", e.psk+"-office")
	if err := e.w.Apply(e.ctx, "examples/ipsecgateway-routed.yaml", &v1alpha1.IPsecGateway{}, world.TenantNamespace); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the routed gateway routes 10.40.0.0/16", 3*time.Minute, func() bool {
		var gw v1alpha1.IPsecGateway
		if err := e.w.Kube.Get(e.ctx, client.ObjectKey{Namespace: world.TenantNamespace, Name: "routed-gw"}, &gw); err != nil {
			return false
		}
		c := condition(gw.Status.Conditions, v1alpha1.ConditionRoutingReady)
		return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == gw.Generation && strings.Contains(c.Message, "10.40.0.0/16")
	})
}

func (e *env) intruderGateway(t *testing.T) {
	e.t = t
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: intruderNS, Labels: map[string]string{v1alpha1.LabelTenant: intruderPolicy}}}
	if err := e.w.Kube.Create(e.ctx, ns); err != nil {
		t.Fatal(err)
	}
	pol := &v1alpha1.VPNTenantPolicy{ObjectMeta: metav1.ObjectMeta{Name: intruderPolicy}, Spec: v1alpha1.VPNTenantPolicySpec{
		NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.LabelTenant: intruderPolicy}},
		ExposureTargets:   []string{world.ServiceHostAddress + "/32"},
	}}
	if err := e.w.Kube.Create(e.ctx, pol); err != nil {
		t.Fatal(err)
	}
	e.secret(intruderNS, "psk", e.psk+"-intruder")
	gw := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: intruderNS, Name: intruderGW}, Spec: v1alpha1.GatewaySpec{
		Tunnels: []v1alpha1.Tunnel{{Name: "hq", Peer: v1alpha1.Peer{Address: "198.51.100.99", Subnets: []string{"192.168.99.0/24"}},
			PreSharedKey: v1alpha1.SecretKeyRef{Name: "psk"}}},
		Exposures: []v1alpha1.Exposure{{Name: "portal", Target: v1alpha1.Target{Address: world.ServiceHostAddress, Ports: []v1alpha1.PortSpec{{Port: 443}}}}},
	}}
	if err := e.w.Kube.Create(e.ctx, gw); err != nil {
		t.Fatal(err)
	}
	e.waitFor("A's gateway pod running", 4*time.Minute, func() bool {
		p, _ := e.w.GatewayPod(e.ctx, intruderNS, intruderGW)
		return p != nil && containerRunning(p, render.ContainerExporter) && containerRunning(p, render.ContainerStrongswan)
	})
}

// containerRunning reports whether a pod's container runs.
func containerRunning(p *corev1.Pod, name string) bool {
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == name && c.State.Running != nil {
			return true
		}
	}
	return false
}

func (e *env) intruder() (*v1alpha1.IPsecGateway, *corev1.Pod) {
	e.t.Helper()
	var gw v1alpha1.IPsecGateway
	if err := e.w.Kube.Get(e.ctx, client.ObjectKey{Namespace: intruderNS, Name: intruderGW}, &gw); err != nil {
		e.t.Fatal(err)
	}
	p, err := e.w.GatewayPod(e.ctx, intruderNS, intruderGW)
	if err != nil || p == nil {
		e.t.Fatalf("no pod of A's gateway: %v", err)
	}
	return &gw, p
}

// fromPort sends an HTTPS request from inside A's gateway pod with A's port address as
// its source: the pod's policy routing sends it out of its port on the gateway network,
// as a compromised pod (or A's exposure traffic, SNATed to that address) would.
func (e *env) fromPort(url string) (string, error) {
	gw, p := e.intruder()
	return e.w.InPod(p, render.ContainerExporter, "curl", "-sk", "--max-time", "4", "--interface", gw.Status.PortFixedIP, url)
}

var reUntrusted = regexp.MustCompile(`counter packets (\d+) bytes \d+ drop comment "` + nat.UntrustedComment + `"`)

func (e *env) noCrossTenantReverse(t *testing.T) {
	e.t = t
	// The path itself works: A's pod reaches the service cluster through its port and
	// the router.
	e.waitFor("A's pod reaches svc01's portal through its port", time.Minute, func() bool {
		body, err := e.fromPort("https://" + world.ServiceHostAddress + ":443/")
		return err == nil && strings.HasPrefix(body, world.ServiceHostBody)
	})
	rev := e.reverseURL()
	if !e.answers(world.ServiceHostNamespace, rev, world.SiteHostBody) {
		t.Fatal("the service cluster does not reach B's reverse exposure")
	}
	for i := range 3 {
		if body, err := e.fromPort(rev); err == nil {
			t.Fatalf("attempt %d: A's gateway pod reached B's reverse exposure %s: %q", i, rev, body)
		}
	}
	if !e.answers(world.ServiceHostNamespace, rev, world.SiteHostBody) {
		t.Fatal("the service cluster no longer reaches B's reverse exposure")
	}

	// Defence in depth: B's security group admits A's port by hand (as a misconfigured
	// group would); B's pod still drops the traffic from the gateway network.
	a, _ := e.intruder()
	bgw := e.gateway()
	r, err := e.w.CloudReader(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	rule, err := rules.Create(e.ctx, r.Network(), rules.CreateOpts{SecGroupID: bgw.Status.SecurityGroupID, Direction: rules.DirIngress,
		EtherType: rules.EtherType4, Protocol: rules.ProtocolTCP, PortRangeMin: 8443, PortRangeMax: 8443, RemoteIPPrefix: a.Status.PortFixedIP + "/32"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rules.Delete(context.Background(), r.Network(), rule.ID).ExtractErr() }()
	bpod, err := e.w.GatewayPod(e.ctx, world.TenantNamespace, "acme")
	if err != nil || bpod == nil {
		t.Fatalf("no pod of B's gateway: %v", err)
	}
	drops := func() int {
		out, err := e.w.InPod(bpod, render.ContainerExporter, "nft", "list", "chain", "ip", nat.DefaultTable, nat.ChainPrerouting)
		if err != nil {
			t.Fatalf("nft in B's pod: %v", err)
		}
		m := reUntrusted.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("B's pod has no rule against the gateway network:\n%s", out)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	before := drops()
	if body, err := e.fromPort(rev); err == nil {
		t.Fatalf("with B's group admitting A's port, A's pod reached B's reverse exposure: %q", body)
	}
	if after := drops(); after <= before {
		t.Fatalf("B's pod did not drop A's traffic (%d -> %d): the security group alone stopped it, or nothing did", before, after)
	}
}

func (e *env) noExposureIntoRoutedClient(t *testing.T) {
	e.t = t
	gw, _ := e.intruder()
	gw.Spec.Exposures = append(gw.Spec.Exposures, v1alpha1.Exposure{Name: "plant", Target: v1alpha1.Target{Address: "10.40.0.5", Ports: []v1alpha1.PortSpec{{Port: 443}}}})
	if err := e.w.Kube.Update(e.ctx, gw); err != nil {
		t.Fatal(err)
	}
	var msg string
	e.waitFor("A's exposure into B's routed network refused", 2*time.Minute, func() bool {
		g, _ := e.intruder()
		c := condition(g.Status.Conditions, v1alpha1.ConditionValidated)
		if c != nil && c.ObservedGeneration == g.Generation && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonExposureTargetNotAllowed {
			msg = c.Message
			return true
		}
		return false
	})
	if !strings.Contains(msg, "lies in a subnet routed to another gateway") || strings.Contains(msg, world.TenantNamespace) || strings.Contains(msg, "routed-gw") {
		t.Fatalf("Validated: %s", msg)
	}
	_, p := e.intruder()
	for _, m := range []string{nat.MapExposurePorts, nat.MapExposureAll} {
		out, err := e.w.InPod(p, render.ContainerExporter, "nft", "list", "map", "ip", nat.DefaultTable, m)
		if err != nil {
			t.Fatalf("nft in A's pod: %v", err)
		}
		if strings.Contains(out, "10.40.0.5") {
			t.Fatalf("A's pod maps an exposure to B's routed client:\n%s", out)
		}
		if m == nat.MapExposurePorts && !strings.Contains(out, world.ServiceHostAddress) {
			t.Fatalf("A's own exposure is gone from its pod:\n%s", out)
		}
	}
}
