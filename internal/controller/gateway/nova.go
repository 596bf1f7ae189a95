package gateway

import (
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/conditions"
)

// novaOp is an attach or detach this process asked Nova for.
type novaOp struct {
	detach       bool
	port, server string
	since        time.Time
}

func (o novaOp) same(p novaOp) bool {
	return o.detach == p.detach && o.port == p.port && o.server == p.server
}

// waiting is the condition message while Nova works; it names the port and the server,
// which is how a restarted operator recognises its own request.
func (o novaOp) waiting() string {
	if o.detach {
		return "detach of port " + o.port + " from server " + o.server + " requested; waiting for Nova to finish it"
	}
	return "attach of port " + o.port + " to server " + o.server + " requested; waiting for Nova to finish it"
}

// novaAsked reports whether op was asked of Nova recently enough to wait for it rather
// than ask again. Besides this process's memory, the condition counts: a restarted
// operator that finds its predecessor's recorded request waits a full window before it
// asks again. After PortWait.Timeout without a result the request is repeated (Nova may
// have dropped it).
func (r *Reconciler) novaAsked(g *gateway, op novaOp, reason string) bool {
	uid := g.obj.GetUID()
	now := time.Now()
	r.novaMu.Lock()
	defer r.novaMu.Unlock()
	if cur, ok := r.nova[uid]; ok && cur.same(op) {
		if now.Sub(cur.since) < r.PortWait.Timeout {
			return true
		}
		r.Log.Info("Nova did not finish in time; asking again", "gateway", g.String(), "request", op.waiting(), "after", r.PortWait.Timeout.String())
		return false
	}
	if c := conditions.Get(g.status.Conditions, v1alpha1.ConditionPortAttached); c != nil &&
		c.Reason == reason && strings.Contains(c.Message, op.port) && strings.Contains(c.Message, op.server) {
		op.since = now
		r.nova[uid] = op
		return true
	}
	return false
}

// novaTimedOut reports whether this process asked Nova for op longer than
// PortWait.Timeout ago without a result.
func (r *Reconciler) novaTimedOut(g *gateway, op novaOp) bool {
	r.novaMu.Lock()
	defer r.novaMu.Unlock()
	cur, ok := r.nova[g.obj.GetUID()]
	return ok && cur.same(op) && !cur.since.IsZero() && time.Since(cur.since) >= r.PortWait.Timeout
}

func (r *Reconciler) novaStart(uid types.UID, op novaOp) {
	op.since = time.Now()
	r.novaMu.Lock()
	r.nova[uid] = op
	r.novaMu.Unlock()
}

func (r *Reconciler) novaDone(uid types.UID) {
	r.novaMu.Lock()
	delete(r.nova, uid)
	r.novaMu.Unlock()
}
