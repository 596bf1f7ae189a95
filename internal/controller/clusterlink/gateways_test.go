package clusterlink

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

func gatewaySpec(reverse bool) v1alpha1.GatewaySpec {
	s := v1alpha1.GatewaySpec{
		Tunnels: []v1alpha1.Tunnel{{
			Name:         "hq",
			Peer:         v1alpha1.Peer{Address: "198.51.100.7", Subnets: []string{"192.168.10.0/24"}},
			PreSharedKey: v1alpha1.SecretKeyRef{Name: "hq-psk"},
		}},
		Exposures: []v1alpha1.Exposure{{Name: "web", Target: v1alpha1.Target{Address: "10.250.0.20", Ports: []v1alpha1.PortSpec{{Port: 443}}}}},
	}
	if reverse {
		s.ReverseExposures = []v1alpha1.ReverseExposure{{Name: "erp", Tunnel: "hq",
			Target: v1alpha1.Target{Address: "192.168.10.5", Ports: []v1alpha1.PortSpec{{Port: 8443}}}}}
	}
	return s
}

func ensureNS(t *testing.T, ns string) { ensureNamespace(t, ns) }

// customerNS labels a namespace as the customer project's, so a cross-tenant link
// without a gatewaySelector serves its gateways.
func customerNS(t *testing.T, ns, project string) {
	t.Helper()
	ensureNS(t, ns)
	labelNS(t, ns, map[string]string{v1alpha1.LabelCustomerProject: project})
}

func labelNS(t *testing.T, ns string, labels map[string]string) {
	t.Helper()
	waitFor(t, "namespace "+ns+" labelled", func() (bool, string) {
		var n corev1.Namespace
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: ns}, &n); err != nil {
			return false, err.Error()
		}
		n.Labels = labels
		if err := env.Client.Update(context.Background(), &n); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// ipsecGateway creates an IPsecGateway and fills the status fields the gateway
// reconciler would (service CIDR and transit port address).
func ipsecGateway(t *testing.T, ns, name string, reverse bool, cidr, portIP string) *v1alpha1.IPsecGateway {
	t.Helper()
	ensureNS(t, ns)
	ctx := context.Background()
	gw := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: gatewaySpec(reverse)}
	if err := env.Client.Create(ctx, gw); err != nil {
		t.Fatal(err)
	}
	gw.Status.ServiceCIDR, gw.Status.PortFixedIP = cidr, portIP
	if err := env.Client.Status().Update(ctx, gw); err != nil {
		t.Fatal(err)
	}
	makeGatewayPort(t, "IPsecGateway", gw, cidr, portIP)
	return gw
}

func vpnGateway(t *testing.T, ns, name string, reverse bool, cidr, portIP string) *v1alpha1.VPNGateway {
	t.Helper()
	ensureNS(t, ns)
	ctx := context.Background()
	gw := &v1alpha1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1alpha1.VPNGatewaySpec{GatewaySpec: gatewaySpec(reverse)}}
	if err := env.Client.Create(ctx, gw); err != nil {
		t.Fatal(err)
	}
	gw.Status.ServiceCIDR, gw.Status.PortFixedIP = cidr, portIP
	if err := env.Client.Status().Update(ctx, gw); err != nil {
		t.Fatal(err)
	}
	makeGatewayPort(t, "VPNGateway", gw, cidr, portIP)
	return gw
}

// current is the running test's harness (the tests of this package run one at a
// time): the gateway helpers make the gateway's dedicated port in its simulated cloud.
var current *harness

// makeGatewayPort makes, in the operator's project, the dedicated port the gateway
// reconciler would: tagged for the gateway, holding portIP on the transit subnet and
// recording the gateway's service CIDR. A port the gateway had before is replaced.
func makeGatewayPort(t *testing.T, kind string, gw client.Object, cidr, portIP string) {
	t.Helper()
	h := current
	if h == nil || portIP == "" {
		return
	}
	owner := openstack.Owner{Kind: kind, Namespace: gw.GetNamespace(), Name: gw.GetName(), UID: string(gw.GetUID())}
	for _, p := range h.sim.PortsByTag(owner.Selector()...) {
		if err := h.sim.DeletePort(p.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.sim.AddPort(openstacksim.Port{NetworkID: h.transitNetID(), ProjectID: projOperator, Name: openstack.ResourceName(kind, gw.GetNamespace(), gw.GetName()),
		FixedIPs: []openstacksim.FixedIP{{SubnetID: h.transitSubnetID(), IPAddress: portIP}}, Tags: openstack.WithServiceCIDR(owner.Tags(), cidr)}); err != nil {
		t.Fatalf("gateway port %s: %v", portIP, err)
	}
}

// setReverse adds or clears an IPsecGateway's reverse exposures.
func setReverse(t *testing.T, ns, name string, reverse bool) {
	t.Helper()
	ctx := context.Background()
	for range 10 {
		gw := &v1alpha1.IPsecGateway{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, gw); err != nil {
			t.Fatal(err)
		}
		gw.Spec.ReverseExposures = gatewaySpec(reverse).ReverseExposures
		err := env.Client.Update(ctx, gw)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatal("update kept conflicting")
}

func setPortIP(t *testing.T, ns, name, ip string) {
	t.Helper()
	ctx := context.Background()
	gw := &v1alpha1.IPsecGateway{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, gw); err != nil {
		t.Fatal(err)
	}
	gw.Status.PortFixedIP = ip
	makeGatewayPort(t, "IPsecGateway", gw, gw.Status.ServiceCIDR, ip) // the port was replaced
	if err := env.Client.Status().Update(ctx, gw); err != nil {
		t.Fatal(err)
	}
}

func deleteIPsecGateway(t *testing.T, ns, name string) {
	t.Helper()
	err := env.Client.Delete(context.Background(), &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	if err != nil {
		t.Fatal(err)
	}
}

func gwCIDR(i int) string { return fmt.Sprintf("100.64.%d.0/24", i) }
func gwIP(i int) string   { return fmt.Sprintf("10.254.0.%d", 100+i) }
