package openstacksim

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Path prefixes of the three services, as a devstack-style single host lays
// them out.
const (
	identityPrefix = "/identity"
	networkPrefix  = "/network"
	computePrefix  = "/compute"
)

// Server is a running simulator.
type Server struct {
	st       *state
	ln       net.Listener
	hs       *http.Server
	mux      *http.ServeMux
	url      string
	tokenTTL time.Duration
	closed   chan struct{}
	once     sync.Once

	tokMu  sync.RWMutex
	tokens map[string]*token

	faultMu sync.Mutex
	faults  []*faultRec

	cntMu    sync.Mutex
	counters Counters
	log      []RequestRecord
	logNext  int
	tallies  map[string]func(RequestRecord) bool // Tally's predicates, by name

	delayMu     sync.Mutex
	attachDelay time.Duration
	detachDelay time.Duration
	pendingNova sync.WaitGroup

	chaos chaos // rate limiter, Nova misbehaviour (chaos.go)
}

// Start seeds a simulator and serves it on 127.0.0.1 at a free port until
// Close.
func Start(seed *Seed) (*Server, error) { return StartAt(seed, "127.0.0.1:0") }

// StartAt is Start on a chosen listen address.
func StartAt(seed *Seed, addr string) (*Server, error) {
	if seed == nil {
		seed = &Seed{}
	}
	s := &Server{
		st:       newState(),
		mux:      http.NewServeMux(),
		tokens:   map[string]*token{},
		closed:   make(chan struct{}),
		tokenTTL: time.Hour,
	}
	s.counters.ByRoute = map[string]int{}
	if seed.TokenTTL.Duration > 0 {
		s.tokenTTL = seed.TokenTTL.Duration
	}
	if err := s.st.apply(seed); err != nil {
		return nil, err
	}
	s.routes()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s.ln = ln
	s.url = "http://" + ln.Addr().String()
	s.hs = &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = s.hs.Serve(ln) }()
	return s, nil
}

// Close stops serving and releases requests held by hang faults.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.closed)
		_ = s.hs.Close()
		s.pendingNova.Wait()
	})
}

func (s *Server) URL() string     { return s.url }
func (s *Server) AuthURL() string { return s.url + identityPrefix + "/v3" }
func (s *Server) Region() string  { return s.st.region }

// NetworkEndpoint and ComputeEndpoint are the catalog URLs.
func (s *Server) NetworkEndpoint() string { return s.url + networkPrefix + "/" }
func (s *Server) ComputeEndpoint() string { return s.url + computePrefix + "/v2.1/" }

type service int

const (
	svcIdentity service = iota
	svcNetwork
	svcCompute
)

func serviceOf(path string) service {
	switch {
	case strings.HasPrefix(path, networkPrefix):
		return svcNetwork
	case strings.HasPrefix(path, computePrefix):
		return svcCompute
	default:
		return svcIdentity
	}
}

// ServeHTTP counts, applies faults, then dispatches.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, pattern := s.mux.Handler(r)
	route := routeName(r.Method, pattern, r.URL.Path)
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	faulted := s.applyChaos(rec, r, pattern) || s.applyFaults(rec, r, pattern)
	if !faulted {
		s.mux.ServeHTTP(rec, r)
	}
	s.record(r, route, rec.status, faulted)
}

func routeName(method, pattern, path string) string {
	if pattern == "" {
		return method + " " + path
	}
	p := pattern
	if i := strings.IndexByte(p, ' '); i >= 0 {
		p = p[i+1:]
	}
	p = strings.TrimSuffix(p, "{$}")
	if len(p) > 1 {
		p = strings.TrimSuffix(p, "/")
	}
	return method + " " + p
}

type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.wrote {
		r.status = code
		r.wrote = true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := r.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("hijack not supported")
	}
	return hj.Hijack()
}

// --- handler plumbing ---

type hfn func(w http.ResponseWriter, r *http.Request, c *caller)

// authed requires a valid X-Auth-Token and refuses writes to reader-only
// tokens, as keystonemiddleware and the services' policies do.
func (s *Server) authed(svc service, h hfn) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := s.lookupToken(r.Header.Get("X-Auth-Token"))
		if tok == nil {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf("Keystone uri=%q", s.AuthURL()))
			writeError(w, svcIdentity, errf(401, "Unauthorized", "The request you have made requires authentication."))
			return
		}
		c := tok.caller()
		switch {
		case s.st.secureRBAC && svc != svcIdentity && !c.admin:
			// The secure-RBAC defaults: reads need reader, writes member (the token's
			// own roles: an application credential's carry no implied ones).
			if isWrite(r.Method) && !hasRole(c.roles, "member") {
				writeError(w, svc, policyRefusal(svc, r))
				return
			}
			if !isWrite(r.Method) && !hasRole(c.roles, "reader") {
				if svc == svcCompute {
					writeError(w, svc, policyRefusal(svc, r))
					return
				}
				c.blind = true
			}
		case c.readOnly && isWrite(r.Method) && !s.st.legacyPolicy:
			writeError(w, svc, errf(403, "PolicyNotAuthorized", "rule:%s is disallowed by policy", policyName(r)))
			return
		}
		h(w, r, c)
	})
}

// policyRefusal is the service's answer to a request its policy refuses: Neutron's
// PolicyNotAuthorized, Nova's 403 naming its policy rule.
func policyRefusal(svc service, r *http.Request) *apiError {
	if svc == svcCompute {
		return errf(403, "Forbidden", "Policy doesn't allow os_compute_api:%s to be performed.", policyName(r))
	}
	return errf(403, "PolicyNotAuthorized", "rule:%s is disallowed by policy", policyName(r))
}

func policyName(r *http.Request) string {
	verb := map[string]string{"POST": "create", "PUT": "update", "DELETE": "delete", "PATCH": "update"}[r.Method]
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	res := "resource"
	if len(parts) >= 3 {
		res = strings.TrimSuffix(strings.ReplaceAll(parts[2], "-", "_"), "s")
	}
	return verb + "_" + res
}

func isWrite(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch:
		return true
	}
	return false
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if v != nil {
		_ = json.NewEncoder(w).Encode(v)
	}
}

// writeError renders e in the service's own error shape.
func writeError(w http.ResponseWriter, svc service, e *apiError) {
	w.Header().Set("X-Openstack-Request-Id", "req-"+newID())
	switch svc {
	case svcNetwork:
		writeJSON(w, e.status, map[string]any{"NeutronError": map[string]string{"type": e.typ, "message": e.msg, "detail": ""}})
	case svcCompute:
		key := map[int]string{400: "badRequest", 401: "unauthorized", 403: "forbidden", 404: "itemNotFound",
			409: "conflictingRequest", 413: "overLimit", 429: "overLimit", 500: "computeFault", 503: "serviceUnavailable"}[e.status]
		if key == "" {
			key = "computeFault"
		}
		writeJSON(w, e.status, map[string]any{key: map[string]any{"code": e.status, "message": e.msg}})
	default:
		writeJSON(w, e.status, map[string]any{"error": map[string]any{"code": e.status, "title": http.StatusText(e.status), "message": e.msg}})
	}
}

// decode reads a JSON body into v; a malformed body is Neutron's 400.
func decode(r *http.Request, v any) *apiError {
	b, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		return errf(400, "BadRequest", "Unable to read request body.")
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errf(400, "BadRequest", "Malformed request body: %v", err)
	}
	return nil
}
