package openstack

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
)

func TestOwnedKeepsOneDeletesDuplicatesAdoptsOrCreatesOnlyWhenNoneIsFound(t *testing.T) {
	o := Owner{Kind: "IPsecGateway", Namespace: "tenant-a", Name: "gw1", UID: "u1"}
	mine := func(id, device string) Port { return Port{ID: id, DeviceID: device, Tags: o.Tags()} }
	boom := errors.New("connection reset")
	for _, c := range []struct {
		name     string
		recorded string
		store    map[string]Port // what GetPort reads
		listed   []Port          // what the tag lookup returns
		failOn   string          // the delete of this ID fails (gone: "NotFound")
		listErr  error
		handMade *Port // what Adopt finds ("adopt" cases only)
		adoptErr error
		want     string // the ID kept, "" for none
		adopted  bool
		created  bool
		deleted  []string
		err      error
	}{
		{name: "recorded and still ours: no lookup by tag", recorded: "a", store: map[string]Port{"a": mine("a", "")},
			listed: []Port{mine("b", "")}, want: "a"},
		{name: "recorded but retagged by someone else: found by tag", recorded: "a", store: map[string]Port{"a": {ID: "a"}},
			listed: []Port{mine("b", "")}, want: "b"},
		{name: "none anywhere: created", want: "new", created: true},
		{name: "two by tag: the attached one stays, the other goes", listed: []Port{mine("b", ""), mine("c", "vm")},
			want: "c", deleted: []string{"b"}},
		{name: "a duplicate in use stays", listed: []Port{mine("b", "vm1"), mine("c", "vm2")}, want: "b"},
		{name: "a duplicate already gone counts as deleted", listed: []Port{mine("b", ""), mine("c", "")}, failOn: "NotFound",
			want: "b", deleted: []string{"c"}},
		{name: "a delete that fails stops it", listed: []Port{mine("b", ""), mine("c", "")}, failOn: "c", want: "b", err: boom},
		{name: "a lookup that fails creates nothing", listErr: boom, err: boom},
		{name: "adopt: none by tag, one made by hand: adopted, nothing created", handMade: &Port{ID: "hand"},
			want: "hand", adopted: true},
		{name: "adopt: none by tag and none by hand: created", handMade: &Port{}, want: "new", created: true},
		{name: "adopt: found by tag, the hand-made one is not looked at", handMade: &Port{ID: "hand"},
			listed: []Port{mine("b", "")}, want: "b"},
		{name: "adopt: a look for a hand-made one that fails creates nothing", handMade: &Port{}, adoptErr: boom, err: boom},
	} {
		t.Run(c.name, func(t *testing.T) {
			created, adoptAsked := 0, 0
			var adopt func(context.Context) (*Port, error)
			if c.handMade != nil {
				adopt = func(context.Context) (*Port, error) {
					adoptAsked++
					if c.adoptErr != nil || c.handMade.ID == "" {
						return nil, c.adoptErr
					}
					p := *c.handMade
					return &p, nil
				}
			}
			found, err := Owned[Port]{
				Owner: o, RecordedID: c.recorded, Tags: PortTags,
				Get: func(_ context.Context, id string) (*Port, error) {
					if p, ok := c.store[id]; ok {
						return &p, nil
					}
					return nil, fmt.Errorf("port %s: %w", id, ErrNotFound)
				},
				List:  func(context.Context) ([]Port, error) { return slices.Clone(c.listed), c.listErr },
				Keep:  func(a, b *Port) bool { return a.DeviceID != "" && b.DeviceID == "" },
				InUse: func(p *Port) bool { return p.DeviceID != "" },
				ID:    func(p *Port) string { return p.ID },
				Delete: func(_ context.Context, id string) error {
					switch c.failOn {
					case id:
						return boom
					case "NotFound":
						return ErrNotFound
					}
					return nil
				},
				Adopt: adopt,
				Create: func(context.Context) (*Port, error) {
					created++
					return &Port{ID: "new", Tags: o.Tags()}, nil
				},
			}.Ensure(context.Background())
			got := ""
			if found.Object != nil && err == nil {
				got = found.Object.ID
			}
			if got != c.want && err == nil || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
				t.Errorf("kept %q, err %v; want %q, %v", got, err, c.want, c.err)
			}
			if found.Created != c.created || created != map[bool]int{false: 0, true: 1}[c.created] {
				t.Errorf("created %v (%d creates); want %v", found.Created, created, c.created)
			}
			if found.Adopted != c.adopted {
				t.Errorf("adopted %v; want %v", found.Adopted, c.adopted)
			}
			if c.handMade != nil && (adoptAsked == 1) != (len(c.listed) == 0) {
				t.Errorf("Adopt ran %d times with %d found by tag; want once exactly when none is", adoptAsked, len(c.listed))
			}
			if !slices.Equal(found.Deleted, c.deleted) {
				t.Errorf("deleted %v; want %v", found.Deleted, c.deleted)
			}
		})
	}
}
