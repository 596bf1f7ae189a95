package chart

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

const (
	repoRoot       = "../.."
	releaseName    = "vpn"
	releaseNS      = "vpn-system"
	fullname       = "vpn-bnerd-vpn-operator"
	testKubeMinor  = "37"
	testKubeGitVer = "v1.37.2"
)

var chartDir = filepath.Join(repoRoot, "charts", "bnerd-vpn-operator")

func fromRoot(parts ...string) string { return filepath.Join(append([]string{repoRoot}, parts...)...) }

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	return c
}

func kubeVersion() *chartutil.KubeVersion {
	return &chartutil.KubeVersion{Version: testKubeGitVer, Major: "1", Minor: testKubeMinor}
}

// requiredValues are the least an install must give.
func requiredValues() map[string]any {
	return map[string]any{
		"router":          "gw-router",
		"externalNetwork": "public",
		"openstack": map[string]any{
			"credentials": map[string]any{"secretName": "operator-openstack"},
		},
	}
}

// with returns a copy of vals with the dotted path set to v.
func with(vals map[string]any, path string, v any) map[string]any {
	out := deepCopy(vals)
	m := out
	keys := strings.Split(path, ".")
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = v
	return out
}

// without returns a copy of vals with the dotted path removed.
func without(vals map[string]any, path string) map[string]any {
	out := deepCopy(vals)
	m := out
	keys := strings.Split(path, ".")
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			return out
		}
		m = next
	}
	delete(m, keys[len(keys)-1])
	return out
}

func deepCopy(in map[string]any) map[string]any {
	out := make(map[string]any, len(in))
	for k, v := range in {
		if m, ok := v.(map[string]any); ok {
			out[k] = deepCopy(m)
		} else {
			out[k] = v
		}
	}
	return out
}

type renderOpts struct {
	skipSchema bool
	kube       *chartutil.KubeVersion
	// apiVersions are served by the pretend cluster besides Kubernetes' own (what
	// .Capabilities.APIVersions.Has sees; `helm template --api-versions`).
	apiVersions []string
}

// monitoringAPIs is what a cluster with the Prometheus Operator's CRDs serves.
var monitoringAPIs = []string{
	"monitoring.coreos.com/v1",
	"monitoring.coreos.com/v1/ServiceMonitor",
	"monitoring.coreos.com/v1/PodMonitor",
	"monitoring.coreos.com/v1/PrometheusRule",
}

// renderChart runs what `helm install --dry-run` runs without a cluster: schema validation,
// the kubeVersion constraint and the templates, CRDs included.
func renderChart(t *testing.T, vals map[string]any, o renderOpts) (manifest, notes string, err error) {
	t.Helper()
	return renderChartWith(t, loadChart(t), vals, o)
}

// renderChartWith renders ch, a chart loaded from anywhere (a released package).
func renderChartWith(t *testing.T, ch *chart.Chart, vals map[string]any, o renderOpts) (manifest, notes string, err error) {
	t.Helper()
	cfg := &action.Configuration{Log: func(string, ...any) {}}
	in := action.NewInstall(cfg)
	in.ClientOnly = true
	in.DryRun = true
	in.Replace = true
	in.IncludeCRDs = true
	in.ReleaseName = releaseName
	in.Namespace = releaseNS
	in.SkipSchemaValidation = o.skipSchema
	in.KubeVersion = o.kube
	in.APIVersions = chartutil.VersionSet(o.apiVersions)
	if in.KubeVersion == nil {
		in.KubeVersion = kubeVersion()
	}
	rel, err := in.Run(ch, vals)
	if err != nil {
		return "", "", err
	}
	return rel.Manifest, rel.Info.Notes, nil
}

type rendered struct {
	objs  []*unstructured.Unstructured
	notes string
}

func mustRender(t *testing.T, vals map[string]any) rendered {
	t.Helper()
	return mustRenderWith(t, vals, renderOpts{})
}

// mustRenderMonitored renders for a cluster that serves the Prometheus Operator's kinds.
func mustRenderMonitored(t *testing.T, vals map[string]any) rendered {
	t.Helper()
	return mustRenderWith(t, vals, renderOpts{apiVersions: monitoringAPIs})
}

func mustRenderWith(t *testing.T, vals map[string]any, o renderOpts) rendered {
	t.Helper()
	manifest, notes, err := renderChart(t, vals, o)
	if err != nil {
		t.Fatalf("rendering the chart: %v", err)
	}
	return rendered{objs: decodeManifest(t, manifest), notes: notes}
}

func decodeManifest(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("decoding the rendered manifest: %v", err)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	if len(out) == 0 {
		t.Fatal("the chart rendered no objects")
	}
	return out
}

// find returns the one object of kind and name (namespace "" matches any), failing when
// there is not exactly one.
func (r rendered) find(t *testing.T, kind, namespace, name string) *unstructured.Unstructured {
	t.Helper()
	var hits []*unstructured.Unstructured
	for _, o := range r.objs {
		if o.GetKind() == kind && o.GetName() == name && (namespace == "" || o.GetNamespace() == namespace) {
			hits = append(hits, o)
		}
	}
	if len(hits) != 1 {
		t.Fatalf("want exactly one %s %s/%s, rendered %d (objects: %s)", kind, namespace, name, len(hits), r.names())
	}
	return hits[0]
}

func (r rendered) count(kind string) int {
	n := 0
	for _, o := range r.objs {
		if o.GetKind() == kind {
			n++
		}
	}
	return n
}

func (r rendered) names() string {
	var s []string
	for _, o := range r.objs {
		s = append(s, o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName())
	}
	return strings.Join(s, ", ")
}

func convert[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, out, true); err != nil {
		t.Fatalf("%s %s does not convert to its type: %v", u.GetKind(), u.GetName(), err)
	}
	return out
}

// operator returns the Deployment and its operator container.
func (r rendered) operator(t *testing.T) (*appsv1.Deployment, corev1.Container) {
	t.Helper()
	d := convert[appsv1.Deployment](t, r.find(t, "Deployment", releaseNS, fullname))
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("the operator Deployment has %d containers, want 1", len(d.Spec.Template.Spec.Containers))
	}
	return d, d.Spec.Template.Spec.Containers[0]
}

// envMap returns the container's plain env values, failing on a duplicate name.
func envMap(t *testing.T, c corev1.Container) map[string]corev1.EnvVar {
	t.Helper()
	out := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		if _, dup := out[e.Name]; dup {
			t.Errorf("env %s is set twice", e.Name)
		}
		out[e.Name] = e
	}
	return out
}

// The default tenant policy: absent unless asked for; asked for, it selects every
// namespace without the tenant label and carries the values' spec.
func TestDefaultTenantPolicy(t *testing.T) {
	for _, o := range mustRender(t, requiredValues()).objs {
		if o.GetKind() == "VPNTenantPolicy" {
			t.Fatalf("a VPNTenantPolicy without tenantPolicy.createDefault: %v", o)
		}
	}
	vals := with(requiredValues(), "tenantPolicy.createDefault", true)
	vals = with(vals, "tenantPolicy.default", map[string]any{
		"routedSubnets":   []any{"10.40.0.0/16"},
		"exposureTargets": []any{"10.250.0.0/16"},
		"floatingIPs":     []any{"203.0.113.10"},
		"limits":          map[string]any{"gateways": 10, "tunnels": 40},
	})
	var found *unstructured.Unstructured
	for _, o := range mustRender(t, vals).objs {
		if o.GetKind() == "VPNTenantPolicy" {
			found = o
		}
	}
	if found == nil || found.GetName() != "default" {
		t.Fatalf("no VPNTenantPolicy default rendered: %v", found)
	}
	expr, _, _ := unstructured.NestedSlice(found.Object, "spec", "namespaceSelector", "matchExpressions")
	if len(expr) != 1 || expr[0].(map[string]any)["key"] != "ipsec.bnerd.net/tenant" || expr[0].(map[string]any)["operator"] != "DoesNotExist" {
		t.Fatalf("namespaceSelector %v, want the namespaces without ipsec.bnerd.net/tenant", expr)
	}
	for path, want := range map[string]any{"routedSubnets": "10.40.0.0/16", "exposureTargets": "10.250.0.0/16", "floatingIPs": "203.0.113.10"} {
		got, _, _ := unstructured.NestedStringSlice(found.Object, "spec", path)
		if len(got) != 1 || got[0] != want {
			t.Errorf("spec.%s %v, want [%v]", path, got, want)
		}
	}
	if g, _, _ := unstructured.NestedFieldNoCopy(found.Object, "spec", "limits", "gateways"); fmt.Sprint(g) != "10" {
		t.Errorf("spec.limits.gateways %v, want 10", g)
	}
	// The schema refuses what the API would refuse later.
	if _, _, err := renderChart(t, with(vals, "tenantPolicy.default.exposureTargets", []any{"10.250.0.0"}), renderOpts{}); err == nil {
		t.Error("an exposure target that is no CIDR passed the values schema")
	}
	if _, _, err := renderChart(t, with(vals, "tenantPolicy.default.limits", map[string]any{"gateways": -1}), renderOpts{}); err == nil {
		t.Error("a negative limit passed the values schema")
	}
}
