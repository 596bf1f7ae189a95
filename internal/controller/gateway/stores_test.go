package gateway

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// TestStoresReadWhatTheClientLists: with the binary's kind of cache (every namespace,
// pods cached by label), the tenant count and the node load read the gateways from
// the informer stores in place, and see exactly the gateways of both kinds a list
// through the manager's client sees, per namespace and in the estate. (The other tests
// of this package run a cache per namespace, whose reads list through the client.)
func TestStoresReadWhatTheClientLists(t *testing.T) {
	h := newHarness(t)
	other := h.ns + "-b"
	if err := env.Client.Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}); err != nil {
		t.Fatal(err)
	}
	h.extraNS = append(h.extraNS, other) // removed with the harness
	for _, ns := range []string{h.ns, other} {
		for i := range 2 {
			if err := env.Client.Create(h.ctx, &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("ipsec-%d", i)}, Spec: spec(false)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := env.Client.Create(h.ctx, &v1alpha1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wg"}, Spec: wgSpec()}); err != nil {
			t.Fatal(err)
		}
	}

	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: GatewayPodSelector()}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	fast := New(Deps{})
	fast.fillFromManager(mgr)
	if fast.stores == nil {
		t.Fatal("a manager's client over a cache of every namespace: the reconciler reads no stores in place")
	}
	listed := New(Deps{Client: struct{ client.Client }{mgr.GetClient()}}) // not the manager's: lists
	listed.fillFromManager(mgr)
	if listed.stores != nil {
		t.Fatal("a client other than the manager's: the reconciler reads the stores anyway")
	}
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("the manager's cache did not sync")
	}

	names := func(r *Reconciler, opts ...client.ListOption) ([]string, map[string]any) {
		var out []string
		ptrs := map[string]any{}
		if err := r.eachGateway(h.ctx, func(g readOnlyGateway) {
			if g.meta.GetNamespace() != h.ns && g.meta.GetNamespace() != other {
				return // another test's
			}
			k := g.kind + " " + g.meta.GetNamespace() + "/" + g.meta.GetName()
			if g.spec == nil || g.status == nil || (g.kind == v1alpha1.KindVPNGateway) != (g.wg != nil) {
				t.Errorf("%s read without its spec, status or WireGuard part", k)
			}
			out = append(out, k)
			ptrs[k] = g.meta
		}, opts...); err != nil {
			t.Fatal(err)
		}
		slices.Sort(out)
		return out, ptrs
	}
	eventually(t, "the cache shows the six gateways", func() (bool, string) {
		got, _ := names(listed)
		return len(got) == 6, fmt.Sprint(got)
	})
	for _, opts := range [][]client.ListOption{nil, {client.InNamespace(h.ns)}, {client.InNamespace(other)}} {
		want, _ := names(listed, opts...)
		got, first := names(fast, opts...)
		if !slices.Equal(got, want) || len(want) == 0 {
			t.Errorf("options %v: the stores show %v, a list through the client %v", opts, got, want)
		}
		// In place: the same objects on every read, where a list hands out copies.
		_, again := names(fast, opts...)
		_, copies := names(listed, opts...)
		for k, p := range first {
			if again[k] != p {
				t.Errorf("%s: two reads from the stores gave two objects", k)
			}
			if copies[k] == p {
				t.Errorf("%s: a list through the client gave the store's own object", k)
			}
		}
	}
	if got, _ := names(fast, client.InNamespace(h.ns)); !slices.Equal(got, []string{
		"IPsecGateway " + h.ns + "/ipsec-0", "IPsecGateway " + h.ns + "/ipsec-1", "VPNGateway " + h.ns + "/wg"}) {
		t.Errorf("namespace %s from the stores: %v", h.ns, got)
	}
}
