package vici

import (
	"context"
	"strings"
	"testing"
)

// listing parses a recorded listing of tunnel t1 in the short form the soak test logs
// (TestRekeysNeverReadDown): IKE SAs separated by spaces, each its state and its child
// SAs' states, "ESTABLISHED[DELETED,INSTALLED] REKEYED[]". The child SAs are t1's.
func listing(s string) []IKESA {
	var out []IKESA
	for _, f := range strings.Fields(s) {
		state, kids, _ := strings.Cut(strings.TrimSuffix(f, "]"), "[")
		sa := IKESA{Name: "t1", State: state}
		for _, k := range strings.Split(kids, ",") {
			if k != "" {
				sa.Children = append(sa.Children, ChildSA{Name: "t1", State: k})
			}
		}
		out = append(out, sa)
	}
	return out
}

// Every listing of one tunnel a real charon (5.9.8, kernel-libipsec) returned during
// CHILD and IKE rekeys every 10 s, initiated by charon, by the client, and by both at the
// same lifetimes (collisions), with listers back to back (TestRekeysNeverReadDown logs
// them; the collisions came from the same test with both sides at 10 s).
var (
	// The tunnel carries and the listing says so.
	recordedUp = []string{
		"ESTABLISHED[INSTALLED]",
		"ESTABLISHED[REKEYING]",
		"ESTABLISHED[REKEYED,INSTALLED]",
		"ESTABLISHED[REKEYED,DELETED]",
		"ESTABLISHED[DELETING,INSTALLED]",
		"ESTABLISHED[DELETED,INSTALLED]",
		"ESTABLISHED[INSTALLED,DELETED]",
		"ESTABLISHED[DELETED,DELETED,INSTALLED]",
		"ESTABLISHED[DELETED,INSTALLED,DELETED]",
		"ESTABLISHED[DELETING,DELETED,INSTALLED]",
		"REKEYING[INSTALLED]",
		"REKEYING[DELETED,INSTALLED]",
		"ESTABLISHED[INSTALLED] DELETING[]",
		"ESTABLISHED[DELETED,INSTALLED] DELETING[]",
		"ESTABLISHED[DELETED,DELETED,INSTALLED] DELETING[]",
		"ESTABLISHED[DELETING,DELETED,INSTALLED] DELETING[]",
		"ESTABLISHED[DELETED,INSTALLED] REKEYED[]",
		"ESTABLISHED[INSTALLED] REKEYED[] DELETING[]",
		"ESTABLISHED[DELETED,INSTALLED] REKEYED[] DELETING[]",
		"ESTABLISHED[DELETING,REKEYED,INSTALLED]",
		"ESTABLISHED[REKEYED,INSTALLED,DELETED]",
		"ESTABLISHED[REKEYED,INSTALLED,DELETING]",
		"ESTABLISHED[REKEYED,INSTALLED] DELETING[]",
		"ESTABLISHED[REKEYED,INSTALLED] REKEYED[]",
		"ESTABLISHED[INSTALLED] REKEYED[] REKEYED[]",
		"ESTABLISHED[REKEYING] REKEYED[]",
		"REKEYING[INSTALLED] REKEYED[]",
	}
	// The tunnel carries, but the listing caught an IKE rekey halfway: the old IKE SA
	// without the child SAs it handed on, the new one missed.
	recordedHandover = []string{
		"DELETING[]",           // charon initiated the IKE rekey
		"REKEYED[]",            // charon answered the peer's IKE rekey
		"REKEYED[] DELETING[]", // both rekeyed at once (collision)
	}
	// The listing right after each of recordedHandover.
	recordedSettled = []string{
		"ESTABLISHED[INSTALLED] DELETING[]",
		"ESTABLISHED[DELETED,INSTALLED] REKEYED[]",
		"ESTABLISHED[INSTALLED] REKEYED[] DELETING[]",
	}
)

// relister hands out the recorded listings in turn and counts the calls.
type relister struct {
	next  []string
	calls int
}

func (r *relister) relist(_ context.Context, name string) ([]IKESA, error) {
	r.calls++
	if name != "t1" || len(r.next) == 0 {
		return nil, nil
	}
	l := listing(r.next[0])
	if len(r.next) > 1 {
		r.next = r.next[1:]
	}
	return l, nil
}

func settleOnce(t *testing.T, first string, wasUp bool, next ...string) (bool, int) {
	t.Helper()
	out := map[string][]IKESA{}
	if l := listing(first); len(l) > 0 {
		out["t1"] = l
	}
	r := &relister{next: next}
	n, err := settle(context.Background(), out, []string{"t1"}, func(string) bool { return wasUp }, r.relist)
	if err != nil {
		t.Fatal(err)
	}
	if n != r.calls {
		t.Errorf("%q: settle counted %d re-listings, made %d", first, n, r.calls)
	}
	return Summarize(out["t1"], "t1").Up, n
}

// TestSettleOverRecordedListings: every listing charon returned while the tunnel carried
// reads up, at once or after the re-listing the handover signature asks for; one that
// read down without it (the IKE SA gone from the listing) is re-listed when the caller
// last saw the tunnel up. A tunnel that went down reads down after the bounded
// re-listings, and one that was already down costs no re-listing at all.
func TestSettleOverRecordedListings(t *testing.T) {
	for _, l := range recordedUp {
		if up, n := settleOnce(t, l, true, "DELETING[]"); !up || n != 0 {
			t.Errorf("%q: up %v after %d re-listings, want up at once", l, up, n)
		}
	}
	for i, l := range recordedHandover {
		if Summarize(listing(l), "t1").Up {
			t.Errorf("%q reads up without settling; the recording is not the race", l)
		}
		for _, wasUp := range []bool{true, false} {
			if up, n := settleOnce(t, l, wasUp, recordedSettled[i]); !up || n != 1 {
				t.Errorf("%q (last seen up: %v): up %v after %d re-listings, want up after 1", l, wasUp, up, n)
			}
		}
		// Caught halfway again by the re-listing (a rekey of the new SA at once):
		// still up within the bound.
		if up, n := settleOnce(t, l, false, l, recordedSettled[i]); !up || n != 2 {
			t.Errorf("%q twice: up %v after %d re-listings, want up after 2", l, up, n)
		}
	}
	// The listing waited for the old IKE SA while the peer's delete destroyed it: no IKE
	// SA at all, the new one missed.
	if up, n := settleOnce(t, "", true, "ESTABLISHED[INSTALLED]"); !up || n != 1 {
		t.Errorf("empty listing of a tunnel last seen up: up %v after %d re-listings, want up after 1", up, n)
	}

	bound := len(relistPauses)
	for _, tc := range []struct {
		name, first string
		wasUp       bool
		relists     int
	}{
		// Real outages of a tunnel last seen up: read down after the bound.
		{"IKE SA terminated", "", true, bound},
		{"IKE SA being deleted with its child SAs", "DELETING[INSTALLED]", true, bound},
		{"child SA expired (hard)", "ESTABLISHED[DELETING]", true, bound},
		{"child SA gone", "ESTABLISHED[]", true, bound},
		{"IKE SA rekeyed without a successor", "REKEYED[INSTALLED]", true, bound},
		// A lasting handover signature (an IKE SA deleted after its child SAs, its
		// delete unanswered) reads down after the bound on every listing.
		{"IKE SA deleting without child SAs, lasting", "DELETING[]", false, bound},
		// A tunnel that was down: no re-listing.
		{"no IKE SA", "", false, 0},
		{"connecting", "CONNECTING[]", false, 0},
		{"child SA expired, already down", "ESTABLISHED[DELETING]", false, 0},
	} {
		up, n := settleOnce(t, tc.first, tc.wasUp, tc.first)
		if up || n != tc.relists {
			t.Errorf("%s: up %v after %d re-listings, want down after %d", tc.name, up, n, tc.relists)
		}
	}
}

// TestSettleEndsWithTheContext: a caller's deadline ends the re-listing with its error
// (the exporter leaves the gauges out, the status agent keeps its last report) instead
// of reporting the tunnel down.
func TestSettleEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := map[string][]IKESA{"t1": listing("DELETING[]")}
	r := &relister{next: []string{"DELETING[]"}}
	if _, err := settle(ctx, out, []string{"t1"}, nil, r.relist); err == nil {
		t.Errorf("settle ignored the ended context (%d re-listings)", r.calls)
	}
}
