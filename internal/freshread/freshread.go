// Package freshread shares one read among the callers that want it at the same time,
// without handing anyone a result older than their question.
//
// x/sync/singleflight joins a caller to a read already in flight; that read may have
// started before the caller asked, and so miss what changed in between. A caller here
// joins only a read that started after it asked: while one is in flight, the callers
// that arrive wait for it to end and then share the next one. Under a burst (a hundred
// ClusterLinks allocating transit IPs at once, each needing every port of the transit
// network) the callers that arrive during one read share a single next one instead of
// making one each, and each result is as fresh as a read of the caller's own would have
// been.
package freshread

import (
	"context"
	"sync"
)

// Group shares reads per key. The zero value is ready to use.
type Group[K comparable, V any] struct {
	mu      sync.Mutex
	seq     uint64 // counts questions and read starts, in order
	flights map[K]*flight[V]
}

type flight[V any] struct {
	started uint64 // g.seq when the read started
	sharers int    // callers waiting for this read's result, besides its starter (the tests wait on it)
	done    chan struct{}
	v       V
	err     error
}

// Do returns the result of a read of key that started after this call: its own, or one
// it shares with the callers that asked at about the same time. Sharers get the same V,
// which none of them may modify. The read runs with the context of the caller that
// starts it; another caller's context only bounds its own wait (when the starter's is
// cancelled, the sharers get that error too).
func (g *Group[K, V]) Do(ctx context.Context, key K, read func(context.Context) (V, error)) (V, error) {
	g.mu.Lock()
	g.seq++
	asked := g.seq
	for {
		f := g.flights[key]
		if f == nil {
			g.seq++
			f = &flight[V]{started: g.seq, done: make(chan struct{})}
			if g.flights == nil {
				g.flights = map[K]*flight[V]{}
			}
			g.flights[key] = f
			g.mu.Unlock()
			g.run(ctx, key, f, read)
			return f.v, f.err
		}
		// A read that started after the question is shared; one that started before it
		// is waited out, and the next one shared.
		share := f.started > asked
		if share {
			f.sharers++
		}
		g.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			var zero V
			return zero, ctx.Err()
		}
		if share && f.started != 0 {
			return f.v, f.err
		}
		g.mu.Lock()
	}
}

// run reads and releases the key even if read panics (the panic goes on to the caller;
// the waiters, whose flight has no result, read again).
func (g *Group[K, V]) run(ctx context.Context, key K, f *flight[V], read func(context.Context) (V, error)) {
	completed := false
	defer func() {
		g.mu.Lock()
		delete(g.flights, key)
		if !completed {
			// No result to share: the waiters read again.
			f.started = 0
		}
		g.mu.Unlock()
		close(f.done)
	}()
	f.v, f.err = read(ctx)
	completed = true
}
