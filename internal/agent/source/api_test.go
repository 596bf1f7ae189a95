package source

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// TestAPIDeliversConfigMapChanges watches a gateway's ConfigMap on the real API server,
// the way the pod's agent does: the first snapshot carries the content, an edit arrives
// as a new snapshot (no kubelet volume refresh involved), and a change to another
// ConfigMap in the namespace is never delivered.
func TestAPIDeliversConfigMapChanges(t *testing.T) {
	testenv.Need(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := "default"
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw-gateway"},
		Data: map[string]string{gatewayconfig.ConfigMapKeyConfig: `{"v":1}`}}
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unrelated"},
		Data: map[string]string{gatewayconfig.ConfigMapKeyConfig: "not ours"}}
	for _, c := range []*corev1.ConfigMap{cm, other} {
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	out := make(chan Snapshot, 1)
	a := &API{Client: cs, Namespace: ns, ConfigMap: cm.Name}
	go func() { _ = a.Run(ctx, out) }()
	next := func(want func(Snapshot) bool) Snapshot {
		t.Helper()
		deadline := time.After(time.Minute) // a generous bound, not a latency assertion
		for {
			select {
			case s := <-out:
				if string(s.Config) == "not ours" {
					t.Fatal("a change to another ConfigMap was delivered")
				}
				if want(s) {
					return s
				}
			case <-deadline:
				t.Fatal("snapshot never arrived")
			}
		}
	}
	s := next(func(s Snapshot) bool { return s.Complete() })
	if string(s.Config) != `{"v":1}` {
		t.Fatalf("first snapshot %+v", s)
	}

	if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unrelated"},
		Data: map[string]string{gatewayconfig.ConfigMapKeyConfig: "not ours"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cur, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Data[gatewayconfig.ConfigMapKeyConfig] = `{"v":2}`
	if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	next(func(s Snapshot) bool { return string(s.Config) == `{"v":2}` })
}

// BenchmarkAPIConfigMapEditToSnapshot measures the live-reload path's first half: from
// a ConfigMap update on the API server to the agent's snapshot carrying it (run by hand:
// go test -run XXX -bench APIConfigMap ./internal/agent/source/).
func BenchmarkAPIConfigMapEditToSnapshot(b *testing.B) {
	testenv.Need(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	ns := "default"
	cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "bench-gateway-"},
		Data: map[string]string{gatewayconfig.ConfigMapKeyConfig: "0"}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	out := make(chan Snapshot, 1)
	go func() { _ = (&API{Client: cs, Namespace: ns, ConfigMap: cm.Name}).Run(ctx, out) }()
	for s := range out {
		if string(s.Config) == "0" {
			break
		}
	}
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		want := fmt.Sprint(i)
		cm.Data[gatewayconfig.ConfigMapKeyConfig] = want
		if cm, err = cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		for s := range out {
			if string(s.Config) == want {
				break
			}
		}
	}
}
