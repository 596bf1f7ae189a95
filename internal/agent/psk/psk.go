// Package psk gives the gateway agent the tunnels' pre-shared keys. In the gateway pod
// they are read through the API server with the pod's own ServiceAccount, whose Role
// grants get, list and watch on exactly the Secrets the gateway's tunnels name (the
// operator renders that Role, and never holds the keys itself). Each Secret is followed
// by a watch of its own name, so a tunnel added to a running gateway gets its key as
// soon as the Secret and the Role exist, not after a kubelet volume refresh. A tunnel
// whose key is missing, unreadable or below the floor is reported with the reason and
// never loaded into charon.
package psk

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// Keys are the usable pre-shared keys by tunnel name, and for every other tunnel of the
// config why it has none. The reasons name Secrets and keys, never key material.
type Keys struct {
	ByTunnel map[string]string
	Waiting  map[string]string
	// Pending marks the tunnels of Waiting whose Secret has not been read once yet (its
	// first list has not answered): not known to be missing, only not known. The loader
	// holds off changing charon's connections for them for a while, so an agent that
	// restarts next to a running charon never ends a tunnel it merely has not read the
	// key of yet.
	Pending map[string]bool
}

// Ready lists the tunnels with a usable key, sorted.
func (k Keys) Ready() []string {
	out := make([]string, 0, len(k.ByTunnel))
	for n := range k.ByTunnel {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Source is where the loader gets keys from.
type Source interface {
	// Follow makes the source watch exactly these Secrets (and stop watching others).
	Follow(names []string)
	// Keys resolves every tunnel of cfg to its key or the reason it has none.
	Keys(cfg *gatewayconfig.Config) Keys
	// Changed is signalled whenever a followed Secret changed (or could not be read).
	Changed() <-chan struct{}
}

// resolve applies the floor to a tunnel's key as read.
func resolve(cfg *gatewayconfig.Config, lookup func(t gatewayconfig.Tunnel) (v []byte, why string, pending bool)) Keys {
	k := Keys{ByTunnel: map[string]string{}, Waiting: map[string]string{}, Pending: map[string]bool{}}
	for _, t := range cfg.Tunnels {
		v, why, pending := lookup(t)
		if pending {
			k.Pending[t.Name] = true
		}
		if why == "" {
			if w := gatewayconfig.CheckPSK(v); w != "" {
				why = fmt.Sprintf("the pre-shared key in Secret %s/%s %s", cfg.Gateway.Namespace, t.PSK, w)
			}
		}
		if why != "" {
			k.Waiting[t.Name] = why
			continue
		}
		k.ByTunnel[t.Name] = string(v)
	}
	return k
}

// API follows the named Secrets of one namespace through the API server.
type API struct {
	Client    kubernetes.Interface
	Namespace string
	// Logf receives one line per Secret that cannot be read (never key material).
	Logf func(format string, args ...any)

	ctx     context.Context
	mu      sync.Mutex
	follows map[string]*follow
	changed chan struct{}
}

type follow struct {
	inf    cache.SharedIndexInformer
	stop   context.CancelFunc
	mu     sync.Mutex
	errMsg string // the last list/watch error, until a list succeeds
}

// NewAPI returns a source whose watches live as long as ctx.
func NewAPI(ctx context.Context, cs kubernetes.Interface, namespace string, logf func(string, ...any)) *API {
	return &API{Client: cs, Namespace: namespace, Logf: logf, ctx: ctx, follows: map[string]*follow{}, changed: make(chan struct{}, 1)}
}

func (a *API) logf(format string, args ...any) {
	if a.Logf != nil {
		a.Logf(format, args...)
	}
}

func (a *API) signal() {
	select {
	case a.changed <- struct{}{}:
	default:
	}
}

// Changed implements Source.
func (a *API) Changed() <-chan struct{} { return a.changed }

// Follow implements Source: a watch per named Secret, started when first named and
// stopped when no longer named.
func (a *API) Follow(names []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
		if a.follows[n] != nil {
			continue
		}
		a.follows[n] = a.start(n)
	}
	for n, f := range a.follows {
		if !want[n] {
			f.stop()
			delete(a.follows, n)
		}
	}
}

func (a *API) start(name string) *follow {
	ctx, stop := context.WithCancel(a.ctx)
	secs := a.Client.CoreV1().Secrets(a.Namespace)
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return secs.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return secs.Watch(ctx, o)
		},
	}, a.Client)
	f := &follow{stop: stop}
	f.inf = cache.NewSharedIndexInformer(lw, &corev1.Secret{}, 0, cache.Indexers{})
	// The reflector retries a failed list or watch with backoff; the error is kept so
	// the tunnel's status can say why it waits (a Role not yet updated, for example).
	_ = f.inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		msg := fmt.Sprintf("cannot read Secret %s/%s: %s", a.Namespace, name, strings.TrimSpace(err.Error()))
		f.mu.Lock()
		changed := f.errMsg != msg
		f.errMsg = msg
		f.mu.Unlock()
		if changed {
			a.logf("pre-shared keys: %s", msg)
			a.signal()
		}
	})
	clearErr := func() {
		f.mu.Lock()
		f.errMsg = ""
		f.mu.Unlock()
	}
	_, _ = f.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { clearErr(); a.signal() },
		UpdateFunc: func(any, any) { clearErr(); a.signal() },
		DeleteFunc: func(any) { a.signal() },
	})
	go f.inf.RunWithContext(ctx)
	go func() {
		// A Secret that does not exist yet produces no event: say so once the first
		// list has answered.
		if cache.WaitForCacheSync(ctx.Done(), f.inf.HasSynced) {
			clearErr()
			a.signal()
		}
	}()
	return f
}

// Keys implements Source.
func (a *API) Keys(cfg *gatewayconfig.Config) Keys {
	a.mu.Lock()
	defer a.mu.Unlock()
	return resolve(cfg, func(t gatewayconfig.Tunnel) ([]byte, string, bool) {
		ref := a.Namespace + "/" + t.PSK.Secret
		f := a.follows[t.PSK.Secret]
		if f == nil {
			return nil, "Secret " + ref + " is not followed yet", true
		}
		if !f.inf.HasSynced() {
			f.mu.Lock()
			msg := f.errMsg
			f.mu.Unlock()
			if msg == "" {
				msg = "reading Secret " + ref
			}
			return nil, msg, true
		}
		obj, ok, err := f.inf.GetStore().GetByKey(ref)
		if err != nil || !ok {
			return nil, "Secret " + ref + " not found", false
		}
		s, ok := obj.(*corev1.Secret)
		if !ok {
			return nil, "Secret " + ref + " not found", false
		}
		v, ok := s.Data[t.PSK.Key]
		if !ok {
			return nil, fmt.Sprintf("Secret %s has no key %q", ref, t.PSK.Key), false
		}
		return v, "", false
	})
}

// File is the key source of the agent's file mode: a secrets.conf as RenderSecrets
// writes it (one section per tunnel), read with the config.
type File struct {
	mu      sync.Mutex
	keys    map[string][]byte // by tunnel
	err     string
	changed chan struct{}
}

// NewFile returns an empty file source; Update feeds it.
func NewFile() *File { return &File{changed: make(chan struct{}, 1)} }

// Update replaces the keys with those of text (a secrets.conf).
func (f *File) Update(text string) {
	keys := map[string][]byte{}
	errMsg := ""
	if strings.TrimSpace(text) == "" {
		errMsg = "no secrets file"
	} else if parsed, err := gatewayconfig.ParseSecrets(text); err != nil {
		errMsg = err.Error() // ParseSecrets never quotes key material
	} else {
		for _, s := range parsed {
			keys[strings.TrimPrefix(s.Section, gatewayconfig.SecretSectionPrefix)] = s.Secret
		}
	}
	f.mu.Lock()
	f.keys, f.err = keys, errMsg
	f.mu.Unlock()
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// Follow implements Source (the file holds every key there is).
func (f *File) Follow([]string) {}

// Changed implements Source.
func (f *File) Changed() <-chan struct{} { return f.changed }

// Keys implements Source.
func (f *File) Keys(cfg *gatewayconfig.Config) Keys {
	f.mu.Lock()
	defer f.mu.Unlock()
	return resolve(cfg, func(t gatewayconfig.Tunnel) ([]byte, string, bool) {
		if f.err != "" {
			return nil, "secrets file: " + f.err, false
		}
		v, ok := f.keys[t.Name]
		if !ok {
			return nil, "the secrets file has no key for tunnel " + t.Name, false
		}
		return v, "", false
	})
}
