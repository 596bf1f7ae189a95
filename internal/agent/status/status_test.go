package status

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/vici"
)

var now = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestCompute(t *testing.T) {
	sas := map[string][]vici.IKESA{
		"up":   {{Name: "up", State: "ESTABLISHED", EstablishedSeconds: 65, Children: []vici.ChildSA{{Name: "up", State: "INSTALLED"}, {Name: "up", State: "REKEYED"}}}},
		"half": {{Name: "half", State: "ESTABLISHED", EstablishedSeconds: 3}},
		"neg":  {{Name: "neg", State: "CONNECTING"}},
	}
	got, ready := Compute([]string{"up", "half", "neg", "down"}, sas, now)
	if ready != "1/4" {
		t.Errorf("ready %s", ready)
	}
	want := []string{StateUp, StateConnecting, StateConnecting, StateDown}
	for i, s := range got {
		if s.State != want[i] {
			t.Errorf("%s: %s, want %s", s.Name, s.State, want[i])
		}
	}
	if got[0].ChildSAs != 1 || got[0].IKESAs != 1 || !got[0].EstablishedAt.Time.Equal(now.Add(-65*time.Second)) {
		t.Errorf("up tunnel: %+v", got[0])
	}
}

func scheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestWriterWritesOnlyOnChange(t *testing.T) {
	gw := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gw"},
		Status: v1alpha1.GatewayStatus{FloatingIP: "192.0.2.1", Conditions: []metav1.Condition{{Type: "Ready", Status: "True", Reason: "Ok", LastTransitionTime: metav1.Now()}}}}
	patches := 0
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(gw).WithStatusSubresource(gw).
		WithInterceptorFuncs(interceptor.Funcs{
			// The fake client cannot GET a status subresource; the real API server can
			// (apiserver_test.go), so serve it from the object.
			SubResourceGet: func(ctx context.Context, cl client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceGetOption) error {
				return cl.Get(ctx, client.ObjectKeyFromObject(obj), subObj)
			},
			SubResourceApply: func(ctx context.Context, cl client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
				patches++
				return cl.SubResource(sub).Apply(ctx, obj, opts...)
			}}).Build()
	w := &Writer{Client: c, Kind: "IPsecGateway", Namespace: "ns", Name: "gw"}
	ctx := context.Background()
	sas := map[string][]vici.IKESA{"t1": {{Name: "t1", State: "ESTABLISHED", EstablishedSeconds: 10, Children: []vici.ChildSA{{Name: "t1", State: "INSTALLED"}}}}}
	tun, ready := Compute([]string{"t1"}, sas, now)
	if wrote, err := w.Write(ctx, tun, ready); err != nil || !wrote {
		t.Fatalf("first write: %v %v", wrote, err)
	}
	// a second later charon reports one second more age: same establishment, no write
	sas["t1"][0].EstablishedSeconds = 11
	tun, ready = Compute([]string{"t1"}, sas, now.Add(time.Second))
	if wrote, err := w.Write(ctx, tun, ready); err != nil || wrote {
		t.Fatalf("unchanged state written: %v %v", wrote, err)
	}
	if patches != 1 {
		t.Errorf("patches %d, want 1", patches)
	}
	var got v1alpha1.IPsecGateway
	_ = c.Get(ctx, client.ObjectKeyFromObject(gw), &got)
	if got.Status.TunnelsReady != "1/1" || len(got.Status.Tunnels) != 1 || got.Status.FloatingIP != "192.0.2.1" || len(got.Status.Conditions) != 1 {
		t.Errorf("status after patch: %+v", got.Status)
	}
	// the tunnel goes down: written
	tun, ready = Compute([]string{"t1"}, nil, now)
	if wrote, err := w.Write(ctx, tun, ready); err != nil || !wrote {
		t.Fatalf("down not written: %v %v", wrote, err)
	}
	_ = c.Get(ctx, client.ObjectKeyFromObject(gw), &got)
	if got.Status.TunnelsReady != "0/1" || got.Status.Tunnels[0].State != StateDown {
		t.Errorf("status after down: %+v", got.Status)
	}
}
