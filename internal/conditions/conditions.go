// Package conditions sets and reads metav1.Conditions the way every reconciler of this
// operator needs: stamped with the object's generation, with the transition time kept
// when the status did not change, and with a clock that tests can replace.
package conditions

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Clock returns the current time. Tests inject a fixed one.
type Clock func() time.Time

// Setter writes conditions onto one object's condition list.
type Setter struct {
	// Conditions is the object's condition list, modified in place.
	Conditions *[]metav1.Condition
	// Generation is the object's metadata.generation, stamped on every condition.
	Generation int64
	// Now is the clock; nil means time.Now.
	Now Clock
}

// Set records a condition. It returns true when anything about the condition changed
// (status, reason, message or observed generation), which is when the status needs a
// write. The transition time moves only when the status itself changes.
func (s Setter) Set(condType string, status metav1.ConditionStatus, reason, message string) bool {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	prev := meta.FindStatusCondition(*s.Conditions, condType)
	if prev != nil && prev.Status == status && prev.Reason == reason && prev.Message == message &&
		prev.ObservedGeneration == s.Generation {
		return false
	}
	next := metav1.Condition{
		Type:               condType,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: s.Generation,
		// Truncated to seconds: the API server stores RFC 3339 seconds, and a finer
		// in-memory time would make every comparison after a round trip differ.
		LastTransitionTime: metav1.NewTime(now().Truncate(time.Second)),
	}
	if prev != nil && prev.Status == status {
		next.LastTransitionTime = prev.LastTransitionTime
	}
	meta.SetStatusCondition(s.Conditions, next)
	return true
}

// True records a True condition.
func (s Setter) True(condType, reason, message string) bool {
	return s.Set(condType, metav1.ConditionTrue, reason, message)
}

// False records a False condition.
func (s Setter) False(condType, reason, message string) bool {
	return s.Set(condType, metav1.ConditionFalse, reason, message)
}

// Unknown records an Unknown condition.
func (s Setter) Unknown(condType, reason, message string) bool {
	return s.Set(condType, metav1.ConditionUnknown, reason, message)
}

// Remove drops a condition that no longer applies; it reports whether one was removed.
func (s Setter) Remove(condType string) bool {
	return meta.RemoveStatusCondition(s.Conditions, condType)
}

// IsTrue reports whether the condition is present, True and observed at generation.
func IsTrue(conds []metav1.Condition, condType string, generation int64) bool {
	c := meta.FindStatusCondition(conds, condType)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == generation
}

// Get returns the condition of the type, or nil.
func Get(conds []metav1.Condition, condType string) *metav1.Condition {
	return meta.FindStatusCondition(conds, condType)
}

// Summary is the first condition among types that is not True, or nil when all are.
// Reconcilers derive Ready from it so that Ready names the phase that blocks.
func Summary(conds []metav1.Condition, types ...string) *metav1.Condition {
	for _, t := range types {
		c := meta.FindStatusCondition(conds, t)
		if c == nil {
			return &metav1.Condition{Type: t, Status: metav1.ConditionUnknown, Reason: "NotReconciled", Message: t + " has not been reconciled yet"}
		}
		if c.Status != metav1.ConditionTrue {
			return c
		}
	}
	return nil
}
