// Package statuswrite writes the part of an object's status that one writer owns, with
// server-side apply under that writer's own field manager. Two writers of one status
// (the operator and a gateway's status agent) then never overwrite each other: each
// apply carries only its own fields, and the API server keeps the rest.
//
// The operator's apply is also guarded by the resourceVersion its reconcile started
// from, so a decision made on a stale read (a cache that has not seen the operator's
// previous write yet) is never written. A write by another field manager moves the
// resourceVersion without touching the operator's fields: when the guarded apply loses
// that race, a fresh read shows whether the owned fields (and the generation) are still
// what the reconcile started from. If they are, the reconcile's view was current and
// the apply is sent again without the precondition, so a busy second writer can never
// starve the first; it never surfaces as an error. (The unguarded retry leaves a window
// of one request in which a third writer of the same fields could slip in; leader
// election keeps the operator the only writer of its fields.) If they are not, the
// write fails with the conflict and the reconcile starts again from a fresh read.
package statuswrite

import (
	"context"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Field managers of the project's status writers.
const (
	// ManagerOperator owns every status field the reconcilers write.
	ManagerOperator = "bnerd-vpn-operator"
	// ManagerStatusAgent owns a gateway's status.tunnels and status.tunnelsReady.
	ManagerStatusAgent = "bnerd-vpn-status-agent"
)

// Writer applies one field manager's part of a status.
type Writer struct {
	// Client writes (and knows the scheme for the object's kind).
	Client client.Client
	// Reader reads around any cache when a write lost a race. Nil means Client.
	Reader client.Reader
	// Manager is the field manager the apply is made under.
	Manager string
	// Fields, when set, names the only top-level status fields this writer owns.
	Fields []string
	// Exclude names top-level status fields other writers own; they are never sent.
	Exclude []string
	// Unguarded drops the resourceVersion precondition: the writer's fields depend on
	// nothing it read (the status agent reports what charon says).
	Unguarded bool
	// Fresh, when set, remembers the versions each successful write replaced, so Behind
	// can tell a cached read that does not show the write yet.
	Fresh *Freshness
}

// Apply writes obj's status (less the excluded fields) and updates obj's
// resourceVersion. base is the object as the reconcile read it; on a lost race the
// write is retried only while the owned fields on the server still equal base's.
func (w Writer) Apply(ctx context.Context, obj, base client.Object) error {
	gvk, err := apiutil.GVKForObject(obj, w.Client.Scheme())
	if err != nil {
		return err
	}
	owned, err := w.owned(obj)
	if err != nil {
		return err
	}
	apply := func(rv string) error {
		u := &unstructured.Unstructured{Object: map[string]any{"status": owned}}
		u.SetGroupVersionKind(gvk)
		u.SetName(obj.GetName())
		u.SetNamespace(obj.GetNamespace())
		u.SetResourceVersion(rv)
		if err := w.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(w.Manager), client.ForceOwnership); err != nil {
			return err
		}
		obj.SetResourceVersion(u.GetResourceVersion())
		return nil
	}
	if w.Unguarded {
		return apply("")
	}
	read := obj.GetResourceVersion()
	err = apply(read)
	if err == nil && w.Fresh != nil {
		w.Fresh.wrote(obj.GetUID(), read, obj.GetResourceVersion())
	}
	if err == nil || !apierrors.IsConflict(err) {
		return err
	}
	// Someone wrote the object since it was read. If the fields this writer owns (and
	// the spec generation) are as the reconcile saw them, the other write was another
	// manager's: write again on top of it.
	fresh, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return err
	}
	reader := w.Reader
	if reader == nil {
		reader = w.Client
	}
	if gerr := reader.Get(ctx, client.ObjectKeyFromObject(obj), fresh); gerr != nil {
		return fmt.Errorf("%w (and re-reading it failed: %v)", err, gerr)
	}
	same, cerr := w.sameOwned(base, fresh)
	if cerr != nil {
		return cerr
	}
	if !same {
		return fmt.Errorf("status fields of %s changed since they were read: %w", obj.GetName(), err)
	}
	if err := apply(""); err != nil {
		return err
	}
	if w.Fresh != nil {
		w.Fresh.wrote(obj.GetUID(), read, obj.GetResourceVersion())
		w.Fresh.wrote(obj.GetUID(), fresh.GetResourceVersion(), obj.GetResourceVersion())
	}
	return nil
}

// owned is obj's status as a JSON-shaped map without the excluded fields.
func (w Writer) owned(obj runtime.Object) (map[string]any, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	st, _ := m["status"].(map[string]any)
	if st == nil {
		st = map[string]any{}
	}
	for _, f := range w.Exclude {
		delete(st, f)
	}
	if w.Fields != nil {
		only := make(map[string]any, len(w.Fields))
		for _, f := range w.Fields {
			if v, ok := st[f]; ok {
				only[f] = v
			}
		}
		st = only
	}
	return st, nil
}

func (w Writer) sameOwned(a, b client.Object) (bool, error) {
	if a.GetGeneration() != b.GetGeneration() {
		return false, nil
	}
	x, err := w.owned(a)
	if err != nil {
		return false, err
	}
	y, err := w.owned(b)
	if err != nil {
		return false, err
	}
	return reflect.DeepEqual(x, y), nil
}
