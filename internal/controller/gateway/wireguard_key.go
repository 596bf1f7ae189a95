package gateway

import (
	"context"
	"fmt"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/render"
)

// ensureWireGuardKey gives a WireGuard gateway its key pair: the private key is generated
// here into the gateway's key Secret (owned by the gateway, mounted by its pod, never
// copied anywhere else), the public key is derived from it on every reconcile and
// published in status.wireguard.publicKey. A new value of the rotate annotation replaces
// the key; the previous one stays in the Secret (not in the pod) and its public key in
// status until every peer has completed a handshake with the new key, as the status
// agent reports. An IPsec gateway has nothing here.
func (r *Reconciler) ensureWireGuardKey(ctx context.Context, g *gateway) (bool, error) {
	if g.wg == nil {
		return true, r.dropWireGuardKey(ctx, g)
	}
	fail := func(err error) (bool, error) {
		r.condFailed(g, v1alpha1.ConditionWireGuardKeyReady, v1alpha1.ReasonKeyFailed, err)
		return false, err
	}
	refuse := func(msg string) (bool, error) {
		r.condFalse(g, v1alpha1.ConditionWireGuardKeyReady, v1alpha1.ReasonKeyFailed, msg)
		return false, nil
	}
	ref := g.ref()
	name := render.WireGuardKeySecretName(ref.Name)
	token := g.obj.GetAnnotations()[v1alpha1.AnnotationRotateWireGuardKey]
	if g.status.WireGuard == nil {
		g.status.WireGuard = &v1alpha1.WireGuardStatus{}
	}
	st := g.status.WireGuard

	var sec corev1.Secret
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: name}, &sec)
	switch {
	case apierrors.IsNotFound(err):
		key, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			return fail(err)
		}
		desired := render.WireGuardKeySecret(ref, key.String(), "", token)
		if err := r.Client.Create(ctx, desired); err != nil {
			// AlreadyExists: a create raced this one; the next attempt reads it.
			return fail(err)
		}
		sec = *desired
		st.PreviousPublicKey, st.KeyRotatedAt = "", nil
	case err != nil:
		return fail(err)
	default:
		if !metav1.IsControlledBy(&sec, &metav1.ObjectMeta{UID: ref.UID}) {
			return refuse(fmt.Sprintf("Secret %s/%s %s", ref.Namespace, name, errNotOurs))
		}
	}
	key, err := wgtypes.ParseKey(string(sec.Data[render.WireGuardPrivateKeyKey]))
	if err != nil {
		// Never quote the value: it is meant to be a private key.
		return refuse(fmt.Sprintf("Secret %s/%s holds no valid WireGuard private key under %q; delete the Secret and a new key is generated", ref.Namespace, name, render.WireGuardPrivateKeyKey))
	}

	if token != "" && token != sec.Annotations[v1alpha1.AnnotationRotateWireGuardKey] {
		next, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			return fail(err)
		}
		rotated := sec.DeepCopy()
		desired := render.WireGuardKeySecret(ref, next.String(), key.String(), token)
		rotated.Data, rotated.StringData = desired.Data, nil
		if rotated.Annotations == nil {
			rotated.Annotations = map[string]string{}
		}
		rotated.Annotations[v1alpha1.AnnotationRotateWireGuardKey] = token
		if err := r.Client.Update(ctx, rotated); err != nil {
			return fail(err)
		}
		sec = *rotated
		now := metav1.NewTime(r.now().Truncate(1e9))
		st.PreviousPublicKey, st.KeyRotatedAt = key.PublicKey().String(), &now
		key = next
	}
	st.PublicKey = key.PublicKey().String()

	prev, rotating := sec.Data[render.WireGuardPreviousKeyKey]
	if !rotating {
		st.PreviousPublicKey = ""
		r.condTrue(g, v1alpha1.ConditionWireGuardKeyReady, v1alpha1.ReasonKeyReady,
			fmt.Sprintf("public key %s is published; the private key stays in Secret %s", st.PublicKey, name))
		return true, nil
	}
	if pk, err := wgtypes.ParseKey(string(prev)); err == nil {
		st.PreviousPublicKey = pk.PublicKey().String()
	}
	if st.KeyRotatedAt == nil {
		now := metav1.NewTime(r.now().Truncate(1e9))
		st.KeyRotatedAt = &now
	}
	done, pending := rotationProgress(g)
	if len(pending) == 0 {
		kept := sec.DeepCopy()
		delete(kept.Data, render.WireGuardPreviousKeyKey)
		if err := r.Client.Update(ctx, kept); err != nil {
			return fail(err)
		}
		st.PreviousPublicKey = ""
		r.condTrue(g, v1alpha1.ConditionWireGuardKeyReady, v1alpha1.ReasonKeyReady,
			fmt.Sprintf("public key %s is published and every peer has completed a handshake with it; the previous key is discarded", st.PublicKey))
		return true, nil
	}
	r.condTrue(g, v1alpha1.ConditionWireGuardKeyReady, v1alpha1.ReasonKeyRotationPending,
		fmt.Sprintf("key rotated at %s: clients must configure the new public key %s; %d of %d peers have completed a handshake with it (waiting for %v); the previous key %s is kept until all have",
			st.KeyRotatedAt.UTC().Format("2006-01-02T15:04:05Z"), st.PublicKey, done, done+len(pending), pending, st.PreviousPublicKey))
	return true, nil
}

// rotationProgress counts the peers that completed a handshake with the gateway's
// current key since the rotation: the status agent must report that the interface uses
// that key, and each peer's latest handshake (made with the interface's key) must be no
// older than the rotation.
func rotationProgress(g *gateway) (done int, pending []string) {
	st := g.status.WireGuard
	current := g.status.InterfacePublicKey == st.PublicKey
	for _, p := range g.wg.Peers {
		ok := false
		if current {
			for _, t := range g.status.Tunnels {
				if t.Name == p.Name && t.LatestHandshake != nil && !t.LatestHandshake.Before(st.KeyRotatedAt) {
					ok = true
				}
			}
		}
		if ok {
			done++
		} else {
			pending = append(pending, p.Name)
		}
	}
	return done, pending
}

// dropWireGuardKey removes what a gateway that no longer uses WireGuard kept of it: its
// key Secret, status and condition.
func (r *Reconciler) dropWireGuardKey(ctx context.Context, g *gateway) error {
	if g.status.WireGuard == nil && meta.FindStatusCondition(g.status.Conditions, v1alpha1.ConditionWireGuardKeyReady) == nil {
		return nil
	}
	ref := g.ref()
	var sec corev1.Secret
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: render.WireGuardKeySecretName(ref.Name)}, &sec)
	switch {
	case err == nil && metav1.IsControlledBy(&sec, &metav1.ObjectMeta{UID: ref.UID}):
		if err := r.Client.Delete(ctx, &sec); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	case err != nil && !apierrors.IsNotFound(err):
		return err
	}
	g.status.WireGuard = nil
	meta.RemoveStatusCondition(&g.status.Conditions, v1alpha1.ConditionWireGuardKeyReady)
	return nil
}

// wireGuardKeyEvents passes the gateway events the key phase needs besides spec changes:
// a new rotate-annotation value, and, while a rotation waits for handshakes, the status
// agent's reports (which otherwise never wake the operator).
var wireGuardKeyEvents = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*v1alpha1.VPNGateway)
		n, ok2 := e.ObjectNew.(*v1alpha1.VPNGateway)
		if !ok1 || !ok2 || n.Spec.Protocol != v1alpha1.VPNProtocolWireGuard {
			return false
		}
		if o.Annotations[v1alpha1.AnnotationRotateWireGuardKey] != n.Annotations[v1alpha1.AnnotationRotateWireGuardKey] {
			return true
		}
		if n.Status.WireGuard == nil || n.Status.WireGuard.PreviousPublicKey == "" {
			return false
		}
		return o.Status.InterfacePublicKey != n.Status.InterfacePublicKey || !tunnelHandshakesEqual(o.Status.Tunnels, n.Status.Tunnels)
	},
}

func tunnelHandshakesEqual(a, b []v1alpha1.TunnelState) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i].LatestHandshake, b[i].LatestHandshake
		if a[i].Name != b[i].Name || (x == nil) != (y == nil) || (x != nil && !x.Equal(y)) {
			return false
		}
	}
	return true
}
