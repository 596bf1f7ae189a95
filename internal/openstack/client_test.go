package openstack

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestClientCacheRebuildsOnlyOnChange(t *testing.T) {
	var builds atomic.Int32
	fail := false
	cache := NewClientCache(func(ctx context.Context, cred Credential) (*Clients, error) {
		builds.Add(1)
		if fail {
			return nil, errors.New("keystone said no")
		}
		return &Clients{}, nil
	})
	ctx := context.Background()
	cred := Credential{AuthURL: "u", AppCredentialID: "a", AppCredentialSecret: "s"}

	c1, err := cache.Get(ctx, "link-a", "uid1/rv1", cred)
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := cache.Get(ctx, "link-a", "uid1/rv1", cred)
	if c1 != c2 || builds.Load() != 1 {
		t.Fatalf("same key/version/credential rebuilt: builds=%d", builds.Load())
	}
	c3, _ := cache.Get(ctx, "link-a", "uid1/rv2", cred)
	if c3 == c1 || builds.Load() != 2 {
		t.Fatalf("new version did not rebuild: builds=%d", builds.Load())
	}
	rotated := cred
	rotated.AppCredentialSecret = "s2"
	c4, _ := cache.Get(ctx, "link-a", "uid1/rv2", rotated)
	if c4 == c3 || builds.Load() != 3 {
		t.Fatalf("changed credential did not rebuild: builds=%d", builds.Load())
	}
	if _, err := cache.Get(ctx, "link-b", "uid1/rv2", rotated); err != nil || builds.Load() != 4 {
		t.Fatalf("keys must not share client sets: builds=%d", builds.Load())
	}
	if cache.Len() != 2 {
		t.Errorf("Len = %d", cache.Len())
	}

	fail = true
	if _, err := cache.Get(ctx, "link-a", "uid1/rv3", cred); err == nil {
		t.Fatal("build error swallowed")
	}
	if _, err := cache.Get(ctx, "link-a", "uid1/rv3", cred); err == nil || builds.Load() != 6 {
		t.Fatalf("a failed build must not be cached: builds=%d", builds.Load())
	}
	fail = false
	cache.Forget("link-b")
	if cache.Len() != 0 {
		t.Errorf("Len after failure and Forget = %d", cache.Len())
	}
}

func TestClientCacheConcurrentGetBuildsOnce(t *testing.T) {
	var builds atomic.Int32
	cache := NewClientCache(func(ctx context.Context, cred Credential) (*Clients, error) {
		builds.Add(1)
		return &Clients{}, nil
	})
	cred := Credential{AuthURL: "u", AppCredentialID: "a", AppCredentialSecret: "s"}
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = cache.Get(context.Background(), "k", "v", cred)
		}()
	}
	wg.Wait()
	if builds.Load() != 1 {
		t.Errorf("concurrent Gets built %d times", builds.Load())
	}
}

// portSequence is a Networking whose GetPort replays a scripted sequence.
type portSequence struct {
	Networking
	mu    sync.Mutex
	steps []func() (*Port, error)
	calls int
}

func (p *portSequence) GetPort(ctx context.Context, id string) (*Port, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := p.calls
	p.calls++
	if i >= len(p.steps) {
		i = len(p.steps) - 1
	}
	return p.steps[i]()
}

func TestWaitForPortDevice(t *testing.T) {
	port := func(dev string) func() (*Port, error) {
		return func() (*Port, error) { return &Port{ID: "p", DeviceID: dev}, nil }
	}
	transient := func() (*Port, error) { return nil, wrapErr("get port p", httpErr(503, "", nil)) }
	forbidden := func() (*Port, error) { return nil, wrapErr("get port p", httpErr(403, "", nil)) }
	notFound := func() (*Port, error) { return nil, wrapErr("get port p", httpErr(404, "", nil)) }
	fast := WaitOpts{Interval: time.Millisecond, Timeout: time.Minute}

	seq := &portSequence{steps: []func() (*Port, error){port(""), transient, port("srv")}}
	p, err := WaitForPortDevice(context.Background(), seq, "p", "srv", fast)
	if err != nil || p.DeviceID != "srv" || seq.calls != 3 {
		t.Fatalf("attach wait: %v, %+v, calls=%d", err, p, seq.calls)
	}

	seq = &portSequence{steps: []func() (*Port, error){port("srv"), port("")}}
	if p, err := WaitForPortDevice(context.Background(), seq, "p", "", fast); err != nil || p.DeviceID != "" {
		t.Fatalf("detach wait: %v", err)
	}

	seq = &portSequence{steps: []func() (*Port, error){forbidden}}
	if _, err := WaitForPortDevice(context.Background(), seq, "p", "srv", fast); !IsForbidden(err) || seq.calls != 1 {
		t.Fatalf("a refusal must end the wait at once: %v calls=%d", err, seq.calls)
	}

	seq = &portSequence{steps: []func() (*Port, error){notFound}}
	if _, err := WaitForPortDevice(context.Background(), seq, "p", "", fast); !IsNotFound(err) {
		t.Fatalf("a vanished port while waiting for detach: %v", err)
	}

	seq = &portSequence{steps: []func() (*Port, error){port("other")}}
	_, err = WaitForPortDevice(context.Background(), seq, "p", "srv", WaitOpts{Interval: time.Millisecond, Timeout: 20 * time.Millisecond})
	if !errors.Is(err, ErrWaitTimeout) || !IsTransient(err) {
		t.Fatalf("bounded wait: want ErrWaitTimeout (transient), got %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	seq = &portSequence{steps: []func() (*Port, error){port("other")}}
	if _, err := WaitForPortDevice(ctx, seq, "p", "srv", fast); !errors.Is(err, context.Canceled) || errors.Is(err, ErrWaitTimeout) {
		t.Fatalf("cancelled wait: %v", err)
	}
}
