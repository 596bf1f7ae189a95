package gateway

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// clusterLink creates a ClusterLink object (the ClusterLink reconciler does not run in
// this package: the gateway reconciler reads only the spec and the Validated condition)
// and removes it when the test ends.
func (h *harness) clusterLink(name, cidr, project string, sel *v1alpha1.GatewaySelector) {
	h.t.Helper()
	l := &v1alpha1.ClusterLink{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ClusterLinkSpec{ServiceClusterRouter: "r-" + name, ServiceClusterCIDR: cidr, GatewaySelector: sel}}
	if project != "" {
		l.Spec.CredentialsSecretRef = &v1alpha1.SecretRef{Name: "clusterlink-" + name, Namespace: "bnerd-vpn-clusterlinks"}
		l.Spec.CustomerProjectID = project
	}
	if err := env.Client.Create(h.ctx, l); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = env.Client.Delete(h.ctx, l) })
}

func (h *harness) labelNamespace(ns string, labels map[string]string) {
	h.t.Helper()
	eventually(h.t, "namespace labelled", func() (bool, string) {
		var n corev1.Namespace
		if err := env.Client.Get(h.ctx, client.ObjectKey{Name: ns}, &n); err != nil {
			return false, err.Error()
		}
		n.Labels = labels
		if err := env.Client.Update(h.ctx, &n); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// namespace creates another namespace the manager started afterwards watches.
func (h *harness) namespace(name string) {
	h.t.Helper()
	if err := env.Client.Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		h.t.Fatal(err)
	}
	h.extraNS = append(h.extraNS, name)
	h.policyNS = append(h.policyNS, name)
	h.policySpec(func(*v1alpha1.VPNTenantPolicySpec) {}) // the policy selects it too
}

// otherTenant creates a namespace of another tenant, governed by a policy of its own
// with spec (nil: no policy, the strict defaults).
func (h *harness) otherTenant(name string, spec *v1alpha1.VPNTenantPolicySpec) {
	h.t.Helper()
	if err := env.Client.Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		h.t.Fatal(err)
	}
	h.extraNS = append(h.extraNS, name)
	if spec == nil {
		return
	}
	p := &v1alpha1.VPNTenantPolicy{ObjectMeta: metav1.ObjectMeta{Name: "tenant-" + name}, Spec: *spec}
	p.Spec.NamespaceSelector = metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: name}}
	if err := env.Client.Create(h.ctx, p); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = env.Client.Delete(h.ctx, p) })
}

// waitCondIn waits for a condition of a gateway in namespace ns at its current
// generation.
func (h *harness) waitCondIn(ns, name, typ string, status metav1.ConditionStatus, reason string) *v1alpha1.IPsecGateway {
	h.t.Helper()
	var gw *v1alpha1.IPsecGateway
	eventually(h.t, fmt.Sprintf("%s/%s %s=%s/%s", ns, name, typ, status, reason), func() (bool, string) {
		gw = h.getIn(ns, name)
		c := meta.FindStatusCondition(gw.Status.Conditions, typ)
		ok := c != nil && c.Status == status && (reason == "" || c.Reason == reason) && c.ObservedGeneration == gw.Generation
		return ok, condOf(gw.Status.Conditions, typ) + " | " + condOf(gw.Status.Conditions, v1alpha1.ConditionReady)
	})
	return gw
}

func (h *harness) createIn(ns, name string, s v1alpha1.GatewaySpec) {
	h.t.Helper()
	gw := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: s}
	if err := env.Client.Create(h.ctx, gw); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		gw.SetFinalizers(nil)
		_ = env.Client.Update(h.ctx, gw)
		_ = env.Client.Delete(h.ctx, gw)
	})
}

func (h *harness) getIn(ns, name string) *v1alpha1.IPsecGateway {
	h.t.Helper()
	var gw v1alpha1.IPsecGateway
	if err := env.Client.Get(h.ctx, client.ObjectKey{Namespace: ns, Name: name}, &gw); err != nil {
		h.t.Fatal(err)
	}
	return &gw
}

// Each gateway's security group admits its reverse exposures from the operator-wide
// internal sources and from the service clusters of the ClusterLinks that serve it, and
// from no other: client A's gateway is reachable from link A's cluster, not from link
// B's (a cross-tenant link on B's own router). A namespace label moves a link's service
// cluster from one gateway's group to the other's, at once (the watch on namespaces;
// the resync of these tests is 30 minutes).
func TestReverseSourcesComeFromTheLinksThatServeTheGateway(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	nsA, nsB := h.ns, h.ns+"-b"
	h.namespace(nsB)
	h.labelNamespace(nsA, map[string]string{"tenant": "acme"})
	h.labelNamespace(nsB, map[string]string{v1alpha1.LabelCustomerProject: "c0ffee00c0ffee00c0ffee00c0ffee00"})
	for _, ns := range []string{nsA, nsB} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hq-psk"}, Data: map[string][]byte{"psk": []byte(testPSK)}}
		if err := env.Client.Create(h.ctx, s); err != nil && ns != nsA {
			t.Fatal(err)
		}
	}
	h.psk("hq-psk", testPSK)
	// link-a: same tenant, serving the namespaces of tenant acme. link-b: cross-tenant,
	// no selector, so it serves the namespaces labelled with its customer project.
	h.clusterLink("link-a-"+nsA, "10.251.0.0/16", "", &v1alpha1.GatewaySelector{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "acme"}}})
	h.clusterLink("link-b-"+nsA, "10.234.0.0/16", "c0ffee00c0ffee00c0ffee00c0ffee00", nil)
	h.cfg.ResyncInterval = 30 * 60e9
	h.start()

	sb := spec(true)
	sb.Tunnels[0].Peer.Address = "198.51.100.8"
	sb.Tunnels[0].Peer.Subnets = []string{"192.168.20.0/24"}
	sb.ReverseExposures[0].Target.Address = "192.168.20.5"
	h.createIn(nsA, "gw-a", spec(true))
	h.createIn(nsB, "gw-b", sb)
	rules := func(ns, name string) string {
		var gw *v1alpha1.IPsecGateway
		eventually(t, name+" Ready", func() (bool, string) {
			gw = h.getIn(ns, name)
			return converged(gw.Status.Conditions, gw.Generation), condOf(gw.Status.Conditions, v1alpha1.ConditionReady)
		})
		return strings.Join(h.ingressRules(gw.Status.SecurityGroupID), ";")
	}
	wantA := "tcp/8443 from 10.250.0.0/16;tcp/8443 from 10.251.0.0/16;udp/4500 from 198.51.100.7/32;udp/500 from 198.51.100.7/32"
	wantB := "tcp/8443 from 10.234.0.0/16;tcp/8443 from 10.250.0.0/16;udp/4500 from 198.51.100.8/32;udp/500 from 198.51.100.8/32"
	if got := rules(nsA, "gw-a"); got != wantA {
		t.Fatalf("gateway A admits %s, want %s", got, wantA)
	}
	if got := rules(nsB, "gw-b"); got != wantB {
		t.Fatalf("gateway B admits %s, want %s", got, wantB)
	}

	// Namespace A becomes the customer's too: link B now serves gateway A as well.
	h.labelNamespace(nsA, map[string]string{"tenant": "acme", v1alpha1.LabelCustomerProject: "c0ffee00c0ffee00c0ffee00c0ffee00"})
	eventually(t, "link B's cluster admitted by gateway A", func() (bool, string) {
		gw := h.getIn(nsA, "gw-a")
		got := strings.Join(h.ingressRules(gw.Status.SecurityGroupID), ";")
		return strings.Contains(got, "tcp/8443 from 10.234.0.0/16"), got
	})
	// And tenant acme's label goes: link A serves gateway A no more.
	h.labelNamespace(nsA, map[string]string{v1alpha1.LabelCustomerProject: "c0ffee00c0ffee00c0ffee00c0ffee00"})
	eventually(t, "link A's cluster no longer admitted by gateway A", func() (bool, string) {
		gw := h.getIn(nsA, "gw-a")
		got := strings.Join(h.ingressRules(gw.Status.SecurityGroupID), ";")
		return !strings.Contains(got, "10.251.0.0/16"), got
	})
}

// Exposure targets the operator refuses beyond the schema: inside the service-CIDR pool
// (another gateway's virtual IPs), on the gateway network (other gateways' ports, the
// ClusterLink legs), outside the operator's allow-list, and inside the service cluster
// of a ClusterLink that does not serve the gateway. The last is lifted, at once, when
// the namespace gets the label that makes the link serve it.
func TestExposureTargetRefusals(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.cfg.ExposureTargetCIDRs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	project := "d1e2b1c0ffee4a5b8c9d0e1f2a3b4c5d"
	h.clusterLink("diehl-"+h.ns, "10.234.0.0/16", project, nil)
	// The tenant may target the whole private 10/8 (the transit network's range with
	// it): the operator's own ranges stay refused whatever the policy allows.
	h.policySpec(func(s *v1alpha1.VPNTenantPolicySpec) { s.ExposureTargets = []string{"10.0.0.0/8"} })
	h.start()

	for i, tc := range []struct {
		target, cond, reason, msg string
	}{
		{"100.64.200.10", v1alpha1.ConditionValidated, v1alpha1.ReasonInvalidSpec, "lies in the service-CIDR pool 100.64.0.0/16"},
		{"172.16.0.10", v1alpha1.ConditionValidated, v1alpha1.ReasonInvalidSpec, "is outside the operator's allowed exposure targets [10.0.0.0/8]"},
		{"10.254.0.9", v1alpha1.ConditionPortReady, v1alpha1.ReasonTargetOnGatewayNetwork, "lies in the gateway network's subnet 10.254.0.0/24"},
		{"10.234.0.20", v1alpha1.ConditionValidated, v1alpha1.ReasonTargetInUnlinkedCluster,
			"targets 10.234.0.20, which lies in the service cluster of a ClusterLink that does not serve this gateway"},
	} {
		name := fmt.Sprintf("t%d", i)
		s := spec(false)
		s.Exposures[0].Target.Address = tc.target
		h.create(name, s)
		gw := h.waitCond(name, tc.cond, metav1.ConditionFalse, tc.reason)
		if c := condOf(gw.Status.Conditions, tc.cond); !strings.Contains(c, tc.msg) {
			t.Fatalf("%s: %s", tc.target, c)
		}
	}
	// The namespace is the customer's: the link serves the gateway, the target is fine.
	h.labelNamespace(h.ns, map[string]string{v1alpha1.LabelCustomerProject: project})
	h.waitConverged("t3")
}

// A WireGuard gateway is held to the same tenancy as an IPsec one: its reverse exposure
// is admitted from the ClusterLinks serving it (and the internal sources), not from a
// link serving another tenant; an exposure into an unlinked service cluster and a peer
// network inside the service-CIDR pool are refused before anything is built.
func TestWireGuardGatewayTenancy(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.labelNamespace(h.ns, map[string]string{"tenant": "acme"})
	h.clusterLink("wg-link-a-"+h.ns, "10.251.0.0/16", "", &v1alpha1.GatewaySelector{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "acme"}}})
	project := "c0ffee00c0ffee00c0ffee00c0ffee01"
	h.clusterLink("wg-link-b-"+h.ns, "10.234.0.0/16", project, nil)
	h.start()

	h.createVPN("wg", wgSpec())
	gw := h.waitVPNConverged("wg")
	rules := h.ingressRules(gw.Status.SecurityGroupID)
	for _, want := range []string{"tcp/8443 from 10.251.0.0/16", "tcp/8443 from 10.250.0.0/16"} {
		if !slices.Contains(rules, want) {
			t.Errorf("the WireGuard gateway's security group lacks %q: %v", want, rules)
		}
	}
	for _, r := range rules {
		if strings.Contains(r, "10.234.0.0/16") {
			t.Errorf("a link serving another tenant is admitted: %s", r)
		}
	}
	if c := condOf(gw.Status.Conditions, v1alpha1.ConditionSecurityGroupReady); !strings.Contains(c, "wg-link-a-"+h.ns) {
		t.Errorf("SecurityGroupReady does not name the serving link: %s", c)
	}

	unlinked := wgSpec()
	unlinked.Exposures[0].Target.Address = "10.234.0.20"
	h.createVPN("wg-unlinked", unlinked)
	g := h.waitVPNCond("wg-unlinked", v1alpha1.ConditionValidated, metav1.ConditionFalse, v1alpha1.ReasonTargetInUnlinkedCluster)
	if g.Status.PortID != "" {
		t.Errorf("a port was created for a refused gateway: %s", g.Status.PortID)
	}

	pool := wgSpec()
	pool.WireGuard.Peers[1].AllowedIPs = []string{"100.64.200.0/24"}
	h.createVPN("wg-pool", pool)
	g = h.waitVPNCond("wg-pool", v1alpha1.ConditionValidated, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec)
	if c := condOf(g.Status.Conditions, v1alpha1.ConditionValidated); !strings.Contains(c, "spec.wireguard.peers[1].allowedIPs[0]") || !strings.Contains(c, "overlaps the service-CIDR pool") {
		t.Errorf("Validated: %s", c)
	}
}
