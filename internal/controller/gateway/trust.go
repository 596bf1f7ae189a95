package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// The gateway pod's token may write the gateway's status (its status agent reports the
// tunnels there), and the status also holds what the operator decided: the service
// CIDR, the port's address, the node. Those are never taken from status as they are:
// each is checked against the operator's own record of it (the allocator, rebuilt from
// the service-CIDR tags of the gateways' ports; the gateway's tagged Neutron port; the
// placement rules and the port's attachment), and a differing value is written back.

// statusForged records that status.<field> said got where the operator's record says
// want: a Warning Event (reason StatusForged) and a log line. The caller puts want back,
// and the next status write records it.
func (r *Reconciler) statusForged(ctx context.Context, g *gateway, field, got, want, record string) {
	logr.FromContextOrDiscard(ctx).Info("WARNING: a status field the operator acts on was written by someone else; restoring it",
		"field", "status."+field, "found", got, "restored", want)
	if want == "" {
		want = "nothing"
	}
	g.events.Transition(corev1.EventTypeWarning, v1alpha1.ReasonStatusForged, "Reconcile",
		"%s", fmt.Sprintf("status.%s said %q, but %s is %s: the operator did not write it and does not act on it; restored", field, got, record, want))
}

// actedOnMemory is how long this process remembers the values of the acted-on fields it
// wrote: the watch events of its own writes come back well within it.
const actedOnMemory = 30 * time.Second

type actedOnWrite struct {
	values actedOn
	at     time.Time
}

// writingActedOn remembers, before a status write, the acted-on values it carries.
func (r *Reconciler) writingActedOn(uid types.UID, v actedOn) {
	r.actedMu.Lock()
	defer r.actedMu.Unlock()
	if r.acted == nil {
		r.acted = map[types.UID][]actedOnWrite{}
	}
	now := time.Now()
	keep := r.acted[uid][:0]
	for _, w := range r.acted[uid] {
		if now.Sub(w.at) < actedOnMemory && w.values != v {
			keep = append(keep, w)
		}
	}
	r.acted[uid] = append(keep, actedOnWrite{v, now})
}

// wroteActedOn reports whether this process wrote the acted-on values v lately.
func (r *Reconciler) wroteActedOn(uid types.UID, v actedOn) bool {
	r.actedMu.Lock()
	defer r.actedMu.Unlock()
	for _, w := range r.acted[uid] {
		if w.values == v && time.Since(w.at) < actedOnMemory {
			return true
		}
	}
	return false
}

func (r *Reconciler) forgetActedOn(uid types.UID) {
	r.actedMu.Lock()
	delete(r.acted, uid)
	r.actedMu.Unlock()
}
