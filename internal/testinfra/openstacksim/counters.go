package openstacksim

import (
	"maps"
	"net/http"
	"strings"
	"time"
)

// Counters tallies requests by method and route template, e.g.
// "GET /network/v2.0/ports/{id}". Reads are GET and HEAD; Writes are POST,
// PUT, DELETE and PATCH except Keystone token requests, which are counted
// under their own route and in Tokens so a test can assert that a converged
// reconcile made zero writes even if it had to (re)authenticate. Faulted
// requests are counted too (they reached the server) and also in Faulted.
type Counters struct {
	ByRoute map[string]int
	Reads   int
	Writes  int
	Tokens  int
	Faulted int
	// Tallies counts the requests each predicate given to Tally matched, by its name.
	Tallies map[string]int
}

// Total is the number of requests counted.
func (c Counters) Total() int {
	n := 0
	for _, v := range c.ByRoute {
		n += v
	}
	return n
}

// RequestRecord is one entry of the request log.
type RequestRecord struct {
	Time      time.Time
	Method    string
	Path      string
	Query     string
	Route     string
	Status    int // 0 when the connection was dropped
	ProjectID string
	Faulted   bool
}

const requestLogSize = 4096

func isTokenRoute(path string) bool {
	return strings.HasPrefix(path, identityPrefix+"/v3/auth/tokens")
}

func (s *Server) record(r *http.Request, route string, status int, faulted bool) {
	rec := RequestRecord{Time: time.Now(), Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery,
		Route: route, Status: status, Faulted: faulted}
	if tok := s.lookupToken(r.Header.Get("X-Auth-Token")); tok != nil {
		rec.ProjectID = tok.projectID
	}
	s.cntMu.Lock()
	defer s.cntMu.Unlock()
	s.counters.ByRoute[route]++
	for name, match := range s.tallies {
		if match(rec) {
			s.counters.Tallies[name]++
		}
	}
	switch {
	case isTokenRoute(r.URL.Path):
		if r.Method == http.MethodPost {
			s.counters.Tokens++
		} else if !isWrite(r.Method) {
			s.counters.Reads++
		}
	case isWrite(r.Method):
		s.counters.Writes++
	default:
		s.counters.Reads++
	}
	if faulted {
		s.counters.Faulted++
	}
	if len(s.log) < requestLogSize {
		s.log = append(s.log, rec)
	} else {
		s.log[s.logNext] = rec
	}
	s.logNext = (s.logNext + 1) % requestLogSize
}

// Counters returns a copy of the counters.
func (s *Server) Counters() Counters {
	s.cntMu.Lock()
	defer s.cntMu.Unlock()
	c := s.counters
	c.ByRoute = maps.Clone(s.counters.ByRoute)
	c.Tallies = maps.Clone(s.counters.Tallies)
	return c
}

// Tally counts, from now on and across ResetCounters, the requests match accepts, in
// Counters().Tallies[name]: a harness's count of requests finer than a route (a list
// by its query, say). match runs under the counters' lock, on every request.
func (s *Server) Tally(name string, match func(RequestRecord) bool) {
	s.cntMu.Lock()
	defer s.cntMu.Unlock()
	if s.tallies == nil {
		s.tallies = map[string]func(RequestRecord) bool{}
	}
	s.tallies[name] = match
	if s.counters.Tallies == nil {
		s.counters.Tallies = map[string]int{}
	}
	s.counters.Tallies[name] = 0
}

// ResetCounters zeroes the counters and the request log.
func (s *Server) ResetCounters() {
	s.cntMu.Lock()
	defer s.cntMu.Unlock()
	s.counters = Counters{ByRoute: map[string]int{}, Tallies: map[string]int{}}
	for name := range s.tallies {
		s.counters.Tallies[name] = 0
	}
	s.log = nil
	s.logNext = 0
}

// RequestLog returns the most recent requests (up to 4096), oldest first.
func (s *Server) RequestLog() []RequestRecord {
	s.cntMu.Lock()
	defer s.cntMu.Unlock()
	if len(s.log) < requestLogSize {
		return append([]RequestRecord(nil), s.log...)
	}
	out := make([]RequestRecord, 0, requestLogSize)
	out = append(out, s.log[s.logNext:]...)
	return append(out, s.log[:s.logNext]...)
}
