package chart

import (
	"go/ast"
	"go/types"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/lint/support"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"bnerd.net/vpn-operator/internal/render"
)

// The gateway PodMonitor, PrometheusRule and the operator's ServiceMonitor are checked by
// rendering: the test API server has no monitoring.coreos.com CRDs. Checked here: each
// converts strictly to the Prometheus Operator's Go types, the selectors match the pods
// the operator renders, every alert expression parses with Prometheus' own PromQL parser
// and names only series the exporter, the operator or Prometheus itself (`up`) produces.
// rules_eval_test.go then evaluates the rules with Prometheus' PromQL engine.

var (
	// The exporter's series: the IPsec gateway's and, from the same binary, the WireGuard
	// gateway's.
	exporterGo        = fromRoot("internal", "agent", "exporter", "exporter.go")
	wireguardGo       = fromRoot("internal", "agent", "exporter", "wireguard.go")
	operatorMetricsGo = fromRoot("internal", "gatewaymetrics", "gatewaymetrics.go")
)

const (
	gatewayJob  = releaseNS + "/" + fullname + "-gateways"
	operatorJob = fullname + "-metrics"
)

// promQL parses as a Prometheus server without feature flags does: no experimental
// functions or syntax.
var promQL = parser.NewParser(parser.Options{})

// monitoringValues are the defaults: everything `auto`, rendered with mustRenderMonitored
// for a cluster that serves the Prometheus Operator's kinds.
func monitoringValues() map[string]any { return requiredValues() }

// exporterMetricNames returns the names of the exporter's prometheus.NewDesc calls.
func exporterMetricNames(t *testing.T) map[string]bool {
	names := metricNames(t, exporterGo)
	maps.Copy(names, metricNames(t, wireguardGo))
	return names
}

// operatorMetricNames returns the names of the operator's per-gateway series.
func operatorMetricNames(t *testing.T) map[string]bool { return metricNames(t, operatorMetricsGo) }

func metricNames(t *testing.T, file string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	ast.Inspect(parseGo(t, file), func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "NewDesc" {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); ok && x.Name == "prometheus" {
			if s, ok := stringLit(call.Args[0]); ok {
				names[s] = true
			}
		}
		return true
	})
	if len(names) == 0 {
		t.Fatalf("%s: found no prometheus.NewDesc calls", file)
	}
	return names
}

// gatewayPods renders the Deployments of two gateways of both kinds, in two namespaces,
// as the operator does.
func gatewayPods(t *testing.T) []*corev1.PodTemplateSpec {
	t.Helper()
	var out []*corev1.PodTemplateSpec
	for _, g := range []render.Gateway{
		{APIVersion: "ipsec.bnerd.net/v1alpha1", Kind: "IPsecGateway", Resource: "ipsecgateways", Namespace: "tenant-a", Name: "office", UID: "u1"},
		{APIVersion: "ipsec.bnerd.net/v1alpha1", Kind: "VPNGateway", Resource: "vpngateways", Namespace: "tenant-b", Name: "dc", UID: "u2"},
	} {
		d, err := render.Deployment(render.Workload{Gateway: g, NodeName: "node-1", PortMAC: "fa:16:3e:00:00:01", GatewayImage: "gw:1", AgentImage: "agent:1"})
		if err != nil {
			t.Fatalf("rendering the gateway Deployment of %s/%s: %v", g.Namespace, g.Name, err)
		}
		if !maps.Equal(d.Spec.Template.Labels, render.Labels(g)) {
			t.Fatalf("the gateway pod's labels %v are not render.Labels %v", d.Spec.Template.Labels, render.Labels(g))
		}
		out = append(out, &d.Spec.Template)
	}
	return out
}

// metaLabel is the name Prometheus' Kubernetes pod discovery gives a pod label.
func metaLabel(podLabel string) string {
	return "__meta_kubernetes_pod_label_" + regexp.MustCompile(`[^a-zA-Z0-9_]`).ReplaceAllString(podLabel, "_")
}

// Monitoring objects are on by default exactly when the cluster serves their kind; true
// and false override that; the dashboard needs no CRD and is always there by default.
func TestGatewayMonitoringAuto(t *testing.T) {
	kinds := []string{"ServiceMonitor", "PodMonitor", "PrometheusRule"}
	count := func(r rendered) map[string]int {
		out := map[string]int{}
		for _, k := range kinds {
			out[k] = r.count(k)
		}
		return out
	}
	none := map[string]int{"ServiceMonitor": 0, "PodMonitor": 0, "PrometheusRule": 0}
	all := map[string]int{"ServiceMonitor": 1, "PodMonitor": 1, "PrometheusRule": 1}

	if got := count(mustRender(t, requiredValues())); !maps.Equal(got, none) {
		t.Errorf("no monitoring API: rendered %v, want none", got)
	}
	if got := count(mustRenderMonitored(t, requiredValues())); !maps.Equal(got, all) {
		t.Errorf("monitoring API served: rendered %v, want one of each", got)
	}
	off := with(with(with(requiredValues(), "gatewayMonitoring.podMonitor.enabled", false),
		"gatewayMonitoring.prometheusRule.enabled", false), "metrics.serviceMonitor.enabled", false)
	if got := count(mustRenderMonitored(t, off)); !maps.Equal(got, none) {
		t.Errorf("all switched off: rendered %v, want none", got)
	}
	on := with(with(with(requiredValues(), "gatewayMonitoring.podMonitor.enabled", true),
		"gatewayMonitoring.prometheusRule.enabled", true), "metrics.serviceMonitor.enabled", true)
	if got := count(mustRender(t, on)); !maps.Equal(got, all) {
		t.Errorf("forced on without the API: rendered %v, want one of each", got)
	}
	// The check is per kind: a cluster serving PodMonitor but not PrometheusRule gets only
	// what it can take.
	partial := mustRenderWith(t, requiredValues(), renderOpts{apiVersions: []string{"monitoring.coreos.com/v1", "monitoring.coreos.com/v1/PodMonitor", "monitoring.coreos.com/v1/ServiceMonitor"}})
	if got := count(partial); !maps.Equal(got, map[string]int{"ServiceMonitor": 1, "PodMonitor": 1, "PrometheusRule": 0}) {
		t.Errorf("PrometheusRule not served: rendered %v", got)
	}
	for _, r := range []rendered{mustRender(t, requiredValues()), mustRenderMonitored(t, requiredValues())} {
		cm := r.find(t, "ConfigMap", releaseNS, fullname+"-dashboard")
		if cm.GetLabels()["grafana_dashboard"] != "1" {
			t.Errorf("dashboard ConfigMap labels %v lack grafana_dashboard", cm.GetLabels())
		}
	}
	if n := mustRender(t, with(requiredValues(), "gatewayMonitoring.dashboard.enabled", false)).count("ConfigMap"); n != 0 {
		t.Errorf("dashboard.enabled=false still rendered %d ConfigMaps", n)
	}
	// "yes" is neither a boolean nor auto.
	if _, _, err := renderChart(t, with(requiredValues(), "gatewayMonitoring.podMonitor.enabled", "yes"), renderOpts{}); err == nil || !strings.Contains(err.Error(), "podMonitor") {
		t.Errorf("enabled: yes accepted or not named: %v", err)
	}
}

func TestGatewayPodMonitor(t *testing.T) {
	r := mustRenderMonitored(t, monitoringValues())
	pm := r.find(t, "PodMonitor", releaseNS, fullname+"-gateways")
	if pm.GetAPIVersion() != "monitoring.coreos.com/v1" {
		t.Errorf("PodMonitor apiVersion %q", pm.GetAPIVersion())
	}
	// The Prometheus Operator's Go types stand in for its CRD schema: a misspelt or
	// misplaced field fails the strict conversion.
	typed := convert[monitoringv1.PodMonitor](t, pm)
	if len(typed.Spec.PodMetricsEndpoints) != 1 || len(typed.Spec.PodMetricsEndpoints[0].RelabelConfigs) != 2 {
		t.Errorf("typed PodMonitor endpoints %+v", typed.Spec.PodMetricsEndpoints)
	}

	if anyNS, _, _ := unstructured.NestedBool(pm.Object, "spec", "namespaceSelector", "any"); !anyNS {
		t.Error("the PodMonitor must look in every namespace: gateways live in their tenants' namespaces")
	}
	var sel metav1.LabelSelector
	selMap, found, err := unstructured.NestedMap(pm.Object, "spec", "selector")
	if err != nil || !found {
		t.Fatalf("PodMonitor has no selector: %v", err)
	}
	if err := runtimeConvert(selMap, &sel); err != nil {
		t.Fatalf("PodMonitor selector: %v", err)
	}
	selector, err := metav1.LabelSelectorAsSelector(&sel)
	if err != nil || selector.Empty() {
		t.Fatalf("PodMonitor selector %+v: %v (an empty selector would scrape every pod)", sel, err)
	}

	pods := gatewayPods(t)
	for _, pod := range pods {
		if !selector.Matches(k8slabels.Set(pod.Labels)) {
			t.Errorf("the PodMonitor selector %s misses the gateway pod labelled %v", selector, pod.Labels)
		}
	}
	op, _ := r.operator(t)
	if selector.Matches(k8slabels.Set(op.Spec.Template.Labels)) {
		t.Errorf("the PodMonitor selector %s also matches the operator pod %v", selector, op.Spec.Template.Labels)
	}
	// A gateway-specific key in the selector would bind the PodMonitor to one gateway.
	for _, k := range []string{render.LabelInstance, render.LabelGateway, render.LabelKind} {
		if _, ok := sel.MatchLabels[k]; ok {
			t.Errorf("the selector uses the per-gateway label %s", k)
		}
	}

	eps, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	if len(eps) != 1 {
		t.Fatalf("podMetricsEndpoints %v, want one", eps)
	}
	ep := eps[0].(map[string]any)
	if ep["port"] != render.MetricsPortName || ep["path"] != "/metrics" || ep["scheme"] != "http" || ep["interval"] != "30s" {
		t.Errorf("endpoint %v, want port %q, http /metrics every 30s", ep, render.MetricsPortName)
	}
	// The named port exists on exactly one container of the gateway pod, the exporter.
	for _, pod := range pods {
		var holders []string
		for _, c := range pod.Spec.Containers {
			for _, p := range c.Ports {
				if p.Name == ep["port"] {
					holders = append(holders, c.Name)
					if p.ContainerPort != render.MetricsPort || p.Protocol != corev1.ProtocolTCP {
						t.Errorf("port %s is %d/%s, want %d/TCP", p.Name, p.ContainerPort, p.Protocol, render.MetricsPort)
					}
				}
			}
		}
		if !slices.Equal(holders, []string{render.ContainerExporter}) {
			t.Errorf("port %v is declared by containers %v, want only %s", ep["port"], holders, render.ContainerExporter)
		}
	}

	// The gateway's name and kind reach the series through pod-label relabelings.
	want := map[string]string{
		metaLabel(render.LabelGateway): "gateway",
		metaLabel(render.LabelKind):    "gateway_kind",
	}
	rels, _ := ep["relabelings"].([]any)
	got := map[string]string{}
	for _, rel := range rels {
		m := rel.(map[string]any)
		src, _ := m["sourceLabels"].([]any)
		if len(src) == 1 {
			got[src[0].(string)], _ = m["targetLabel"].(string)
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("relabelings map %v, want %v", got, want)
	}
	for _, pod := range pods {
		if pod.Labels[render.LabelGateway] == "" || pod.Labels[render.LabelKind] == "" {
			t.Errorf("the gateway pod lacks %s or %s: %v", render.LabelGateway, render.LabelKind, pod.Labels)
		}
	}

	custom := with(monitoringValues(), "gatewayMonitoring.podMonitor.interval", "1m")
	custom = with(custom, "gatewayMonitoring.podMonitor.scrapeTimeout", "10s")
	custom = with(custom, "gatewayMonitoring.podMonitor.labels", map[string]any{"release": "kube-prometheus"})
	pm = mustRenderMonitored(t, custom).find(t, "PodMonitor", releaseNS, fullname+"-gateways")
	ep = mustNestedSlice(t, pm, "spec", "podMetricsEndpoints")[0].(map[string]any)
	if ep["interval"] != "1m" || ep["scrapeTimeout"] != "10s" || pm.GetLabels()["release"] != "kube-prometheus" {
		t.Errorf("interval %v, scrapeTimeout %v, labels %v", ep["interval"], ep["scrapeTimeout"], pm.GetLabels())
	}
}

type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

func gatewayAlerts(t *testing.T, r rendered) map[string]alertRule {
	t.Helper()
	pr := r.find(t, "PrometheusRule", releaseNS, fullname+"-gateways")
	if pr.GetAPIVersion() != "monitoring.coreos.com/v1" {
		t.Errorf("PrometheusRule apiVersion %q", pr.GetAPIVersion())
	}
	convert[monitoringv1.PrometheusRule](t, pr)
	var spec struct {
		Groups []struct {
			Name  string      `json:"name"`
			Rules []alertRule `json:"rules"`
		} `json:"groups"`
	}
	if err := runtimeConvert(mustNestedMap(t, pr, "spec"), &spec); err != nil {
		t.Fatalf("PrometheusRule spec: %v", err)
	}
	out := map[string]alertRule{}
	for _, g := range spec.Groups {
		for _, rule := range g.Rules {
			if _, dup := out[rule.Alert]; dup || rule.Alert == "" {
				t.Errorf("alert %q is empty or defined twice", rule.Alert)
			}
			out[rule.Alert] = rule
		}
	}
	return out
}

// expectedAlert is what each alert must be built from.
type expectedAlert struct {
	metrics  []string // the series it selects, sorted
	values   string   // its values path below gatewayMonitoring.prometheusRule
	severity string   // default
	mentions []string // template references the description must contain
}

var expectedAlerts = map[string]expectedAlert{
	"BnerdVPNTunnelDown":            {[]string{"bnerd_ipsec_tunnel_up"}, "tunnelDown", "critical", []string{"$labels.namespace", "$labels.pod", "$labels.tunnel", "$labels.gateway"}},
	"BnerdVPNStatusAgentSilent":     {[]string{"bnerd_gateway_tunnel_reported_up", "bnerd_ipsec_tunnel_up", "up"}, "statusAgentSilent", "warning", []string{"$labels.namespace", "$labels.tunnel", "$labels.gateway", "$value"}},
	"BnerdVPNGatewayPodNotReady":    {[]string{"bnerd_gateway_pod_ready"}, "podNotReady", "critical", []string{"$labels.namespace", "$labels.gateway"}},
	"BnerdVPNGatewayScrapeAbsent":   {[]string{"bnerd_gateway_info", "up"}, "scrapeAbsent", "critical", []string{"$labels.namespace", "$labels.gateway"}},
	"BnerdVPNOperatorMetricsAbsent": {[]string{"up"}, "operatorAbsent", "critical", []string{"$labels.job"}},
	"BnerdVPNCharonUnreachable":     {[]string{"bnerd_ipsec_vici_up"}, "charonUnreachable", "critical", []string{"$labels.namespace", "$labels.pod", "$labels.gateway"}},
	"BnerdVPNNATApplyErrors":        {[]string{"bnerd_gateway_nat_apply_errors_total"}, "natApplyErrors", "warning", []string{"$labels.namespace", "$labels.pod", "$labels.gateway", "$value"}},
	"BnerdVPNWireGuardPeerDown": {[]string{"bnerd_wireguard_peer_latest_handshake_age_seconds", "bnerd_wireguard_peer_up"}, "wireguardPeerDown", "critical",
		[]string{"$labels.namespace", "$labels.pod", "$labels.tunnel", "$labels.gateway"}},
	"BnerdVPNWireGuardHandshakeStale": {[]string{"bnerd_wireguard_peer_latest_handshake_age_seconds"}, "wireguardHandshakeStale", "critical",
		[]string{"$labels.namespace", "$labels.pod", "$labels.tunnel", "$labels.gateway", "$value"}},
	"BnerdVPNWireGuardInterfaceDown": {[]string{"bnerd_wireguard_up"}, "wireguardInterfaceDown", "critical", []string{"$labels.namespace", "$labels.pod", "$labels.gateway"}},
}

// selectors returns the vector selectors of a parsed expression.
func selectors(expr parser.Expr) []*parser.VectorSelector {
	var out []*parser.VectorSelector
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs)
		}
		return nil
	})
	return out
}

// jobOf returns the job a selector is limited to, or "" when it is not limited to one.
func jobOf(vs *parser.VectorSelector) string {
	for _, m := range vs.LabelMatchers {
		if m.Name == "job" && m.Type == labels.MatchEqual {
			return m.Value
		}
	}
	return ""
}

func TestGatewayAlertRules(t *testing.T) {
	alerts := gatewayAlerts(t, mustRenderMonitored(t, monitoringValues()))
	if !slices.Equal(slices.Sorted(maps.Keys(alerts)), slices.Sorted(maps.Keys(expectedAlerts))) {
		t.Fatalf("alerts %v, want %v", slices.Sorted(maps.Keys(alerts)), slices.Sorted(maps.Keys(expectedAlerts)))
	}
	fromExporter := exporterMetricNames(t)
	fromOperator := operatorMetricNames(t)
	for name, rule := range alerts {
		want := expectedAlerts[name]
		t.Run(name, func(t *testing.T) {
			expr, err := promQL.ParseExpr(rule.Expr)
			if err != nil {
				t.Fatalf("PromQL %q does not parse: %v", rule.Expr, err)
			}
			if expr.Type() != parser.ValueTypeVector {
				t.Errorf("%q evaluates to a %s; an alert needs an instant vector", rule.Expr, expr.Type())
			}
			var names []string
			for _, vs := range selectors(expr) {
				if !slices.Contains(names, vs.Name) {
					names = append(names, vs.Name)
				}
				// Each series comes from one scrape, and the selector says which: the
				// exporter's from the PodMonitor's job, the operator's from the
				// ServiceMonitor's; `up` from either.
				job := jobOf(vs)
				switch {
				case fromExporter[vs.Name]:
					if job != gatewayJob {
						t.Errorf("%s is not limited to the gateway job %q in %q", vs.Name, gatewayJob, rule.Expr)
					}
				case fromOperator[vs.Name]:
					if job != operatorJob {
						t.Errorf("%s is not limited to the operator job %q in %q", vs.Name, operatorJob, rule.Expr)
					}
				case vs.Name == "up":
					if job != gatewayJob && job != operatorJob {
						t.Errorf("up is limited to neither job in %q", rule.Expr)
					}
				default:
					t.Errorf("%q selects %q, which neither the exporter (%v) nor the operator (%v) defines",
						rule.Expr, vs.Name, slices.Sorted(maps.Keys(fromExporter)), slices.Sorted(maps.Keys(fromOperator)))
				}
			}
			slices.Sort(names)
			if !slices.Equal(names, want.metrics) {
				t.Errorf("%q selects %v, want %v", rule.Expr, names, want.metrics)
			}

			if _, err := model.ParseDuration(rule.For); err != nil {
				t.Errorf("for %q: %v", rule.For, err)
			}
			if rule.Labels["severity"] != want.severity {
				t.Errorf("severity %q, want %q", rule.Labels["severity"], want.severity)
			}
			desc := rule.Annotations["description"]
			for _, m := range want.mentions {
				if !strings.Contains(desc, m) {
					t.Errorf("description does not name %s: %q", m, desc)
				}
			}
			checkAnnotationTemplates(t, rule)
		})
	}
	wantFor := map[string]string{"BnerdVPNTunnelDown": "5m", "BnerdVPNStatusAgentSilent": "10m", "BnerdVPNGatewayPodNotReady": "5m",
		"BnerdVPNGatewayScrapeAbsent": "5m", "BnerdVPNOperatorMetricsAbsent": "5m", "BnerdVPNCharonUnreachable": "5m", "BnerdVPNNATApplyErrors": "0s",
		"BnerdVPNWireGuardPeerDown": "5m", "BnerdVPNWireGuardHandshakeStale": "5m", "BnerdVPNWireGuardInterfaceDown": "5m"}
	for name, f := range wantFor {
		if alerts[name].For != f {
			t.Errorf("%s: for %q, want the default %s", name, alerts[name].For, f)
		}
	}
	if d := alerts["BnerdVPNGatewayScrapeAbsent"].Annotations["description"]; !strings.Contains(d, "tunnel metric alone cannot show") {
		t.Errorf("the scrape-absent description must say why it exists: %q", d)
	}
	if t.Failed() {
		return // the shape checks below assume expressions that parse
	}
	tunnel, _ := promQL.ParseExpr(alerts["BnerdVPNTunnelDown"].Expr)
	if b, ok := tunnel.(*parser.BinaryExpr); !ok || b.Op != parser.EQLC || b.ReturnBool || b.RHS.String() != "0" {
		t.Errorf("tunnel alert %q is not a filter `== 0`", alerts["BnerdVPNTunnelDown"].Expr)
	}
	// The tunnel alert keeps the series' identity (no aggregation drops namespace/pod/tunnel).
	parser.Inspect(tunnel, func(n parser.Node, _ []parser.Node) error {
		if _, ok := n.(*parser.AggregateExpr); ok {
			t.Errorf("%q aggregates and loses the labels the description names", alerts["BnerdVPNTunnelDown"].Expr)
		}
		return nil
	})
	// The handshake alert's threshold is WireGuard's REJECT_AFTER_TIME, 180 s, the same bound
	// by which the exporter reads a peer as up (HandshakeFresh in its wireguard.go).
	stale, _ := promQL.ParseExpr(alerts["BnerdVPNWireGuardHandshakeStale"].Expr)
	if b, ok := stale.(*parser.BinaryExpr); !ok || b.Op != parser.GTR || b.ReturnBool || b.RHS.String() != "180" {
		t.Errorf("handshake alert %q is not a filter `> 180`", alerts["BnerdVPNWireGuardHandshakeStale"].Expr)
	}
	fresh := ""
	ast.Inspect(parseGo(t, wireguardGo), func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok && len(vs.Names) == 1 && vs.Names[0].Name == "HandshakeFresh" && len(vs.Values) == 1 {
			fresh = types.ExprString(vs.Values[0])
		}
		return true
	})
	if fresh != "3 * time.Minute" {
		t.Errorf("the exporter's HandshakeFresh is %q, the handshake alert assumes 3 * time.Minute", fresh)
	}
	nat, _ := promQL.ParseExpr(alerts["BnerdVPNNATApplyErrors"].Expr)
	var rate *parser.Call
	parser.Inspect(nat, func(n parser.Node, _ []parser.Node) error {
		if c, ok := n.(*parser.Call); ok {
			rate = c
		}
		return nil
	})
	// A counter alert needs a function that survives the counter's resets (a pod restart).
	if rate == nil || rate.Func.Name != "increase" {
		t.Errorf("NAT alert %q does not use increase()", alerts["BnerdVPNNATApplyErrors"].Expr)
	} else if ms, ok := rate.Args[0].(*parser.MatrixSelector); !ok || ms.Range != 15*time.Minute {
		t.Errorf("NAT alert %q: want a range of the default 15m", alerts["BnerdVPNNATApplyErrors"].Expr)
	}
}

// checkAnnotationTemplates executes each annotation the way Prometheus does (its template
// is Go text/template with $labels and $value defined first) against a sample alert, so a
// Helm escaping mistake or an undefined variable shows.
func checkAnnotationTemplates(t *testing.T, rule alertRule) {
	t.Helper()
	const defs = "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$value := .Value}}"
	data := struct {
		Labels, ExternalLabels map[string]string
		Value                  float64
	}{
		Labels: map[string]string{"namespace": "tenant-a", "pod": "office-gateway-7f9c", "tunnel": "hq", "gateway": "office", "gateway_kind": "ipsecgateway", "job": operatorJob},
		Value:  3,
	}
	for key, text := range rule.Annotations {
		tmpl, err := template.New(key).Option("missingkey=zero").Parse(defs + text)
		if err != nil {
			t.Errorf("annotation %s is no valid alert template: %v", key, err)
			continue
		}
		var b strings.Builder
		if err := tmpl.Execute(&b, data); err != nil {
			t.Errorf("annotation %s: %v", key, err)
			continue
		}
		out := b.String()
		if strings.Contains(out, "{{") || strings.Contains(out, "<no value>") {
			t.Errorf("annotation %s expands to %q", key, out)
		}
		if key == "description" && strings.Contains(text, "$labels.pod") && !strings.Contains(out, "tenant-a/office-gateway-7f9c") {
			t.Errorf("description does not name the pod as namespace/pod: %q", out)
		}
	}
}

func TestGatewayAlertValues(t *testing.T) {
	vals := monitoringValues()
	vals = with(vals, "gatewayMonitoring.prometheusRule.tunnelDown", map[string]any{"for": "10m", "severity": "page"})
	vals = with(vals, "gatewayMonitoring.prometheusRule.natApplyErrors.window", "1h")
	vals = with(vals, "gatewayMonitoring.prometheusRule.scrapeAbsent.severity", "info")
	vals = with(vals, "gatewayMonitoring.prometheusRule.statusAgentSilent.for", "20m")
	vals = with(vals, "gatewayMonitoring.prometheusRule.labels", map[string]any{"role": "alert-rules"})
	r := mustRenderMonitored(t, vals)
	alerts := gatewayAlerts(t, r)
	tunnel := alerts["BnerdVPNTunnelDown"]
	if tunnel.For != "10m" || tunnel.Labels["severity"] != "page" || !strings.Contains(tunnel.Annotations["description"], "for 10m") {
		t.Errorf("tunnelDown values not applied: %+v", tunnel)
	}
	if s := alerts["BnerdVPNGatewayScrapeAbsent"]; s.Labels["severity"] != "info" || s.For != "5m" {
		t.Errorf("scrapeAbsent.severity override: %+v (for must keep its default)", s)
	}
	if s := alerts["BnerdVPNStatusAgentSilent"]; s.For != "20m" || !strings.Contains(s.Annotations["description"], "20m") {
		t.Errorf("statusAgentSilent.for override: %+v", s)
	}
	nat := alerts["BnerdVPNNATApplyErrors"]
	expr, err := promQL.ParseExpr(nat.Expr)
	if err != nil || !strings.Contains(expr.String(), "[1h]") || !strings.Contains(nat.Annotations["description"], "1h") {
		t.Errorf("natApplyErrors.window=1h gave %q (%v), description %q", nat.Expr, err, nat.Annotations["description"])
	}
	if r.find(t, "PrometheusRule", releaseNS, fullname+"-gateways").GetLabels()["role"] != "alert-rules" {
		t.Error("prometheusRule.labels not applied")
	}

	// Rules without the PodMonitor and ServiceMonitor need the jobs of the user's own scrapes.
	own := with(with(monitoringValues(), "gatewayMonitoring.podMonitor.enabled", false), "metrics.serviceMonitor.enabled", false)
	own = with(with(own, "gatewayMonitoring.prometheusRule.job", `gateways "x"`), "gatewayMonitoring.prometheusRule.operatorJob", "op")
	ro := mustRenderMonitored(t, own)
	if n := ro.count("PodMonitor") + ro.count("ServiceMonitor"); n != 0 {
		t.Errorf("podMonitor and serviceMonitor disabled rendered %d of them", n)
	}
	fromOperator := operatorMetricNames(t)
	for name, rule := range gatewayAlerts(t, ro) {
		expr, err := promQL.ParseExpr(rule.Expr)
		if err != nil {
			t.Errorf("%s: %q does not parse: %v", name, rule.Expr, err)
			continue
		}
		for _, vs := range selectors(expr) {
			want := `gateways "x"`
			if fromOperator[vs.Name] {
				want = "op"
			}
			if j := jobOf(vs); j != want && !(vs.Name == "up" && j == "op") {
				t.Errorf("%s: %s in %q selects job %q, want %q", name, vs.Name, rule.Expr, j, want)
			}
		}
	}
	noJob := with(monitoringValues(), "gatewayMonitoring.podMonitor.enabled", false)
	if _, _, err := renderChart(t, noJob, renderOpts{apiVersions: monitoringAPIs}); err == nil || !strings.Contains(err.Error(), "gatewayMonitoring.prometheusRule.job") {
		t.Errorf("rules without PodMonitor or job: want an error naming gatewayMonitoring.prometheusRule.job, got %v", err)
	}
}

func TestGatewayMonitoringSchema(t *testing.T) {
	cases := []struct {
		name string
		vals map[string]any
		want string
	}{
		{"Go-style duration", with(monitoringValues(), "gatewayMonitoring.prometheusRule.tunnelDown.for", "1.5m"), "tunnelDown"},
		{"empty severity", with(monitoringValues(), "gatewayMonitoring.prometheusRule.charonUnreachable.severity", ""), "charonUnreachable"},
		{"bad for of a new alert", with(monitoringValues(), "gatewayMonitoring.prometheusRule.podNotReady.for", "5 minutes"), "podNotReady"},
		{"dashboard label not a string", with(monitoringValues(), "gatewayMonitoring.dashboard.labels", map[string]any{"grafana_dashboard": 1}), "dashboard"},
		{"zero window", with(monitoringValues(), "gatewayMonitoring.prometheusRule.natApplyErrors.window", "0m"), "window"},
		{"misspelt key", with(monitoringValues(), "gatewayMonitoring.prometheusRule.tunelDown", map[string]any{"for": "5m", "severity": "x"}), "tunelDown"},
		{"label value not a string", with(monitoringValues(), "gatewayMonitoring.podMonitor.labels", map[string]any{"a": 1}), "labels"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := renderChart(t, tc.vals, renderOpts{})
			if err == nil || !strings.Contains(err.Error(), "schema") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("want a schema error naming %q, got %v", tc.want, err)
			}
		})
	}
}

func runtimeConvert(in map[string]any, out any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(in, out)
}

func mustNestedMap(t *testing.T, u *unstructured.Unstructured, path ...string) map[string]any {
	t.Helper()
	m, found, err := unstructured.NestedMap(u.Object, path...)
	if err != nil || !found {
		t.Fatalf("%s %s has no %v: %v", u.GetKind(), u.GetName(), path, err)
	}
	return m
}

func mustNestedSlice(t *testing.T, u *unstructured.Unstructured, path ...string) []any {
	t.Helper()
	s, found, err := unstructured.NestedSlice(u.Object, path...)
	if err != nil || !found || len(s) == 0 {
		t.Fatalf("%s %s has no %v: %v", u.GetKind(), u.GetName(), path, err)
	}
	return s
}

func TestGatewayMonitoringLint(t *testing.T) {
	lint := action.NewLint()
	lint.Namespace = releaseNS
	lint.KubeVersion = kubeVersion()
	lint.Strict = true
	on := with(with(with(monitoringValues(), "gatewayMonitoring.podMonitor.enabled", true),
		"gatewayMonitoring.prometheusRule.enabled", true), "metrics.serviceMonitor.enabled", true)
	res := lint.Run([]string{chartDir}, on)
	for _, m := range res.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("lint: %s", m)
		}
	}
	for _, err := range res.Errors {
		t.Errorf("lint error: %v", err)
	}
}
