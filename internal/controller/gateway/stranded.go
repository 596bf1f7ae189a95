package gateway

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"bnerd.net/vpn-operator/internal/render"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=list;delete

// releaseStrandedPods deletes, without a grace period, the gateway's pods that are bound
// to a node other than the selected one when that node is gone or not Ready. Such a pod
// can never terminate gracefully (no kubelet answers for it), and the Deployment's
// Recreate strategy starts the replacement only when it is gone: without this, a lost
// node keeps the gateway down until the pod garbage collector removes orphans (about a
// minute) or, for a NotReady node, indefinitely. It is safe because the port was detached
// from that node's server before (ensurePortAttached): the stranded pod has no NIC2 and
// cannot carry the tunnel. It runs only while the Deployment has no available replica, so
// a converged gateway costs no pod listing.
func (r *Reconciler) releaseStrandedPods(ctx context.Context, g *gateway) error {
	var dep appsv1.Deployment
	ref := g.ref()
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: render.DeploymentName(ref.Name)}, &dep); err != nil {
		return client.IgnoreNotFound(err)
	}
	if dep.Status.AvailableReplicas > 0 {
		return nil
	}
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	var pods corev1.PodList
	if err := reader.List(ctx, &pods, client.InNamespace(ref.Namespace), client.MatchingLabels(render.SelectorLabels(ref))); err != nil {
		return err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == "" || p.Spec.NodeName == g.status.NodeName {
			continue
		}
		var node corev1.Node
		err := r.Client.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, &node)
		why := ""
		switch {
		case apierrors.IsNotFound(err):
			why = "is gone"
		case err != nil:
			return err
		case !nodeReady(&node):
			why = "is not Ready"
		default:
			continue // a live kubelet terminates it gracefully
		}
		if err := r.Client.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting stranded pod %s: %w", p.Name, err)
		}
		logr.FromContextOrDiscard(ctx).Info("deleted a gateway pod stranded on a lost node", "pod", p.Name, "node", p.Spec.NodeName, "reason", why)
		if r.Recorder != nil {
			r.Recorder.Eventf(g.obj, nil, corev1.EventTypeWarning, "StrandedPodDeleted", "Delete",
				"pod %s was bound to node %s, which %s; deleted it so the gateway starts on %s, where its port is attached", p.Name, p.Spec.NodeName, why, g.status.NodeName)
		}
	}
	return nil
}
