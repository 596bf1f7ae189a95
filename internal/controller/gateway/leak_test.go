package gateway

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
)

// Nothing tells a tenant about another (security review L4): a gateway refused because
// of another tenant's gateway, ClusterLink or port gets conditions and Events that name
// none of that tenant's objects, subnets, projects or ports, while the operator's log
// has the detail for the platform engineer.
func TestRefusalsNameNoOtherTenant(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	const (
		theirSubnet  = "192.168.160.0/24" // routed on the router
		theirClaim   = "192.168.161.0/24" // claimed by an older gateway that routes nothing yet
		theirCluster = "10.234.0.0/16"
		theirProject = "b0b0b0b0b0b04b0b8b0b0b0b0b0b0b0b"
	)
	nsB := h.ns + "-b"
	h.otherTenant(nsB, &v1alpha1.VPNTenantPolicySpec{RoutedSubnets: []string{theirSubnet, theirClaim}})
	h.policySpec(func(s *v1alpha1.VPNTenantPolicySpec) {
		s.RoutedSubnets = append(s.RoutedSubnets, theirSubnet, theirClaim, "10.234.5.0/24", "192.168.162.0/24") // the harness's policy lists pinnedFIP
	})
	// Tenant B's linked service cluster: it serves B's project's namespaces only.
	link := "their-cluster-" + h.ns
	h.clusterLink(link, theirCluster, theirProject, nil)
	// Tenant B's VM still holds the address tenant A pins (a port in the operator
	// project, as a migration leaves it).
	transit, _ := h.sim.NetworkByName("vpn-transit")
	vm, err := h.os.Networking.CreatePort(h.ctx, openstack.CreatePortOpts{NetworkID: transit.ID, Name: "tenant-b-vm"})
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := h.sim.NetworkByName("public")
	fip, err := h.os.Networking.CreateFloatingIP(h.ctx, openstack.CreateFloatingIPOpts{FloatingNetworkID: pub.ID, FloatingIPAddress: pinnedFIP})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.os.Networking.AssociateFloatingIP(h.ctx, fip.ID, vm.ID); err != nil {
		t.Fatal(err)
	}
	h.start()

	// Tenant B routes its client's network first.
	b := spec(false)
	b.Exposures = nil
	b.Tunnels[0].Mode = v1alpha1.TunnelModeRouted
	b.Tunnels[0].Peer.Address = "198.51.100.78"
	b.Tunnels[0].Peer.Subnets = []string{theirSubnet}
	if err := env.Client.Create(h.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: "hq-psk"}, Data: map[string][]byte{"psk": []byte(testPSK)}}); err != nil {
		t.Fatal(err)
	}
	h.createIn(nsB, "their-router", b)
	theirs := h.waitCondIn(nsB, "their-router", v1alpha1.ConditionRoutingReady, metav1.ConditionTrue, v1alpha1.ReasonRoutingReady)
	// And claims another, held up before it routes (its pin is not in its policy): the
	// older claim keeps the subnet.
	c := spec(false)
	c.Exposures = nil
	c.Endpoint = &v1alpha1.Endpoint{FloatingIP: "203.0.113.201"}
	c.Tunnels[0].Mode = v1alpha1.TunnelModeRouted
	c.Tunnels[0].Peer.Address = "198.51.100.79"
	c.Tunnels[0].Peer.Subnets = []string{theirClaim}
	h.createIn(nsB, "their-claim", c)
	claim := h.waitCondIn(nsB, "their-claim", v1alpha1.ConditionValidated, metav1.ConditionFalse, v1alpha1.ReasonFloatingIPNotAllowed)
	// Tenant A's own older claim, held up the same way.
	own := c
	own.Tunnels = []v1alpha1.Tunnel{c.Tunnels[0]}
	own.Tunnels[0].Peer.Address = "198.51.100.80"
	own.Tunnels[0].Peer.Subnets = []string{"192.168.162.0/24"}
	h.create("own-claim", own)
	ownClaim := h.waitCond("own-claim", v1alpha1.ConditionValidated, metav1.ConditionFalse, v1alpha1.ReasonFloatingIPNotAllowed)
	// Creation times have whole seconds (ties go by UID): let the conflicting gateways
	// be younger for certain.
	for !time.Now().After(ownClaim.CreationTimestamp.Add(time.Second)) {
		time.Sleep(100 * time.Millisecond)
	}

	foreign := []string{nsB, "their-router", "their-claim", string(theirs.UID), string(claim.UID), theirSubnet, theirClaim,
		link, theirCluster, theirProject, vm.ID, "tenant-b-vm"}

	routed := spec(false)
	routed.Tunnels[0].Mode = v1alpha1.TunnelModeRouted
	routed.Tunnels[0].Peer.Address = "192.0.2.20"
	routed.Tunnels[0].Peer.Subnets = []string{"192.168.160.128/25"}
	claimed := spec(false)
	claimed.Tunnels[0].Mode = v1alpha1.TunnelModeRouted
	claimed.Tunnels[0].Peer.Address = "192.0.2.21"
	claimed.Tunnels[0].Peer.Subnets = []string{"192.168.161.0/25"}
	intoLink := spec(false)
	intoLink.Tunnels[0].Mode = v1alpha1.TunnelModeRouted
	intoLink.Tunnels[0].Peer.Address = "192.0.2.22"
	intoLink.Tunnels[0].Peer.Subnets = []string{"10.234.5.0/24"}
	unlinked := spec(false)
	unlinked.Exposures[0].Target.Address = "10.234.0.20"
	pinned := spec(false)
	pinned.Endpoint = &v1alpha1.Endpoint{FloatingIP: pinnedFIP}
	// A gateway of the tenant's own namespace may be named.
	mine := spec(false)
	mine.Tunnels[0].Mode = v1alpha1.TunnelModeRouted
	mine.Tunnels[0].Peer.Address = "192.0.2.23"
	mine.Tunnels[0].Peer.Subnets = []string{"192.168.162.0/25"}
	h.create("mine", mine)
	gw := h.waitCond("mine", v1alpha1.ConditionRoutingReady, metav1.ConditionFalse, v1alpha1.ReasonRoutedSubnetConflict)
	if c := condOf(gw.Status.Conditions, v1alpha1.ConditionRoutingReady); !strings.Contains(c, "routed to IPsecGateway "+h.ns+"/own-claim") {
		t.Errorf("a conflict within the namespace does not name the gateway: %s", c)
	}

	for _, tc := range []struct {
		name         string
		spec         v1alpha1.GatewaySpec
		cond, reason string
		logged       []string // the detail the operator's log carries
	}{
		{"routed", routed, v1alpha1.ConditionRoutingReady, v1alpha1.ReasonRoutedSubnetConflict, []string{theirSubnet}},
		{"claimed", claimed, v1alpha1.ConditionRoutingReady, v1alpha1.ReasonRoutedSubnetConflict, []string{nsB + "/their-claim", theirClaim}},
		{"into-link", intoLink, v1alpha1.ConditionRoutingReady, v1alpha1.ReasonRoutedSubnetConflict, []string{link + " " + theirCluster}},
		{"unlinked", unlinked, v1alpha1.ConditionValidated, v1alpha1.ReasonTargetInUnlinkedCluster, []string{link, theirCluster, theirProject}},
		{"pinned", pinned, v1alpha1.ConditionFloatingIPReady, v1alpha1.ReasonFloatingIPInUse, []string{vm.ID}},
	} {
		h.create(tc.name, tc.spec)
		gw := h.waitCond(tc.name, tc.cond, metav1.ConditionFalse, tc.reason)
		events := h.events.awaitOf(h.ns, tc.name, func(e string) bool { return strings.Contains(e, " "+tc.reason+" ") })
		if !slices.ContainsFunc(events, func(e string) bool { return strings.Contains(e, " "+tc.reason+" ") }) {
			t.Errorf("%s: no %s Event recorded for the refusal: %v", tc.name, tc.reason, events)
		}
		var told []string
		for _, c := range gw.Status.Conditions {
			told = append(told, c.Type+" "+c.Reason+" "+c.Message)
		}
		told = append(told, events...)
		for _, line := range told {
			for _, f := range foreign {
				if strings.Contains(line, f) {
					t.Errorf("%s: tenant A is told %q of tenant B: %s", tc.name, f, line)
				}
			}
		}
		for _, d := range tc.logged {
			if h.logs.count(d) == 0 {
				t.Errorf("%s: the operator's log lacks the detail %q", tc.name, d)
			}
		}
	}
}
