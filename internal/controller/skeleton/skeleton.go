// Package skeleton holds what both reconcilers share around their phases: the phase
// table and its runner, the Events a reconcile gathers and emits only once the status
// write that records them succeeded, and the one way the finalizer is written.
package skeleton

import (
	"context"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/conditions"
	"bnerd.net/vpn-operator/internal/controller/outcome"
)

// Phase is one ensure-function and the condition it owns, run in table order on C (the
// reconcile's context: a gateway or a link). Run returns done=true to carry on with the
// next phase, done=false to stop here (waiting for something; the condition says what),
// or an error classified by outcome.
type Phase[C any] struct {
	Cond string
	Run  func(ctx context.Context, c C) (done bool, err error)
	// Record: the phase's result is written to status before the next phase runs,
	// because the next phases program OpenStack with it (persist before programming).
	// The other phases' results are written once, at the end of the reconcile: what
	// they made is found again by its tags after a crash.
	Record bool
	// Independent: the phases after this one run even when it did not complete.
	Independent bool
	// Blocks are the conditions marked waiting for this one when it stops and they
	// were never evaluated, so Ready names the blocking phase.
	Blocks []string
	// Unlisted: the phase runs but Ready does not summarise its condition (an IPsec
	// gateway's key phase only removes a key left from its WireGuard past).
	Unlisted bool
}

// Runner runs a phase table.
type Runner[C any] struct {
	// Persist writes the status now (after a Record phase). Required when a phase
	// records.
	Persist func(ctx context.Context, c C) error
	// Waiting marks the conditions a stopped phase blocks (nil: nothing is marked).
	Waiting func(c C, blocked string, next []string)
}

// Run runs the phases in order and says how they ended: runErr is the failure that
// decides the requeue (of two, the one worth a retry: a transient failure over a
// terminal one), prefixed with its phase's condition; persistErr is a failed write after
// a Record phase, which stops the run at once (nothing after it may act on an
// unrecorded result).
func (r Runner[C]) Run(ctx context.Context, c C, table []Phase[C]) (runErr, persistErr error) {
	for _, p := range table {
		done, err := p.Run(ctx, c)
		if done && err == nil {
			if p.Record {
				if perr := r.Persist(ctx, c); perr != nil {
					return runErr, perr
				}
			}
			continue
		}
		if r.Waiting != nil {
			r.Waiting(c, p.Cond, p.Blocks)
		}
		if err != nil && (runErr == nil || outcome.IsTerminal(runErr) && !outcome.IsTerminal(err)) {
			runErr = fmt.Errorf("%s: %w", p.Cond, err)
		}
		if !p.Independent {
			break
		}
	}
	return runErr, nil
}

// Conditions are the conditions Ready summarises, in the order of the phases that
// complete them: a condition several phases check stands at the last of them (a leg's
// mismatch check and its attachment both set LegAttached; the attachment completes it).
func Conditions[C any](table []Phase[C]) []string {
	var out []string
	for _, p := range table {
		if p.Unlisted {
			continue
		}
		out = slices.DeleteFunc(out, func(c string) bool { return c == p.Cond })
		out = append(out, p.Cond)
	}
	return out
}

// BlockRest gives every phase that names no Blocks of its own the listed conditions of
// the phases after it: in a table where each phase builds on all before it (a
// gateway's), a phase that stops blocks everything after it.
func BlockRest[C any](table []Phase[C]) []Phase[C] {
	for i := range table {
		if table[i].Blocks != nil {
			continue
		}
		var rest []string
		for _, c := range Conditions(table[i+1:]) {
			if c != table[i].Cond {
				rest = append(rest, c)
			}
		}
		table[i].Blocks = rest
	}
	return table
}

// MarkWaiting marks the conditions of next that were never evaluated (absent, or
// marked waiting before) Unknown with reason NotReady, "waiting for <blocked>". A mark
// names the phase blocking now: a gateway whose port phase went through and whose node
// selection stops says its attachment waits for NodeSelected, not for PortReady.
func MarkWaiting(s conditions.Setter, blocked string, next []string) {
	for _, t := range next {
		if t == blocked {
			continue
		}
		if c := conditions.Get(*s.Conditions, t); c == nil || IsWaiting(c) {
			s.Set(t, metav1.ConditionUnknown, v1alpha1.ReasonNotReady, "waiting for "+blocked)
		}
	}
}

// IsWaiting reports whether c is a waiting mark (MarkWaiting): a condition no phase
// has evaluated yet.
func IsWaiting(c *metav1.Condition) bool {
	return c != nil && c.Status == metav1.ConditionUnknown && c.Reason == v1alpha1.ReasonNotReady
}
