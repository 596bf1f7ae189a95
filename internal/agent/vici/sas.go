package vici

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	govici "github.com/strongswan/govici/vici"
)

// IKESA is one IKE SA as charon's list-sas reports it.
type IKESA struct {
	Name     string
	UniqueID string
	State    string
	// LocalHost and RemoteHost are the addresses the SA runs between.
	LocalHost, RemoteHost string
	// EstablishedSeconds is the SA's age (valid when State is ESTABLISHED).
	EstablishedSeconds int64
	Children           []ChildSA
}

// ChildSA is one child SA of an IKE SA.
type ChildSA struct {
	Name                  string
	UniqueID              string
	State                 string
	SPIIn                 string
	BytesIn, BytesOut     uint64
	PacketsIn, PacketsOut uint64
	InstallSeconds        int64
}

// ListSAs returns the IKE SAs per connection name. With names it asks charon for each
// named connection's SAs alone (list-sas with an "ike" filter), so one call streams a
// handful of events whatever else charon holds: govici drops streamed events that find
// its 128-message buffer full, and half-open SAs of strangers knocking on port 500 must
// never push a tunnel's SA out of a listing. Without names it lists everything. Each
// call is bounded by CallTimeout. A connection whose listing caught an IKE rekey halfway
// (handedOver) is listed again before it is returned (settle).
func ListSAs(ctx context.Context, s *govici.Session, names ...string) (map[string][]IKESA, error) {
	return listSettled(ctx, s, names, nil)
}

// listSettled is ListSAs; wasUp, when set, names the connections the caller last saw
// up, whose listing is also taken again when it reads down.
func listSettled(ctx context.Context, s *govici.Session, names []string, wasUp func(string) bool) (map[string][]IKESA, error) {
	out := map[string][]IKESA{}
	if len(names) == 0 {
		if err := listSAs(ctx, s, "", out); err != nil {
			return nil, err
		}
		names = make([]string, 0, len(out))
		for n := range out {
			names = append(names, n)
		}
		sort.Strings(names)
	} else {
		for _, n := range names {
			if err := listSAs(ctx, s, n, out); err != nil {
				return nil, err
			}
		}
	}
	relist := func(ctx context.Context, name string) ([]IKESA, error) {
		fresh := map[string][]IKESA{}
		err := listSAs(ctx, s, name, fresh)
		return fresh[name], err
	}
	if _, err := settle(ctx, out, names, wasUp, relist); err != nil {
		return nil, err
	}
	return out, nil
}

// relistPauses are the pauses before each re-listing of a suspect connection (settle):
// at most len(relistPauses) more listings, bounded in time by their sum. A variable
// only so tests can remove the re-listing (the negative control).
var relistPauses = []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond}

// settle takes the listing of each connection of names again, after each of
// relistPauses, while it reads down (Summarize, the child SA named like its connection,
// as the renderer makes it) and is suspect: it shows an IKE SA that handed its child
// SAs on (handedOver), or wasUp says the caller last saw the connection up. charon's
// list-sas is not atomic across IKE SAs: it walks its IKE SA table and waits for each
// SA another thread holds, and an IKE rekey moves the child SAs from the old IKE SA to
// a new one while it holds the old one; the new one is put at the head of its bucket
// (charon's default table has one), behind a listing that is waiting for the old one. So a listing can show the old IKE
// SA REKEYED (charon was the responder) or DELETING (the initiator) without its child
// SAs and miss the new one, or, when the peer's delete of the old SA arrives while the
// listing waits for it, no IKE SA at all, while the tunnel carries traffic. By the time
// the old IKE SA is released the new one is registered, so the next listing has it.
// A tunnel that really went down reads down after the last re-listing, at most the sum
// of relistPauses later, and only on that first listing: one that reads down without
// the handover signature and that the caller did not last see up is not taken again.
// It returns the number of re-listings made; out is updated in place.
func settle(ctx context.Context, out map[string][]IKESA, names []string, wasUp func(string) bool, relist func(context.Context, string) ([]IKESA, error)) (int, error) {
	suspect := func(name string) bool {
		sas := out[name]
		if Summarize(sas, name).Up {
			return false
		}
		return handedOver(sas) || (wasUp != nil && wasUp(name))
	}
	var pending []string
	for _, n := range names {
		if suspect(n) {
			pending = append(pending, n)
		}
	}
	relists := 0
	for _, pause := range relistPauses {
		if len(pending) == 0 {
			break
		}
		if pause > 0 {
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return relists, ctx.Err()
			case <-t.C:
			}
		}
		still := pending[:0]
		for _, n := range pending {
			sas, err := relist(ctx, n)
			relists++
			if err != nil {
				return relists, err
			}
			if len(sas) == 0 {
				delete(out, n)
			} else {
				out[n] = sas
			}
			if suspect(n) {
				still = append(still, n)
			}
		}
		pending = still
	}
	return relists, nil
}

// handedOver: the listing shows an IKE SA that is REKEYED or DELETING and holds no child
// SA, the trace of an IKE rekey that moved its child SAs to a successor (settle).
func handedOver(sas []IKESA) bool {
	for _, sa := range sas {
		if (sa.State == IKERekeyed || sa.State == IKEDeleting) && len(sa.Children) == 0 {
			return true
		}
	}
	return false
}

// listSAs streams one list-sas into out. govici before v0.8.1 handed the streamed events
// and the final reply to the reader on two channels and picked one at random, so a
// listing could end before its last events (a live tunnel looked down) and leave them to
// break the session's next command; v0.8.1 delivers both in order on one channel.
// TestListingsAreNeverShort holds this against a real charon.
func listSAs(ctx context.Context, s *govici.Session, ike string, out map[string][]IKESA) error {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	var in *govici.Message
	if ike != "" {
		in = govici.NewMessage()
		// Not noblock: that skips SAs charon is working on, exactly those of a rekey.
		_ = in.Set("ike", ike)
	}
	for m, err := range s.CallStreaming(ctx, "list-sas", "list-sa", in) {
		if err != nil {
			return fmt.Errorf("list-sas: %w", err)
		}
		if m.Get("success") != nil {
			if err := m.Err(); err != nil {
				return fmt.Errorf("list-sas: %w", err)
			}
			continue
		}
		for _, name := range m.Keys() {
			ike, ok := m.Get(name).(*govici.Message)
			if !ok {
				continue
			}
			sa := IKESA{
				Name:               name,
				UniqueID:           str(ike, "uniqueid"),
				State:              str(ike, "state"),
				LocalHost:          str(ike, "local-host"),
				RemoteHost:         str(ike, "remote-host"),
				EstablishedSeconds: num(ike, "established"),
			}
			if cs, ok := ike.Get("child-sas").(*govici.Message); ok {
				for _, ck := range cs.Keys() {
					c, ok := cs.Get(ck).(*govici.Message)
					if !ok {
						continue
					}
					sa.Children = append(sa.Children, ChildSA{
						Name:           str(c, "name"),
						UniqueID:       str(c, "uniqueid"),
						State:          str(c, "state"),
						SPIIn:          str(c, "spi-in"),
						BytesIn:        unum(c, "bytes-in"),
						BytesOut:       unum(c, "bytes-out"),
						PacketsIn:      unum(c, "packets-in"),
						PacketsOut:     unum(c, "packets-out"),
						InstallSeconds: num(c, "install-time"),
					})
				}
			}
			out[name] = append(out[name], sa)
		}
	}
	return nil
}

// IKE SA states (charon's ike_sa_state_t names).
const (
	IKEEstablished = "ESTABLISHED"
	IKERekeying    = "REKEYING"
	IKERekeyed     = "REKEYED"
	IKEDeleting    = "DELETING"
)

// carriesChild: the child SA's kernel state is installed and passes traffic. During a
// rekey the old SA stays installed (REKEYING, then REKEYED until it is deleted) beside
// its successor; UPDATING is a MOBIKE/NAT address update of an installed SA.
func carriesChild(state string) bool {
	switch state {
	case "INSTALLED", "UPDATING", "REKEYING", "REKEYED":
		return true
	}
	return false
}

// Summary is a tunnel's state in charon's listing.
type Summary struct {
	// Up: an IKE SA that carries holds a child SA of the tunnel's name that carries.
	// An IKE SA carries when ESTABLISHED or REKEYING, or REKEYED next to a successor
	// (another ESTABLISHED or REKEYING IKE SA of the tunnel): a rekey in flight is not an
	// outage.
	Up bool
	// IKESAs counts every IKE SA of the tunnel, ChildSAs the child SAs that carry.
	IKESAs, ChildSAs int
	// Newest is the youngest IKE SA that carries (nil when none does).
	Newest *IKESA
	// Established: at least one ESTABLISHED IKE SA.
	Established bool
	// Negotiating: an IKE SA or a child SA of the tunnel is being set up, rekeyed or
	// deleted, so a new initiate would only race it.
	Negotiating bool
}

// Summarize derives the tunnel's state from its IKE SAs; child is the name of its child
// SA (the tunnel's name).
func Summarize(sas []IKESA, child string) Summary {
	var s Summary
	s.IKESAs = len(sas)
	live := 0
	for _, sa := range sas {
		if sa.State == IKEEstablished || sa.State == IKERekeying {
			live++
		}
	}
	for i := range sas {
		sa := &sas[i]
		carries := sa.State == IKEEstablished || sa.State == IKERekeying || (sa.State == IKERekeyed && live > 0)
		switch sa.State {
		case IKEEstablished:
			s.Established = true
		case IKERekeying, IKERekeyed:
		default:
			// CREATED, CONNECTING, PASSIVE, DELETING, DESTROYING
			s.Negotiating = true
		}
		for _, c := range sa.Children {
			if c.Name != child {
				continue
			}
			if !carriesChild(c.State) {
				if c.State != "DELETED" && c.State != "DESTROYING" {
					s.Negotiating = true // CREATED, INSTALLING, RETRYING, DELETING
				}
				continue
			}
			if carries {
				s.ChildSAs++
				s.Up = true
			}
		}
		if carries && (s.Newest == nil || sa.EstablishedSeconds < s.Newest.EstablishedSeconds) {
			s.Newest = sa
		}
	}
	return s
}

// ErrCharonNotRunning: nothing listens on the VICI socket (charon is not running or
// restarting), as opposed to a charon that was reached but did not answer in time.
var ErrCharonNotRunning = errors.New("charon is not running")

func str(m *govici.Message, k string) string {
	v, _ := m.Get(k).(string)
	return v
}

func num(m *govici.Message, k string) int64 {
	n, _ := strconv.ParseInt(str(m, k), 10, 64)
	return n
}

func unum(m *govici.Message, k string) uint64 {
	n, _ := strconv.ParseUint(str(m, k), 10, 64)
	return n
}
