package namedwatch

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	metadatafake "k8s.io/client-go/metadata/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

func secretMeta(ns, name, rv string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv},
	}
}

// started returns a running watcher over a fake metadata API holding objs, and the
// channel its one source would read.
func started(t *testing.T, objs ...runtime.Object) (*Watcher, *metadatafake.FakeMetadataClient, chan event.GenericEvent) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := metadatafake.NewSimpleMetadataClient(scheme, objs...)
	w := New(c, SecretsResource, "Secret")
	ch := make(chan event.GenericEvent, 16)
	w.sinks = append(w.sinks, ch)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = w.Start(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		w.mu.Lock()
		up := w.ctx != nil
		w.mu.Unlock()
		if up {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("watcher did not start")
		}
	}
	return w, c, ch
}

// notified reports whether an event for ref arrives within wait.
func notified(ch chan event.GenericEvent, ref types.NamespacedName, wait time.Duration) bool {
	timeout := time.After(wait)
	for {
		select {
		case e := <-ch:
			if e.Object.GetNamespace() == ref.Namespace && e.Object.GetName() == ref.Name {
				return true
			}
		case <-timeout:
			return false
		}
	}
}

// The first listing of the version the owner read wakes no one; a different version, an
// object the owner found absent, and later changes do, and so does a first listing
// when the owner gave no version.
func TestFirstListingOfTheVersionReadIsNotNews(t *testing.T) {
	same := types.NamespacedName{Namespace: "a", Name: "psk"}
	changed := types.NamespacedName{Namespace: "b", Name: "psk"}
	appeared := types.NamespacedName{Namespace: "c", Name: "psk"}
	unknown := types.NamespacedName{Namespace: "d", Name: "psk"}
	w, c, ch := started(t, secretMeta("a", "psk", "7"), secretMeta("b", "psk", "9"), secretMeta("c", "psk", "3"), secretMeta("d", "psk", "5"))

	w.Set("gw/a", []types.NamespacedName{same}, map[types.NamespacedName]string{same: "7"})
	if notified(ch, same, 2*time.Second) {
		t.Fatal("the first listing of the version the owner read woke the owner")
	}
	w.Set("gw/b", []types.NamespacedName{changed}, map[types.NamespacedName]string{changed: "8"})
	if !notified(ch, changed, 10*time.Second) {
		t.Fatal("a version other than the one the owner read was not reported")
	}
	w.Set("gw/c", []types.NamespacedName{appeared}, map[types.NamespacedName]string{appeared: ""})
	if !notified(ch, appeared, 10*time.Second) {
		t.Fatal("an object the owner found absent was not reported when listed")
	}
	w.Set("gw/d", []types.NamespacedName{unknown}, nil)
	if !notified(ch, unknown, 10*time.Second) {
		t.Fatal("a first listing without a version read was not reported")
	}

	// A later change of the quiet one is reported.
	if _, err := c.Resource(SecretsResource).Namespace("a").(metadatafake.MetadataClient).UpdateFake(secretMeta("a", "psk", "8"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !notified(ch, same, 10*time.Second) {
		t.Fatal("a change after the first listing was not reported")
	}
}
