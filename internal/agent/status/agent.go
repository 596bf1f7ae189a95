package status

import (
	"context"
	"errors"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/vici"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// WriteFunc stores tunnel state in the status of the gateway ref names and reports
// whether it wrote.
type WriteFunc func(ctx context.Context, ref gatewayconfig.GatewayRef, tunnels []v1alpha1.TunnelState, ready string) (bool, error)

// ClientWriter is the production WriteFunc: one Writer per gateway on c, kept for the
// life of the process (its first write is the new agent's announcement), with a
// heartbeat at least every heartbeat (zero: the default).
func ClientWriter(c client.Client, heartbeat time.Duration) WriteFunc {
	var mu sync.Mutex
	writers := map[gatewayconfig.GatewayRef]*Writer{}
	return func(ctx context.Context, ref gatewayconfig.GatewayRef, tunnels []v1alpha1.TunnelState, ready string) (bool, error) {
		mu.Lock()
		w := writers[ref]
		if w == nil {
			w = &Writer{Client: c, Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name, Heartbeat: heartbeat}
			writers[ref] = w
		}
		mu.Unlock()
		return w.Write(ctx, tunnels, ready)
	}
}

// Agent is the status-agent loop: on every kick (a VICI event) and every Interval it
// reads charon's SAs and hands the tunnels' state to Write, which writes it when it
// changed or a heartbeat is due.
type Agent struct {
	// Tunnels returns the configured tunnels and the gateway they belong to.
	Tunnels func() ([]string, gatewayconfig.GatewayRef)
	// SAs lists the named tunnels' SAs (vici.ListSAsOn: a fresh VICI session each time,
	// since charon may have restarted, and a listing that caught an IKE rekey halfway
	// taken again, so a rekey never reads as Down).
	SAs func(ctx context.Context, names []string) (map[string][]vici.IKESA, error)
	// Notes adds what is known beyond the listing (causes, the loader's plan). Optional.
	Notes func(tunnel string) Note
	// State, when set, computes the tunnels instead of SAs (a WireGuard gateway's
	// peers, from the wireguard role's state file).
	State func(names []string, now time.Time) ([]v1alpha1.TunnelState, string)
	Write WriteFunc
	// Waiting, when set, names the tunnels the loader holds back and why (a missing
	// pre-shared key): such a tunnel, unless up, is reported with ReasonWaitingForKey.
	Waiting func() map[string]string
	// Kick triggers a round besides the timer.
	Kick     <-chan struct{}
	Interval time.Duration
	// Timeout bounds one round's VICI listing and API write.
	Timeout time.Duration
	Now     func() time.Time
	Logf    func(format string, args ...any)

	// failures counts consecutive listings that failed although charon's socket answered.
	failures int
}

// listingGrace is how many consecutive failed listings of a charon that is running (it
// accepted the connection) are not reported: a charon busy past the call timeout says
// nothing about the tunnels, and reporting them down would be false. A charon that is
// not running is reported at once.
const listingGrace = 2

func (a *Agent) logf(format string, args ...any) {
	if a.Logf != nil {
		a.Logf(format, args...)
	}
}

// Round reads and writes once; it returns what it wrote (nil when nothing was due).
func (a *Agent) Round(ctx context.Context) (tunnels []v1alpha1.TunnelState, ready string, wrote bool) {
	names, ref := a.Tunnels()
	if len(names) == 0 {
		return nil, "", false
	}
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	if a.State != nil {
		tunnels, ready = a.State(names, now())
	} else {
		cur, err := a.SAs(ctx, names)
		notes := a.Notes
		if err != nil {
			if !errors.Is(err, vici.ErrCharonNotRunning) && a.failures < listingGrace {
				a.failures++
				a.logf("status: listing the SAs failed (%v); keeping the last report", err)
				return nil, "", false
			}
			// charon unreachable: every tunnel is down, which is worth reporting.
			cur = nil
			msg := err.Error()
			notes = func(string) Note {
				return Note{Reason: ReasonCharonUnreachable, Message: "charon does not answer over VICI: " + msg}
			}
		} else {
			a.failures = 0
		}
		if a.Waiting != nil {
			// A tunnel the loader holds back for want of a usable key says so, whatever
			// charon last said about it.
			waiting, inner := a.Waiting(), notes
			notes = func(name string) Note {
				if why, ok := waiting[name]; ok {
					return Note{Reason: ReasonWaitingForKey, Message: "not started, waiting for its pre-shared key: " + why}
				}
				if inner == nil {
					return Note{}
				}
				return inner(name)
			}
		}
		tunnels, ready = Compute(names, cur, notes, now())
	}
	wrote, err := a.Write(ctx, ref, tunnels, ready)
	if err != nil {
		a.logf("status: %v", err)
		return tunnels, ready, false
	}
	if wrote {
		a.logf("status: tunnels %s", ready)
	}
	return tunnels, ready, wrote
}

// Run loops until ctx ends.
func (a *Agent) Run(ctx context.Context) {
	interval := a.Interval
	if interval <= 0 {
		interval = 10 * time.Second
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-a.Kick:
		}
		a.Round(ctx)
	}
}

// Kicker returns a one-slot channel and a function that fills it without blocking, for
// VICI event callbacks.
func Kicker() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	return ch, func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
