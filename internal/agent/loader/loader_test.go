package loader

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/psk"
	"bnerd.net/vpn-operator/internal/agent/source"
	"bnerd.net/vpn-operator/internal/agent/vici"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

type call struct {
	swanctl, secrets string
	deadline         bool
}

type fakeApplier struct {
	mu    sync.Mutex
	calls []call
	errs  []error
}

func (f *fakeApplier) Apply(ctx context.Context, swanctl, secrets string) (vici.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := ctx.Deadline()
	f.calls = append(f.calls, call{swanctl, secrets, ok})
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		return vici.Result{}, err
	}
	return vici.Result{}, nil
}

func (f *fakeApplier) n() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func (f *fakeApplier) last() call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[len(f.calls)-1]
}

type logs struct {
	mu sync.Mutex
	l  []string
}

func (l *logs) logf(f string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.l = append(l.l, fmt.Sprintf(f, a...))
}

func (l *logs) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.l, "\n")
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(time.Minute) // bounds a hung test
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("never: %s", what)
		case <-time.After(time.Millisecond):
		}
	}
}

// config builds a valid two-tunnel gateway.json (tunnels hq and branch).
func config(t *testing.T, mutate ...func(*v1alpha1.GatewaySpec)) []byte {
	t.Helper()
	spec := &v1alpha1.GatewaySpec{
		Tunnels: []v1alpha1.Tunnel{
			{Name: "hq", Peer: v1alpha1.Peer{Address: "198.51.100.7", Subnets: []string{"192.168.10.0/24"}}, PreSharedKey: v1alpha1.SecretKeyRef{Name: "acme-psk", Key: "hq"}},
			{Name: "branch", Peer: v1alpha1.Peer{Address: "203.0.113.9", Subnets: []string{"172.16.5.0/24"}}, PreSharedKey: v1alpha1.SecretKeyRef{Name: "acme-psk", Key: "branch"}},
		},
		Exposures: []v1alpha1.Exposure{{Name: "web", Target: v1alpha1.Target{Address: "10.250.0.20", Ports: []v1alpha1.PortSpec{{Port: 443}}}}},
	}
	for _, m := range mutate {
		m(spec)
	}
	cfg, err := gatewayconfig.Build(gatewayconfig.Input{Kind: v1alpha1.KindIPsecGateway, Namespace: "tenant-a", Name: "acme", Spec: spec,
		Status: &v1alpha1.GatewayStatus{ServiceCIDR: "100.64.3.0/24", FloatingIP: "192.0.2.44", PortFixedIP: "10.254.0.17",
			SubnetCIDR: "10.254.0.0/24", SubnetGatewayIP: "10.254.0.1", Exposures: []v1alpha1.AllocatedAddress{{Name: "web", VirtualIP: "100.64.3.10"}}}})
	if err != nil {
		t.Fatal(err)
	}
	js, err := gatewayconfig.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

const (
	hqKey     = "hq key of at least twenty bytes"
	branchKey = "branch key of at least twenty bytes"
)

func secretsFile(t *testing.T, js []byte, keys map[string]string) string {
	t.Helper()
	cfg, err := gatewayconfig.Unmarshal(js)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range keys {
		names = append(names, n)
	}
	text, err := gatewayconfig.RenderSecretsFor(cfg, keys, names)
	if err != nil {
		t.Fatal(err)
	}
	return text
}

func connections(t *testing.T, swanctl string) []string {
	t.Helper()
	root, err := gatewayconfig.ParseSettings(swanctl)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range root.Sub("connections").Sections {
		out = append(out, c.Name)
	}
	return out
}

// TestLoopAppliesSnapshotsAndRetries: a snapshot without a config is not applied; a
// complete one is, rendered by the agent from gateway.json, with a deadline; the timer
// re-applies it (a restarted charon is reloaded without a config change); while charon
// stays unreachable the same error is logged once, and recovery is logged.
func TestLoopAppliesSnapshotsAndRetries(t *testing.T) {
	down := errors.New("connecting to charon: dial unix /run/charon.vici: connect: no such file or directory")
	f := &fakeApplier{errs: []error{nil, down, down, down}}
	var lg logs
	l := &Loop{Applier: f, Interval: 5 * time.Millisecond, Logf: lg.logf}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	snaps := make(chan source.Snapshot, 1)
	go l.Run(ctx, snaps)
	js := config(t)
	snaps <- source.Snapshot{Secrets: "no config"}
	time.Sleep(30 * time.Millisecond)
	if f.n() != 0 {
		t.Fatalf("a snapshot without a config was applied: %+v", f.calls)
	}
	snaps <- source.Snapshot{Config: js, Secrets: secretsFile(t, js, map[string]string{"hq": hqKey, "branch": branchKey})}
	waitFor(t, "five applies", func() bool { return f.n() >= 5 })
	c := f.last()
	if got := connections(t, c.swanctl); strings.Join(got, ",") != "hq,branch" || !c.deadline {
		t.Errorf("apply %v %+v", got, c)
	}
	keys, err := gatewayconfig.ParseSecrets(c.secrets)
	if err != nil || len(keys) != 2 || string(keys[0].Secret) != hqKey {
		t.Errorf("keys %v %+v", err, keys)
	}
	waitFor(t, "recovery logged", func() bool { return strings.Contains(lg.all(), "charon reachable again") })
	if n := strings.Count(lg.all(), "no such file"); n != 1 {
		t.Errorf("the unchanged error was logged %d times:\n%s", n, lg.all())
	}
	if strings.Contains(lg.all(), hqKey) || strings.Contains(lg.all(), branchKey) {
		t.Errorf("a key reached the log:\n%s", lg.all())
	}
}

// TestLoopNeverStartsATunnelWithoutItsKey: a tunnel whose key is missing or below the
// floor is left out of what charon loads and reported as waiting, with the reason; the
// other tunnels load. Once its key arrives it loads.
func TestLoopNeverStartsATunnelWithoutItsKey(t *testing.T) {
	f := &fakeApplier{}
	var lg logs
	l := &Loop{Applier: f, Interval: 5 * time.Millisecond, Logf: lg.logf}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	snaps := make(chan source.Snapshot, 1)
	go l.Run(ctx, snaps)
	js := config(t)
	// The branch key is too short: RenderSecretsFor would refuse it, so the file is
	// written by hand the way a careless operator could.
	short := strings.Replace(secretsFile(t, js, map[string]string{"hq": hqKey, "branch": branchKey}),
		base64.StdEncoding.EncodeToString([]byte(branchKey)), base64.StdEncoding.EncodeToString([]byte("zq9x-short-key")), 1)
	snaps <- source.Snapshot{Config: js, Secrets: short}
	waitFor(t, "an apply", func() bool { return f.n() > 0 })
	c := f.last()
	if got := connections(t, c.swanctl); strings.Join(got, ",") != "hq" {
		t.Fatalf("loaded %v; the tunnel without a usable key must not be", got)
	}
	if keys, _ := gatewayconfig.ParseSecrets(c.secrets); len(keys) != 1 || keys[0].Section != gatewayconfig.SecretSectionPrefix+"hq" {
		t.Fatalf("keys %+v", keys)
	}
	if w := l.Waiting(); !strings.Contains(w["branch"], "Secret tenant-a/acme-psk key branch is shorter than 20 bytes") || len(w) != 1 {
		t.Fatalf("waiting %v", w)
	}
	snaps <- source.Snapshot{Config: js, Secrets: secretsFile(t, js, map[string]string{"hq": hqKey})}
	waitFor(t, "branch waiting for a missing key", func() bool { return strings.Contains(l.Waiting()["branch"], "no key for tunnel branch") })
	snaps <- source.Snapshot{Config: js, Secrets: secretsFile(t, js, map[string]string{"hq": hqKey, "branch": branchKey})}
	waitFor(t, "both loaded", func() bool { return strings.Join(connections(t, f.last().swanctl), ",") == "hq,branch" })
	if w := l.Waiting(); len(w) != 0 {
		t.Fatalf("still waiting: %v", w)
	}
	if strings.Contains(lg.all(), "zq9x") {
		t.Errorf("a key reached the log:\n%s", lg.all())
	}
}

// TestLoopKeepsTheLastValidConfig: a config the agent's own check refuses (an exposure
// at the cloud's metadata service, as a hand-edited ConfigMap could carry) is never
// rendered; the last valid one stays loaded.
func TestLoopKeepsTheLastValidConfig(t *testing.T) {
	f := &fakeApplier{}
	var lg logs
	l := &Loop{Applier: f, Interval: 5 * time.Millisecond, Logf: lg.logf}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	snaps := make(chan source.Snapshot, 1)
	go l.Run(ctx, snaps)
	js := config(t)
	keys := secretsFile(t, js, map[string]string{"hq": hqKey, "branch": branchKey})
	snaps <- source.Snapshot{Config: js, Secrets: keys}
	waitFor(t, "an apply", func() bool { return f.n() > 0 })
	hostile := strings.Replace(string(js), `"targetAddress": "10.250.0.20"`, `"targetAddress": "169.254.169.254"`, 1)
	if hostile == string(js) {
		t.Fatal("the test did not alter the config")
	}
	snaps <- source.Snapshot{Config: []byte(hostile), Secrets: keys}
	waitFor(t, "the refusal logged", func() bool { return strings.Contains(lg.all(), "metadata service") })
	n := f.n()
	waitFor(t, "more applies", func() bool { return f.n() > n+2 })
	if got := connections(t, f.last().swanctl); strings.Join(got, ",") != "hq,branch" {
		t.Fatalf("after the refused config: %v", got)
	}
}

type addressedApplier struct {
	fakeApplier
	addr atomic.Value
}

func (a *addressedApplier) SetLocalAddress(s string) { a.addr.Store(s) }

// TestLoopWaitsForThePortRouting: connections are loaded only once the port's policy
// routing is in place (so IKE cannot leave over the pod network when the loader starts
// before init-nat), and the applier learns the port's address.
func TestLoopWaitsForThePortRouting(t *testing.T) {
	js := config(t)
	keys := secretsFile(t, js, map[string]string{"hq": hqKey, "branch": branchKey})
	f := &addressedApplier{}
	var routed atomic.Bool
	var asked atomic.Value
	var lg logs
	l := &Loop{Applier: f, Interval: 5 * time.Millisecond, Logf: lg.logf, PortRouting: func(ip string) (bool, error) {
		asked.Store(ip)
		return routed.Load(), nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	snaps := make(chan source.Snapshot, 1)
	go l.Run(ctx, snaps)
	snaps <- source.Snapshot{Config: js, Secrets: keys}
	waitFor(t, "the gate consulted", func() bool { return asked.Load() == "10.254.0.17" })
	time.Sleep(30 * time.Millisecond)
	if f.n() != 0 {
		t.Fatal("connections loaded before the port's routing was in place")
	}
	if !strings.Contains(lg.all(), "waiting for the port's policy routing") {
		t.Errorf("the wait is not logged:\n%s", lg.all())
	}
	routed.Store(true)
	waitFor(t, "loaded once routed", func() bool { return f.n() > 0 })
	if got, _ := f.addr.Load().(string); got != "10.254.0.17" {
		t.Errorf("the applier was told the local address %q", got)
	}
}

// TestLoopWaitsForTheServiceAddress: with the port's routing in place but .1 of the
// service CIDR not yet on the loopback, nothing is loaded (a child SA attempted now would
// fail to install its routes); once it is there, loading starts.
func TestLoopWaitsForTheServiceAddress(t *testing.T) {
	js := config(t)
	keys := secretsFile(t, js, map[string]string{"hq": hqKey, "branch": branchKey})
	f := &addressedApplier{}
	var present atomic.Bool
	var asked atomic.Value
	var lg logs
	l := &Loop{Applier: f, Interval: 5 * time.Millisecond, Logf: lg.logf,
		PortRouting: func(string) (bool, error) { return true, nil },
		ServiceAddress: func(a string) (bool, error) {
			asked.Store(a)
			return present.Load(), nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	snaps := make(chan source.Snapshot, 1)
	go l.Run(ctx, snaps)
	snaps <- source.Snapshot{Config: js, Secrets: keys}
	waitFor(t, "the service address consulted", func() bool { return asked.Load() == "100.64.3.1" })
	time.Sleep(30 * time.Millisecond)
	if f.n() != 0 {
		t.Fatal("connections loaded before the service CIDR's .1 was local")
	}
	if !strings.Contains(lg.all(), "waiting for 100.64.3.1") {
		t.Errorf("the wait is not logged:\n%s", lg.all())
	}
	present.Store(true)
	waitFor(t, "loaded once the address is there", func() bool { return f.n() > 0 })
}

// pendingKeys is a key source whose branch Secret has not been read once yet until
// read is set; hq's key is known from the start.
type pendingKeys struct {
	read    atomic.Bool
	changed chan struct{}
}

func (p *pendingKeys) Follow([]string)          {}
func (p *pendingKeys) Changed() <-chan struct{} { return p.changed }
func (p *pendingKeys) Keys(cfg *gatewayconfig.Config) psk.Keys {
	k := psk.Keys{ByTunnel: map[string]string{"hq": hqKey}, Waiting: map[string]string{}, Pending: map[string]bool{}}
	if p.read.Load() {
		k.ByTunnel["branch"] = branchKey
	} else {
		k.Waiting["branch"] = "reading Secret tenant-a/acme-psk"
		k.Pending["branch"] = true
	}
	return k
}

// TestLoopHoldsWhileAKeyWasNeverRead: an agent restarted next to a running charon has
// not read its Secrets yet. While a tunnel's key is pending (not known to be missing,
// only not yet read), the loop changes nothing in charon (rendering without that tunnel
// would unload it and end a working tunnel); once read, both tunnels load. A key that
// stays unread past KeyWait counts as missing: the other tunnels load without it.
func TestLoopHoldsWhileAKeyWasNeverRead(t *testing.T) {
	t.Run("read in time", func(t *testing.T) {
		f := &fakeApplier{}
		var lg logs
		keys := &pendingKeys{changed: make(chan struct{}, 1)}
		l := &Loop{Applier: f, Keys: keys, Interval: 5 * time.Millisecond, KeyWait: time.Hour, Logf: lg.logf}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		snaps := make(chan source.Snapshot, 1)
		go l.Run(ctx, snaps)
		snaps <- source.Snapshot{Config: config(t)}
		waitFor(t, "the hold logged", func() bool { return strings.Contains(lg.all(), "waiting for the pre-shared keys of branch to be read") })
		time.Sleep(50 * time.Millisecond) // about ten rounds
		if n := f.n(); n != 0 {
			t.Fatalf("charon was changed %d times while a key was still being read: %+v", n, f.last())
		}
		keys.read.Store(true)
		keys.changed <- struct{}{}
		waitFor(t, "both loaded", func() bool { return f.n() > 0 && strings.Join(connections(t, f.last().swanctl), ",") == "hq,branch" })
	})
	t.Run("never read", func(t *testing.T) {
		f := &fakeApplier{}
		keys := &pendingKeys{changed: make(chan struct{}, 1)}
		l := &Loop{Applier: f, Keys: keys, Interval: 5 * time.Millisecond, KeyWait: 30 * time.Millisecond}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		snaps := make(chan source.Snapshot, 1)
		go l.Run(ctx, snaps)
		snaps <- source.Snapshot{Config: config(t)}
		waitFor(t, "hq loaded without branch", func() bool { return f.n() > 0 && strings.Join(connections(t, f.last().swanctl), ",") == "hq" })
		if w := l.Waiting(); !strings.Contains(w["branch"], "reading Secret") {
			t.Fatalf("waiting %v", w)
		}
	})
}

// TestLoopRetriesSoonAfterAFailedRound: a round that fails because charon does not answer
// yet (its container starts after the agent's) is retried after RetryFirst, doubling, not
// at the next Interval. With an Interval of an hour, only the retry can bring the
// applies that follow the failures.
func TestLoopRetriesSoonAfterAFailedRound(t *testing.T) {
	down := errors.New("connecting to charon: dial unix /run/charon.vici: connect: no such file or directory")
	f := &fakeApplier{errs: []error{down, down, down, nil}}
	var lg logs
	l := &Loop{Applier: f, Interval: time.Hour, RetryFirst: time.Millisecond, Logf: lg.logf}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	snaps := make(chan source.Snapshot, 1)
	go l.Run(ctx, snaps)
	js := config(t)
	snaps <- source.Snapshot{Config: js, Secrets: secretsFile(t, js, map[string]string{"hq": hqKey, "branch": branchKey})}
	waitFor(t, "four applies, the last one succeeding", func() bool { return f.n() >= 4 })
	waitFor(t, "recovery logged", func() bool { return strings.Contains(lg.all(), "charon reachable again") })
	// Once a round succeeded nothing is retried: the hour's tick is far.
	time.Sleep(50 * time.Millisecond)
	if n := f.n(); n != 4 {
		t.Errorf("%d applies after the successful one: a retry outlived its success", n)
	}
}
