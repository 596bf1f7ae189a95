package gateway

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"

	"github.com/go-logr/logr"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
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
	objs, reason, msg := r.renderWorkload(g)
	if reason != "" {
		return terminal(reason, msg)
	}
	// The pod reads the keys itself; follow the Secrets it names (metadata only, one
	// watch per Secret) so a fixed or rotated key re-checks the condition at once. The
	// watches are named after checkPSKs read the Secrets, with the versions it read, so
	// a watch's first listing of a version already checked wakes no one; a reconcile
	// that stops before that names them without versions.
	ref := g.ref()
	secrets := pskSecretNames(g.spec)
	follow := func(seen map[types.NamespacedName]string) {
		if r.secrets == nil {
			return
		}
		refs := make([]types.NamespacedName, 0, len(secrets))
		for _, n := range secrets {
			refs = append(refs, types.NamespacedName{Namespace: ref.Namespace, Name: n})
		}
		r.secrets.Set(g.String(), refs, seen)
	}
	if err := r.applyWorkload(ctx, g, objs, secrets); err != nil {
		follow(nil)
		if errors.Is(err, errNotOurs) {
			return terminal(v1alpha1.ReasonWorkloadFailed, err.Error())
		}
		return fail(err)
	}
	// Every object is in place (a tunnel with a good key keeps working whatever another
	// tunnel's key does); now the keys themselves.
	reason, msg, seen, err := r.checkPSKs(ctx, g)
	if err != nil {
		follow(nil)
		return fail(err)
	}
	follow(seen)
	if reason != "" {
		return terminal(reason, msg)
	}
	r.condTrue(g, v1alpha1.ConditionWorkloadReady, v1alpha1.ReasonWorkloadReady,
		fmt.Sprintf("configuration, NIC2 attachment, RBAC and Deployment %s (pinned to node %s) are converged; the pod reads the keys of %d tunnel(s) itself", objs.deployment.Name, g.status.NodeName, len(g.spec.Tunnels)))
	return true, nil
}

// workloadObjects are the rendered objects of a gateway that depend on its spec and
// status (the RBAC and the NetworkPolicy are rendered from its name alone).
type workloadObjects struct {
	configMap  *corev1.ConfigMap
	nad        *unstructured.Unstructured
	deployment *appsv1.Deployment
}

// renderWorkload renders the gateway's configuration, NIC2 attachment and Deployment;
// a reason says why they cannot be (WorkloadPending while the phases before have not
// given the configuration all it needs).
func (r *Reconciler) renderWorkload(g *gateway) (objs workloadObjects, reason, msg string) {
	ref := g.ref()
	cfg, err := gatewayconfig.Build(gatewayconfig.Input{Kind: g.kind, Namespace: ref.Namespace, Name: ref.Name, Spec: g.spec, Status: g.status,
		WireGuard: g.wg, InternalSources: r.internalSources(g), UntrustedSources: r.untrustedSources(g),
		ServiceCIDRPool: r.Config.ServiceCIDRPool, ExposureTargetCIDRs: r.Config.ExposureTargetCIDRs})
	switch {
	case errors.Is(err, gatewayconfig.ErrIncomplete):
		return objs, v1alpha1.ReasonWorkloadPending, err.Error()
	case err != nil:
		return objs, v1alpha1.ReasonWorkloadFailed, err.Error()
	}
	if objs.configMap, err = render.ConfigMap(ref, cfg); err != nil {
		return objs, v1alpha1.ReasonWorkloadFailed, err.Error()
	}
	objs.nad, err = render.NAD(ref, r.Config.NADTemplate, render.NADInput{
		MACAddress: g.status.PortMACAddress, FixedIP: g.status.PortFixedIP,
		SubnetCIDR: g.status.SubnetCIDR, SubnetGatewayIP: g.status.SubnetGatewayIP,
	})
	if err != nil {
		return objs, v1alpha1.ReasonWorkloadFailed, err.Error()
	}
	wl := render.Workload{
		Gateway: ref, NodeName: g.status.NodeName, PortMAC: g.status.PortMACAddress,
		GatewayImage: r.Config.GatewayImage, AgentImage: r.Config.AgentImage, WireGuardImage: r.Config.WireGuardImage,
		Dataplane: gatewayconfig.DataplaneMode(r.Config.GatewayDataplane),
		Pod:       r.Config.GatewayPod,
		// The pod renews its liveness Lease every third of the timeout.
		LivenessInterval: r.Config.GatewayLivenessTimeout / 3,
	}
	deployment := render.Deployment
	if g.wg != nil {
		deployment = render.WireGuardDeployment
	}
	if objs.deployment, err = deployment(wl); err != nil {
		return objs, v1alpha1.ReasonWorkloadFailed, err.Error()
	}
	return objs, "", ""
}

// applyWorkload writes the gateway's objects in order. The pod's RBAC goes first: a
// tunnel added to a running gateway names its Secret in the Role before the ConfigMap
// names the tunnel, so the agent can read the key the moment it learns of the tunnel.
func (r *Reconciler) applyWorkload(ctx context.Context, g *gateway, objs workloadObjects, secrets []string) error {
	ref := g.ref()
	steps := []func() error{
		func() error { return r.applyServiceAccount(ctx, render.ServiceAccount(ref)) },
		func() error { return r.applyRole(ctx, render.Role(ref, v1alpha1.GroupVersion.Group, secrets...)) },
		func() error { return r.applyRoleBinding(ctx, render.RoleBinding(ref)) },
		func() error { return r.applyConfigMap(ctx, objs.configMap) },
		func() error { return r.applyLivenessLease(ctx, ref) },
		func() error { return r.deleteLegacySecret(ctx, ref) },
		func() error { return r.applyNAD(ctx, objs.nad) },
		func() error { return r.applyDeployment(ctx, g, objs.deployment) },
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
			return err
		}
	}
	return nil
}

// checkPSKs reads each tunnel's Secret around the cache (the operator caches no
// Secret) and checks its key is there and long enough. The reason and message name the
// Secret and key, never the value or its length. seen holds the resourceVersion read of
// each Secret ("" for one not found).
func (r *Reconciler) checkPSKs(ctx context.Context, g *gateway) (reason, msg string, seen map[types.NamespacedName]string, err error) {
	ns := g.obj.GetNamespace()
	seen = map[types.NamespacedName]string{}
	var missing, short []string
	for _, t := range g.spec.Tunnels {
		key := t.PreSharedKey.Key
		if key == "" {
			key = gatewayconfig.DefaultPSKKey
		}
		var s corev1.Secret
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: t.PreSharedKey.Name}, &s)
		switch {
		case apierrors.IsNotFound(err):
			seen[types.NamespacedName{Namespace: ns, Name: t.PreSharedKey.Name}] = ""
			missing = append(missing, fmt.Sprintf("tunnel %s: Secret %s/%s not found", t.Name, ns, t.PreSharedKey.Name))
			continue
		case err != nil:
			return "", "", nil, err
		}
		seen[types.NamespacedName{Namespace: ns, Name: t.PreSharedKey.Name}] = s.ResourceVersion
		v, ok := s.Data[key]
		if !ok || len(v) == 0 {
			missing = append(missing, fmt.Sprintf("tunnel %s: Secret %s/%s has no key %q", t.Name, ns, t.PreSharedKey.Name, key))
			continue
		}
		if why := gatewayconfig.CheckPSK(v); why != "" {
			short = append(short, fmt.Sprintf("tunnel %s: the pre-shared key in Secret %s/%s key %q %s", t.Name, ns, t.PreSharedKey.Name, key, why))
		}
	}
	const tail = "; the gateway pod does not start such a tunnel, and picks the key up as soon as it is there"
	switch {
	case len(missing) > 0:
		return v1alpha1.ReasonPSKSecretMissing, strings.Join(append(missing, short...), "; ") + tail, seen, nil
	case len(short) > 0:
		return v1alpha1.ReasonPSKTooShort, strings.Join(short, "; ") + tail, seen, nil
	}
	return "", "", seen, nil
}

// deleteLegacySecret removes the Secret of rendered keys earlier releases wrote (the
// pod reads the tenant's Secrets itself now), once per gateway and process, and only
// when it is this gateway's.
func (r *Reconciler) deleteLegacySecret(ctx context.Context, ref render.Gateway) error {
	r.legacyMu.Lock()
	done := r.legacyDone[ref.UID]
	r.legacyMu.Unlock()
	if done {
		return nil
	}
	var s corev1.Secret
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: render.LegacySecretName(ref.Name)}, &s)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	case metav1.IsControlledBy(&s, &metav1.ObjectMeta{UID: ref.UID}):
		if err := r.Client.Delete(ctx, &s, client.Preconditions{UID: &s.UID}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	r.legacyMu.Lock()
	r.legacyDone[ref.UID] = true
	r.legacyMu.Unlock()
	return nil
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

// readOrCreate reads the object named like desired into live, or creates desired when
// there is none (created true). The cache holds only objects labelled as the operator's
// (CacheScope), so an object under that name without the label (another controller's, or
// ours with the label taken off) is read past the cache when the create finds it, and
// judged like any other: refused when another controller owns it, its labels put back
// when it is ours. So is one the cache has not caught up with yet.
func (r *Reconciler) readOrCreate(ctx context.Context, desired, live client.Object) (created bool, err error) {
	key := client.ObjectKeyFromObject(desired)
	err = r.Client.Get(ctx, key, live)
	if !apierrors.IsNotFound(err) {
		return false, err
	}
	err = r.Client.Create(ctx, desired)
	if !apierrors.IsAlreadyExists(err) {
		return err == nil, err
	}
	return false, r.apiReader().Get(ctx, key, live)
}

// apply creates desired, or updates live with mutate when the owned fields differ.
func (r *Reconciler) apply(ctx context.Context, desired, live client.Object, bodySame func() bool, mutate func()) error {
	if created, err := r.readOrCreate(ctx, desired, live); created || err != nil {
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

// applyLivenessLease creates the gateway's liveness Lease (the pod may renew it, not
// create it) and keeps its duration; the renewals are the pod's. With the detection off
// the Lease is removed.
func (r *Reconciler) applyLivenessLease(ctx context.Context, ref render.Gateway) error {
	if r.Config.GatewayLivenessTimeout <= 0 {
		live := &coordinationv1.Lease{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: render.LivenessLeaseName(ref.Name)}, live)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if c := metav1.GetControllerOf(live); c == nil || c.UID != ref.UID {
			return nil // not ours
		}
		return client.IgnoreNotFound(r.Client.Delete(ctx, live))
	}
	d := render.LivenessLease(ref, r.Config.GatewayLivenessTimeout)
	live := &coordinationv1.Lease{}
	return r.apply(ctx, d, live,
		func() bool {
			return live.Spec.LeaseDurationSeconds != nil && *live.Spec.LeaseDurationSeconds == *d.Spec.LeaseDurationSeconds
		},
		func() { live.Spec.LeaseDurationSeconds = d.Spec.LeaseDurationSeconds })
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

// applyDeployment converges the Deployment and reverts drift. The rendering carries its
// hash (render.AnnotationRendering); the live spec is compared, whole, with the rendering
// as the API server stores it, defaults filled in (a server-side dry run of the update,
// remembered per gateway while the rendering stays the same). Any difference is written
// back: with the rendering's hash on the live Deployment it was made by someone else, and
// the revert is reported (Event SecurityDriftReverted, naming the fields); with another
// hash (or none) it is the operator's own new rendering (image, node, pod shape), logged
// only. The pod template's extra labels and annotations are tolerated (render.DeploymentDrift).
func (r *Reconciler) applyDeployment(ctx context.Context, g *gateway, d *appsv1.Deployment) error {
	hash, err := render.StampRendering(d)
	if err != nil {
		return err
	}
	live := &appsv1.Deployment{}
	uid := g.obj.GetUID()
	if created, err := r.readOrCreate(ctx, d, live); err != nil {
		return err
	} else if created {
		// The API server answers with the spec as it stores it: this generation is the
		// rendering's stored form, and the next pass needs no dry run to know it.
		r.rememberMatched(uid, hash, d)
		return nil
	}
	if live, err = r.toCompare(ctx, uid, hash, live); err != nil {
		return err
	}
	metaSame, err := ownedMeta(d, live)
	if err != nil {
		return fmt.Errorf("%T %s: %w", d, d.Name, err)
	}
	stored, drift, err := r.deploymentDrift(ctx, uid, hash, d, live)
	if err != nil {
		return err
	}
	ours := live.Annotations[render.AnnotationRendering] == hash
	if !ours && len(drift) > 0 {
		// A new rendering of the operator's: its restart of the pod may have to wait.
		if wait, err := r.paceRestart(ctx, g, live, stored, drift); wait || err != nil {
			return err
		}
	} else {
		r.gate.Withdraw(uid)
		r.forgetWaiting(uid)
	}
	if metaSame && ours && len(drift) == 0 {
		return nil
	}
	mergeMeta(d, live)
	setDeploymentSpec(live, d)
	if live.Annotations == nil {
		live.Annotations = map[string]string{}
	}
	live.Annotations[render.AnnotationRendering] = hash
	if err := r.Client.Update(ctx, live); err != nil {
		return err
	}
	r.rememberMatched(uid, hash, live)
	log := logr.FromContextOrDiscard(ctx)
	switch {
	case len(drift) == 0:
	case ours:
		log.Info("reverted a change to the gateway Deployment", "deployment", d.Name, "fields", drift)
		r.event(g, metav1.ConditionFalse, "SecurityDriftReverted", "Deployment %s: reverted a change to %s", d.Name, fieldList(drift))
	default:
		log.Info("applied a new rendering of the gateway Deployment", "deployment", d.Name, "fields", drift)
	}
	return nil
}

// toCompare is the live Deployment as the comparison with the rendering needs it: the
// cached one while it is unchanged since the operator last wrote or compared it (no
// comparison follows), else read whole, as the cache does not keep the pod template.
func (r *Reconciler) toCompare(ctx context.Context, uid types.UID, hash string, cached *appsv1.Deployment) (*appsv1.Deployment, error) {
	if r.matches(uid, hash, cached) {
		return cached, nil
	}
	return r.wholeDeployment(ctx, cached)
}

// wholeDeployment reads the Deployment the cache holds as cached (without its pod
// template: withoutPodTemplate) whole, from the API server.
func (r *Reconciler) wholeDeployment(ctx context.Context, cached *appsv1.Deployment) (*appsv1.Deployment, error) {
	whole := &appsv1.Deployment{}
	if err := r.apiReader().Get(ctx, client.ObjectKeyFromObject(cached), whole); err != nil {
		return nil, fmt.Errorf("reading Deployment %s: %w", cached.Name, err)
	}
	return whole, nil
}

// deploymentDrift is the spec the API server stores for the rendering d (its defaults
// applied) and the fields in which the live Deployment differs from it.
func (r *Reconciler) deploymentDrift(ctx context.Context, uid types.UID, hash string, d, live *appsv1.Deployment) (appsv1.DeploymentSpec, []string, error) {
	if r.matches(uid, hash, live) {
		// The same object, unchanged since it was written or found equal to the stored
		// form of this rendering: any change to its spec would have moved its generation
		// (and one deleted and made again by someone else has another UID).
		return appsv1.DeploymentSpec{}, nil, nil
	}
	stored, cached, err := r.storedSpec(ctx, uid, hash, d, live, false)
	if err != nil {
		return stored, nil, err
	}
	drift := render.DeploymentDrift(stored, live.Spec)
	if len(drift) > 0 && cached {
		// The API server's defaults may have changed since the dry run (an upgrade): ask
		// again before taking the difference for drift, or its defaults are fought forever.
		if stored, _, err = r.storedSpec(ctx, uid, hash, d, live, true); err != nil {
			return stored, nil, err
		}
		drift = render.DeploymentDrift(stored, live.Spec)
	}
	if len(drift) == 0 {
		r.rememberMatched(uid, hash, live)
	}
	return stored, drift, nil
}

// storedRendering is what the reconciler remembers of a gateway's Deployment for the
// rendering hash: the generation of the live Deployment written as, or found equal to,
// the rendering's stored form; or, while none is (a restart waiting for its turn), the
// stored form itself. Only the generation is kept once one matched: a converged estate
// holds no second copy of every pod spec beside the informer's.
type storedRendering struct {
	hash string
	// the live Deployment (its UID and generation) that matched; generation 0: none yet
	object     types.UID
	generation int64
	spec       *appsv1.DeploymentSpec // kept only while generation is 0
}

func (r *Reconciler) matches(uid types.UID, hash string, live *appsv1.Deployment) bool {
	r.storedMu.Lock()
	defer r.storedMu.Unlock()
	s, ok := r.stored[uid]
	return ok && s.hash == hash && s.generation != 0 && s.object == live.UID && s.generation == live.Generation
}

func (r *Reconciler) rememberMatched(uid types.UID, hash string, live *appsv1.Deployment) {
	r.storedMu.Lock()
	r.stored[uid] = storedRendering{hash: hash, object: live.UID, generation: live.Generation}
	r.storedMu.Unlock()
}

// storedSpec returns d's spec as the API server stores it, and whether it was
// remembered: from memory while the rendering's hash is the same (unless refresh),
// otherwise from a server-side dry run of the update of live to d. A dry run runs the
// API server's defaulting and mutating admission and writes nothing.
func (r *Reconciler) storedSpec(ctx context.Context, uid types.UID, hash string, d, live *appsv1.Deployment, refresh bool) (appsv1.DeploymentSpec, bool, error) {
	if !refresh {
		r.storedMu.Lock()
		s, ok := r.stored[uid]
		r.storedMu.Unlock()
		if ok && s.hash == hash && s.spec != nil {
			return *s.spec, true, nil
		}
	}
	probe := live.DeepCopy()
	mergeMeta(d, probe)
	setDeploymentSpec(probe, d)
	// Unconditional (a Deployment allows it): a cache a step behind the API server does
	// not fail the dry run.
	probe.ResourceVersion = ""
	if err := r.Client.Update(ctx, probe, client.DryRunAll); err != nil {
		return appsv1.DeploymentSpec{}, false, fmt.Errorf("Deployment %s: dry run of the rendering: %w", d.Name, err)
	}
	r.rememberStored(uid, hash, &probe.Spec)
	return probe.Spec, false, nil
}

func (r *Reconciler) rememberStored(uid types.UID, hash string, spec *appsv1.DeploymentSpec) {
	r.storedMu.Lock()
	r.stored[uid] = storedRendering{hash: hash, spec: spec.DeepCopy()}
	r.storedMu.Unlock()
}

func (r *Reconciler) forgetStored(uid types.UID) {
	r.storedMu.Lock()
	delete(r.stored, uid)
	r.storedMu.Unlock()
}

// setDeploymentSpec gives live a copy of d's spec, keeping live's selector: it is
// immutable and derived from the gateway's identity only.
func setDeploymentSpec(live, d *appsv1.Deployment) {
	sel := live.Spec.Selector
	live.Spec = *d.Spec.DeepCopy()
	if sel != nil {
		live.Spec.Selector = sel
	}
}

// fieldList names at most ten drifted fields; an Event stays short.
func fieldList(fields []string) string {
	const most = 10
	if len(fields) <= most {
		return strings.Join(fields, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(fields[:most], ", "), len(fields)-most)
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
