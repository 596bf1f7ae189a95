package gateway

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/render"
)

// errNotOurs: an object with the gateway's object name exists but another controller
// owns it; the reconciler never takes it over.
var errNotOurs = errors.New("exists and is not owned by this gateway")

// ensureWorkload converges the gateway's Kubernetes objects. Each is written only when a
// field the operator owns differs, so a converged gateway costs no API write.
func (r *Reconciler) ensureWorkload(ctx context.Context, g *gateway) (bool, error) {
	fail := func(err error) (bool, error) {
		r.condFailed(g, v1alpha1.ConditionWorkloadReady, v1alpha1.ReasonWorkloadFailed, err)
		return false, err
	}
	terminal := func(reason, msg string) (bool, error) {
		r.condFalse(g, v1alpha1.ConditionWorkloadReady, reason, msg)
		return false, nil
	}
	ref := g.ref()
	cfg, err := gatewayconfig.Build(gatewayconfig.Input{Kind: g.kind, Namespace: ref.Namespace, Name: ref.Name, Spec: g.spec, Status: g.status,
		WireGuard: g.wg, InternalSources: r.Config.InternalSourceCIDRs})
	switch {
	case errors.Is(err, gatewayconfig.ErrIncomplete):
		return terminal(v1alpha1.ReasonWorkloadPending, err.Error())
	case err != nil:
		return terminal(v1alpha1.ReasonWorkloadFailed, err.Error())
	}

	// Pre-shared keys: read from the referenced Secrets, never named in any message
	// beyond the Secret's name and key.
	psks := map[string]string{}
	for _, t := range g.spec.Tunnels {
		key := t.PreSharedKey.Key
		if key == "" {
			key = "psk"
		}
		var s corev1.Secret
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: t.PreSharedKey.Name}, &s)
		if apierrors.IsNotFound(err) {
			return terminal(v1alpha1.ReasonPSKSecretMissing, fmt.Sprintf("tunnel %s: Secret %s/%s not found", t.Name, ref.Namespace, t.PreSharedKey.Name))
		}
		if err != nil {
			return fail(err)
		}
		v, ok := s.Data[key]
		if !ok || len(v) == 0 {
			return terminal(v1alpha1.ReasonPSKSecretMissing, fmt.Sprintf("tunnel %s: Secret %s/%s has no key %q", t.Name, ref.Namespace, t.PreSharedKey.Name, key))
		}
		psks[t.Name] = string(v)
	}
	secretsConf, err := gatewayconfig.RenderSecrets(cfg, psks)
	if err != nil {
		// RenderSecrets never quotes key material in its errors.
		return terminal(v1alpha1.ReasonWorkloadFailed, err.Error())
	}

	cm, err := render.ConfigMap(ref, cfg)
	if err != nil {
		return terminal(v1alpha1.ReasonWorkloadFailed, err.Error())
	}
	nad, err := render.NAD(ref, r.Config.NADTemplate, render.NADInput{
		MACAddress: g.status.PortMACAddress, FixedIP: g.status.PortFixedIP,
		SubnetCIDR: g.status.SubnetCIDR, SubnetGatewayIP: g.status.SubnetGatewayIP,
	})
	if err != nil {
		return terminal(v1alpha1.ReasonWorkloadFailed, err.Error())
	}
	wl := render.Workload{
		Gateway: ref, NodeName: g.status.NodeName, PortMAC: g.status.PortMACAddress,
		GatewayImage: r.Config.GatewayImage, AgentImage: r.Config.AgentImage, WireGuardImage: r.Config.WireGuardImage,
		Dataplane: gatewayconfig.DataplaneMode(r.Config.GatewayDataplane),
	}
	deployment := render.Deployment
	if g.wg != nil {
		deployment = render.WireGuardDeployment
	}
	dep, err := deployment(wl)
	if err != nil {
		return terminal(v1alpha1.ReasonWorkloadFailed, err.Error())
	}

	steps := []func() error{
		func() error { return r.applyConfigMap(ctx, cm) },
		func() error {
			if g.wg != nil {
				return nil // no IKE secrets; the key Secret is the key phase's
			}
			return r.applySecret(ctx, render.Secret(ref, secretsConf))
		},
		func() error { return r.applyNAD(ctx, nad) },
		func() error { return r.applyServiceAccount(ctx, render.ServiceAccount(ref)) },
		func() error { return r.applyRole(ctx, render.Role(ref, v1alpha1.GroupVersion.Group)) },
		func() error { return r.applyRoleBinding(ctx, render.RoleBinding(ref)) },
		func() error { return r.applyDeployment(ctx, dep) },
		func() error { return r.releaseStrandedPods(ctx, g) },
		func() error {
			if r.Config.GatewayNetworkPolicy {
				return r.applyNetworkPolicy(ctx, render.NetworkPolicy(ref, r.Config.Namespace))
			}
			return r.deleteNetworkPolicy(ctx, ref)
		},
	}
	for _, step := range steps {
		if err := step(); err != nil {
			if errors.Is(err, errNotOurs) {
				return terminal(v1alpha1.ReasonWorkloadFailed, err.Error())
			}
			return fail(err)
		}
	}
	r.condTrue(g, v1alpha1.ConditionWorkloadReady, v1alpha1.ReasonWorkloadReady,
		fmt.Sprintf("configuration, secrets, NIC2 attachment, RBAC and Deployment %s (pinned to node %s) are converged", dep.Name, g.status.NodeName))
	return true, nil
}

// ownedMetaOK reports whether live carries the desired labels and controller reference,
// and errNotOurs when another controller owns it.
func ownedMeta(desired, live metav1.Object) (same bool, err error) {
	want := desired.GetOwnerReferences()[0]
	for _, o := range live.GetOwnerReferences() {
		if o.Controller != nil && *o.Controller && o.UID != want.UID {
			return false, fmt.Errorf("%s %s/%s %w", "object", live.GetNamespace(), live.GetName(), errNotOurs)
		}
	}
	same = render.Covers(desired.GetLabels(), live.GetLabels())
	found := false
	for _, o := range live.GetOwnerReferences() {
		if o.UID == want.UID && reflect.DeepEqual(o, want) {
			found = true
		}
	}
	return same && found, nil
}

func mergeMeta(desired, live metav1.Object) {
	labels := maps.Clone(live.GetLabels())
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, desired.GetLabels())
	live.SetLabels(labels)
	want := desired.GetOwnerReferences()[0]
	refs := []metav1.OwnerReference{want}
	for _, o := range live.GetOwnerReferences() {
		if o.UID != want.UID {
			refs = append(refs, o)
		}
	}
	live.SetOwnerReferences(refs)
}

// apply creates desired, or updates live with mutate when the owned fields differ.
func (r *Reconciler) apply(ctx context.Context, desired, live client.Object, bodySame func() bool, mutate func()) error {
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(desired), live)
	if apierrors.IsNotFound(err) {
		return r.Client.Create(ctx, desired)
	}
	if err != nil {
		return err
	}
	metaSame, err := ownedMeta(desired, live)
	if err != nil {
		return fmt.Errorf("%T %s: %w", desired, desired.GetName(), err)
	}
	if metaSame && bodySame() {
		return nil
	}
	mergeMeta(desired, live)
	mutate()
	return r.Client.Update(ctx, live)
}

func (r *Reconciler) applyConfigMap(ctx context.Context, d *corev1.ConfigMap) error {
	live := &corev1.ConfigMap{}
	return r.apply(ctx, d, live,
		func() bool { return maps.Equal(d.Data, live.Data) && len(live.BinaryData) == 0 },
		func() { live.Data, live.BinaryData = d.Data, nil })
}

func (r *Reconciler) applySecret(ctx context.Context, d *corev1.Secret) error {
	live := &corev1.Secret{}
	return r.apply(ctx, d, live,
		func() bool { return reflect.DeepEqual(d.Data, live.Data) && live.Type == d.Type },
		func() { live.Data, live.StringData = d.Data, nil })
}

func (r *Reconciler) applyServiceAccount(ctx context.Context, d *corev1.ServiceAccount) error {
	live := &corev1.ServiceAccount{}
	return r.apply(ctx, d, live, func() bool { return true }, func() {})
}

func (r *Reconciler) applyRole(ctx context.Context, d *rbacv1.Role) error {
	live := &rbacv1.Role{}
	return r.apply(ctx, d, live,
		func() bool { return render.Covers(d.Rules, live.Rules) },
		func() { live.Rules = d.Rules })
}

func (r *Reconciler) applyRoleBinding(ctx context.Context, d *rbacv1.RoleBinding) error {
	live := &rbacv1.RoleBinding{}
	err := r.apply(ctx, d, live,
		func() bool { return d.RoleRef == live.RoleRef && render.Covers(d.Subjects, live.Subjects) },
		func() { live.Subjects = d.Subjects })
	if err == nil && live.RoleRef.Name != "" && live.RoleRef != d.RoleRef {
		// roleRef is immutable: replace the binding.
		if err := r.Client.Delete(ctx, live); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return r.Client.Create(ctx, d)
	}
	return err
}

func (r *Reconciler) applyDeployment(ctx context.Context, d *appsv1.Deployment) error {
	live := &appsv1.Deployment{}
	return r.apply(ctx, d, live,
		func() bool { return render.Covers(d.Spec, live.Spec) },
		func() {
			// The selector is immutable and derived from the gateway's identity only.
			sel := live.Spec.Selector
			live.Spec = d.Spec
			if sel != nil {
				live.Spec.Selector = sel
			}
		})
}

func (r *Reconciler) applyNetworkPolicy(ctx context.Context, d *networkingv1.NetworkPolicy) error {
	live := &networkingv1.NetworkPolicy{}
	return r.apply(ctx, d, live,
		func() bool { return render.Covers(d.Spec, live.Spec) },
		func() { live.Spec = d.Spec })
}

func (r *Reconciler) deleteNetworkPolicy(ctx context.Context, ref render.Gateway) error {
	var live networkingv1.NetworkPolicy
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: render.NetworkPolicyName(ref.Name)}, &live)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !metav1.IsControlledBy(&live, &metav1.ObjectMeta{UID: ref.UID}) {
		return nil
	}
	return client.IgnoreNotFound(r.Client.Delete(ctx, &live))
}

func (r *Reconciler) applyNAD(ctx context.Context, d *unstructured.Unstructured) error {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(render.NADGVK)
	return r.apply(ctx, d, live,
		func() bool { return render.Covers(d.Object["spec"], live.Object["spec"]) },
		func() { live.Object["spec"] = d.Object["spec"] })
}
