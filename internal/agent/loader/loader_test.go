package loader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// TestLoopAppliesSnapshotsAndRetries: an incomplete snapshot is not applied; a complete
// one is, with a deadline; the timer re-applies it (a restarted charon is reloaded
// without a config change); while charon stays unreachable the same error is logged
// once, and recovery is logged.
func TestLoopAppliesSnapshotsAndRetries(t *testing.T) {
	down := errors.New("connecting to charon: dial unix /run/charon.vici: connect: no such file or directory")
	f := &fakeApplier{errs: []error{nil, down, down, down}}
	var lg logs
	l := &Loop{Applier: f, Interval: 5 * time.Millisecond, Logf: lg.logf}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	snaps := make(chan source.Snapshot, 1)
	go l.Run(ctx, snaps)
	snaps <- source.Snapshot{Config: []byte("{}"), Swanctl: "conns"} // no secrets: incomplete
	time.Sleep(30 * time.Millisecond)
	if f.n() != 0 {
		t.Fatalf("an incomplete snapshot was applied: %+v", f.calls)
	}
	snaps <- source.Snapshot{Config: []byte("{}"), Swanctl: "conns", Secrets: "keys"}
	waitFor(t, "five applies", func() bool { return f.n() >= 5 })
	if c := f.last(); c.swanctl != "conns" || c.secrets != "keys" || !c.deadline {
		t.Errorf("apply %+v", c)
	}
	waitFor(t, "recovery logged", func() bool { return strings.Contains(lg.all(), "charon reachable again") })
	if n := strings.Count(lg.all(), "no such file"); n != 1 {
		t.Errorf("the unchanged error was logged %d times:\n%s", n, lg.all())
	}
}

// TestLoopReadsKeysFromTheMountedSecret: with SecretsFile the keys come from the file,
// not from the snapshot, and a missing file stops the round.
func TestLoopReadsKeysFromTheMountedSecret(t *testing.T) {
	f := &fakeApplier{}
	files := map[string]string{}
	var mu sync.Mutex
	l := &Loop{Applier: f, Interval: 5 * time.Millisecond, SecretsFile: "/secrets/secrets.conf", ReadFile: func(p string) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		v, ok := files[p]
		if !ok {
			return nil, os.ErrNotExist
		}
		return []byte(v), nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	snaps := make(chan source.Snapshot, 1)
	go l.Run(ctx, snaps)
	snaps <- source.Snapshot{Config: []byte("{}"), Swanctl: "conns"}
	time.Sleep(30 * time.Millisecond)
	if f.n() != 0 {
		t.Fatal("applied without keys")
	}
	mu.Lock()
	files["/secrets/secrets.conf"] = "from-file"
	mu.Unlock()
	waitFor(t, "apply with the file's keys", func() bool { return f.n() > 0 })
	if c := f.last(); c.secrets != "from-file" {
		t.Errorf("keys %q", c.secrets)
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
	cfg := &gatewayconfig.Config{
		Version: 1, Gateway: gatewayconfig.GatewayRef{Kind: "IPsecGateway", Namespace: "ns", Name: "gw"},
		ServiceCIDR: "100.64.7.0/24", GatewayAddress: "100.64.7.1", PortFixedIP: "203.0.113.5",
		SubnetCIDR: "203.0.113.0/24", SubnetGatewayIP: "203.0.113.1", FloatingIP: "192.0.2.100",
		Tunnels: []gatewayconfig.Tunnel{{Name: "t0", PeerAddress: "192.0.2.2", PeerID: "192.0.2.2", RemoteSubnets: []string{"198.51.100.0/24"},
			IKEProposals: []string{"aes128gcm16-prfsha256-x25519"}, ESPProposals: []string{"aes128gcm16-x25519"},
			IKERekeySeconds: 3600, ESPRekeySeconds: 600, DPDDelaySeconds: 5, DPDAction: "restart"}},
	}
	js, err := gatewayconfig.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
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
	snaps <- source.Snapshot{Config: js, Swanctl: "conns", Secrets: "keys"}
	waitFor(t, "the gate consulted", func() bool { return asked.Load() == "203.0.113.5" })
	time.Sleep(30 * time.Millisecond)
	if f.n() != 0 {
		t.Fatal("connections loaded before the port's routing was in place")
	}
	if !strings.Contains(lg.all(), "waiting for the port's policy routing") {
		t.Errorf("the wait is not logged:\n%s", lg.all())
	}
	routed.Store(true)
	waitFor(t, "loaded once routed", func() bool { return f.n() > 0 })
	if got, _ := f.addr.Load().(string); got != "203.0.113.5" {
		t.Errorf("the applier was told the local address %q", got)
	}
}

// TestLoopWaitsForTheServiceAddress: with the port's routing in place but .1 of the
// service CIDR not yet on the loopback, nothing is loaded (a child SA attempted now would
// fail to install its routes); once it is there, loading starts.
func TestLoopWaitsForTheServiceAddress(t *testing.T) {
	cfg := &gatewayconfig.Config{
		Version: 1, Gateway: gatewayconfig.GatewayRef{Kind: "IPsecGateway", Namespace: "ns", Name: "gw"},
		ServiceCIDR: "100.64.7.0/24", GatewayAddress: "100.64.7.1", PortFixedIP: "203.0.113.5",
		SubnetCIDR: "203.0.113.0/24", SubnetGatewayIP: "203.0.113.1", FloatingIP: "192.0.2.100",
		Tunnels: []gatewayconfig.Tunnel{{Name: "t0", PeerAddress: "192.0.2.2", PeerID: "192.0.2.2", RemoteSubnets: []string{"198.51.100.0/24"},
			IKEProposals: []string{"aes128gcm16-prfsha256-x25519"}, ESPProposals: []string{"aes128gcm16-x25519"},
			IKERekeySeconds: 3600, ESPRekeySeconds: 600, DPDDelaySeconds: 5, DPDAction: "restart"}},
	}
	js, err := gatewayconfig.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
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
	snaps <- source.Snapshot{Config: js, Swanctl: "conns", Secrets: "keys"}
	waitFor(t, "the service address consulted", func() bool { return asked.Load() == "100.64.7.1" })
	time.Sleep(30 * time.Millisecond)
	if f.n() != 0 {
		t.Fatal("connections loaded before the service CIDR's .1 was local")
	}
	if !strings.Contains(lg.all(), "waiting for 100.64.7.1") {
		t.Errorf("the wait is not logged:\n%s", lg.all())
	}
	present.Store(true)
	waitFor(t, "loaded once the address is there", func() bool { return f.n() > 0 })
}
