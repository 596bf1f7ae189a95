package diagnose

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
)

func wgRun() *run {
	o := &v1alpha1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "wg"}, Spec: v1alpha1.VPNGatewaySpec{
		Protocol: v1alpha1.VPNProtocolWireGuard,
		WireGuard: &v1alpha1.WireGuardSpec{Peers: []v1alpha1.WireGuardPeer{
			{Name: "hq", Endpoint: &v1alpha1.WireGuardEndpoint{Address: "198.51.100.7"}},
			{Name: "laptop"},
		}},
	}}
	g := &gw{kind: v1alpha1.KindVPNGateway, obj: o, spec: o.GetGatewaySpec(), status: o.GetGatewayStatus(), wireguard: o.GetWireGuard()}
	return &run{g: g, rep: &Report{}}
}

func udp(remote string) openstack.SecurityGroupRule {
	return openstack.SecurityGroupRule{Direction: openstack.DirectionIngress, EtherType: openstack.EtherTypeIPv4,
		Protocol: openstack.ProtocolUDP, PortRangeMin: 51820, PortRangeMax: 51820, RemoteIPPrefix: remote}
}

func TestWireGuardChecks(t *testing.T) {
	r := wgRun()
	if tuns := r.g.tunnels(); len(tuns) != 2 || tuns[0].peer != "198.51.100.7:51820" || tuns[1].peer != "roaming" {
		t.Fatalf("tunnels %+v", tuns)
	}
	// A missing endpoint rule fails and names the peer; both present warn (roaming peer).
	r.checkWireGuardRules("sg", "SG", &openstack.SecurityGroup{ID: "sg1", Rules: []openstack.SecurityGroupRule{udp("0.0.0.0/0")}})
	if c := r.rep.Checks[0]; c.Status != Fail || !strings.Contains(c.Detail, "198.51.100.7/32 (peer hq)") {
		t.Errorf("missing rule: %+v", c)
	}
	r.checkWireGuardRules("sg", "SG", &openstack.SecurityGroup{ID: "sg1", Rules: []openstack.SecurityGroupRule{udp("0.0.0.0/0"), udp("198.51.100.7/32")}})
	if c := r.rep.Checks[1]; c.Status != Warn || !strings.Contains(c.Detail, "open to every address") {
		t.Errorf("roaming peer: %+v", c)
	}
	// A rotation's overlap: both keys' ports must be admitted.
	r = wgRun()
	r.g.status.WireGuard = &v1alpha1.WireGuardStatus{PublicKey: "new", ListenPort: 51821, PreviousPublicKey: "old", PreviousListenPort: 51820}
	r.checkWireGuardRules("sg", "SG", &openstack.SecurityGroup{ID: "sg1", Rules: []openstack.SecurityGroupRule{udp("0.0.0.0/0"), udp("198.51.100.7/32")}})
	if c := r.rep.Checks[0]; c.Status != Fail || !strings.Contains(c.Detail, "udp/51821 from 198.51.100.7/32 (peer hq)") || strings.Contains(c.Detail, "udp/51820") {
		t.Errorf("the new key's port not admitted: %+v", c)
	}
	// The key: missing, not yet on the interface, rotation in its overlap, a retired key
	// a peer still uses, fine.
	for _, tc := range []struct {
		st   v1alpha1.GatewayStatus
		want Status
		text string
	}{
		{v1alpha1.GatewayStatus{}, Fail, "not set"},
		{v1alpha1.GatewayStatus{WireGuard: &v1alpha1.WireGuardStatus{PublicKey: "new"}, InterfacePublicKey: "old"}, Warn, "still uses old"},
		{v1alpha1.GatewayStatus{WireGuard: &v1alpha1.WireGuardStatus{PublicKey: "new", ListenPort: 51821, PreviousPublicKey: "old", PreviousListenPort: 51820}, InterfacePublicKey: "new"},
			Warn, "switch to new on UDP 51821; the previous key old is still served on UDP 51820"},
		{v1alpha1.GatewayStatus{WireGuard: &v1alpha1.WireGuardStatus{PublicKey: "new", ListenPort: 51821, RetiredPublicKey: "old"}, InterfacePublicKey: "new"},
			Warn, "previous key old was retired"},
		{v1alpha1.GatewayStatus{WireGuard: &v1alpha1.WireGuardStatus{PublicKey: "new"}, InterfacePublicKey: "new"}, Pass, "public key new"},
	} {
		r := wgRun()
		*r.g.status = tc.st
		r.checkWireGuardKey()
		if c := r.rep.Checks[0]; c.Status != tc.want || !strings.Contains(c.Detail, tc.text) {
			t.Errorf("status %+v: %+v", tc.st, c)
		}
	}
}

// A WireGuard gateway's checks speak of handshakes and the interface, never of IKE or
// charon, which it does not run.
func TestWireGuardChecksSayWireGuard(t *testing.T) {
	r := wgRun()
	r.now = time.Now()
	est := metav1.NewTime(r.now.Add(-time.Minute))
	r.g.status.Tunnels = []v1alpha1.TunnelState{{Name: "hq", State: "Up", LatestHandshake: &est}, {Name: "laptop", State: "Up", LatestHandshake: &est}}
	r.src.SkipExporter = true
	r.checkTunnels(true)
	r.checkExporter(true)
	for _, c := range r.rep.Checks {
		for _, s := range []string{c.Title, c.Detail} {
			if strings.Contains(s, "IKE") || strings.Contains(s, "charon") {
				t.Errorf("check %s of a WireGuard gateway says %q", c.ID, s)
			}
		}
	}
	if c := r.rep.Checks[0]; c.Status != Pass || !strings.Contains(c.Detail, "newest handshake 1m0s ago") {
		t.Errorf("tunnels: %+v", c)
	}
	if c := r.rep.Checks[1]; !strings.Contains(c.Title, "WireGuard interface") {
		t.Errorf("exporter: %+v", c)
	}
}
