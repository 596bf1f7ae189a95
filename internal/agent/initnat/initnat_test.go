package initnat

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/agent/routing"
	"bnerd.net/vpn-operator/internal/agent/source"
	"bnerd.net/vpn-operator/internal/agent/statefile"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

type fakeNAT struct {
	mu        sync.Mutex
	applied   *gatewayconfig.NAT
	syncs     []*gatewayconfig.NAT
	deadlines []bool
	fail      error
	invalid   int
}

func (f *fakeNAT) Timed(ctx context.Context, m *gatewayconfig.NAT) (time.Duration, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := ctx.Deadline()
	f.deadlines = append(f.deadlines, ok)
	f.syncs = append(f.syncs, m)
	if f.fail != nil {
		f.applied = nil
		return time.Millisecond, true, f.fail
	}
	full := f.applied == nil
	f.applied = m
	return time.Millisecond, full, nil
}

func (f *fakeNAT) Applied() *gatewayconfig.NAT {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied
}

func (f *fakeNAT) Invalidate() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = nil
	f.invalid++
}

type fakeDrift struct {
	msgs     []string
	elements []bool
	dropped  uint64
}

func (d *fakeDrift) GuardDropped() (uint64, bool) { return d.dropped, true }

func (d *fakeDrift) Check(elements bool) (string, error) {
	d.elements = append(d.elements, elements)
	if len(d.msgs) == 0 {
		return "", nil
	}
	m := d.msgs[0]
	d.msgs = d.msgs[1:]
	return m, nil
}

func config(t *testing.T, peers ...string) []byte {
	t.Helper()
	cfg := &gatewayconfig.Config{
		Version: gatewayconfig.FormatVersion, Gateway: gatewayconfig.GatewayRef{Kind: "IPsecGateway", Namespace: "ns", Name: "gw"},
		ServiceCIDR: "100.64.7.0/24", GatewayAddress: "100.64.7.1", PortFixedIP: "203.0.113.5",
		SubnetCIDR: "203.0.113.0/24", SubnetGatewayIP: "203.0.113.1", FloatingIP: "192.0.2.100",
	}
	for i, p := range peers {
		cfg.Tunnels = append(cfg.Tunnels, gatewayconfig.Tunnel{Name: fmt.Sprintf("t%d", i), PeerAddress: p, PeerID: p,
			RemoteSubnets: []string{fmt.Sprintf("198.51.%d.0/24", 100+i)}, IKEProposals: []string{"aes128gcm16-prfsha256-x25519"},
			ESPProposals: []string{"aes128gcm16-x25519"}, IKERekeySeconds: 3600, ESPRekeySeconds: 600, DPDDelaySeconds: 5, DPDAction: "restart",
			PSK: gatewayconfig.SecretKeyRef{Secret: "t1-psk", Key: "psk"}})
	}
	b, err := gatewayconfig.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func forwarding(v string) func(string) ([]byte, error) {
	return func(p string) ([]byte, error) {
		if p != ForwardingSysctl("net1") {
			return nil, os.ErrNotExist
		}
		return []byte(v + "\n"), nil
	}
}

func newRunner() (*Runner, *fakeNAT, *fakeDrift, *[]routing.Params, *[]statefile.NATState, *[]string) {
	n, d := &fakeNAT{}, &fakeDrift{}
	var routes []routing.Params
	var states []statefile.NATState
	var logs []string
	r := &Runner{
		Config: Config{Interface: "net1", RouteTable: 100, RulePriority: 1000, ElementEvery: 3},
		NAT:    n, Drift: d,
		Route:      func(p routing.Params) error { routes = append(routes, p); return nil },
		ReadFile:   forwarding("1"),
		WriteState: func(s statefile.NATState) error { states = append(states, s); return nil },
		Logf:       func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) },
		Now:        func() time.Time { return time.Unix(1700000000, 0) },
	}
	return r, n, d, &routes, &states, &logs
}

func TestCheckForwarding(t *testing.T) {
	if err := CheckForwarding(forwarding("1"), "net1"); err != nil {
		t.Errorf("on: %v", err)
	}
	if err := CheckForwarding(forwarding("0"), "net1"); !errors.Is(err, ErrForwardingOff) || !strings.Contains(err.Error(), "net1/forwarding") {
		t.Errorf("off: %v", err)
	}
	// A missing device (no NIC2 in the pod) is a refusal too, naming the device.
	if err := CheckForwarding(forwarding("1"), "net9"); !errors.Is(err, ErrForwardingOff) || !strings.Contains(err.Error(), "net9") {
		t.Errorf("missing device: %v", err)
	}
	if !strings.Contains(ErrForwardingOff.Error(), "forwarding") {
		t.Error("the refusal does not name forwarding")
	}
}

// TestRunTurnsForwardingOn: a pod whose namespace does not forward (the host's initial
// namespace decides, and containers cannot write /proc/sys) is not refused: init-nat turns
// forwarding on for the port and the tunnel device before it checks, and again on every
// drift tick (charon recreates the tunnel device when it restarts).
func TestRunTurnsForwardingOn(t *testing.T) {
	r, _, _, _, _, _ := newRunner()
	r.TunnelInterface = "ipsec0"
	on := false
	var calls [][]string
	r.Forward = func(devs ...string) error { calls = append(calls, devs); on = true; return nil }
	r.ReadFile = func(p string) ([]byte, error) {
		if p == ForwardingSysctl("net1") && on {
			return []byte("1\n"), nil
		}
		return []byte("0\n"), nil
	}
	r.DriftInterval = 10 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := r.Run(ctx, make(chan source.Snapshot)); err != nil {
		t.Fatalf("Run refused although forwarding could be turned on: %v", err)
	}
	if len(calls) < 2 || strings.Join(calls[0], ",") != "net1,ipsec0" {
		t.Errorf("forwarding calls %v: want net1 and ipsec0 at start and on ticks", calls)
	}
}

// TestRunRefusesWithoutForwarding: with forwarding off the role stops before it reads a
// single snapshot or touches the table, and says why.
func TestRunRefusesWithoutForwarding(t *testing.T) {
	r, n, _, routes, _, _ := newRunner()
	r.ReadFile = forwarding("0")
	snaps := make(chan source.Snapshot, 1)
	snaps <- source.Snapshot{Config: config(t, "192.0.2.2")}
	err := r.Run(context.Background(), snaps)
	if !errors.Is(err, ErrForwardingOff) {
		t.Fatalf("Run returned %v", err)
	}
	if len(n.syncs) != 0 || len(*routes) != 0 || len(snaps) != 1 {
		t.Errorf("acted although it refused: %d syncs, %d route applies, snapshot consumed=%v", len(n.syncs), len(*routes), len(snaps) == 0)
	}
}

func TestConfigAppliesRoutesAndTableWithADeadline(t *testing.T) {
	r, n, _, routes, states, _ := newRunner()
	r.TunnelInterface = "ipsec0"
	r.config(context.Background(), source.Snapshot{Config: config(t, "192.0.2.2", "192.0.2.3")})
	if len(n.syncs) != 1 || n.syncs[0] == nil || len(n.syncs[0].PeerSubnets) != 2 {
		t.Fatalf("syncs %+v", n.syncs)
	}
	if !n.deadlines[0] {
		t.Error("the apply ran without a deadline")
	}
	if len(*routes) != 1 {
		t.Fatalf("routes applied %d times", len(*routes))
	}
	p := (*routes)[0]
	if p.Interface != "net1" || p.TunnelInterface != "ipsec0" || p.PortFixedIP != "203.0.113.5" || p.ServiceGatewayAddress != "100.64.7.1" ||
		p.Table != 100 || p.Priority != 1000 || strings.Join(p.PeerAddresses, ",") != "192.0.2.2,192.0.2.3" {
		t.Errorf("route params %+v", p)
	}
	if len(*states) != 1 || (*states)[0].Applies != 1 || (*states)[0].ApplyErrors != 0 || (*states)[0].LastApplyUnixSeconds != 1700000000 {
		t.Errorf("states %+v", *states)
	}
}

// TestRejectedConfigKeepsRuleset: an empty snapshot is ignored, an invalid one counts as
// an apply error and leaves the last good ruleset (no sync with nil, no invalidation).
func TestRejectedConfigKeepsRuleset(t *testing.T) {
	r, n, _, _, states, logs := newRunner()
	ctx := context.Background()
	r.config(ctx, source.Snapshot{})
	if len(n.syncs) != 0 || len(*states) != 0 {
		t.Fatal("an empty snapshot was acted on")
	}
	r.config(ctx, source.Snapshot{Config: config(t, "192.0.2.2")})
	good := n.applied
	r.config(ctx, source.Snapshot{Config: []byte(`{"version": 99}`)})
	if len(n.syncs) != 1 || n.applied != good || n.invalid != 0 {
		t.Errorf("a rejected config changed the ruleset: %d syncs, invalidated %d", len(n.syncs), n.invalid)
	}
	if last := (*states)[len(*states)-1]; last.ApplyErrors != 1 {
		t.Errorf("rejection not counted: %+v", last)
	}
	if !strings.Contains(strings.Join(*logs, "\n"), "keeping the current ruleset") {
		t.Errorf("logs: %v", *logs)
	}
}

// TestDriftRetriesRepairsAndCountsElementsEveryNth covers the timer path: nothing before
// a config; a failed apply is retried; drift triggers invalidate + full apply and is
// counted; element counts run on every ElementEvery-th check only.
func TestDriftRetriesRepairsAndCountsElementsEveryNth(t *testing.T) {
	r, n, d, _, states, _ := newRunner()
	ctx := context.Background()
	r.drift(ctx)
	if len(n.syncs) != 0 || len(d.elements) != 0 {
		t.Fatal("drift acted before any config")
	}
	n.fail = errors.New("nft: boom")
	r.config(ctx, source.Snapshot{Config: config(t, "192.0.2.2")})
	n.fail = nil
	r.drift(ctx) // retry, no check
	if len(n.syncs) != 2 || len(d.elements) != 0 {
		t.Fatalf("retry: %d syncs, %d checks", len(n.syncs), len(d.elements))
	}
	d.msgs = []string{"", "", "table bnerd-gw missing"}
	for i := 0; i < 3; i++ {
		r.drift(ctx)
	}
	if got := fmt.Sprint(d.elements); got != "[false false true]" {
		t.Errorf("element counting pattern %s", got)
	}
	if n.invalid != 1 || len(n.syncs) != 3 {
		t.Errorf("repair: invalidated %d, syncs %d", n.invalid, len(n.syncs))
	}
	last := (*states)[len(*states)-1]
	if last.DriftRepairs != 1 || last.Applies != 3 || last.ApplyErrors != 1 {
		t.Errorf("state %+v", last)
	}
	// The guard's drop count reaches the state file when it changes, and only then.
	writes := len(*states)
	d.dropped = 7
	r.drift(ctx)
	r.drift(ctx)
	if len(*states) != writes+1 || (*states)[len(*states)-1].GuardDroppedPackets != 7 {
		t.Errorf("guard drops: %d writes after the change, last %+v", len(*states)-writes, (*states)[len(*states)-1])
	}
}

// TestRunAppliesSnapshotsUntilCancelled runs the loop itself.
func TestRunAppliesSnapshotsUntilCancelled(t *testing.T) {
	r, n, _, _, _, _ := newRunner()
	r.DriftInterval = time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	snaps := make(chan source.Snapshot, 1)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, snaps) }()
	snaps <- source.Snapshot{Config: config(t, "192.0.2.2")}
	deadline := time.After(time.Minute)
	for n.Applied() == nil {
		select {
		case <-deadline:
			t.Fatal("never applied")
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
