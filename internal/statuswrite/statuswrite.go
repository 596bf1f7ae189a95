// Package statuswrite writes the part of an object's status that one writer owns, with
// server-side apply under that writer's own field manager. Two writers of one status
// (the operator and a gateway's status agent) then never overwrite each other: each
// apply carries only its own fields, and the API server keeps the rest.
//
// The operator's apply is also guarded by the resourceVersion its reconcile started
// from, so a decision made on a stale read is never written. A write by another field
// manager moves the resourceVersion without touching the operator's fields; such a lost
// race is retried here, after checking on a fresh read that the owned fields are what
// the reconcile started from, and never surfaces as an error.
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

// retries bounds how often a lost race against another field manager is retried in one
// write; each retry follows a fresh read that showed the owned fields unchanged.
const retries = 8

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
	// Fresh, when set, remembers every successful write, so Behind can tell a cached
	// read that does not show it yet.
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
	rv := obj.GetResourceVersion()
	for attempt := 0; ; attempt++ {
		u := &unstructured.Unstructured{Object: map[string]any{"status": owned}}
		u.SetGroupVersionKind(gvk)
		u.SetName(obj.GetName())
		u.SetNamespace(obj.GetNamespace())
		if !w.Unguarded {
			u.SetResourceVersion(rv)
		}
		err := w.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(w.Manager), client.ForceOwnership)
		if err == nil {
			obj.SetResourceVersion(u.GetResourceVersion())
			if w.Fresh != nil {
				w.Fresh.wrote(obj.GetUID(), rv)
			}
			return nil
		}
		if !apierrors.IsConflict(err) || w.Unguarded || attempt == retries {
			return err
		}
		// Someone wrote the object since it was read. If the fields this writer owns
		// (and the spec generation) are as the reconcile saw them, the other write was
		// another manager's: write again on top of it.
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
		rv = fresh.GetResourceVersion()
	}
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
