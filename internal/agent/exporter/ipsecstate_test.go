package exporter

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"bnerd.net/vpn-operator/internal/agent/vici"
)

// TestExporterFromTheStatusAgentsState: what the status agent publishes is what the
// exporter serves (tunnel up, counters, rekeys, the failure's reason, the SA's age
// advanced by the file's age), and a state the status agent stopped refreshing or a
// charon that is not running is reported as such, never as the last good listing.
func TestExporterFromTheStatusAgentsState(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ipsec-state.json")
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	var listErr error
	sas := map[string][]vici.IKESA{"t1": {{Name: "t1", State: "ESTABLISHED", EstablishedSeconds: 5,
		Children: []vici.ChildSA{{Name: "t1", UniqueID: "1", State: "INSTALLED", BytesIn: 1000, BytesOut: 500}}}}}
	pub := &Publisher{
		File: file, Now: clock,
		Tunnels: func() []string { return []string{"t1", "t2"} },
		SAs: func(context.Context, []string) (map[string][]vici.IKESA, error) {
			if listErr != nil {
				return nil, listErr
			}
			return sas, nil
		},
		Rekeys: func() map[string]uint64 { return map[string]uint64{"t1": 3} },
		Causes: causes{"t2": {Reason: "AuthenticationFailed"}},
	}
	if err := pub.Publish(context.Background()); err != nil {
		t.Fatal(err)
	}
	src := &IPsecStateFile{Path: file, Now: clock}
	c := &Collector{Tunnels: pub.Tunnels, SAs: src.SAs, Rekeys: src.Rekeys, Causes: src}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	now = now.Add(2 * time.Second)
	t1 := map[string]string{"tunnel": "t1"}
	for _, w := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"bnerd_ipsec_vici_up", nil, 1},
		{"bnerd_ipsec_tunnel_up", t1, 1},
		{"bnerd_ipsec_tunnel_up", map[string]string{"tunnel": "t2"}, 0},
		{"bnerd_ipsec_bytes_total", map[string]string{"tunnel": "t1", "direction": "in"}, 1000},
		{"bnerd_ipsec_rekeys_total", t1, 3},
		{"bnerd_ipsec_established_seconds", t1, 7},
		{"bnerd_ipsec_tunnel_reason", map[string]string{"tunnel": "t2", "reason": "AuthenticationFailed"}, 1},
	} {
		if v := value(t, reg, w.name, w.labels); v != w.want {
			t.Errorf("%s%v = %v, want %v", w.name, w.labels, v, w.want)
		}
	}

	// Charon gone: published as such; the exporter reports the tunnels down.
	listErr = vici.ErrCharonNotRunning
	if err := pub.Publish(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := src.SAs(context.Background(), []string{"t1"}); !errors.Is(err, vici.ErrCharonNotRunning) {
		t.Fatalf("SAs with charon gone: %v", err)
	}
	if v := value(t, reg, "bnerd_ipsec_tunnel_up", t1); v != 0 {
		t.Errorf("tunnel_up %v with charon gone, want 0", v)
	}
	if v := value(t, reg, "bnerd_ipsec_vici_up", nil); v != 0 {
		t.Errorf("vici_up %v with charon gone, want 0", v)
	}

	// A listing charon did not answer, and a state nobody refreshed: no tunnel gauge
	// at all (the last good listing would be a lie), vici_up 0.
	for _, tc := range []struct {
		name    string
		prepare func()
	}{
		{"listing failed", func() { listErr = errors.New("timeout") }},
		{"stale", func() { listErr = nil; now = now.Add(DefaultIPsecStateStale + time.Second) }},
	} {
		tc.prepare()
		if tc.name != "stale" {
			if err := pub.Publish(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "bnerd_ipsec_tunnel_up" {
				t.Errorf("%s: tunnel_up served: %v", tc.name, mf.GetMetric())
			}
		}
		if v := value(t, reg, "bnerd_ipsec_vici_up", nil); v != 0 {
			t.Errorf("%s: vici_up %v, want 0", tc.name, v)
		}
	}
}

// TestMissingStateIsNotAListing: before the status agent's first write the exporter
// reports charon as not answering.
func TestMissingStateIsNotAListing(t *testing.T) {
	src := &IPsecStateFile{Path: filepath.Join(t.TempDir(), "none.json")}
	if _, err := src.SAs(context.Background(), []string{"t1"}); err == nil || errors.Is(err, vici.ErrCharonNotRunning) {
		t.Fatalf("a missing state: %v, want an error that is not ErrCharonNotRunning", err)
	}
}
