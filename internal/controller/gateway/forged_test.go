package gateway

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/ipam"
	"bnerd.net/vpn-operator/internal/render"
)

// podClient impersonates the gateway pod's ServiceAccount (the operator rendered it,
// its Role and RoleBinding), so the API server judges a write as the pod's own.
func (h *harness) podClient(name string) client.Client {
	h.t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + h.ns + ":" + render.ServiceAccountName(name)}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

// forge patches status fields with the given client through the status subresource.
func (h *harness) forge(c client.Client, name string, fields map[string]string) {
	h.t.Helper()
	body, _ := json.Marshal(map[string]any{"status": fields})
	eventually(h.t, "the forged status write", func() (bool, string) {
		gw := &v1alpha1.IPsecGateway{}
		gw.Namespace, gw.Name = h.ns, name
		err := c.Status().Patch(h.ctx, gw, client.RawPatch(types.MergePatchType, body))
		return err == nil, "patching status: " + errString(err)
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// What the gateway pod may write, the operator does not act on (finding H2 of the
// security review). With the pod's own token, status.serviceCIDR, portFixedIP and
// nodeName are forged to another gateway's /24 and port and to a control-plane node:
// the operator writes back its own values with a StatusForged Event, and no route,
// allocation or placement changes. The same holds when the forged status is read by a
// restarted operator (the allocator is rebuilt from the ports' records, not from
// status, so the older gateway does not take the younger one's /24), and when the
// forging gateway is deleted (only routes to its recorded /24 are removed).
//
// Negative control: with the checks removed (allocate.go's restore, trustedNode,
// recordedCIDR in delete.go and the ports' records in cidrPool), each of the three
// parts fails.
func TestForgedStatusIsNotActedOn(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.node("cp-0", "openstack:///"+serverC, true, map[string]string{"node-role.kubernetes.io/control-plane": ""})
	h.psk("hq-psk", "correct horse battery staple")
	h.start()
	// The attacker is the older gateway: after a restart, a rebuild from status would
	// give it a /24 two statuses name.
	h.create("attacker", spec(true))
	atk := h.waitConverged("attacker").Status
	time.Sleep(10 * time.Millisecond) // a later creation timestamp, to the nanosecond
	h.create("victim", spec(true))
	vic := h.waitConverged("victim").Status
	if atk.ServiceCIDR == vic.ServiceCIDR || atk.PortFixedIP == vic.PortFixedIP || atk.NodeName != "node-a" {
		t.Fatalf("setup: attacker %s via %s on %s, victim %s via %s", atk.ServiceCIDR, atk.PortFixedIP, atk.NodeName, vic.ServiceCIDR, vic.PortFixedIP)
	}
	pod := h.podClient("attacker")
	attackerUID := h.get("attacker").UID

	// untouched checks that nothing the operator programs changed.
	untouched := func(stage string) {
		t.Helper()
		rt := h.operatorRouter()
		if got := routesVia(rt, vic.PortFixedIP); len(got) != 1 || got[0].Destination != vic.ServiceCIDR {
			t.Fatalf("%s: the victim's routes are %v, want %s via %s", stage, got, vic.ServiceCIDR, vic.PortFixedIP)
		}
		for _, x := range rt.Routes {
			if x.Destination == vic.ServiceCIDR && x.NextHop != vic.PortFixedIP {
				t.Fatalf("%s: the victim's /24 is routed via %s", stage, x.NextHop)
			}
		}
		if c, ok := h.r.mustPool(t).Holder(mustPrefix(t, vic.ServiceCIDR)); !ok || c == string(attackerUID) {
			t.Fatalf("%s: the victim's /24 is held by %q", stage, c)
		}
		v := h.get("victim")
		if v.Status.ServiceCIDR != vic.ServiceCIDR || !strings.HasPrefix(condOf(v.Status.Conditions, v1alpha1.ConditionAllocated), "Allocated=True/") {
			t.Fatalf("%s: victim %s, Allocated %s", stage, v.Status.ServiceCIDR, condOf(v.Status.Conditions, v1alpha1.ConditionAllocated))
		}
	}
	restored := func(stage string) {
		t.Helper()
		eventually(t, stage+": the attacker's status restored", func() (bool, string) {
			s := h.get("attacker").Status
			return s.ServiceCIDR == atk.ServiceCIDR && s.PortFixedIP == atk.PortFixedIP && s.NodeName == atk.NodeName,
				s.ServiceCIDR + " via " + s.PortFixedIP + " on " + s.NodeName
		})
		h.quiesce("attacker")
		if got := routesVia(h.operatorRouter(), atk.PortFixedIP); len(got) != 1 || got[0].Destination != atk.ServiceCIDR {
			t.Fatalf("%s: the attacker's routes are %v", stage, got)
		}
		if c, ok := h.r.mustPool(t).Lookup(string(attackerUID)); !ok || c.String() != atk.ServiceCIDR {
			t.Fatalf("%s: the allocator holds %v for the attacker, want %s", stage, c, atk.ServiceCIDR)
		}
		var dep appsv1.Deployment
		if err := env.Client.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: render.DeploymentName("attacker")}, &dep); err != nil {
			t.Fatal(err)
		}
		if n := render.PinnedNode(&dep.Spec.Template.Spec); n != "node-a" {
			t.Fatalf("%s: the attacker's pod is pinned to %q", stage, n)
		}
		if p, _ := h.sim.Port(atk.PortID); p.DeviceID != serverA {
			t.Fatalf("%s: the attacker's port is attached to %q", stage, p.DeviceID)
		}
		untouched(stage)
	}

	// 1. While the operator runs.
	h.forge(pod, "attacker", map[string]string{"serviceCIDR": vic.ServiceCIDR, "portFixedIP": vic.PortFixedIP, "nodeName": "cp-0"})
	restored("running")
	for _, f := range []string{"status.serviceCIDR", "status.portFixedIP", "status.nodeName"} {
		if !h.events.await(v1alpha1.ReasonStatusForged + " " + f) {
			t.Errorf("no StatusForged Event for %s; events: %v", f, h.events.events)
		}
	}

	// 2. Forged while the operator is down, read by the next one.
	h.stopMgr()
	h.forge(pod, "attacker", map[string]string{"serviceCIDR": vic.ServiceCIDR, "portFixedIP": vic.PortFixedIP, "nodeName": "cp-0"})
	h.start()
	restored("after a restart")

	// 3. Forged, then the forging gateway deleted: only its own routes go.
	h.stopMgr()
	h.forge(pod, "attacker", map[string]string{"serviceCIDR": vic.ServiceCIDR, "portFixedIP": vic.PortFixedIP})
	if err := env.Client.Delete(context.Background(), &v1alpha1.IPsecGateway{ObjectMeta: objectMeta(h.ns, "attacker")}); err != nil {
		t.Fatal(err)
	}
	// A new process finalizes the attacker alone first: the victim's reconcile would put
	// a removed route back and hide the removal.
	h.r = New(h.deps())
	h.r.Client, h.r.APIReader = env.Client, env.Client
	eventually(t, "the attacker finalized", func() (bool, string) {
		if err := h.reconcileOnce("attacker"); err != nil {
			return false, err.Error()
		}
		var gw v1alpha1.IPsecGateway
		err := env.Client.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: "attacker"}, &gw)
		return err != nil, "still there"
	})
	untouched("after deleting the forging gateway")
	h.start()
	h.quiesce("victim")
	untouched("after deleting the forging gateway and a reconcile of the victim")
	if got := routesVia(h.operatorRouter(), atk.PortFixedIP); len(got) != 0 {
		t.Fatalf("the attacker's routes outlived it: %v", got)
	}
}

func mustPrefix(t *testing.T, s string) netip.Prefix {
	t.Helper()
	p, err := netip.ParsePrefix(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func objectMeta(ns, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name}
}

func (r *Reconciler) mustPool(t *testing.T) *ipam.ServiceCIDRPool {
	t.Helper()
	p, err := r.cidrPool(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return p
}
