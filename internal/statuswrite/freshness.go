package statuswrite

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Freshness remembers, per object, the resourceVersions this process's status writes
// replaced. A reconcile that starts from a cache still showing one of them (the informer
// is a moment behind, typically when an owned object's event requeued the object right
// after its own status write) can then wait a moment instead of working from a stale
// read: its status write would fail on the resourceVersion and the whole reconcile
// would be repeated with backoff. Under load that was one reconcile in ten.
//
// Only versions this process replaced count: an object changed by anyone else carries a
// version that was never replaced here, and is reconciled at once.
type Freshness struct {
	mu   sync.Mutex
	last map[types.UID]*replaced
}

type replaced struct {
	versions map[string]bool
	at       time.Time
}

// FreshnessBound is how long after its last write an object may still be taken for
// stale (the cache has certainly caught up by then, or something else is wrong).
const FreshnessBound = 5 * time.Second

// NewFreshness returns an empty tracker.
func NewFreshness() *Freshness { return &Freshness{last: map[types.UID]*replaced{}} }

// wrote remembers that a write replaced version over with version now. An apply that
// changed nothing leaves the version as it was (now == over): that version is still
// current and is not remembered, or a cache that is up to date would be taken for stale.
func (f *Freshness) wrote(uid types.UID, over, now string) {
	if over == "" || over == now {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.last[uid]
	if r == nil || time.Since(r.at) > FreshnessBound {
		r = &replaced{versions: map[string]bool{}}
		f.last[uid] = r
	}
	r.versions[over] = true
	r.at = time.Now()
}

// Behind reports whether obj, as read from the cache, is a version of it that a status
// write of w replaced (within FreshnessBound of that write).
func (w Writer) Behind(obj client.Object) bool {
	f := w.Fresh
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.last[obj.GetUID()]
	if r == nil {
		return false
	}
	if time.Since(r.at) > FreshnessBound {
		delete(f.last, obj.GetUID())
		return false
	}
	return r.versions[obj.GetResourceVersion()]
}

// Forget drops what is remembered for uid (its object is gone).
func (f *Freshness) Forget(uid types.UID) {
	f.mu.Lock()
	delete(f.last, uid)
	f.mu.Unlock()
}
