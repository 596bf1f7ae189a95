package exporter

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"bnerd.net/vpn-operator/internal/agent/wgstate"
)

// WireGuardCollector publishes a WireGuard gateway's per-peer metrics from the wireguard
// role's state file, and init-nat's NAT statistics.
type WireGuardCollector struct {
	// Peers returns the configured peer names.
	Peers        func() []string
	StateFile    string
	NATStateFile string
	Now          func() time.Time

	mu sync.Mutex
	// A recreated interface starts its counters from zero; totals stay monotonic by
	// adding deltas per device and peer key.
	last   map[string][2]int64
	totals map[string]*[2]float64
}

// HandshakeFresh mirrors the status agent's rule for an up peer.
const HandshakeFresh = 3 * time.Minute

var (
	descWGUp        = prometheus.NewDesc("bnerd_wireguard_up", "1 when the wireguard container reported the interface within the last 30 s.", nil, nil)
	descWGPeerUp    = prometheus.NewDesc("bnerd_wireguard_peer_up", "1 when the peer's latest handshake with a key the gateway serves (the current one, or the previous one during a rotation's overlap) is younger than 3 minutes.", []string{"tunnel"}, nil)
	descWGHandshake = prometheus.NewDesc("bnerd_wireguard_peer_latest_handshake_age_seconds", "Seconds since the peer's latest handshake with a key the gateway serves (absent without one).", []string{"tunnel"}, nil)
	descWGBytes     = prometheus.NewDesc("bnerd_wireguard_peer_bytes_total", "Bytes exchanged with the peer (in: received from it, out: sent to it).", []string{"tunnel", "direction"}, nil)
)

// Describe implements prometheus.Collector.
func (c *WireGuardCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descWGUp, descWGPeerUp, descWGHandshake, descWGBytes, descNATErrors, descNATApplies, descNATDur, descNATDrift} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *WireGuardCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	if c.Now != nil {
		now = c.Now()
	}
	st, err := wgstate.Read(c.StateFile, now)
	up := 1.0
	if err != nil {
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(descWGUp, prometheus.GaugeValue, up)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		c.last = map[string][2]int64{}
		c.totals = map[string]*[2]float64{}
	}
	for _, name := range c.Peers() {
		tot := c.totals[name]
		if tot == nil {
			tot = &[2]float64{}
			c.totals[name] = tot
		}
		peerUp := 0.0
		var latest time.Time
		for _, d := range st.Devices() {
			p, ok := d.Peer(name)
			if !ok || err != nil {
				continue
			}
			cur := [2]int64{p.ReceiveBytes, p.TransmitBytes}
			id := d.Interface + "/" + p.PublicKey
			prev := c.last[id]
			for i := range cur {
				if cur[i] >= prev[i] {
					tot[i] += float64(cur[i] - prev[i])
				} else {
					tot[i] += float64(cur[i]) // the interface was recreated
				}
			}
			c.last[id] = cur
			if p.LatestHandshake.After(latest) {
				latest = p.LatestHandshake
			}
		}
		if !latest.IsZero() {
			age := now.Sub(latest)
			ch <- prometheus.MustNewConstMetric(descWGHandshake, prometheus.GaugeValue, age.Seconds(), name)
			if age < HandshakeFresh {
				peerUp = 1
			}
		}
		ch <- prometheus.MustNewConstMetric(descWGPeerUp, prometheus.GaugeValue, peerUp, name)
		ch <- prometheus.MustNewConstMetric(descWGBytes, prometheus.CounterValue, tot[0], name, "in")
		ch <- prometheus.MustNewConstMetric(descWGBytes, prometheus.CounterValue, tot[1], name, "out")
	}
	collectNAT(ch, c.NATStateFile)
}
