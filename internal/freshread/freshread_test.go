package freshread

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// The world a read sees: a version that writers bump. A read returns the version at its
// start; a caller that bumped it before asking must get at least its own version back.
type world struct{ version atomic.Int64 }

// TestCallersArrivingDuringAReadShareTheNextOne: one read in flight, ten callers arrive
// (each after changing the world); they share one further read, which sees every change.
func TestCallersArrivingDuringAReadShareTheNextOne(t *testing.T) {
	var g Group[string, int64]
	var w world
	var reads atomic.Int32
	release := make(chan struct{})
	first := make(chan struct{})
	const n = 10
	read := func(context.Context) (int64, error) {
		v := w.version.Load()
		switch reads.Add(1) {
		case 1:
			close(first)
			<-release // the first read is slow: everyone else arrives meanwhile
		case 2:
			// The second lasts until the other nine have joined it (on a slow machine
			// one could otherwise come late and, finding no read, start a third).
			waitForSharers(&g, "net", n-1)
		}
		return v, nil
	}

	var wg sync.WaitGroup
	wg.Add(1)
	var firstGot int64
	go func() { defer wg.Done(); firstGot, _ = g.Do(context.Background(), "net", read) }()
	<-first

	got := make([]int64, n)
	want := make([]int64, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want[i] = w.version.Add(1) // a change this caller must see
			got[i], _ = g.Do(context.Background(), "net", read)
		}()
	}
	// The first read ends only once all ten have asked: each of them arrived during it.
	waitForWaiters(&g, "net", n)
	close(release)
	wg.Wait()

	if firstGot != 0 {
		t.Errorf("the first read saw version %d, want 0", firstGot)
	}
	for i := range n {
		if got[i] < want[i] {
			t.Errorf("caller %d changed the world to version %d before asking and got a read of version %d", i, want[i], got[i])
		}
	}
	if r := reads.Load(); r != 2 {
		t.Errorf("%d reads for one caller and ten arriving during its read, want 2 (the first, then one shared)", r)
	}
}

// waitForWaiters spins until n callers have asked while one read is in flight: seq
// counts every question and every read start, so the first caller's question and read
// make 2 and each later question one more.
func waitForWaiters[K comparable, V any](g *Group[K, V], key K, n int) {
	for {
		g.mu.Lock()
		seq := g.seq
		g.mu.Unlock()
		if seq >= uint64(n)+2 {
			return
		}
		runtime.Gosched()
	}
}

// waitForSharers spins until k callers share the read of key in flight.
func waitForSharers[K comparable, V any](g *Group[K, V], key K, k int) {
	for {
		g.mu.Lock()
		f := g.flights[key]
		ok := f != nil && f.sharers >= k
		g.mu.Unlock()
		if ok {
			return
		}
		runtime.Gosched()
	}
}

// TestAReadIsNeverOlderThanTheQuestion: many callers, each changing the world just before
// asking, over many rounds; every result reflects the caller's change.
func TestAReadIsNeverOlderThanTheQuestion(t *testing.T) {
	var g Group[int, int64]
	var w world
	var reads atomic.Int32
	read := func(context.Context) (int64, error) {
		reads.Add(1)
		return w.version.Load(), nil
	}
	var wg sync.WaitGroup
	var stale atomic.Int32
	const callers, rounds = 16, 200
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				mine := w.version.Add(1)
				got, err := g.Do(context.Background(), 1, read)
				if err != nil || got < mine {
					stale.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if s := stale.Load(); s != 0 {
		t.Errorf("%d of %d results were older than their question", s, callers*rounds)
	}
	t.Logf("%d reads for %d questions", reads.Load(), callers*rounds)
}

// TestSharersGetTheErrorAndKeysAreApart: a failed read's error goes to everyone sharing
// it; another key reads on its own meanwhile.
func TestSharersGetTheErrorAndKeysAreApart(t *testing.T) {
	var g Group[string, int]
	boom := errors.New("boom")
	release := make(chan struct{})
	started := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = g.Do(context.Background(), "a", func(context.Context) (int, error) { close(started); <-release; return 1, nil })
	}()
	<-started
	// Key b is not held up by a's read.
	if v, err := g.Do(context.Background(), "b", func(context.Context) (int, error) { return 7, nil }); v != 7 || err != nil {
		t.Fatalf("key b: %d, %v", v, err)
	}
	errs := make(chan error, 3)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := g.Do(context.Background(), "a", func(context.Context) (int, error) { return 0, boom })
			errs <- err
		}()
	}
	waitForWaiters(&g, "a", 3+2) // b's question and read counted too
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, boom) {
			t.Errorf("a sharer got %v, want the shared read's error", err)
		}
	}
}

// TestAWaiterLeavesOnItsOwnContext: a caller waiting for someone else's read returns when
// its own context ends; the read goes on for the others.
func TestAWaiterLeavesOnItsOwnContext(t *testing.T) {
	var g Group[string, int]
	release := make(chan struct{})
	started := make(chan struct{})
	done := make(chan int)
	go func() {
		v, _ := g.Do(context.Background(), "a", func(context.Context) (int, error) { close(started); <-release; return 1, nil })
		done <- v
	}()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.Do(ctx, "a", func(context.Context) (int, error) { return 2, nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled waiter got %v, want context.Canceled", err)
	}
	close(release)
	if v := <-done; v != 1 {
		t.Errorf("the starter got %d, want its own read's 1", v)
	}
}

// TestAPanickingReadFreesTheKey: the panic reaches its caller, and the key reads again.
func TestAPanickingReadFreesTheKey(t *testing.T) {
	var g Group[string, int]
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the read's panic did not reach its caller")
			}
		}()
		_, _ = g.Do(context.Background(), "a", func(context.Context) (int, error) { panic("read failed") })
	}()
	if v, err := g.Do(context.Background(), "a", func(context.Context) (int, error) { return 3, nil }); v != 3 || err != nil {
		t.Errorf("after a panic the key read %d, %v; want 3, nil", v, err)
	}
}
