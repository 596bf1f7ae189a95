package gateway

import (
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"bnerd.net/vpn-operator/internal/render"
)

// A new gateway's Deployment costs no dry run: the API server's answer to its creation
// is the spec as stored, remembered for the passes after it. (Before, the pass after the
// first asked for a dry run; on the real OpenStack that pass came only in the steady
// state once the creation of owned objects stopped waking the gateway.)
func TestNewDeploymentNeedsNoDryRun(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	dry := h.dryRuns.Load()
	h.start()
	h.create("fresh", spec(false))
	h.waitConverged("fresh")
	h.quiesce("fresh")
	writes := h.writes.Load()
	for range 2 {
		if err := h.reconcileOnce("fresh"); err != nil {
			t.Fatal(err)
		}
	}
	if n, w := h.dryRuns.Load()-dry, h.writes.Load()-writes; n != 0 || w != 0 {
		t.Fatalf("a new gateway's Deployment cost %d dry runs, and its converged passes %d writes; want none", n, w)
	}
}

// A Deployment deleted and made again by someone else, with the rendering's annotation,
// the gateway's owner reference and the generation the operator remembers (1), but a
// weaker container, is still compared and reverted: what the operator remembers of a
// converged Deployment names the object (its UID), not only its generation.
func TestRecreatedDeploymentReverted(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("again", spec(false))
	h.waitConverged("again")
	h.quiesce("again")
	key := client.ObjectKey{Namespace: h.ns, Name: render.DeploymentName("again")}
	var live appsv1.Deployment
	mustGet(t, h, key, &live)
	want := live.Spec.DeepCopy()
	forged := live.DeepCopy()
	forged.ResourceVersion, forged.UID, forged.CreationTimestamp, forged.ManagedFields = "", "", metav1.Time{}, nil
	forged.Status = appsv1.DeploymentStatus{}
	for i := range forged.Spec.Template.Spec.Containers {
		if c := &forged.Spec.Template.Spec.Containers[i]; c.Name == render.ContainerStatus {
			c.SecurityContext.Capabilities.Add = append(c.SecurityContext.Capabilities.Add, "SYS_ADMIN")
		}
	}
	if err := env.Client.Delete(h.ctx, &live); err != nil {
		t.Fatal(err)
	}
	// The operator may make its own in between: then the forged one is refused and
	// nothing needs reverting.
	if err := env.Client.Create(h.ctx, forged); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	eventually(t, "the forged Deployment reverted", func() (bool, string) {
		var d appsv1.Deployment
		if err := env.Client.Get(h.ctx, key, &d); err != nil {
			return false, err.Error()
		}
		if d.Generation == 1 && forged.UID != "" && d.UID == forged.UID {
			return false, "the forged Deployment is unchanged"
		}
		if drift := render.DeploymentDrift(*want, d.Spec); len(drift) != 0 {
			return false, fmt.Sprintf("differs in %v", drift)
		}
		return true, ""
	})
}

// L3: the drift revert covers whole containers. Each change the security review found
// tolerated (a postStart exec hook in the root NET_ADMIN container, an exec probe, a
// host port, a working directory, stdin and a tty), and an extra environment variable, an
// extra mount and a weaker security context, is made to the live Deployment on the real
// API server, reverted to the rendering as the API server stores it, and reported by an
// Event naming the container and field. Once converged again the operator writes
// nothing, not even after a restart, whose first look costs one dry run and no write.
func TestWholeContainerDriftReverted(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", testPSK)
	h.start()
	h.create("whole", spec(false))
	h.waitConverged("whole")
	key := client.ObjectKey{Namespace: h.ns, Name: render.DeploymentName("whole")}
	idx := func(ps *corev1.PodSpec, name string) *corev1.Container {
		for i := range ps.Containers {
			if ps.Containers[i].Name == name {
				return &ps.Containers[i]
			}
		}
		t.Fatalf("no container %s", name)
		return nil
	}
	charon := "containers[" + render.ContainerStrongswan + "]"
	status := "containers[" + render.ContainerStatus + "]"
	sysAdmin := corev1.Capability("SYS_ADMIN")
	for _, tc := range []struct {
		name   string
		fields []string
		mutate func(ps *corev1.PodSpec)
	}{
		{"postStart exec hook", []string{charon + ".lifecycle"}, func(ps *corev1.PodSpec) {
			idx(ps, render.ContainerStrongswan).Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{
				Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "ip xfrm state > /proc/1/fd/1"}}}}
		}},
		{"exec liveness probe", []string{charon + ".livenessProbe"}, func(ps *corev1.PodSpec) {
			idx(ps, render.ContainerStrongswan).LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
				Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "true"}}}}
		}},
		{"host port", []string{charon + ".ports"}, func(ps *corev1.PodSpec) {
			idx(ps, render.ContainerStrongswan).Ports = []corev1.ContainerPort{{ContainerPort: 500, HostPort: 500, Protocol: corev1.ProtocolUDP}}
		}},
		{"workingDir", []string{status + ".workingDir"}, func(ps *corev1.PodSpec) { idx(ps, render.ContainerStatus).WorkingDir = render.RunMountPath }},
		{"stdin and tty", []string{charon + ".stdin", charon + ".tty"}, func(ps *corev1.PodSpec) {
			c := idx(ps, render.ContainerStrongswan)
			c.Stdin, c.TTY = true, true
		}},
		{"extra env var", []string{status + ".env"}, func(ps *corev1.PodSpec) {
			c := idx(ps, render.ContainerStatus)
			c.Env = append(c.Env, corev1.EnvVar{Name: "LD_PRELOAD", Value: "/var/run/charon/x.so"})
		}},
		{"extra volume mount", []string{charon + ".volumeMounts"}, func(ps *corev1.PodSpec) {
			c := idx(ps, render.ContainerStrongswan)
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "api-access", MountPath: render.ServiceAccountMountPath, ReadOnly: true})
		}},
		{"capability added", []string{status + ".securityContext"}, func(ps *corev1.PodSpec) {
			c := idx(ps, render.ContainerStatus)
			c.SecurityContext.Capabilities.Add = append(c.SecurityContext.Capabilities.Add, sysAdmin)
		}},
	} {
		var d appsv1.Deployment
		mustGet(t, h, key, &d)
		want := d.Spec.DeepCopy()
		tc.mutate(&d.Spec.Template.Spec)
		if err := env.Client.Update(h.ctx, &d); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		eventually(t, tc.name+" reverted and reported", func() (bool, string) {
			var live appsv1.Deployment
			if err := env.Client.Get(h.ctx, key, &live); err != nil {
				return false, err.Error()
			}
			if drift := render.DeploymentDrift(*want, live.Spec); len(drift) != 0 {
				return false, fmt.Sprintf("still differs in %v", drift)
			}
			for _, e := range h.events.of(h.ns, "whole") {
				if !strings.Contains(e, "SecurityDriftReverted") {
					continue
				}
				named := true
				for _, f := range tc.fields {
					named = named && strings.Contains(e, f)
				}
				if named {
					return true, ""
				}
			}
			return false, fmt.Sprintf("no SecurityDriftReverted Event names %v", tc.fields)
		})
	}

	// Converged: further reconciles write nothing and ask for no dry run (the stored
	// form is remembered), and the Deployment stays at its generation.
	h.quiesce("whole")
	var dep appsv1.Deployment
	mustGet(t, h, key, &dep)
	writes, dry, gen, rv := h.writes.Load(), h.dryRuns.Load(), dep.Generation, dep.ResourceVersion
	for range 3 {
		if err := h.reconcileOnce("whole"); err != nil {
			t.Fatal(err)
		}
	}
	mustGet(t, h, key, &dep)
	if w, n := h.writes.Load()-writes, h.dryRuns.Load()-dry; w != 0 || n != 0 || dep.Generation != gen || dep.ResourceVersion != rv {
		t.Fatalf("a converged gateway cost %d writes and %d dry runs; the Deployment went from generation %d (%s) to %d (%s)",
			w, n, gen, rv, dep.Generation, dep.ResourceVersion)
	}

	// A restarted operator knows no stored form: its first look asks for a dry run and
	// takes the API server's defaults for no drift: the Deployment is not written.
	dry = h.dryRuns.Load()
	h.start()
	// quiesce alone can return before the new manager's first reconcile (the harness's
	// idle clock still holds the old manager's last one): wait for the dry run itself.
	eventually(t, "a dry run after the restart (the live Deployment compared with the stored form of its rendering)", func() (bool, string) {
		return h.dryRuns.Load() > dry, "no dry run yet"
	})
	h.quiesce("whole")
	writes, dry = h.writes.Load(), h.dryRuns.Load()
	for range 2 {
		if err := h.reconcileOnce("whole"); err != nil {
			t.Fatal(err)
		}
	}
	mustGet(t, h, key, &dep)
	if w, n := h.writes.Load()-writes, h.dryRuns.Load()-dry; w != 0 || n != 0 || dep.ResourceVersion != rv {
		t.Fatalf("after a restart a converged gateway cost %d writes and %d dry runs; Deployment %s, was %s", w, n, dep.ResourceVersion, rv)
	}
}
