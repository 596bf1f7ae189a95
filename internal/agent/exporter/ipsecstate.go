package exporter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"bnerd.net/vpn-operator/internal/agent/downcause"
	"bnerd.net/vpn-operator/internal/agent/statefile"
	"bnerd.net/vpn-operator/internal/agent/vici"
)

// IPsecState is what the status agent publishes for the exporter: its last listing of
// the tunnels' SAs (settled, as vici.ListSAsOn takes it), the rekeys it counted from
// charon's events and each tunnel's last failure. In the gateway pod the exporter, which
// any pod of the cluster may reach on its metrics port, reads this file instead of
// charon's VICI socket: it needs neither the socket nor the API token, and a
// compromised exporter can neither drive charon nor write the gateway's status.
type IPsecState struct {
	// Written is when the listing was started (Unix milliseconds).
	Written int64 `json:"written"`
	// CharonNotRunning: nothing listened on the socket (the tunnels carry nothing).
	CharonNotRunning bool `json:"charonNotRunning,omitempty"`
	// ListFailed: charon was reached but did not answer the listing; the SAs say
	// nothing then.
	ListFailed bool                       `json:"listFailed,omitempty"`
	SAs        map[string][]vici.IKESA    `json:"sas,omitempty"`
	Rekeys     map[string]uint64          `json:"rekeys,omitempty"`
	Causes     map[string]downcause.Cause `json:"causes,omitempty"`
}

// DefaultIPsecStateInterval is how often the status agent publishes the state, and
// DefaultIPsecStateStale how old the exporter lets it be before it reports charon as not
// answering (a status agent that stopped publishing says nothing about the tunnels).
const (
	DefaultIPsecStateInterval = time.Second
	DefaultIPsecStateStale    = 10 * time.Second
)

// Publisher writes IPsecState to File every Interval until ctx ends.
type Publisher struct {
	File     string
	Interval time.Duration
	Tunnels  func() []string
	SAs      Source
	Rekeys   func() map[string]uint64
	Causes   interface {
		Cause(string) (downcause.Cause, bool)
	}
	Now  func() time.Time
	Logf func(string, ...any)
}

// Run publishes at once and then every Interval.
func (p *Publisher) Run(ctx context.Context) {
	every := p.Interval
	if every <= 0 {
		every = DefaultIPsecStateInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	for {
		err := p.Publish(ctx)
		if err != nil && !failing && p.Logf != nil {
			p.Logf("publishing the IPsec state for the exporter: %v", err)
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Publish takes one listing and writes it.
func (p *Publisher) Publish(ctx context.Context) error {
	// Stamped before the listing: a reader that waits for a state written after some
	// moment gets a listing taken after it.
	st := IPsecState{Written: clock(p.Now).UnixMilli()}
	names := p.Tunnels()
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	sas, err := p.SAs(lctx, names)
	cancel()
	switch {
	case errors.Is(err, vici.ErrCharonNotRunning):
		st.CharonNotRunning = true
	case err != nil:
		st.ListFailed = true
	default:
		st.SAs = sas
	}
	if p.Rekeys != nil {
		st.Rekeys = p.Rekeys()
	}
	if p.Causes != nil {
		for _, n := range names {
			if c, ok := p.Causes.Cause(n); ok {
				if st.Causes == nil {
					st.Causes = map[string]downcause.Cause{}
				}
				st.Causes[n] = c
			}
		}
	}
	return statefile.WriteJSON(p.File, st)
}

// IPsecStateFile reads what a Publisher wrote; it supplies the Collector's SAs, Rekeys
// and Causes. Each of the three reads the file again (it is small, and a scrape that
// straddles a write mixes two listings a second apart, which no series can tell).
type IPsecStateFile struct {
	Path string
	// Stale is the age past which the state is not believed (DefaultIPsecStateStale).
	Stale time.Duration
	Now   func() time.Time
}

// errStale: the status agent stopped publishing; like a charon that answered too late,
// it says nothing about the tunnels.
var errStale = errors.New("the status agent's IPsec state is missing or stale")

func (f *IPsecStateFile) now() time.Time { return clock(f.Now) }

// clock is now(), or the wall clock when now is nil (tests set it).
func clock(now func() time.Time) time.Time {
	if now != nil {
		return now()
	}
	return time.Now()
}

func (f *IPsecStateFile) read() (IPsecState, error) {
	var st IPsecState
	b, err := os.ReadFile(f.Path)
	if err != nil {
		return st, fmt.Errorf("%w: %v", errStale, err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%w: %v", errStale, err)
	}
	stale := f.Stale
	if stale <= 0 {
		stale = DefaultIPsecStateStale
	}
	if age := f.now().Sub(time.UnixMilli(st.Written)); age > stale {
		return st, fmt.Errorf("%w: written %s ago", errStale, age.Round(time.Second))
	}
	return st, nil
}

// SAs is a Source over the file: charon not running and a failed listing come back as
// the errors a live listing gives, a stale file as an error that is neither.
func (f *IPsecStateFile) SAs(_ context.Context, names []string) (map[string][]vici.IKESA, error) {
	st, err := f.read()
	switch {
	case err != nil:
		return nil, err
	case st.CharonNotRunning:
		return nil, vici.ErrCharonNotRunning
	case st.ListFailed:
		return nil, errors.New("charon did not answer the status agent's listing")
	}
	// The listing is up to a publishing interval old: its SAs have aged since.
	aged := int64(f.now().Sub(time.UnixMilli(st.Written)) / time.Second)
	out := make(map[string][]vici.IKESA, len(names))
	for _, n := range names {
		if sas, ok := st.SAs[n]; ok {
			for i := range sas {
				sas[i].EstablishedSeconds += aged
			}
			out[n] = sas
		}
	}
	return out, nil
}

// Rekeys returns the published rekey counts (none while the file is unreadable).
func (f *IPsecStateFile) Rekeys() map[string]uint64 {
	st, _ := f.read()
	return st.Rekeys
}

// Cause returns the tunnel's published last failure.
func (f *IPsecStateFile) Cause(name string) (downcause.Cause, bool) {
	st, err := f.read()
	if err != nil {
		return downcause.Cause{}, false
	}
	c, ok := st.Causes[name]
	return c, ok
}
