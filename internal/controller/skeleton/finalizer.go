package skeleton

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// AddFinalizer adds name to obj's finalizers when it is missing (false: it was there).
// Both finalizer writes are a JSON merge patch guarded by obj's resourceVersion: a
// merge patch replaces the whole list, so without the guard a finalizer another
// controller added since the read would be dropped; with it, that write conflicts and
// the reconcile starts again from a fresh read. The patch carries the list only, so the
// operator needs the patch verb on the object and never rewrites its spec.
func AddFinalizer(ctx context.Context, c client.Client, obj client.Object, name string) (bool, error) {
	if controllerutil.ContainsFinalizer(obj, name) {
		return false, nil
	}
	base := obj.DeepCopyObject().(client.Object)
	controllerutil.AddFinalizer(obj, name)
	return true, c.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}

// RemoveFinalizer removes name from obj's finalizers, the same way; an object already
// gone is no error.
func RemoveFinalizer(ctx context.Context, c client.Client, obj client.Object, name string) error {
	if !controllerutil.ContainsFinalizer(obj, name) {
		return nil
	}
	base := obj.DeepCopyObject().(client.Object)
	controllerutil.RemoveFinalizer(obj, name)
	return client.IgnoreNotFound(c.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})))
}
