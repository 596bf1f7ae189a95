package gateway

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"bnerd.net/vpn-operator/internal/render"
)

// releaseStrandedPods deletes, without a grace period, the gateway's pods still bound
// to a node the gateway left because that node is gone or not Ready. The Deployment
// replaces its pod with Recreate (the new pod needs the port the old one held), and
// Recreate waits until no old pod remains; a pod on a node whose kubelet is gone never
// finishes terminating by itself, so without this the gateway would not come back on
// its new node until a human force-deleted the pod or the node object was removed. The
// port was detached from the old node's server before the Deployment was re-pinned,
// so the old pod, should it still run, no longer holds it. A pod on a Ready node is
// left to its kubelet.
//
// Pods are read from the manager's cache, which the operator limits to gateway pods
// (see cmd/bnerd-vpn-operator): a converged gateway costs no API call here.
func (r *Reconciler) releaseStrandedPods(ctx context.Context, g *gateway) error {
	ref := g.ref()
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(ref.Namespace), client.MatchingLabels(render.SelectorLabels(ref))); err != nil {
		return fmt.Errorf("listing the gateway's pods: %w", err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == "" || p.Spec.NodeName == g.status.NodeName {
			continue
		}
		var node corev1.Node
		err := r.Client.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, &node)
		why := ""
		_, failed := r.nodeFailed(p.Spec.NodeName)
		switch {
		case apierrors.IsNotFound(err):
			why = "is gone"
		case err != nil:
			return fmt.Errorf("reading node %s of pod %s: %w", p.Spec.NodeName, p.Name, err)
		case !nodeReady(&node):
			why = "is not Ready"
		case failed:
			why = "was declared failed (its gateway pods stopped renewing their liveness leases)"
		default:
			continue // a live kubelet terminates it gracefully
		}
		uid := p.UID
		if err := r.Client.Delete(ctx, p, client.GracePeriodSeconds(0), client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("releasing pod %s from node %s: %w", p.Name, p.Spec.NodeName, err)
		}
		logr.FromContextOrDiscard(ctx).Info("released the gateway's pod from a lost node", "pod", p.Name, "node", p.Spec.NodeName, "reason", why, "pinnedTo", g.status.NodeName)
		g.events.Add(corev1.EventTypeWarning, "StrandedPodDeleted", "Delete",
			"pod %s was bound to node %s, which %s; deleted it so the gateway starts on %s, where its port is attached", p.Name, p.Spec.NodeName, why, g.status.NodeName)
	}
	return nil
}
