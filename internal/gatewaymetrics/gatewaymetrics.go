// Package gatewaymetrics exports, from the operator, what it knows about every gateway
// that should exist: one info series per gateway, whether its pod is ready (from the
// gateway's Deployment), the tunnel states the gateway's status agent last wrote into
// status, and the number of exposures. These series do not depend on the gateway pod
// being scraped, so alerts can join them against the pod's own scrape: a gateway whose pod
// has no IP (pending, or on a node that is gone) leaves no scrape target and no `up`
// series, but it still has a bnerd_gateway_info series here. A tunnel state is exported
// only while the operator reads the status agent's report as current (TunnelsUp True or
// False): a stale report is never shown as the present.
//
// Series carry the labels namespace (the gateway's), gateway and gateway_kind (the
// lowercase kind, as on the gateway pod's ipsec.bnerd.net/gateway-kind label). Prometheus
// must keep the series' own namespace label (honor_labels), which the chart's
// ServiceMonitor sets.
package gatewaymetrics

import (
	"context"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/render"
)

var gatewayLabels = []string{"namespace", "gateway", "gateway_kind"}

var (
	descInfo = prometheus.NewDesc("bnerd_gateway_info",
		"1 for every gateway that exists and is not being deleted: its pod should be running and scraped.",
		append(gatewayLabels, "node", "floating_ip"), nil)
	descReady = prometheus.NewDesc("bnerd_gateway_ready",
		"1 when the gateway's Ready condition is True for its current generation: every phase converged, its pod ready, every tunnel up.",
		gatewayLabels, nil)
	descPodReady = prometheus.NewDesc("bnerd_gateway_pod_ready",
		"1 when the gateway's Deployment reports a ready pod; 0 while the pod is missing, pending, crash-looping or unready.",
		gatewayLabels, nil)
	descTunnelReported = prometheus.NewDesc("bnerd_gateway_tunnel_reported_up",
		"The tunnel's state as the gateway's status agent last wrote it into status.tunnels: 1 Up, 0 otherwise; absent while that report is not current (condition TunnelsUp Unknown).",
		append(gatewayLabels, "tunnel"), nil)
	descExposures = prometheus.NewDesc("bnerd_gateway_exposures",
		"Exposures (direction forward) and reverse exposures (direction reverse) with an allocated virtual IP.",
		append(gatewayLabels, "direction"), nil)
	descScrapeErrors = prometheus.NewDesc("bnerd_gateway_metrics_errors",
		"1 when listing gateways or their Deployments for these metrics failed during this scrape.",
		nil, nil)
)

// Collector lists gateways and their Deployments at scrape time. Reader should be the
// manager's cached client, so a scrape costs no API request.
type Collector struct {
	Reader client.Reader
	Log    logr.Logger
	// Timeout bounds one scrape's reads (default 10s).
	Timeout time.Duration
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInfo, descReady, descPodReady, descTunnelReported, descExposures, descScrapeErrors} {
		ch <- d
	}
}

type gatewayView struct {
	kind   string
	meta   metav1.Object
	status *v1alpha1.GatewayStatus
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	failed := 0.0
	list, err := v1alpha1.ListGateways(ctx, c.Reader)
	if err != nil {
		// The kind that could be listed is still published.
		failed = 1
		c.Log.Error(err, "gateway metrics: listing gateways")
	}
	gws := make([]gatewayView, 0, len(list))
	for _, g := range list {
		gws = append(gws, gatewayView{kind: g.GatewayKind(), meta: g, status: g.GetGatewayStatus()})
	}

	for _, g := range gws {
		if g.meta.GetDeletionTimestamp() != nil {
			continue
		}
		ns, name := g.meta.GetNamespace(), g.meta.GetName()
		kind := strings.ToLower(g.kind)
		labels := []string{ns, name, kind}
		ch <- prometheus.MustNewConstMetric(descInfo, prometheus.GaugeValue, 1, append(labels, g.status.NodeName, g.status.FloatingIP)...)

		ready := 0.0
		if c := meta.FindStatusCondition(g.status.Conditions, v1alpha1.ConditionReady); c != nil &&
			c.Status == metav1.ConditionTrue && c.ObservedGeneration == g.meta.GetGeneration() {
			ready = 1
		}
		ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, ready, labels...)

		podReady, err := c.podReady(ctx, g)
		if err != nil {
			failed = 1
			c.Log.Error(err, "gateway metrics: reading the gateway Deployment", "namespace", ns, "gateway", name)
		} else {
			ch <- prometheus.MustNewConstMetric(descPodReady, prometheus.GaugeValue, podReady, labels...)
		}

		for _, t := range currentTunnels(g.status) {
			up := 0.0
			if t.State == "Up" {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(descTunnelReported, prometheus.GaugeValue, up, append(labels, t.Name)...)
		}
		ch <- prometheus.MustNewConstMetric(descExposures, prometheus.GaugeValue, float64(len(g.status.Exposures)), append(labels, "forward")...)
		ch <- prometheus.MustNewConstMetric(descExposures, prometheus.GaugeValue, float64(len(g.status.ReverseExposures)), append(labels, "reverse")...)
	}
	ch <- prometheus.MustNewConstMetric(descScrapeErrors, prometheus.GaugeValue, failed)
}

// currentTunnels is status.tunnels while the operator reads the report as current:
// TunnelsUp True or False. Unknown (no running agent, a report from an earlier pod, a
// heartbeat older than the stale-after time) or not evaluated yet: none.
func currentTunnels(st *v1alpha1.GatewayStatus) []v1alpha1.TunnelState {
	c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionTunnelsUp)
	if c == nil || c.Status == metav1.ConditionUnknown {
		return nil
	}
	return st.Tunnels
}

// podReady reads the gateway's Deployment: a ready replica of the current template. A
// missing Deployment is 0 (the gateway should have one).
func (c *Collector) podReady(ctx context.Context, g gatewayView) (float64, error) {
	var d appsv1.Deployment
	err := c.Reader.Get(ctx, client.ObjectKey{Namespace: g.meta.GetNamespace(), Name: render.DeploymentName(g.meta.GetName())}, &d)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	// Only a Deployment of this gateway counts (a same-named one of someone else does not).
	if !metav1.IsControlledBy(&d, g.meta) {
		return 0, nil
	}
	if d.Status.ObservedGeneration >= d.Generation && d.Status.ReadyReplicas >= 1 && d.Status.UpdatedReplicas >= 1 {
		return 1, nil
	}
	return 0, nil
}
