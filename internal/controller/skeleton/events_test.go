package skeleton

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

func TestEventsWaitForEmit(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}
	var e Events
	e.Add(corev1.EventTypeWarning, "PortFailed", "Reconcile", "port %s: %s", "p1", "quota")
	if len(rec.Events) != 0 || len(e.pending) != 1 {
		t.Fatalf("an Event left before Emit (%d sent, %d waiting)", len(rec.Events), len(e.pending))
	}
	e.Emit(rec, obj)
	if got := <-rec.Events; got != "Warning PortFailed port p1: quota" {
		t.Errorf("event %q", got)
	}
	// A failed write: the transition waits for the next reconcile to find it again;
	// the action happened and is told.
	e.Transition(corev1.EventTypeWarning, "NodeChanged", "Reconcile", "moved to %s", "n2")
	e.Add(corev1.EventTypeWarning, "StrandedPodDeleted", "Delete", "deleted pod %s", "p1")
	e.WriteFailed(rec, obj)
	if got := <-rec.Events; got != "Warning StrandedPodDeleted deleted pod p1" {
		t.Errorf("event %q", got)
	}
	if len(rec.Events) != 0 || len(e.pending) != 0 {
		t.Errorf("after a failed write: %d more sent, %d waiting; want the transition forgotten", len(rec.Events), len(e.pending))
	}
	e.Add(corev1.EventTypeNormal, "Moved", "Reconcile", "no recorder")
	e.Emit(nil, obj)
	if len(e.pending) != 0 {
		t.Error("Emit without a recorder kept the Events")
	}
}

// Only a condition set True where it was absent is quiet.
func TestFirstTrueIsTheOneQuietChange(t *testing.T) {
	cond := func(s metav1.ConditionStatus) *metav1.Condition {
		return &metav1.Condition{Type: "PortReady", Status: s}
	}
	for _, c := range []struct {
		prev  *metav1.Condition
		now   metav1.ConditionStatus
		quiet bool
	}{
		{nil, metav1.ConditionTrue, true},
		{nil, metav1.ConditionFalse, false},
		{nil, metav1.ConditionUnknown, false},
		{cond(metav1.ConditionUnknown), metav1.ConditionTrue, false},
		// Only marked waiting for an earlier phase: never evaluated, as if absent.
		{&metav1.Condition{Type: "PortReady", Status: metav1.ConditionUnknown, Reason: v1alpha1.ReasonNotReady}, metav1.ConditionTrue, true},
		{&metav1.Condition{Type: "PortReady", Status: metav1.ConditionUnknown, Reason: v1alpha1.ReasonNotReady}, metav1.ConditionFalse, false},
		{cond(metav1.ConditionFalse), metav1.ConditionTrue, false},
		{cond(metav1.ConditionTrue), metav1.ConditionFalse, false},
	} {
		if got := FirstTrue(c.prev, c.now); got != c.quiet {
			t.Errorf("FirstTrue(%v, %s) = %v, want %v", c.prev, c.now, got, c.quiet)
		}
	}
}

// A note longer than the API server takes is cut to fit, at a character boundary, and
// says so; a note that fits is sent as it is.
func TestEventNotesFitTheAPIsLimit(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}
	var e Events
	long := "security group rules for " + strings.Repeat("10.1.0.0/16 ü, ", 200)
	e.Add(corev1.EventTypeNormal, "Rules", "Reconcile", "%s", long)
	fits := strings.Repeat("x", noteLimit)
	e.Add(corev1.EventTypeNormal, "Rules", "Reconcile", "%s", fits)
	e.Emit(rec, obj)
	note := strings.TrimPrefix(<-rec.Events, "Normal Rules ")
	if len(note) > noteLimit || !utf8.ValidString(note) || !strings.HasPrefix(long, strings.TrimSuffix(note, cutMark)) || !strings.HasSuffix(note, cutMark) {
		t.Errorf("a %d-byte note became %d bytes (valid UTF-8 %v): %q", len(long), len(note), utf8.ValidString(note), note)
	}
	if got := strings.TrimPrefix(<-rec.Events, "Normal Rules "); got != fits {
		t.Errorf("a note of exactly %d bytes was changed to %d bytes", noteLimit, len(got))
	}
}

func TestFinalizerWritesAreGuardedByTheResourceVersion(t *testing.T) {
	ctx := context.Background()
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns"}}
	c := fake.NewClientBuilder().WithObjects(obj).Build()
	read := func() *corev1.ConfigMap {
		o := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), o); err != nil {
			t.Fatal(err)
		}
		return o
	}
	stale := read()
	fresh := read()
	if added, err := AddFinalizer(ctx, c, fresh, "a/one"); err != nil || !added {
		t.Fatalf("AddFinalizer: %v %v", added, err)
	}
	if added, err := AddFinalizer(ctx, c, fresh, "a/one"); err != nil || added {
		t.Errorf("adding it again: %v %v", added, err)
	}
	// Another controller's finalizer, written since stale was read: a write from stale
	// must fail instead of replacing the list.
	if _, err := AddFinalizer(ctx, c, stale, "b/two"); !apierrors.IsConflict(err) {
		t.Fatalf("a write from a stale read: %v, want a conflict", err)
	}
	cur := read()
	if _, err := AddFinalizer(ctx, c, cur, "b/two"); err != nil {
		t.Fatal(err)
	}
	if err := RemoveFinalizer(ctx, c, fresh, "a/one"); !apierrors.IsConflict(err) {
		t.Errorf("removing from a stale read: %v, want a conflict (b/two would be lost)", err)
	}
	cur = read()
	if err := RemoveFinalizer(ctx, c, cur, "a/one"); err != nil {
		t.Fatal(err)
	}
	if got := read().Finalizers; len(got) != 1 || got[0] != "b/two" {
		t.Errorf("finalizers %v, want [b/two]", got)
	}
	if err := RemoveFinalizer(ctx, c, read(), "b/two"); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, read()); err != nil {
		t.Fatal(err)
	}
	gone := cur.DeepCopy()
	gone.Finalizers = []string{"a/one"}
	if err := RemoveFinalizer(ctx, c, gone, "a/one"); err != nil {
		t.Errorf("removing from an object already gone: %v", err)
	}
}
