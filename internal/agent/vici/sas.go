package vici

import (
	"context"
	"errors"
	"fmt"
	"strconv"

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
// call is bounded by CallTimeout.
func ListSAs(ctx context.Context, s *govici.Session, names ...string) (map[string][]IKESA, error) {
	out := map[string][]IKESA{}
	if len(names) == 0 {
		return out, listSAs(ctx, s, "", out)
	}
	for _, n := range names {
		if err := listSAs(ctx, s, n, out); err != nil {
			return nil, err
		}
	}
	return out, nil
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
