package exporter

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"bnerd.net/vpn-operator/internal/agent/downcause"
	"bnerd.net/vpn-operator/internal/agent/statefile"
	"bnerd.net/vpn-operator/internal/agent/vici"
)

// value gathers reg and returns the sample of name whose labels include want.
func value(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := want[lp.GetName()]; ok && v != lp.GetValue() {
					continue metric
				}
			}
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.Gauge.GetValue()
		}
	}
	t.Fatalf("no sample %s %v", name, want)
	return 0
}

func TestCountersStayMonotonicAcrossRekeys(t *testing.T) {
	sas := map[string][]vici.IKESA{"t1": {{Name: "t1", State: "ESTABLISHED", EstablishedSeconds: 5,
		Children: []vici.ChildSA{{Name: "t1", UniqueID: "1", State: "INSTALLED", BytesIn: 1000, BytesOut: 500}}}}}
	var sasErr error
	state := filepath.Join(t.TempDir(), "nat.json")
	if err := statefile.WriteNATState(state, statefile.NATState{ApplyErrors: 2, Applies: 7, LastApplySeconds: 0.01, GuardDroppedPackets: 41}); err != nil {
		t.Fatal(err)
	}
	c := &Collector{
		Tunnels:      func() []string { return []string{"t1", "t2"} },
		SAs:          func(context.Context, []string) (map[string][]vici.IKESA, error) { return sas, sasErr },
		NATStateFile: state,
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	in1 := map[string]string{"tunnel": "t1", "direction": "in"}
	if v := value(t, reg, "bnerd_ipsec_bytes_total", in1); v != 1000 {
		t.Errorf("bytes in %v", v)
	}
	if v := value(t, reg, "bnerd_ipsec_tunnel_up", map[string]string{"tunnel": "t1"}); v != 1 {
		t.Errorf("t1 up %v", v)
	}
	if v := value(t, reg, "bnerd_ipsec_tunnel_up", map[string]string{"tunnel": "t2"}); v != 0 {
		t.Errorf("t2 up %v", v)
	}
	if v := value(t, reg, "bnerd_gateway_nat_apply_errors_total", nil); v != 2 {
		t.Errorf("nat errors %v", v)
	}
	if v := value(t, reg, "bnerd_gateway_guard_dropped_packets_total", nil); v != 41 {
		t.Errorf("guard drops %v", v)
	}
	// rekey: the new child SA starts from zero, the total keeps growing
	sas["t1"][0].Children = []vici.ChildSA{{Name: "t1", UniqueID: "2", State: "INSTALLED", BytesIn: 300, BytesOut: 100}}
	if v := value(t, reg, "bnerd_ipsec_bytes_total", in1); v != 1300 {
		t.Errorf("bytes in after rekey %v, want 1300", v)
	}
	// charon unreachable for a scrape: nothing is lost or counted twice afterwards
	sasErr = errors.New("charon down")
	_ = value(t, reg, "bnerd_ipsec_vici_up", nil)
	sasErr = nil
	sas["t1"][0].Children[0].BytesIn = 350
	if v := value(t, reg, "bnerd_ipsec_bytes_total", in1); v != 1350 {
		t.Errorf("bytes in after an unanswered scrape %v, want 1350", v)
	}
	// charon restarted: its SAs are numbered from 1 again; the new child's bytes count
	// although an old child had the same unique ID with more bytes
	sas["t1"][0].Children = []vici.ChildSA{{Name: "t1", UniqueID: "1", SPIIn: "c0ffee01", State: "INSTALLED", BytesIn: 40}}
	if v := value(t, reg, "bnerd_ipsec_bytes_total", in1); v != 1390 {
		t.Errorf("bytes in after a charon restart %v, want 1390", v)
	}
	if len(c.last) != 1 {
		t.Errorf("%d children remembered, want only the current one", len(c.last))
	}
}

// present reports whether reg has a sample of name with labels including want.
func present(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := want[lp.GetName()]; ok && v != lp.GetValue() {
					continue metric
				}
			}
			return true
		}
	}
	return false
}

type causes map[string]downcause.Cause

func (c causes) Cause(n string) (downcause.Cause, bool) { x, ok := c[n]; return x, ok }

// TestTunnelUpIsNeverFalselyZero: an IKE SA rekey in flight (the old SA REKEYED beside its
// successor) is up; a charon that answers too late leaves the tunnel gauges out of the
// scrape instead of reporting 0; a charon that is not running reports 0; the reason of
// a failure is a label.
func TestTunnelUpIsNeverFalselyZero(t *testing.T) {
	sas := map[string][]vici.IKESA{"t1": {
		{Name: "t1", UniqueID: "1", State: "REKEYED", EstablishedSeconds: 300, Children: []vici.ChildSA{{Name: "t1", UniqueID: "1", State: "INSTALLED"}}},
		{Name: "t1", UniqueID: "2", State: "ESTABLISHED"},
	}}
	var sasErr error
	c := &Collector{
		Tunnels: func() []string { return []string{"t1", "t2"} },
		SAs:     func(context.Context, []string) (map[string][]vici.IKESA, error) { return sas, sasErr },
		Causes:  causes{"t2": {Reason: downcause.NoCommonESPProposal}},
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	if v := value(t, reg, "bnerd_ipsec_tunnel_up", map[string]string{"tunnel": "t1"}); v != 1 {
		t.Errorf("t1 up %v during an IKE rekey", v)
	}
	if v := value(t, reg, "bnerd_ipsec_tunnel_reason", map[string]string{"tunnel": "t2", "reason": downcause.NoCommonESPProposal}); v != 1 {
		t.Errorf("reason %v", v)
	}
	if present(t, reg, "bnerd_ipsec_tunnel_reason", map[string]string{"tunnel": "t1"}) {
		t.Error("a reason for a tunnel without a cause")
	}
	sasErr = context.DeadlineExceeded
	if present(t, reg, "bnerd_ipsec_tunnel_up", map[string]string{"tunnel": "t1"}) {
		t.Error("tunnel_up reported although charon's answer did not arrive in time")
	}
	if v := value(t, reg, "bnerd_ipsec_vici_up", nil); v != 0 {
		t.Errorf("vici_up %v", v)
	}
	sasErr = vici.ErrCharonNotRunning
	if v := value(t, reg, "bnerd_ipsec_tunnel_up", map[string]string{"tunnel": "t1"}); v != 0 {
		t.Errorf("t1 up %v with charon not running", v)
	}
}
