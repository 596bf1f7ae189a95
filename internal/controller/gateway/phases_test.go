package gateway

import (
	"slices"
	"testing"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/controller/skeleton"
)

// Ready summarises the conditions of the phase table, which must be the ones the API
// documents for each protocol, in its order (kubectl vpn and the docs list those).
func TestReadySummarisesTheDocumentedConditions(t *testing.T) {
	r := &Reconciler{}
	for _, wg := range []*v1alpha1.WireGuardSpec{nil, {}} {
		got := skeleton.Conditions(r.phases(&gateway{wg: wg}))
		if want := v1alpha1.GatewayConditionTypesFor(wg != nil); !slices.Equal(got, want) {
			t.Errorf("wireGuard=%t: Ready summarises %v, the API documents %v", wg != nil, got, want)
		}
	}
}
