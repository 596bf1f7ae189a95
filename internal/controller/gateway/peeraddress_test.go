package gateway

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// A tunnel's peer address or a WireGuard peer's endpoint inside a range the operator uses
// itself is refused with Validated=False/PeerAddressNotAllowed before anything is built
// (the gateway network once the port's subnet is known, with PortReady=False and no
// security group), and a private address outside those ranges is served (security
// review L6). The special-purpose ranges are refused at admission (api/v1alpha1).
func TestPeerAddressPolicy(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()

	for _, tc := range []struct {
		name, peer, msg string
	}{
		{"internal", "10.250.3.4", "spec.tunnels[0].peer.address: Invalid value: \"10.250.3.4\": lies in the operator's internal source network 10.250.0.0/16"},
		{"pool", "100.64.9.9", "lies in the service-CIDR pool 100.64.0.0/16"},
	} {
		s := spec(false)
		s.Tunnels[0].Peer.Address = tc.peer
		gw := h.create(tc.name, s)
		got := h.waitCond(tc.name, v1alpha1.ConditionValidated, metav1.ConditionFalse, v1alpha1.ReasonPeerAddressNotAllowed)
		if c := condOf(got.Status.Conditions, v1alpha1.ConditionValidated); !strings.Contains(c, tc.msg) {
			t.Errorf("%s: %s", tc.name, c)
		}
		h.quiesce(tc.name)
		if ports, sgs, fips := h.tagged(gw.UID); ports+sgs+fips != 0 {
			t.Errorf("%s: a refused gateway got %d ports, %d security groups, %d floating IPs", tc.name, ports, sgs, fips)
		}
	}

	// The gateway network is known once the port is: the port stays, nothing after it
	// is built (no security group admits the address).
	s := spec(false)
	s.Tunnels[0].Peer.Address = "10.254.0.50"
	gw := h.create("transit", s)
	got := h.waitCond("transit", v1alpha1.ConditionPortReady, metav1.ConditionFalse, v1alpha1.ReasonPeerAddressNotAllowed)
	if c := condOf(got.Status.Conditions, v1alpha1.ConditionPortReady); !strings.Contains(c, "lies in the gateway network's subnet 10.254.0.0/24") {
		t.Errorf("transit: %s", c)
	}
	h.quiesce("transit")
	if _, sgs, fips := h.tagged(gw.UID); sgs+fips != 0 {
		t.Errorf("transit: %d security groups, %d floating IPs built for a refused peer", sgs, fips)
	}

	wg := wgSpec()
	wg.WireGuard.Peers[0].Endpoint.Address = "10.250.7.7"
	vg := h.createVPN("wg-internal", wg)
	g := h.waitVPNCond("wg-internal", v1alpha1.ConditionValidated, metav1.ConditionFalse, v1alpha1.ReasonPeerAddressNotAllowed)
	if c := condOf(g.Status.Conditions, v1alpha1.ConditionValidated); !strings.Contains(c, "spec.wireguard.peers[0].endpoint.address") {
		t.Errorf("wg-internal: %s", c)
	}
	if ports, sgs, fips := h.tagged(vg.UID); ports+sgs+fips != 0 {
		t.Errorf("wg-internal: %d ports, %d security groups, %d floating IPs built", ports, sgs, fips)
	}

	// Private space outside the operator's ranges is a platform's ordinary client.
	s = spec(false)
	s.Tunnels[0].Peer.Address = "10.251.0.9"
	h.create("private", s)
	h.waitConverged("private")
}
