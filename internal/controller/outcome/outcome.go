// Package outcome is the one place where both reconcilers decide what a failed (or
// unfinished) reconcile means: a refusal that only a human can fix waits for a change, a
// passing fault backs off exponentially (never sooner than OpenStack's Retry-After), an
// operation OpenStack finishes on its own is polled, and a lost optimistic-lock race is
// simply retried. The reconcilers set their conditions; this package answers
// controller-runtime.
package outcome

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"bnerd.net/vpn-operator/internal/openstack"
)

// Class is what a reconcile's error means for the next attempt.
type Class int

const (
	// Transient: a fault that passes by itself (OpenStack 5xx, 429, 408, timeouts,
	// broken connections, a 404 or 409 racing another writer, an API-server hiccup).
	// Retried with exponential backoff.
	Transient Class = iota
	// Terminal: OpenStack refused the request (400, 401, 403, quota exhaustion, a
	// configured name that resolves to nothing). Retrying changes nothing until the spec
	// or the operator's configuration (or the cloud) changes: the condition says so and
	// the object waits for a change, or for the resync.
	Terminal
	// Waiting: an operation was started that OpenStack completes asynchronously (a Nova
	// attach or detach); the reconcile polls for it without holding a worker.
	Waiting
	// Conflict: an optimistic-lock write lost against a concurrent writer of the same
	// fields; the reconcile starts again from a fresh read, with backoff.
	Conflict
)

func (c Class) String() string {
	switch c {
	case Terminal:
		return "terminal"
	case Waiting:
		return "waiting"
	case Conflict:
		return "conflict"
	}
	return "transient"
}

// waitError marks a phase that is waiting on an outside system.
type waitError struct {
	after time.Duration
	what  string
}

func (w *waitError) Error() string { return w.what }

// Wait is the error a phase returns when it started something OpenStack finishes on
// its own (or needs to look again at something a human fixes): the reconcile ends
// without failure and comes back after poll.
func Wait(poll time.Duration, format string, args ...any) error {
	return &waitError{after: poll, what: fmt.Sprintf(format, args...)}
}

// Classify sorts err (nil is not an error and is Transient only by convention; callers
// check for nil first).
func Classify(err error) Class {
	var w *waitError
	switch {
	case errors.As(err, &w):
		return Waiting
	case openstack.StatusCode(err) == 0 && apierrors.IsConflict(err):
		return Conflict
	case refused(err):
		return Terminal
	}
	return Transient
}

// IsTerminal reports whether err is a refusal that only a change can fix.
func IsTerminal(err error) bool { return err != nil && Classify(err) == Terminal }

// refused: OpenStack answered, and the answer will not change by asking again.
func refused(err error) bool {
	if errors.Is(err, openstack.ErrNotFound) || errors.Is(err, openstack.ErrAmbiguous) || errors.Is(err, openstack.ErrUnfiltered) {
		// A configured name that resolves to nothing (or to several things).
		return true
	}
	code := openstack.StatusCode(err)
	switch {
	case code == 0:
		return false
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests, code >= 500:
		return false
	case code == http.StatusNotFound:
		// An object read a moment ago is gone: another writer raced us, and the next
		// attempt finds (or makes) the current one.
		return false
	case code == http.StatusConflict:
		// Neutron reports quota exhaustion as 409 OverQuota; other conflicts
		// (PortInUse, an instance busy with another task) pass.
		return openstack.NeutronErrorType(err) == "OverQuota"
	}
	return code >= 400
}

// Describe is err's text for a condition message, with what happens next.
func Describe(err error) string {
	switch Classify(err) {
	case Terminal:
		return err.Error() + " (refused: not retried until the spec or the operator's configuration changes, or the next resync)"
	case Waiting:
		return err.Error()
	case Conflict:
		return err.Error() + " (a concurrent write won; retrying from a fresh read)"
	}
	return err.Error() + " (retrying with backoff)"
}

// Backoff is the controllers' rate limiter: per object exponential from Base to Max on
// consecutive failures, overall at most 10 retries per second (burst 100), and never
// sooner than a Retry-After that OpenStack sent with the failure.
type Backoff struct {
	inner workqueue.TypedRateLimiter[reconcile.Request]

	mu    sync.Mutex
	floor map[reconcile.Request]time.Duration
}

// Backoff defaults: a first retry soon enough for a blip, a cap that keeps a long
// outage from costing more than a request every five minutes per object.
const (
	DefaultBase = 100 * time.Millisecond
	DefaultMax  = 5 * time.Minute
)

// NewBackoff returns a rate limiter; zero durations take the defaults.
func NewBackoff(base, max time.Duration) *Backoff {
	if base <= 0 {
		base = DefaultBase
	}
	if max <= 0 {
		max = DefaultMax
	}
	return &Backoff{
		inner: workqueue.NewTypedMaxOfRateLimiter[reconcile.Request](
			workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](base, max),
			&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
		),
		floor: map[reconcile.Request]time.Duration{},
	}
}

var _ workqueue.TypedRateLimiter[reconcile.Request] = (*Backoff)(nil)

// When is the delay before the next attempt of item.
func (b *Backoff) When(item reconcile.Request) time.Duration {
	d := b.inner.When(item)
	b.mu.Lock()
	if f, ok := b.floor[item]; ok {
		delete(b.floor, item)
		if f > d {
			d = f
		}
	}
	b.mu.Unlock()
	return d
}

// Forget resets item's backoff (it succeeded, or waits for something else now).
func (b *Backoff) Forget(item reconcile.Request) {
	b.inner.Forget(item)
	b.mu.Lock()
	delete(b.floor, item)
	b.mu.Unlock()
}

// NumRequeues is how many times item failed in a row.
func (b *Backoff) NumRequeues(item reconcile.Request) int { return b.inner.NumRequeues(item) }

// Result is the controller's answer to a reconcile of req that ended with err; resync
// is the periodic re-reconcile of a converged (or refused) object.
//
//   - nil: converged; come back at the resync.
//   - Waiting: come back after the poll interval; no error, no backoff.
//   - Terminal: the condition says what was refused; no error (nothing to log per
//     retry, no hot loop), come back at the resync or on a change of the object.
//   - Transient and Conflict: the error, so the rate limiter backs off; a Retry-After
//     in err sets the least delay. (A status writer that lost only against a writer of
//     other fields retries by itself and never gets here.)
func (b *Backoff) Result(req reconcile.Request, err error, resync time.Duration) (ctrl.Result, error) {
	if err == nil {
		return ctrl.Result{RequeueAfter: resync}, nil
	}
	switch Classify(err) {
	case Waiting:
		var w *waitError
		errors.As(err, &w)
		return ctrl.Result{RequeueAfter: w.after}, nil
	case Terminal:
		return ctrl.Result{RequeueAfter: resync}, nil
	}
	if d := openstack.RetryAfter(err); d > 0 && b != nil {
		b.mu.Lock()
		b.floor[req] = d
		b.mu.Unlock()
	}
	return ctrl.Result{}, err
}
