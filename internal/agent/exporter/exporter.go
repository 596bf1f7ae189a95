// Package exporter publishes tunnel and NAT metrics for Prometheus. In the gateway pod
// tunnel metrics come from the listing the status agent publishes (IPsecState, written
// by Publisher, read through IPsecStateFile); without it (the namespace tiers) they are
// read from charon over VICI at scrape time. NAT metrics come from the state file the
// init-nat role writes.
package exporter

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"bnerd.net/vpn-operator/internal/agent/downcause"
	"bnerd.net/vpn-operator/internal/agent/statefile"
	"bnerd.net/vpn-operator/internal/agent/vici"
)

// Source lists the named tunnels' SAs (vici.ListSAsOn in production, whose listings are
// settled: one that caught an IKE rekey halfway is taken again, so tunnel_up never reads
// 0 while the tunnel carries).
type Source func(ctx context.Context, names []string) (map[string][]vici.IKESA, error)

// Collector is a prometheus.Collector over charon and the NAT state file.
type Collector struct {
	Tunnels      func() []string
	SAs          Source
	NATStateFile string
	Rekeys       func() map[string]uint64
	// Causes supplies each tunnel's last failure as charon saw it (package cause), the
	// reason label of bnerd_ipsec_tunnel_reason. Optional.
	Causes interface {
		Cause(string) (downcause.Cause, bool)
	}

	mu sync.Mutex
	// Byte and packet counters must be monotonic although each child SA starts from
	// zero; deltas are accumulated per child SA, keyed by unique ID and inbound SPI
	// (a restarted charon numbers its SAs from 1 again). Only the children of the last
	// listing are remembered, so rekeys do not grow the map.
	last   map[string][4]uint64
	totals map[string]*[4]uint64
}

var (
	descUp          = prometheus.NewDesc("bnerd_ipsec_tunnel_up", "1 when the tunnel has an established IKE SA and an installed child SA (an SA being rekeyed beside its successor counts).", []string{"tunnel"}, nil)
	descReason      = prometheus.NewDesc("bnerd_ipsec_tunnel_reason", "1 for the cause of the tunnel's last failure as charon saw it (AuthenticationFailed, NoCommonIKEProposal, NoCommonESPProposal, TrafficSelectorsRefused, PeerNotResponding, PFSMismatchAtRekey); absent while none is current.", []string{"tunnel", "reason"}, nil)
	descIKESAs      = prometheus.NewDesc("bnerd_ipsec_ike_sas", "IKE SAs of the tunnel.", []string{"tunnel"}, nil)
	descChildSAs    = prometheus.NewDesc("bnerd_ipsec_child_sas", "Installed child SAs of the tunnel.", []string{"tunnel"}, nil)
	descBytes       = prometheus.NewDesc("bnerd_ipsec_bytes_total", "ESP payload bytes of the tunnel's child SAs.", []string{"tunnel", "direction"}, nil)
	descPackets     = prometheus.NewDesc("bnerd_ipsec_packets_total", "ESP packets of the tunnel's child SAs.", []string{"tunnel", "direction"}, nil)
	descEstablished = prometheus.NewDesc("bnerd_ipsec_established_seconds", "Seconds since the tunnel's newest IKE SA was established.", []string{"tunnel"}, nil)
	descRekeys      = prometheus.NewDesc("bnerd_ipsec_rekeys_total", "IKE and child SA rekeys seen since the exporter started.", []string{"tunnel"}, nil)
	descScrapeErr   = prometheus.NewDesc("bnerd_ipsec_vici_up", "1 when charon answered the listing behind this scrape (in the gateway pod the status agent's, at most 10 s old; else the exporter's own over VICI).", nil, nil)
	descNATErrors   = prometheus.NewDesc("bnerd_gateway_nat_apply_errors_total", "Failed NAT ruleset applies.", nil, nil)
	descNATApplies  = prometheus.NewDesc("bnerd_gateway_nat_applies_total", "NAT ruleset applies.", nil, nil)
	descNATDur      = prometheus.NewDesc("bnerd_gateway_nat_apply_duration_seconds", "Duration of the last NAT ruleset apply.", nil, nil)
	descNATDrift    = prometheus.NewDesc("bnerd_gateway_nat_drift_repairs_total", "NAT table repairs after drift.", nil, nil)
	descGuardDrops  = prometheus.NewDesc("bnerd_gateway_guard_dropped_packets_total", "Packets to a peer subnet the fail-closed guard dropped because they would have left unencrypted.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUp, descReason, descIKESAs, descChildSAs, descBytes, descPackets, descEstablished, descRekeys, descScrapeErr, descNATErrors, descNATApplies, descNATDur, descNATDrift, descGuardDrops} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	names := c.Tunnels()
	sas, err := c.SAs(ctx, names)
	viciUp := 1.0
	// A charon that is not running carries nothing: its tunnels are down. A charon that
	// was reached but answered too late says nothing about them: the tunnel gauges are
	// left out of this scrape rather than reported as 0.
	gauges := true
	if err != nil {
		viciUp = 0
		sas = nil
		gauges = errors.Is(err, vici.ErrCharonNotRunning)
	}
	ch <- prometheus.MustNewConstMetric(descScrapeErr, prometheus.GaugeValue, viciUp)
	var rekeys map[string]uint64
	if c.Rekeys != nil {
		rekeys = c.Rekeys()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.totals == nil {
		c.totals = map[string]*[4]uint64{}
	}
	seen := map[string][4]uint64{}
	for _, name := range names {
		tot := c.totals[name]
		if tot == nil {
			tot = &[4]uint64{}
			c.totals[name] = tot
		}
		sum := vici.Summarize(sas[name], name)
		for _, sa := range sas[name] {
			for _, cs := range sa.Children {
				if cs.Name != name {
					continue
				}
				cur := [4]uint64{cs.BytesIn, cs.BytesOut, cs.PacketsIn, cs.PacketsOut}
				key := cs.UniqueID + "/" + cs.SPIIn
				prev := c.last[key]
				for i := range cur {
					if cur[i] >= prev[i] {
						tot[i] += cur[i] - prev[i]
					}
				}
				seen[key] = cur
			}
		}
		if gauges {
			up := 0.0
			if sum.Up {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up, name)
			ch <- prometheus.MustNewConstMetric(descIKESAs, prometheus.GaugeValue, float64(sum.IKESAs), name)
			ch <- prometheus.MustNewConstMetric(descChildSAs, prometheus.GaugeValue, float64(sum.ChildSAs), name)
		}
		if c.Causes != nil {
			if cs, ok := c.Causes.Cause(name); ok {
				ch <- prometheus.MustNewConstMetric(descReason, prometheus.GaugeValue, 1, name, cs.Reason)
			}
		}
		ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(tot[0]), name, "in")
		ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(tot[1]), name, "out")
		ch <- prometheus.MustNewConstMetric(descPackets, prometheus.CounterValue, float64(tot[2]), name, "in")
		ch <- prometheus.MustNewConstMetric(descPackets, prometheus.CounterValue, float64(tot[3]), name, "out")
		if sum.Newest != nil {
			ch <- prometheus.MustNewConstMetric(descEstablished, prometheus.GaugeValue, float64(sum.Newest.EstablishedSeconds), name)
		}
		ch <- prometheus.MustNewConstMetric(descRekeys, prometheus.CounterValue, float64(rekeys[name]), name)
	}
	// An unanswered listing says nothing about the children: keep the baselines, or a
	// charon that was only slow would have its children counted twice.
	if viciUp == 1 {
		c.last = seen
	}
	collectNAT(ch, c.NATStateFile)
}

// collectNAT publishes init-nat's apply statistics from its state file, if any.
func collectNAT(ch chan<- prometheus.Metric, file string) {
	if file == "" {
		return
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return
	}
	var st statefile.NATState
	if json.Unmarshal(b, &st) == nil {
		ch <- prometheus.MustNewConstMetric(descNATErrors, prometheus.CounterValue, float64(st.ApplyErrors))
		ch <- prometheus.MustNewConstMetric(descNATApplies, prometheus.CounterValue, float64(st.Applies))
		ch <- prometheus.MustNewConstMetric(descNATDur, prometheus.GaugeValue, st.LastApplySeconds)
		ch <- prometheus.MustNewConstMetric(descNATDrift, prometheus.CounterValue, float64(st.DriftRepairs))
		ch <- prometheus.MustNewConstMetric(descGuardDrops, prometheus.CounterValue, float64(st.GuardDroppedPackets))
	}
}
