package chart

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/render"
)

// The chart's ValidatingAdmissionPolicy, on a real API server: a gateway pod's token may
// change its status agent's fields and nothing else of the status, while the operator's
// ServiceAccount may change every field. The same writes are first made without the
// policy (the negative control: the pod's token then forges serviceCIDR, portFixedIP and
// nodeName at will).
func TestGatewayStatusPolicy(t *testing.T) {
	cfg := startControlPlane(t)
	objs := mustRender(t, requiredValues()).objs
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	// Everything but the policy, CRDs first.
	var policy []*unstructured.Unstructured
	for _, ns := range []string{releaseNS, "tenant-a"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	for pass := 0; pass < 2; pass++ {
		for _, o := range objs {
			isCRD := o.GetKind() == "CustomResourceDefinition"
			if isCRD != (pass == 0) {
				continue
			}
			if strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") {
				policy = append(policy, o)
				continue
			}
			if err := c.Create(ctx, o.DeepCopy(), client.FieldValidation("Strict")); err != nil {
				t.Fatalf("create of %s %s/%s refused: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
			}
		}
		if pass == 0 {
			waitCRDEstablished(t, c, "ipsecgateways.ipsec.bnerd.net")
			waitCRDEstablished(t, c, "vpngateways.ipsec.bnerd.net")
		}
	}
	if len(policy) != 2 {
		t.Fatalf("the chart renders %d ValidatingAdmissionPolicy objects, want the policy and its binding", len(policy))
	}

	gw := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "acme"}, Spec: v1alpha1.GatewaySpec{Tunnels: []v1alpha1.Tunnel{{
		Name: "hq", Peer: v1alpha1.Peer{Address: "198.51.100.7", Subnets: []string{"192.168.10.0/24"}},
		PreSharedKey: v1alpha1.SecretKeyRef{Name: "psk"},
	}}}}
	if err := c.Create(ctx, gw); err != nil {
		t.Fatal(err)
	}
	g := render.Gateway{APIVersion: v1alpha1.GroupVersion.String(), Kind: "IPsecGateway", Resource: "ipsecgateways", Namespace: gw.Namespace, Name: gw.Name, UID: gw.UID}
	for _, o := range []client.Object{render.ServiceAccount(g), render.Role(g, v1alpha1.GroupVersion.Group, "psk"), render.RoleBinding(g)} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	as := func(user string) client.Client {
		rc := rest.CopyConfig(cfg)
		rc.Impersonate = rest.ImpersonationConfig{UserName: user}
		cl, err := client.New(rc, client.Options{Scheme: scheme})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	pod := as("system:serviceaccount:tenant-a:" + render.ServiceAccountName(gw.Name))
	operator := as("system:serviceaccount:" + releaseNS + ":" + fullname)
	patch := func(cl client.Client, status map[string]any) error {
		body, _ := json.Marshal(map[string]any{"status": status})
		return cl.Status().Patch(ctx, &v1alpha1.IPsecGateway{ObjectMeta: gw.ObjectMeta}, client.RawPatch(types.MergePatchType, body))
	}
	// The operator's own status, as it records it.
	if err := patch(c, map[string]any{"serviceCIDR": "100.64.0.0/24", "portFixedIP": "10.254.0.3", "nodeName": "node-a"}); err != nil {
		t.Fatal(err)
	}
	forged := []map[string]any{
		{"serviceCIDR": "10.0.0.0/8"},
		{"portFixedIP": "10.254.0.7"},
		{"nodeName": "cp-0"},
		{"conditions": []any{map[string]any{"type": "Ready", "status": "True", "reason": "Reconciled", "message": "forged", "lastTransitionTime": "2026-01-01T00:00:00Z"}}},
		{"reverseExposures": []any{map[string]any{"name": "erp", "virtualIP": "10.0.0.1"}}},
	}
	agent := map[string]any{"tunnelsReady": "0/1", "tunnels": []any{map[string]any{"name": "hq", "state": "Down"}}}

	// Negative control: without the policy, RBAC alone lets the pod forge every field.
	// (The RBAC cache may lag the binding's create: the first write is retried briefly.)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return patch(pod, forged[0]) == nil, nil
	})
	if err != nil {
		t.Fatalf("without the policy the pod's token could not write status at all: %v", patch(pod, forged[0]))
	}
	for _, f := range forged[1:] {
		if err := patch(pod, f); err != nil {
			t.Fatalf("without the policy the pod's write of %v was refused: %v", f, err)
		}
	}
	if err := patch(c, map[string]any{"serviceCIDR": "100.64.0.0/24", "portFixedIP": "10.254.0.3", "nodeName": "node-a", "conditions": nil, "reverseExposures": nil}); err != nil {
		t.Fatal(err)
	}

	for _, o := range policy {
		if err := c.Create(ctx, o.DeepCopy(), client.FieldValidation("Strict")); err != nil {
			t.Fatalf("create of %s %s refused: %v", o.GetKind(), o.GetName(), err)
		}
	}
	// The policy takes effect once the API server has loaded it. Each attempt writes a
	// new value: a write that changes nothing is no forgery.
	attempt := 0
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		attempt++
		return patch(pod, map[string]any{"serviceCIDR": fmt.Sprintf("10.%d.0.0/16", attempt%250)}) != nil, nil
	})
	if err != nil {
		vap := &unstructured.Unstructured{}
		vap.SetAPIVersion("admissionregistration.k8s.io/v1")
		vap.SetKind("ValidatingAdmissionPolicy")
		_ = c.Get(ctx, client.ObjectKey{Name: policy[0].GetName()}, vap)
		st, _ := json.Marshal(vap.Object["status"])
		t.Fatalf("the policy never refused the pod's forged serviceCIDR (policy status %s)", st)
	}
	for _, f := range forged {
		err := patch(pod, f)
		if err == nil {
			t.Errorf("the pod's token wrote %v", f)
			continue
		}
		if !strings.Contains(err.Error(), "the gateway pod may write only status.tunnels") {
			t.Errorf("the pod's write of %v was refused for another reason: %v", f, err)
		}
	}
	if err := patch(pod, agent); err != nil {
		t.Errorf("the pod's token may no longer write its agent's fields: %v", err)
	}
	// The operator writes every field.
	if err := patch(operator, map[string]any{"serviceCIDR": "100.64.1.0/24", "nodeName": "node-b"}); err != nil {
		t.Errorf("the operator's ServiceAccount could not write its fields: %v", err)
	}
	var got v1alpha1.IPsecGateway
	if err := c.Get(ctx, client.ObjectKeyFromObject(gw), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.ServiceCIDR != "100.64.1.0/24" || got.Status.PortFixedIP != "10.254.0.3" || got.Status.NodeName != "node-b" || got.Status.TunnelsReady != "0/1" {
		t.Errorf("status after the writes: serviceCIDR %s portFixedIP %s nodeName %s tunnelsReady %s", got.Status.ServiceCIDR, got.Status.PortFixedIP, got.Status.NodeName, got.Status.TunnelsReady)
	}
}

func waitCRDEstablished(t *testing.T, c client.Client, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			return false, nil
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("CRD %s never became Established: %v", name, err)
	}
}

// The policy names every status field but the status agent's: a field added to the
// status later is the operator's unless it is added to the agent's list on purpose.
func TestGatewayStatusPolicyCoversEveryField(t *testing.T) {
	var vap *unstructured.Unstructured
	for _, o := range mustRender(t, requiredValues()).objs {
		if o.GetKind() == "ValidatingAdmissionPolicy" {
			vap = o
		}
	}
	if vap == nil {
		t.Fatal("the chart renders no ValidatingAdmissionPolicy by default")
	}
	vals, _, _ := unstructured.NestedSlice(vap.Object, "spec", "validations")
	var exprs []string
	for _, v := range vals {
		exprs = append(exprs, v.(map[string]any)["expression"].(string))
	}
	agent := map[string]bool{"tunnels": true, "tunnelsReady": true, "tunnelsObservedTime": true, "interfacePublicKey": true}
	st := reflect.TypeOf(v1alpha1.GatewayStatus{})
	for i := 0; i < st.NumField(); i++ {
		name, _, _ := strings.Cut(st.Field(i).Tag.Get("json"), ",")
		if name == "" || agent[name] {
			continue
		}
		want := "object.?status.?" + name + " == oldObject.?status.?" + name
		if !slices.Contains(exprs, want) {
			t.Errorf("the policy does not keep the gateway pod from writing status.%s", name)
		}
	}
	if len(exprs) != st.NumField()-len(agent) {
		t.Errorf("the policy has %d validations for %d operator fields", len(exprs), st.NumField()-len(agent))
	}
	off := mustRender(t, with(requiredValues(), "gatewayStatusPolicy.enabled", false)).objs
	for _, o := range off {
		if strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") {
			t.Errorf("gatewayStatusPolicy.enabled=false still renders %s", o.GetKind())
		}
	}
}
