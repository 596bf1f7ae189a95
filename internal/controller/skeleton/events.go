package skeleton

import (
	"fmt"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// Events gathers the Events of one reconcile, in order, and sends them after the status
// write that records what they tell (Emit). When that write fails (WriteFailed), the
// transitions are forgotten: the next reconcile starts from a fresh read, finds the same
// change again and tells it then, so no Event announces a state the API server never
// stored. The actions are sent all the same: what was done in the world (a pod deleted,
// a port created) happened whether or not the status says so, and no later reconcile
// does it again to tell it.
type Events struct {
	pending []pendingEvent
}

type pendingEvent struct {
	typ, reason, action, note string
	transition                bool
}

// Add gathers an action's Event (type Normal or Warning, a reason, the action it is
// about).
func (e *Events) Add(typ, reason, action, format string, args ...any) {
	e.pending = append(e.pending, pendingEvent{typ, reason, action, fmt.Sprintf(format, args...), false})
}

// Transition gathers the Event of a change of status (a condition that moved, a field
// restored).
func (e *Events) Transition(typ, reason, action, format string, args ...any) {
	e.pending = append(e.pending, pendingEvent{typ, reason, action, fmt.Sprintf(format, args...), true})
}

// FirstTrue reports the one condition change no Event announces: a condition set True
// where it was absent, a phase completing on the way to its object's first convergence.
// That convergence is announced once (a gateway's Ready=True; a link's actions: leg
// created, attached, route installed), not once per phase: at a thousand gateways the
// per-phase Events were about as many creates for the API server as every other write of
// a gateway's creation together. A first False or Unknown is news (something failed or
// waits), and so is every later change. A condition only marked waiting for an earlier
// phase (MarkWaiting) was never evaluated: its first True is quiet too.
func FirstTrue(prev *metav1.Condition, status metav1.ConditionStatus) bool {
	return (prev == nil || IsWaiting(prev)) && status == metav1.ConditionTrue
}

// Emit sends the gathered Events about obj (none when rec is nil) and forgets them.
func (e *Events) Emit(rec events.EventRecorder, obj runtime.Object) {
	if rec != nil {
		for _, p := range e.pending {
			rec.Eventf(obj, nil, p.typ, p.reason, p.action, "%s", fitNote(p.note))
		}
	}
	e.pending = nil
}

// noteLimit is the API server's limit on an Event's note (events.k8s.io/v1), in bytes:
// a longer one is refused whole ("can have at most 1024 characters"), and the Event lost.
const noteLimit = 1024

const cutMark = " … (cut to the Event's 1,024-byte limit)"

// fitNote cuts a note the API server would refuse, at a character boundary, and says so.
// (An Event naming a hundred ClusterLinks' networks was refused for every gateway.)
func fitNote(note string) string {
	if len(note) <= noteLimit {
		return note
	}
	cut := noteLimit - len(cutMark)
	for cut > 0 && !utf8.RuneStart(note[cut]) {
		cut--
	}
	return note[:cut] + cutMark
}

// WriteFailed sends the actions' Events and forgets the transitions': the write that
// would have recorded them failed.
func (e *Events) WriteFailed(rec events.EventRecorder, obj runtime.Object) {
	kept := e.pending[:0]
	for _, p := range e.pending {
		if !p.transition {
			kept = append(kept, p)
		}
	}
	e.pending = kept
	e.Emit(rec, obj)
}
