package statuswrite

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

var agentFields = []string{"tunnels", "tunnelsReady"}

func newGateway(t *testing.T, name string) *v1alpha1.IPsecGateway {
	t.Helper()
	gw := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: v1alpha1.GatewaySpec{
		Tunnels: []v1alpha1.Tunnel{{Name: "hq", Peer: v1alpha1.Peer{Address: "198.51.100.7", Subnets: []string{"192.168.10.0/24"}}, PreSharedKey: v1alpha1.SecretKeyRef{Name: "psk"}}},
	}}
	if err := env.Client.Create(context.Background(), gw); err != nil {
		t.Fatal(err)
	}
	return gw
}

func get(t *testing.T, name string) *v1alpha1.IPsecGateway {
	t.Helper()
	var gw v1alpha1.IPsecGateway
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &gw); err != nil {
		t.Fatal(err)
	}
	return &gw
}

// The guard: another manager's write in between is no conflict; a change of the
// writer's own fields since its read is, and nothing is written.
func TestGuardedApply(t *testing.T) {
	testenv.Need(t)
	ctx := context.Background()
	newGateway(t, "guarded")
	operator := Writer{Client: env.Client, Manager: ManagerOperator, Exclude: agentFields}
	agent := Writer{Client: env.Client, Manager: ManagerStatusAgent, Fields: agentFields, Unguarded: true}

	// The operator reads, then the agent writes, then the operator writes what it
	// decided on its read: both updates survive, without an error.
	base := get(t, "guarded")
	mine := base.DeepCopy()
	mine.Status.ServiceCIDR = "100.64.1.0/24"
	theirs := get(t, "guarded")
	theirs.Status.TunnelsReady = "1/1"
	if err := agent.Apply(ctx, theirs, nil); err != nil {
		t.Fatal(err)
	}
	if err := operator.Apply(ctx, mine, base); err != nil {
		t.Fatalf("an agent write in between failed the operator's write: %v", err)
	}
	got := get(t, "guarded")
	if got.Status.ServiceCIDR != "100.64.1.0/24" || got.Status.TunnelsReady != "1/1" {
		t.Fatalf("lost an update: %+v", got.Status)
	}

	// A decision made on a stale read of the operator's own fields is refused.
	stale := got.DeepCopy()
	fresh := got.DeepCopy()
	fresh.Status.ServiceCIDR = "100.64.2.0/24"
	if err := operator.Apply(ctx, fresh, got); err != nil {
		t.Fatal(err)
	}
	stale.Status.ServiceCIDR = "100.64.3.0/24"
	err := operator.Apply(ctx, stale, got)
	if !apierrors.IsConflict(err) {
		t.Fatalf("a write based on a stale read: %v, want a conflict", err)
	}
	if cur := get(t, "guarded").Status.ServiceCIDR; cur != "100.64.2.0/24" {
		t.Fatalf("the stale write landed: %s", cur)
	}

	// The operator never sends the agent's fields, even when its object has them.
	mine = get(t, "guarded")
	mine.Status.TunnelsReady = "0/1"
	mine.Status.FloatingIP = "203.0.113.7"
	if err := operator.Apply(ctx, mine, mine.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if cur := get(t, "guarded").Status; cur.TunnelsReady != "1/1" || cur.FloatingIP != "203.0.113.7" {
		t.Fatalf("status %+v: the operator overwrote the agent's field or lost its own", cur)
	}

	// A field the operator stops setting goes away; the agent's stay.
	mine = get(t, "guarded")
	mine.Status.FloatingIP = ""
	if err := operator.Apply(ctx, mine, mine.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if cur := get(t, "guarded").Status; cur.FloatingIP != "" || cur.TunnelsReady != "1/1" {
		t.Fatalf("status %+v", cur)
	}
}
