package addrpolicy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestPolicy(t *testing.T) {
	pol := Policy{
		ServiceCIDRPool: netip.MustParsePrefix("100.64.0.0/16"),
		GatewaySubnet:   netip.MustParsePrefix("10.254.0.0/24"),
	}
	allow := pol
	allow.ExposureTargets = []netip.Prefix{netip.MustParsePrefix("10.250.0.0/16")}
	for _, tc := range []struct {
		pol  Policy
		addr string
		want string
	}{
		{pol, "10.250.0.20", ""},
		{pol, "169.254.169.254", "metadata service"},
		{pol, "127.0.0.53", "loopback"},
		{pol, "0.0.0.0", "this network"},
		{pol, "224.0.0.1", "multicast"},
		{pol, "255.255.255.255", "broadcast"},
		{pol, "100.64.7.10", "service-CIDR pool"},
		{pol, "10.254.0.9", "gateway network's subnet"},
		{allow, "10.250.9.9", ""},
		{allow, "10.251.0.1", "outside the operator's allowed exposure targets"},
		{Policy{}, "100.64.7.10", ""},
	} {
		err := tc.pol.ExposureTarget(netip.MustParseAddr(tc.addr))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("ExposureTarget(%s) = %v, want %q", tc.addr, err, tc.want)
		}
	}
	// The allow-list binds exposures only: a reverse target lies in the client's network.
	if err := allow.ReverseTarget(netip.MustParseAddr("192.168.1.1")); err != nil {
		t.Errorf("reverse target judged by the allow-list: %v", err)
	}
	for _, tc := range []struct {
		subnet string
		want   string
	}{
		{"192.168.10.0/24", ""},
		{"169.254.0.0/24", "link-local"},
		{"0.0.0.0/0", "this network"},
		{"100.64.0.0/10", "service-CIDR pool"},
		{"100.64.3.0/24", "service-CIDR pool"},
		{"10.254.0.0/24", ""}, // the gateway reconciler reports this overlap itself
	} {
		err := pol.ClientSubnet(netip.MustParsePrefix(tc.subnet))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("ClientSubnet(%s) = %v, want %q", tc.subnet, err, tc.want)
		}
	}
}

// A peer address or WireGuard endpoint may be any public or private address outside the
// special ranges and the ranges the operator uses itself (security review L6).
func TestPeerAddress(t *testing.T) {
	pol := Policy{
		ServiceCIDRPool: netip.MustParsePrefix("100.64.0.0/16"),
		GatewaySubnet:   netip.MustParsePrefix("10.254.0.0/24"),
		InternalSources: []netip.Prefix{netip.MustParsePrefix("10.250.0.0/16")},
	}
	for _, tc := range []struct {
		addr string
		want string
	}{
		{"198.51.100.7", ""},
		{"192.0.2.2", ""},   // documentation: the local worlds' peers
		{"198.18.0.1", ""},  // benchmark
		{"192.168.1.1", ""}, // a platform's client in RFC 1918 space
		{"10.251.0.1", ""},  // private, outside the operator's own ranges
		{"100.65.0.1", ""},  // shared address space outside the pool
		{"0.0.0.0", "special-purpose"},
		{"127.0.0.1", "loopback"},
		{"169.254.169.254", "metadata service"},
		{"224.0.0.5", "multicast"},
		{"255.255.255.255", "broadcast"},
		{"100.64.3.10", "service-CIDR pool"},
		{"10.254.0.9", "gateway network's subnet"},
		{"10.250.3.4", "internal source network 10.250.0.0/16"},
	} {
		err := pol.PeerAddress(netip.MustParseAddr(tc.addr))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("PeerAddress(%s) = %v, want %q", tc.addr, err, tc.want)
		}
	}
	// Without the operator's ranges only the special ones are refused.
	if err := (Policy{}).PeerAddress(netip.MustParseAddr("10.254.0.9")); err != nil {
		t.Errorf("an empty policy refused a private address: %v", err)
	}
}
