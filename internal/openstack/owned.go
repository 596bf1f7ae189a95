package openstack

import (
	"context"
	"sort"
)

// Owned is the one find-or-adopt-or-create step of an object a reconciler owns in
// OpenStack. The object its status records is trusted only while it carries the owner's
// tags (Recorded); otherwise the owner's objects are looked up by their tags, which adopts
// what an earlier reconcile made but never recorded. Only a lost create response makes
// more than one of them, so one is kept and the others, unless in use, are deleted:
// the dedupe lives here once. With none, Adopt may take over an object made by hand, and
// else Create makes one; the caller puts the owner's tags in the create request itself,
// so a crash at any point leaves at most one to adopt.
type Owned[T any] struct {
	Owner Owner
	// RecordedID is the ID the owner's status records ("" for none); Get and Tags read it.
	// A nil Get skips the recorded lookup (the caller judged the recorded object itself).
	RecordedID string
	Get        func(context.Context, string) (*T, error)
	Tags       func(*T) []string
	// List returns the objects carrying the owner's tags.
	List func(context.Context) ([]T, error)
	// Keep orders the found objects: the one it puts first is kept (nil: as listed).
	Keep func(a, b *T) bool
	// InUse marks a duplicate that is left alone rather than deleted (nil: none is).
	InUse func(*T) bool
	// ID and Delete remove a duplicate; a duplicate already gone counts as deleted.
	ID     func(*T) string
	Delete func(context.Context, string) error
	// Adopt, when set, runs when the owner has none: it returns an object made by hand
	// that it has tagged for the owner (nil: there is none, and Create runs).
	Adopt func(context.Context) (*T, error)
	// Create makes the object when the owner has none.
	Create func(context.Context) (*T, error)
}

// Found is what Ensure did: the object, whether it was adopted or created now, and the
// duplicates it deleted (for the caller's log).
type Found[T any] struct {
	Object  *T
	Adopted bool
	Created bool
	Deleted []string
}

// Ensure returns the owner's object, deleting duplicates and creating it when missing.
// An error leaves nothing half-done that the next call would not finish: a duplicate
// not yet deleted is found again, and a create that failed made nothing to record.
func (o Owned[T]) Ensure(ctx context.Context) (Found[T], error) {
	if o.Get != nil {
		obj, err := Recorded(ctx, o.Owner, o.RecordedID, o.Get, o.Tags)
		if err != nil || obj != nil {
			return Found[T]{Object: obj}, err
		}
	}
	found, err := o.List(ctx)
	if err != nil {
		return Found[T]{}, err
	}
	if len(found) == 0 && o.Adopt != nil {
		obj, err := o.Adopt(ctx)
		if err != nil || obj != nil {
			return Found[T]{Object: obj, Adopted: obj != nil}, err
		}
	}
	if len(found) == 0 {
		obj, err := o.Create(ctx)
		if err != nil {
			return Found[T]{}, err
		}
		return Found[T]{Object: obj, Created: true}, nil
	}
	if o.Keep != nil {
		sort.SliceStable(found, func(i, j int) bool { return o.Keep(&found[i], &found[j]) })
	}
	out := Found[T]{Object: &found[0]}
	for i := range found[1:] {
		extra := &found[1+i]
		if o.InUse != nil && o.InUse(extra) {
			continue
		}
		id := o.ID(extra)
		if err := o.Delete(ctx, id); err != nil && !IsNotFound(err) {
			return out, err
		}
		out.Deleted = append(out.Deleted, id)
	}
	return out, nil
}
