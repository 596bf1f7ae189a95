package render

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// DeploymentDrift compares whole containers and the whole pod: each kind of change a
// holder of update on the Deployment could make is found and named, down to the
// container and field; the rendering compared with itself has none.
func TestDeploymentDrift(t *testing.T) {
	for _, mk := range []struct {
		name  string
		build func(Workload) (*appsv1.Deployment, error)
	}{{"ipsec", Deployment}, {"wireguard", WireGuardDeployment}} {
		w := workload()
		w.WireGuardImage = "example.org/wireguard:1"
		d, err := mk.build(w)
		if err != nil {
			t.Fatal(err)
		}
		if got := DeploymentDrift(d.Spec, *d.Spec.DeepCopy()); len(got) != 0 {
			t.Fatalf("%s: drift in an identical spec: %v", mk.name, got)
		}
	}
	d, err := Deployment(workload())
	if err != nil {
		t.Fatal(err)
	}
	yes, root, two := true, int64(0), int32(2)
	charon := "containers[" + ContainerStrongswan + "]"
	status := "containers[" + ContainerStatus + "]"
	exporter := "containers[" + ContainerExporter + "]"
	execProbe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "id"}}}}
	for _, tc := range []struct {
		name, field string
		mutate      func(s *appsv1.DeploymentSpec, ps *corev1.PodSpec)
	}{
		{"postStart exec hook", charon + ".lifecycle", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) {
			ps.Containers[1].Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "curl x | sh"}}}}
		}},
		{"preStop hook", status + ".lifecycle", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) {
			ps.Containers[2].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
		}},
		{"liveness exec probe", charon + ".livenessProbe", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) { ps.Containers[1].LivenessProbe = execProbe }},
		{"readiness exec probe", charon + ".readinessProbe", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) { ps.Containers[1].ReadinessProbe = execProbe }},
		{"startup exec probe", charon + ".startupProbe", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) { ps.Containers[1].StartupProbe = execProbe }},
		{"a port", charon + ".ports", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) {
			ps.Containers[1].Ports = []corev1.ContainerPort{{ContainerPort: 4500, HostPort: 4500, Protocol: corev1.ProtocolUDP}}
		}},
		{"the exporter's hostPort", exporter + ".ports", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) { ps.Containers[3].Ports[0].HostPort = 9903 }},
		{"workingDir", status + ".workingDir", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) { ps.Containers[2].WorkingDir = "/var/run/charon" }},
		{"stdin", charon + ".stdin", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) { ps.Containers[1].Stdin = true }},
		{"tty", charon + ".tty", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) { ps.Containers[1].TTY = true }},
		{"an extra env var", status + ".env", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) {
			ps.Containers[2].Env = append(ps.Containers[2].Env, corev1.EnvVar{Name: "LD_PRELOAD", Value: "/tmp/x.so"})
		}},
		{"an extra volume mount", charon + ".volumeMounts", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) {
			ps.Containers[1].VolumeMounts = append(ps.Containers[1].VolumeMounts, ps.Containers[2].VolumeMounts[2])
		}},
		{"privileged", charon + ".securityContext", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) { ps.Containers[1].SecurityContext.Privileged = &yes }},
		{"a capability", status + ".securityContext", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) {
			ps.Containers[2].SecurityContext.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"}
		}},
		{"runAsUser root", exporter + ".securityContext", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) { ps.Containers[3].SecurityContext.RunAsUser = &root }},
		{"command", charon + ".command", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) { ps.Containers[1].Command = []string{"/bin/sh"} }},
		{"args", status + ".args", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) { ps.Containers[2].Args = ps.Containers[2].Args[:1] }},
		{"image", charon + ".image", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) { ps.Containers[1].Image = "evil/strongswan" }},
		{"imagePullPolicy", charon + ".imagePullPolicy", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) {
			ps.Containers[1].ImagePullPolicy = corev1.PullNever
		}},
		{"envFrom", exporter + ".envFrom", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) {
			ps.Containers[3].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "other"}}}}
		}},
		{"resources", charon + ".resources", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) {
			ps.Containers[1].Resources = corev1.ResourceRequirements{}
		}},
		{"a sidecar", "containers[debug] added", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) {
			ps.Containers = append(ps.Containers, corev1.Container{Name: "debug", Image: "busybox"})
		}},
		{"a container removed", "containers[" + ContainerExporter + "] removed", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) { ps.Containers = ps.Containers[:3] }},
		{"containers reordered", "containers order", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) {
			ps.Containers[0], ps.Containers[1] = ps.Containers[1], ps.Containers[0]
		}},
		{"an init container", "initContainers[init] added", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) {
			ps.InitContainers = []corev1.Container{{Name: "init", Image: "x"}}
		}},
		{"hostNetwork", "hostNetwork", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) { ps.HostNetwork = true }},
		{"hostPID", "hostPID", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) { ps.HostPID = true }},
		{"serviceAccountName", "serviceAccountName", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) { ps.ServiceAccountName = "operator" }},
		{"token automounted", "automountServiceAccountToken", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) { ps.AutomountServiceAccountToken = &yes }},
		{"pod securityContext", "securityContext", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) { ps.SecurityContext = nil }},
		{"a host path volume", "volumes", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) {
			ps.Volumes = append(ps.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		}},
		{"runtimeClassName", "runtimeClassName", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) { rc := "unconfined"; ps.RuntimeClassName = &rc }},
		{"nodeName", "nodeName", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) { ps.NodeName = "node-b" }},
		{"a host alias", "hostAliases", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) {
			ps.HostAliases = []corev1.HostAlias{{IP: "192.0.2.1", Hostnames: []string{"keystone"}}}
		}},
		{"dnsConfig", "dnsConfig", func(_ *appsv1.DeploymentSpec, ps *corev1.PodSpec) {
			ps.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"192.0.2.53"}}
		}},
		{"replicas", "replicas", func(s *appsv1.DeploymentSpec, _ *corev1.PodSpec) { s.Replicas = &two }},
		{"strategy", "strategy", func(s *appsv1.DeploymentSpec, _ *corev1.PodSpec) {
			s.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType}
		}},
		{"paused", "paused", func(s *appsv1.DeploymentSpec, _ *corev1.PodSpec) { s.Paused = true }},
		{"a rendered template label changed", "template labels[" + LabelGateway + "]", func(s *appsv1.DeploymentSpec, _ *corev1.PodSpec) {
			s.Template.Labels[LabelGateway] = "other"
		}},
		{"the Multus annotation removed", "template annotations[" + AnnotationNetworks + "]", func(s *appsv1.DeploymentSpec, _ *corev1.PodSpec) {
			delete(s.Template.Annotations, AnnotationNetworks)
		}},
		{"an AppArmor annotation", "template annotations[container.apparmor.security.beta.kubernetes.io/strongswan] added", func(s *appsv1.DeploymentSpec, _ *corev1.PodSpec) {
			s.Template.Annotations["container.apparmor.security.beta.kubernetes.io/strongswan"] = "unconfined"
		}},
	} {
		live := *d.Spec.DeepCopy()
		tc.mutate(&live, &live.Template.Spec)
		got := DeploymentDrift(d.Spec, live)
		if !slices.Contains(got, tc.field) {
			t.Errorf("%s: drift %v does not name %s", tc.name, got, tc.field)
		}
		// Nothing else is blamed: the field alone (a reorder names the order only).
		if len(got) > 1 {
			t.Errorf("%s: drift %v names more than %s", tc.name, got, tc.field)
		}
	}

	// A hook in an init container is found there.
	withInit := *d.Spec.DeepCopy()
	withInit.Template.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "x"}}
	live := *withInit.DeepCopy()
	live.Template.Spec.InitContainers[0].WorkingDir = "/"
	if got := DeploymentDrift(withInit, live); !slices.Equal(got, []string{"initContainers[setup].workingDir"}) {
		t.Errorf("init container drift %v", got)
	}

	// What is no drift: nil and empty lists (the API server stores neither), and other
	// tools' additions to the template's labels and annotations (a rollout restart).
	live = *d.Spec.DeepCopy()
	live.Template.Spec.Containers[1].Env = []corev1.EnvVar{}
	live.Template.Spec.Tolerations = []corev1.Toleration{}
	live.Template.Annotations["kubectl.kubernetes.io/restartedAt"] = "2026-01-01T00:00:00Z"
	live.Template.Labels["example.com/team"] = "net"
	if got := DeploymentDrift(d.Spec, live); len(got) != 0 {
		t.Errorf("drift %v in what only differs in empty lists and added metadata", got)
	}

	// The comparison is against the stored form: a default the API server would add is
	// in stored, and its absence from live is drift (so is a changed default).
	stored := *d.Spec.DeepCopy()
	for i := range stored.Template.Spec.Containers {
		stored.Template.Spec.Containers[i].TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	stored.Template.Spec.Containers[3].Ports[0].Protocol = corev1.ProtocolTCP
	live = *stored.DeepCopy()
	if got := DeploymentDrift(stored, live); len(got) != 0 {
		t.Errorf("drift %v in the stored form itself", got)
	}
	live.Template.Spec.Containers[0].TerminationMessagePath = "/etc/shadow"
	if got := DeploymentDrift(stored, live); !slices.Equal(got, []string{"containers[" + ContainerInitNAT + "].terminationMessagePath"}) {
		t.Errorf("a changed default: drift %v", got)
	}
	live = *stored.DeepCopy()
	live.Template.Spec.Containers[3].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(9903)}}}
	if got := DeploymentDrift(stored, live); !slices.Equal(got, []string{exporter + ".readinessProbe"}) {
		t.Errorf("an HTTP probe: drift %v", got)
	}
}

// The rendering's hash follows the rendering: same input, same hash; any change of the
// spec (here the node and the pod shape's resources) another one. Stamping records it.
func TestRenderingHash(t *testing.T) {
	a, err := Deployment(workload())
	if err != nil {
		t.Fatal(err)
	}
	b, err := Deployment(workload())
	if err != nil {
		t.Fatal(err)
	}
	ha, err := StampRendering(a)
	if err != nil {
		t.Fatal(err)
	}
	hb, _ := RenderingHash(b)
	if ha != hb || a.Annotations[AnnotationRendering] != ha || len(ha) != 16 || strings.Trim(ha, "0123456789abcdef") != "" {
		t.Fatalf("hashes %q %q, annotation %q", ha, hb, a.Annotations[AnnotationRendering])
	}
	w := workload()
	w.NodeName = "node-b"
	c, _ := Deployment(w)
	if hc, _ := RenderingHash(c); hc == ha {
		t.Errorf("another node, same hash %s", hc)
	}
	b.Spec.Template.Spec.Containers[1].Resources = corev1.ResourceRequirements{}
	if hb, _ := RenderingHash(b); hb == ha {
		t.Errorf("other resources, same hash %s", hb)
	}
}
