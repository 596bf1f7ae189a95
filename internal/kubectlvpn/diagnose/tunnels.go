package diagnose

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/api/meta"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/operatorconfig"
)

// checkTunnels reads the status agent's view: status.tunnels, written from charon's SAs.
func (r *run) checkTunnels(workloadUp bool) {
	g := r.g
	const title = "Tunnels up (the status agent's view)"
	if !workloadUp && len(g.status.Tunnels) > 0 {
		// Without a running pod nothing writes status.tunnels: what is there is the last
		// report, not the present.
		r.add(Check{ID: "status.tunnels", Title: title, Status: Skipped,
			Detail: fmt.Sprintf("no running gateway pod: status.tunnels (%s up) is the last report, not the present", orText(g.status.TunnelsReady, "?"))})
		return
	}
	if len(g.status.Tunnels) == 0 {
		if !workloadUp {
			r.add(Check{ID: "status.tunnels", Title: title, Status: Skipped, Detail: "no running gateway pod to report them"})
			return
		}
		r.add(Check{ID: "status.tunnels", Title: title, Status: Fail,
			Detail:  "status.tunnels is empty although the gateway pod runs: the status agent has not reported",
			Fix:     fmt.Sprintf("Read its log: kubectl -n %s logs %s -c status-agent (it needs get/patch on the gateway's status)", g.obj.GetNamespace(), r.podName()),
			Runbook: anchor(FindingStatusAgent)})
		return
	}
	// A report the status agent stopped confirming is not the present: the operator's
	// own reading (TunnelsUp Unknown/StatusAgentSilent, after its configured time), or a
	// heartbeat older than the default stale-after time.
	silent := ""
	if c := meta.FindStatusCondition(g.status.Conditions, v1alpha1.ConditionTunnelsUp); c != nil && c.Reason == v1alpha1.ReasonStatusAgentSilent {
		silent = c.Message
	} else if hb := g.status.TunnelsObservedTime; hb != nil && r.now.Sub(hb.Time) > operatorconfig.DefaultStatusAgentStaleAfter {
		silent = fmt.Sprintf("the status agent last reported at %s, %s ago", hb.UTC().Format(time.RFC3339), r.now.Sub(hb.Time).Round(time.Second))
	}
	if silent != "" {
		r.add(Check{ID: "status.tunnels", Title: title, Status: Fail,
			Detail:  "status.tunnels is not current: " + silent,
			Fix:     fmt.Sprintf("Read its log: kubectl -n %s logs %s -c status-agent (it needs get/patch on the gateway's status)", g.obj.GetNamespace(), r.podName()),
			Runbook: anchor(FindingStatusAgent)})
		return
	}
	up := 0
	var down []string
	tunnels := g.tunnels()
	for _, t := range tunnels {
		var found bool
		for _, s := range g.status.Tunnels {
			if s.Name != t.name {
				continue
			}
			found = true
			if s.State == "Up" {
				up++
			} else {
				msg := s.Message
				if msg == "" {
					msg = "no detail"
				}
				down = append(down, fmt.Sprintf("%s is %s (%s; peer %s)", t.name, s.State, msg, t.peer))
			}
		}
		if !found {
			down = append(down, t.name+" is not in status.tunnels (the status agent has not reported it)")
		}
	}
	if len(down) > 0 {
		fix := fmt.Sprintf("The peer must answer on UDP 500/4500 with matching identities, key and proposals: compare with kubectl vpn peer-config %s -n %s --tunnel <name>, and read charon's log: kubectl -n %s logs %s -c strongswan",
			g.obj.GetName(), g.obj.GetNamespace(), g.obj.GetNamespace(), r.podName())
		if g.isWireGuard() {
			fix = fmt.Sprintf("The peer must complete a handshake with the gateway's public key (status.wireguard.publicKey) on UDP %d: compare with kubectl vpn peer-config %s -n %s --tunnel <name> --format wireguard, and read the wireguard container's log: kubectl -n %s logs %s -c wireguard",
				wireGuardPorts(g)[0], g.obj.GetName(), g.obj.GetNamespace(), g.obj.GetNamespace(), r.podName())
		}
		r.add(Check{ID: "status.tunnels", Title: title, Status: Fail,
			Detail:  fmt.Sprintf("%d/%d up; %s", up, len(tunnels), strings.Join(down, "; ")),
			Fix:     fix,
			Runbook: anchor(FindingTunnelDown)})
		return
	}
	newest := time.Duration(-1)
	for _, s := range g.status.Tunnels {
		// An IKE SA's establishment; a WireGuard peer reports its latest handshake.
		at := s.EstablishedAt
		if g.isWireGuard() {
			at = s.LatestHandshake
		}
		if at != nil {
			if age := r.now.Sub(at.Time); newest < 0 || age < newest {
				newest = age
			}
		}
	}
	detail := fmt.Sprintf("%d/%d up", up, len(tunnels))
	if newest >= 0 {
		what := "IKE SA established"
		if g.isWireGuard() {
			what = "handshake"
		}
		detail += fmt.Sprintf(", newest %s %s ago", what, newest.Round(time.Second))
	}
	r.add(Check{ID: "status.tunnels", Title: title, Status: Pass, Detail: detail})
}

func (r *run) podName() string {
	if r.pod != nil {
		return r.pod.Name
	}
	return "<gateway pod>"
}

// checkExporter reads the pod's exporter: charon's view (the status agent's listing,
// published every second) and the NAT applies.
func (r *run) checkExporter(podOK bool) {
	const id = "exporter"
	title := "charon and NAT (the exporter's view)"
	if r.g.isWireGuard() {
		title = "WireGuard interface and NAT (the exporter's view)"
	}
	if r.src.SkipExporter {
		r.add(Check{ID: id, Title: title, Status: Skipped, Detail: "not checked, on request", Requested: true})
		return
	}
	if r.src.Metrics == nil {
		r.add(Check{ID: id, Title: title, Status: Skipped, Detail: "no way to reach the exporter was given"})
		return
	}
	if !podOK || r.pod == nil {
		r.add(Check{ID: id, Title: title, Status: Skipped, Detail: "no running gateway pod"})
		return
	}
	raw, err := r.src.Metrics(r.ctx, r.pod.Namespace, r.pod.Name)
	if err != nil {
		r.add(Check{ID: id, Title: title, Status: Skipped, Detail: "could not read the exporter through the API server's pod proxy: " + err.Error()})
		return
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		r.add(Check{ID: id, Title: title, Status: Skipped, Detail: "the exporter's answer does not parse: " + err.Error()})
		return
	}
	upMetric, tunnelMetric, who := "bnerd_ipsec_vici_up", "bnerd_ipsec_tunnel_up", "charon"
	if r.g.isWireGuard() {
		upMetric, tunnelMetric, who = "bnerd_wireguard_up", "bnerd_wireguard_peer_up", "the WireGuard interface"
		if v, ok := single(fams, upMetric); !ok || v != 1 {
			r.add(Check{ID: id, Title: title, Status: Fail,
				Detail:  "the wireguard container has not reported the interface to the exporter: every peer of the gateway is down or unobservable",
				Fix:     fmt.Sprintf("Read its log: kubectl -n %s logs %s -c wireguard", r.pod.Namespace, r.pod.Name),
				Runbook: anchor(FindingWireGuardDown)})
			return
		}
	} else if v, ok := single(fams, upMetric); !ok || v != 1 {
		r.add(Check{ID: id, Title: title, Status: Fail,
			Detail:  "charon does not answer the status agent's listing over VICI, or the status agent publishes none (the exporter serves that listing): every tunnel of the gateway is down or unobservable",
			Fix:     fmt.Sprintf("Read charon's and the status agent's logs: kubectl -n %s logs %s -c strongswan; kubectl -n %s logs %s -c status-agent", r.pod.Namespace, r.pod.Name, r.pod.Namespace, r.pod.Name),
			Runbook: anchor(FindingCharonDown)})
		return
	}
	applies, ok := single(fams, "bnerd_gateway_nat_applies_total")
	if !ok || applies == 0 {
		r.add(Check{ID: id, Title: title, Status: Fail,
			Detail:  "init-nat has not applied the NAT ruleset (no applies recorded): exposures are not translated",
			Fix:     fmt.Sprintf("Read its log: kubectl -n %s logs %s -c init-nat", r.pod.Namespace, r.pod.Name),
			Runbook: anchor(FindingNATNotApplied)})
		return
	}
	// charon's view next to the status the status agent wrote (a stale status write
	// shows here even though both come from the status agent).
	var disagree []string
	if f := fams[tunnelMetric]; f != nil {
		for _, m := range f.Metric {
			name := label(m, "tunnel")
			live := m.GetGauge().GetValue() == 1
			for _, s := range r.g.status.Tunnels {
				if s.Name == name && (s.State == "Up") != live {
					disagree = append(disagree, fmt.Sprintf("%s: status says %s, %s says %s", name, s.State, who, map[bool]string{true: "up", false: "down"}[live]))
				}
			}
		}
	}
	sort.Strings(disagree)
	if len(disagree) > 0 {
		r.add(Check{ID: id, Title: title, Status: Warn,
			Detail:  "the status agent's report is stale: " + strings.Join(disagree, "; "),
			Fix:     fmt.Sprintf("Read its log: kubectl -n %s logs %s -c status-agent", r.pod.Namespace, r.pod.Name),
			Runbook: anchor(FindingStatusAgent)})
		return
	}
	if errs, _ := single(fams, "bnerd_gateway_nat_apply_errors_total"); errs > 0 {
		r.add(Check{ID: id, Title: title, Status: Warn,
			Detail:  fmt.Sprintf("%.0f of %.0f NAT ruleset applies failed since the pod started", errs, applies),
			Fix:     fmt.Sprintf("Read the failures: kubectl -n %s logs %s -c init-nat | grep failed", r.pod.Namespace, r.pod.Name),
			Runbook: anchor(FindingNATErrors)})
		return
	}
	r.add(Check{ID: id, Title: title, Status: Pass, Detail: fmt.Sprintf("%s answers; NAT applied %.0f times without error", who, applies)})
}

func single(fams map[string]*dto.MetricFamily, name string) (float64, bool) {
	f := fams[name]
	if f == nil || len(f.Metric) != 1 {
		return 0, false
	}
	m := f.Metric[0]
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue(), true
	case m.Counter != nil:
		return m.Counter.GetValue(), true
	case m.Untyped != nil:
		return m.Untyped.GetValue(), true
	}
	return 0, false
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
