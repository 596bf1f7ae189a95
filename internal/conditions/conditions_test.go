package conditions

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSetKeepsTransitionTimeWhenStatusUnchanged(t *testing.T) {
	var conds []metav1.Condition
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	now := t0
	s := Setter{Conditions: &conds, Generation: 1, Now: func() time.Time { return now }}

	if !s.True("Ready", "Reconciled", "all good") {
		t.Fatal("first Set must report a change")
	}
	now = t0.Add(time.Minute)
	if s.True("Ready", "Reconciled", "all good") {
		t.Fatal("identical Set must report no change")
	}
	if !s.True("Ready", "Reconciled", "still good") {
		t.Fatal("message change must report a change")
	}
	if got := conds[0].LastTransitionTime.Time; !got.Equal(t0) {
		t.Fatalf("transition time moved on a message change: %v", got)
	}
	now = t0.Add(2 * time.Minute)
	if !s.False("Ready", "NotReady", "broken") {
		t.Fatal("status change must report a change")
	}
	if got := conds[0].LastTransitionTime.Time; !got.Equal(t0.Add(2 * time.Minute)) {
		t.Fatalf("transition time did not move on a status change: %v", got)
	}
}

func TestSetStampsGeneration(t *testing.T) {
	var conds []metav1.Condition
	s := Setter{Conditions: &conds, Generation: 3}
	s.True("Validated", "Valid", "")
	if conds[0].ObservedGeneration != 3 {
		t.Fatalf("observedGeneration = %d, want 3", conds[0].ObservedGeneration)
	}
	s.Generation = 4
	if !s.True("Validated", "Valid", "") {
		t.Fatal("a new generation must be recorded even when nothing else changed")
	}
	if !IsTrue(conds, "Validated", 4) || IsTrue(conds, "Validated", 3) {
		t.Fatal("IsTrue must honour the generation")
	}
}

func TestSummaryNamesFirstBlockingPhase(t *testing.T) {
	var conds []metav1.Condition
	s := Setter{Conditions: &conds, Generation: 1}
	s.True("A", "ok", "")
	s.False("B", "Broken", "b is broken")
	s.False("C", "Broken", "c is broken")
	if got := Summary(conds, "A", "B", "C"); got == nil || got.Type != "B" {
		t.Fatalf("Summary = %+v, want B", got)
	}
	if got := Summary(conds, "A", "Z"); got == nil || got.Type != "Z" || got.Status != metav1.ConditionUnknown {
		t.Fatalf("missing condition must summarise as Unknown, got %+v", got)
	}
	if got := Summary(conds, "A"); got != nil {
		t.Fatalf("all true must summarise as nil, got %+v", got)
	}
	if !s.Remove("C") || Get(conds, "C") != nil {
		t.Fatal("Remove must drop the condition")
	}
}
