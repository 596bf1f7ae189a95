// Package vici loads the rendered swanctl configuration into charon over its VICI socket
// and reads tunnel state back. It converts the same swanctl.conf text the operator
// renders, so what the gateway runs is exactly what was rendered and reviewed.
package vici

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	govici "github.com/strongswan/govici/vici"

	"bnerd.net/vpn-operator/internal/agent/downcause"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// listKeys are the swanctl.conf keys whose comma-separated values are lists in VICI
// (the same set swanctl's own load-conns uses).
var listKeys = map[string]bool{
	"local_addrs": true, "remote_addrs": true, "proposals": true, "esp_proposals": true,
	"ah_proposals": true, "local_ts": true, "remote_ts": true, "vips": true, "pools": true,
	"groups": true, "cert_policy": true,
}

func sectionMessage(s *gatewayconfig.Section) (*govici.Message, error) {
	m := govici.NewMessage()
	for _, kv := range s.Keys {
		var v any = kv.Value
		if listKeys[kv.Key] {
			parts := strings.Split(kv.Value, ",")
			for i := range parts {
				parts[i] = strings.TrimSpace(parts[i])
			}
			v = parts
		}
		if err := m.Set(kv.Key, v); err != nil {
			return nil, err
		}
	}
	for _, c := range s.Sections {
		sub, err := sectionMessage(c)
		if err != nil {
			return nil, err
		}
		if err := m.Set(c.Name, sub); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Connection is one connection of swanctl.conf ready for load-conn.
type Connection struct {
	Name    string
	Message *govici.Message
	// Hash identifies the connection's content; an unchanged hash is not reloaded.
	Hash string
}

// Connections converts the connections section of swanctl.conf text.
func Connections(swanctl string) ([]Connection, error) {
	root, err := gatewayconfig.ParseSettings(swanctl)
	if err != nil {
		return nil, fmt.Errorf("parsing swanctl.conf: %w", err)
	}
	conns := root.Sub("connections")
	if conns == nil {
		return nil, fmt.Errorf("swanctl.conf has no connections section")
	}
	var out []Connection
	for _, c := range conns.Sections {
		body, err := sectionMessage(c)
		if err != nil {
			return nil, fmt.Errorf("connection %s: %w", c.Name, err)
		}
		msg := govici.NewMessage()
		if err := msg.Set(c.Name, body); err != nil {
			return nil, err
		}
		h := sha256.New()
		for _, p := range flatten(c, "") {
			h.Write([]byte(p + "\n"))
		}
		out = append(out, Connection{Name: c.Name, Message: msg, Hash: hex.EncodeToString(h.Sum(nil))})
	}
	return out, nil
}

func flatten(s *gatewayconfig.Section, prefix string) []string {
	var out []string
	for _, kv := range s.Keys {
		out = append(out, prefix+kv.Key+"="+kv.Value)
	}
	for _, c := range s.Sections {
		out = append(out, flatten(c, prefix+c.Name+".")...)
	}
	return out
}

// Syncer keeps charon's connections and shared keys equal to the rendered files. It
// loads keys before connections, reloads only connections whose content changed, unloads
// removed ones, and initiates tunnels that are not up, so unchanged tunnels keep their
// SAs. The rendered connections have start_action = none and close_action = none: the
// loader decides when a tunnel is (re)initiated, which lets it
//
//   - retry a tunnel that does not come up with exponential backoff (RetryInitial,
//     doubling up to RetryMax) instead of every round, except when the peer did not
//     answer at all: charon's own retransmissions already pace that attempt, and a
//     client that fixes its side is picked up by the next one;
//   - recover half-open tunnels (an IKE SA without the tunnel's child SA): first a new
//     child SA inside the IKE SA, then, if that is refused too, a new IKE SA, whose child
//     is negotiated in IKE_AUTH without a key exchange (a peer that refuses PFS at
//     rekey comes back up this way);
//   - apply a changed connection make-before-break: charon keeps running SAs on the
//     settings they were made with (a rekey reuses them), so the loader initiates the
//     changed connection beside the running SA and deletes the old SA only once the new
//     one carries the tunnel. If the peer refuses the new settings the old SA keeps
//     running (ChangeRefused); if it refuses a second SA beside the first (a uniqueness
//     policy of "keep"), the old SA is torn down first (Reestablishing), and the status
//     says so. The gateway's own connections have the uniqueness policy "replace"
//     (package gatewayconfig), but charon checks it only as the responder of an
//     IKE_AUTH exchange: the new IKE SA the loader initiates here never makes charon
//     delete the running one, so the change stays make-before-break on this side;
//   - end duplicate IKE SAs: when the gateway and the peer initiate at the same moment,
//     two IKE SAs of the connection come up, each with a child SA for the same
//     selectors, rekeyed side by side (see endDuplicates).
type Syncer struct {
	Socket string
	// LocalAddress, when set, is the only address an IKE SA may run from (the gateway
	// port's fixed IP): an SA established from any other (over the pod network, before
	// the port's routing was in place) is terminated and initiated again.
	LocalAddress string
	// Logf receives one line per action; it never receives secret values.
	Logf func(format string, args ...any)
	// Causes tells why a tunnel's last attempt failed (charon's log, package cause).
	// Optional: without it every failure backs off.
	Causes interface {
		Cause(tunnel string) (downcause.Cause, bool)
		UpAt(tunnel string) time.Time
	}
	// RetryInitial is the wait after a first failed attempt, doubled per further failure
	// up to RetryMax (defaults 5s and 5m).
	RetryInitial, RetryMax time.Duration
	// MigrateTimeout bounds charon's attempt to bring up a changed connection beside the
	// running SA (default 20s).
	MigrateTimeout time.Duration
	Now            func() time.Time

	mu      sync.Mutex
	loaded  map[string]string
	secrets string
	plans   map[string]*plan

	pmu       sync.Mutex
	published map[string]Plan
}

// plan is the loader's memory of one tunnel between rounds.
type plan struct {
	// attempts counts consecutive attempts that did not bring the tunnel up; next is the
	// earliest time for the next one; last is when the last one was made.
	attempts   int
	next, last time.Time
	// childless counts consecutive rounds with an IKE SA but no child SA of the tunnel.
	childless int
	// change is set while a changed connection waits to be applied beside running SAs.
	change *change
	// reestablishing explains a teardown made to apply a change, until the tunnel is up.
	reestablishing string
	// up: the last round saw the tunnel up, so a listing that reads it down is taken
	// again before it counts (settle): one that caught an IKE rekey halfway would
	// otherwise have the loader initiate a redundant IKE SA.
	up bool
	// dups are the IKE SAs the last round found superseded by a newer one of the same
	// tunnel (endDuplicates): a second round that finds them so terminates them.
	dups map[string]bool
}

type change struct {
	refused string // why the last attempt to apply it failed
}

// Plan is what the loader intends for a tunnel, for the status agent.
type Plan struct {
	// Attempts failed in a row; Next is when the next attempt is due.
	Attempts int
	Next     time.Time
	// ChangeReason/ChangeMessage report a configuration change in flight:
	// ChangeRefused (the old SA keeps running) or Reestablishing (torn down to apply it).
	ChangeReason, ChangeMessage string
}

// Change reasons in a Plan.
const (
	ReasonChangeRefused  = "ChangeRefused"
	ReasonReestablishing = "Reestablishing"
)

// Result reports what one Apply did.
type Result struct {
	Loaded, Unloaded, Initiated []string
	// Migrated are changed tunnels now running on their new settings (make-before-break);
	// Restarted are tunnels whose IKE SA was ended to start over (half-open, or a change
	// that could not be applied beside it).
	Migrated, Restarted []string
	// Terminated are connections whose IKE SA ran from the wrong address.
	Terminated []string
	// Deduplicated are connections of which an older duplicate IKE SA was terminated.
	Deduplicated  []string
	SecretsLoaded bool
}

// SetLocalAddress sets LocalAddress (safe while Apply runs elsewhere).
func (l *Syncer) SetLocalAddress(a string) {
	l.mu.Lock()
	l.LocalAddress = a
	l.mu.Unlock()
}

func (l *Syncer) logf(format string, args ...any) {
	if l.Logf != nil {
		l.Logf(format, args...)
	}
}

func (l *Syncer) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

func (l *Syncer) backoff(attempts int) time.Duration {
	d, max := l.RetryInitial, l.RetryMax
	if d <= 0 {
		d = 5 * time.Second
	}
	if max <= 0 {
		max = 5 * time.Minute
	}
	for i := 1; i < attempts && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d
}

// Plan returns the loader's intentions for tunnel. It never waits for a running Apply
// (which may wait up to MigrateTimeout for a change to come up): it reads what the last
// step published.
func (l *Syncer) Plan(tunnel string) Plan {
	l.pmu.Lock()
	defer l.pmu.Unlock()
	return l.published[tunnel]
}

// publish makes p readable by Plan.
func (l *Syncer) publish(name string, p *plan) {
	out := Plan{Attempts: p.attempts, Next: p.next}
	switch {
	case p.reestablishing != "":
		out.ChangeReason, out.ChangeMessage = ReasonReestablishing, p.reestablishing
	case p.change != nil && p.change.refused != "":
		out.ChangeReason = ReasonChangeRefused
		out.ChangeMessage = "the peer refused the changed settings (" + p.change.refused + "); the tunnel still runs on the previous settings; next attempt at " + p.next.UTC().Format(time.RFC3339)
	}
	l.pmu.Lock()
	defer l.pmu.Unlock()
	if l.published == nil {
		l.published = map[string]Plan{}
	}
	l.published[name] = out
}

func (l *Syncer) plan(name string) *plan {
	if l.plans == nil {
		l.plans = map[string]*plan{}
	}
	p := l.plans[name]
	if p == nil {
		p = &plan{}
		l.plans[name] = p
	}
	return p
}

// Session opens a VICI session on the loader's socket.
func (l *Syncer) Session() (*govici.Session, error) {
	return Dial(l.Socket)
}

// Apply converges charon to swanctl and secrets text.
func (l *Syncer) Apply(ctx context.Context, swanctl, secrets string) (Result, error) {
	var res Result
	conns, err := Connections(swanctl)
	if err != nil {
		return res, err
	}
	keys, err := gatewayconfig.ParseSecrets(secrets)
	if err != nil {
		return res, err
	}
	s, err := l.Session()
	if err != nil {
		return res, fmt.Errorf("connecting to charon: %w", err)
	}
	defer s.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.loaded == nil {
		l.loaded = map[string]string{}
	}

	present, err := charonConns(ctx, s)
	if err != nil {
		return res, err
	}
	// A charon that lost its connections restarted: its keys are gone too.
	for name := range l.loaded {
		if !present[name] {
			delete(l.loaded, name)
			l.secrets = ""
		}
	}

	secretsHash := hashOf(secrets)
	if secretsHash != l.secrets {
		if err := loadShared(ctx, s, keys); err != nil {
			return res, err
		}
		l.secrets = secretsHash
		res.SecretsLoaded = true
		l.logf("loaded %d shared keys", len(keys))
	}

	names := make([]string, 0, len(conns))
	for _, c := range conns {
		names = append(names, c.Name)
	}
	var before map[string][]IKESA
	want := map[string]bool{}
	for _, c := range conns {
		want[c.Name] = true
		if present[c.Name] && l.loaded[c.Name] == c.Hash {
			continue
		}
		// A connection this loader loaded before with other content changed. (After a
		// loader restart the content charon holds is unknown; reloading it is an update
		// charon applies without touching SAs, as for an unchanged one.)
		changed := present[c.Name] && l.loaded[c.Name] != ""
		if changed && before == nil {
			if before, err = ListSAs(ctx, s, names...); err != nil {
				return res, err
			}
		}
		if err := call(ctx, s, "load-conn", c.Message); err != nil {
			return res, fmt.Errorf("load-conn %s: %w", c.Name, err)
		}
		l.loaded[c.Name] = c.Hash
		res.Loaded = append(res.Loaded, c.Name)
		// New settings deserve an attempt at once.
		p := l.plan(c.Name)
		p.attempts, p.next, p.change = 0, time.Time{}, nil
		if changed {
			if sum := Summarize(before[c.Name], c.Name); sum.Up || sum.Established {
				p.change = &change{}
				l.logf("loaded connection %s (changed; applying it beside the running SA)", c.Name)
				continue
			}
		}
		l.logf("loaded connection %s", c.Name)
	}
	for name := range present {
		if want[name] {
			continue
		}
		m := govici.NewMessage()
		_ = m.Set("name", name)
		if err := call(ctx, s, "unload-conn", m); err != nil {
			return res, fmt.Errorf("unload-conn %s: %w", name, err)
		}
		// With start_action = none, unloading leaves the connection's SAs up.
		if sas, err := ListSAs(ctx, s, name); err == nil {
			for _, sa := range sas[name] {
				l.terminateIKE(ctx, s, name, sa.UniqueID)
			}
		}
		delete(l.loaded, name)
		delete(l.plans, name)
		l.pmu.Lock()
		delete(l.published, name)
		l.pmu.Unlock()
		res.Unloaded = append(res.Unloaded, name)
		l.logf("unloaded connection %s", name)
	}

	sas, err := listSettled(ctx, s, names, func(n string) bool { return l.plan(n).up })
	if err != nil {
		return res, err
	}
	if l.LocalAddress != "" {
		for name, list := range sas {
			kept := list[:0]
			for _, sa := range list {
				if sa.LocalHost == "" || sa.LocalHost == l.LocalAddress {
					kept = append(kept, sa)
					continue
				}
				m := govici.NewMessage()
				_ = m.Set("ike-id", sa.UniqueID)
				_ = m.Set("force", "yes")
				_ = m.Set("timeout", "-1")
				if err := call(ctx, s, "terminate", m); err != nil {
					l.logf("terminate %s #%s (from %s): %v", name, sa.UniqueID, sa.LocalHost, err)
					kept = append(kept, sa)
					continue
				}
				res.Terminated = append(res.Terminated, name)
				l.logf("terminated %s #%s: it ran from %s, not from the port's address %s", name, sa.UniqueID, sa.LocalHost, l.LocalAddress)
			}
			sas[name] = kept
		}
	}
	now := l.now()
	for _, c := range conns {
		l.converge(ctx, s, c.Name, sas[c.Name], now, &res)
		l.publish(c.Name, l.plan(c.Name))
	}
	sort.Strings(res.Unloaded)
	return res, nil
}

// converge takes one step towards the tunnel being up on its current settings.
func (l *Syncer) converge(ctx context.Context, s *govici.Session, name string, sas []IKESA, now time.Time, res *Result) {
	p := l.plan(name)
	sum := Summarize(sas, name)
	p.up = sum.Up
	seenDups := p.dups
	p.dups = nil
	// Up since the last attempt (perhaps only between two rounds, brought up by the
	// peer): whatever fails next starts the schedule over.
	if l.Causes != nil && p.attempts > 0 && !l.Causes.UpAt(name).Before(p.last) {
		p.attempts, p.next = 0, time.Time{}
	}
	if p.change != nil {
		if !sum.Up && !sum.Established && !sum.Negotiating {
			p.change = nil // nothing left running on the old settings
		} else {
			if !sum.Negotiating && !now.Before(p.next) {
				l.migrate(ctx, s, name, sas, now, p, res)
			}
			return
		}
	}
	switch {
	case sum.Up:
		p.attempts, p.childless, p.next, p.reestablishing = 0, 0, time.Time{}, ""
		l.endDuplicates(ctx, s, name, sas, seenDups, p, res)
		return
	case sum.Negotiating:
		return
	case sum.Established:
		// Half-open: an IKE SA without the tunnel's child SA (deleted by the peer or by
		// hand, expired without rekey, or refused). Two rounds in a row, so a rekey in
		// flight never gets a duplicate.
		p.childless++
		if p.childless < 2 || now.Before(p.next) {
			return
		}
		p.childless = 0
		p.attempts++
		p.last, p.next = now, now.Add(l.backoff(p.attempts))
		if p.attempts == 1 {
			if l.initiate(ctx, s, name) {
				res.Initiated = append(res.Initiated, name)
			}
			return
		}
		// The child was refused inside this IKE SA: start over with a new IKE SA.
		for _, sa := range sas {
			l.terminateIKE(ctx, s, name, sa.UniqueID)
		}
		res.Restarted = append(res.Restarted, name)
		if l.initiate(ctx, s, name) {
			res.Initiated = append(res.Initiated, name)
		}
		return
	}
	// No IKE SA.
	p.childless = 0
	if now.Before(p.next) && !l.unanswered(name, p) {
		return
	}
	p.attempts++
	p.last, p.next = now, now.Add(l.backoff(p.attempts))
	if l.initiate(ctx, s, name) {
		res.Initiated = append(res.Initiated, name)
	}
}

// endDuplicates terminates IKE SAs of the tunnel that a newer one supersedes: of two or
// more ESTABLISHED IKE SAs, the newest that carries a child SA of the tunnel stays and
// every older ESTABLISHED one is ended (by its unique ID), once two rounds in a row found
// it so. It runs only while the tunnel is up and no change is in flight (migrate keeps
// two SAs on purpose until the new one carries).
//
// Why duplicates remain although charon has rules for concurrent exchanges: RFC 7296
// section 2.8.1 resolves simultaneous rekeying of one IKE SA (both sides rekey it, the
// new SA created with the lowest nonce is deleted by its creator), and charon implements
// that in its IKE rekey task; what it leaves is two ESTABLISHED IKE SAs for the moment
// before the redundant one is deleted, which the second round no longer finds. Two
// IKE_SA_INIT exchanges that cross (the loader initiating while the peer starts) are not
// a rekey: they create two independent IKE SAs between the same identities, and the RFC
// has no rule for them. Only a uniqueness policy can end one, and charon checks it only
// as the responder of an IKE_AUTH exchange, while building its answer, against IKE SAs
// of the same identities that are already established. In a crossing each side answers
// the other's IKE_AUTH while its own IKE SA still waits for its IKE_AUTH answer, so
// neither check finds an established duplicate, and the IKE SA the gateway initiated is
// never checked at all: both stay up whatever either side's policy. The exception is a
// peer whose IKE_AUTH carries INITIAL_CONTACT (section 2.4; a strongSwan peer sends it
// when it holds no IKE SA with the gateway yet): charon then destroys the gateway's
// other IKE SAs with that peer without a DELETE. TestCrossingInitiationsLeaveOneIKESA
// saw both IKE SAs stay up in 16 of 18 crossings with unique = replace, INITIAL_CONTACT
// in the other two. The older one is ended: a peer's uniqueness policy, had it applied,
// would have replaced that one too.
func (l *Syncer) endDuplicates(ctx context.Context, s *govici.Session, name string, sas []IKESA, seen map[string]bool, p *plan, res *Result) {
	older := superseded(sas, name)
	if len(older) == 0 {
		return
	}
	ended := false
	for _, id := range older {
		if !seen[id] {
			if p.dups == nil {
				p.dups = map[string]bool{}
			}
			p.dups[id] = true
			continue
		}
		m := govici.NewMessage()
		_ = m.Set("ike-id", id)
		_ = m.Set("timeout", "-1")
		if err := call(ctx, s, "terminate", m); err != nil {
			l.logf("terminate %s duplicate IKE SA #%s: %v", name, id, err)
			continue
		}
		ended = true
		l.logf("terminated %s IKE SA #%s: a newer IKE SA of the tunnel carries it (a duplicate, as crossing initiations leave)", name, id)
	}
	if ended {
		res.Deduplicated = append(res.Deduplicated, name)
	}
}

// superseded returns the unique IDs of the ESTABLISHED IKE SAs of a tunnel that are older
// than its newest ESTABLISHED IKE SA carrying a child SA of the tunnel (the keeper); a
// newer one without such a child is left alone (the half-open recovery is for a tunnel
// that is not up). Age is charon's "established" seconds, ties broken by the unique ID
// (charon counts them up).
func superseded(sas []IKESA, child string) []string {
	newer := func(a, b *IKESA) bool {
		if a.EstablishedSeconds != b.EstablishedSeconds {
			return a.EstablishedSeconds < b.EstablishedSeconds
		}
		return idNum(a.UniqueID) > idNum(b.UniqueID)
	}
	var keeper *IKESA
	established := 0
	for i := range sas {
		sa := &sas[i]
		if sa.State != IKEEstablished {
			continue
		}
		established++
		carries := false
		for _, c := range sa.Children {
			if c.Name == child && carriesChild(c.State) {
				carries = true
			}
		}
		if carries && (keeper == nil || newer(sa, keeper)) {
			keeper = sa
		}
	}
	if keeper == nil || established < 2 {
		return nil
	}
	var out []string
	for i := range sas {
		sa := &sas[i]
		if sa.State == IKEEstablished && sa != keeper && newer(keeper, sa) {
			out = append(out, sa.UniqueID)
		}
	}
	sort.Strings(out)
	return out
}

func idNum(id string) uint64 {
	n, _ := strconv.ParseUint(id, 10, 64)
	return n
}

// unanswered: the last attempt failed because the peer never answered; charon spent its
// retransmissions on it already, so the next one need not wait.
func (l *Syncer) unanswered(name string, p *plan) bool {
	if l.Causes == nil {
		return false
	}
	c, ok := l.Causes.Cause(name)
	return ok && c.Reason == downcause.PeerNotResponding && !c.At.Before(p.last)
}

func (l *Syncer) initiate(ctx context.Context, s *govici.Session, name string) bool {
	m := govici.NewMessage()
	_ = m.Set("child", name)
	_ = m.Set("ike", name)
	_ = m.Set("timeout", "-1")
	if err := call(ctx, s, "initiate", m); err != nil {
		// The peer may be unreachable; the next attempt retries.
		l.logf("initiate %s: %v", name, err)
		return false
	}
	l.logf("initiated %s", name)
	return true
}

func (l *Syncer) terminateIKE(ctx context.Context, s *govici.Session, name, id string) {
	m := govici.NewMessage()
	_ = m.Set("ike-id", id)
	_ = m.Set("timeout", "-1")
	if err := call(ctx, s, "terminate", m); err != nil {
		l.logf("terminate %s IKE SA #%s: %v", name, id, err)
	}
}

// migrate applies a changed connection beside the SAs that run on its old settings:
// initiate (charon picks the existing IKE SA when only the child's settings changed,
// and a new IKE SA otherwise), wait for the new child SA, then delete what ran before.
func (l *Syncer) migrate(ctx context.Context, s *govici.Session, name string, sas []IKESA, now time.Time, p *plan, res *Result) {
	oldIKE, oldChild := map[string]bool{}, map[string]bool{}
	for _, sa := range sas {
		oldIKE[sa.UniqueID] = true
		for _, c := range sa.Children {
			if c.Name == name {
				oldChild[c.UniqueID] = true
			}
		}
	}
	p.attempts++
	p.last, p.next = now, now.Add(l.backoff(p.attempts))
	newIKE, newChild, why, err := l.initiateBlocking(ctx, s, name)
	if err == nil && newChild != "" {
		if oldIKE[newIKE] {
			// Only the child's settings changed: a second child SA in the same IKE SA.
			for _, sa := range sas {
				for _, c := range sa.Children {
					if c.Name == name && c.UniqueID != newChild {
						m := govici.NewMessage()
						_ = m.Set("child-id", c.UniqueID)
						_ = m.Set("timeout", "-1")
						if err := call(ctx, s, "terminate", m); err != nil {
							l.logf("terminate %s child SA #%s: %v", name, c.UniqueID, err)
						}
					}
				}
			}
		} else {
			for id := range oldIKE {
				l.terminateIKE(ctx, s, name, id)
			}
		}
		p.change, p.attempts, p.next = nil, 0, time.Time{}
		res.Migrated = append(res.Migrated, name)
		l.logf("%s runs on its changed settings (IKE SA #%s, child SA #%s); the previous SA was deleted after the new one was up", name, newIKE, newChild)
		return
	}
	if why.Reason == "" && err != nil {
		why.Message = err.Error()
	}
	switch why.Reason {
	case downcause.NoCommonIKEProposal, downcause.NoCommonESPProposal, downcause.TrafficSelectorsRefused, downcause.PFSMismatchAtRekey:
		// The peer refuses the new settings themselves: tearing the old SA down would
		// only end a working tunnel.
		p.change.refused = why.Message
		l.logf("%s: the peer refused the changed settings (%s); keeping the running SA, next attempt in %s", name, why.Message, p.next.Sub(now).Round(time.Second))
		return
	}
	// The peer refused (or ignored) a second SA beside the running one: the change can
	// only be applied by tearing the old SA down first.
	msg := why.Message
	if msg == "" {
		msg = "no reason given"
	}
	p.reestablishing = "the changed settings could not be applied beside the running SA (" + msg + "); the tunnel was torn down to apply them"
	l.logf("%s: %s", name, p.reestablishing)
	p.change = nil
	// Everything of the tunnel goes, also a new attempt charon may still be working on
	// after the initiate's timeout.
	if cur, err := ListSAs(ctx, s, name); err == nil {
		for _, sa := range cur[name] {
			oldIKE[sa.UniqueID] = true
		}
	}
	for id := range oldIKE {
		l.terminateIKE(ctx, s, name, id)
	}
	res.Restarted = append(res.Restarted, name)
	p.attempts, p.next = 1, now.Add(l.backoff(1))
	if l.initiate(ctx, s, name) {
		res.Initiated = append(res.Initiated, name)
	}
}

// initiateBlocking initiates the tunnel and waits for charon's verdict, reading the
// control-log it streams meanwhile: the new SAs' unique IDs, or why it failed.
func (l *Syncer) initiateBlocking(ctx context.Context, s *govici.Session, name string) (ikeID, childID string, why downcause.Cause, err error) {
	timeout := l.MigrateTimeout
	if timeout <= 0 {
		timeout = 20 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout+5*time.Second)
	defer cancel()
	m := govici.NewMessage()
	_ = m.Set("child", name)
	_ = m.Set("ike", name)
	_ = m.Set("timeout", fmt.Sprint(timeout.Milliseconds()))
	tr := &downcause.Tracker{}
	for msg, cerr := range s.CallStreaming(ctx, "initiate", "control-log", m) {
		if cerr != nil {
			err = cerr
			break
		}
		if msg.Get("success") != nil {
			if e := msg.Err(); e != nil {
				err = e
			}
			continue
		}
		line := downcause.Line{Name: str(msg, "ikesa-name"), ID: str(msg, "ikesa-uniqueid"), Msg: str(msg, "msg")}
		tr.ObserveLine(line)
		if m := reChildEstablished.FindStringSubmatch(line.Msg); m != nil && m[1] == name {
			ikeID, childID = line.ID, m[2]
		}
	}
	why, _ = tr.Cause(name)
	if err == nil && childID == "" {
		err = fmt.Errorf("initiate %s: no child SA established", name)
	}
	return ikeID, childID, why, err
}

var reChildEstablished = regexp.MustCompile(`^CHILD_SA (\S+)\{(\d+)\} established with SPIs`)

func hashOf(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func call(ctx context.Context, s *govici.Session, cmd string, in *govici.Message) error {
	out, err := callOut(ctx, s, cmd, in)
	if err != nil {
		return err
	}
	return out.Err()
}

// callOut is one VICI command bounded by CallTimeout.
func callOut(ctx context.Context, s *govici.Session, cmd string, in *govici.Message) (*govici.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	return s.Call(ctx, cmd, in)
}

func loadShared(ctx context.Context, s *govici.Session, keys []gatewayconfig.SharedSecret) error {
	for _, k := range keys {
		m := govici.NewMessage()
		_ = m.Set("id", k.Section)
		_ = m.Set("type", "IKE")
		_ = m.Set("data", string(k.Secret))
		_ = m.Set("owners", k.Owners)
		if err := call(ctx, s, "load-shared", m); err != nil {
			// The error from charon cannot contain the key; ours names only the section.
			return fmt.Errorf("load-shared %s failed", k.Section)
		}
	}
	// Keys of removed tunnels must not stay usable.
	out, err := callOut(ctx, s, "get-shared", nil)
	if err != nil {
		return fmt.Errorf("get-shared: %w", err)
	}
	keep := map[string]bool{}
	for _, k := range keys {
		keep[k.Section] = true
	}
	if ids, ok := out.Get("keys").([]string); ok {
		for _, id := range ids {
			if keep[id] {
				continue
			}
			m := govici.NewMessage()
			_ = m.Set("id", id)
			if err := call(ctx, s, "unload-shared", m); err != nil {
				return fmt.Errorf("unload-shared %s: %w", id, err)
			}
		}
	}
	return nil
}

func charonConns(ctx context.Context, s *govici.Session) (map[string]bool, error) {
	out, err := callOut(ctx, s, "get-conns", nil)
	if err != nil {
		return nil, fmt.Errorf("get-conns: %w", err)
	}
	present := map[string]bool{}
	if names, ok := out.Get("conns").([]string); ok {
		for _, n := range names {
			present[n] = true
		}
	}
	return present, nil
}
