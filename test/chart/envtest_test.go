package chart

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/releaseutil"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// requireEnvtest, set to 1, turns missing control-plane binaries into a failure; the
// project's test command sets it so that CI cannot pass by skipping.
const requireEnvtest = "BNERD_REQUIRE_ENVTEST"

// controlPlaneDir finds kube-apiserver and etcd: $KUBEBUILDER_ASSETS, else the cache the
// repository's hack/controlplane.sh fills, asked only for its path (it builds nothing).
func controlPlaneDir() (string, string) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		out, err := exec.Command("bash", fromRoot("hack", "controlplane.sh"), "--print-dir").Output()
		if err != nil {
			return "", "hack/controlplane.sh --print-dir failed: " + err.Error()
		}
		dir = strings.TrimSpace(string(out))
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", b + " not found in " + dir + ": run `make controlplane` (or set KUBEBUILDER_ASSETS)"
		}
	}
	return dir, ""
}

// startControlPlane starts the project's API server and etcd for one test and stops them
// at its end; without a control plane the test skips, or fails where one is required.
func startControlPlane(t *testing.T) *rest.Config {
	t.Helper()
	dir, why := controlPlaneDir()
	if dir == "" {
		if os.Getenv(requireEnvtest) == "1" {
			t.Fatalf("%s=1 but no control plane: %s", requireEnvtest, why)
		}
		t.Skip("no control plane: " + why)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: dir}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting the control plane from %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	return cfg
}

// The rendered chart is accepted by a real API server with strict field validation, and
// the RBAC it creates gives the operator's ServiceAccount what it needs and no more than
// the Roles say.
func TestInstallOnAPIServer(t *testing.T) {
	cfg := startControlPlane(t)
	objs := mustRender(t, requiredValues()).objs
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	// What `helm install --namespace vpn-system --create-namespace` does first.
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNS}}); err != nil {
		t.Fatal(err)
	}
	// Helm applies crds/ first, then templates in its kind order.
	rank := map[string]int{"CustomResourceDefinition": -1}
	for i, k := range releaseutil.InstallOrder {
		if _, ok := rank[k]; !ok {
			rank[k] = i
		}
	}
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		ra, ok := rank[a.GetKind()]
		if !ok {
			ra = len(releaseutil.InstallOrder)
		}
		rb, ok := rank[b.GetKind()]
		if !ok {
			rb = len(releaseutil.InstallOrder)
		}
		return ra - rb
	})
	for _, o := range objs {
		// A server-side dry run first: it reports an unknown or misplaced field without
		// leaving anything behind, then the create makes the object real for the RBAC checks.
		if err := c.Create(ctx, o.DeepCopy(), client.DryRunAll, client.FieldValidation("Strict")); err != nil {
			t.Fatalf("dry-run create of %s %s/%s refused: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
		if err := c.Create(ctx, o, client.FieldValidation("Strict")); err != nil {
			t.Fatalf("create of %s %s/%s refused: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}

	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		name := o.GetName()
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := c.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
				return false, err
			}
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.NamesAccepted && cond.Status == apiextensionsv1.ConditionFalse {
					t.Errorf("CRD %s: names not accepted: %s", name, cond.Message)
					return true, nil
				}
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Errorf("CRD %s never became Established: %v", name, err)
		}
	}

	// The chart's default tenant policy, once its CRD is established: the API server
	// admits it as rendered (its schema and CEL rules).
	for _, o := range mustRender(t, with(with(requiredValues(), "tenantPolicy.createDefault", true),
		"tenantPolicy.default", map[string]any{"exposureTargets": []any{"10.250.0.0/16"}, "limits": map[string]any{"gateways": 5}})).objs {
		if o.GetKind() != "VPNTenantPolicy" {
			continue
		}
		if err := c.Create(ctx, o, client.FieldValidation("Strict")); err != nil {
			t.Fatalf("the default VPNTenantPolicy was refused: %v", err)
		}
	}

	sa := "system:serviceaccount:" + releaseNS + ":" + fullname
	const creds = "bnerd-vpn-clusterlinks"
	can := func(verb, group, resource, sub, ns string) bool {
		t.Helper()
		sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User:   sa,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNS, "system:authenticated"},
			ResourceAttributes: &authzv1.ResourceAttributes{
				Verb: verb, Group: group, Resource: resource, Subresource: sub, Namespace: ns,
			},
		}}
		if err := c.Create(ctx, sar); err != nil {
			t.Fatalf("SubjectAccessReview: %v", err)
		}
		return sar.Status.Allowed
	}
	type check struct {
		verb, group, resource, sub, ns string
		want                           bool
	}
	run := func(stage string, checks []check) {
		t.Helper()
		for _, ck := range checks {
			if got := can(ck.verb, ck.group, ck.resource, ck.sub, ck.ns); got != ck.want {
				t.Errorf("%s: %s may %s %s: %v, want %v", stage, sa, ck.verb, describe(ck.group, ck.resource, ck.sub, ck.ns), got, ck.want)
			}
		}
	}
	run("with the ClusterRole", []check{
		{"create", "apps", "deployments", "", "tenant-a", true},
		{"patch", "ipsec.bnerd.net", "ipsecgateways", "status", "tenant-a", true},
		{"update", "ipsec.bnerd.net", "clusterlinks", "finalizers", "", true},
		{"create", "k8s.cni.cncf.io", "network-attachment-definitions", "", "tenant-a", true},
		{"get", "", "secrets", "", "tenant-a", true},
		{"get", "", "configmaps", "", "kube-system", true},
		{"get", "", "secrets", "", creds, true},
		{"create", "coordination.k8s.io", "leases", "", releaseNS, true},
		// Tenant policies are read and their status written; the policies themselves are
		// the platform admins' to write.
		{"list", "ipsec.bnerd.net", "vpntenantpolicies", "", "", true},
		{"update", "ipsec.bnerd.net", "vpntenantpolicies", "status", "", true},
		{"create", "ipsec.bnerd.net", "vpntenantpolicies", "", "", false},
		{"update", "ipsec.bnerd.net", "vpntenantpolicies", "", "", false},
		// RBAC really decides: what nobody granted is refused.
		{"delete", "", "nodes", "", "", false},
		{"create", "ipsec.bnerd.net", "ipsecgateways", "", "tenant-a", false},
		// The only Secret the operator writes is a WireGuard gateway's key (create, and
		// update on rotation); no patch, no bulk delete. Leases in a tenant's namespace:
		// the gateways' liveness Leases (created, read, removed; update only because the
		// gateway pod's Role grants it), never patched or deleted in bulk.
		{"create", "", "secrets", "", "tenant-a", true},
		{"update", "", "secrets", "", "tenant-a", true},
		{"patch", "", "secrets", "", "tenant-a", false},
		{"deletecollection", "", "secrets", "", "tenant-a", false},
		{"create", "coordination.k8s.io", "leases", "", "tenant-a", true},
		{"patch", "coordination.k8s.io", "leases", "", "tenant-a", false},
		{"deletecollection", "coordination.k8s.io", "leases", "", "tenant-a", false},
		// The metrics filter's reviews (--metrics-secure).
		{"create", "authentication.k8s.io", "tokenreviews", "", "", true},
		{"create", "authorization.k8s.io", "subjectaccessreviews", "", "", true},
		// Narrowed to the verbs the code uses: gateways are patched (finalizer), never
		// updated, and so are ClusterLinks; status written by apply (patch).
		{"patch", "ipsec.bnerd.net", "ipsecgateways", "", "tenant-a", true},
		{"update", "ipsec.bnerd.net", "ipsecgateways", "", "tenant-a", false},
		{"update", "ipsec.bnerd.net", "vpngateways", "", "tenant-a", false},
		{"patch", "ipsec.bnerd.net", "clusterlinks", "", "", true},
		{"update", "ipsec.bnerd.net", "clusterlinks", "", "", false},
		{"patch", "ipsec.bnerd.net", "ipsecgateways", "status", "tenant-a", true},
		{"update", "ipsec.bnerd.net", "ipsecgateways", "status", "tenant-a", false},
		{"patch", "ipsec.bnerd.net", "clusterlinks", "status", "", true},
		{"update", "ipsec.bnerd.net", "clusterlinks", "status", "", false},
		{"get", "ipsec.bnerd.net", "clusterlinks", "status", "", false},
		{"update", "ipsec.bnerd.net", "vpntenantpolicies", "status", "", true},
		{"patch", "ipsec.bnerd.net", "vpntenantpolicies", "status", "", false},
	})

	// The metrics-reader ClusterRole, bound to a Prometheus ServiceAccount, lets it get
	// /metrics; the operator's own ServiceAccount and an unbound one may not.
	canGetMetrics := func(user, ns string) bool {
		t.Helper()
		sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User:                  user,
			Groups:                []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			NonResourceAttributes: &authzv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
		}}
		if err := c.Create(ctx, sar); err != nil {
			t.Fatalf("SubjectAccessReview: %v", err)
		}
		return sar.Status.Allowed
	}
	prom := &unstructured.Unstructured{}
	prom.SetAPIVersion("rbac.authorization.k8s.io/v1")
	prom.SetKind("ClusterRoleBinding")
	prom.SetName("prometheus-reads-the-operator")
	prom.Object["roleRef"] = map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": fullname + "-metrics-reader"}
	prom.Object["subjects"] = []any{map[string]any{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}}
	if err := c.Create(ctx, prom); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return canGetMetrics("system:serviceaccount:monitoring:prometheus", "monitoring"), nil
	})
	if err != nil {
		t.Errorf("a ServiceAccount bound to %s-metrics-reader may not get /metrics: %v", fullname, err)
	}
	if canGetMetrics("system:serviceaccount:monitoring:other", "monitoring") {
		t.Error("an unbound ServiceAccount may get /metrics")
	}
	if canGetMetrics(sa, releaseNS) {
		t.Error("the operator's own ServiceAccount may get /metrics")
	}

	// Without the cluster-wide grant, the two namespaced Roles must stand on their own.
	crb := &unstructured.Unstructured{}
	crb.SetAPIVersion("rbac.authorization.k8s.io/v1")
	crb.SetKind("ClusterRoleBinding")
	crb.SetName(fullname)
	if err := c.Delete(ctx, crb); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return !can("create", "apps", "deployments", "", "tenant-a"), nil
	})
	if err != nil {
		t.Fatalf("the ClusterRoleBinding's deletion never took effect: %v", err)
	}
	run("namespaced Roles only", []check{
		{"get", "", "secrets", "", creds, true},
		{"list", "", "secrets", "", creds, true},
		{"watch", "", "secrets", "", creds, true},
		{"get", "", "secrets", "", "tenant-a", false},
		{"get", "", "secrets", "", releaseNS, false},
		{"create", "coordination.k8s.io", "leases", "", releaseNS, true},
		{"update", "coordination.k8s.io", "leases", "", releaseNS, true},
		{"create", "coordination.k8s.io", "leases", "", "tenant-a", false},
	})
}

func describe(group, resource, sub, ns string) string {
	r := resource
	if group != "" {
		r += "." + group
	}
	if sub != "" {
		r += "/" + sub
	}
	if ns != "" {
		r += " in namespace " + ns
	}
	return r
}
