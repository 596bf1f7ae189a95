package gateway

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// intervalFields are the tunnel schema's bounded fields: property path below a tunnel.
var intervalFields = [][2]string{{"ike", "lifetime"}, {"esp", "lifetime"}, {"dpd", "delay"}}

// withoutIntervalRules replaces the IPsecGateway and VPNGateway CRDs by copies without
// the interval rules (the CRDs as they were before the bounds), and returns the function
// that puts the real ones back. Restoring is also registered as a cleanup.
func withoutIntervalRules(h *harness) (restore func()) {
	h.t.Helper()
	var originals []*apiextensionsv1.CustomResourceDefinition
	for _, n := range []string{"ipsecgateways.ipsec.bnerd.net", "vpngateways.ipsec.bnerd.net"} {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := env.Client.Get(h.ctx, client.ObjectKey{Name: n}, &crd); err != nil {
			h.t.Fatal(err)
		}
		originals = append(originals, crd.DeepCopy())
		removed := 0
		for vi := range crd.Spec.Versions {
			sch := crd.Spec.Versions[vi].Schema.OpenAPIV3Schema
			tunnel := sch.Properties["spec"].Properties["tunnels"].Items.Schema
			for _, f := range intervalFields {
				opts := tunnel.Properties[f[0]]
				leaf := opts.Properties[f[1]]
				removed += len(leaf.XValidations)
				leaf.XValidations = nil
				opts.Properties[f[1]] = leaf
				tunnel.Properties[f[0]] = opts
			}
		}
		if removed != 3*len(crd.Spec.Versions) {
			h.t.Fatalf("%s: found %d interval rules", n, removed)
		}
		if err := env.Client.Update(h.ctx, &crd); err != nil {
			h.t.Fatal(err)
		}
	}
	done := false
	restore = func() {
		if done {
			return
		}
		done = true
		for _, o := range originals {
			eventually(h.t, "restoring CRD "+o.Name, func() (bool, string) {
				var cur apiextensionsv1.CustomResourceDefinition
				if err := env.Client.Get(h.ctx, client.ObjectKey{Name: o.Name}, &cur); err != nil {
					return false, err.Error()
				}
				cur.Spec = *o.Spec.DeepCopy()
				if err := env.Client.Update(h.ctx, &cur); err != nil {
					return false, err.Error()
				}
				return true, ""
			})
		}
	}
	h.t.Cleanup(restore)
	return restore
}

// A gateway stored with intervals outside the bounds (before the CRD had its rules, or
// past admission some other way) gets Validated=False/IntervalOutOfBounds naming each
// field, and nothing is built for it; brought within the bounds, it converges.
func TestIntervalOutOfBoundsStored(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()

	short := spec(false)
	short.Tunnels[0].IKE.Lifetime = "1"
	short.Tunnels[0].ESP.Lifetime = "1"
	short.Tunnels[0].DPD.Delay = "1s"

	restore := withoutIntervalRules(h)
	var gw *v1alpha1.IPsecGateway
	var vg *v1alpha1.VPNGateway
	// The API server takes the relaxed CRD a moment after the update.
	eventually(t, "storing out-of-bounds gateways", func() (bool, string) {
		if gw == nil {
			g := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "stale"}, Spec: short}
			if err := env.Client.Create(h.ctx, g); err != nil {
				return false, err.Error()
			}
			gw = g
		}
		if vg == nil {
			v := &v1alpha1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "stale-vpn"},
				Spec: v1alpha1.VPNGatewaySpec{Protocol: v1alpha1.VPNProtocolIPsec, GatewaySpec: short}}
			if err := env.Client.Create(h.ctx, v); err != nil {
				return false, err.Error()
			}
			vg = v
		}
		return true, ""
	})
	restore()
	// The rules apply again: the same spec is now refused at admission.
	eventually(t, "the interval rules back in force", func() (bool, string) {
		probe := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, GenerateName: "probe-"}, Spec: short}
		err := env.Client.Create(h.ctx, probe)
		if err == nil {
			_ = env.Client.Delete(h.ctx, probe)
			return false, "still accepted"
		}
		return strings.Contains(err.Error(), "dpd.delay must be between 10s and 1h"), err.Error()
	})

	want := []string{
		`spec.tunnels[0].ike.lifetime: Invalid value: "1": ike.lifetime must be between 10m and 24h (600 to 86400 seconds)`,
		`spec.tunnels[0].esp.lifetime: Invalid value: "1": esp.lifetime must be between 5m and 8h (300 to 28800 seconds)`,
		`spec.tunnels[0].dpd.delay: Invalid value: "1s": dpd.delay must be between 10s and 1h (10 to 3600 seconds)`,
	}
	got := h.waitCond("stale", v1alpha1.ConditionValidated, metav1.ConditionFalse, v1alpha1.ReasonIntervalOutOfBounds)
	c := condOf(got.Status.Conditions, v1alpha1.ConditionValidated)
	gotVPN := h.waitVPNCond("stale-vpn", v1alpha1.ConditionValidated, metav1.ConditionFalse, v1alpha1.ReasonIntervalOutOfBounds)
	cv := condOf(gotVPN.Status.Conditions, v1alpha1.ConditionValidated)
	for _, w := range want {
		if !strings.Contains(c, w) {
			t.Errorf("IPsecGateway: %s\ndoes not name %s", c, w)
		}
		if !strings.Contains(cv, w) {
			t.Errorf("VPNGateway: %s\ndoes not name %s", cv, w)
		}
	}
	h.quiesce("stale")
	for _, x := range []struct {
		what string
		obj  client.Object
	}{{"IPsecGateway", gw}, {"VPNGateway", vg}} {
		if ports, sgs, fips := h.tagged(x.obj.GetUID()); ports+sgs+fips != 0 {
			t.Errorf("%s: a gateway with out-of-bounds intervals got %d ports, %d security groups, %d floating IPs", x.what, ports, sgs, fips)
		}
	}

	// Within the bounds (the update passes the restored rules), the gateway is built.
	h.mutate("stale", func(s *v1alpha1.GatewaySpec) {
		s.Tunnels[0].IKE.Lifetime, s.Tunnels[0].ESP.Lifetime, s.Tunnels[0].DPD.Delay = "10m", "5m", "10s"
	})
	h.waitConverged("stale")
}
