package status

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/vici"
	"bnerd.net/vpn-operator/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// TestWriterOnRealAPIServer writes tunnel state into a gateway on the real API server:
// the fields land in status, the operator's conditions survive, an unchanged state is not
// written again, and a later operator status write does not conflict with it.
func TestWriterOnRealAPIServer(t *testing.T) {
	testenv.Need(t)
	ctx := context.Background()
	for _, kind := range []string{"IPsecGateway", "VPNGateway"} {
		t.Run(kind, func(t *testing.T) {
			spec := v1alpha1.GatewaySpec{Tunnels: []v1alpha1.Tunnel{{
				Name: "hq", Peer: v1alpha1.Peer{Address: "198.51.100.7", Subnets: []string{"192.168.10.0/24"}},
				PreSharedKey: v1alpha1.SecretKeyRef{Name: "psk"},
			}}}
			meta := metav1.ObjectMeta{Namespace: "default", Name: "status-" + map[string]string{"IPsecGateway": "ipsec", "VPNGateway": "vpn"}[kind]}
			readStatus := func() v1alpha1.GatewayStatus {
				t.Helper()
				key := types.NamespacedName{Namespace: meta.Namespace, Name: meta.Name}
				if kind == "IPsecGateway" {
					o := &v1alpha1.IPsecGateway{}
					if err := env.Client.Get(ctx, key, o); err != nil {
						t.Fatal(err)
					}
					return o.Status
				}
				o := &v1alpha1.VPNGateway{}
				if err := env.Client.Get(ctx, key, o); err != nil {
					t.Fatal(err)
				}
				return o.Status
			}
			operatorCondition := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonReconciled, Message: "operator", LastTransitionTime: metav1.Now()}
			if kind == "IPsecGateway" {
				o := &v1alpha1.IPsecGateway{ObjectMeta: meta, Spec: spec}
				if err := env.Client.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
				o.Status.Conditions = []metav1.Condition{operatorCondition}
				if err := env.Client.Status().Update(ctx, o); err != nil {
					t.Fatal(err)
				}
			} else {
				o := &v1alpha1.VPNGateway{ObjectMeta: meta, Spec: v1alpha1.VPNGatewaySpec{GatewaySpec: spec}}
				if err := env.Client.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
				o.Status.Conditions = []metav1.Condition{operatorCondition}
				if err := env.Client.Status().Update(ctx, o); err != nil {
					t.Fatal(err)
				}
			}

			w := &Writer{Client: env.Client, Kind: kind, Namespace: meta.Namespace, Name: meta.Name}
			now := time.Now()
			sas := map[string][]vici.IKESA{"hq": {{Name: "hq", State: "ESTABLISHED", EstablishedSeconds: 42,
				Children: []vici.ChildSA{{Name: "hq", State: "INSTALLED"}}}}}
			tunnels, ready := Compute([]string{"hq"}, sas, now)
			wrote, err := w.Write(ctx, tunnels, ready)
			if err != nil || !wrote {
				t.Fatalf("first write: wrote=%v err=%v", wrote, err)
			}
			st := readStatus()
			if st.TunnelsReady != "1/1" || len(st.Tunnels) != 1 || st.Tunnels[0].State != StateUp || st.Tunnels[0].ChildSAs != 1 || st.Tunnels[0].EstablishedAt == nil {
				t.Fatalf("tunnel state not stored: %+v", st)
			}
			if len(st.Conditions) != 1 || st.Conditions[0].Message != "operator" {
				t.Fatalf("the operator's conditions were touched: %+v", st.Conditions)
			}

			// A second poll a second later with the same SAs is not a change.
			tunnels, ready = Compute([]string{"hq"}, sas, now.Add(time.Second))
			if wrote, err := w.Write(ctx, tunnels, ready); err != nil || wrote {
				t.Fatalf("unchanged state written again: wrote=%v err=%v", wrote, err)
			}

			// The tunnel drops: the change is written.
			tunnels, ready = Compute([]string{"hq"}, nil, now)
			if wrote, err := w.Write(ctx, tunnels, ready); err != nil || !wrote {
				t.Fatalf("tunnel down not written: wrote=%v err=%v", wrote, err)
			}
			if st := readStatus(); st.TunnelsReady != "0/1" || st.Tunnels[0].State != StateDown {
				t.Fatalf("tunnel down not stored: %+v", st)
			}
		})
	}
}
