package dataplane

import (
	"fmt"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// storedSpec is the gateway spec as the test stores it on an API server: the test's
// own short DPD delay and lifetimes (seconds, so a dead peer or a rekey is seen within
// the test) go only into the charon configuration the test renders itself, while the
// API server refuses intervals outside v1alpha1.IntervalBounds, so the stored copy has
// each clamped into its bounds. Nothing the status agent reads depends on them.
func storedSpec(s v1alpha1.GatewaySpec) v1alpha1.GatewaySpec {
	out := *s.DeepCopy()
	for i := range out.Tunnels {
		t := &out.Tunnels[i]
		for j, v := range []*string{&t.IKE.Lifetime, &t.ESP.Lifetime, &t.DPD.Delay} {
			b := v1alpha1.IntervalBounds[j]
			secs, err := v1alpha1.DurationSeconds(*v)
			switch {
			case *v == "" || err != nil:
			case secs < b.Min:
				*v = fmt.Sprintf("%ds", b.Min)
			case secs > b.Max:
				*v = fmt.Sprintf("%ds", b.Max)
			}
		}
	}
	return out
}
