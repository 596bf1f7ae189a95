// Package source delivers the gateway's rendered configuration to the agent roles,
// either from the ConfigMap through the API server (a watch on exactly that one named
// object) or from files (tests, and setups without API access).
package source

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// Snapshot is one consistent view of the rendered configuration. The agent renders
// swanctl.conf from Config itself. Secrets is the file mode's secrets.conf (the API
// mode reads each tunnel's Secret instead, internal/agent/psk).
type Snapshot struct {
	Config  []byte
	Secrets string
}

// Equal reports whether two snapshots carry the same content.
func (s Snapshot) Equal(o Snapshot) bool {
	return bytes.Equal(s.Config, o.Config) && s.Secrets == o.Secrets
}

// Complete reports whether the snapshot carries a config.
func (s Snapshot) Complete() bool { return len(s.Config) > 0 }

// Files reads gateway.json and (optionally) secrets.conf again whenever their
// directories change (inotify, through fsnotify: the gateway pod's status agent
// publishes the configuration by renaming a new file over the old one, and init-nat
// applies a change at once) and at every Interval besides (kubelet-projected volumes
// replace files through a symlink swap, and a missed or unavailable notification must
// not leave a change unread). A snapshot is sent only when the content changed.
type Files struct {
	ConfigFile, SecretsFile string
	Interval                time.Duration
}

// NewFiles derives the secrets file's name from the config file's directory.
func NewFiles(configFile, secretsFile string) *Files {
	if secretsFile == "" {
		secretsFile = filepath.Join(filepath.Dir(configFile), gatewayconfig.SecretKeySecrets)
	}
	return &Files{ConfigFile: configFile, SecretsFile: secretsFile, Interval: 200 * time.Millisecond}
}

// Run sends every changed snapshot on out until ctx ends.
func (f *Files) Run(ctx context.Context, out chan Snapshot) error {
	var last Snapshot
	first := true
	t := time.NewTicker(f.Interval)
	defer t.Stop()
	changed := f.watch(ctx)
	for {
		var s Snapshot
		// A missing file is an empty one: the snapshot says so and the roles wait.
		s.Config, _ = os.ReadFile(f.ConfigFile)
		sec, _ := os.ReadFile(f.SecretsFile)
		s.Secrets = string(sec)
		if first || !s.Equal(last) {
			first = false
			last = s
			send(ctx, out, s)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-changed:
		}
	}
}

// watch returns a channel that receives after any change of the files in their
// directories; it never receives when inotify is unavailable, for example when the
// node's fs.inotify.max_user_instances is used up by the user the container runs as
// (the ticker still reads, within Interval).
func (f *Files) watch(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return out
	}
	added := 0
	for _, dir := range []string{filepath.Dir(f.ConfigFile), filepath.Dir(f.SecretsFile)} {
		if w.Add(dir) == nil {
			added++
		}
	}
	if added == 0 {
		_ = w.Close()
		return out
	}
	go func() {
		defer w.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				// Only the files themselves (a rename over one names it) and kubelet's
				// ..data swap: the state volume sees other writes every second.
				if ev.Name != f.ConfigFile && ev.Name != f.SecretsFile && !strings.HasPrefix(filepath.Base(ev.Name), "..") {
					continue
				}
				select {
				case out <- struct{}{}:
				default:
				}
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
			}
		}
	}()
	return out
}

func send(ctx context.Context, out chan Snapshot, s Snapshot) {
	// Latest wins: a slow consumer gets the newest snapshot, never a stale queue.
	select {
	case <-out:
	default:
	}
	select {
	case out <- s:
	case <-ctx.Done():
	}
}

// API watches one ConfigMap by name.
type API struct {
	Client    kubernetes.Interface
	Namespace string
	ConfigMap string
}

// Run sends a snapshot on every change of the ConfigMap until ctx ends. out should have
// room for one snapshot (the roles use a one-slot channel): only the newest is kept.
// The informer calls its handlers one at a time, in order, so the last snapshot sent is
// always the newest.
func (a *API) Run(ctx context.Context, out chan Snapshot) error {
	cms := a.Client.CoreV1().ConfigMaps(a.Namespace)
	cmInf := cache.NewSharedIndexInformer(named(a.ConfigMap, a.Client,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return cms.List(ctx, o) },
		cms.Watch), &corev1.ConfigMap{}, 0, cache.Indexers{})
	deliver := func(o any) {
		if cm, ok := o.(*corev1.ConfigMap); ok {
			send(ctx, out, Snapshot{Config: []byte(cm.Data[gatewayconfig.ConfigMapKeyConfig])})
		}
	}
	if _, err := cmInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    deliver,
		UpdateFunc: func(_, o any) { deliver(o) },
	}); err != nil {
		return err
	}
	go cmInf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), cmInf.HasSynced) {
		return fmt.Errorf("watching %s/%s: cache did not sync", a.Namespace, a.ConfigMap)
	}
	<-ctx.Done()
	return nil
}

// named lists and watches exactly one object by name through the typed client, so the
// informer sees no other object of the namespace. client is the clientset, which tells
// the reflector whether it supports watch-list streaming (the fake one does not).
func named(name string, client any,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error),
) cache.ListerWatcher {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return watchFn(ctx, o)
		},
	}, client)
}
