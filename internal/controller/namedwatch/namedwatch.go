// Package namedwatch follows exactly the objects the operator's resources name, one
// metadata-only watch per object (a field selector on its name), and turns every change
// into a reconcile of the resources that name it. The operator uses it for Secrets: the
// pre-shared-key Secrets gateways name and the credential Secret of each cross-tenant
// ClusterLink. So it never lists or watches Secrets cluster-wide, never caches a Secret's
// data, and keeps of each followed Secret no more than its name, namespace, UID and
// resourceVersion (labels, annotations and managed fields are dropped before caching:
// `kubectl apply` leaves a Secret's data in an annotation).
package namedwatch

import (
	"context"
	"fmt"
	"sort"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// SecretsResource is the GVR of core Secrets.
var SecretsResource = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// Watcher follows named objects of one resource.
type Watcher struct {
	client metadata.Interface
	gvr    schema.GroupVersionResource
	kind   string

	mu      sync.Mutex
	ctx     context.Context
	follows map[types.NamespacedName]*follow
	owners  map[string][]types.NamespacedName
	sinks   []chan event.GenericEvent
}

type follow struct {
	refs map[string]bool
	stop context.CancelFunc
	// seen is the resourceVersion the owner that started the watch had just read ("" for
	// absent), when known: the watch's first listing of that same version is not news.
	seen  string
	known bool
}

// New returns a watcher of gvr (whose kind is kind) through the metadata client.
func New(c metadata.Interface, gvr schema.GroupVersionResource, kind string) *Watcher {
	return &Watcher{client: c, gvr: gvr, kind: kind, follows: map[types.NamespacedName]*follow{}, owners: map[string][]types.NamespacedName{}}
}

// Source returns a controller source that enqueues what h maps a change of a followed
// object to. Every source gets every change. Call before the manager starts.
func (w *Watcher) Source(h handler.EventHandler) source.Source {
	ch := make(chan event.GenericEvent, 1024)
	w.mu.Lock()
	w.sinks = append(w.sinks, ch)
	w.mu.Unlock()
	return source.Channel(ch, h)
}

// Start records the context the watches run in; it is a manager Runnable, so no watch
// starts before the manager does and every watch stops with it.
func (w *Watcher) Start(ctx context.Context) error {
	w.mu.Lock()
	w.ctx = ctx
	for r, f := range w.follows {
		// Named before the manager started.
		f.stop = w.start(r, f.seen, f.known)
	}
	w.mu.Unlock()
	<-ctx.Done()
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, f := range w.follows {
		f.stop()
		delete(w.follows, k)
	}
	return nil
}

// Set makes owner (any stable key, such as "IPsecGateway/ns/name") name exactly refs: a
// watch starts for every object no one named before, and stops for every object no one
// names any more. Set(owner, nil, nil) forgets the owner.
//
// seen, when not nil, holds the resourceVersion of each ref as the owner's reconcile read
// it just before this call ("" for an object it found absent). A watch this call starts
// then does not report its first listing of the object when that is the version the
// owner read (the reconcile already acted on it): without that, an operator restart
// reconciled every gateway twice, once from its own informer and once more when the
// watch of the Secret it names first listed it. A different version, an object that
// appeared, and every later change are reported. The read must come before Set: a
// change between the two then shows as a different version in the first listing.
func (w *Watcher) Set(owner string, refs []types.NamespacedName, seen map[types.NamespacedName]string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	want := map[types.NamespacedName]bool{}
	for _, r := range refs {
		want[r] = true
	}
	// Only what changed: a watch that stays named keeps running (restarting it would
	// report its object again, and wake the owner for nothing).
	for _, r := range w.owners[owner] {
		if want[r] {
			continue
		}
		if f := w.follows[r]; f != nil {
			delete(f.refs, owner)
			if len(f.refs) == 0 {
				f.stop()
				delete(w.follows, r)
			}
		}
	}
	if len(want) == 0 {
		delete(w.owners, owner)
		return
	}
	w.owners[owner] = append([]types.NamespacedName(nil), refs...)
	for r := range want {
		f := w.follows[r]
		if f == nil {
			f = &follow{refs: map[string]bool{}, stop: func() {}}
			if seen != nil {
				f.seen, f.known = seen[r]
			}
			if w.ctx != nil {
				f.stop = w.start(r, f.seen, f.known)
			}
			w.follows[r] = f
		}
		f.refs[owner] = true
	}
}

// Followed lists the objects being watched, sorted (diagnostics and tests).
func (w *Watcher) Followed() []types.NamespacedName {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]types.NamespacedName, 0, len(w.follows))
	for k := range w.follows {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// strip keeps of an object what a reconcile needs to be told that it changed.
func strip(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	return &metav1.PartialObjectMetadata{
		TypeMeta: m.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
			DeletionTimestamp: m.DeletionTimestamp,
		},
	}, nil
}

func (w *Watcher) start(ref types.NamespacedName, seen string, known bool) context.CancelFunc {
	ctx, stop := context.WithCancel(w.ctx)
	sel := fields.OneTermEqualSelector("metadata.name", ref.Name).String()
	inf := metadatainformer.NewFilteredMetadataInformer(w.client, w.gvr, ref.Namespace, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.FieldSelector = sel }).Informer()
	if err := inf.SetTransform(strip); err != nil {
		panic(fmt.Sprintf("namedwatch: %v", err)) // only fails once started, which it is not
	}
	notify := func() {
		obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name}}
		obj.SetGroupVersionKind(w.gvr.GroupVersion().WithKind(w.kind))
		w.mu.Lock()
		sinks := append([]chan event.GenericEvent(nil), w.sinks...)
		w.mu.Unlock()
		for _, s := range sinks {
			select {
			case s <- event.GenericEvent{Object: client.Object(obj)}:
			case <-ctx.Done():
				return
			}
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if m, ok := obj.(*metav1.PartialObjectMetadata); ok && initial && known && m.ResourceVersion == seen {
				return // the version the owner read before naming it
			}
			notify()
		},
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	})
	go inf.RunWithContext(ctx)
	return stop
}
