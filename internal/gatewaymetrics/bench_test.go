package gatewaymetrics

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// BenchmarkCollect measures one scrape of the operator's per-gateway series over an
// in-memory reader (as the manager's informer cache is), with 200 gateways of 4 tunnels,
// each with its Deployment.
func BenchmarkCollect(b *testing.B) {
	for _, n := range []int{200, 1000} {
		b.Run(fmt.Sprintf("gateways=%d", n), func(b *testing.B) {
			var objs []client.Object
			ctl := true
			for i := 0; i < n; i++ {
				g := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("t%d", i%20), Name: fmt.Sprintf("gw%d", i), UID: types.UID(fmt.Sprint("u", i))}}
				for j := 0; j < 4; j++ {
					g.Status.Tunnels = append(g.Status.Tunnels, v1alpha1.TunnelState{Name: fmt.Sprintf("t%d", j), State: "Up"})
				}
				g.Status.Exposures = []v1alpha1.AllocatedAddress{{Name: "a", VirtualIP: "100.64.0.10"}}
				d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace, Name: render.DeploymentName(g.Name),
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "ipsec.bnerd.net/v1alpha1", Kind: "IPsecGateway", Name: g.Name, UID: g.UID, Controller: &ctl}}},
					Status: appsv1.DeploymentStatus{ReadyReplicas: 1, UpdatedReplicas: 1}}
				objs = append(objs, g, d)
			}
			c := fake.NewClientBuilder().WithScheme(testenv.NewScheme()).WithObjects(objs...).Build()
			col := &Collector{Reader: c}
			reg := prometheus.NewRegistry()
			reg.MustRegister(col)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := reg.Gather(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
