// Package downcause tells why a tunnel is down, from charon's own view: it reads the log
// lines charon streams over VICI (the "log" event, level 1 and below, each tagged with
// the IKE SA's connection name and unique ID) and keeps, per tunnel, the last failure
// it recognises: authentication failed, no common IKE or ESP proposal, traffic
// selectors refused, peer not responding, PFS mismatch at rekey. A tunnel's cause is
// cleared when charon logs its IKE SA (IKE-level causes) or its child SA (all causes)
// as established.
//
// charon 5.9's VICI has no alert events (the bus alerts behind these messages are not
// exported), so the log text is the interface; the patterns below are charon's DBG0/1
// messages, stable across the 5.x series, and the tests replay lines captured from a
// real charon.
package downcause

import (
	"regexp"
	"strings"
	"sync"
	"time"

	govici "github.com/strongswan/govici/vici"
)

// Reasons. They are the reason a tunnel's status entry carries and the value of the
// exporter's reason label.
const (
	AuthenticationFailed    = "AuthenticationFailed"
	NoCommonIKEProposal     = "NoCommonIKEProposal"
	NoCommonESPProposal     = "NoCommonESPProposal"
	TrafficSelectorsRefused = "TrafficSelectorsRefused"
	PeerNotResponding       = "PeerNotResponding"
	PFSMismatchAtRekey      = "PFSMismatchAtRekey"
)

// Reasons lists every reason, for documentation and tests.
var Reasons = []string{AuthenticationFailed, NoCommonIKEProposal, NoCommonESPProposal, TrafficSelectorsRefused, PeerNotResponding, PFSMismatchAtRekey}

// ikeLevel: causes that end the IKE SA (cleared when an IKE SA is established again);
// the others concern the child SA.
var ikeLevel = map[string]bool{AuthenticationFailed: true, NoCommonIKEProposal: true, PeerNotResponding: true}

// Cause is a tunnel's last recognised failure.
type Cause struct {
	Reason  string
	Message string
	At      time.Time
}

// Line is one charon log line: the IKE SA's name and unique ID (empty when the line
// belongs to none) and the message.
type Line struct {
	Name, ID, Msg string
}

// FromEvent extracts a Line from a VICI "log" event.
func FromEvent(ev govici.Event) (Line, bool) {
	if (ev.Name != "log" && ev.Name != "control-log") || ev.Message == nil {
		return Line{}, false
	}
	s := func(k string) string { v, _ := ev.Message.Get(k).(string); return v }
	return Line{Name: s("ikesa-name"), ID: s("ikesa-uniqueid"), Msg: s("msg")}, true
}

// Tracker keeps each tunnel's cause. Safe for concurrent use.
type Tracker struct {
	// PeerTunnel maps a peer address to its tunnel, to attribute failures of IKE SAs
	// the peer initiated before charon knows their connection ("(unnamed)" during
	// IKE_SA_INIT). Optional.
	PeerTunnel func(addr string) string
	Now        func() time.Time

	mu     sync.Mutex
	causes map[string]Cause
	sas    map[string]*saContext
	up     map[string]time.Time
}

// saContext is what the tracker remembers of one IKE SA's recent exchanges.
type saContext struct {
	name string
	// sent and got are the payload lists of the last request generated and the last
	// message parsed, with their exchange types.
	sentExchange, sent string
	gotExchange, got   string
	gotRequest         bool
	childUp            bool
	received           string // "received proposals:" waiting for "configured proposals:"
	seen               time.Time
}

var (
	reGenerating = regexp.MustCompile(`^generating (\S+) (request|response) \d+ \[ ?(.*?) ?\]$`)
	reParsed     = regexp.MustCompile(`^parsed (\S+) (request|response) \d+ \[ ?(.*?) ?\]$`)
	reIKEUp      = regexp.MustCompile(`^IKE_SA \S+\[\d+\] established between`)
	reChildUp    = regexp.MustCompile(`^CHILD_SA \S+\{\d+\} established with SPIs`)
	reInitiating = regexp.MustCompile(`^(\S+) is initiating an IKE_SA$`)
	reMAC        = regexp.MustCompile(`^tried \d+ shared keys? for '(.*)' - '(.*)', but MAC mismatched$`)
	reNoKey      = regexp.MustCompile(`^no shared key found for '(.*)' - '(.*)'$`)
	reTSBad      = regexp.MustCompile(`^traffic selectors (.*) unacceptable$`)
	reGiveUp     = regexp.MustCompile(`^giving up after (\d+) retransmits$`)
	reRetransmit = regexp.MustCompile(`^retransmit (\d+) of request with message ID \d+$`)
	reRekeyFail  = regexp.MustCompile(`^CHILD_SA rekeying failed, trying again in (\d+) seconds$`)
	// A key exchange method in a proposal as charon prints it (MODP_2048, ECP_256,
	// CURVE_25519, ECP_256_BP, ...).
	reKEGroup = regexp.MustCompile(`(MODP|ECP|CURVE|NTRU|NEWHOPE)_`)
)

const unnamed = "(unnamed)"

// Observe feeds a VICI event (only "log" and "control-log" events are read) and reports
// whether a tunnel's cause changed.
func (t *Tracker) Observe(ev govici.Event) bool {
	if l, ok := FromEvent(ev); ok {
		return t.ObserveLine(l)
	}
	return false
}

func (t *Tracker) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

// ObserveLine feeds one log line and reports whether a tunnel's cause changed.
func (t *Tracker) ObserveLine(l Line) (changed bool) {
	if l.ID == "" {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sas == nil {
		t.sas = map[string]*saContext{}
		t.causes = map[string]Cause{}
		t.up = map[string]time.Time{}
	}
	now := t.now()
	sa := t.sas[l.ID]
	if sa == nil {
		t.prune(now)
		sa = &saContext{}
		t.sas[l.ID] = sa
	}
	sa.seen = now
	if l.Name != "" && l.Name != unnamed {
		sa.name = l.Name
	}
	before, had := t.causes[sa.name]
	defer func() {
		after, has := t.causes[sa.name]
		changed = had != has || before.Reason != after.Reason || before.Message != after.Message
	}()
	msg := strings.TrimSpace(l.Msg)
	set := func(reason, message string) {
		if sa.name == "" {
			return
		}
		t.causes[sa.name] = Cause{Reason: reason, Message: message, At: now}
	}
	switch {
	case reGenerating.MatchString(msg):
		m := reGenerating.FindStringSubmatch(msg)
		if m[2] == "request" {
			sa.sentExchange, sa.sent = m[1], m[3]
		}
	case reParsed.MatchString(msg):
		m := reParsed.FindStringSubmatch(msg)
		sa.gotExchange, sa.got, sa.gotRequest = m[1], m[3], m[2] == "request"
	case reInitiating.MatchString(msg):
		if t.PeerTunnel != nil && sa.name == "" {
			sa.name = t.PeerTunnel(reInitiating.FindStringSubmatch(msg)[1])
		}
	case reIKEUp.MatchString(msg):
		if c, ok := t.causes[sa.name]; ok && ikeLevel[c.Reason] {
			delete(t.causes, sa.name)
		}
	case reChildUp.MatchString(msg):
		sa.childUp = true
		delete(t.causes, sa.name)
		if sa.name != "" {
			t.up[sa.name] = now
		}

	case msg == "received AUTHENTICATION_FAILED notify error":
		set(AuthenticationFailed, "the peer rejected our authentication (AUTHENTICATION_FAILED): its pre-shared key or the identities it expects differ from ours")
	case reMAC.MatchString(msg):
		m := reMAC.FindStringSubmatch(msg)
		set(AuthenticationFailed, "the peer's authentication failed: its pre-shared key for '"+m[1]+"' - '"+m[2]+"' differs from ours")
	case reNoKey.MatchString(msg):
		m := reNoKey.FindStringSubmatch(msg)
		set(AuthenticationFailed, "no pre-shared key for '"+m[1]+"' - '"+m[2]+"'")

	case msg == "received NO_PROPOSAL_CHOSEN notify error":
		set(NoCommonIKEProposal, "the peer accepts none of our IKE proposals (NO_PROPOSAL_CHOSEN in "+orDefault(sa.gotExchange, "IKE_SA_INIT")+")")
	case msg == "received NO_PROPOSAL_CHOSEN notify, no CHILD_SA built":
		if sa.sentExchange == "CREATE_CHILD_SA" && hasPayload(sa.sent, "KE") && (sa.childUp || hasPayload(sa.sent, "N(REKEY_SA)")) {
			set(PFSMismatchAtRekey, "the peer accepted our ESP proposals without a key exchange (IKE_AUTH) but refuses them with one (CREATE_CHILD_SA): it does not use PFS, or another key exchange group")
		} else {
			set(NoCommonESPProposal, "the peer accepts none of our ESP proposals (NO_PROPOSAL_CHOSEN in "+orDefault(sa.sentExchange, "IKE_AUTH")+")")
		}
	case strings.HasPrefix(msg, "received proposals: "):
		sa.received = strings.TrimPrefix(msg, "received proposals: ")
	case strings.HasPrefix(msg, "configured proposals: "):
		configured := strings.TrimPrefix(msg, "configured proposals: ")
		received := sa.received
		sa.received = ""
		switch {
		case strings.HasPrefix(received, "IKE:"):
			set(NoCommonIKEProposal, "no common IKE proposal: the peer proposed "+received+", we accept "+configured)
		case sa.gotRequest && sa.gotExchange == "CREATE_CHILD_SA" && reKEGroup.MatchString(configured) && !reKEGroup.MatchString(received):
			set(PFSMismatchAtRekey, "the peer proposed "+received+" without a key exchange (CREATE_CHILD_SA), we require PFS: "+configured)
		case strings.HasPrefix(received, "ESP:") || strings.HasPrefix(received, "AH:"):
			set(NoCommonESPProposal, "no common ESP proposal: the peer proposed "+received+", we accept "+configured)
		}

	case msg == "received TS_UNACCEPTABLE notify, no CHILD_SA built":
		set(TrafficSelectorsRefused, "the peer refused our traffic selectors (TS_UNACCEPTABLE): the subnets it expects differ from the tunnel's")
	case reTSBad.MatchString(msg):
		set(TrafficSelectorsRefused, "the peer's traffic selectors "+reTSBad.FindStringSubmatch(msg)[1]+" are not within the tunnel's")
	case msg == "no acceptable traffic selectors found":
		set(TrafficSelectorsRefused, "the peer's traffic selectors are not within the tunnel's")

	case reGiveUp.MatchString(msg):
		set(PeerNotResponding, "no answer from the peer to "+orDefault(sa.sentExchange, "our request")+" after "+reGiveUp.FindStringSubmatch(msg)[1]+" retransmits")
	case reRetransmit.MatchString(msg):
		// Said early for a tunnel being set up: charon keeps retransmitting for about
		// 84 s before it gives up. (Not for an established SA's DPD: a late answer
		// there would leave the reason behind on an Up tunnel.)
		if n := reRetransmit.FindStringSubmatch(msg)[1]; n != "1" && sa.sentExchange == "IKE_SA_INIT" {
			set(PeerNotResponding, "no answer from the peer to IKE_SA_INIT yet (retransmit "+n+")")
		}
	case msg == "establishing IKE_SA failed, peer not responding":
		set(PeerNotResponding, "no answer from the peer to IKE_SA_INIT")
	case reRekeyFail.MatchString(msg):
		if c, ok := t.causes[sa.name]; ok && c.Reason == NoCommonESPProposal {
			set(PFSMismatchAtRekey, "the peer refuses to rekey the child SA with our ESP proposals: it does not use PFS, or another key exchange group")
		}
	}
	return changed
}

func hasPayload(list, p string) bool {
	for _, f := range strings.Fields(list) {
		if f == p {
			return true
		}
	}
	return false
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// prune forgets IKE SAs not heard of for ten minutes once many are remembered (each
// stranger's IKE_SA_INIT is one).
func (t *Tracker) prune(now time.Time) {
	if len(t.sas) < 256 {
		return
	}
	for id, sa := range t.sas {
		if now.Sub(sa.seen) > 10*time.Minute {
			delete(t.sas, id)
		}
	}
}

// Cause returns the tunnel's last recognised failure, if any is current.
func (t *Tracker) Cause(tunnel string) (Cause, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.causes[tunnel]
	return c, ok
}

// UpAt returns when charon last logged a child SA of the tunnel as established (zero
// when never): the loader starts its schedule over once a tunnel came up, also when the
// peer brought it up between two rounds.
func (t *Tracker) UpAt(tunnel string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.up[tunnel]
}

// Clear forgets a tunnel's cause (its configuration changed).
func (t *Tracker) Clear(tunnel string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.causes, tunnel)
}
