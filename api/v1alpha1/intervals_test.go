package v1alpha1

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// BoundCase is one bounded field's values at and just outside its bounds, in the
// notations the API takes (bare seconds and each suffix). Exported for the admission
// test (package v1alpha1_test), which sends the same values to the API server.
type BoundCase struct {
	Field string
	Set   func(t *Tunnel, v string)
	In    []string // accepted
	Out   []string // refused
}

func BoundCases() []BoundCase {
	return []BoundCase{
		{"ike.lifetime", func(t *Tunnel, v string) { t.IKE.Lifetime = v },
			[]string{"10m", "600", "600s", "24h", "86400", "1d", "4h"},
			[]string{"9m", "599", "599s", "1441m", "86401", "25h", "2d", "999999d", "1"}},
		{"esp.lifetime", func(t *Tunnel, v string) { t.ESP.Lifetime = v },
			[]string{"5m", "300", "300s", "8h", "28800s", "480m", "1h"},
			[]string{"4m", "299", "299s", "28801", "481m", "9h", "1d", "1"}},
		{"dpd.delay", func(t *Tunnel, v string) { t.DPD.Delay = v },
			[]string{"10s", "10", "1h", "3600", "60m", "30s"},
			[]string{"9s", "9", "3601", "61m", "2h", "1d", "1", "0"}},
	}
}

// Validate refuses each interval just outside its bounds, with the field and the
// bounds in the message, and IntervalsOutOfBounds reports exactly those errors (the
// reconciler's Validated=False/IntervalOutOfBounds); the bounds themselves are valid.
func TestIntervalBounds(t *testing.T) {
	for _, bc := range BoundCases() {
		for _, v := range bc.In {
			s := goodGateway()
			bc.Set(&s.Tunnels[0], v)
			if errs := s.Validate(); len(errs) != 0 {
				t.Errorf("%s %q refused: %v", bc.Field, v, errs)
			}
			if errs := s.IntervalsOutOfBounds(); len(errs) != 0 {
				t.Errorf("%s %q out of bounds: %v", bc.Field, v, errs)
			}
		}
		for _, v := range bc.Out {
			s := goodGateway()
			bc.Set(&s.Tunnels[0], v)
			errs := s.Validate()
			ob := s.IntervalsOutOfBounds()
			if len(errs) != 1 || len(ob) != 1 || errs[0].Error() != ob[0].Error() {
				t.Errorf("%s %q: Validate %v, IntervalsOutOfBounds %v; want the one bounds error from both", bc.Field, v, errs, ob)
				continue
			}
			want := fmt.Sprintf("spec.tunnels[0].%s: Invalid value: %q: %s must be between", bc.Field, v, bc.Field)
			if !strings.HasPrefix(errs[0].Error(), want) {
				t.Errorf("%s %q: %q does not start with %q", bc.Field, v, errs[0].Error(), want)
			}
		}
	}

	// A VPNGateway with protocol ipsec has the same bounds.
	v := VPNGatewaySpec{Protocol: VPNProtocolIPsec, GatewaySpec: goodGateway()}
	v.Tunnels[0].DPD.Delay = "5s"
	if errs := v.Validate(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "spec.tunnels[0].dpd.delay") {
		t.Errorf("VPNGateway dpd.delay 5s: %v", errs)
	}
	if ob := v.IntervalsOutOfBounds(); len(ob) != 1 {
		t.Errorf("VPNGateway IntervalsOutOfBounds: %v", ob)
	}

	// A spec with another fault as well lists both; IntervalsOutOfBounds lists only the
	// interval, so the reconciler tells the two apart (InvalidSpec).
	s := goodGateway()
	s.Tunnels[0].IKE.Lifetime = "1"
	s.Tunnels[0].Peer.ID = "hq }"
	if errs, ob := s.Validate(), s.IntervalsOutOfBounds(); len(errs) != 2 || len(ob) != 1 {
		t.Errorf("two faults: Validate %v, IntervalsOutOfBounds %v", errs, ob)
	}
	// An interval that does not parse is a format error, not a bounds error.
	s = goodGateway()
	s.Tunnels[0].ESP.Lifetime = "1 hour"
	if errs, ob := s.Validate(), s.IntervalsOutOfBounds(); len(errs) != 1 || len(ob) != 0 {
		t.Errorf("unparsable: Validate %v, IntervalsOutOfBounds %v", errs, ob)
	}
}

// The CRD's rules carry the same numbers and messages as IntervalBounds (the admission
// test checks the API server applies them).
func TestIntervalRulesMatchBounds(t *testing.T) {
	for _, crd := range []string{"ipsec.bnerd.net_ipsecgateways.yaml", "ipsec.bnerd.net_vpngateways.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", crd))
		if err != nil {
			t.Fatal(err)
		}
		// The YAML folds long strings; compare with whitespace collapsed.
		text := strings.Join(strings.Fields(string(data)), " ")
		for _, b := range IntervalBounds {
			if !strings.Contains(text, "message: "+b.Describe()) {
				t.Errorf("%s: no rule with the message %q", crd, b.Describe())
			}
			if !strings.Contains(text, fmt.Sprintf("].all(n, n >= %d && n <= %d)", b.Min, b.Max)) {
				t.Errorf("%s: no rule bounding %s to %d..%d", crd, b.Field, b.Min, b.Max)
			}
		}
	}
}

func TestDurationSeconds(t *testing.T) {
	for in, want := range map[string]int64{"30": 30, "30s": 30, "5m": 300, "4h": 14400, "1d": 86400, "000010": 10, "999999d": 999999 * 86400} {
		if got, err := DurationSeconds(in); err != nil || got != want {
			t.Errorf("DurationSeconds(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "s", "-1s", "1w", "1.5h", "1234567s", " 1s"} {
		if _, err := DurationSeconds(in); err == nil {
			t.Errorf("DurationSeconds(%q) accepted", in)
		}
	}
}
