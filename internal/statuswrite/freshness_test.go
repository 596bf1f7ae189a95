package statuswrite

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// A read from before the write is recognised as stale; the object as the API server
// returns it after the write, or after someone else's write, is not.
func TestFreshnessTellsAStaleReadFromAFreshOne(t *testing.T) {
	testenv.Need(t)
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}}); err != nil {
		t.Fatal(err)
	}
	gw := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "fresh", Name: "gw"}, Spec: v1alpha1.GatewaySpec{
		Tunnels: []v1alpha1.Tunnel{{Name: "hq", Peer: v1alpha1.Peer{Address: "198.51.100.7", Subnets: []string{"192.168.10.0/24"}}, PreSharedKey: v1alpha1.SecretKeyRef{Name: "psk"}}}}}
	if err := env.Client.Create(ctx, gw); err != nil {
		t.Fatal(err)
	}
	w := Writer{Client: env.Client, Manager: ManagerOperator, Exclude: []string{"tunnels", "tunnelsReady"}, Fresh: NewFreshness()}
	stale := gw.DeepCopy()
	if w.Behind(stale) {
		t.Fatal("nothing written yet, yet behind")
	}
	base := gw.DeepCopy()
	gw.Status.ServiceCIDR = "100.64.3.0/24"
	gw.Status.Exposures = []v1alpha1.AllocatedAddress{{Name: "portal", VirtualIP: "100.64.3.10"}}
	gw.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Reconciled",
		Message: "every phase is converged", LastTransitionTime: metav1.NewTime(time.Now()), ObservedGeneration: 1}}
	if err := w.Apply(ctx, gw, base); err != nil {
		t.Fatal(err)
	}
	fresh := &v1alpha1.IPsecGateway{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(gw), fresh); err != nil {
		t.Fatal(err)
	}
	if w.Behind(fresh) {
		t.Fatal("the object as the API server returns it after the write is taken for a stale read")
	}
	if !w.Behind(stale) {
		t.Fatal("a read from before the write is not recognised as stale")
	}
	// Someone else's write is a version this writer never replaced.
	fresh.Status.TunnelsReady = "1/1"
	if err := env.Client.Status().Update(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if w.Behind(fresh) {
		t.Fatal("another writer's version was taken for a stale read")
	}
	// An apply that changes nothing leaves the version as it is: still current, not stale.
	same := fresh.DeepCopy()
	if err := w.Apply(ctx, same, fresh); err != nil {
		t.Fatal(err)
	}
	if same.ResourceVersion != fresh.ResourceVersion {
		t.Fatalf("an apply without a change moved the version %s -> %s", fresh.ResourceVersion, same.ResourceVersion)
	}
	if w.Behind(same) {
		t.Fatal("the current version was taken for a stale read after an apply that changed nothing")
	}
	w.Fresh.Forget(gw.UID)
	if w.Behind(stale) {
		t.Fatal("forgotten, yet behind")
	}
}
