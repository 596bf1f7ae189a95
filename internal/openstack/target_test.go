package openstack_test

// One conformance suite, several targets: the simulator (in each Neutron extension
// shape it can present) and the real OpenStack hack/openstack.sh runs. Every case runs
// its assertions against every target asked for (BNERD_OPENSTACK) and its outcome per
// target is recorded, so the fidelity of the simulator is a number (see fidelity_test.go).

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
	"bnerd.net/vpn-operator/internal/testinfra/realstack"
)

// Targets of the suite. The real ones run only when BNERD_OPENSTACK names them (or, for
// Zed's, BNERD_REQUIRE_OPENSTACK=1 demands it).
const (
	targetSim     = "sim"        // the simulator as a recent Neutron (port tags kept in the create)
	targetZed     = "sim-zed"    // the simulator presenting Zed's extensions and policy, as the real Zed
	targetOld     = "sim-old"    // Zed's, less extraroute-atomic (Train and older)
	targetSim2025 = "sim-2025.1" // the simulator presenting 2025.1's extensions and secure-RBAC policy
	targetReal    = "real"       // hack/openstack.sh's Zed
	targetReal25  = "real-2025.1"
)

// simShapes are the simulator targets "sim" stands for: the seam is tested against
// every Neutron shape it handles.
var simShapes = []string{targetSim, targetZed, targetOld, targetSim2025}

// realTargets are the real targets, oldest release first.
var realTargets = []string{targetReal, targetReal25}

// isReal reports whether a target is a real OpenStack.
func isReal(target string) bool { return slices.Contains(realTargets, target) }

// shape makes a seed present a simulator target's Neutron: its extensions and policy
// defaults (Zed's shipped legacy defaults for the Zed shapes, as the real Zed runs; the
// secure-RBAC defaults in full for the 2025.1 shape, as the real 2025.1 runs).
func shape(seed *openstacksim.Seed, target string) {
	seed.NeutronExtensions = shapeExtensions(target)
	seed.LegacyPolicy = legacyPolicy(target)
	seed.SecureRBAC = target == targetSim2025
	seed.ImpliedRoles = target == targetSim2025
}

// legacyPolicy reports whether a target runs the pre-secure-RBAC policy defaults.
func legacyPolicy(target string) bool {
	return target == targetZed || target == targetOld || target == targetReal
}

// zedShaped reports whether a target presents Zed's Neutron extensions.
func zedShaped(target string) bool { return target == targetZed || target == targetReal }

// shapeExtensions is the extension set each simulator target presents.
func shapeExtensions(target string) []string {
	switch target {
	case targetZed:
		return openstacksim.ZedNeutronExtensions
	case targetOld:
		return slices.DeleteFunc(slices.Clone(openstacksim.ZedNeutronExtensions), func(a string) bool { return a == openstack.ExtExtraRouteAtomic })
	case targetSim2025:
		return openstacksim.Neutron2025NeutronExtensions
	default:
		return nil
	}
}

// target is one target of this test process and what is known of it before any case
// runs: a simulator shape's features are fixed, the real Neutron's are discovered once.
// A case decides from them whether it applies (see forTargets).
type target struct {
	name     string
	features openstack.Features
	// err: the real OpenStack is required and missing, or its discovery failed; every
	// case on the target fails with it.
	err error
}

var (
	targetsOnce sync.Once
	targets     []target
)

// activeTargets are the targets asked for (BNERD_OPENSTACK): "sim" stands for every
// simulator shape. The real target is in the list when it is asked for and running, or
// when it is required (BNERD_REQUIRE_OPENSTACK=1, which asks for it as realstack.Need
// does), running or not: then its absence fails every case. Asked for, not running and
// not required, it is left out with a note; no case is ever skipped for it.
func activeTargets() []target {
	targetsOnce.Do(func() {
		asked := realstack.Targets()
		if slices.Contains(asked, targetSim) {
			for _, s := range simShapes {
				exts := shapeExtensions(s)
				if exts == nil {
					exts = openstacksim.DefaultNeutronExtensions
				}
				targets = append(targets, target{name: s, features: openstack.FeaturesOf(exts)})
			}
		}
		for _, rel := range realstack.Wanted() {
			if tg, ok := discoverReal(rel); ok {
				targets = append(targets, tg)
			}
		}
	})
	return targets
}

// discoverReal finds a real OpenStack and asks its Neutron for its extensions, with
// the operator's credential, once per process (reads only).
func discoverReal(rel realstack.Release) (target, bool) {
	tg := target{name: rel.Target()}
	c, err := loadReal(rel)
	if err != nil {
		if !rel.Demanded() {
			fmt.Fprintf(os.Stderr, "conformance: the real target %s is left out: %v (%s=1 makes this a failure)\n", tg.name, err, realstack.RequireEnv)
			return tg, false
		}
		tg.err = fmt.Errorf("%v (and %s=1 requires it)", err, realstack.RequireEnv)
		return tg, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cred, err := c.Credential("cf-operator")
	if err == nil {
		var cl *openstack.Clients
		if cl, err = openstack.NewClients(ctx, cred, openstack.ClientOptions{Timeout: 60 * time.Second}); err == nil {
			tg.features, err = openstack.DiscoverFeatures(ctx, cl.Networking)
		}
	}
	if err != nil {
		tg.err = fmt.Errorf("discovering the real Neutron's extensions: %w", err)
	}
	return tg, true
}

// world is one test's view of a target: clients for the operator, the customer, an
// unrelated project and an admin, the estate's IDs, and a log of every request those
// clients sent.
type world struct {
	target string
	srv    *openstacksim.Server // simulator targets
	cloud  *realstack.Cloud     // the real target

	op, cust, other, admin *openstack.Clients
	requests               *requestLog
	clientOpts             openstack.ClientOptions
	operatorCred           openstack.Credential
	customerCred           openstack.Credential
	adminCred              openstack.Credential
	operatorPassword       openstack.Credential
	authURL, region        string
	networkURL, computeURL string // catalog endpoint prefixes
	features               openstack.Features

	projAdmin, projOperator, projCustomer, projOther string
	serverA, serverB, serverOther                    string
	otherPortID                                      string

	transit     *openstack.Network
	transitSub  *openstack.Subnet
	public      *openstack.Network
	vpnRouter   *openstack.Router
	svcRouter   *openstack.Router
	customerRtr *openstack.Router
}

func (w *world) real() bool { return isReal(w.target) }

// --- results, for the fidelity table

type outcome struct {
	ran, failed, skipped bool
	na                   string // why the case does not apply to the target (it did not run)
}

var (
	resultsMu sync.Mutex
	results   = map[string]map[string]outcome{} // case -> target -> outcome
)

func record(name, target string, o outcome) {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	if results[name] == nil {
		results[name] = map[string]outcome{}
	}
	results[name][target] = o
}

// applies tells whether a case applies to a target, and why not, from what is known of
// the target before the case starts.
type applies func(tg target) (ok bool, why string)

// onlySim: the case needs the simulator's side doors (fault injection, delayed Nova,
// its own state).
func onlySim(why string) applies {
	return func(tg target) (bool, string) { return !isReal(tg.name), "simulator only: " + why }
}

// onlyWhen: the case needs a shape of Neutron. A target whose features are unknown
// (its discovery failed) gets the case, which fails with the discovery's error.
func onlyWhen(cond func(openstack.Features) bool, why string) applies {
	return func(tg target) (bool, string) { return tg.err != nil || cond(tg.features), why }
}

// forTargets runs fn against every active target the case applies to, as a subtest
// named after the target. A target it does not apply to gets no subtest (a skip would
// look like a gap in the run): the fidelity table shows "n/a (why)" and the agreement
// figures leave the case out for that target.
func forTargets(t *testing.T, fn func(t *testing.T, w *world), only ...applies) {
	t.Helper()
	name := t.Name()
	for _, tg := range activeTargets() {
		if why, na := notApplicable(tg, only); na {
			t.Logf("%s: n/a (%s)", tg.name, why)
			record(name, tg.name, outcome{na: why})
			continue
		}
		t.Run(tg.name, func(t *testing.T) {
			// The real clouds are independent of each other: a case runs on both at
			// once (each case still runs alone on a cloud).
			if isReal(tg.name) {
				t.Parallel()
			}
			o := outcome{ran: true}
			defer func() {
				o.failed, o.skipped = t.Failed(), t.Skipped()
				record(name, tg.name, o)
			}()
			w := newWorld(t, tg)
			if w.cloud != nil {
				// A real cloud's 500 says only "Unexpected API Error": the cause is in
				// its services' logs, which go when the run ends.
				since := time.Now()
				defer func() {
					if t.Failed() {
						logCloudErrors(t, w.cloud.Dir, since)
					}
				}()
			}
			fn(t, w)
		})
	}
}

func notApplicable(tg target, only []applies) (string, bool) {
	for _, a := range only {
		if ok, why := a(tg); !ok {
			return why, true
		}
	}
	return "", false
}

// --- request log: every request the world's clients send, by route

type requestLog struct {
	mu      sync.Mutex
	byRoute map[string]int
	next    http.RoundTripper
}

func newRequestLog() *requestLog {
	return &requestLog{byRoute: map[string]int{}, next: http.DefaultTransport}
}

func (l *requestLog) RoundTrip(r *http.Request) (*http.Response, error) {
	l.mu.Lock()
	l.byRoute[routeKey(r.Method, r.URL.Path)]++
	l.mu.Unlock()
	return l.next.RoundTrip(r)
}

// routeKey names a request by service and path template:
// "PUT network:/ports/{id}/tags", "POST identity:/auth/tokens".
func routeKey(method, path string) string {
	svc, rest := "other", path
	for _, v := range []struct{ marker, svc string }{{"/v2.0", "network"}, {"/v2.1", "compute"}, {"/v3", "identity"}} {
		if i := strings.Index(path, v.marker); i >= 0 {
			svc, rest = v.svc, path[i+len(v.marker):]
			break
		}
	}
	segs := strings.Split(rest, "/")
	for i, s := range segs {
		if i > 0 && segs[i-1] == "tags" {
			segs[i] = "{tag}"
		} else if isID(s) {
			segs[i] = "{id}"
		}
	}
	return method + " " + svc + ":" + strings.Join(segs, "/")
}

func isID(s string) bool {
	hex := 0
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9', r >= 'a' && r <= 'f', r >= 'A' && r <= 'F':
			hex++
		case r == '-':
		default:
			return false
		}
	}
	return hex == 32
}

func (l *requestLog) reset() {
	l.mu.Lock()
	l.byRoute = map[string]int{}
	l.mu.Unlock()
}

func (l *requestLog) count(route string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byRoute[route]
}

func (l *requestLog) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.byRoute {
		n += c
	}
	return n
}

// writes counts requests that change something (token requests excluded).
func (l *requestLog) writes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for k, c := range l.byRoute {
		if !strings.HasPrefix(k, "GET ") && !strings.HasPrefix(k, "HEAD ") && k != "POST identity:/auth/tokens" {
			n += c
		}
	}
	return n
}

func (l *requestLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	keys := make([]string, 0, len(l.byRoute))
	for k := range l.byRoute {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d ", k, l.byRoute[k])
	}
	return b.String()
}

// --- building a world

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// must(call()).get(t) fails the test on an error; Go cannot pass a
// multi-value call alongside t.
func must[T any](v T, err error) result[T] { return result[T]{v, err} }

type result[T any] struct {
	v   T
	err error
}

func (r result[T]) get(t *testing.T) T {
	t.Helper()
	if r.err != nil {
		t.Fatalf("unexpected error: %v", r.err)
	}
	return r.v
}

func second[T any](_ T, err error) error { return err }

const conformanceEstate = "testdata/conformance-estate.yaml"

// realWorlds are built once per real target: the real estate does not change between
// tests (the sweep sees to that), so its clients and IDs are shared, and each test
// starts with an empty request log.
var (
	realWorldsMu sync.Mutex
	realWorlds   = map[string]*world{}
)

func newWorld(t *testing.T, tg target) *world {
	t.Helper()
	if tg.err != nil {
		t.Fatal(tg.err)
	}
	w := buildWorld(t, tg.name)
	// The applicability of the cases was judged on the features known beforehand.
	if !slices.Equal(w.features.Extensions, tg.features.Extensions) {
		t.Fatalf("%s presents the extensions %v, the suite judged which cases apply on %v", tg.name, w.features.Extensions, tg.features.Extensions)
	}
	return w
}

func buildWorld(t *testing.T, target string) *world {
	t.Helper()
	if isReal(target) {
		cloud := realCloud(t, target)
		// The estate is shared by every test: put it back as the seeding left it.
		if err := sweepReal(ctxT(t), cloud); err != nil {
			t.Fatalf("resetting the conformance estate: %v", err)
		}
		realWorldsMu.Lock()
		w := realWorlds[target]
		realWorldsMu.Unlock()
		if w == nil {
			w = &world{target: target, requests: newRequestLog(), cloud: cloud}
			w.clientOpts = openstack.ClientOptions{Timeout: 60 * time.Second, Transport: w.requests}
			w.setupReal(t)
			w.connect(t)
			realWorldsMu.Lock()
			realWorlds[target] = w
			realWorldsMu.Unlock()
		}
		w.requests.reset()
		return w
	}
	w := &world{target: target, requests: newRequestLog()}
	w.clientOpts = openstack.ClientOptions{Timeout: 60 * time.Second, Transport: w.requests}
	w.setupSim(t, target)
	w.connect(t)
	return w
}

// connect builds the clients and resolves the estate's objects through the seam.
func (w *world) connect(t *testing.T) {
	t.Helper()
	ctx := ctxT(t)
	var err error
	w.op = must(openstack.NewClients(ctx, w.operatorCred, w.clientOpts)).get(t)
	w.cust = must(openstack.NewClients(ctx, w.customerCred, w.clientOpts)).get(t)
	w.admin = must(openstack.NewClients(ctx, w.adminCred, w.clientOpts)).get(t)
	otherCred := w.cred(t, "cf-other")
	w.other = must(openstack.NewClients(ctx, otherCred, w.clientOpts)).get(t)
	if w.features, err = openstack.DiscoverFeatures(ctx, w.op.Networking); err != nil {
		t.Fatalf("extensions: %v", err)
	}
	n := w.op.Networking
	w.transit = must(n.ResolveNetwork(ctx, "vpn-transit")).get(t)
	subs := must(n.ListSubnets(ctx, w.transit.ID)).get(t)
	if len(subs) != 1 {
		t.Fatalf("transit subnets: %+v", subs)
	}
	w.transitSub = &subs[0]
	w.public = must(n.ResolveNetwork(ctx, "public")).get(t)
	w.vpnRouter = must(n.ResolveRouter(ctx, "shoot--services--vpn01")).get(t)
	w.svcRouter = must(n.ResolveRouter(ctx, "shoot--services--svc01")).get(t)
	w.customerRtr = must(w.cust.Networking.ResolveRouter(ctx, "shoot--diehl--diehl01")).get(t)
	w.requests.reset()
}

func (w *world) cred(t *testing.T, name string) openstack.Credential {
	t.Helper()
	if w.srv != nil {
		id, secret, ok := w.srv.AppCredential(name)
		if !ok {
			t.Fatalf("seed has no application credential %q", name)
		}
		return openstack.Credential{AuthURL: w.srv.AuthURL(), Region: w.srv.Region(), AppCredentialID: id, AppCredentialSecret: secret}
	}
	c, err := w.cloud.Credential(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (w *world) setupSim(t *testing.T, target string) {
	t.Helper()
	seed, err := openstacksim.LoadSeed(conformanceEstate)
	if err != nil {
		t.Fatal(err)
	}
	shape(seed, target)
	srv, err := openstacksim.Start(seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	w.srv = srv
	w.authURL, w.region = srv.AuthURL(), srv.Region()
	w.networkURL, w.computeURL = srv.URL(), srv.URL()
	w.operatorCred = w.cred(t, "cf-operator")
	w.customerCred = w.cred(t, "cf-customer")
	w.adminCred = w.cred(t, "cf-admin")
	w.operatorPassword = openstack.Credential{AuthURL: srv.AuthURL(), Region: srv.Region(),
		Username: "cf-operator", Password: "cf-operator-password-never-logged", ProjectName: "cf-operator"}
	project := func(name string) string {
		p, ok := srv.ProjectByName(name)
		if !ok {
			t.Fatalf("seed has no project %s", name)
		}
		return p.ID
	}
	w.projAdmin, w.projOperator, w.projCustomer, w.projOther = project("admin"), project("cf-operator"), project("cf-customer"), project("cf-other")
	for _, s := range srv.Servers() {
		switch s.Name {
		case "vpn01-worker-a":
			w.serverA = s.ID
		case "vpn01-worker-b":
			w.serverB = s.ID
		case "other-vm":
			w.serverOther = s.ID
		}
	}
	for _, p := range srv.Ports() {
		if p.Name == "other-port" {
			w.otherPortID = p.ID
		}
	}
}

func (w *world) setupReal(t *testing.T) {
	t.Helper()
	c := w.cloud
	w.authURL, w.region = c.AuthURL(), "RegionOne"
	w.networkURL, w.computeURL = "http://"+c.Release.Host()+":9696", "http://"+c.Release.Host()+":8774"
	w.operatorCred = w.cred(t, "cf-operator")
	w.customerCred = w.cred(t, "cf-customer")
	w.adminCred = w.cred(t, "cf-admin")
	w.operatorPassword = w.cred(t, "cf-operator-password")
	id := func(kind, key string) string {
		v, err := c.ID(kind, key)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	w.projAdmin, w.projOperator = id("projects", "admin"), id("projects", "cf-operator")
	w.projCustomer, w.projOther = id("projects", "cf-customer"), id("projects", "cf-other")
	w.serverA, w.serverB = id("servers", "cf-operator/vpn01-worker-a"), id("servers", "cf-operator/vpn01-worker-b")
	w.serverOther = id("servers", "cf-other/other-vm")
	w.otherPortID = id("ports", "cf-other/other-port")
}

// loaded is a real OpenStack as realstack found it, once per process and release.
type loaded struct {
	cloud *realstack.Cloud
	err   error
	// used: a case ran on it, so its estate is put back at the end.
	used bool
}

var (
	realMu     sync.Mutex
	realClouds = map[realstack.Release]*loaded{}
)

func loadReal(rel realstack.Release) (*realstack.Cloud, error) {
	realMu.Lock()
	defer realMu.Unlock()
	l := realClouds[rel]
	if l == nil {
		l = &loaded{}
		l.cloud, l.err = realstack.LoadRelease(rel)
		realClouds[rel] = l
	}
	return l.cloud, l.err
}

// realCloud is the real OpenStack discoverReal found for a target; a real target is
// only in the list when it was found or is demanded (then its error fails the case).
func realCloud(t *testing.T, target string) *realstack.Cloud {
	t.Helper()
	rel, ok := realstack.ReleaseOfTarget(target)
	if !ok {
		t.Fatalf("%s is not a real target", target)
	}
	c, err := loadReal(rel)
	if err != nil {
		t.Fatalf("%v (and %s=1 requires it)", err, realstack.RequireEnv)
	}
	realMu.Lock()
	realClouds[rel].used = true
	realMu.Unlock()
	return c
}

// expireToken makes the client's current token invalid: the simulator forgets every
// token, the real Keystone revokes this one.
func (w *world) expireToken(t *testing.T, c *openstack.Clients) {
	t.Helper()
	if w.srv != nil {
		w.srv.ExpireTokens()
		return
	}
	tok := openstack.TokenOf(c)
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodDelete, w.authURL+"/auth/tokens", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Auth-Token", tok)
	req.Header.Set("X-Subject-Token", tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("revoking the token: HTTP %d", resp.StatusCode)
	}
	// Neutron accepts a token it validated for token_cache_time (hack/openstack.sh
	// sets 5 s; real clouds keep the default of 5 minutes).
	time.Sleep(realTokenCache + time.Second)
}

const realTokenCache = 5 * time.Second

func TestMain(m *testing.M) {
	code := m.Run()
	if out := os.Getenv("BNERD_FIDELITY_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(fidelityTable()), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "writing %s: %v\n", out, err)
		}
	}
	if s := fidelitySummary(); s != "" {
		fmt.Println(s)
	}
	for _, l := range realClouds {
		if !l.used {
			continue
		}
		// Leave the conformance estate as the seeding made it.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if err := sweepReal(ctx, l.cloud); err != nil {
			fmt.Fprintf(os.Stderr, "resetting the conformance estate of %s: %v\n", l.cloud.Target(), err)
		}
		cancel()
	}
	os.Exit(code)
}

// logCloudErrors logs the last 40 ERROR and TRACE lines of the real cloud's log files
// written to since the case started, with the file each came from. Whole files are read,
// so older lines of those files and lines of cases running beside it on the same cloud
// can be among them: the timestamps tell them apart.
func logCloudErrors(t *testing.T, dir string, since time.Time) {
	files, _ := filepath.Glob(filepath.Join(dir, "log", "*"))
	var lines []string
	for _, f := range files {
		if fi, err := os.Stat(f); err != nil || fi.ModTime().Before(since) {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, " ERROR ") || strings.Contains(l, " TRACE ") {
				lines = append(lines, filepath.Base(f)+": "+l)
			}
		}
	}
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	if len(lines) > 0 {
		t.Logf("the cloud's services logged (the last ERROR lines of its log files written during the case):\n%s", strings.Join(lines, "\n"))
	}
}
