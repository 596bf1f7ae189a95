package chart

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/template"
)

// The chart's alert rules, as rendered with their default values, are evaluated with
// Prometheus' own PromQL engine on synthetic series written in promtool's test notation,
// with the rule manager's pending/`for`/firing semantics. Every scenario compares the
// complete set of firing alerts at chosen times, so an alert that fires when it should
// not is caught as surely as one that stays silent.

// evalEvery is the rule evaluation interval; the synthetic scrapes are every 30s too.
const evalEvery = 30 * time.Second

// Label sets of the synthetic series: the operator's scrape (honorLabels keeps the
// gateway's namespace), and the scrape of gateway pods by the PodMonitor.
const (
	opTarget  = `job="` + operatorJob + `", instance="10.0.0.5:8080", pod="vpn-operator-0"`
	office    = `namespace="tenant-a", gateway="office", gateway_kind="ipsecgateway"`
	officePod = office + `, job="` + gatewayJob + `", instance="10.1.0.7:9903", pod="office-gateway-7f9c"`
	dc        = `namespace="tenant-b", gateway="dc", gateway_kind="vpngateway"`
	dcPod     = dc + `, job="` + gatewayJob + `", instance="10.1.0.8:9903", pod="dc-gateway-5d4b"`
)

// The operator's own up series lives in the operator's namespace.
var operatorUp = `up{` + opTarget + `, namespace="vpn-system"}`

// op is an operator series of a gateway.
func op(metric, gw, extra string) string {
	s := metric + "{" + opTarget + ", " + gw
	if extra != "" {
		s += ", " + extra
	}
	return s + "}"
}

// pod is a series of a gateway pod's scrape.
func pod(metric, podLabels, extra string) string {
	s := metric + "{" + podLabels
	if extra != "" {
		s += ", " + extra
	}
	return s + "}"
}

// healthy are the series of a converged gateway with one tunnel up, for 40 minutes.
func healthy(gw, podLabels string) []string {
	return []string{
		op("bnerd_gateway_info", gw, `node="node-1", floating_ip="203.0.113.10"`) + " 1x80",
		op("bnerd_gateway_pod_ready", gw, "") + " 1x80",
		op("bnerd_gateway_tunnel_reported_up", gw, `tunnel="hq"`) + " 1x80",
		pod("up", podLabels, "") + " 1x80",
		pod("bnerd_ipsec_tunnel_up", podLabels, `tunnel="hq"`) + " 1x80",
		pod("bnerd_ipsec_vici_up", podLabels, "") + " 1x80",
		pod("bnerd_gateway_nat_apply_errors_total", podLabels, "") + " 0x80",
	}
}

// replace swaps the series whose text starts with the given prefix (metric and labels)
// for the given replacement lines.
func replace(lines []string, prefix string, with ...string) []string {
	var out []string
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			continue
		}
		out = append(out, l)
	}
	return append(out, with...)
}

// evalRule evaluates one rendered alerting rule the way Prometheus' rule manager does:
// every result sample is an alert keyed by its labels (without the metric name, with the
// rule's labels and alertname); it is pending from the first evaluation that returned it
// and firing once it has been returned continuously for the rule's `for`; it is gone the
// first evaluation that does not return it. Annotations are expanded with Prometheus' own
// template expander.
type evalRule struct {
	name        string
	expr        string
	hold        time.Duration
	labels      map[string]string
	annotations map[string]string
	active      map[string]*activeAlert
}

type activeAlert struct {
	labels   labels.Labels
	activeAt time.Time
	value    float64
}

func chartRules(t *testing.T) []*evalRule {
	t.Helper()
	var out []*evalRule
	for name, r := range gatewayAlerts(t, mustRenderMonitored(t, monitoringValues())) {
		if _, err := promQL.ParseExpr(r.Expr); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		hold, err := model.ParseDuration(r.For)
		if err != nil {
			t.Fatalf("%s: for %q: %v", name, r.For, err)
		}
		out = append(out, &evalRule{name: name, expr: r.Expr, hold: time.Duration(hold), labels: r.Labels, annotations: r.Annotations, active: map[string]*activeAlert{}})
	}
	return out
}

// eval runs one evaluation at ts and returns the keys of the firing alerts.
func (r *evalRule) eval(t *testing.T, e *promql.Engine, q storage.Queryable, ts time.Time) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, smpl := range instant(t, e, q, r.expr, ts) {
		lb := labels.NewBuilder(smpl.Metric)
		lb.Del(labels.MetricName)
		for k, v := range r.labels {
			lb.Set(k, v)
		}
		lb.Set(labels.AlertName, r.name)
		l := lb.Labels()
		key := l.String()
		if seen[key] {
			t.Fatalf("%s at %s: two results with the label set %s", r.name, ts, key)
		}
		seen[key] = true
		if a, ok := r.active[key]; ok {
			a.value = smpl.F
			continue
		}
		r.active[key] = &activeAlert{labels: l, activeAt: ts, value: smpl.F}
	}
	var firing []string
	for key, a := range r.active {
		if !seen[key] {
			delete(r.active, key)
			continue
		}
		if ts.Sub(a.activeAt) >= r.hold {
			firing = append(firing, alertKey(a.labels))
			r.checkExpanded(t, a, e, q, ts)
		}
	}
	return firing
}

// checkExpanded expands the annotations as Prometheus does and fails on an error.
func (r *evalRule) checkExpanded(t *testing.T, a *activeAlert, e *promql.Engine, q storage.Queryable, ts time.Time) {
	t.Helper()
	defs := "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"
	data := template.AlertTemplateData(a.labels.Map(), nil, "", promql.Sample{Metric: a.labels, F: a.value, T: ts.UnixMilli()})
	query := func(ctx context.Context, qs string, at time.Time) (promql.Vector, error) {
		return instant(t, e, q, qs, at), nil
	}
	for k, text := range r.annotations {
		out, err := template.NewTemplateExpander(context.Background(), defs+text, "__alert_"+r.name, data, model.Time(ts.UnixMilli()), query, nil, nil).Expand()
		if err != nil || strings.Contains(out, "<no value>") {
			t.Errorf("%s: annotation %s: %v %q", alertKey(a.labels), k, err, out)
		}
	}
}

// timeline is the set of firing alerts after each evaluation.
type timeline map[time.Duration][]string

// evaluate loads the series (30s apart, from time 0) and evaluates every rule every 30s
// up to `until`, as Prometheus' rule manager does.
func evaluate(t *testing.T, series []string, until time.Duration) timeline {
	t.Helper()
	st := newMemStore(t, evalEvery, series)
	engine := newEngine(t)
	rs := chartRules(t)
	out := timeline{}
	for at := time.Duration(0); at <= until; at += evalEvery {
		ts := time.Unix(0, 0).UTC().Add(at)
		var firing []string
		for _, r := range rs {
			firing = append(firing, r.eval(t, engine, st, ts)...)
		}
		slices.Sort(firing)
		out[at] = firing
	}
	return out
}

// alertKey names an alert by its rule and the labels that identify what it is about.
func alertKey(l labels.Labels) string {
	var id []string
	for _, k := range []string{"namespace", "gateway", "tunnel"} {
		if v := l.Get(k); v != "" {
			id = append(id, v)
		}
	}
	return l.Get(labels.AlertName) + "{" + strings.Join(id, "/") + "}"
}

// expect compares the firing alerts at each given time with the wanted ones.
func (tl timeline) expect(t *testing.T, want map[time.Duration][]string) {
	t.Helper()
	for _, at := range slices.Sorted(maps.Keys(want)) {
		got, ok := tl[at]
		if !ok {
			t.Fatalf("no evaluation at %s", at)
		}
		w := slices.Clone(want[at])
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Errorf("at %s firing %v, want %v", at, got, w)
		}
	}
}

// never asserts that nothing fired at any evaluation.
func (tl timeline) never(t *testing.T) {
	t.Helper()
	for _, at := range slices.Sorted(maps.Keys(tl)) {
		if len(tl[at]) > 0 {
			t.Errorf("at %s firing %v, want nothing", at, tl[at])
		}
	}
}

func m(d string) time.Duration {
	v, err := time.ParseDuration(d)
	if err != nil {
		panic(err)
	}
	return v
}

func TestAlertRulesEvaluated(t *testing.T) {
	base := func() []string {
		s := append([]string{operatorUp + " 1x80"}, healthy(office, officePod)...)
		return append(s, healthy(dc, dcPod)...)
	}

	t.Run("healthy gateways: nothing fires", func(t *testing.T) {
		evaluate(t, base(), m("40m")).never(t)
	})

	t.Run("tunnel down for 5 minutes fires; a 3 minute outage does not", func(t *testing.T) {
		s := replace(base(), pod("bnerd_ipsec_tunnel_up", officePod, `tunnel="hq"`),
			// down from minute 5 on (sample 10), charon and the status agent agree.
			pod("bnerd_ipsec_tunnel_up", officePod, `tunnel="hq"`)+" 1x9 0x70")
		s = replace(s, op("bnerd_gateway_tunnel_reported_up", office, `tunnel="hq"`),
			op("bnerd_gateway_tunnel_reported_up", office, `tunnel="hq"`)+" 1x9 0x70")
		s = replace(s, pod("bnerd_ipsec_tunnel_up", dcPod, `tunnel="hq"`),
			pod("bnerd_ipsec_tunnel_up", dcPod, `tunnel="hq"`)+" 1x9 0x5 1x64")
		s = replace(s, op("bnerd_gateway_tunnel_reported_up", dc, `tunnel="hq"`),
			op("bnerd_gateway_tunnel_reported_up", dc, `tunnel="hq"`)+" 1x9 0x5 1x64")
		evaluate(t, s, m("40m")).expect(t, map[time.Duration][]string{
			m("9m30s"): nil,
			m("10m"):   {"BnerdVPNTunnelDown{tenant-a/office/hq}"},
			m("30m"):   {"BnerdVPNTunnelDown{tenant-a/office/hq}"},
		})
	})

	t.Run("status agent silent: status keeps saying Up while charon says down", func(t *testing.T) {
		s := replace(base(), pod("bnerd_ipsec_tunnel_up", officePod, `tunnel="hq"`),
			pod("bnerd_ipsec_tunnel_up", officePod, `tunnel="hq"`)+" 1x9 0x70")
		// dc's status follows charon one minute late: that is the agent working.
		s = replace(s, pod("bnerd_ipsec_tunnel_up", dcPod, `tunnel="hq"`),
			pod("bnerd_ipsec_tunnel_up", dcPod, `tunnel="hq"`)+" 1x9 0x70")
		s = replace(s, op("bnerd_gateway_tunnel_reported_up", dc, `tunnel="hq"`),
			op("bnerd_gateway_tunnel_reported_up", dc, `tunnel="hq"`)+" 1x11 0x68")
		evaluate(t, s, m("40m")).expect(t, map[time.Duration][]string{
			m("10m"):    {"BnerdVPNTunnelDown{tenant-a/office/hq}", "BnerdVPNTunnelDown{tenant-b/dc/hq}"},
			m("14m30s"): {"BnerdVPNTunnelDown{tenant-a/office/hq}", "BnerdVPNTunnelDown{tenant-b/dc/hq}"},
			m("15m"): {"BnerdVPNStatusAgentSilent{tenant-a/office/hq}",
				"BnerdVPNTunnelDown{tenant-a/office/hq}", "BnerdVPNTunnelDown{tenant-b/dc/hq}"},
		})
	})

	t.Run("status agent silent: a tunnel charon has is missing from status", func(t *testing.T) {
		s := append(base(), pod("bnerd_ipsec_tunnel_up", officePod, `tunnel="branch"`)+" 1x80")
		evaluate(t, s, m("20m")).expect(t, map[time.Duration][]string{
			m("9m30s"): nil,
			m("10m"):   {"BnerdVPNStatusAgentSilent{tenant-a/office/branch}"},
		})
	})

	t.Run("operator not scraped: its own alert fires, the alerts reading its series stay quiet", func(t *testing.T) {
		var s []string
		for _, l := range base() {
			if !strings.Contains(l, `job="`+operatorJob+`"`) {
				s = append(s, l)
			}
		}
		// A tunnel the status would not know about: without the operator that must not
		// read as a silent status agent.
		s = append(s, pod("bnerd_ipsec_tunnel_up", officePod, `tunnel="branch"`)+" 1x80")
		evaluate(t, s, m("20m")).expect(t, map[time.Duration][]string{
			m("4m30s"): nil,
			m("5m"):    {"BnerdVPNOperatorMetricsAbsent{}"},
			m("20m"):   {"BnerdVPNOperatorMetricsAbsent{}"},
		})
		// A failing scrape of the operator (up 0) is the same.
		s = replace(base(), operatorUp, operatorUp+" 0x80")
		evaluate(t, s, m("10m")).expect(t, map[time.Duration][]string{m("5m"): {"BnerdVPNOperatorMetricsAbsent{}"}})
	})

	t.Run("pod not ready for 5 minutes fires; 3 minutes does not", func(t *testing.T) {
		s := replace(base(), op("bnerd_gateway_pod_ready", office, ""), op("bnerd_gateway_pod_ready", office, "")+" 1x3 0x76")
		s = replace(s, op("bnerd_gateway_pod_ready", dc, ""), op("bnerd_gateway_pod_ready", dc, "")+" 1x3 0x5 1x70")
		evaluate(t, s, m("30m")).expect(t, map[time.Duration][]string{
			m("6m30s"): nil,
			m("7m"):    {"BnerdVPNGatewayPodNotReady{tenant-a/office}"},
		})
	})

	t.Run("pending pod without an IP: no scrape target, yet the scrape alert fires", func(t *testing.T) {
		// The office gateway's pod never got an IP: Prometheus has no target for it, so
		// there is no up series and no exporter series at all.
		var s []string
		for _, l := range base() {
			if !strings.Contains(l, `pod="office-gateway-7f9c"`) {
				s = append(s, l)
			}
		}
		s = replace(s, op("bnerd_gateway_pod_ready", office, ""), op("bnerd_gateway_pod_ready", office, "")+" 0x80")
		s = replace(s, op("bnerd_gateway_tunnel_reported_up", office, `tunnel="hq"`), op("bnerd_gateway_tunnel_reported_up", office, `tunnel="hq"`)+" 0x80")
		evaluate(t, s, m("20m")).expect(t, map[time.Duration][]string{
			m("4m30s"): nil,
			m("5m"):    {"BnerdVPNGatewayPodNotReady{tenant-a/office}", "BnerdVPNGatewayScrapeAbsent{tenant-a/office}"},
			m("20m"):   {"BnerdVPNGatewayPodNotReady{tenant-a/office}", "BnerdVPNGatewayScrapeAbsent{tenant-a/office}"},
		})
	})

	t.Run("scrape failing (up 0) fires the scrape alert for that gateway only", func(t *testing.T) {
		s := replace(base(), pod("up", dcPod, ""), pod("up", dcPod, "")+" 1x3 0x76")
		// The failing scrape writes stale markers for the exporter's series.
		s = replace(s, pod("bnerd_ipsec_tunnel_up", dcPod, `tunnel="hq"`), pod("bnerd_ipsec_tunnel_up", dcPod, `tunnel="hq"`)+" 1x3 stale")
		s = replace(s, pod("bnerd_ipsec_vici_up", dcPod, ""), pod("bnerd_ipsec_vici_up", dcPod, "")+" 1x3 stale")
		s = replace(s, pod("bnerd_gateway_nat_apply_errors_total", dcPod, ""), pod("bnerd_gateway_nat_apply_errors_total", dcPod, "")+" 0x3 stale")
		evaluate(t, s, m("20m")).expect(t, map[time.Duration][]string{
			m("6m30s"): nil,
			m("7m"):    {"BnerdVPNGatewayScrapeAbsent{tenant-b/dc}"},
		})
	})

	t.Run("a deleted gateway raises nothing", func(t *testing.T) {
		var s []string
		for _, l := range base() {
			if strings.Contains(l, `gateway="dc"`) {
				// The operator stops exporting it and its pod's target goes away at minute 2.
				s = append(s, l[:strings.LastIndex(l, " ")]+" 1x3 stale")
				continue
			}
			s = append(s, l)
		}
		evaluate(t, s, m("30m")).never(t)
	})

	t.Run("same name, other kind: the scrape of one does not cover the other", func(t *testing.T) {
		twin := `namespace="tenant-a", gateway="office", gateway_kind="vpngateway"`
		s := append(base(), op("bnerd_gateway_info", twin, `node="node-2", floating_ip="203.0.113.11"`)+" 1x80",
			op("bnerd_gateway_pod_ready", twin, "")+" 1x80")
		evaluate(t, s, m("10m")).expect(t, map[time.Duration][]string{m("5m"): {"BnerdVPNGatewayScrapeAbsent{tenant-a/office}"}})
	})

	t.Run("charon unreachable for 5 minutes fires", func(t *testing.T) {
		s := replace(base(), pod("bnerd_ipsec_vici_up", officePod, ""), pod("bnerd_ipsec_vici_up", officePod, "")+" 1x3 0x76")
		evaluate(t, s, m("20m")).expect(t, map[time.Duration][]string{
			m("6m30s"): nil,
			m("7m"):    {"BnerdVPNCharonUnreachable{tenant-a/office}"},
		})
	})

	t.Run("NAT apply errors fire while the window holds an increase, also across a restart", func(t *testing.T) {
		// Errors at minute 5; the pod restarts at minute 10 (counter reset to 0) and fails
		// once more right after.
		s := replace(base(), pod("bnerd_gateway_nat_apply_errors_total", officePod, ""),
			pod("bnerd_gateway_nat_apply_errors_total", officePod, "")+" 0x9 3x9 0 1x59")
		evaluate(t, s, m("40m")).expect(t, map[time.Duration][]string{
			m("4m30s"):  nil,
			m("5m30s"):  {"BnerdVPNNATApplyErrors{tenant-a/office}"},
			m("20m"):    {"BnerdVPNNATApplyErrors{tenant-a/office}"},
			m("26m30s"): nil,
		})
	})
}
