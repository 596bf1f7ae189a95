package chart

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"bnerd.net/vpn-operator/internal/gatewaypod"
)

// A typo anywhere in the values fails the install, naming the key: the schema is closed
// at the top level and in every object the chart owns (as in cert-manager's chart).
func TestSchemaRefusesTypos(t *testing.T) {
	for _, tc := range []struct {
		path string
		v    any
	}{
		{"replica", 2},
		{"nodeselector", map[string]any{"a": "b"}},
		{"imagePullSecret", []any{}},
		{"serviceAccount.craete", false},
		{"rbac.enable", false},
		{"metrics.service.enable", false},
		{"metrics.serviceMonitor.label", map[string]any{}},
		{"resources.limit", map[string]any{"memory": "1Gi"}},
		{"crds.enable", false},
		{"podDisruptionBudget.minAvailble", 1},
		{"gatewayPods.resource", map[string]any{}},
		{"gatewayPods.resources.charon", map[string]any{}},
		{"gatewayPods.resources.strongswan.limit", map[string]any{}},
		{"gatewayPods.priorityClass", "x"},
		{"gatewayPods.tolerations", []any{map[string]any{"key": "a", "operater": "Exists"}}},
		{"openstack.caBundle.configMap", "x"},
		{"images.operator.digets", "sha256:00"},
	} {
		_, _, err := renderChart(t, with(requiredValues(), tc.path, tc.v), renderOpts{})
		key := tc.path[strings.LastIndex(tc.path, ".")+1:]
		if tc.path == "gatewayPods.tolerations" {
			key = "operater"
		}
		if err == nil {
			t.Errorf("%s: the install was accepted", tc.path)
			continue
		}
		if !strings.Contains(err.Error(), "schema") || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: refused, but the error does not name %q: %v", tc.path, key, err)
		}
	}
	// Helm passes `global` to every chart of an umbrella release; it must stay allowed.
	if _, _, err := renderChart(t, with(requiredValues(), "global", map[string]any{"imageRegistry": "x"}), renderOpts{}); err != nil {
		t.Errorf("global values refused: %v", err)
	}
	// Bad values of the new keys are refused too.
	for path, v := range map[string]any{
		"images.gateway.digest": "sha256:xyz",
		"imageRegistry":         "https://registry.example",
		"gatewayPods.resources.strongswan.requests.cpu":         "lots",
		"gatewayPods.imagePullPolicy":                           "Sometimes",
		"gatewayPods.tolerations":                               []any{map[string]any{"key": "a", "effect": "NoWay"}},
		"podDisruptionBudget.maxUnavailable":                    "half",
		"gatewayPods.imagePullSecrets":                          []any{"regcred"},
		"gatewayPods.resources.init-nat.limits.memory":          -1,
		"topologySpreadConstraints":                             []any{map[string]any{"maxSkew": 1}},
		"extraVolumeMounts":                                     []any{map[string]any{"name": "x"}},
		"commonLabels":                                          map[string]any{"team": 1},
		"gatewayMonitoring.prometheusRule.natApplyErrors.extra": 1,
	} {
		if _, _, err := renderChart(t, with(requiredValues(), path, v), renderOpts{}); err == nil || !strings.Contains(err.Error(), "schema") {
			t.Errorf("%s=%v: want a schema refusal, got %v", path, v, err)
		}
	}
}

// The chart's gateway pod shape defaults are the operator's own (leaving the value out and
// leaving IPSEC_GATEWAY_POD unset mean the same), and values given reach the operator in
// the form it parses.
func TestGatewayPodsValues(t *testing.T) {
	_, c := mustRender(t, requiredValues()).operator(t)
	got, err := gatewaypod.Parse(envMap(t, c)["IPSEC_GATEWAY_POD"].Value)
	if err != nil {
		t.Fatalf("the chart's default IPSEC_GATEWAY_POD does not parse: %v", err)
	}
	if got.Hash() != gatewaypod.DefaultShape().Hash() {
		t.Errorf("the chart's default gateway pod shape differs from the operator's:\nchart    %s\noperator %s", got.JSON(), gatewaypod.DefaultShape().JSON())
	}

	vals := requiredValues()
	vals = with(vals, "gatewayPods.priorityClassName", "vpn-gateways")
	vals = with(vals, "gatewayPods.nodeSelector", map[string]any{"pool": "vpn"})
	vals = with(vals, "gatewayPods.tolerations", []any{map[string]any{"key": "dedicated", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}})
	vals = with(vals, "gatewayPods.imagePullSecrets", []any{map[string]any{"name": "regcred"}})
	vals = with(vals, "gatewayPods.labels", map[string]any{"team": "net"})
	vals = with(vals, "gatewayPods.annotations", map[string]any{"example.com/owner": "platform"})
	vals = with(vals, "gatewayPods.resources.strongswan.limits.memory", "1Gi")
	_, c = mustRender(t, vals).operator(t)
	s, err := gatewaypod.Parse(envMap(t, c)["IPSEC_GATEWAY_POD"].Value)
	if err != nil {
		t.Fatal(err)
	}
	if s.PriorityClassName != "vpn-gateways" || s.NodeSelector["pool"] != "vpn" || len(s.Tolerations) != 1 || *s.Tolerations[0].TolerationSeconds != 30 ||
		s.ImagePullSecrets[0].Name != "regcred" || s.Labels["team"] != "net" || s.Annotations["example.com/owner"] != "platform" {
		t.Errorf("shape %s", s.JSON())
	}
	// Helm merges the given limit into the default: the request stays.
	if r := s.Resources["strongswan"]; r.Limits.Memory().String() != "1Gi" || r.Requests.Memory().IsZero() {
		t.Errorf("strongswan resources %+v", r)
	}

	// The operator's own label and annotation keys are refused at install, as the operator
	// would refuse them at start.
	for _, tc := range []struct {
		what, key string
	}{
		{"labels", "app.kubernetes.io/name"},
		{"labels", "app.kubernetes.io/managed-by"},
		{"labels", "ipsec.bnerd.net/gateway"},
		{"labels", "x.ipsec.bnerd.net/y"},
		{"annotations", "k8s.v1.cni.cncf.io/networks"},
		{"annotations", "ipsec.bnerd.net/port-mac"},
		{"labels", "team"},
		{"annotations", "example.com/ipsec.bnerd.net"},
	} {
		_, _, chartErr := renderChart(t, with(requiredValues(), "gatewayPods."+tc.what, map[string]any{tc.key: "x"}), renderOpts{})
		_, opErr := gatewaypod.Parse(`{"` + tc.what + `":{"` + tc.key + `":"x"}}`)
		if (chartErr == nil) != (opErr == nil) {
			t.Errorf("%s %q: chart says %v, operator says %v", tc.what, tc.key, chartErr, opErr)
		}
		if chartErr != nil && !strings.Contains(chartErr.Error(), tc.key) {
			t.Errorf("%s %q: the refusal does not name the key: %v", tc.what, tc.key, chartErr)
		}
	}
}

// One registry override for every image, and digests instead of tags.
func TestImageRegistryAndDigest(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	vals := with(requiredValues(), "imageRegistry", "registry.example.com:5000/mirror/")
	vals = with(vals, "images.gateway.digest", digest)
	vals = with(vals, "images.statusAgent.repository", "bnerd/agent")
	vals = with(vals, "images.operator.repository", "localhost/bnerd/op")
	r := mustRender(t, vals)
	_, c := r.operator(t)
	env := envMap(t, c)
	av := loadChart(t).Metadata.AppVersion
	for got, want := range map[string]string{
		c.Image:                          "registry.example.com:5000/mirror/bnerd/op:" + av,
		env["IPSEC_GATEWAY_IMAGE"].Value: "registry.example.com:5000/mirror/bnerd/bnerd-vpn-gateway@" + digest,
		env["IPSEC_GATEWAY_WIREGUARD_IMAGE"].Value: "registry.example.com:5000/mirror/bnerd/bnerd-vpn-gateway-wireguard:" + av,
		env["IPSEC_AGENT_IMAGE"].Value:             "registry.example.com:5000/mirror/bnerd/agent:" + av,
	} {
		if got != want {
			t.Errorf("image %q, want %q", got, want)
		}
	}
	if !strings.Contains(r.notes, "bnerd-vpn-gateway@"+digest) {
		t.Errorf("NOTES do not show the digest:\n%s", r.notes)
	}
}

// The operator pod follows the conventions users know: a PodDisruptionBudget, spread
// replicas, an optional ServiceAccount, common labels on every object, the CA bundle and
// extra volumes.
func TestOperatorPodConventions(t *testing.T) {
	r := mustRender(t, requiredValues())
	pdb := convert[policyv1.PodDisruptionBudget](t, r.find(t, "PodDisruptionBudget", releaseNS, fullname))
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
		t.Errorf("default PDB %+v", pdb.Spec)
	}
	d, _ := r.operator(t)
	if !reflect.DeepEqual(pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels) {
		t.Errorf("the PDB selects %v, the Deployment %v", pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels)
	}
	if len(d.Spec.Template.Spec.TopologySpreadConstraints) != 1 {
		t.Error("the default two replicas are not spread over nodes")
	}
	one := mustRender(t, with(requiredValues(), "replicas", 1))
	if d, _ := one.operator(t); len(d.Spec.Template.Spec.TopologySpreadConstraints) != 0 {
		t.Error("one replica needs no spread")
	}
	min := mustRender(t, with(requiredValues(), "podDisruptionBudget.minAvailable", "50%"))
	pdb = convert[policyv1.PodDisruptionBudget](t, min.find(t, "PodDisruptionBudget", releaseNS, fullname))
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.String() != "50%" || pdb.Spec.MaxUnavailable != nil {
		t.Errorf("minAvailable 50%%: %+v", pdb.Spec)
	}
	if n := mustRender(t, with(requiredValues(), "podDisruptionBudget.enabled", false)).count("PodDisruptionBudget"); n != 0 {
		t.Errorf("podDisruptionBudget.enabled=false rendered %d", n)
	}

	two := mustRender(t, with(requiredValues(), "replicas", 2))
	d, _ = two.operator(t)
	if tsc := d.Spec.Template.Spec.TopologySpreadConstraints; len(tsc) != 1 || tsc[0].TopologyKey != corev1.LabelHostname ||
		tsc[0].WhenUnsatisfiable != corev1.ScheduleAnyway || !reflect.DeepEqual(tsc[0].LabelSelector.MatchLabels, d.Spec.Selector.MatchLabels) {
		t.Errorf("two replicas: spread %+v", tsc)
	}
	own := mustRender(t, with(requiredValues(), "topologySpreadConstraints", []any{map[string]any{
		"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}}))
	d, _ = own.operator(t)
	if tsc := d.Spec.Template.Spec.TopologySpreadConstraints; len(tsc) != 1 || tsc[0].TopologyKey != "topology.kubernetes.io/zone" ||
		tsc[0].LabelSelector == nil || !reflect.DeepEqual(tsc[0].LabelSelector.MatchLabels, d.Spec.Selector.MatchLabels) {
		t.Errorf("a constraint without a selector gets the operator's: %+v", tsc)
	}

	// An existing ServiceAccount: none created, the bindings and the pod use it; without a
	// name the install fails instead of binding the namespace's default ServiceAccount.
	ext := mustRender(t, with(with(requiredValues(), "serviceAccount.create", false), "serviceAccount.name", "platform-vpn"))
	if n := ext.count("ServiceAccount"); n != 0 {
		t.Errorf("serviceAccount.create=false rendered %d ServiceAccounts", n)
	}
	d, _ = ext.operator(t)
	if d.Spec.Template.Spec.ServiceAccountName != "platform-vpn" {
		t.Errorf("the pod runs as %q", d.Spec.Template.Spec.ServiceAccountName)
	}
	if _, _, err := renderChart(t, with(requiredValues(), "serviceAccount.create", false), renderOpts{}); err == nil || !strings.Contains(err.Error(), "serviceAccount.name is required") {
		t.Errorf("serviceAccount.create=false without a name: %v", err)
	}

	// commonLabels on every object, never over the chart's own.
	cl := mustRender(t, with(with(requiredValues(), "commonLabels", map[string]any{"team": "net", "app.kubernetes.io/name": "other"}), "deploymentAnnotations", map[string]any{"example.com/a": "1"}))
	for _, o := range cl.objs {
		if o.GetLabels()["team"] != "net" || o.GetLabels()["app.kubernetes.io/name"] != "bnerd-vpn-operator" {
			t.Errorf("%s %s labels %v", o.GetKind(), o.GetName(), o.GetLabels())
		}
	}
	d, _ = cl.operator(t)
	if d.Annotations["example.com/a"] != "1" {
		t.Errorf("deploymentAnnotations: %v", d.Annotations)
	}

	// The CA bundle of a cloud behind a private CA, and extra volumes.
	ca := with(requiredValues(), "openstack.caBundle.configMapName", "cloud-ca")
	ca = with(ca, "openstack.credentials.format", "cloudsYaml")
	ca = with(ca, "openstack.credentials.cloud", "prod")
	ca = with(ca, "extraVolumes", []any{map[string]any{"name": "extra", "emptyDir": map[string]any{}}})
	ca = with(ca, "extraVolumeMounts", []any{map[string]any{"name": "extra", "mountPath": "/extra"}})
	d, c := mustRender(t, ca).operator(t)
	if v := envMap(t, c)["OS_CACERT"].Value; v != "/etc/openstack-ca/ca.crt" {
		t.Errorf("OS_CACERT %q", v)
	}
	if name := stringConsts(t, openstackTLSGo)["EnvCACert"]; name != "OS_CACERT" {
		t.Errorf("the operator reads the CA bundle from %q, the chart sets OS_CACERT", name)
	}
	var mounts, vols []string
	for _, m := range c.VolumeMounts {
		mounts = append(mounts, m.Name+":"+m.MountPath)
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		vols = append(vols, v.Name)
		if v.Name == "openstack-ca" && (v.ConfigMap == nil || v.ConfigMap.Name != "cloud-ca") {
			t.Errorf("CA volume %+v", v)
		}
	}
	if !slices.Equal(mounts, []string{"openstack-credentials:/etc/openstack", "openstack-ca:/etc/openstack-ca", "extra:/extra"}) ||
		!slices.Equal(vols, []string{"openstack-credentials", "openstack-ca", "extra"}) {
		t.Errorf("mounts %v volumes %v", mounts, vols)
	}
	d, c = mustRender(t, requiredValues()).operator(t)
	if _, ok := envMap(t, c)["OS_CACERT"]; ok || len(d.Spec.Template.Spec.Volumes) != 0 {
		t.Error("without a CA bundle the pod has OS_CACERT or volumes")
	}
	_ = appsv1.Deployment{}
}

// The CRDs are templates behind crds.enabled, carry the keep policy behind crds.keep, and
// are the generated files with nothing else changed.
func TestCRDTemplates(t *testing.T) {
	r := mustRender(t, requiredValues())
	files, _ := filepath.Glob(fromRoot("config", "crd", "*.yaml"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var want map[string]any
		if err := yaml.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		name := want["metadata"].(map[string]any)["name"].(string)
		got := r.find(t, "CustomResourceDefinition", "", name)
		if got.GetAnnotations()["helm.sh/resource-policy"] != "keep" || got.GetLabels()["app.kubernetes.io/managed-by"] != "Helm" {
			t.Errorf("%s: annotations %v labels %v", name, got.GetAnnotations(), got.GetLabels())
		}
		if !reflect.DeepEqual(got.Object["spec"], want["spec"]) {
			t.Errorf("the rendered CRD %s's spec differs from config/crd", name)
		}
	}
	if n := r.count("CustomResourceDefinition"); n != len(files) || n == 0 {
		t.Errorf("rendered %d CRDs, generated %d", n, len(files))
	}
	if n := mustRender(t, with(requiredValues(), "crds.enabled", false)).count("CustomResourceDefinition"); n != 0 {
		t.Errorf("crds.enabled=false rendered %d CRDs", n)
	}
	for _, o := range mustRender(t, with(requiredValues(), "crds.keep", false)).objs {
		if _, ok := o.GetAnnotations()["helm.sh/resource-policy"]; ok && o.GetKind() == "CustomResourceDefinition" {
			t.Errorf("crds.keep=false: %s keeps the policy", o.GetName())
		}
	}
}

// ArtifactHub's annotations say what the chart really holds: the licence, the images
// its defaults run, the CRDs it installs.
func TestArtifactHubAnnotations(t *testing.T) {
	c := loadChart(t)
	a := c.Metadata.Annotations
	if a["artifacthub.io/license"] != "Apache-2.0" || a["artifacthub.io/prerelease"] != "true" || a["artifacthub.io/operator"] != "true" {
		t.Errorf("annotations %v", a)
	}
	var images []struct{ Name, Image string }
	if err := yaml.UnmarshalStrict([]byte(a["artifacthub.io/images"]), &images); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, i := range images {
		got = append(got, i.Image)
	}
	r := mustRender(t, requiredValues())
	_, op := r.operator(t)
	env := envMap(t, op)
	want := []string{op.Image, env["IPSEC_GATEWAY_IMAGE"].Value, env["IPSEC_GATEWAY_WIREGUARD_IMAGE"].Value}
	if env["IPSEC_AGENT_IMAGE"].Value != env["IPSEC_GATEWAY_IMAGE"].Value {
		want = append(want, env["IPSEC_AGENT_IMAGE"].Value)
	}
	if !slices.Equal(got, want) {
		t.Errorf("artifacthub.io/images %v, the default install runs %v", got, want)
	}
	var crds []struct{ Kind, Version, Name, DisplayName, Description string }
	if err := yaml.UnmarshalStrict([]byte(a["artifacthub.io/crds"]), &crds); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cr := range crds {
		names = append(names, cr.Name)
		o := r.find(t, "CustomResourceDefinition", "", cr.Name)
		if k, _, _ := unstructuredString(o.Object, "spec", "names", "kind"); k != cr.Kind || cr.Version != "v1alpha1" || cr.Description == "" {
			t.Errorf("artifacthub.io/crds entry %+v (CRD kind %s)", cr, k)
		}
	}
	if len(names) != r.count("CustomResourceDefinition") {
		t.Errorf("artifacthub.io/crds lists %v, the chart installs %d CRDs", names, r.count("CustomResourceDefinition"))
	}
	var examples []map[string]any
	if err := yaml.Unmarshal([]byte(a["artifacthub.io/crdsExamples"]), &examples); err != nil || len(examples) != len(crds) {
		t.Errorf("artifacthub.io/crdsExamples: %d examples, %v", len(examples), err)
	}
	if !strings.Contains(c.Metadata.Description, "WireGuard") || !strings.Contains(c.Metadata.Description, "IPsec") {
		t.Errorf("the chart description does not name both protocols: %q", c.Metadata.Description)
	}
}
