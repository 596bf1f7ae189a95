package skeleton

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/conditions"
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

// In a table where each phase builds on all before it, a phase blocks the listed
// conditions after it (not an unlisted one, not its own again); Blocks a phase names
// are kept.
func TestBlockRestBlocksWhatComesAfter(t *testing.T) {
	u := ph("K", true, nil)
	u.Unlisted = true
	own := ph("P", true, nil)
	own.Blocks = []string{"R"}
	table := BlockRest([]Phase[*run]{ph("V", true, nil), u, ph("L", true, nil), own, ph("L", true, nil), ph("R", true, nil)})
	for i, want := range [][]string{{"P", "L", "R"}, {"P", "L", "R"}, {"P", "R"}, {"R"}, {"R"}, nil} {
		if !slices.Equal(table[i].Blocks, want) {
			t.Errorf("phase %d (%s) blocks %v, want %v", i, table[i].Cond, table[i].Blocks, want)
		}
	}
}

// A stopped phase marks only conditions no phase evaluated (absent, or marked before,
// then re-marked for the phase blocking now); an evaluated condition keeps what its
// phase said, whatever its status.
func TestMarkWaitingMarksOnlyWhatWasNeverEvaluated(t *testing.T) {
	conds := []metav1.Condition{
		{Type: "A", Status: metav1.ConditionFalse, Reason: "Refused", Message: "no"},
		{Type: "B", Status: metav1.ConditionUnknown, Reason: "Attaching", Message: "waiting for Nova"},
		{Type: "C", Status: metav1.ConditionUnknown, Reason: v1alpha1.ReasonNotReady, Message: "waiting for X"},
	}
	s := conditions.Setter{Conditions: &conds, Generation: 3}
	MarkWaiting(s, "P", []string{"P", "A", "B", "C", "D"})
	for typ, want := range map[string]string{"A": "False/Refused/no", "B": "Unknown/Attaching/waiting for Nova",
		"C": "Unknown/NotReady/waiting for P", "D": "Unknown/NotReady/waiting for P"} {
		c := conditions.Get(conds, typ)
		if c == nil {
			t.Errorf("%s: absent", typ)
			continue
		}
		if got := string(c.Status) + "/" + c.Reason + "/" + c.Message; got != want {
			t.Errorf("%s = %s, want %s", typ, got, want)
		}
		if got := IsWaiting(c); got != (typ == "C" || typ == "D") {
			t.Errorf("IsWaiting(%s) = %v", typ, got)
		}
	}
	if conditions.Get(conds, "P") != nil {
		t.Error("the blocked phase marked itself waiting")
	}
}
