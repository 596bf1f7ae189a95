package exporter

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	govici "github.com/strongswan/govici/vici"
)

// Rekeys counts IKE and child SA rekey events per connection name.
type Rekeys struct {
	mu sync.Mutex
	m  map[string]uint64
}

// Observe counts ev if it is a rekey event (its top-level keys are connection names).
func (r *Rekeys) Observe(ev govici.Event) {
	if ev.Name != "ike-rekey" && ev.Name != "child-rekey" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]uint64{}
	}
	for _, k := range ev.Message.Keys() {
		r.m[k]++
	}
}

// Counts returns a copy of the counts.
func (r *Rekeys) Counts() map[string]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]uint64, len(r.m))
	for k, v := range r.m {
		out[k] = v
	}
	return out
}

// Handler serves c's metrics.
func Handler(c prometheus.Collector) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

// Serve serves c on ln until ctx ends.
func Serve(ctx context.Context, ln net.Listener, c prometheus.Collector) error {
	srv := &http.Server{Handler: Handler(c), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
