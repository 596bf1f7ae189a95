// Package quota watches the Neutron quotas of the operator's project, which every
// tenant's gateways share: each gateway takes a port, a security group with its rules
// and (unless it pins one) a floating IP there. The operator reads them at start and at
// every resync, logs a warning when the headroom is smaller than what the tenant
// policies allow, and exports the quotas and the headroom as metrics, so "ten gateways
// exhaust the default security-group quota for everyone" shows before it happens.
package quota

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/tenancy"
)

// PerGateway is what one gateway takes of each quota (a pinned floating IP is not
// allocated, so this counts the usual case); rules are at least its IKE pair.
var PerGateway = map[string]int{"port": 1, "security_group": 1, "floatingip": 1, "security_group_rule": 2}

var (
	descLimit = prometheus.NewDesc("bnerd_openstack_quota_limit",
		"The operator project's Neutron quota of the resource (-1: unlimited).", []string{"resource"}, nil)
	descUsed = prometheus.NewDesc("bnerd_openstack_quota_used",
		"What the operator project holds of the resource (used plus reserved).", []string{"resource"}, nil)
	descHeadroom = prometheus.NewDesc("bnerd_openstack_quota_headroom",
		"How many more of the resource the quota admits (-1: unlimited).", []string{"resource"}, nil)
	descGateways = prometheus.NewDesc("bnerd_openstack_quota_gateway_headroom",
		"How many more gateways the operator project's port, security-group, security-group-rule and floating-IP quotas admit together (-1: unlimited).", nil, nil)
	descAge = prometheus.NewDesc("bnerd_openstack_quota_read_timestamp_seconds",
		"When the quotas were last read successfully (Unix time); 0 before the first read.", nil, nil)
)

// Watcher reads the quotas and serves them as a Prometheus collector. Start it with a
// manager (it is a Runnable).
type Watcher struct {
	Networking openstack.Networking
	ProjectID  string
	// Reader lists the tenant policies and namespaces (the manager's API reader).
	Reader client.Reader
	// Interval between reads (the operator's resync interval).
	Interval time.Duration
	Log      logr.Logger

	mu     sync.Mutex
	quotas map[string]openstack.Quota
	readAt time.Time
}

// GatewayHeadroom is how many more gateways the quotas admit (-1: unlimited).
func GatewayHeadroom(q map[string]openstack.Quota) int {
	out := -1
	for res, per := range PerGateway {
		x, ok := q[res]
		if !ok || x.Headroom() < 0 {
			continue
		}
		n := x.Headroom() / per
		if out < 0 || n < out {
			out = n
		}
	}
	return out
}

// Start reads the quotas now and then every Interval until ctx ends. A failed read is
// logged and retried at the next interval; it never stops the operator.
func (w *Watcher) Start(ctx context.Context) error {
	interval := w.Interval
	if interval <= 0 {
		interval = 5 * time.Minute
	}
	first := true
	for {
		w.read(ctx, first)
		first = false
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// NeedLeaderElection: every replica exports the quotas it can read.
func (w *Watcher) NeedLeaderElection() bool { return false }

func (w *Watcher) read(ctx context.Context, start bool) {
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	q, err := w.Networking.QuotaDetails(rctx, w.ProjectID)
	if err != nil {
		w.Log.Info("WARNING: cannot read the operator project's Neutron quotas; their headroom is not known", "error", err.Error())
		return
	}
	w.mu.Lock()
	w.quotas, w.readAt = q, time.Now()
	w.mu.Unlock()
	head := GatewayHeadroom(q)
	allowed, known := w.allowedGateways(rctx)
	kv := []any{"gatewayHeadroom", head}
	for _, res := range sortedKeys(PerGateway) {
		kv = append(kv, res, q[res])
	}
	switch {
	case head >= 0 && known && allowed > head:
		w.Log.Info("WARNING: the operator project's Neutron quotas admit fewer new gateways than the tenant policies allow together; once they run out, every tenant's next gateway fails (raise the quotas of the operator's project, or lower the policies' limits)",
			append(kv, "allowedByPolicies", allowed)...)
	case start:
		w.Log.Info("Neutron quotas of the operator's project", kv...)
	}
}

// allowedGateways is how many more gateways the tenant policies allow together: each
// policy's gateway limit less what it holds, and the strict default for every
// namespace no policy selects that holds a gateway's worth of room (counted as one
// default allowance per such namespace: namespaces come and go). known is false when
// the policies cannot be read.
func (w *Watcher) allowedGateways(ctx context.Context) (int, bool) {
	if w.Reader == nil {
		return 0, false
	}
	var pols v1alpha1.VPNTenantPolicyList
	if err := w.Reader.List(ctx, &pols); err != nil {
		return 0, false
	}
	var nss corev1.NamespaceList
	if err := w.Reader.List(ctx, &nss); err != nil {
		return 0, false
	}
	total := 0
	for _, p := range pols.Items {
		total += max(0, int(p.Spec.Limits.Values().Gateways-p.Status.Usage.Gateways))
	}
	gws, err := v1alpha1.ListGateways(ctx, w.Reader)
	if err != nil {
		return total, true
	}
	holds := map[string]int{}
	for _, g := range gws {
		holds[g.GetNamespace()]++
	}
	for _, ns := range nss.Items {
		if len(tenancy.Selecting(pols.Items, ns.Labels)) == 0 && holds[ns.Name] > 0 {
			total += max(0, v1alpha1.DefaultTenantGateways-holds[ns.Name])
		}
	}
	return total, true
}

// Describe implements prometheus.Collector.
func (w *Watcher) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLimit, descUsed, descHeadroom, descGateways, descAge} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the last quotas read.
func (w *Watcher) Collect(ch chan<- prometheus.Metric) {
	w.mu.Lock()
	q, at := w.quotas, w.readAt
	w.mu.Unlock()
	ts := 0.0
	if !at.IsZero() {
		ts = float64(at.Unix())
	}
	ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, ts)
	if q == nil {
		return
	}
	for res, x := range q {
		ch <- prometheus.MustNewConstMetric(descLimit, prometheus.GaugeValue, float64(x.Limit), res)
		ch <- prometheus.MustNewConstMetric(descUsed, prometheus.GaugeValue, float64(x.Used+x.Reserved), res)
		ch <- prometheus.MustNewConstMetric(descHeadroom, prometheus.GaugeValue, float64(x.Headroom()), res)
	}
	ch <- prometheus.MustNewConstMetric(descGateways, prometheus.GaugeValue, float64(GatewayHeadroom(q)))
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
