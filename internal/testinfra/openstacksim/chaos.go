package openstacksim

import (
	"bytes"
	"context"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// This file adds the faults a soak needs beyond Fault: a Neutron-like rate limiter that
// answers 429 with Retry-After, fault storms (a fault switched on for a while, again and
// again), and a Nova whose attaches take long or fail and whose detaches finish late.
// Everything here is off until set, and leaves the handlers untouched: it decides before
// a request reaches them.

// RateLimit is a token bucket in front of the API, as an operator of a real cloud puts in
// front of Neutron and Nova (an API gateway or the WSGI rate-limit middleware). A request
// over the limit is answered 429 OverLimit with a Retry-After (whole seconds, at least 1)
// saying when the bucket has a token again.
type RateLimit struct {
	// QPS is the sustained rate; zero or less turns the limiter off.
	QPS float64
	// Burst is the bucket size (at least 1).
	Burst int
	// PerProject keeps one bucket per project of the caller's token (a per-tenant
	// limit); otherwise all callers share one bucket per service.
	PerProject bool
	// Services limited, among "network", "compute" and "identity"; empty means network
	// and compute (token requests are not limited).
	Services []string
}

// NovaChaos makes Nova's interface attach and detach misbehave the way they do on a
// busy cloud. Rates are fractions of matching requests in [0,1]; the draws are
// independent per request.
type NovaChaos struct {
	// SlowAttachRate of attach requests take SlowAttach before Nova answers (attach is a
	// synchronous call in Nova: the API answers when the hypervisor is done). Nova
	// finishes the attach even when the client stopped waiting.
	SlowAttachRate float64
	SlowAttach     time.Duration
	// FailAttachRate of attach requests fail after FailAttachAfter: Nova answers 500 and
	// nothing is attached.
	FailAttachRate  float64
	FailAttachAfter time.Duration
	// SlowDetachRate of detach requests take effect only SlowDetach after Nova's 202
	// (detach is asynchronous in Nova).
	SlowDetachRate float64
	SlowDetach     time.Duration
}

// chaos is the Server's state for this file.
type chaos struct {
	mu       sync.Mutex
	latency  time.Duration
	limit    RateLimit
	buckets  map[string]*rate.Limiter
	limited  int
	nova     NovaChaos
	novaSeen struct{ slowAttach, failAttach, slowDetach int }
	// instance serializes attaches and detaches per server while Nova chaos is on.
	instance map[string]*sync.Mutex
}

// SetLatency delays every request by d before anything else happens to it: the round
// trip and processing time of a real cloud (tens of milliseconds), on top of which the
// faults apply. Zero removes it.
func (s *Server) SetLatency(d time.Duration) {
	s.chaos.mu.Lock()
	s.chaos.latency = d
	s.chaos.mu.Unlock()
}

// SetRateLimit installs (or, with QPS <= 0, removes) the rate limiter. Buckets start
// full.
func (s *Server) SetRateLimit(l RateLimit) {
	if l.Burst < 1 {
		l.Burst = 1
	}
	if len(l.Services) == 0 {
		l.Services = []string{"network", "compute"}
	}
	s.chaos.mu.Lock()
	s.chaos.limit = l
	s.chaos.buckets = map[string]*rate.Limiter{}
	s.chaos.mu.Unlock()
}

// RateLimited is the number of requests the rate limiter refused.
func (s *Server) RateLimited() int {
	s.chaos.mu.Lock()
	defer s.chaos.mu.Unlock()
	return s.chaos.limited
}

// SetNovaChaos installs (or, with the zero value, removes) Nova's misbehaviour.
func (s *Server) SetNovaChaos(c NovaChaos) {
	s.chaos.mu.Lock()
	s.chaos.nova = c
	s.chaos.mu.Unlock()
}

// NovaChaosSeen counts the attaches made slow, the attaches failed and the detaches
// delayed so far.
func (s *Server) NovaChaosSeen() (slowAttach, failAttach, slowDetach int) {
	s.chaos.mu.Lock()
	defer s.chaos.mu.Unlock()
	return s.chaos.novaSeen.slowAttach, s.chaos.novaSeen.failAttach, s.chaos.novaSeen.slowDetach
}

// Storm switches f on for on out of every period, starting switched on, until stop is
// called (which also switches it off). A 409 storm on router routes, for example, is
// several writers racing for one router for a few seconds at a time.
func (s *Server) Storm(f Fault, period, on time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			remove := s.Inject(f)
			select {
			case <-time.After(on):
			case <-done:
				remove()
				return
			case <-s.closed:
				remove()
				return
			}
			remove()
			select {
			case <-time.After(period - on):
			case <-done:
				return
			case <-s.closed:
				return
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// applyChaos answers a request the rate limiter refuses or that Nova chaos picks, and
// reports whether it did (the request is then not passed on).
func (s *Server) applyChaos(w *statusRecorder, r *http.Request, pattern string) bool {
	s.chaos.mu.Lock()
	d := s.chaos.latency
	s.chaos.mu.Unlock()
	if !s.sleep(r.Context(), d) {
		w.status = 499
		return true
	}
	if s.rateLimited(w, r) {
		return true
	}
	return s.novaChaos(w, r, pattern)
}

func serviceName(path string) string {
	switch serviceOf(path) {
	case svcNetwork:
		return "network"
	case svcCompute:
		return "compute"
	}
	return "identity"
}

func (s *Server) rateLimited(w *statusRecorder, r *http.Request) bool {
	svc := serviceName(r.URL.Path)
	s.chaos.mu.Lock()
	l := s.chaos.limit
	if l.QPS <= 0 || !containsString(l.Services, svc) || (svc == "identity" && isTokenRoute(r.URL.Path)) {
		s.chaos.mu.Unlock()
		return false
	}
	key := svc
	if l.PerProject {
		if tok := s.lookupToken(r.Header.Get("X-Auth-Token")); tok != nil {
			key += "/" + tok.projectID
		}
	}
	b := s.chaos.buckets[key]
	if b == nil {
		b = rate.NewLimiter(rate.Limit(l.QPS), l.Burst)
		s.chaos.buckets[key] = b
	}
	res := b.Reserve()
	delay := res.Delay()
	if delay == 0 {
		s.chaos.mu.Unlock()
		return false
	}
	// Refused requests take no token: only what is served counts against the limit.
	res.Cancel()
	s.chaos.limited++
	s.chaos.mu.Unlock()
	secs := int(math.Ceil(delay.Seconds()))
	if secs < 1 {
		secs = 1
	}
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeError(w, serviceOf(r.URL.Path), errf(429, "OverLimit", "Rate limit exceeded: too many requests; retry after %d s.", secs))
	return true
}

func containsString(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// novaChaos applies NovaChaos to interface attach (POST .../os-interface) and detach
// (DELETE .../os-interface/{port}). While it is on, every attach and detach of a server
// also takes that server's lock, as Nova's compute manager takes the instance lock: a
// slow attach holds back a later detach of the same server (which Nova accepts at once
// and carries out afterwards), so operations on one server land in the order they were
// asked for.
func (s *Server) novaChaos(w *statusRecorder, r *http.Request, pattern string) bool {
	attach := r.Method == http.MethodPost && strings.HasSuffix(pattern, "/servers/{id}/os-interface")
	detach := r.Method == http.MethodDelete && strings.HasSuffix(pattern, "/servers/{id}/os-interface/{port}")
	if !attach && !detach {
		return false
	}
	s.chaos.mu.Lock()
	c := s.chaos.nova
	if c == (NovaChaos{}) {
		s.chaos.mu.Unlock()
		return false
	}
	draw := rand.Float64()
	var slowAttach, failAttach, slowDetach bool
	switch {
	case attach && draw < c.FailAttachRate:
		failAttach = true
		s.chaos.novaSeen.failAttach++
	case attach && draw < c.FailAttachRate+c.SlowAttachRate:
		slowAttach = true
		s.chaos.novaSeen.slowAttach++
	case detach && draw < c.SlowDetachRate:
		slowDetach = true
		s.chaos.novaSeen.slowDetach++
	}
	if s.chaos.instance == nil {
		s.chaos.instance = map[string]*sync.Mutex{}
	}
	lock := s.chaos.instance[serverInPath(r.URL.Path)]
	if lock == nil {
		lock = &sync.Mutex{}
		s.chaos.instance[serverInPath(r.URL.Path)] = lock
	}
	s.chaos.mu.Unlock()

	if detach {
		if !slowDetach && lock.TryLock() {
			defer lock.Unlock()
			s.mux.ServeHTTP(w, r)
			return true
		}
		// Nova accepts the detach at once and does it when the instance is free (and,
		// when slow, later still).
		r2 := r.Clone(context.Background())
		s.pendingNova.Add(1)
		go func() {
			defer s.pendingNova.Done()
			lock.Lock()
			defer lock.Unlock()
			if !slowDetach || s.sleep(context.Background(), c.SlowDetach) {
				s.mux.ServeHTTP(discardWriter{h: http.Header{}}, r2)
			}
		}()
		w.WriteHeader(http.StatusAccepted)
		return true
	}

	// Nova does not notice the client leaving: read the request now, finish anyway.
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		writeError(w, svcCompute, errf(400, "BadRequest", "Unable to read request body."))
		return true
	}
	lock.Lock()
	defer lock.Unlock()
	switch {
	case failAttach:
		if !s.sleep(context.Background(), c.FailAttachAfter) {
			w.status = 499
			return true
		}
		writeError(w, svcCompute, errf(500, "InterfaceAttachFailed",
			"Failed to attach network adapter device to %s", serverInPath(r.URL.Path)))
		return true
	case slowAttach:
		if !s.sleep(context.Background(), c.SlowAttach) {
			w.status = 499
			return true
		}
	}
	r2 := r.Clone(context.Background())
	r2.Body = io.NopCloser(bytes.NewReader(body))
	s.mux.ServeHTTP(w, r2)
	return true
}

// serverInPath is the {id} of /compute/v2.1/servers/{id}/...
func serverInPath(p string) string {
	_, rest, ok := strings.Cut(p, "/servers/")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	return id
}

// sleep waits d, unless ctx ends or the server closes first (then false).
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.closed:
		return false
	}
}

// discardWriter is the response writer of work Nova does after it answered.
type discardWriter struct{ h http.Header }

func (d discardWriter) Header() http.Header         { return d.h }
func (d discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d discardWriter) WriteHeader(int)             {}
