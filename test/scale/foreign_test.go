//go:build measure

package scale

import (
	"context"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"bnerd.net/vpn-operator/test/harness"
)

// foreignNamespaces hold the other applications' workloads, 100 to a namespace.
func foreignNamespace(i int) string { return fmt.Sprintf("app-%03d", i/100) }

// createForeign fills the cluster with n workloads of other applications, as a provider's
// cluster holds beside the gateways: each a Deployment with a two-container pod, a
// ConfigMap of about 4 KiB, a ServiceAccount, a Role and a RoleBinding. None carries the
// operator's labels; they are what an operator caching these kinds cluster-wide would
// keep in memory.
func createForeign(t *testing.T, ctx context.Context, c client.Client, clients, n int) {
	t.Helper()
	for i := 0; i < n; i += 100 {
		must(t, harness.EnsureNamespace(ctx, c, foreignNamespace(i)))
	}
	config := strings.Repeat("key = value # a line of an application's configuration file\n", 64)
	one := int32(1)
	createAll(t, ctx, c, clients, 5*n, func(k int) client.Object {
		i := k / 5
		name := fmt.Sprintf("app-%05d", i)
		meta := metav1.ObjectMeta{Namespace: foreignNamespace(i), Name: name,
			Labels: map[string]string{"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "Helm"}}
		switch k % 5 {
		case 0:
			return &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"app.conf": config}}
		case 1:
			return &corev1.ServiceAccount{ObjectMeta: meta}
		case 2:
			return &rbacv1.Role{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, Verbs: []string{"get", "list", "watch"}}}}
		case 3:
			return &rbacv1.RoleBinding{ObjectMeta: meta, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: meta.Namespace}}}
		}
		container := func(cname string, port int32) corev1.Container {
			return corev1.Container{Name: cname, Image: "registry.example/" + cname + ":1.2.3",
				Args:  []string{"--config=/etc/app/app.conf", "--port=" + fmt.Sprint(port), "--log-level=info"},
				Env:   []corev1.EnvVar{{Name: "APP_NAME", Value: name}, {Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: port}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
					Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(port)}}},
				VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}}}
		}
		sel := map[string]string{"app.kubernetes.io/name": name}
		return &appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel}, Spec: corev1.PodSpec{ServiceAccountName: name,
				Containers: []corev1.Container{container("app", 8080), container("sidecar", 9090)},
				Volumes:    []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}}}}}}
	})
}
