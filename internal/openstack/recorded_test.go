package openstack

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestRecordedTrustsAnIDOnlyWithTheOwnersTags(t *testing.T) {
	o := Owner{Kind: "IPsecGateway", Namespace: "tenant-a", Name: "gw1", UID: "u1"}
	other := Owner{Kind: "IPsecGateway", Namespace: "tenant-b", Name: "gw1", UID: "u2"}
	ports := map[string]*Port{"mine": {ID: "mine", Tags: o.Tags()}, "theirs": {ID: "theirs", Tags: other.Tags()}, "bare": {ID: "bare"}}
	boom := errors.New("connection reset")
	reads := 0
	get := func(_ context.Context, id string) (*Port, error) {
		reads++
		switch id {
		case "gone":
			return nil, fmt.Errorf("port %s: %w", id, ErrNotFound)
		case "broken":
			return nil, boom
		}
		return ports[id], nil
	}
	for _, c := range []struct {
		id    string
		want  string // the port's ID, "" for none
		err   error
		reads int
	}{
		{id: "", reads: 0},
		{id: "mine", want: "mine", reads: 1},
		{id: "theirs", reads: 1}, // another owner's: look by tags
		{id: "bare", reads: 1},   // untagged (a hand-made port at a recycled ID)
		{id: "gone", reads: 1},
		{id: "broken", err: boom, reads: 1},
	} {
		reads = 0
		p, err := Recorded(context.Background(), o, c.id, get, PortTags)
		got := ""
		if p != nil {
			got = p.ID
		}
		if got != c.want || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) || reads != c.reads {
			t.Errorf("Recorded(%q) = %q, %v after %d reads; want %q, %v after %d", c.id, got, err, reads, c.want, c.err, c.reads)
		}
	}
}
