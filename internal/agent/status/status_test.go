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
		"up":   {{Name: "up", State: "ESTABLISHED", EstablishedSeconds: 65, Children: []vici.ChildSA{{Name: "up", State: "INSTALLED"}, {Name: "up", State: "DELETED"}}}},
		"half": {{Name: "half", State: "ESTABLISHED", EstablishedSeconds: 3}},
		"neg":  {{Name: "neg", State: "CONNECTING"}},
		// An IKE rekey in flight: the old SA, REKEYED, still holds the child SA beside
		// its successor.
		"rekey": {{Name: "rekey", State: "REKEYED", EstablishedSeconds: 3600, Children: []vici.ChildSA{{Name: "rekey", State: "INSTALLED"}}},
			{Name: "rekey", State: "ESTABLISHED", EstablishedSeconds: 0}},
	}
	notes := func(name string) Note {
		switch name {
		case "half":
			return Note{Reason: "TrafficSelectorsRefused", Message: "the peer refused our traffic selectors", Retry: "next attempt at 03:05:00Z"}
		case "up":
			return Note{Reason: "AuthenticationFailed", Message: "stale"} // not a warning: an Up tunnel ignores it
		case "rekey":
			return Note{Reason: "PFSMismatchAtRekey", Message: "rekeys refused", Warn: true}
		}
		return Note{}
	}
	got, ready := Compute([]string{"up", "half", "neg", "down", "rekey"}, sas, notes, now)
	if ready != "2/5" {
		t.Errorf("ready %s", ready)
	}
	want := []string{StateUp, StateConnecting, StateConnecting, StateDown, StateUp}
	for i, s := range got {
		if s.State != want[i] {
			t.Errorf("%s: %s, want %s", s.Name, s.State, want[i])
		}
	}
	if got[0].ChildSAs != 1 || got[0].IKESAs != 1 || !got[0].EstablishedAt.Time.Equal(now.Add(-65*time.Second)) || got[0].Reason != "" || got[0].Message != "" {
		t.Errorf("up tunnel: %+v", got[0])
	}
	if got[1].Reason != "TrafficSelectorsRefused" || got[1].Message != "the peer refused our traffic selectors; next attempt at 03:05:00Z" {
		t.Errorf("half-open tunnel: %+v", got[1])
	}
	if got[2].Reason != "" || got[2].Message != "IKE SA negotiating" {
		t.Errorf("negotiating tunnel: %+v", got[2])
	}
	if r := got[4]; r.Reason != "PFSMismatchAtRekey" || r.IKESAs != 2 || r.ChildSAs != 1 || !r.EstablishedAt.Time.Equal(now) {
		t.Errorf("tunnel in an IKE rekey: %+v", r)
	}
}

// TestComputeReportsAChangeInFlight: a refused change is reported on the Up tunnel it
// leaves on its previous settings.
func TestComputeReportsAChangeInFlight(t *testing.T) {
	sas := map[string][]vici.IKESA{"t1": {{Name: "t1", State: "ESTABLISHED", Children: []vici.ChildSA{{Name: "t1", State: "INSTALLED"}}}}}
	got, _ := Compute([]string{"t1"}, sas, func(string) Note {
		return Note{ChangeReason: "ChangeRefused", ChangeMessage: "the peer refused the changed settings"}
	}, now)
	if got[0].State != StateUp || got[0].Reason != "ChangeRefused" || got[0].Message != "the peer refused the changed settings" {
		t.Errorf("%+v", got[0])
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
	tun, ready := Compute([]string{"t1"}, sas, nil, now)
	if wrote, err := w.Write(ctx, tun, ready); err != nil || !wrote {
		t.Fatalf("first write: %v %v", wrote, err)
	}
	// a second later charon reports one second more age: same establishment, no write
	sas["t1"][0].EstablishedSeconds = 11
	tun, ready = Compute([]string{"t1"}, sas, nil, now.Add(time.Second))
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
	tun, ready = Compute([]string{"t1"}, nil, nil, now)
	if wrote, err := w.Write(ctx, tun, ready); err != nil || !wrote {
		t.Fatalf("down not written: %v %v", wrote, err)
	}
	_ = c.Get(ctx, client.ObjectKeyFromObject(gw), &got)
	if got.Status.TunnelsReady != "0/1" || got.Status.Tunnels[0].State != StateDown {
		t.Errorf("status after down: %+v", got.Status)
	}
}

// The heartbeat: a new Writer (a restarted agent) writes at once even when nothing
// changed; then only changes and a heartbeat every Heartbeat are written, the heartbeat
// touching nothing but tunnelsObservedTime; each tunnel keeps the time it entered its
// state while the state stays.
func TestWriterHeartbeat(t *testing.T) {
	gw := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gw"}}
	applies := 0
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(gw).WithStatusSubresource(gw).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceGet: func(ctx context.Context, cl client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceGetOption) error {
				return cl.Get(ctx, client.ObjectKeyFromObject(obj), subObj)
			},
			SubResourceApply: func(ctx context.Context, cl client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
				applies++
				return cl.SubResource(sub).Apply(ctx, obj, opts...)
			}}).Build()
	clock := now
	ctx := context.Background()
	get := func() v1alpha1.GatewayStatus {
		var g v1alpha1.IPsecGateway
		if err := c.Get(ctx, client.ObjectKeyFromObject(gw), &g); err != nil {
			t.Fatal(err)
		}
		return g.Status
	}
	writer := func() *Writer {
		return &Writer{Client: c, Kind: "IPsecGateway", Namespace: "ns", Name: "gw", Heartbeat: time.Minute, Now: func() time.Time { return clock }}
	}
	w := writer()
	up := func(age int64) []v1alpha1.TunnelState {
		ts, _ := Compute([]string{"hq"}, map[string][]vici.IKESA{"hq": {{Name: "hq", State: "ESTABLISHED", EstablishedSeconds: age,
			Children: []vici.ChildSA{{Name: "hq", State: "INSTALLED"}}}}}, nil, clock)
		return ts
	}
	if wrote, err := w.Write(ctx, up(10), "1/1"); err != nil || !wrote {
		t.Fatalf("first write: %v %v", wrote, err)
	}
	st := get()
	if st.TunnelsObservedTime == nil || !st.TunnelsObservedTime.Time.Equal(now) || st.Tunnels[0].LastTransitionTime == nil || !st.Tunnels[0].LastTransitionTime.Time.Equal(now) {
		t.Fatalf("first report: %+v", st)
	}
	established := st.Tunnels[0].EstablishedAt.Time

	// 59 s later, nothing changed: no write.
	clock = now.Add(59 * time.Second)
	if wrote, _ := w.Write(ctx, up(69), "1/1"); wrote {
		t.Fatal("written before the heartbeat was due")
	}
	// 61 s: the heartbeat, and nothing else moves (the SA's age jitters by a second).
	clock = now.Add(61 * time.Second)
	if wrote, err := w.Write(ctx, up(70), "1/1"); err != nil || !wrote {
		t.Fatalf("heartbeat: %v %v", wrote, err)
	}
	st = get()
	if !st.TunnelsObservedTime.Time.Equal(clock) || !st.Tunnels[0].EstablishedAt.Time.Equal(established) || !st.Tunnels[0].LastTransitionTime.Time.Equal(now) {
		t.Fatalf("a heartbeat changed more than tunnelsObservedTime: %+v", st)
	}

	// A restarted agent (a new Writer) announces itself at once.
	clock = now.Add(70 * time.Second)
	w = writer()
	if wrote, _ := w.Write(ctx, up(79), "1/1"); !wrote {
		t.Fatal("a new agent did not write its first report")
	}
	if st = get(); !st.Tunnels[0].LastTransitionTime.Time.Equal(now) {
		t.Fatalf("the tunnel's state did not change, its transition time did: %v", st.Tunnels[0].LastTransitionTime)
	}

	// The tunnel goes down: a new transition time.
	clock = now.Add(80 * time.Second)
	down, ready := Compute([]string{"hq"}, nil, nil, clock)
	if wrote, _ := w.Write(ctx, down, ready); !wrote {
		t.Fatal("down not written")
	}
	if st = get(); st.Tunnels[0].State != StateDown || !st.Tunnels[0].LastTransitionTime.Time.Equal(clock) {
		t.Fatalf("down: %+v", st.Tunnels[0])
	}
	if applies != 4 {
		t.Fatalf("%d applies, want 4", applies)
	}
}
