package gateway

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/operatorconfig"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/statuswrite"
)

// Public keys of the test peers (valid encodings).
const (
	wgPeerHQ     = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg="
	wgPeerRoamer = "TrMvSoP4jYQlY6RIzBgbssQqY3vxI2Pi+y71lOWWXX0="
)

// wgSpec: a fixed-endpoint peer (hq) with a reverse exposure behind it and a roaming
// peer (laptop), one TLS exposure.
func wgSpec() v1alpha1.VPNGatewaySpec {
	s := spec(true)
	s.Tunnels = nil
	return v1alpha1.VPNGatewaySpec{GatewaySpec: s, Protocol: v1alpha1.VPNProtocolWireGuard, WireGuard: &v1alpha1.WireGuardSpec{
		Peers: []v1alpha1.WireGuardPeer{
			{Name: "hq", PublicKey: wgPeerHQ, AllowedIPs: []string{"192.168.10.0/24"}, Endpoint: &v1alpha1.WireGuardEndpoint{Address: "198.51.100.7"}},
			{Name: "laptop", PublicKey: wgPeerRoamer, AllowedIPs: []string{"192.168.40.0/24"}, PersistentKeepalive: 25},
		},
	}}
}

func (h *harness) createVPN(name string, s v1alpha1.VPNGatewaySpec) *v1alpha1.VPNGateway {
	h.t.Helper()
	gw := &v1alpha1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name}, Spec: s}
	if err := env.Client.Create(h.ctx, gw); err != nil {
		h.t.Fatal(err)
	}
	return gw
}

func (h *harness) getVPN(name string) *v1alpha1.VPNGateway {
	h.t.Helper()
	var gw v1alpha1.VPNGateway
	if err := env.Client.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: name}, &gw); err != nil {
		h.t.Fatal(err)
	}
	return &gw
}

func (h *harness) waitVPNCond(name, typ string, status metav1.ConditionStatus, reason string) *v1alpha1.VPNGateway {
	h.t.Helper()
	var gw *v1alpha1.VPNGateway
	eventually(h.t, name+" "+typ+"="+string(status)+"/"+reason, func() (bool, string) {
		gw = h.getVPN(name)
		c := meta.FindStatusCondition(gw.Status.Conditions, typ)
		ok := c != nil && c.Status == status && (reason == "" || c.Reason == reason) && c.ObservedGeneration == gw.Generation
		return ok, condOf(gw.Status.Conditions, typ) + " | " + condOf(gw.Status.Conditions, v1alpha1.ConditionReady)
	})
	return gw
}

// waitVPNConverged waits until the key phase and every other phase condition are True.
func (h *harness) waitVPNConverged(name string) *v1alpha1.VPNGateway {
	h.t.Helper()
	var gw *v1alpha1.VPNGateway
	eventually(h.t, name+" converged", func() (bool, string) {
		gw = h.getVPN(name)
		ok := converged(gw.Status.Conditions, gw.Generation) && meta.IsStatusConditionTrue(gw.Status.Conditions, v1alpha1.ConditionWireGuardKeyReady)
		return ok, condOf(gw.Status.Conditions, v1alpha1.ConditionReady)
	})
	return gw
}

// reportHandshakes writes what a WireGuard status agent would: the interface's key and
// each peer's latest handshake, under the status agent's field manager.
func (h *harness) reportHandshakes(name, interfaceKey string, at time.Time, peers ...string) {
	h.t.Helper()
	gw := h.getVPN(name)
	gw.Status.InterfacePublicKey = interfaceKey
	gw.Status.Tunnels = nil
	for _, p := range peers {
		hs := metav1.NewTime(at)
		gw.Status.Tunnels = append(gw.Status.Tunnels, v1alpha1.TunnelState{Name: p, State: "Up", LatestHandshake: &hs})
	}
	w := statuswrite.Writer{Client: env.Client, Manager: statuswrite.ManagerStatusAgent, Fields: v1alpha1.GatewayAgentStatusFields, Unguarded: true}
	if err := w.Apply(h.ctx, gw, nil); err != nil {
		h.t.Fatal(err)
	}
}

// rotateVPNKey sets the gateway's rotate annotation to v.
func (h *harness) rotateVPNKey(name, v string) {
	h.t.Helper()
	eventually(h.t, "annotate", func() (bool, string) {
		g := h.getVPN(name)
		if g.Annotations == nil {
			g.Annotations = map[string]string{}
		}
		g.Annotations[v1alpha1.AnnotationRotateWireGuardKey] = v
		return env.Client.Update(h.ctx, g) == nil, ""
	})
}

func (h *harness) wgKeySecret(name string) *corev1.Secret {
	h.t.Helper()
	var s corev1.Secret
	mustGet(h.t, h, client.ObjectKey{Namespace: h.ns, Name: render.WireGuardKeySecretName(name)}, &s)
	return &s
}

func publicOf(t *testing.T, private []byte) string {
	t.Helper()
	k, err := wgtypes.ParseKey(string(private))
	if err != nil {
		t.Fatalf("the key Secret holds no valid private key")
	}
	return k.PublicKey().String()
}

// A WireGuard gateway: the operator generates its key into an owned Secret and publishes
// only the public key; the security group admits the listen port from the fixed peer's
// endpoint, and from anywhere (flagged) only while a peer roams; the pod runs the
// WireGuard containers with only the current key mounted; no IPsec objects exist.
func TestWireGuardGateway(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.start()
	h.createVPN("wg", wgSpec())
	gw := h.waitVPNConverged("wg")

	sec := h.wgKeySecret("wg")
	if !metav1.IsControlledBy(sec, gw) {
		t.Fatalf("key Secret not controlled by the gateway: %+v", sec.OwnerReferences)
	}
	pub := publicOf(t, sec.Data[render.WireGuardPrivateKeyKey])
	if gw.Status.WireGuard == nil || gw.Status.WireGuard.PublicKey != pub {
		t.Fatalf("status.wireguard %+v, want public key %s", gw.Status.WireGuard, pub)
	}
	if c := condOf(gw.Status.Conditions, v1alpha1.ConditionWireGuardKeyReady); !strings.Contains(c, "True/KeyReady") {
		t.Fatalf("key condition: %s", c)
	}

	rules := h.ingressRules(gw.Status.SecurityGroupID)
	for _, want := range []string{"udp/51820 from 198.51.100.7/32", "udp/51820 from 0.0.0.0/0", "tcp/8443 from 10.250.0.0/16"} {
		if !slices.Contains(rules, want) {
			t.Errorf("security group lacks %q: %v", want, rules)
		}
	}
	for _, r := range rules {
		if strings.Contains(r, "/500 ") || strings.Contains(r, "/4500 ") {
			t.Errorf("IKE rule on a WireGuard gateway: %s", r)
		}
	}
	if c := condOf(gw.Status.Conditions, v1alpha1.ConditionSecurityGroupReady); !strings.Contains(c, "True/"+v1alpha1.ReasonListenPortOpen) || !strings.Contains(c, "laptop") {
		t.Fatalf("the open listen port is not flagged: %s", c)
	}

	var dep appsv1.Deployment
	mustGet(t, h, client.ObjectKey{Namespace: h.ns, Name: render.DeploymentName("wg")}, &dep)
	var names []string
	for _, c := range dep.Spec.Template.Spec.Containers {
		names = append(names, c.Name)
		if c.Name == render.ContainerWireGuard && c.Image != h.cfg.WireGuardImage {
			t.Errorf("wireguard container image %s, want %s", c.Image, h.cfg.WireGuardImage)
		}
		if c.Name == render.ContainerInitNAT && !slices.Contains(c.Args, "--tunnel-interface=wg0,wg1") {
			t.Errorf("init-nat does not guard both key slots' devices: %v", c.Args)
		}
	}
	if !slices.Equal(names, []string{render.ContainerInitNAT, render.ContainerWireGuard, render.ContainerStatus, render.ContainerExporter}) {
		t.Fatalf("containers %v", names)
	}
	// The key Secret's two keys, each alone in its volume; the previous key's volume is
	// optional (empty outside a rotation's overlap), the current key's is not.
	var keyItems []string
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Secret == nil {
			continue
		}
		if v.Secret.SecretName != render.WireGuardKeySecretName("wg") || len(v.Secret.Items) != 1 {
			t.Errorf("the pod mounts another Secret, or more than one key in a volume: %+v", v.Secret)
			continue
		}
		optional := v.Secret.Optional != nil && *v.Secret.Optional
		if k := v.Secret.Items[0].Key; k == render.WireGuardPrivateKeyKey && optional || k == render.WireGuardPreviousKeyKey && !optional {
			t.Errorf("volume %s: %s mounted with optional=%v", v.Name, k, optional)
		}
		keyItems = append(keyItems, v.Secret.Items[0].Key)
	}
	if !slices.Equal(keyItems, []string{render.WireGuardPrivateKeyKey, render.WireGuardPreviousKeyKey}) {
		t.Errorf("key volumes %v", keyItems)
	}
	var cm corev1.ConfigMap
	mustGet(t, h, client.ObjectKey{Namespace: h.ns, Name: render.ConfigMapName("wg")}, &cm)
	if _, ok := cm.Data[gatewayconfig.ConfigMapKeySwanctl]; ok {
		t.Error("a WireGuard gateway's ConfigMap carries swanctl.conf")
	}
	cfg, err := gatewayconfig.Unmarshal([]byte(cm.Data[gatewayconfig.ConfigMapKeyConfig]))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Protocol != gatewayconfig.ProtocolWireGuard || cfg.WireGuard.PublicKey != pub || len(cfg.WireGuard.Peers) != 2 {
		t.Fatalf("config %+v", cfg.WireGuard)
	}
	if err := env.Client.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: render.LegacySecretName("wg")}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a WireGuard gateway has an IKE secrets Secret: %v", err)
	}

	// The roaming peer gets a fixed endpoint: the open rule goes, the flag too.
	eventually(t, "endpoint set", func() (bool, string) {
		g := h.getVPN("wg")
		g.Spec.WireGuard.Peers[1].Endpoint = &v1alpha1.WireGuardEndpoint{Address: "203.0.113.77", Port: 41000}
		err := env.Client.Update(h.ctx, g)
		return err == nil, ""
	})
	gw = h.waitVPNCond("wg", v1alpha1.ConditionSecurityGroupReady, metav1.ConditionTrue, v1alpha1.ReasonSecurityGroup)
	rules = h.ingressRules(gw.Status.SecurityGroupID)
	if slices.Contains(rules, "udp/51820 from 0.0.0.0/0") || !slices.Contains(rules, "udp/51820 from 203.0.113.77/32") {
		t.Fatalf("rules after the endpoint was set: %v", rules)
	}

	h.noPrivateKeyLeaked(sec.Data[render.WireGuardPrivateKeyKey], "wg")
}

// Rotation: a new annotation value replaces the key; the new key is served on the
// gateway's second port (key slot 1, device wg1) and the previous key keeps its port and
// device (in the Secret, the config and the security group) until every peer has
// completed a handshake with the new key on an interface that uses it; the same value
// never rotates twice.
func TestWireGuardKeyRotation(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.start()
	h.createVPN("rot", wgSpec())
	gw := h.waitVPNConverged("rot")
	oldPub := gw.Status.WireGuard.PublicKey
	oldPriv := h.wgKeySecret("rot").Data[render.WireGuardPrivateKeyKey]
	var dep appsv1.Deployment
	mustGet(t, h, client.ObjectKey{Namespace: h.ns, Name: render.DeploymentName("rot")}, &dep)
	depGen := dep.Generation

	annotate := func(v string) { h.rotateVPNKey("rot", v) }
	annotate("2026-01-01")
	gw = h.waitVPNCond("rot", v1alpha1.ConditionWireGuardKeyReady, metav1.ConditionTrue, v1alpha1.ReasonKeyRotationPending)
	newPub := gw.Status.WireGuard.PublicKey
	sec := h.wgKeySecret("rot")
	if newPub == oldPub || gw.Status.WireGuard.PreviousPublicKey != oldPub || gw.Status.WireGuard.KeyRotatedAt == nil {
		t.Fatalf("after rotation: %+v (old %s)", gw.Status.WireGuard, oldPub)
	}
	if publicOf(t, sec.Data[render.WireGuardPrivateKeyKey]) != newPub || string(sec.Data[render.WireGuardPreviousKeyKey]) != string(oldPriv) {
		t.Fatal("the Secret does not hold the new key with the previous one kept")
	}
	ws := gw.Status.WireGuard
	if ws.ListenPort != 51821 || ws.PreviousListenPort != 51820 || sec.Annotations[render.AnnotationWireGuardKeySlot] != "1" ||
		ws.PreviousKeyRetiresAt == nil || !ws.PreviousKeyRetiresAt.Time.Equal(ws.KeyRotatedAt.Add(operatorconfig.DefaultWireGuardKeyOverlap)) {
		t.Fatalf("the new key is not on the second port with the overlap's deadline: %+v, slot %q", ws, sec.Annotations[render.AnnotationWireGuardKeySlot])
	}
	if c := condOf(gw.Status.Conditions, v1alpha1.ConditionWireGuardKeyReady); !strings.Contains(c, "served on UDP 51821") || !strings.Contains(c, "still on UDP 51820") {
		t.Fatalf("the condition does not say where each key is served: %s", c)
	}
	// Both keys' ports admitted from the fixed peer, both from anywhere for the roamer.
	h.rulesEventually(t, gw.Status.SecurityGroupID, "during the overlap the security group admits both keys' ports", func(rules []string) bool {
		for _, want := range []string{"udp/51820 from 198.51.100.7/32", "udp/51821 from 198.51.100.7/32", "udp/51820 from 0.0.0.0/0", "udp/51821 from 0.0.0.0/0"} {
			if !slices.Contains(rules, want) {
				return false
			}
		}
		return true
	})
	cfgOf := func() *gatewayconfig.WireGuard {
		t.Helper()
		var cm corev1.ConfigMap
		mustGet(t, h, client.ObjectKey{Namespace: h.ns, Name: render.ConfigMapName("rot")}, &cm)
		cfg, err := gatewayconfig.Unmarshal([]byte(cm.Data[gatewayconfig.ConfigMapKeyConfig]))
		if err != nil {
			t.Fatal(err)
		}
		return cfg.WireGuard
	}
	eventually(t, "the config serves both keys", func() (bool, string) {
		c := cfgOf()
		ok := c.PublicKey == newPub && c.ListenPort == 51821 && c.Interface == "wg1" &&
			c.Previous != nil && *c.Previous == gatewayconfig.WireGuardKey{PublicKey: oldPub, ListenPort: 51820, Interface: "wg0"}
		return ok, fmt.Sprintf("%+v previous %+v", c, c.Previous)
	})
	if !converged(gw.Status.Conditions, gw.Generation) {
		t.Fatalf("a pending rotation must not hold a phase: %s", condOf(gw.Status.Conditions, v1alpha1.ConditionReady))
	}
	mustGet(t, h, client.ObjectKey{Namespace: h.ns, Name: render.DeploymentName("rot")}, &dep)
	if dep.Generation != depGen {
		t.Fatal("the rotation rolled the pod (the mounted Secret updates in place)")
	}

	rotated := gw.Status.WireGuard.KeyRotatedAt.Time
	// A handshake reported while the interface still uses the old key does not count,
	// nor does one peer alone.
	h.reportHandshakes("rot", oldPub, rotated.Add(5*time.Second), "hq", "laptop")
	h.quiesce2("rot")
	h.reportHandshakes("rot", newPub, rotated.Add(5*time.Second), "hq")
	h.quiesce2("rot")
	if gw = h.getVPN("rot"); gw.Status.WireGuard.PreviousPublicKey != oldPub {
		t.Fatalf("the previous key was dropped before every peer used the new one: %+v", gw.Status.WireGuard)
	}
	if c := condOf(gw.Status.Conditions, v1alpha1.ConditionWireGuardKeyReady); !strings.Contains(c, "1 of 2 peers") || !strings.Contains(c, "laptop") {
		t.Fatalf("progress not reported: %s", c)
	}
	h.reportHandshakes("rot", newPub, rotated.Add(6*time.Second), "hq", "laptop")
	gw = h.waitVPNCond("rot", v1alpha1.ConditionWireGuardKeyReady, metav1.ConditionTrue, v1alpha1.ReasonKeyReady)
	if gw.Status.WireGuard.PreviousPublicKey != "" || gw.Status.WireGuard.PublicKey != newPub {
		t.Fatalf("after completion: %+v", gw.Status.WireGuard)
	}
	if _, kept := h.wgKeySecret("rot").Data[render.WireGuardPreviousKeyKey]; kept {
		t.Fatal("the previous private key outlived the rotation")
	}
	if ws := gw.Status.WireGuard; ws.ListenPort != 51821 || ws.PreviousListenPort != 0 || ws.PreviousKeyRetiresAt != nil || ws.RetiredPublicKey != "" {
		t.Fatalf("after completion the new key must stay on its port alone: %+v", ws)
	}
	h.rulesEventually(t, gw.Status.SecurityGroupID, "after completion the current key's port admitted alone", func(rules []string) bool {
		return !slices.Contains(rules, "udp/51820 from 198.51.100.7/32") && slices.Contains(rules, "udp/51821 from 198.51.100.7/32")
	})
	eventually(t, "the config serves the new key alone", func() (bool, string) {
		c := cfgOf()
		return c.Previous == nil && c.ListenPort == 51821, fmt.Sprintf("%+v", c)
	})

	// The same value again (any other annotation change too) does not rotate.
	eventually(t, "relabel", func() (bool, string) {
		g := h.getVPN("rot")
		g.Annotations["unrelated"] = "x"
		return env.Client.Update(h.ctx, g) == nil, ""
	})
	h.quiesce2("rot")
	if h.getVPN("rot").Status.WireGuard.PublicKey != newPub {
		t.Fatal("the key rotated again without a new annotation value")
	}

	h.noPrivateKeyLeaked(oldPriv, "rot")
	h.noPrivateKeyLeaked(h.wgKeySecret("rot").Data[render.WireGuardPrivateKeyKey], "rot")
}

// The overlap's deadline retires the previous key although a peer has not switched:
// the Secret, the config and the security group drop it, the condition names the peer
// that is now refused, and turns KeyReady once that peer completed a handshake with the
// new key. A rotation during an overlap retires the key before the previous one at once.
func TestWireGuardKeyOverlapDeadline(t *testing.T) {
	h := newHarness(t)
	h.cfg.WireGuardKeyOverlap = 10 * time.Second
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.start()
	h.createVPN("dl", wgSpec())
	gw := h.waitVPNConverged("dl")
	first := gw.Status.WireGuard.PublicKey
	annotate := func(v string) { h.rotateVPNKey("dl", v) }
	annotate("one")
	gw = h.waitVPNCond("dl", v1alpha1.ConditionWireGuardKeyReady, metav1.ConditionTrue, v1alpha1.ReasonKeyRotationPending)
	second := gw.Status.WireGuard.PublicKey

	// A rotation during the overlap: the first key (slot 0) is retired at once, the
	// third takes its slot and port, the second becomes the previous one.
	annotate("two")
	var third string
	eventually(t, "second rotation", func() (bool, string) {
		gw = h.getVPN("dl")
		ws := gw.Status.WireGuard
		third = ws.PublicKey
		return ws.PublicKey != second && ws.PreviousPublicKey == second && ws.ListenPort == 51820 && ws.PreviousListenPort == 51821 && ws.RetiredPublicKey == first,
			fmt.Sprintf("%+v", ws)
	})
	if third == first {
		t.Fatal("the third key is the first one again")
	}

	rotated := gw.Status.WireGuard.KeyRotatedAt.Time
	h.reportHandshakes("dl", third, rotated.Add(time.Second), "hq")
	gw = h.waitVPNCond("dl", v1alpha1.ConditionWireGuardKeyReady, metav1.ConditionTrue, v1alpha1.ReasonPreviousKeyRetired)
	c := condOf(gw.Status.Conditions, v1alpha1.ConditionWireGuardKeyReady)
	// The peers as the condition lists them: "hq" alone could match inside a base64 key.
	if !strings.Contains(c, "peers [laptop] have not") || !strings.Contains(c, second) || gw.Status.WireGuard.RetiredPublicKey != second {
		t.Fatalf("the retirement's condition must name the key and the peer that did not switch: %s %+v", c, gw.Status.WireGuard)
	}
	if _, kept := h.wgKeySecret("dl").Data[render.WireGuardPreviousKeyKey]; kept || gw.Status.WireGuard.PreviousPublicKey != "" {
		t.Fatal("the previous key outlived its deadline")
	}
	h.rulesEventually(t, gw.Status.SecurityGroupID, "the retired key's port no longer admitted", func(rules []string) bool {
		return !slices.Contains(rules, "udp/51821 from 198.51.100.7/32")
	})
	if !converged(gw.Status.Conditions, gw.Generation) {
		t.Fatalf("a retired key must not hold a phase: %s", condOf(gw.Status.Conditions, v1alpha1.ConditionReady))
	}

	h.reportHandshakes("dl", third, rotated.Add(2*time.Second), "hq", "laptop")
	gw = h.waitVPNCond("dl", v1alpha1.ConditionWireGuardKeyReady, metav1.ConditionTrue, v1alpha1.ReasonKeyReady)
	if gw.Status.WireGuard.RetiredPublicKey != "" {
		t.Fatalf("the retired key is still reported once every peer switched: %+v", gw.Status.WireGuard)
	}
}

// quiesce2 waits until no reconcile finished for a second (VPNGateway variant of
// quiesce, without the cache comparison).
func (h *harness) quiesce2(name string) {
	h.t.Helper()
	time.Sleep(300 * time.Millisecond)
	eventually(h.t, "manager quiet", func() (bool, string) {
		idle := time.Since(time.Unix(0, h.lastReconcile.Load()))
		return idle > time.Second, idle.String()
	})
}

// noPrivateKeyLeaked searches the gateway's status, every Event and every log line of
// the test for the private key.
func (h *harness) noPrivateKeyLeaked(private []byte, name string) {
	h.t.Helper()
	key := string(private)
	if len(key) < 40 {
		h.t.Fatal("no key to search for")
	}
	b, _ := json.Marshal(h.getVPN(name))
	if strings.Contains(string(b), key) {
		h.t.Error("the private key is in the gateway object")
	}
	h.events.mu.Lock()
	events := append([]string(nil), h.events.events...)
	h.events.mu.Unlock()
	h.logs.mu.Lock()
	lines := append([]string(nil), h.logs.lines...)
	h.logs.mu.Unlock()
	if len(events) == 0 || len(lines) == 0 {
		h.t.Fatalf("nothing captured (%d events, %d log lines)", len(events), len(lines))
	}
	for _, l := range append(events, lines...) {
		if strings.Contains(l, key) {
			h.t.Errorf("the private key leaked: %q", l)
		}
	}
	var cms corev1.ConfigMapList
	if err := env.Client.List(h.ctx, &cms, client.InNamespace(h.ns)); err != nil {
		h.t.Fatal(err)
	}
	for _, cm := range cms.Items {
		for _, v := range cm.Data {
			if strings.Contains(v, key) {
				h.t.Errorf("the private key is in ConfigMap %s", cm.Name)
			}
		}
	}
}
