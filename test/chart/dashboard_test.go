package chart

import (
	"encoding/json"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql"
)

var dashboardFile = fromRoot("charts", "bnerd-vpn-operator", "dashboards", "bnerd-vpn-gateways.json")

type grafanaPanel struct {
	Type    string         `json:"type"`
	Title   string         `json:"title"`
	Repeat  string         `json:"repeat"`
	Panels  []grafanaPanel `json:"panels"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
}

type grafanaDashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []grafanaPanel `json:"panels"`
}

func loadDashboard(t *testing.T, data []byte) grafanaDashboard {
	t.Helper()
	var d grafanaDashboard
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("the dashboard is not valid JSON: %v", err)
	}
	return d
}

// grafanaVars stands in for Grafana's variable interpolation, with the IPsec gateway
// tenant-a/office selected.
var grafanaVars = varsFor("tenant-a", "office")

// varsFor interpolates the dashboard's variables with one gateway selected.
func varsFor(namespace, gateway string) *strings.Replacer {
	return strings.NewReplacer("$__rate_interval", "2m", "$namespace", namespace, "$gateway", gateway, "${datasource}", "prom")
}

func TestDashboard(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	// The ConfigMap carries the file byte for byte.
	cm := mustRender(t, requiredValues()).find(t, "ConfigMap", releaseNS, fullname+"-dashboard")
	data, _, _ := unstructuredString(cm.Object, "data", "bnerd-vpn-gateways.json")
	if strings.TrimSpace(data) != strings.TrimSpace(string(raw)) {
		t.Fatal("the dashboard ConfigMap does not carry dashboards/bnerd-vpn-gateways.json unchanged")
	}
	d := loadDashboard(t, raw)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q", d.UID, d.Title)
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	for _, v := range []string{"datasource", "namespace", "gateway"} {
		if !vars[v] {
			t.Errorf("no template variable %q", v)
		}
	}

	// Per gateway: a row repeated for each selected gateway holds the panels.
	var rows int
	var panels []grafanaPanel
	for _, p := range d.Panels {
		if p.Type == "row" {
			rows++
			if p.Repeat != "gateway" {
				t.Errorf("row %q does not repeat per gateway", p.Title)
			}
			panels = append(panels, p.Panels...)
			continue
		}
		panels = append(panels, p)
	}
	if rows != 1 {
		t.Errorf("%d rows, want one repeated per gateway", rows)
	}

	known := exporterMetricNames(t)
	maps.Copy(known, operatorMetricNames(t))
	used := map[string]bool{}
	var exprs []string
	for _, p := range panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			q := grafanaVars.Replace(tg.Expr)
			expr, err := promQL.ParseExpr(q)
			if err != nil {
				t.Errorf("panel %q: %q does not parse: %v", p.Title, tg.Expr, err)
				continue
			}
			exprs = append(exprs, tg.Expr)
			for _, vs := range selectors(expr) {
				used[vs.Name] = true
				if !known[vs.Name] {
					t.Errorf("panel %q selects %q, which neither the exporter nor the operator exports", p.Title, vs.Name)
				}
				var ns, gw bool
				for _, lm := range vs.LabelMatchers {
					ns = ns || lm.Name == "namespace"
					gw = gw || lm.Name == "gateway"
				}
				if !ns || !gw {
					t.Errorf("panel %q: %s is not filtered by the namespace and gateway variables", p.Title, vs.Name)
				}
			}
		}
	}
	// What the dashboard must show per gateway: tunnels up, bytes, IKE SA age, NAT errors,
	// exposures; for a WireGuard gateway its interface, peers up, handshake ages and bytes.
	for _, m := range []string{"bnerd_ipsec_tunnel_up", "bnerd_ipsec_bytes_total", "bnerd_ipsec_established_seconds",
		"bnerd_gateway_nat_apply_errors_total", "bnerd_gateway_exposures", "bnerd_gateway_pod_ready", "bnerd_gateway_tunnel_reported_up",
		"bnerd_wireguard_up", "bnerd_wireguard_peer_up", "bnerd_wireguard_peer_latest_handshake_age_seconds", "bnerd_wireguard_peer_bytes_total"} {
		if !used[m] {
			t.Errorf("no panel shows %s", m)
		}
	}

	// Every query returns data for a gateway whose series look like a real scrape's: a
	// query of WireGuard series for the WireGuard gateway tenant-c/branch, any other for the
	// IPsec gateway tenant-a/office.
	series := append(healthy(office, officePod), healthy(dc, dcPod)...)
	series = append(series, healthyWireGuard()...)
	series = append(series,
		pod("bnerd_wireguard_peer_bytes_total", branchPod, `tunnel="site", direction="in"`)+" 0+2000x80",
		pod("bnerd_wireguard_peer_bytes_total", branchPod, `tunnel="site", direction="out"`)+" 0+800x80",
	)
	series = append(series,
		pod("bnerd_ipsec_bytes_total", officePod, `tunnel="hq", direction="in"`)+" 0+1000x80",
		pod("bnerd_ipsec_bytes_total", officePod, `tunnel="hq", direction="out"`)+" 0+500x80",
		pod("bnerd_ipsec_established_seconds", officePod, `tunnel="hq"`)+" 0+30x80",
		pod("bnerd_ipsec_rekeys_total", officePod, `tunnel="hq"`)+" 0x40 1x40",
		pod("bnerd_gateway_nat_drift_repairs_total", officePod, "")+" 0x80",
		op("bnerd_gateway_exposures", office, `direction="forward"`)+" 2x80",
		op("bnerd_gateway_exposures", office, `direction="reverse"`)+" 1x80",
	)
	st := newMemStore(t, 30*time.Second, series)
	engine := newEngine(t)
	at := time.Unix(0, 0).UTC().Add(30 * time.Minute)
	for _, raw := range slices.Compact(slices.Sorted(slices.Values(exprs))) {
		ns, gw := "tenant-a", "office"
		if strings.Contains(raw, "bnerd_wireguard_") {
			ns, gw = "tenant-c", "branch"
		}
		q := varsFor(ns, gw).Replace(raw)
		v := instant(t, engine, st, q, at)
		if len(v) == 0 {
			t.Errorf("%q returns no data for gateway %s/%s", q, ns, gw)
		} else if slices.ContainsFunc(v, func(s promql.Sample) bool { g := s.Metric.Get("gateway"); return g != "" && g != gw }) {
			t.Errorf("%q returns another gateway's series: %v", q, v)
		}
	}
}

func unstructuredString(obj map[string]any, path ...string) (string, bool, error) {
	cur := any(obj)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		cur = m[p]
	}
	s, ok := cur.(string)
	return s, ok, nil
}
