package v1alpha1

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Bounds of a tunnel's intervals, in seconds (security review M4 and L6). Below the
// floors one tenant's rekeying and liveness checks load the node that every co-located
// gateway shares; above the ceilings keys live long enough that rekeying and
// reauthentication stop doing their job. The CRD's rules (gateway_types.go) and
// IntervalsOutOfBounds enforce the same numbers; TestIntervalRulesMatchBounds keeps them
// equal.
const (
	MinIKELifetimeSeconds = 10 * 60
	MaxIKELifetimeSeconds = 24 * 3600
	MinESPLifetimeSeconds = 5 * 60
	MaxESPLifetimeSeconds = 8 * 3600
	MinDPDDelaySeconds    = 10
	MaxDPDDelaySeconds    = 3600
)

// IntervalBound is the allowed range of one interval field of a tunnel.
// +kubebuilder:object:generate=false
type IntervalBound struct {
	// Field is the path below spec.tunnels[i], such as ike.lifetime.
	Field    string
	Min, Max int64
}

// IntervalBounds lists every bounded interval field.
var IntervalBounds = []IntervalBound{
	{"ike.lifetime", MinIKELifetimeSeconds, MaxIKELifetimeSeconds},
	{"esp.lifetime", MinESPLifetimeSeconds, MaxESPLifetimeSeconds},
	{"dpd.delay", MinDPDDelaySeconds, MaxDPDDelaySeconds},
}

// Describe renders the bound as the admission rule's message does.
func (b IntervalBound) Describe() string {
	return fmt.Sprintf("%s must be between %s and %s (%d to %d seconds)", b.Field, humanSeconds(b.Min), humanSeconds(b.Max), b.Min, b.Max)
}

func humanSeconds(s int64) string {
	switch {
	case s%3600 == 0:
		return fmt.Sprintf("%dh", s/3600)
	case s%60 == 0:
		return fmt.Sprintf("%dm", s/60)
	}
	return fmt.Sprintf("%ds", s)
}

// DurationSeconds converts the API's interval notation (one to six digits with an
// optional s, m, h or d suffix; bare digits are seconds) into seconds.
func DurationSeconds(v string) (int64, error) {
	if !swanDuration.MatchString(v) {
		return 0, fmt.Errorf("%q is not a duration such as 30s, 4h or 1d", v)
	}
	mult, num := int64(1), v
	switch v[len(v)-1] {
	case 's':
		num = v[:len(v)-1]
	case 'm':
		mult, num = 60, v[:len(v)-1]
	case 'h':
		mult, num = 3600, v[:len(v)-1]
	case 'd':
		mult, num = 86400, v[:len(v)-1]
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration such as 30s, 4h or 1d", v)
	}
	return n * mult, nil
}

// IntervalsOutOfBounds lists the tunnels' lifetimes and DPD delays that parse but lie
// outside IntervalBounds (empty values take the defaults, which lie inside). Validate
// includes these errors; the reconciler reports a spec whose only errors they are with
// Validated=False/IntervalOutOfBounds.
func (s *GatewaySpec) IntervalsOutOfBounds() field.ErrorList {
	return s.intervalsOutOfBounds(field.NewPath("spec"))
}

func (s *GatewaySpec) intervalsOutOfBounds(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i := range s.Tunnels {
		t := &s.Tunnels[i]
		ip := p.Child("tunnels").Index(i)
		for _, d := range []struct {
			val   string
			bound IntervalBound
			path  *field.Path
		}{
			{t.IKE.Lifetime, IntervalBounds[0], ip.Child("ike", "lifetime")},
			{t.ESP.Lifetime, IntervalBounds[1], ip.Child("esp", "lifetime")},
			{t.DPD.Delay, IntervalBounds[2], ip.Child("dpd", "delay")},
		} {
			if d.val == "" {
				continue
			}
			secs, err := DurationSeconds(d.val)
			if err != nil {
				continue // Validate reports the format
			}
			if secs < d.bound.Min || secs > d.bound.Max {
				errs = append(errs, field.Invalid(d.path, d.val, d.bound.Describe()))
			}
		}
	}
	return errs
}
