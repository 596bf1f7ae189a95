package openstack

import "testing"

func TestParseProviderID(t *testing.T) {
	const a, b = "4f1c0b6e-2d3a-4c5e-9f80-1a2b3c4d5e6f", "0a9B8c7d-6e5f-4a3b-8c2d-1e0f9a8b7c6d"
	for in, want := range map[string]string{
		"openstack:///" + a:          a,
		"openstack://RegionOne/" + b: b,
	} {
		if got, err := ParseProviderID(in); err != nil || got != want {
			t.Errorf("%s: %q %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "aws:///i-1", "openstack:///not-a-uuid", "openstack:///" + a + "/x", "kind://docker/x"} {
		if _, err := ParseProviderID(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
