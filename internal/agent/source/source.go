// Package source delivers the gateway's rendered configuration to the agent roles,
// either from the ConfigMap and Secret through the API server (a watch on exactly those
// two named objects) or from files (tests, and setups without API access).
package source

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// Snapshot is one consistent view of the rendered files.
type Snapshot struct {
	Config  []byte
	Swanctl string
	Secrets string
}

// Equal reports whether two snapshots carry the same content.
func (s Snapshot) Equal(o Snapshot) bool {
	return bytes.Equal(s.Config, o.Config) && s.Swanctl == o.Swanctl && s.Secrets == o.Secrets
}

// Complete reports whether every part the roles need is present.
func (s Snapshot) Complete(needSecrets bool) bool {
	return len(s.Config) > 0 && s.Swanctl != "" && (!needSecrets || s.Secrets != "")
}

// Files polls gateway.json, swanctl.conf and secrets.conf. Kubelet-projected volumes
// replace files through a symlink swap, which polling content handles without inotify.
type Files struct {
	ConfigFile, SwanctlFile, SecretsFile string
	Interval                             time.Duration
}

// NewFiles derives the sibling file names from the config file's directory.
func NewFiles(configFile, swanctlFile, secretsFile string) *Files {
	dir := filepath.Dir(configFile)
	if swanctlFile == "" {
		swanctlFile = filepath.Join(dir, gatewayconfig.ConfigMapKeySwanctl)
	}
	if secretsFile == "" {
		secretsFile = filepath.Join(dir, gatewayconfig.SecretKeySecrets)
	}
	return &Files{ConfigFile: configFile, SwanctlFile: swanctlFile, SecretsFile: secretsFile, Interval: 200 * time.Millisecond}
}

// Run sends every changed snapshot on out until ctx ends.
func (f *Files) Run(ctx context.Context, out chan Snapshot) error {
	var last Snapshot
	first := true
	t := time.NewTicker(f.Interval)
	defer t.Stop()
	for {
		var s Snapshot
		s.Config, _ = os.ReadFile(f.ConfigFile)
		sw, _ := os.ReadFile(f.SwanctlFile)
		sec, _ := os.ReadFile(f.SecretsFile)
		s.Swanctl, s.Secrets = string(sw), string(sec)
		if first || !s.Equal(last) {
			first = false
			last = s
			send(ctx, out, s)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
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

// merger combines the ConfigMap's and the Secret's latest content into snapshots. The
// two informers call it from their own goroutines; the lock is held across the send, so
// the snapshots leave in the order they were merged and the last one delivered is always
// the newest (with the send outside the lock, a snapshot merged earlier could be sent
// after a newer one and overwrite it in the one-slot channel).
type merger struct {
	ctx context.Context
	out chan Snapshot

	mu  sync.Mutex
	cur Snapshot
}

func (m *merger) update(apply func(*Snapshot)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	apply(&m.cur)
	send(m.ctx, m.out, m.cur)
}

// API watches one ConfigMap and one Secret by name.
type API struct {
	Client    kubernetes.Interface
	Namespace string
	ConfigMap string
	Secret    string // empty: secrets are not needed by this role
}

// Run sends a snapshot on every change of either object until ctx ends. out should have
// room for one snapshot (the roles use a one-slot channel): only the newest is kept.
func (a *API) Run(ctx context.Context, out chan Snapshot) error {
	m := &merger{ctx: ctx, out: out}
	cms := a.Client.CoreV1().ConfigMaps(a.Namespace)
	cmInf := cache.NewSharedIndexInformer(named(a.ConfigMap, a.Client,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return cms.List(ctx, o) },
		cms.Watch), &corev1.ConfigMap{}, 0, cache.Indexers{})
	if _, err := cmInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { m.update(func(s *Snapshot) { fromConfigMap(s, o) }) },
		UpdateFunc: func(_, o any) { m.update(func(s *Snapshot) { fromConfigMap(s, o) }) },
	}); err != nil {
		return err
	}
	go cmInf.Run(ctx.Done())
	syncs := []cache.InformerSynced{cmInf.HasSynced}
	if a.Secret != "" {
		secs := a.Client.CoreV1().Secrets(a.Namespace)
		secInf := cache.NewSharedIndexInformer(named(a.Secret, a.Client,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return secs.List(ctx, o) },
			secs.Watch), &corev1.Secret{}, 0, cache.Indexers{})
		if _, err := secInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { m.update(func(s *Snapshot) { fromSecret(s, o) }) },
			UpdateFunc: func(_, o any) { m.update(func(s *Snapshot) { fromSecret(s, o) }) },
		}); err != nil {
			return err
		}
		go secInf.Run(ctx.Done())
		syncs = append(syncs, secInf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), syncs...) {
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

func fromConfigMap(s *Snapshot, o any) {
	cm, ok := o.(*corev1.ConfigMap)
	if !ok {
		return
	}
	s.Config = []byte(cm.Data[gatewayconfig.ConfigMapKeyConfig])
	s.Swanctl = cm.Data[gatewayconfig.ConfigMapKeySwanctl]
}

func fromSecret(s *Snapshot, o any) {
	sec, ok := o.(*corev1.Secret)
	if !ok {
		return
	}
	s.Secrets = string(sec.Data[gatewayconfig.SecretKeySecrets])
}
