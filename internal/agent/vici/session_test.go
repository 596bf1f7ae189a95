package vici

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	govici "github.com/strongswan/govici/vici"
)

// fakeSession delivers its events and then closes the channel, as govici does when
// charon goes away.
type fakeSession struct {
	events    []string
	block     bool // Subscribe never answers until Close
	closed    chan struct{}
	closeOnce sync.Once
}

func newFake(block bool, events ...string) *fakeSession {
	return &fakeSession{events: events, block: block, closed: make(chan struct{})}
}

func (f *fakeSession) Subscribe(...string) error {
	if f.block {
		<-f.closed
		return errors.New("session closed")
	}
	return nil
}

func (f *fakeSession) NotifyEvents(c chan<- govici.Event) {
	go func() {
		for _, e := range f.events {
			c <- govici.Event{Name: e}
		}
		close(c)
	}()
}

func (f *fakeSession) Close() error {
	f.closeOnce.Do(func() { close(f.closed) })
	return nil
}

func (f *fakeSession) isClosed() bool {
	select {
	case <-f.closed:
		return true
	default:
		return false
	}
}

// TestWatcherReconnects: a dial failure, a subscription charon never confirms (bounded
// by the timeout, the session closed), then two sessions that end as charon restarts:
// every event of both arrives, OnConnect runs per subscription, each session is closed.
func TestWatcherReconnects(t *testing.T) {
	hung := newFake(true)
	first := newFake(false, "ike-updown", "child-updown")
	second := newFake(false, "child-rekey")
	var mu sync.Mutex
	plan := []any{errors.New("connect: no such file"), hung, first, second}
	dials := 0
	var events []string
	connects := 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &Watcher{
		Dial: func() (EventSession, error) {
			mu.Lock()
			defer mu.Unlock()
			dials++
			if len(plan) == 0 {
				return nil, errors.New("charon gone for good")
			}
			p := plan[0]
			plan = plan[1:]
			if err, ok := p.(error); ok {
				return nil, err
			}
			return p.(*fakeSession), nil
		},
		OnConnect: func() { mu.Lock(); connects++; mu.Unlock() },
		OnEvent:   func(ev govici.Event) { mu.Lock(); events = append(events, ev.Name); mu.Unlock() },
		Retry:     time.Millisecond,
		Timeout:   20 * time.Millisecond,
	}
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	deadline := time.After(time.Minute)
	for {
		mu.Lock()
		n := len(events)
		mu.Unlock()
		if n == 3 {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("events %v", events)
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if events[0] != "ike-updown" || events[1] != "child-updown" || events[2] != "child-rekey" {
		t.Errorf("events %v", events)
	}
	if connects != 2 {
		t.Errorf("OnConnect ran %d times, want 2", connects)
	}
	for name, s := range map[string]*fakeSession{"hung": hung, "first": first, "second": second} {
		if !s.isClosed() {
			t.Errorf("%s session not closed", name)
		}
	}
	if dials < 4 {
		t.Errorf("dialled %d times", dials)
	}
}

// TestListSAsOnUnreachableSocket: a missing socket is an error, not a hang, and says that
// charon is not running (the status agent reports that at once; other failures are
// given a grace period).
func TestListSAsOnUnreachableSocket(t *testing.T) {
	_, err := ListSAsOn(t.TempDir()+"/charon.vici")(context.Background(), []string{"t1"})
	if !errors.Is(err, ErrCharonNotRunning) {
		t.Fatalf("missing socket: %v, want ErrCharonNotRunning", err)
	}
}

// TestCallsAgainstAHungCharonEnd: a socket that accepts connections and never answers
// (a hung charon) ends every VICI exchange with the deadline's error instead of
// blocking the role.
func TestCallsAgainstAHungCharonEnd(t *testing.T) {
	old := CallTimeout
	CallTimeout = 50 * time.Millisecond
	defer func() { CallTimeout = old }()
	sock := t.TempDir() + "/charon.vici"
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	if _, err := ListSAsOn(sock)(context.Background(), []string{"t1"}); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrCharonNotRunning) {
		t.Errorf("list-sas: %v", err)
	}
	l := &Syncer{Socket: sock}
	if _, err := l.Apply(context.Background(), sample, "secrets {\n}\n"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("apply: %v", err)
	}
	w := &Watcher{Dial: DialEvents(sock), Events: []string{"ike-updown"}}
	if err := w.once(context.Background()); !errors.Is(err, errSubscribeTimeout) {
		t.Errorf("subscribe: %v", err)
	}
}
