package gateway

import (
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/status"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/render"
)

// A gateway goes from nothing to converged: every phase's OpenStack object exists,
// tagged, and every Kubernetes object is owned by the gateway; it is Ready once its pod
// runs and its status agent reports every tunnel up. A second reconcile of the
// converged gateway makes no write to OpenStack or to the API server.
func TestCreateToReadyAndSteadyState(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.node("node-b", "openstack:///"+serverB, true, nil)
	h.node("cp-0", "openstack:///"+serverC, true, map[string]string{"node-role.kubernetes.io/control-plane": ""})
	h.psk("hq-psk", "correct horse battery staple")
	h.start()
	h.create("acme", spec(true))
	gw := h.waitConverged("acme")
	// Converged is not Ready: no pod runs (envtest has no kubelet), no tunnel is up.
	gw = h.waitHealth("acme", v1alpha1.ConditionPodReady, v1alpha1.ReasonPodNotFound)
	expectReady(t, gw, metav1.ConditionFalse, v1alpha1.ReasonPodNotFound, "the OpenStack and Kubernetes objects are converged, but PodReady is False")

	st := gw.Status
	if st.ServiceCIDR == "" || st.ServiceCIDRGatewayAddress != strings.TrimSuffix(st.ServiceCIDR, "0/24")+"1" {
		t.Fatalf("service CIDR %q, gateway address %q", st.ServiceCIDR, st.ServiceCIDRGatewayAddress)
	}
	prefix := strings.TrimSuffix(st.ServiceCIDR, "0/24")
	if len(st.Exposures) != 1 || st.Exposures[0].VirtualIP != prefix+"10" {
		t.Fatalf("exposure VIPs %v", st.Exposures)
	}
	if len(st.ReverseExposures) != 1 || st.ReverseExposures[0].VirtualIP != prefix+"200" {
		t.Fatalf("reverse VIPs %v", st.ReverseExposures)
	}
	if st.NodeName != "node-a" || st.ServerID != serverA {
		t.Fatalf("node %q server %q: want node-a (first Ready worker by name) on %s", st.NodeName, st.ServerID, serverA)
	}
	if st.SubnetCIDR != "10.254.0.0/24" || st.SubnetGatewayIP != "10.254.0.1" || st.PortMACAddress == "" {
		t.Fatalf("port facts %+v", st)
	}
	if st.TunnelsReady != "" || st.Tunnels != nil || st.TunnelsObservedTime != nil {
		t.Fatalf("the operator wrote the status agent's fields: tunnelsReady %q, tunnels %v, observed %v", st.TunnelsReady, st.Tunnels, st.TunnelsObservedTime)
	}

	// OpenStack: one of each, tagged, wired together.
	ports, sgs, fips := h.tagged(gw.UID)
	if ports != 1 || sgs != 1 || fips != 1 {
		t.Fatalf("tagged objects: %d ports, %d security groups, %d floating IPs", ports, sgs, fips)
	}
	port, _ := h.sim.Port(st.PortID)
	if port.DeviceID != serverA || len(port.SecurityGroups) != 1 || port.SecurityGroups[0] != st.SecurityGroupID {
		t.Fatalf("port %+v", port)
	}
	if len(port.AllowedAddressPairs) != 1 || port.AllowedAddressPairs[0].IPAddress != st.ServiceCIDR {
		t.Fatalf("allowed address pairs %v", port.AllowedAddressPairs)
	}
	if got := routesVia(h.operatorRouter(), st.PortFixedIP); len(got) != 1 || got[0].Destination != st.ServiceCIDR {
		t.Fatalf("routes via the port: %v", got)
	}
	var fipFound bool
	for _, f := range h.sim.FloatingIPs() {
		if f.ID == st.FloatingIPID {
			fipFound = f.PortID == st.PortID && f.FloatingIPAddress == st.FloatingIP
		}
	}
	if !fipFound {
		t.Fatal("floating IP not associated with the port")
	}
	want := []string{"tcp/8443 from 10.250.0.0/16", "udp/4500 from 198.51.100.7/32", "udp/500 from 198.51.100.7/32"}
	if got := h.ingressRules(st.SecurityGroupID); strings.Join(got, ";") != strings.Join(want, ";") {
		t.Fatalf("ingress rules %v, want %v", got, want)
	}

	// Kubernetes objects, all controlled by the gateway.
	key := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: h.ns, Name: name} }
	var cm corev1.ConfigMap
	mustGet(t, h, key(render.ConfigMapName("acme")), &cm)
	cfg, err := gatewayconfig.Unmarshal([]byte(cm.Data[gatewayconfig.ConfigMapKeyConfig]))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.FloatingIP != st.FloatingIP || cfg.PortFixedIP != st.PortFixedIP || len(cfg.Exposures) != 1 {
		t.Fatalf("config %+v", cfg)
	}
	if len(cm.Data) != 1 || strings.Contains(cm.Data[gatewayconfig.ConfigMapKeyConfig], "correct horse") {
		t.Fatalf("the ConfigMap carries more than gateway.json: %v", cm.Data)
	}
	if cfg.Tunnels[0].PSK != (gatewayconfig.SecretKeyRef{Secret: "hq-psk", Key: "psk"}) {
		t.Fatalf("the config names the key %+v", cfg.Tunnels[0].PSK)
	}
	// The operator writes no Secret: the pod reads the tenant's.
	var legacy corev1.Secret
	if err := env.Client.Get(h.ctx, key(render.LegacySecretName("acme")), &legacy); !apierrors.IsNotFound(err) {
		t.Fatalf("a Secret of rendered keys exists: %v", err)
	}
	nad := &unstructured.Unstructured{}
	nad.SetGroupVersionKind(render.NADGVK)
	mustGet(t, h, key(render.NADName("acme")), nad)
	conf, _, _ := unstructured.NestedString(nad.Object, "spec", "config")
	if !strings.Contains(conf, `"hwaddr":"`+st.PortMACAddress+`"`) || !strings.Contains(conf, st.PortFixedIP+"/32") {
		t.Fatalf("NAD config %s", conf)
	}
	var dep appsv1.Deployment
	mustGet(t, h, key(render.DeploymentName("acme")), &dep)
	if render.PinnedNode(&dep.Spec.Template.Spec) != "node-a" || dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType ||
		!strings.Contains(dep.Spec.Template.Annotations[render.AnnotationNetworks], render.NADName("acme")) {
		t.Fatalf("deployment %+v", dep.Spec)
	}
	var role rbacv1.Role
	mustGet(t, h, key(render.RoleName("acme")), &role)
	if len(role.Rules) != 4 || role.Rules[1].Resources[0] != "secrets" || strings.Join(role.Rules[1].ResourceNames, ",") != "hq-psk" ||
		role.Rules[2].Resources[0] != "leases" || strings.Join(role.Rules[2].ResourceNames, ",") != render.LivenessLeaseName("acme") ||
		strings.Join(role.Rules[2].Verbs, ",") != "get,update" ||
		role.Rules[3].Resources[0] != "ipsecgateways/status" || role.Rules[3].ResourceNames[0] != "acme" {
		t.Fatalf("role %+v", role.Rules)
	}
	var rb rbacv1.RoleBinding
	mustGet(t, h, key(render.RoleName("acme")), &rb)
	var sa corev1.ServiceAccount
	mustGet(t, h, key(render.ServiceAccountName("acme")), &sa)
	var np networkingv1.NetworkPolicy
	mustGet(t, h, key(render.NetworkPolicyName("acme")), &np)
	for _, o := range []metav1.Object{&cm, nad, &dep, &role, &rb, &sa, &np} {
		if !metav1.IsControlledBy(o, gw) {
			t.Fatalf("%s is not controlled by the gateway", o.GetName())
		}
	}

	// The pod runs (as a kubelet would report it) and the status agent reports the
	// tunnel up: Ready.
	h.pod("acme", "node-a", runningReady(time.Now().Add(-time.Minute).Truncate(time.Second)))
	h.report(h.agent("acme"), map[string]string{"hq": status.StateUp})
	gw = h.waitCond("acme", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReconciled)
	if gw.Status.TunnelSummary != "1/1" {
		t.Fatalf("tunnelSummary %q", gw.Status.TunnelSummary)
	}

	// The convergence was announced once, by Ready=True's Event (it follows the status
	// write that made the gateway Ready), and so were the observations that moved from
	// what they first said (the pod and the tunnels); a phase completing the first time
	// on the way is no Event of its own (skeleton.FirstTrue).
	h.events.await("Normal " + v1alpha1.ReasonReconciled + " ")
	h.events.mu.Lock()
	all := strings.Join(h.events.events, "\n")
	n := len(h.events.events)
	h.events.mu.Unlock()
	t.Logf("the creation's %d Events:\n%s", n, all)
	for _, reason := range []string{v1alpha1.ReasonPodReady, v1alpha1.ReasonTunnelsUp, v1alpha1.ReasonReconciled} {
		if !strings.Contains(all, "Normal "+reason+" ") {
			t.Errorf("no Normal event with reason %s in:\n%s", reason, all)
		}
	}
	quiet := []string{v1alpha1.ReasonValid, v1alpha1.ReasonAllocated, v1alpha1.ReasonPortReady, v1alpha1.ReasonSecurityGroup,
		v1alpha1.ReasonFloatingIPReady, v1alpha1.ReasonRoutingReady, v1alpha1.ReasonNodeSelected, v1alpha1.ReasonPortAttached, v1alpha1.ReasonWorkloadReady}
	for _, e := range strings.Split(all, "\n") {
		if f := strings.Fields(e); len(f) > 1 && slices.Contains(quiet, f[1]) {
			t.Errorf("an Event of a phase that completed the first time: %s", e)
		}
	}

	// Steady state: zero writes anywhere.
	h.quiesce("acme")
	h.sim.ResetCounters()
	writes, events := h.writes.Load(), h.events.n.Load()
	if err := h.reconcileOnce("acme"); err != nil {
		t.Fatal(err)
	}
	c := h.sim.Counters()
	if c.Writes != 0 {
		t.Fatalf("converged reconcile made %d OpenStack writes: %v", c.Writes, c.ByRoute)
	}
	if d := h.writes.Load() - writes; d != 0 {
		t.Fatalf("converged reconcile made %d API-server writes", d)
	}
	if d := h.events.n.Load() - events; d != 0 {
		t.Fatalf("converged reconcile emitted %d events", d)
	}
	t.Logf("steady-state reconcile: %d OpenStack reads %v", c.Reads, c.ByRoute)

	// A VPNGateway with protocol ipsec is the same gateway under another kind.
	vgw := &v1alpha1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "acme-vpn"},
		Spec: v1alpha1.VPNGatewaySpec{GatewaySpec: spec(false), Protocol: v1alpha1.VPNProtocolIPsec}}
	if err := env.Client.Create(h.ctx, vgw); err != nil {
		t.Fatal(err)
	}
	eventually(t, "VPNGateway Ready", func() (bool, string) {
		mustGet(t, h, types.NamespacedName{Namespace: h.ns, Name: "acme-vpn"}, vgw)
		return converged(vgw.Status.Conditions, vgw.Generation), condOf(vgw.Status.Conditions, v1alpha1.ConditionReady)
	})
	if vgw.Status.ServiceCIDR == st.ServiceCIDR {
		t.Fatal("the VPNGateway got the IPsecGateway's service CIDR")
	}
	mustGet(t, h, key(render.RoleName("acme-vpn")), &role)
	if role.Rules[3].Resources[0] != "vpngateways/status" {
		t.Fatalf("VPNGateway role %+v", role.Rules)
	}
}

func mustGet(t *testing.T, h *harness, key client.ObjectKey, obj client.Object) {
	t.Helper()
	if err := env.Client.Get(h.ctx, key, obj); err != nil {
		t.Fatalf("get %T %s: %v", obj, key, err)
	}
}
