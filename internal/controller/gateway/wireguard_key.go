package gateway

import (
	"context"
	"fmt"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/operatorconfig"
	"bnerd.net/vpn-operator/internal/render"
)

// ensureWireGuardKey gives a WireGuard gateway its key pair: the private key is generated
// here into the gateway's key Secret (owned by the gateway, mounted by its pod, never
// copied anywhere else), the public key and the port it is served on are derived from
// the Secret on every reconcile and published in status.wireguard (never taken from
// status, which the gateway's pod may write). A new value of the rotate annotation
// replaces the key: the new one is served on the gateway's other port (key slot) while
// the previous one keeps its own, until every peer has completed a handshake with the
// new key (as the status agent reports) or the platform's overlap ends. An IPsec gateway
// has nothing here.
func (r *Reconciler) ensureWireGuardKey(ctx context.Context, g *gateway) (bool, error) {
	if g.wg == nil {
		return true, r.dropWireGuardKey(ctx, g)
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

	sec, refusal, err := r.wireGuardKeySecret(ctx, g, name, token)
	if err != nil {
		return r.keyFailed(g, err)
	}
	if refusal != "" {
		return refuse(refusal)
	}
	keys := render.WireGuardKeysOf(sec)
	key, err := wgtypes.ParseKey(keys.PrivateKey)
	if err != nil {
		// Never quote the value: it is meant to be a private key.
		return refuse(fmt.Sprintf("Secret %s/%s holds no valid WireGuard private key under %q; delete the Secret and a new key is generated", ref.Namespace, name, render.WireGuardPrivateKeyKey))
	}
	if token != "" && token != keys.Token {
		if keys, key, err = r.rotateWireGuardKey(ctx, g, sec, keys, key, token); err != nil {
			return r.keyFailed(g, err)
		}
	}
	st.PublicKey, st.ListenPort = key.PublicKey().String(), v1alpha1.WireGuardKeyPort(g.wg, keys.Slot)
	return r.ensureKeyOverlap(ctx, g, sec, keys)
}

// keyFailed records a failure of the key phase.
func (r *Reconciler) keyFailed(g *gateway, err error) (bool, error) {
	r.condFailed(g, v1alpha1.ConditionWireGuardKeyReady, v1alpha1.ReasonKeyFailed, err)
	return false, err
}

// wireGuardKeySecret is the gateway's key Secret: read, or created with a new key when
// there is none. A Secret of that name the gateway does not control is refused, never
// taken over.
func (r *Reconciler) wireGuardKeySecret(ctx context.Context, g *gateway, name, token string) (sec *corev1.Secret, refusal string, err error) {
	ref := g.ref()
	sec = &corev1.Secret{}
	err = r.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: name}, sec)
	switch {
	case apierrors.IsNotFound(err):
		key, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			return nil, "", err
		}
		desired := render.WireGuardKeySecret(ref, render.WireGuardKeys{PrivateKey: key.String(), Token: token})
		if err := r.Client.Create(ctx, desired); err != nil {
			// AlreadyExists: a create raced this one; the next attempt reads it.
			return nil, "", err
		}
		st := g.status.WireGuard
		st.RetiredPublicKey, st.KeyRotatedAt = "", nil
		return desired, "", nil
	case err != nil:
		return nil, "", err
	}
	if !metav1.IsControlledBy(sec, &metav1.ObjectMeta{UID: ref.UID}) {
		return nil, fmt.Sprintf("Secret %s/%s %s", ref.Namespace, name, errNotOurs), nil
	}
	return sec, "", nil
}

// rotateWireGuardKey puts a new key on the free slot; the current one becomes the
// previous key, served on its own slot through the overlap.
func (r *Reconciler) rotateWireGuardKey(ctx context.Context, g *gateway, sec *corev1.Secret, keys render.WireGuardKeys, key wgtypes.Key, token string) (render.WireGuardKeys, wgtypes.Key, error) {
	next, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		return keys, key, err
	}
	if old, err := wgtypes.ParseKey(keys.PreviousKey); err == nil {
		// A rotation during an overlap: the key before the previous one was on the slot
		// the new key takes, so it stops being served now.
		g.status.WireGuard.RetiredPublicKey = old.PublicKey().String()
	}
	rotated := render.WireGuardKeys{PrivateKey: next.String(), PreviousKey: key.String(), Slot: 1 - keys.Slot,
		RotatedAt: r.now().Truncate(time.Second), Token: token}
	if err := r.writeKeys(ctx, sec, g.ref(), rotated); err != nil {
		return keys, key, err
	}
	return rotated, next, nil
}

// ensureKeyOverlap serves the previous key, if any, until every peer has completed a
// handshake with the current one or the overlap ends, then retires it.
func (r *Reconciler) ensureKeyOverlap(ctx context.Context, g *gateway, sec *corev1.Secret, keys render.WireGuardKeys) (bool, error) {
	ref, st := g.ref(), g.status.WireGuard
	name := render.WireGuardKeySecretName(ref.Name)
	prev, err := wgtypes.ParseKey(keys.PreviousKey)
	if keys.PreviousKey != "" && err != nil {
		// Not a key: nothing can serve it, and the pod must not be handed it.
		keys.PreviousKey = ""
		if err := r.writeKeys(ctx, sec, ref, keys); err != nil {
			return r.keyFailed(g, err)
		}
	}
	if keys.PreviousKey == "" {
		st.PreviousPublicKey, st.PreviousListenPort, st.PreviousKeyRetiresAt = "", 0, nil
		if !keys.RotatedAt.IsZero() {
			rotatedAt := metav1.NewTime(keys.RotatedAt)
			st.KeyRotatedAt = &rotatedAt
		}
		return r.keyServed(g, name)
	}
	if keys.RotatedAt.IsZero() {
		// A rotation recorded before the Secret carried its time: its overlap counts
		// from now.
		keys.RotatedAt = r.now().Truncate(time.Second)
		if err := r.writeKeys(ctx, sec, ref, keys); err != nil {
			return r.keyFailed(g, err)
		}
	}
	rotatedAt, retiresAt := metav1.NewTime(keys.RotatedAt), metav1.NewTime(keys.RotatedAt.Add(r.keyOverlap()))
	st.KeyRotatedAt, st.PreviousKeyRetiresAt = &rotatedAt, &retiresAt
	st.PreviousPublicKey, st.PreviousListenPort = prev.PublicKey().String(), v1alpha1.WireGuardKeyPort(g.wg, 1-keys.Slot)

	done, pending := rotationProgress(g)
	if len(pending) > 0 && r.now().Before(retiresAt.Time) {
		g.recheckIn(retiresAt.Sub(r.now()))
		r.condTrue(g, v1alpha1.ConditionWireGuardKeyReady, v1alpha1.ReasonKeyRotationPending,
			fmt.Sprintf("key rotated at %s: the new public key %s is served on UDP %d and the previous key %s still on UDP %d until every peer has completed a handshake with the new key or until %s; %d of %d peers have (waiting for %v)",
				rfc3339(rotatedAt), st.PublicKey, st.ListenPort, st.PreviousPublicKey, st.PreviousListenPort, rfc3339(retiresAt), done, done+len(pending), pending))
		return true, nil
	}
	retired := keys
	retired.PreviousKey = ""
	if err := r.writeKeys(ctx, sec, ref, retired); err != nil {
		return r.keyFailed(g, err)
	}
	if len(pending) > 0 {
		st.RetiredPublicKey = st.PreviousPublicKey
	}
	st.PreviousPublicKey, st.PreviousListenPort, st.PreviousKeyRetiresAt = "", 0, nil
	return r.keyServed(g, name)
}

// keyServed reports the key phase once one key is served: KeyReady, or
// PreviousKeyRetired while a peer that had not switched when the previous key was
// retired has still not completed a handshake with the current key.
func (r *Reconciler) keyServed(g *gateway, secret string) (bool, error) {
	st := g.status.WireGuard
	if st.RetiredPublicKey != "" && st.KeyRotatedAt != nil {
		if _, pending := rotationProgress(g); len(pending) > 0 {
			r.condTrue(g, v1alpha1.ConditionWireGuardKeyReady, v1alpha1.ReasonPreviousKeyRetired,
				fmt.Sprintf("the previous key %s is no longer served: peers %v have not completed a handshake with the current public key %s (UDP %d) and are refused until their clients configure it",
					st.RetiredPublicKey, pending, st.PublicKey, st.ListenPort))
			return true, nil
		}
	}
	st.RetiredPublicKey = ""
	r.condTrue(g, v1alpha1.ConditionWireGuardKeyReady, v1alpha1.ReasonKeyReady,
		fmt.Sprintf("public key %s is published and served on UDP %d; the private key stays in Secret %s", st.PublicKey, st.ListenPort, secret))
	return true, nil
}

// writeKeys records keys in the key Secret, keeping its other metadata.
func (r *Reconciler) writeKeys(ctx context.Context, sec *corev1.Secret, ref render.Gateway, keys render.WireGuardKeys) error {
	desired := render.WireGuardKeySecret(ref, keys)
	updated := sec.DeepCopy()
	updated.Data, updated.StringData = desired.Data, nil
	if updated.Annotations == nil {
		updated.Annotations = map[string]string{}
	}
	for _, k := range []string{render.AnnotationWireGuardKeySlot, render.AnnotationWireGuardKeyRotatedAt, v1alpha1.AnnotationRotateWireGuardKey} {
		if v, ok := desired.Annotations[k]; ok {
			updated.Annotations[k] = v
		} else {
			delete(updated.Annotations, k)
		}
	}
	if err := r.Client.Update(ctx, updated); err != nil {
		return err
	}
	*sec = *updated
	return nil
}

// keyOverlap is the configured overlap, the default where none is set.
func (r *Reconciler) keyOverlap() time.Duration {
	if r.Config.WireGuardKeyOverlap > 0 {
		return r.Config.WireGuardKeyOverlap
	}
	return operatorconfig.DefaultWireGuardKeyOverlap
}

func rfc3339(t metav1.Time) string { return t.UTC().Format(time.RFC3339) }

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
// a new rotate-annotation value, and, while a rotation waits for handshakes (in its
// overlap, or after its deadline retired the previous key), the status agent's reports
// (which otherwise never wake the operator).
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
		if n.Status.WireGuard == nil || n.Status.WireGuard.PreviousPublicKey == "" && n.Status.WireGuard.RetiredPublicKey == "" {
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
