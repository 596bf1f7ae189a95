//go:build measure

package scale

import (
	"bytes"
	"context"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"

	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// apiServerWrites is what the kube-apiserver counted of the writes it served
// (apiserver_request_total, every verb but the reads), by "VERB resource[/subresource]":
// the kube-apiserver's CPU bounds the slow-cloud run, and its work is per write.
// Dry runs are counted apart ("VERB resource dry-run"): they cost admission, not storage.
func apiServerWrites(ctx context.Context, env *testenv.Env) (map[string]int, error) {
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return nil, err
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	fam := fams["apiserver_request_total"]
	if fam == nil {
		return out, nil
	}
	for _, m := range fam.GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		switch l["verb"] {
		case "GET", "LIST", "WATCH", "CONNECT", "":
			continue
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		if l["dry_run"] != "" {
			key += " dry-run"
		}
		out[key] += int(m.GetCounter().GetValue())
	}
	return out, nil
}

// apiServerWritesSince is after minus before, the entries that moved, and their total.
func apiServerWritesSince(before, after map[string]int) (map[string]int, int) {
	d := map[string]int{}
	total := 0
	for k, v := range after {
		if n := v - before[k]; n > 0 {
			d[k] = n
			total += n
		}
	}
	return d, total
}
