// Package rollout paces the restarts of gateway pods that a new rendering of the
// operator's own (new images, new pod settings) would cause: one canary first, then at
// most a budget of gateways restarting at once, each waited for until its pod is ready
// and the tunnels that were up before are up again; a gateway that does not come back
// within a deadline halts the rollout, and the gateways not yet rolled keep their pods.
//
// The Gate holds only this process's view. What must survive a restart of the operator
// (which gateways are rolling, since when, how many tunnels they had up) is written on
// the gateways' Deployments by the caller and handed back through Resume.
package rollout

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Budget is how many gateways may restart at once: a count, or a percentage of the
// gateways the operator knows (rounded up, at least one).
type Budget struct {
	n       int
	percent bool
}

// ParseBudget reads "N" or "N%" (N at least 1; a percentage at most 100). A budget of 0
// would stop every rollout for good, so it is refused rather than taken for "halt".
func ParseBudget(s string) (Budget, error) {
	s = strings.TrimSpace(s)
	num, percent := strings.CutSuffix(s, "%")
	n, err := strconv.Atoi(num)
	switch {
	case err != nil:
		return Budget{}, fmt.Errorf("rollout budget %q: want a number of gateways or a percentage, like 3 or 10%%", s)
	case n < 1:
		return Budget{}, fmt.Errorf("rollout budget %q: at least one gateway must be allowed to restart at a time", s)
	case percent && n > 100:
		return Budget{}, fmt.Errorf("rollout budget %q: a percentage is at most 100%%", s)
	}
	return Budget{n: n, percent: percent}, nil
}

// Of is the number of gateways that may restart at once among total.
func (b Budget) Of(total int) int {
	if !b.percent {
		return max(b.n, 1)
	}
	return max(int(math.Ceil(float64(total)*float64(b.n)/100)), 1)
}

func (b Budget) String() string {
	if b.percent {
		return strconv.Itoa(b.n) + "%"
	}
	return strconv.Itoa(b.n)
}

// Gateway names one gateway to the gate: its UID, and its kind and key, to wake it.
type Gateway struct {
	UID  types.UID
	Kind string
	Key  types.NamespacedName
}

// flight is a gateway restarting to the new rendering.
type flight struct {
	gw    Gateway
	since time.Time
}

// Gate decides which gateway may restart next. Safe for concurrent use.
type Gate struct {
	Budget  Budget
	Timeout time.Duration
	// Wake is called (outside the gate's lock) for each waiting gateway that may now be
	// admitted: a slot freed or a halt ended.
	Wake func(Gateway)
	Now  func() time.Time

	mu       sync.Mutex
	known    map[types.UID]bool
	flights  map[types.UID]flight
	waiting  []Gateway
	canaried bool // a gateway restarted and came back in this process
	// wasHalted: a decision found the rollout halted since the last wake-up.
	wasHalted bool
	resumed   bool
}

func (g *Gate) now() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

func (g *Gate) init() {
	if g.known == nil {
		g.known = map[types.UID]bool{}
		g.flights = map[types.UID]flight{}
	}
}

// Resumed reports whether Resume was called; the caller resumes once, before the first
// decision.
func (g *Gate) Resumed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.resumed
}

// Resume records the gateways a previous process had restarting (from their
// Deployments) with the time each was restarted.
func (g *Gate) Resume(rolling map[Gateway]time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.init()
	for gw, since := range rolling {
		g.known[gw.UID] = true
		if _, ok := g.flights[gw.UID]; !ok {
			g.flights[gw.UID] = flight{gw: gw, since: since}
		}
	}
	g.resumed = true
}

// Known counts a gateway towards the percentage budget.
func (g *Gate) Known(uid types.UID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.init()
	g.known[uid] = true
}

// Decision is the gate's answer to a gateway that wants to restart.
type Decision struct {
	// Admitted: restart now (the gateway is counted as restarting from now on).
	Admitted bool
	// Halted: a restarted gateway did not come back within the timeout; nothing more is
	// admitted until it does (or is deleted).
	Halted bool
	// Ahead is the number of gateways restarting or waiting ahead of this one, Slots the
	// number that may restart at once now (1 until the canary came back).
	Ahead, Slots int
	// Since is when the gateway was admitted (Admitted only).
	Since time.Time
}

// Admit asks for a restart of gw. A gateway already restarting is admitted again (its
// Since unchanged). Waiting gateways are admitted in the order they first asked.
func (g *Gate) Admit(gw Gateway) Decision {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.init()
	g.known[gw.UID] = true
	if f, ok := g.flights[gw.UID]; ok {
		return Decision{Admitted: true, Since: f.since}
	}
	pos := slices.IndexFunc(g.waiting, func(w Gateway) bool { return w.UID == gw.UID })
	if pos < 0 {
		g.waiting = append(g.waiting, gw)
		pos = len(g.waiting) - 1
	}
	slots := g.slots()
	d := Decision{Slots: slots, Ahead: len(g.flights) + pos, Halted: g.halted()}
	if d.Halted || d.Ahead >= slots {
		return d
	}
	g.waiting = slices.Delete(g.waiting, pos, pos+1)
	now := g.now()
	g.flights[gw.UID] = flight{gw: gw, since: now}
	return Decision{Admitted: true, Since: now, Slots: slots}
}

// slots: one canary until a restarted gateway came back in this process, then the
// budget.
func (g *Gate) slots() int {
	if !g.canaried {
		return 1
	}
	return g.Budget.Of(len(g.known))
}

func (g *Gate) halted() bool {
	now := g.now()
	for _, f := range g.flights {
		if g.Timeout > 0 && now.Sub(f.since) > g.Timeout {
			g.wasHalted = true
			return true
		}
	}
	return false
}

// Rolling reports whether uid is restarting, since when, and whether it is overdue
// (restarting for longer than the timeout: the rollout is halted on it).
func (g *Gate) Rolling(uid types.UID) (since time.Time, overdue, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f, ok := g.flights[uid]
	if !ok {
		return time.Time{}, false, false
	}
	return f.since, g.Timeout > 0 && g.now().Sub(f.since) > g.Timeout, true
}

// Waiting reports whether uid waits for a slot.
func (g *Gate) Waiting(uid types.UID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.ContainsFunc(g.waiting, func(w Gateway) bool { return w.UID == uid })
}

// Halted reports whether an overdue restart holds the rollout.
func (g *Gate) Halted() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.halted()
}

// Back records that uid's restart is complete: its pod is ready and its tunnels are
// back. The first one back ends the canary stage.
func (g *Gate) Back(uid types.UID) {
	g.mu.Lock()
	_, ok := g.flights[uid]
	delete(g.flights, uid)
	if ok {
		g.canaried = true
	}
	wake := g.wakeable()
	g.mu.Unlock()
	g.wake(wake)
}

// Withdraw takes uid out of the waiting line: it no longer needs a slot (its pod
// restarts anyway, or its rendering no longer differs). A restart in progress is not
// withdrawn: it ends with Back, or Forget.
func (g *Gate) Withdraw(uid types.UID) {
	g.mu.Lock()
	n := len(g.waiting)
	g.waiting = slices.DeleteFunc(g.waiting, func(w Gateway) bool { return w.UID == uid })
	var wake []Gateway
	if len(g.waiting) != n {
		wake = g.wakeable()
	}
	g.mu.Unlock()
	g.wake(wake)
}

// Forget drops a deleted gateway entirely: waiting, restarting and counted.
func (g *Gate) Forget(uid types.UID) {
	g.mu.Lock()
	g.init()
	delete(g.flights, uid)
	delete(g.known, uid)
	g.waiting = slices.DeleteFunc(g.waiting, func(w Gateway) bool { return w.UID == uid })
	wake := g.wakeable()
	g.mu.Unlock()
	g.wake(wake)
}

// Queue is where uid waits: the gateways restarting or waiting ahead of it, the slots
// open at once now, and whether the rollout is halted. ok is false when it does not wait.
func (g *Gate) Queue(uid types.UID) (ahead, slots int, halted, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	pos := slices.IndexFunc(g.waiting, func(w Gateway) bool { return w.UID == uid })
	if pos < 0 {
		return 0, 0, false, false
	}
	return len(g.flights) + pos, g.slots(), g.halted(), true
}

// WakeWaiting wakes every waiting gateway, to look at the gate again (a halt began).
func (g *Gate) WakeWaiting() {
	g.mu.Lock()
	all := slices.Clone(g.waiting)
	g.mu.Unlock()
	g.wake(all)
}

// wakeable is the waiting gateways that would be admitted now; after a halt, every
// waiting gateway (those not admitted say they wait for a slot, no longer for the halt).
func (g *Gate) wakeable() []Gateway {
	if g.halted() {
		return nil
	}
	if g.wasHalted {
		g.wasHalted = false
		return slices.Clone(g.waiting)
	}
	free := g.slots() - len(g.flights)
	if free <= 0 {
		return nil
	}
	return slices.Clone(g.waiting[:min(free, len(g.waiting))])
}

func (g *Gate) wake(gws []Gateway) {
	if g.Wake == nil {
		return
	}
	for _, gw := range gws {
		g.Wake(gw)
	}
}
