package vici

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"sync"
	"syscall"
	"time"

	govici "github.com/strongswan/govici/vici"
)

// CallTimeout bounds every exchange with charon: connecting, each command, a streamed
// listing, an event subscription. A charon that accepts the socket but never answers
// (hung, or stopped in a debugger) costs one timeout per round, never a stuck role.
// A variable only so tests can shorten it.
var CallTimeout = 10 * time.Second

// Dial opens a VICI session on socket; the connect is bounded by CallTimeout.
func Dial(socket string) (*govici.Session, error) {
	d := &net.Dialer{Timeout: CallTimeout}
	return govici.NewSession(govici.WithSocketPath(socket), govici.WithDialContext(d.DialContext))
}

// ListSAsOn returns a function that lists the named connections' SAs over a fresh
// session on socket, for the status agent and the exporter, which must see a restarted
// charon at once. A socket nobody listens on yields ErrCharonNotRunning. The function
// remembers which connections its last listing saw up: one of them that reads down is
// listed again a few times before that counts (settle), so an IKE rekey the listing
// caught halfway never reads as an outage, and a real one reads down at most the sum of
// relistPauses later. Each caller keeps its own function (its own memory); it is safe
// for concurrent use (scrapes may overlap).
func ListSAsOn(socket string) func(ctx context.Context, names []string) (map[string][]IKESA, error) {
	var mu sync.Mutex
	up := map[string]bool{}
	return func(ctx context.Context, names []string) (map[string][]IKESA, error) {
		s, err := Dial(socket)
		if err != nil {
			if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
				// A charon that is not running holds no SA: nothing was up.
				mu.Lock()
				clear(up)
				mu.Unlock()
				return nil, fmt.Errorf("%w: %v", ErrCharonNotRunning, err)
			}
			return nil, err
		}
		defer s.Close()
		if len(names) == 0 {
			return map[string][]IKESA{}, nil
		}
		mu.Lock()
		last := maps.Clone(up)
		mu.Unlock()
		sas, err := listSettled(ctx, s, names, func(n string) bool { return last[n] })
		if err != nil {
			return nil, err
		}
		now := make(map[string]bool, len(names))
		for _, n := range names {
			now[n] = Summarize(sas[n], n).Up
		}
		mu.Lock()
		up = now
		mu.Unlock()
		return sas, nil
	}
}

// EventSession is the part of a VICI session the event watcher uses (*govici.Session).
type EventSession interface {
	Subscribe(events ...string) error
	NotifyEvents(c chan<- govici.Event)
	Close() error
}

// errSubscribeTimeout: charon did not confirm the event registration in time.
var errSubscribeTimeout = errors.New("event subscription timed out")

// Watcher calls OnEvent for every event of Events and keeps its subscription across
// charon restarts: when charon goes away the session's event channel closes, and the
// watcher dials again every Retry.
type Watcher struct {
	Dial   func() (EventSession, error)
	Events []string
	// OnConnect runs after every successful subscription (a restarted charon has new
	// state worth reading at once).
	OnConnect func()
	OnEvent   func(govici.Event)
	Retry     time.Duration
	Logf      func(format string, args ...any)
	// Timeout bounds the subscription (default CallTimeout).
	Timeout time.Duration
}

// Run watches until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	retry := w.Retry
	if retry <= 0 {
		retry = time.Second
	}
	connected := false
	for ctx.Err() == nil {
		// Only transitions are logged, not every retry while charon is down.
		if err := w.once(ctx); err == nil {
			connected = true
		} else if connected {
			connected = false
			if w.Logf != nil {
				w.Logf("charon events: %v; reconnecting every %s", err, retry)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
}

// once holds one session until its event channel closes or ctx ends. It returns nil when
// a subscription was made (and later lost), an error when none was.
func (w *Watcher) once(ctx context.Context) error {
	s, err := w.Dial()
	if err != nil {
		return err
	}
	defer s.Close()
	if err := w.subscribe(s); err != nil {
		return err
	}
	ch := make(chan govici.Event, 1024) // govici drops events that find the channel full
	s.NotifyEvents(ch)
	if w.OnConnect != nil {
		w.OnConnect()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-ch:
			if !ok {
				return nil
			}
			if w.OnEvent != nil {
				w.OnEvent(ev)
			}
		}
	}
}

// subscribe bounds govici's Subscribe, which takes no context: on timeout the session
// is closed, which ends the pending call.
func (w *Watcher) subscribe(s EventSession) error {
	timeout := w.Timeout
	if timeout <= 0 {
		timeout = CallTimeout
	}
	done := make(chan error, 1)
	go func() { done <- s.Subscribe(w.Events...) }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		_ = s.Close()
		<-done
		return errSubscribeTimeout
	}
}

// DialEvents returns a Watcher.Dial for socket.
func DialEvents(socket string) func() (EventSession, error) {
	return func() (EventSession, error) { return Dial(socket) }
}
