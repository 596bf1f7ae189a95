package addrpolicy

import (
	"net/netip"
	"slices"
	"testing"
)

func TestWithout(t *testing.T) {
	pp := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	cut := netip.MustParsePrefix("10.254.0.0/24")
	for _, tc := range []struct {
		in, want []netip.Prefix
	}{
		{pp("10.250.0.0/16"), pp("10.250.0.0/16")},
		{pp("10.254.0.0/24"), nil},
		{pp("10.254.0.16/28", "10.251.0.0/16"), pp("10.251.0.0/16")},
		{pp("10.254.0.0/22"), pp("10.254.2.0/23", "10.254.1.0/24")},
		{pp("10.0.0.0/8"), nil}, // checked by size below
	} {
		got := Without(tc.in, cut)
		if len(tc.in) == 1 && tc.in[0].String() == "10.0.0.0/8" {
			// 10.0.0.0/8 minus 10.254.0.0/24: nothing of the cut, everything else.
			for _, p := range got {
				if p.Overlaps(cut) {
					t.Fatalf("%v still overlaps %s", got, cut)
				}
			}
			var size uint64
			for _, p := range got {
				size += 1 << (32 - p.Bits())
			}
			if size != 1<<24-256 {
				t.Fatalf("%v covers %d addresses, want %d", got, size, 1<<24-256)
			}
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("Without(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
