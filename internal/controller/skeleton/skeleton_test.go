package skeleton

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/controller/outcome"
	"bnerd.net/vpn-operator/internal/openstack"
)

// run is a recording context: which phases ran, which writes happened, what was marked.
type run struct {
	ran, persisted, waiting []string
	persistErr              error
}

func ph(cond string, done bool, err error) Phase[*run] {
	return Phase[*run]{Cond: cond, Run: func(_ context.Context, r *run) (bool, error) {
		r.ran = append(r.ran, cond)
		return done, err
	}}
}

func runner() Runner[*run] {
	return Runner[*run]{
		Persist: func(_ context.Context, r *run) error {
			r.persisted = append(r.persisted, r.ran[len(r.ran)-1])
			return r.persistErr
		},
		Waiting: func(r *run, blocked string, next []string) {
			r.waiting = append(r.waiting, blocked+">"+strings.Join(next, ","))
		},
	}
}

func TestRunStopsAtThePhaseThatDidNotComplete(t *testing.T) {
	r := &run{}
	b := ph("B", false, nil)
	b.Blocks = []string{"C", "D"}
	runErr, perr := runner().Run(context.Background(), r, []Phase[*run]{ph("A", true, nil), b, ph("C", true, nil)})
	if runErr != nil || perr != nil {
		t.Fatalf("errors %v %v", runErr, perr)
	}
	if !slices.Equal(r.ran, []string{"A", "B"}) || !slices.Equal(r.waiting, []string{"B>C,D"}) {
		t.Errorf("ran %v, waiting %v", r.ran, r.waiting)
	}
}

func TestRunRecordsBeforeTheNextPhaseAndStopsWhenTheWriteFails(t *testing.T) {
	r := &run{}
	a := ph("A", true, nil)
	a.Record = true
	b := ph("B", true, nil) // not recorded: written at the end by the caller
	c := ph("C", true, nil)
	c.Record = true
	if _, perr := runner().Run(context.Background(), r, []Phase[*run]{a, b, c}); perr != nil {
		t.Fatal(perr)
	}
	if !slices.Equal(r.persisted, []string{"A", "C"}) {
		t.Errorf("persisted after %v, want A and C", r.persisted)
	}

	r = &run{persistErr: errors.New("conflict")}
	_, perr := runner().Run(context.Background(), r, []Phase[*run]{a, b})
	if perr == nil || !slices.Equal(r.ran, []string{"A"}) {
		t.Errorf("a failed write after A: err %v, ran %v (B must not act on an unrecorded result)", perr, r.ran)
	}

	// A phase that stops is not recorded by the runner.
	r = &run{}
	stop := ph("S", false, nil)
	stop.Record = true
	_, _ = runner().Run(context.Background(), r, []Phase[*run]{stop})
	if len(r.persisted) != 0 {
		t.Errorf("persisted after a phase that did not complete: %v", r.persisted)
	}
}

func TestRunGoesOnPastAnIndependentPhaseAndKeepsTheRetryableFailure(t *testing.T) {
	r := &run{}
	refused := fmt.Errorf("router: %w", openstack.ErrNotFound)
	a := ph("A", false, refused)
	a.Independent = true
	b := ph("B", false, errors.New("timeout"))
	b.Independent = true
	c := ph("C", false, fmt.Errorf("network: %w", openstack.ErrAmbiguous))
	runErr, _ := runner().Run(context.Background(), r, []Phase[*run]{a, b, c, ph("D", true, nil)})
	if !slices.Equal(r.ran, []string{"A", "B", "C"}) {
		t.Errorf("ran %v, want A B C (C is not independent)", r.ran)
	}
	if runErr == nil || outcome.IsTerminal(runErr) || !strings.HasPrefix(runErr.Error(), "B: ") {
		t.Errorf("runErr %v: want B's transient failure, named by its condition", runErr)
	}

	// Two terminal failures: the first decides.
	r = &run{}
	runErr, _ = runner().Run(context.Background(), r, []Phase[*run]{a, c})
	if !outcome.IsTerminal(runErr) || !strings.HasPrefix(runErr.Error(), "A: ") {
		t.Errorf("runErr %v: want A's refusal", runErr)
	}
}

func TestRunWithoutWaitingMarksNothing(t *testing.T) {
	r := &run{}
	rn := runner()
	rn.Waiting = nil
	if _, perr := rn.Run(context.Background(), r, []Phase[*run]{ph("A", false, outcome.Wait(time.Second, "nova"))}); perr != nil {
		t.Fatal(perr)
	}
	if len(r.waiting) != 0 {
		t.Errorf("waiting %v", r.waiting)
	}
}

func TestConditionsStandAtTheirLastPhase(t *testing.T) {
	u := ph("K", true, nil)
	u.Unlisted = true
	table := []Phase[*run]{ph("V", true, nil), u, ph("L", true, nil), ph("T", true, nil), ph("L", true, nil), ph("R", true, nil)}
	if got, want := Conditions(table), []string{"V", "T", "L", "R"}; !slices.Equal(got, want) {
		t.Errorf("Conditions = %v, want %v", got, want)
	}
}
