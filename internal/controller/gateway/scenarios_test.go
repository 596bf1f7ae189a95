package gateway

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

// Invalid specs are refused with a reason and make no OpenStack call at all.
func TestInvalidSpecsMakeNoOpenStackCall(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.sim.ResetCounters()
	h.start()

	plain := spec(false)
	plain.Exposures[0].Target.Ports = []v1alpha1.PortSpec{{Port: 80, Protocol: v1alpha1.ProtocolTCP}}
	h.create("plain", plain)
	gw := h.waitCond("plain", v1alpha1.ConditionValidated, metav1.ConditionFalse, v1alpha1.ReasonPlaintextExposure)
	if msg := condOf(gw.Status.Conditions, v1alpha1.ConditionValidated); !strings.Contains(msg, "HTTP") || !strings.Contains(msg, "allowPlaintext") {
		t.Fatalf("plaintext refusal: %s", msg)
	}

	reserved := spec(false)
	reserved.Exposures[0].VirtualIP = "100.64.7.1"
	h.create("reserved", reserved)
	gw = h.waitCond("reserved", v1alpha1.ConditionValidated, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec)
	if msg := condOf(gw.Status.Conditions, v1alpha1.ConditionValidated); !strings.Contains(msg, "reserved") {
		t.Fatalf(".1 pin refusal: %s", msg)
	}
	gw = h.waitCond("reserved", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec)
	if c := condOf(gw.Status.Conditions, v1alpha1.ConditionReady); !strings.Contains(c, "Validated: ") {
		t.Fatalf("Ready must name the blocking phase: %s", c)
	}

	if c := h.sim.Counters(); c.Total() != 0 {
		t.Fatalf("invalid specs made %d OpenStack requests: %v", c.Total(), c.ByRoute)
	}
}

// Pinned and automatic virtual IPs, a pin into another gateway's /24, and pool
// exhaustion, which never hands out an address outside the pool.
func TestVirtualIPAllocation(t *testing.T) {
	h := newHarness(t)
	h.cfg.ServiceCIDRPool = netip.MustParsePrefix("100.66.0.0/23")
	h.psk("hq-psk", testPSK)
	h.start()

	h.create("first", spec(true))
	first := h.waitCond("first", v1alpha1.ConditionAllocated, metav1.ConditionTrue, v1alpha1.ReasonAllocated)
	if first.Status.ServiceCIDR != "100.66.0.0/24" {
		t.Fatalf("first /24 of the pool expected, got %s", first.Status.ServiceCIDR)
	}

	// Pins: the gateway takes the pins' /24; auto addresses fill around the pin.
	pinned := spec(true)
	pinned.Exposures = append(pinned.Exposures, v1alpha1.Exposure{Name: "ldaps", VirtualIP: "100.66.1.10",
		Target: v1alpha1.Target{Address: "10.250.0.21", Ports: []v1alpha1.PortSpec{{Port: 636, Protocol: v1alpha1.ProtocolTCP}}}})
	pinned.ReverseExposures[0].VirtualIP = "100.66.1.254"
	h.create("pinned", pinned)
	gw := h.waitCond("pinned", v1alpha1.ConditionAllocated, metav1.ConditionTrue, v1alpha1.ReasonAllocated)
	got := fmt.Sprint(gw.Status.ServiceCIDR, gw.Status.Exposures, gw.Status.ReverseExposures)
	if got != "100.66.1.0/24[{portal 100.66.1.11} {ldaps 100.66.1.10}] [{erp 100.66.1.254}]" {
		t.Fatalf("allocations %s", got)
	}

	// A pin into a /24 another gateway holds is refused.
	clash := spec(false)
	clash.Exposures[0].VirtualIP = "100.66.0.50"
	h.create("clash", clash)
	gw = h.waitCond("clash", v1alpha1.ConditionAllocated, metav1.ConditionFalse, v1alpha1.ReasonAllocationFailed)
	if c := condOf(gw.Status.Conditions, v1alpha1.ConditionAllocated); !strings.Contains(c, "already allocated to another gateway") {
		t.Fatalf("clash: %s", c)
	}
	if gw.Status.ServiceCIDR != "" {
		t.Fatalf("a refused gateway holds %s", gw.Status.ServiceCIDR)
	}

	// The pool (two /24s) is exhausted.
	h.create("third", spec(false))
	gw = h.waitCond("third", v1alpha1.ConditionAllocated, metav1.ConditionFalse, v1alpha1.ReasonAllocationFailed)
	if c := condOf(gw.Status.Conditions, v1alpha1.ConditionAllocated); !strings.Contains(c, "exhausted") {
		t.Fatalf("exhaustion: %s", c)
	}
	h.waitCond("third", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonAllocationFailed)

	// Removing the pin's exposure keeps every other address where it was.
	h.mutate("pinned", func(s *v1alpha1.GatewaySpec) { s.Exposures = s.Exposures[:1] })
	gw = h.waitCond("pinned", v1alpha1.ConditionAllocated, metav1.ConditionTrue, v1alpha1.ReasonAllocated)
	if fmt.Sprint(gw.Status.Exposures) != "[{portal 100.66.1.11}]" {
		t.Fatalf("renumbered: %v", gw.Status.Exposures)
	}
}

// A restarted operator rebuilds the allocations from status; concurrent reconciles
// never hand out one /24 twice.
func TestAllocationsSurviveRestartAndConcurrency(t *testing.T) {
	h := newHarness(t)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("before", spec(false))
	before := h.waitCond("before", v1alpha1.ConditionAllocated, metav1.ConditionTrue, v1alpha1.ReasonAllocated)

	h.start() // a new process: empty allocator
	for i := 0; i < 8; i++ {
		h.create(fmt.Sprintf("gw-%d", i), spec(false))
	}
	seen := map[string]string{before.Status.ServiceCIDR: "before"}
	for i := 0; i < 8; i++ {
		name := fmt.Sprintf("gw-%d", i)
		gw := h.waitCond(name, v1alpha1.ConditionAllocated, metav1.ConditionTrue, v1alpha1.ReasonAllocated)
		if other, dup := seen[gw.Status.ServiceCIDR]; dup {
			t.Fatalf("%s and %s share %s", name, other, gw.Status.ServiceCIDR)
		}
		seen[gw.Status.ServiceCIDR] = name
	}
	if again := h.get("before"); again.Status.ServiceCIDR != before.Status.ServiceCIDR {
		t.Fatalf("restart moved a gateway: %s -> %s", before.Status.ServiceCIDR, again.Status.ServiceCIDR)
	}
}

// UDP 500/4500 per peer address; one rule per (reverse port, internal CIDR) pair,
// identical ones collapsed; all-protocol for a reverse exposure without ports; stale
// rules removed; the gateway network never admitted although configured.
func TestSecurityGroupRules(t *testing.T) {
	h := newHarness(t)
	h.cfg.InternalSourceCIDRs = []netip.Prefix{netip.MustParsePrefix("10.254.0.0/24"), netip.MustParsePrefix("10.250.0.0/16")}
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()

	s := spec(true)
	s.Tunnels = append(s.Tunnels,
		v1alpha1.Tunnel{Name: "dr", Peer: v1alpha1.Peer{Address: "198.51.100.7", ID: "dr.acme.example", Subnets: []string{"192.168.20.0/24"}}, PreSharedKey: v1alpha1.SecretKeyRef{Name: "hq-psk", Key: "psk"}},
		v1alpha1.Tunnel{Name: "br", Peer: v1alpha1.Peer{Address: "192.0.2.50", Subnets: []string{"192.168.30.0/24"}}, PreSharedKey: v1alpha1.SecretKeyRef{Name: "hq-psk", Key: "psk"}},
	)
	s.ReverseExposures = append(s.ReverseExposures,
		v1alpha1.ReverseExposure{Name: "erp2", Tunnel: "dr", Target: v1alpha1.Target{Address: "192.168.20.5",
			Ports: []v1alpha1.PortSpec{{Port: 8443, Protocol: v1alpha1.ProtocolTCP}, {Port: 636, Protocol: v1alpha1.ProtocolTCP}}}},
		v1alpha1.ReverseExposure{Name: "anything", Tunnel: "br", Target: v1alpha1.Target{Address: "192.168.30.9"}},
	)
	h.create("sg", s)
	gw := h.waitConverged("sg")
	// The gateway network (10.254.0.0/24) is configured as an internal source here, and
	// admitted nowhere: another gateway's port is no source (H1).
	want := []string{
		"any from 10.250.0.0/16",
		"tcp/636 from 10.250.0.0/16",
		"tcp/8443 from 10.250.0.0/16",
		"udp/4500 from 192.0.2.50/32", "udp/4500 from 198.51.100.7/32",
		"udp/500 from 192.0.2.50/32", "udp/500 from 198.51.100.7/32",
	}
	if got := h.ingressRules(gw.Status.SecurityGroupID); strings.Join(got, ";") != strings.Join(want, ";") {
		t.Fatalf("rules\n got %v\nwant %v", got, want)
	}

	h.mutate("sg", func(s *v1alpha1.GatewaySpec) {
		s.Tunnels = s.Tunnels[:2]
		s.ReverseExposures = s.ReverseExposures[:2]
	})
	gw = h.waitConverged("sg")
	want = []string{
		"tcp/636 from 10.250.0.0/16",
		"tcp/8443 from 10.250.0.0/16",
		"udp/4500 from 198.51.100.7/32", "udp/500 from 198.51.100.7/32",
	}
	if got := h.ingressRules(gw.Status.SecurityGroupID); strings.Join(got, ";") != strings.Join(want, ";") {
		t.Fatalf("after removal\n got %v\nwant %v", got, want)
	}
	sg, _ := h.sim.SecurityGroup(gw.Status.SecurityGroupID)
	for _, r := range sg.Rules {
		if r.Direction == "ingress" && (r.RemoteIPPrefix == "" || r.RemoteIPPrefix == "0.0.0.0/0" || r.Protocol == "esp" || r.Protocol == "50") {
			t.Fatalf("forbidden rule %+v", r)
		}
	}
}

// Reverse exposures without internal source CIDRs: routing is programmed and
// RoutingReady is True, but its message names the missing security-group half and every
// reconcile logs a WARNING.
func TestMissingInternalSourceCIDRs(t *testing.T) {
	h := newHarness(t)
	h.cfg.InternalSourceCIDRs = nil
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("nocidr", spec(true))
	gw := h.waitCond("nocidr", v1alpha1.ConditionRoutingReady, metav1.ConditionTrue, v1alpha1.ReasonInternalSourcesMissing)
	if c := condOf(gw.Status.Conditions, v1alpha1.ConditionRoutingReady); !strings.Contains(c, "security-group half is missing") {
		t.Fatalf("message: %s", c)
	}
	h.waitConverged("nocidr")
	if got := routesVia(h.operatorRouter(), gw.Status.PortFixedIP); len(got) != 1 {
		t.Fatalf("routing must still be programmed: %v", got)
	}
	for _, r := range h.ingressRules(gw.Status.SecurityGroupID) {
		if strings.HasPrefix(r, "tcp/8443") {
			t.Fatalf("a reverse rule without configured CIDRs: %s", r)
		}
	}
	warnings := h.logs.count("no internal source CIDRs are configured")
	if warnings == 0 {
		t.Fatal("no WARNING logged")
	}
	h.quiesce("nocidr")
	if err := h.reconcileOnce("nocidr"); err != nil {
		t.Fatal(err)
	}
	if h.logs.count("no internal source CIDRs are configured") <= warnings {
		t.Fatal("the WARNING must repeat on every reconcile")
	}
}

// A pinned floating IP is adopted and associated, never tagged, and only disassociated
// on deletion; a pin that does not exist is reported.
func TestPinnedFloatingIP(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	pub, ok := h.sim.NetworkByName("public")
	if !ok {
		t.Fatal("no public network")
	}
	pre, err := h.os.Networking.CreateFloatingIP(h.ctx, openstack.CreateFloatingIPOpts{FloatingNetworkID: pub.ID, FloatingIPAddress: "203.0.113.77"})
	if err != nil {
		t.Fatal(err)
	}
	h.start()
	s := spec(false)
	s.Endpoint = &v1alpha1.Endpoint{FloatingIP: "203.0.113.77"}
	h.create("pinned", s)
	gw := h.waitConverged("pinned")
	if gw.Status.FloatingIP != "203.0.113.77" || gw.Status.FloatingIPID != pre.ID {
		t.Fatalf("status %s/%s", gw.Status.FloatingIP, gw.Status.FloatingIPID)
	}
	if _, _, fips := h.tagged(gw.UID); fips != 0 {
		t.Fatal("a pinned floating IP must not be tagged or duplicated")
	}
	var cm corev1.ConfigMap
	mustGet(t, h, client.ObjectKey{Namespace: h.ns, Name: render.ConfigMapName("pinned")}, &cm)
	cfg, err := gatewayconfig.Unmarshal([]byte(cm.Data[gatewayconfig.ConfigMapKeyConfig]))
	if err != nil {
		t.Fatal(err)
	}
	swan, err := gatewayconfig.RenderSwanctl(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(swan, `id = "203.0.113.77"`) {
		t.Fatal("the pinned address must be every tunnel's local identity")
	}

	missing := spec(false)
	missing.Endpoint = &v1alpha1.Endpoint{FloatingIP: "203.0.113.99"}
	h.create("missing", missing)
	h.waitCond("missing", v1alpha1.ConditionFloatingIPReady, metav1.ConditionFalse, v1alpha1.ReasonFloatingIPMissing)

	if err := env.Client.Delete(h.ctx, gw); err != nil {
		t.Fatal(err)
	}
	h.waitGone("pinned")
	for _, f := range h.sim.FloatingIPs() {
		if f.ID == pre.ID {
			if f.PortID != "" {
				t.Fatalf("pinned floating IP still associated with %s", f.PortID)
			}
			return
		}
	}
	t.Fatal("the pinned floating IP was released")
}

// The allowed-address pair and the router route exist exactly while reverse exposures do.
func TestRoutingFollowsReverseExposures(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("rt", spec(false))
	gw := h.waitConverged("rt")
	if c := condOf(gw.Status.Conditions, v1alpha1.ConditionRoutingReady); !strings.Contains(c, "True/NotRequired") {
		t.Fatalf("%s", c)
	}
	check := func(want bool) {
		t.Helper()
		gw := h.get("rt")
		port, _ := h.sim.Port(gw.Status.PortID)
		routes := routesVia(h.operatorRouter(), gw.Status.PortFixedIP)
		if has := len(port.AllowedAddressPairs) == 1 && len(routes) == 1 && routes[0].Destination == gw.Status.ServiceCIDR; has != want {
			t.Fatalf("routing present=%v, want %v (pairs %v, routes %v)", has, want, port.AllowedAddressPairs, routes)
		}
		if !want && (len(port.AllowedAddressPairs) != 0 || len(routes) != 0) {
			t.Fatalf("leftovers: pairs %v routes %v", port.AllowedAddressPairs, routes)
		}
	}
	check(false)
	h.mutate("rt", func(s *v1alpha1.GatewaySpec) { s.ReverseExposures = spec(true).ReverseExposures })
	h.waitCond("rt", v1alpha1.ConditionRoutingReady, metav1.ConditionTrue, v1alpha1.ReasonRoutingReady)
	h.waitConverged("rt")
	check(true)
	h.mutate("rt", func(s *v1alpha1.GatewaySpec) { s.ReverseExposures = nil })
	h.waitCond("rt", v1alpha1.ConditionRoutingReady, metav1.ConditionTrue, v1alpha1.ReasonNotRequired)
	h.waitConverged("rt")
	check(false)
}

// The node is sticky while it is Ready; when it goes NotReady the port is detached from
// its server before it is attached to the new node's server, and the pod template rolls.
func TestNodeStickyAndMove(t *testing.T) {
	h := newHarness(t)
	h.node("node-b", "openstack:///"+serverB, true, nil)
	h.node("node-c", "openstack://RegionOne/"+serverC, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("mv", spec(false))
	gw := h.waitConverged("mv")
	if gw.Status.NodeName != "node-b" || gw.Status.ServerID != serverB {
		t.Fatalf("placed on %s/%s", gw.Status.NodeName, gw.Status.ServerID)
	}
	var dep appsv1.Deployment
	mustGet(t, h, client.ObjectKey{Namespace: h.ns, Name: render.DeploymentName("mv")}, &dep)
	gen := dep.Generation

	// A lexically earlier node appearing does not move a healthy gateway.
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.quiesce("mv")
	if err := h.reconcileOnce("mv"); err != nil {
		t.Fatal(err)
	}
	if gw := h.get("mv"); gw.Status.NodeName != "node-b" {
		t.Fatalf("gateway bounced to %s", gw.Status.NodeName)
	}

	h.sim.ResetCounters()
	h.setReady("node-b", false)
	eventually(t, "gateway moved", func() (bool, string) {
		gw = h.get("mv")
		return gw.Status.NodeName == "node-a" && gw.Status.ServerID == serverA && converged(gw.Status.Conditions, gw.Generation),
			gw.Status.NodeName + " " + gw.Status.ServerID + " " + condOf(gw.Status.Conditions, v1alpha1.ConditionReady)
	})
	if gw.Status.ServerID != serverA {
		t.Fatalf("server %s", gw.Status.ServerID)
	}
	port, _ := h.sim.Port(gw.Status.PortID)
	if port.DeviceID != serverA {
		t.Fatalf("port on %s", port.DeviceID)
	}
	for _, p := range h.sim.ServerInterfaces(serverB) {
		if p == gw.Status.PortID {
			t.Fatal("port still attached to the old server")
		}
	}
	detach, attach := -1, -1
	for i, rec := range h.sim.RequestLog() {
		switch {
		case rec.Method == "DELETE" && strings.Contains(rec.Path, serverB+"/os-interface/"+gw.Status.PortID) && detach < 0:
			detach = i
		case rec.Method == "POST" && strings.Contains(rec.Path, serverA+"/os-interface") && attach < 0:
			attach = i
		}
	}
	if detach < 0 || attach < 0 || detach > attach {
		t.Fatalf("detach at %d, attach at %d: want detach first", detach, attach)
	}
	eventually(t, "pod template rolled to node-a", func() (bool, string) {
		mustGet(t, h, client.ObjectKey{Namespace: h.ns, Name: render.DeploymentName("mv")}, &dep)
		return render.PinnedNode(&dep.Spec.Template.Spec) == "node-a" && dep.Generation != gen,
			fmt.Sprintf("nodeName %s, generation %d -> %d", render.PinnedNode(&dep.Spec.Template.Spec), gen, dep.Generation)
	})
}

// A providerID that does not name an OpenStack server fails PortAttached loudly.
func TestUnparseableProviderID(t *testing.T) {
	h := newHarness(t)
	h.node("node-x", "aws:///eu-west-1a/i-0123456789", true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("pid", spec(false))
	gw := h.waitCond("pid", v1alpha1.ConditionPortAttached, metav1.ConditionFalse, v1alpha1.ReasonProviderIDUnparseable)
	if gw.Status.NodeName != "node-x" {
		t.Fatalf("the node choice must be persisted before attaching: %q", gw.Status.NodeName)
	}
	port, _ := h.sim.Port(gw.Status.PortID)
	if port.DeviceID != "" {
		t.Fatalf("port attached to %s anyway", port.DeviceID)
	}
}

// An exposure change reaches the pod through its ConfigMap; the Deployment is not
// touched, so the pod is not restarted.
func TestExposureChangeUpdatesConfigMapOnly(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("ex", spec(false))
	h.waitConverged("ex")
	var dep appsv1.Deployment
	mustGet(t, h, client.ObjectKey{Namespace: h.ns, Name: render.DeploymentName("ex")}, &dep)
	rv := dep.ResourceVersion

	h.mutate("ex", func(s *v1alpha1.GatewaySpec) {
		s.Exposures = append(s.Exposures, v1alpha1.Exposure{Name: "directory",
			Target: v1alpha1.Target{Address: "10.250.0.21", Ports: []v1alpha1.PortSpec{{Port: 636, Protocol: v1alpha1.ProtocolTCP}}}})
	})
	h.waitConverged("ex")
	var cm corev1.ConfigMap
	mustGet(t, h, client.ObjectKey{Namespace: h.ns, Name: render.ConfigMapName("ex")}, &cm)
	if !strings.Contains(cm.Data[gatewayconfig.ConfigMapKeyConfig], `"name": "directory"`) {
		t.Fatal("the ConfigMap lacks the new exposure")
	}
	mustGet(t, h, client.ObjectKey{Namespace: h.ns, Name: render.DeploymentName("ex")}, &dep)
	if dep.ResourceVersion != rv {
		t.Fatal("an exposure change rewrote the Deployment")
	}
}

// The <name>-nic1 NetworkPolicy follows the operator-wide switch.
func TestNetworkPolicySwitch(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("np", spec(false))
	h.waitConverged("np")
	key := client.ObjectKey{Namespace: h.ns, Name: render.NetworkPolicyName("np")}
	var np networkingv1.NetworkPolicy
	mustGet(t, h, key, &np)
	if len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress || len(np.Spec.Ingress) != 2 ||
		np.Spec.Ingress[0].Ports[0].Port.IntValue() != 9903 ||
		np.Spec.Ingress[1].From[0].NamespaceSelector.MatchLabels[corev1.LabelMetadataName] != "bnerd-vpn-system" {
		t.Fatalf("policy %+v", np.Spec)
	}

	h.cfg.GatewayNetworkPolicy = false
	h.start()
	eventually(t, "NetworkPolicy removed", func() (bool, string) {
		err := env.Client.Get(h.ctx, key, &np)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	h.waitConverged("np")
}

// Deletion leaves no tagged OpenStack object, no attachment and no route via the port.
func TestDeletionLeavesNothing(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("del", spec(true))
	gw := h.waitConverged("del")
	st := gw.Status
	if err := env.Client.Delete(h.ctx, gw); err != nil {
		t.Fatal(err)
	}
	h.waitGone("del")
	if p, s, f := h.tagged(gw.UID); p+s+f != 0 {
		t.Fatalf("left behind: %d ports, %d security groups, %d floating IPs", p, s, f)
	}
	if _, ok := h.sim.Port(st.PortID); ok {
		t.Fatal("port still exists")
	}
	for _, rt := range h.sim.Routers() {
		if got := routesVia(rt, st.PortFixedIP); len(got) != 0 {
			t.Fatalf("router %s keeps %v", rt.Name, got)
		}
	}
	for _, p := range h.sim.ServerInterfaces(serverA) {
		if p == st.PortID {
			t.Fatal("server still holds the port")
		}
	}
	// The freed /24 is handed out again.
	h.create("next", spec(false))
	if next := h.waitCond("next", v1alpha1.ConditionAllocated, metav1.ConditionTrue, ""); next.Status.ServiceCIDR != st.ServiceCIDR {
		t.Fatalf("freed %s not reused (got %s)", st.ServiceCIDR, next.Status.ServiceCIDR)
	}
}

func (h *harness) waitGone(name string) {
	h.t.Helper()
	eventually(h.t, name+" deleted", func() (bool, string) {
		var gw v1alpha1.IPsecGateway
		err := env.Client.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: name}, &gw)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		return false, condOf(gw.Status.Conditions, v1alpha1.ConditionReady)
	})
}

// A missing or too short pre-shared key is reported naming the Secret and key, never
// the value; fixing the Secret is picked up at once through the operator's watch of that
// one Secret (the resync interval of these tests is 30 minutes). The operator writes no
// Secret of its own, and no key reaches its status, Events, logs or ConfigMap.
func TestPSKMissingShortAndFixed(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.start()
	h.create("psk", spec(false))
	gw := h.waitCond("psk", v1alpha1.ConditionWorkloadReady, metav1.ConditionFalse, v1alpha1.ReasonPSKSecretMissing)
	if c := condOf(gw.Status.Conditions, v1alpha1.ConditionWorkloadReady); !strings.Contains(c, "Secret "+h.ns+"/hq-psk not found") {
		t.Fatalf("message must name the Secret: %s", c)
	}
	// The pod is there all the same: it waits for the key and says so itself.
	var dep appsv1.Deployment
	mustGet(t, h, client.ObjectKey{Namespace: h.ns, Name: render.DeploymentName("psk")}, &dep)

	const short = "zq-short-7"
	h.psk("hq-psk", short)
	gw = h.waitCond("psk", v1alpha1.ConditionWorkloadReady, metav1.ConditionFalse, v1alpha1.ReasonPSKTooShort)
	if c := condOf(gw.Status.Conditions, v1alpha1.ConditionWorkloadReady); !strings.Contains(c, `Secret `+h.ns+`/hq-psk key "psk" is shorter than 20 bytes`) {
		t.Fatalf("message must name the Secret and key: %s", c)
	}
	const good = "zq-good-key-of-more-than-twenty-bytes"
	h.psk("hq-psk", good)
	h.waitConverged("psk")
	const rotated = "zq-rotated-key-of-more-than-twenty-bytes"
	h.psk("hq-psk", rotated)

	var legacy corev1.Secret
	if err := env.Client.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: render.LegacySecretName("psk")}, &legacy); !apierrors.IsNotFound(err) {
		t.Fatalf("the operator wrote a Secret of keys: %v", err)
	}
	// The keys, raw or base64, appear nowhere the operator writes or says anything.
	gw = h.get("psk")
	var places []string
	status, _ := json.Marshal(gw.Status)
	places = append(places, "status "+string(status))
	h.events.mu.Lock()
	places = append(places, h.events.events...)
	h.events.mu.Unlock()
	h.logs.mu.Lock()
	places = append(places, h.logs.lines...)
	h.logs.mu.Unlock()
	var cms corev1.ConfigMapList
	if err := env.Client.List(h.ctx, &cms, client.InNamespace(h.ns)); err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms.Items {
		for k, v := range cm.Data {
			places = append(places, "configmap "+cm.Name+" "+k+" "+v)
		}
	}
	if len(places) < 5 || len(cms.Items) == 0 {
		t.Fatalf("too little captured to scan (%d places)", len(places))
	}
	for _, key := range []string{short, good, rotated} {
		for _, form := range []string{key, base64.StdEncoding.EncodeToString([]byte(key))} {
			for _, p := range places {
				if strings.Contains(p, form) {
					t.Fatalf("a pre-shared key reached %q", p)
				}
			}
		}
	}
}

// Owned objects changed or deleted behind the operator's back are repaired.
func TestDriftRepaired(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("drift", spec(false))
	h.waitConverged("drift")
	key := client.ObjectKey{Namespace: h.ns, Name: render.DeploymentName("drift")}
	var dep appsv1.Deployment
	mustGet(t, h, key, &dep)
	if err := env.Client.Delete(h.ctx, &dep); err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	mustGet(t, h, client.ObjectKey{Namespace: h.ns, Name: render.ConfigMapName("drift")}, &cm)
	cm.Data[gatewayconfig.ConfigMapKeyConfig] = "tampered"
	if err := env.Client.Update(h.ctx, &cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, "drift repaired", func() (bool, string) {
		var d appsv1.Deployment
		if err := env.Client.Get(h.ctx, key, &d); err != nil {
			return false, err.Error()
		}
		var c corev1.ConfigMap
		_ = env.Client.Get(h.ctx, client.ObjectKeyFromObject(&cm), &c)
		return c.Data[gatewayconfig.ConfigMapKeyConfig] != "tampered", "configmap still tampered"
	})
}

// A change to the gateway pod's security fields is reverted, not tolerated as a
// superset: a host namespace, a privileged sidecar, a host-path volume, another
// ServiceAccount, an extra mount of the API token into charon, a weaker security
// context. Each is put on the live Deployment and must be gone again.
func TestSecurityDriftReverted(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("drift", spec(false))
	h.waitConverged("drift")
	key := client.ObjectKey{Namespace: h.ns, Name: render.DeploymentName("drift")}
	yes := true
	root := int64(0)
	for _, tc := range []struct {
		name   string
		mutate func(ps *corev1.PodSpec)
	}{
		{"hostNetwork", func(ps *corev1.PodSpec) { ps.HostNetwork = true }},
		{"hostPID", func(ps *corev1.PodSpec) { ps.HostPID = true }},
		{"privileged sidecar", func(ps *corev1.PodSpec) {
			ps.Containers = append(ps.Containers, corev1.Container{Name: "debug", Image: "busybox", SecurityContext: &corev1.SecurityContext{Privileged: &yes}})
		}},
		{"host path volume", func(ps *corev1.PodSpec) {
			ps.Volumes = append(ps.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		}},
		{"serviceAccountName", func(ps *corev1.PodSpec) { ps.ServiceAccountName = "default" }},
		{"token into charon", func(ps *corev1.PodSpec) {
			ps.Containers[1].VolumeMounts = append(ps.Containers[1].VolumeMounts, corev1.VolumeMount{Name: "api-access", MountPath: render.ServiceAccountMountPath, ReadOnly: true})
		}},
		{"status agent as root", func(ps *corev1.PodSpec) { ps.Containers[2].SecurityContext.RunAsUser = &root }},
		{"seccomp dropped", func(ps *corev1.PodSpec) { ps.SecurityContext = nil }},
	} {
		var d appsv1.Deployment
		mustGet(t, h, key, &d)
		want := d.Spec.Template.Spec.DeepCopy()
		tc.mutate(&d.Spec.Template.Spec)
		if err := env.Client.Update(h.ctx, &d); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		eventually(t, tc.name+" reverted", func() (bool, string) {
			var live appsv1.Deployment
			if err := env.Client.Get(h.ctx, key, &live); err != nil {
				return false, err.Error()
			}
			drift := render.PodDrift(*want, live.Spec.Template.Spec)
			return len(drift) == 0, fmt.Sprintf("still differs in %v", drift)
		})
	}
	h.events.await("SecurityDriftReverted")
	h.events.mu.Lock()
	all := strings.Join(h.events.events, "\n")
	h.events.mu.Unlock()
	if !strings.Contains(all, "SecurityDriftReverted") {
		t.Fatalf("no Event reports the reverted drift:\n%s", all)
	}
}

// A port detached out of band (by an admin, or Nova behind the operator's back) is no
// Kubernetes event: the operator finds it at the next resync, or at once when the
// gateway's annotations change (the nudge kubectl vpn diagnose prints). It then attaches
// the port again through the polled attach: PortAttached goes Unknown/Attaching while
// Nova works, and back to True, each change an Event (the first attach, on the way to the
// gateway's first convergence, was none: skeleton.FirstTrue).
func TestOutOfBandDetachRepairedOnAnnotation(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("oob", spec(false))
	gw := h.waitConverged("oob")
	h.quiesce("oob")
	// Nova takes its time: the re-attach must show up as the recorded wait.
	h.sim.SetNovaDelays(300*time.Millisecond, 0)
	if err := h.sim.DetachInterface(serverA, gw.Status.PortID); err != nil {
		t.Fatal(err)
	}
	attaching := h.eventsWith(v1alpha1.ReasonAttaching + " " + v1alpha1.ConditionPortAttached + "=Unknown:")
	eventually(t, "annotation set", func() (bool, string) {
		gw := h.get("oob")
		if gw.Annotations == nil {
			gw.Annotations = map[string]string{}
		}
		gw.Annotations["ipsec.bnerd.net/reconcile-requested"] = fmt.Sprint(time.Now().UnixNano())
		if err := env.Client.Update(h.ctx, gw); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	eventually(t, "port attached again", func() (bool, string) {
		p, _ := h.sim.Port(gw.Status.PortID)
		g := h.get("oob")
		return p.DeviceID == serverA && slices.Contains(h.sim.ServerInterfaces(serverA), gw.Status.PortID) &&
				meta.IsStatusConditionTrue(g.Status.Conditions, v1alpha1.ConditionPortAttached),
			"port on " + p.DeviceID + "; " + condOf(g.Status.Conditions, v1alpha1.ConditionPortAttached)
	})
	awaitTrue(func() bool {
		return h.eventsWith(v1alpha1.ReasonPortAttached+" "+v1alpha1.ConditionPortAttached+"=True:") >= 1
	})
	if n := h.eventsWith(v1alpha1.ReasonAttaching + " " + v1alpha1.ConditionPortAttached + "=Unknown:"); n != attaching+1 {
		t.Fatalf("%d Attaching Events for the re-attach, want one", n-attaching)
	}
	// Each change of the condition is an Event: the re-attach, not the first attach.
	if n := h.eventsWith(v1alpha1.ReasonPortAttached + " " + v1alpha1.ConditionPortAttached + "=True:"); n != 1 {
		t.Fatalf("%d Attached Events, want one (the re-attach)", n)
	}
	h.waitConverged("oob")
}

// Injected OpenStack failures (5xx on the create calls) are retried with backoff and
// leave no duplicate behind.
func TestTransientOpenStackFailures(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	for _, f := range []openstacksim.Fault{
		{Method: "POST", PathPattern: "/network/v2.0/ports", Status: 503, Count: 1},
		{Method: "POST", PathPattern: "/network/v2.0/security-group-rules", Status: 500, Count: 2},
		{Method: "POST", PathPattern: "/network/v2.0/floatingips", Status: 500, Count: 1},
		{Method: "PUT", PathPattern: "re:/routers/.*/add_extraroutes$", Status: 500, Count: 1},
		{Method: "POST", PathPattern: "re:/os-interface$", Status: 500, Count: 1},
	} {
		h.sim.Inject(f)
	}
	h.start()
	h.create("flaky", spec(true))
	gw := h.waitConverged("flaky")
	if c := h.sim.Counters(); c.Faulted < 6 {
		t.Fatalf("only %d faults were hit: %v", c.Faulted, c.ByRoute)
	}
	if p, s, f := h.tagged(gw.UID); p != 1 || s != 1 || f != 1 {
		t.Fatalf("%d ports, %d groups, %d floating IPs", p, s, f)
	}
	if got := h.ingressRules(gw.Status.SecurityGroupID); len(got) != 3 || hasDup(got) {
		t.Fatalf("rules %v", got)
	}
	if got := routesVia(h.operatorRouter(), gw.Status.PortFixedIP); len(got) != 1 {
		t.Fatalf("routes %v", got)
	}
}

// The client's networks never overlap the gateway's own: one inside the service-CIDR
// pool is refused at validation (traffic to other gateways' virtual IPs would be taken
// for the client's), and a peer subnet inside the gateway network's subnet stops at
// PortReady with the reason.
func TestPeerSubnetOverlaps(t *testing.T) {
	h := newHarness(t)
	h.cfg.ServiceCIDRPool = netip.MustParsePrefix("100.67.0.0/22")
	h.psk("hq-psk", testPSK)
	h.start()

	inPool := spec(false)
	inPool.Tunnels[0].Peer.Subnets = []string{"100.67.0.0/23"}
	h.create("inpool", inPool)
	gw := h.waitCond("inpool", v1alpha1.ConditionValidated, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec)
	if c := condOf(gw.Status.Conditions, v1alpha1.ConditionValidated); !strings.Contains(c, "overlaps the service-CIDR pool 100.67.0.0/22") {
		t.Fatalf("pool overlap: %s", c)
	}
	if p, s, f := h.tagged(gw.UID); p+s+f != 0 {
		t.Fatal("a refused gateway made OpenStack objects")
	}

	onNet := spec(false)
	onNet.Tunnels[0].Peer.Subnets = []string{"10.254.0.128/25"}
	h.create("onnet", onNet)
	gw = h.waitCond("onnet", v1alpha1.ConditionPortReady, metav1.ConditionFalse, v1alpha1.ReasonPeerSubnetOverlap)
	if c := condOf(gw.Status.Conditions, v1alpha1.ConditionPortReady); !strings.Contains(c, "overlaps the gateway network's subnet 10.254.0.0/24") {
		t.Fatalf("gateway network overlap: %s", c)
	}
}

// Regression (the real node: a lost node kept the gateway down until the pod garbage
// collector, about a minute): when the gateway moves off a node that is gone or not
// Ready, its pod bound there is deleted at once, so the Recreate rollout can start the
// new pod; pods on a Ready node, or on the selected node, are left to their kubelets.
func TestStrandedPodReleased(t *testing.T) {
	h := newHarness(t)
	h.node("node-b", "openstack:///"+serverB, true, nil)
	h.node("node-c", "openstack:///"+serverC, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("st", spec(false))
	if gw := h.waitConverged("st"); gw.Status.NodeName != "node-b" {
		t.Fatalf("placed on %s", gw.Status.NodeName)
	}
	labels := render.SelectorLabels(render.Gateway{Kind: "IPsecGateway", Name: "st"})
	pod := func(name, node string) {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns, Labels: labels},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "x"}}},
		}
		if err := env.Client.Create(h.ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	h.node("node-z", "openstack:///"+serverA, true, nil) // sorts last: never selected
	pod("on-b", "node-b")
	pod("on-z", "node-z")
	h.setReady("node-b", false)
	eventually(t, "the pod on the NotReady node deleted", func() (bool, string) {
		var p corev1.Pod
		err := env.Client.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: "on-b"}, &p)
		return apierrors.IsNotFound(err), fmt.Sprintf("%v", err)
	})
	if gw := h.get("st"); gw.Status.NodeName != "node-c" {
		t.Fatalf("moved to %s", gw.Status.NodeName)
	}
	var p corev1.Pod
	if err := env.Client.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: "on-z"}, &p); err != nil || p.DeletionTimestamp != nil {
		t.Errorf("a pod on a Ready node was deleted: %v", err)
	}
	// The Event follows the status write of the reconcile that deleted the pod.
	stranded := func() int {
		h.events.mu.Lock()
		defer h.events.mu.Unlock()
		n := 0
		for _, e := range h.events.events {
			if strings.Contains(e, "StrandedPodDeleted pod on-b was bound to node node-b, which is not Ready") {
				n++
			}
		}
		return n
	}
	eventually(t, "the StrandedPodDeleted event for on-b", func() (bool, string) {
		n := stranded()
		return n > 0, fmt.Sprintf("%d events", n)
	})
	if n := stranded(); n != 1 {
		t.Errorf("want one StrandedPodDeleted event for on-b, got %d", n)
	}
}
