package openstacksim

import (
	"math"
	"math/rand/v2"
	"net/http"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Fault disturbs matching requests.
//
// Method "" matches any method. PathPattern "" matches any path; a pattern
// starting with "re:" is a regular expression over the request path; any
// other pattern is a path.Match glob, tried against both the request path
// and the route template (so "/network/v2.0/ports/*" and
// "/network/v2.0/ports/{id}" both select GET port by ID).
//
// When a fault applies, the request first waits Latency (if set), then:
// Drop hijacks and closes the connection without an answer; Hang holds the
// request without an answer until the client gives up (or Close); Status
// answers with that status in the service's error shape (Retry-After set
// from RetryAfter, rounded up to whole seconds); with none of these the
// request proceeds normally after the latency.
//
// Count > 0 makes the fault one-shot: it applies to the next Count matching
// requests and then goes inert. Rate in (0,1) applies it to that fraction of
// matching requests (randomly); 0 means every one.
//
// Go's HTTP client transparently retries a bodiless GET or HEAD once when a
// reused connection is closed without a response, so a single dropped GET
// may be invisible to the caller; drop a POST, or drop several, to see the
// error.
type Fault struct {
	Method      string
	PathPattern string
	Latency     time.Duration
	Status      int
	RetryAfter  time.Duration
	Rate        float64
	Count       int
	Drop        bool
	Hang        bool
	// UserAgent, when set, limits the fault to requests whose User-Agent contains it
	// (one client among several with the same routes, such as a customer's).
	UserAgent string
}

type faultRec struct {
	f         Fault
	re        *regexp.Regexp
	remaining int
	removed   bool
}

// Inject adds a fault; the returned func removes it. An invalid "re:"
// pattern panics, as a test bug.
func (s *Server) Inject(f Fault) (remove func()) {
	fr := &faultRec{f: f, remaining: f.Count}
	if strings.HasPrefix(f.PathPattern, "re:") {
		fr.re = regexp.MustCompile(strings.TrimPrefix(f.PathPattern, "re:"))
	}
	s.faultMu.Lock()
	s.faults = append(s.faults, fr)
	s.faultMu.Unlock()
	return func() {
		s.faultMu.Lock()
		defer s.faultMu.Unlock()
		fr.removed = true
		for i, x := range s.faults {
			if x == fr {
				s.faults = append(s.faults[:i], s.faults[i+1:]...)
				break
			}
		}
	}
}

// ClearFaults removes every injected fault.
func (s *Server) ClearFaults() {
	s.faultMu.Lock()
	for _, f := range s.faults {
		f.removed = true
	}
	s.faults = nil
	s.faultMu.Unlock()
}

func (fr *faultRec) matches(r *http.Request, pattern string) bool {
	if fr.f.Method != "" && !strings.EqualFold(fr.f.Method, r.Method) {
		return false
	}
	if fr.f.UserAgent != "" && !strings.Contains(r.UserAgent(), fr.f.UserAgent) {
		return false
	}
	p := fr.f.PathPattern
	switch {
	case p == "":
		return true
	case fr.re != nil:
		return fr.re.MatchString(r.URL.Path)
	}
	if ok, _ := path.Match(p, r.URL.Path); ok {
		return true
	}
	if pattern != "" {
		tmpl := strings.TrimPrefix(routeName("", pattern, ""), " ")
		if ok, _ := path.Match(p, tmpl); ok || p == tmpl {
			return true
		}
	}
	return false
}

// pickFault selects, and consumes, the first fault that applies.
func (s *Server) pickFault(r *http.Request, pattern string) *Fault {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	for _, fr := range s.faults {
		if fr.removed || !fr.matches(r, pattern) {
			continue
		}
		if fr.f.Count > 0 && fr.remaining <= 0 {
			continue
		}
		if fr.f.Rate > 0 && fr.f.Rate < 1 && rand.Float64() >= fr.f.Rate {
			continue
		}
		if fr.f.Count > 0 {
			fr.remaining--
		}
		f := fr.f
		return &f
	}
	return nil
}

// applyFaults reports whether the request was answered (or dropped) by a
// fault and must not reach its handler.
func (s *Server) applyFaults(w *statusRecorder, r *http.Request, pattern string) bool {
	f := s.pickFault(r, pattern)
	if f == nil {
		return false
	}
	if f.Latency > 0 {
		t := time.NewTimer(f.Latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			w.status = 499
			return true
		case <-s.closed:
			t.Stop()
			w.status = 499
			return true
		}
	}
	switch {
	case f.Drop:
		s.drop(w)
		return true
	case f.Hang:
		select {
		case <-r.Context().Done():
		case <-s.closed:
		}
		s.drop(w)
		return true
	case f.Status != 0:
		if f.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(f.RetryAfter.Seconds()))))
		}
		writeError(w, serviceOf(r.URL.Path), faultError(f.Status))
		return true
	}
	return false
}

func (s *Server) drop(w *statusRecorder) {
	w.status = 0
	conn, _, err := w.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

func faultError(status int) *apiError {
	switch status {
	case 429:
		return errf(status, "OverLimit", "Too many requests; retry later.")
	case 503:
		return errf(status, "ServiceUnavailable", "The server is currently unavailable. Please try again at a later time.")
	case 500:
		return errf(status, "HTTPInternalServerError", "Request Failed: internal server error while processing your request.")
	}
	return errf(status, "HTTPError", "Injected fault: %s.", http.StatusText(status))
}
