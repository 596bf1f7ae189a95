package v1alpha1_test

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// The API server accepts every bounded interval at its bounds and refuses it just
// outside them (security review M4, L6), naming the field and the bounds, for
// IPsecGateway and for VPNGateway with protocol ipsec.
func TestIntervalAdmission(t *testing.T) {
	testenv.Need(t)
	ctx := context.Background()
	for _, bc := range v1alpha1.BoundCases() {
		for _, kind := range []string{"IPsecGateway", "VPNGateway"} {
			try := func(v string) error {
				s := goodGatewaySpec()
				bc.Set(&s.Tunnels[0], v)
				if kind == "IPsecGateway" {
					return env.Client.Create(ctx, &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Name: name("iv"), Namespace: ns}, Spec: s})
				}
				return env.Client.Create(ctx, &v1alpha1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Name: name("iv"), Namespace: ns},
					Spec: v1alpha1.VPNGatewaySpec{Protocol: v1alpha1.VPNProtocolIPsec, GatewaySpec: s}})
			}
			var bound v1alpha1.IntervalBound
			for _, b := range v1alpha1.IntervalBounds {
				if b.Field == bc.Field {
					bound = b
				}
			}
			for _, v := range bc.In {
				t.Run(fmt.Sprintf("%s %s=%s accepted", kind, bc.Field, v), func(t *testing.T) {
					expectAdmission(t, try(v), "")
				})
			}
			for _, v := range bc.Out {
				t.Run(fmt.Sprintf("%s %s=%s refused", kind, bc.Field, v), func(t *testing.T) {
					err := try(v)
					expectAdmission(t, err, bound.Describe())
					expectAdmission(t, err, "spec.tunnels[0]."+bc.Field+": Invalid value")
				})
			}
		}
	}
}
