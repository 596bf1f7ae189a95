package testenv

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// WaitCRDGone waits up to timeout for a deleted CRD to be gone.
//
// The API server's CRD finalizer lists the instances before it lets a CRD go. On a loaded
// machine that list can be refused for a moment (the resource's watch cache still
// initialising, or behind etcd), and the finalizer then retries with a doubling back-off
// that soon exceeds any test's wait: changes to its Terminating condition do not wake it,
// any other change to the CRD does. So a cleanup the finalizer reports failed is nudged
// with an annotation, at most once a second. A timeout names the Terminating condition.
func WaitCRDGone(ctx context.Context, c client.Client, name string, timeout time.Duration) error {
	var last string
	nudges := 0
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var crd apiextensionsv1.CustomResourceDefinition
		err := c.Get(ctx, client.ObjectKey{Name: name}, &crd)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil || crd.DeletionTimestamp == nil {
			return false, nil
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type != apiextensionsv1.Terminating {
				continue
			}
			last = cond.Reason + ": " + cond.Message
			if cond.Reason == "InstanceDeletionFailed" || cond.Reason == "InstanceDeletionCheck" {
				nudges++
				patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"test.bnerd.net/nudge":"%d"}}}`, nudges)
				_ = c.Patch(ctx, &crd, client.RawPatch(types.MergePatchType, patch))
				time.Sleep(time.Second)
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not gone after %s (its Terminating condition: %q; nudged %d times)", name, timeout, last, nudges)
	}
	return nil
}
