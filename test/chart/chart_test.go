package chart

import (
	"bytes"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"
)

var (
	operatorConfigGo = fromRoot("internal", "operatorconfig", "config.go")
	operatorMainGo   = fromRoot("cmd", "bnerd-vpn-operator", "main.go")
	renderObjectsGo  = fromRoot("internal", "render", "objects.go")
	openstackTLSGo   = fromRoot("internal", "openstack", "tls.go")
)

func TestChartMetadata(t *testing.T) {
	c := loadChart(t)
	if err := c.Validate(); err != nil {
		t.Fatalf("chart metadata: %v", err)
	}
	if c.Metadata.APIVersion != "v2" || c.Metadata.Version != "0.1.0" || c.Metadata.AppVersion != "v0.1.0" {
		t.Errorf("Chart.yaml: apiVersion %q version %q appVersion %q, want v2 0.1.0 v0.1.0",
			c.Metadata.APIVersion, c.Metadata.Version, c.Metadata.AppVersion)
	}
	if c.Schema == nil {
		t.Error("the chart has no values.schema.json")
	}
}

func TestLint(t *testing.T) {
	lint := action.NewLint()
	lint.Namespace = releaseNS
	lint.KubeVersion = kubeVersion()
	lint.Strict = true
	res := lint.Run([]string{chartDir}, requiredValues())
	for _, m := range res.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("lint: %s", m)
		} else {
			t.Logf("lint: %s", m)
		}
	}
	for _, err := range res.Errors {
		t.Errorf("lint error: %v", err)
	}
}

// Every variable operatorconfig.Load reads is set by the chart; the defaults are the
// operator's own, the gateway images follow the appVersion.
func TestDeploymentEnvDefaults(t *testing.T) {
	r := mustRender(t, requiredValues())
	d, c := r.operator(t)
	env := envMap(t, c)

	for _, name := range append(envNames(t, operatorConfigGo), "POD_NAMESPACE") {
		if _, ok := env[name]; !ok {
			t.Errorf("the operator reads %s but the chart does not set it", name)
		}
	}
	if ns := env["POD_NAMESPACE"].ValueFrom; ns == nil || ns.FieldRef == nil || ns.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("POD_NAMESPACE must come from the downward API metadata.namespace, got %+v", env["POD_NAMESPACE"])
	}

	appVersion := loadChart(t).Metadata.AppVersion
	consts := stringConsts(t, operatorConfigGo)
	renderConsts := stringConsts(t, renderObjectsGo)
	want := map[string]string{
		"IPSEC_GATEWAY_NETWORK":                   consts["DefaultGatewayNetwork"],
		"IPSEC_EXTERNAL_NETWORK":                  "public",
		"IPSEC_ROUTER_ID":                         "gw-router",
		"IPSEC_SERVICE_CIDR_POOL":                 consts["DefaultServiceCIDRPool"],
		"IPSEC_INTERNAL_SOURCE_CIDRS":             "",
		"IPSEC_GATEWAY_NETWORKPOLICY_ENABLED":     "true",
		"IPSEC_GATEWAY_IMAGE":                     "ghcr.io/bnerd/bnerd-vpn-gateway:" + appVersion,
		"IPSEC_AGENT_IMAGE":                       "ghcr.io/bnerd/bnerd-vpn-status-agent:" + appVersion,
		"IPSEC_GATEWAY_WIREGUARD_IMAGE":           "ghcr.io/bnerd/bnerd-vpn-gateway-wireguard:" + appVersion,
		"IPSEC_NAD_TEMPLATE":                      renderConsts["DefaultNADTemplate"],
		"IPSEC_GATEWAY_DATAPLANE":                 consts["DefaultGatewayDataplane"],
		"IPSEC_CLUSTERLINK_CREDENTIALS_NAMESPACE": consts["DefaultClusterLinkCredentialsNamespace"],
		"IPSEC_CLUSTERLINK_REVERSE_ROUTE_MODE":    consts["DefaultClusterLinkReverseRouteMode"],
		"IPSEC_RESYNC_INTERVAL":                   "5m",
		"IPSEC_MAX_CONCURRENT_RECONCILES":         "4",
		"IPSEC_STATUS_AGENT_STALE_AFTER":          "3m",
		"IPSEC_EXPOSURE_TARGET_CIDRS":             "",
		"IPSEC_CLUSTERLINK_SAFE_ROLES":            "",
		"IPSEC_NODE_NOT_READY_GRACE":              "5s",
		"IPSEC_GATEWAY_LIVENESS_TIMEOUT":          "6s",
		"IPSEC_NODE_MAX_GATEWAYS":                 "0",
		"IPSEC_OPENSTACK_QPS":                     "0",
		"IPSEC_OPENSTACK_BURST":                   "0",
		"IPSEC_OPENSTACK_TIMEOUT":                 "30s",
	}
	for name, v := range want {
		if v == "" && name != "IPSEC_INTERNAL_SOURCE_CIDRS" && name != "IPSEC_EXPOSURE_TARGET_CIDRS" && name != "IPSEC_CLUSTERLINK_SAFE_ROLES" {
			t.Fatalf("no expected value for %s: a constant in the operator's source was renamed", name)
		}
		if got := env[name].Value; got != v {
			t.Errorf("%s = %q, want %q", name, got, v)
		}
	}
	// The chart's defaults are the operator's built-in ones, so leaving a value out of the
	// chart and leaving the variable unset mean the same.
	if env["IPSEC_GATEWAY_IMAGE"].Value != consts["DefaultGatewayImage"] || env["IPSEC_AGENT_IMAGE"].Value != consts["DefaultAgentImage"] ||
		env["IPSEC_GATEWAY_WIREGUARD_IMAGE"].Value != consts["DefaultWireGuardImage"] {
		t.Errorf("default gateway/agent/WireGuard images %q/%q/%q differ from the operator's built-in %q/%q/%q",
			env["IPSEC_GATEWAY_IMAGE"].Value, env["IPSEC_AGENT_IMAGE"].Value, env["IPSEC_GATEWAY_WIREGUARD_IMAGE"].Value,
			consts["DefaultGatewayImage"], consts["DefaultAgentImage"], consts["DefaultWireGuardImage"])
	}
	if dur, err := time.ParseDuration(env["IPSEC_RESYNC_INTERVAL"].Value); err != nil || dur != 5*time.Minute {
		t.Errorf("IPSEC_RESYNC_INTERVAL %q is not the operator's 5m default", env["IPSEC_RESYNC_INTERVAL"].Value)
	}

	if c.Image != "ghcr.io/bnerd/bnerd-vpn-operator:"+appVersion {
		t.Errorf("operator image %q, want the appVersion tag %s", c.Image, appVersion)
	}
	if c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("pull policy %q", c.ImagePullPolicy)
	}
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].SecretRef == nil || c.EnvFrom[0].SecretRef.Name != "operator-openstack" {
		t.Errorf("the OS_* credential Secret must be passed with envFrom, got %+v", c.EnvFrom)
	}
	if _, ok := env["OS_CLOUD"]; ok {
		t.Error("OS_CLOUD is set with format env; the operator would then ignore the OS_* variables")
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2: a standby takes over when the leader's node is lost", d.Spec.Replicas)
	}
}

// The container's args parse with the operator's own flags, and the probes and the
// metrics port point where those flags bind.
func TestDeploymentArgsProbesPorts(t *testing.T) {
	_, c := mustRender(t, requiredValues()).operator(t)

	flags := mainFlags(t, operatorMainGo)
	fs := flag.NewFlagSet("bnerd-vpn-operator", flag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	got := map[string]*string{}
	durations := map[string]*time.Duration{}
	var leaderElect *bool
	for name, f := range flags {
		switch f.kind {
		case "String":
			got[name] = fs.String(name, f.def, "")
		case "Duration":
			durations[name] = fs.Duration(name, 0, "")
		case "Bool":
			b := fs.Bool(name, f.def == "true", "")
			if name == "leader-elect" {
				leaderElect = b
			}
		}
	}
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(c.Args); err != nil {
		t.Fatalf("the operator would refuse the chart's args %q: %v", c.Args, err)
	}
	if fs.NArg() != 0 {
		t.Errorf("stray args %q", fs.Args())
	}
	for _, name := range []string{"metrics-bind-address", "health-probe-bind-address"} {
		if got[name] == nil {
			t.Fatalf("the operator has no --%s flag any more", name)
		}
	}
	if leaderElect == nil || !*leaderElect {
		t.Error("leader election is on by default but --leader-elect is not passed")
	}
	// The leader failover fits the node-failure bound: a standby takes the Lease 6 s after
	// the leader's last renewal.
	for name, want := range map[string]time.Duration{
		"leader-election-lease-duration": 6 * time.Second, "leader-election-renew-deadline": 4 * time.Second, "leader-election-retry-period": time.Second,
	} {
		if durations[name] == nil || *durations[name] != want {
			t.Errorf("--%s: %v, want %v by default", name, durations[name], want)
		}
	}

	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if *got["metrics-bind-address"] != ":8443" || ports["metrics"] != 8443 {
		t.Errorf("metrics bind %q, container port %d; want :8443 and 8443", *got["metrics-bind-address"], ports["metrics"])
	}
	if !slices.Contains(c.Args, "--metrics-secure=true") {
		t.Errorf("the metrics are not served securely by default: %q", c.Args)
	}
	probeAddr := *got["health-probe-bind-address"]
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", p.name)
			continue
		}
		port := p.probe.HTTPGet.Port
		if port.Type == intstr.String {
			port = intstr.FromInt32(ports[port.StrVal])
		}
		if p.probe.HTTPGet.Path != p.path || ":"+port.String() != probeAddr {
			t.Errorf("%s probe %s on port %s, want %s on %s", p.name, p.probe.HTTPGet.Path, port.String(), p.path, probeAddr)
		}
	}
}

func TestSecurityContext(t *testing.T) {
	d, c := mustRender(t, requiredValues()).operator(t)
	pod := d.Spec.Template.Spec.SecurityContext
	if pod == nil || pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot || pod.RunAsUser == nil || *pod.RunAsUser == 0 {
		t.Errorf("pod must run as a non-root user: %+v", pod)
	}
	if pod == nil || pod.SeccompProfile == nil || pod.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod seccomp profile must be RuntimeDefault: %+v", pod)
	}
	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("the operator container has no securityContext")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("root filesystem must be read-only")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("privilege escalation must be off")
	}
	if sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("capabilities must drop ALL and add none: %+v", sc.Capabilities)
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("privileged")
	}
}

// Values given at install flow to the environment in the form the operator parses.
func TestValuesFlowToEnv(t *testing.T) {
	const nad = `{"cniVersion":"0.3.1","name":"{{ .Name }}","type":"macvlan","master":"ens4","ipam":{"type":"static","addresses":[{"address":"{{ .FixedIP }}/32"}]}}`
	vals := requiredValues()
	vals = with(vals, "gatewayNetwork", "transit-b")
	vals = with(vals, "serviceCIDRPool", "100.100.0.0/18")
	vals = with(vals, "internalSourceCIDRs", []any{"10.0.0.0/24", "192.168.10.0/23"})
	vals = with(vals, "gatewayNetworkPolicy.enabled", false)
	vals = with(vals, "images.gateway.tag", "0.3.1")
	vals = with(vals, "images.statusAgent.repository", "registry.example/agent")
	vals = with(vals, "images.statusAgent.tag", "0.3.2")
	vals = with(vals, "images.gatewayWireguard.tag", "0.3.3")
	vals = with(vals, "images.operator.tag", "v0.2.0")
	vals = with(vals, "nadTemplate", nad)
	vals = with(vals, "clusterLink.credentialsNamespace", "link-creds")
	vals = with(vals, "exposureTargetCIDRs", []any{"10.250.0.0/16", "10.251.0.0/16"})
	vals = with(vals, "clusterLink.safeRoles", []any{"network_operator", "creator"})
	vals = with(vals, "clusterLink.reverseRouteMode", "Aggregate")
	vals = with(vals, "resyncInterval", "90s")
	vals = with(vals, "maxConcurrentReconciles", 2)
	vals = with(vals, "leaderElection.enabled", false)
	vals = with(vals, "replicas", 2)
	r := mustRender(t, vals)
	d, c := r.operator(t)
	env := envMap(t, c)

	want := map[string]string{
		"IPSEC_GATEWAY_NETWORK":                   "transit-b",
		"IPSEC_SERVICE_CIDR_POOL":                 "100.100.0.0/18",
		"IPSEC_INTERNAL_SOURCE_CIDRS":             "10.0.0.0/24,192.168.10.0/23",
		"IPSEC_GATEWAY_NETWORKPOLICY_ENABLED":     "false",
		"IPSEC_GATEWAY_IMAGE":                     "ghcr.io/bnerd/bnerd-vpn-gateway:0.3.1",
		"IPSEC_AGENT_IMAGE":                       "registry.example/agent:0.3.2",
		"IPSEC_GATEWAY_WIREGUARD_IMAGE":           "ghcr.io/bnerd/bnerd-vpn-gateway-wireguard:0.3.3",
		"IPSEC_NAD_TEMPLATE":                      nad,
		"IPSEC_CLUSTERLINK_CREDENTIALS_NAMESPACE": "link-creds",
		"IPSEC_RESYNC_INTERVAL":                   "90s",
		"IPSEC_MAX_CONCURRENT_RECONCILES":         "2",
		"IPSEC_EXPOSURE_TARGET_CIDRS":             "10.250.0.0/16,10.251.0.0/16",
		"IPSEC_CLUSTERLINK_SAFE_ROLES":            "network_operator,creator",
		"IPSEC_CLUSTERLINK_REVERSE_ROUTE_MODE":    "Aggregate",
	}
	for name, v := range want {
		if got := env[name].Value; got != v {
			t.Errorf("%s = %q, want %q", name, got, v)
		}
	}
	// Parse as operatorconfig.Load does.
	for _, f := range strings.Split(env["IPSEC_INTERNAL_SOURCE_CIDRS"].Value, ",") {
		if p, err := netip.ParsePrefix(strings.TrimSpace(f)); err != nil || p.Masked() != p {
			t.Errorf("IPSEC_INTERNAL_SOURCE_CIDRS element %q does not parse as a CIDR: %v", f, err)
		}
	}
	if b, err := strconv.ParseBool(env["IPSEC_GATEWAY_NETWORKPOLICY_ENABLED"].Value); err != nil || b {
		t.Errorf("IPSEC_GATEWAY_NETWORKPOLICY_ENABLED %q must parse as false", env["IPSEC_GATEWAY_NETWORKPOLICY_ENABLED"].Value)
	}
	if c.Image != "ghcr.io/bnerd/bnerd-vpn-operator:v0.2.0" {
		t.Errorf("operator image %q", c.Image)
	}
	// The operator elects a leader unless told not to: the chart must say so.
	if !slices.Contains(c.Args, "--leader-elect=false") {
		t.Errorf("leaderElection.enabled=false must pass --leader-elect=false (the operator's default is on); args %q", c.Args)
	}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--leader-election-") {
			t.Errorf("leader election off, yet its timing is passed: %s", a)
		}
	}
	if n := r.count("Role"); n != 1 {
		t.Errorf("with leader election off only the credentials Role is rendered, got %d Roles", n)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}
	if !strings.Contains(r.notes, "0.3.1") || strings.Contains(r.notes, "restarts every gateway pod") {
		t.Errorf("NOTES with pinned images should name the pin and not warn about rolls:\n%s", r.notes)
	}
}

func TestCloudsYAMLCredential(t *testing.T) {
	vals := with(requiredValues(), "openstack.credentials.format", "cloudsYaml")
	vals = with(vals, "openstack.credentials.cloud", "operator")
	vals = with(vals, "openstack.credentials.cloudsYamlKey", "my-clouds.yaml")
	d, c := mustRender(t, vals).operator(t)
	env := envMap(t, c)

	// The operator's main loads its cloud with openstack.LoadCloud(os.Getenv, ...), which
	// reads these through its getenv.
	readByMain := getenvNames(t, operatorMainGo)
	for k := range calledWithLiteral(t, openstackTLSGo, "getenv") {
		readByMain[k] = true
	}
	if main, _ := os.ReadFile(operatorMainGo); !strings.Contains(string(main), "openstack.LoadCloud(os.Getenv") {
		t.Error("the operator's main no longer loads its cloud with openstack.LoadCloud(os.Getenv, ...)")
	}
	for _, name := range []string{"OS_CLOUD", "OS_CLIENT_CONFIG_FILE"} {
		if !readByMain[name] {
			t.Errorf("the operator no longer reads %s; the chart's cloudsYaml format relies on it", name)
		}
	}
	if env["OS_CLOUD"].Value != "operator" {
		t.Errorf("OS_CLOUD = %q", env["OS_CLOUD"].Value)
	}
	file := env["OS_CLIENT_CONFIG_FILE"].Value
	if len(c.EnvFrom) != 0 {
		t.Errorf("envFrom %+v with format cloudsYaml", c.EnvFrom)
	}
	var mount *corev1.VolumeMount
	for i := range c.VolumeMounts {
		if strings.HasPrefix(file, c.VolumeMounts[i].MountPath+"/") {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil || !mount.ReadOnly {
		t.Fatalf("OS_CLIENT_CONFIG_FILE %q is not under a read-only mount: %+v", file, c.VolumeMounts)
	}
	var vol *corev1.Volume
	for i := range d.Spec.Template.Spec.Volumes {
		if d.Spec.Template.Spec.Volumes[i].Name == mount.Name {
			vol = &d.Spec.Template.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.Secret == nil || vol.Secret.SecretName != "operator-openstack" {
		t.Fatalf("mount %s is not the credential Secret: %+v", mount.Name, vol)
	}
	rel := strings.TrimPrefix(file, mount.MountPath+"/")
	if len(vol.Secret.Items) != 1 || vol.Secret.Items[0].Key != "my-clouds.yaml" || vol.Secret.Items[0].Path != rel {
		t.Errorf("the Secret's key my-clouds.yaml must appear at %s: %+v", file, vol.Secret.Items)
	}
}

func TestClusterRoleMatchesGenerated(t *testing.T) {
	generated, err := os.ReadFile(fromRoot("config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	copied, err := os.ReadFile(filepath.Join(chartDir, "files", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(generated, copied) {
		t.Error("charts/bnerd-vpn-operator/files/role.yaml differs from config/rbac/role.yaml; run: cp config/rbac/role.yaml charts/bnerd-vpn-operator/files/role.yaml")
	}
	var want rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(generated, &want); err != nil {
		t.Fatal(err)
	}
	if len(want.Rules) == 0 {
		t.Fatal("config/rbac/role.yaml has no rules")
	}

	r := mustRender(t, requiredValues())
	got := convert[rbacv1.ClusterRole](t, r.find(t, "ClusterRole", "", fullname))
	if !reflect.DeepEqual(got.Rules, want.Rules) {
		t.Errorf("rendered ClusterRole rules differ from config/rbac/role.yaml:\n got %+v\nwant %+v", got.Rules, want.Rules)
	}
	crb := convert[rbacv1.ClusterRoleBinding](t, r.find(t, "ClusterRoleBinding", "", fullname))
	wantSubject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: fullname, Namespace: releaseNS}}
	if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != fullname || !reflect.DeepEqual(crb.Subjects, wantSubject) {
		t.Errorf("ClusterRoleBinding %+v %+v", crb.RoleRef, crb.Subjects)
	}
	d, _ := r.operator(t)
	if d.Spec.Template.Spec.ServiceAccountName != fullname {
		t.Errorf("the Deployment runs as %q, the bindings name %q", d.Spec.Template.Spec.ServiceAccountName, fullname)
	}
	r.find(t, "ServiceAccount", releaseNS, fullname)
}

func TestCRDsMatchGenerated(t *testing.T) {
	want, err := filepath.Glob(fromRoot("config", "crd", "*.yaml"))
	if err != nil || len(want) == 0 {
		t.Fatalf("no generated CRDs in config/crd: %v", err)
	}
	got, err := filepath.Glob(filepath.Join(chartDir, "files", "crds", "*"))
	if err != nil {
		t.Fatal(err)
	}
	base := func(paths []string) []string {
		var out []string
		for _, p := range paths {
			out = append(out, filepath.Base(p))
		}
		return out
	}
	const fix = "run: make generate"
	if !slices.Equal(base(want), base(got)) {
		t.Fatalf("charts/bnerd-vpn-operator/files/crds holds %v, config/crd holds %v; %s", base(got), base(want), fix)
	}
	for _, p := range want {
		a, _ := os.ReadFile(p)
		b, _ := os.ReadFile(filepath.Join(chartDir, "files", "crds", filepath.Base(p)))
		if !bytes.Equal(a, b) {
			t.Errorf("files/crds/%s differs from config/crd; %s", filepath.Base(p), fix)
		}
	}
	// The CRDs are templates (upgraded by helm upgrade), not Helm's install-once crds/.
	if n := len(loadChart(t).CRDObjects()); n != 0 {
		t.Errorf("Helm sees %d CRDs in crds/, which it would never upgrade", n)
	}
	if n := mustRender(t, requiredValues()).count("CustomResourceDefinition"); n != len(want) {
		t.Errorf("rendered %d CRDs, want %d", n, len(want))
	}
}

func TestCredentialsNamespaceRBAC(t *testing.T) {
	r := mustRender(t, requiredValues())
	const ns = "bnerd-vpn-clusterlinks"
	name := fullname + "-clusterlink-credentials"
	role := convert[rbacv1.Role](t, r.find(t, "Role", ns, name))
	// get to read a credential, list and watch to follow each link's own Secret by name.
	wantRules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}}}
	if !reflect.DeepEqual(role.Rules, wantRules) {
		t.Errorf("credentials Role rules %+v, want get, list and watch on secrets", role.Rules)
	}
	rb := convert[rbacv1.RoleBinding](t, r.find(t, "RoleBinding", ns, name))
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != name ||
		!reflect.DeepEqual(rb.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: fullname, Namespace: releaseNS}}) {
		t.Errorf("credentials RoleBinding %+v %+v", rb.RoleRef, rb.Subjects)
	}
	nsObj := r.find(t, "Namespace", "", ns)
	if nsObj.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
		t.Error("the credentials namespace must survive an uninstall (helm.sh/resource-policy: keep)")
	}

	if n := mustRender(t, with(requiredValues(), "clusterLink.createNamespace", false)).count("Namespace"); n != 0 {
		t.Errorf("createNamespace=false rendered %d Namespaces", n)
	}
	same := mustRender(t, with(requiredValues(), "clusterLink.credentialsNamespace", releaseNS))
	if n := same.count("Namespace"); n != 0 {
		t.Errorf("credentials namespace = release namespace rendered %d Namespaces", n)
	}
	same.find(t, "Role", releaseNS, name)
}

func TestLeaderElectionRole(t *testing.T) {
	r := mustRender(t, requiredValues())
	name := fullname + "-leader-election"
	role := convert[rbacv1.Role](t, r.find(t, "Role", releaseNS, name))
	var leases bool
	for _, rule := range role.Rules {
		if slices.Contains(rule.APIGroups, "coordination.k8s.io") && slices.Contains(rule.Resources, "leases") {
			leases = slices.Contains(rule.Verbs, "create") && slices.Contains(rule.Verbs, "update") && slices.Contains(rule.Verbs, "get")
		}
	}
	if !leases {
		t.Errorf("leader-election Role cannot get/create/update leases: %+v", role.Rules)
	}
	rb := convert[rbacv1.RoleBinding](t, r.find(t, "RoleBinding", releaseNS, name))
	if rb.RoleRef.Name != name || len(rb.Subjects) != 1 || rb.Subjects[0].Name != fullname || rb.Subjects[0].Namespace != releaseNS {
		t.Errorf("leader-election RoleBinding %+v %+v", rb.RoleRef, rb.Subjects)
	}
}

// metrics.secure=false serves plain HTTP on 8080 and scrapes it so; metrics.certSecret
// mounts the certificate and names its directory; a tlsConfig replaces insecureSkipVerify.
func TestMetricsSecureValues(t *testing.T) {
	plain := with(with(requiredValues(), "metrics.secure", false), "metrics.serviceMonitor.enabled", true)
	r := mustRender(t, plain)
	_, c := r.operator(t)
	if !slices.Contains(c.Args, "--metrics-secure=false") || !slices.Contains(c.Args, "--metrics-bind-address=:8080") ||
		len(c.Ports) == 0 || c.Ports[0].Name != "metrics" || c.Ports[0].ContainerPort != 8080 {
		t.Errorf("metrics.secure=false: args %q, ports %+v; want plain HTTP on 8080", c.Args, c.Ports)
	}
	eps, _, _ := unstructured.NestedSlice(r.find(t, "ServiceMonitor", releaseNS, fullname).Object, "spec", "endpoints")
	if ep := eps[0].(map[string]any); ep["scheme"] != "http" || ep["bearerTokenFile"] != nil || ep["tlsConfig"] != nil {
		t.Errorf("metrics.secure=false: ServiceMonitor endpoint %v, want plain http", ep)
	}

	certs := with(with(with(requiredValues(), "metrics.certSecret", "operator-metrics-tls"), "metrics.serviceMonitor.enabled", true),
		"metrics.serviceMonitor.tlsConfig", map[string]any{"serverName": "op.vpn-system.svc", "ca": map[string]any{"secret": map[string]any{"name": "metrics-ca", "key": "ca.crt"}}})
	r = mustRender(t, certs)
	d, c := r.operator(t)
	if !slices.Contains(c.Args, "--metrics-cert-dir=/etc/metrics-certs") {
		t.Errorf("metrics.certSecret: args %q lack --metrics-cert-dir", c.Args)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.Name == "metrics-certs" && m.MountPath == "/etc/metrics-certs" && m.ReadOnly {
			mounted = true
		}
	}
	fromSecret := false
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "metrics-certs" && v.Secret != nil && v.Secret.SecretName == "operator-metrics-tls" {
			fromSecret = true
		}
	}
	if !mounted || !fromSecret {
		t.Errorf("metrics.certSecret: mounted %v, volume from the Secret %v", mounted, fromSecret)
	}
	sm := r.find(t, "ServiceMonitor", releaseNS, fullname)
	convert[monitoringv1.ServiceMonitor](t, sm)
	eps, _, _ = unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	tc, _ := eps[0].(map[string]any)["tlsConfig"].(map[string]any)
	if tc["serverName"] != "op.vpn-system.svc" || tc["insecureSkipVerify"] != nil {
		t.Errorf("metrics.serviceMonitor.tlsConfig: endpoint tlsConfig %v", tc)
	}
	// Without secure serving there is no certificate to mount.
	r = mustRender(t, with(with(requiredValues(), "metrics.certSecret", "operator-metrics-tls"), "metrics.secure", false))
	if _, c := r.operator(t); slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--metrics-cert-dir") }) {
		t.Errorf("metrics.secure=false still passes a cert dir: %q", c.Args)
	}
}

// The metrics-reader ClusterRole grants get on /metrics and nothing else.
func TestMetricsReaderRole(t *testing.T) {
	r := mustRender(t, requiredValues())
	role := convert[rbacv1.ClusterRole](t, r.find(t, "ClusterRole", "", fullname+"-metrics-reader"))
	want := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("metrics-reader rules %+v, want %+v", role.Rules, want)
	}
	if n := mustRender(t, with(requiredValues(), "rbac.create", false)).count("ClusterRole"); n != 0 {
		t.Errorf("rbac.create=false rendered %d ClusterRoles", n)
	}
}

func TestMetricsServiceAndServiceMonitor(t *testing.T) {
	r := mustRender(t, requiredValues())
	svc := convert[corev1.Service](t, r.find(t, "Service", releaseNS, fullname+"-metrics"))
	d, _ := r.operator(t)
	podLabels := d.Spec.Template.Labels
	for k, v := range svc.Spec.Selector {
		if podLabels[k] != v {
			t.Errorf("Service selector %s=%s does not match the operator pod (%v)", k, v, podLabels)
		}
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8443 || svc.Spec.Ports[0].TargetPort.StrVal != "metrics" {
		t.Errorf("metrics Service ports %+v", svc.Spec.Ports)
	}
	if n := r.count("ServiceMonitor"); n != 0 {
		t.Errorf("ServiceMonitor rendered (%d) for a cluster without the Prometheus Operator", n)
	}

	for name, rr := range map[string]rendered{
		"auto, monitoring API served": mustRenderMonitored(t, requiredValues()),
		"forced on":                   mustRender(t, with(requiredValues(), "metrics.serviceMonitor.enabled", true)),
	} {
		sm := rr.find(t, "ServiceMonitor", releaseNS, fullname)
		convert[monitoringv1.ServiceMonitor](t, sm)
		eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		if len(eps) != 1 || eps[0].(map[string]any)["port"] != "metrics" {
			t.Errorf("%s: ServiceMonitor endpoints %v", name, eps)
			continue
		}
		// The per-gateway series carry the gateway's namespace; without honorLabels the
		// target's namespace (the operator's) would replace it.
		if eps[0].(map[string]any)["honorLabels"] != true {
			t.Errorf("%s: the ServiceMonitor endpoint does not honor the series' labels: %v", name, eps[0])
		}
		// The operator serves HTTPS to authenticated, authorised clients (metrics.secure):
		// Prometheus sends its ServiceAccount token; the certificate is self-signed.
		ep := eps[0].(map[string]any)
		if ep["scheme"] != "https" || ep["bearerTokenFile"] != "/var/run/secrets/kubernetes.io/serviceaccount/token" ||
			!reflect.DeepEqual(ep["tlsConfig"], map[string]any{"insecureSkipVerify": true}) {
			t.Errorf("%s: ServiceMonitor endpoint %v, want https with the bearer token and insecureSkipVerify", name, ep)
		}
		sel, _, _ := unstructured.NestedMap(sm.Object, "spec", "selector", "matchLabels")
		for k, v := range sel {
			if svc.Labels[k] != v {
				t.Errorf("%s: ServiceMonitor selector %s=%v does not match the Service labels %v", name, k, v, svc.Labels)
			}
		}
	}
	if n := mustRenderMonitored(t, with(with(requiredValues(), "metrics.serviceMonitor.enabled", false), "gatewayMonitoring.prometheusRule.enabled", false)).count("ServiceMonitor"); n != 0 {
		t.Errorf("metrics.serviceMonitor.enabled=false rendered %d ServiceMonitors", n)
	}
	// auto without the Service: nothing to scrape, so no ServiceMonitor; the alert rules
	// then lack the operator's series and say so, unless told the job of another scrape.
	noSvcAuto := with(requiredValues(), "metrics.service.enabled", false)
	if _, _, err := renderChart(t, noSvcAuto, renderOpts{apiVersions: monitoringAPIs}); err == nil || !strings.Contains(err.Error(), "operatorJob") {
		t.Errorf("rules without the operator's ServiceMonitor: want an error naming operatorJob, got %v", err)
	}
	ownScrape := mustRenderMonitored(t, with(noSvcAuto, "gatewayMonitoring.prometheusRule.operatorJob", "my-operator-scrape"))
	if n := ownScrape.count("ServiceMonitor"); n != 0 {
		t.Errorf("auto without the metrics Service rendered %d ServiceMonitors", n)
	}
	if ownScrape.count("PrometheusRule") != 1 {
		t.Error("no PrometheusRule with operatorJob given")
	}

	noSvc := with(with(requiredValues(), "metrics.serviceMonitor.enabled", true), "metrics.service.enabled", false)
	if _, _, err := renderChart(t, noSvc, renderOpts{}); err == nil || !strings.Contains(err.Error(), "metrics.service.enabled") {
		t.Errorf("ServiceMonitor without Service: want an error naming metrics.service.enabled, got %v", err)
	}
}

func TestNotes(t *testing.T) {
	r := mustRender(t, requiredValues())
	for _, s := range []string{"internalSourceCIDRs is empty", "restarts every gateway pod", "Multus", "bnerd-vpn-clusterlinks",
		"pod-security.kubernetes.io/enforce=privileged", "kubectl vpn check --operator-namespace " + releaseNS,
		"needs member and reader", "CredentialsRoleMissing", "openstack-roles.md"} {
		if !strings.Contains(r.notes, s) {
			t.Errorf("NOTES do not mention %q:\n%s", s, r.notes)
		}
	}
	withCIDRs := mustRender(t, with(requiredValues(), "internalSourceCIDRs", []any{"10.0.0.0/24"}))
	if strings.Contains(withCIDRs.notes, "internalSourceCIDRs is empty") {
		t.Error("NOTES warn about empty internalSourceCIDRs although they are set")
	}
}

// A missing or malformed value stops the install with a message that names it.
func TestSchemaRefusesBadValues(t *testing.T) {
	cases := []struct {
		name  string
		vals  map[string]any
		wants []string
	}{
		{"no router", without(requiredValues(), "router"), []string{"router"}},
		{"empty router", with(requiredValues(), "router", ""), []string{"/router"}},
		{"no external network", without(requiredValues(), "externalNetwork"), []string{"externalNetwork"}},
		{"no credential secret", without(requiredValues(), "openstack.credentials.secretName"), []string{"secretName"}},
		{"no openstack section", without(requiredValues(), "openstack"), []string{"openstack"}},
		{"clouds.yaml without cloud", with(requiredValues(), "openstack.credentials.format", "cloudsYaml"), []string{"cloud"}},
		{"unknown credential format", with(requiredValues(), "openstack.credentials.format", "file"), []string{"format"}},
		{"bad internal CIDR", with(requiredValues(), "internalSourceCIDRs", []any{"10.0.0.0/24", "10.1.0.1"}), []string{"internalSourceCIDRs"}},
		{"internal CIDRs as a string", with(requiredValues(), "internalSourceCIDRs", "10.0.0.0/24"), []string{"internalSourceCIDRs"}},
		{"bad pool", with(requiredValues(), "serviceCIDRPool", "100.64.0.0"), []string{"serviceCIDRPool"}},
		{"network policy switch as a string", with(requiredValues(), "gatewayNetworkPolicy.enabled", "false"), []string{"gatewayNetworkPolicy/enabled"}},
		{"bad resync interval", with(requiredValues(), "resyncInterval", "5 minutes"), []string{"resyncInterval"}},
		{"numeric image tag", with(requiredValues(), "images.gateway.tag", 0.3), []string{"images/gateway/tag"}},
		{"bad credentials namespace", with(requiredValues(), "clusterLink.credentialsNamespace", "Creds_NS"), []string{"credentialsNamespace"}},
		{"negative node grace", with(requiredValues(), "nodeNotReadyGrace", "-5s"), []string{"nodeNotReadyGrace"}},
		{"liveness timeout without a unit", with(requiredValues(), "gatewayLivenessTimeout", "6"), []string{"gatewayLivenessTimeout"}},
		{"negative node maximum", with(requiredValues(), "nodeMaxGateways", -1), []string{"nodeMaxGateways"}},
		{"negative OpenStack QPS", with(requiredValues(), "openstack.qps", -1), []string{"openstack/qps"}},
		{"OpenStack timeout without a unit", with(requiredValues(), "openstack.timeout", "30"), []string{"openstack/timeout"}},
		{"unknown OpenStack key", with(requiredValues(), "openstack.rateLimit", 10), []string{"openstack", "rateLimit"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := renderChart(t, tc.vals, renderOpts{})
			if err == nil {
				t.Fatal("the install was accepted")
			}
			msg := err.Error()
			if !strings.Contains(msg, "schema") {
				t.Errorf("refused, but not by values.schema.json: %v", err)
			}
			for _, w := range tc.wants {
				if !strings.Contains(msg, w) {
					t.Errorf("the error does not name %q: %v", w, err)
				}
			}
			t.Logf("%v", err)
		})
	}
}

// With --skip-schema-validation the templates still refuse the required values.
func TestTemplatesRequireValuesWithoutSchema(t *testing.T) {
	cases := map[string]map[string]any{
		"router is required":                           without(requiredValues(), "router"),
		"externalNetwork is required":                  without(requiredValues(), "externalNetwork"),
		"openstack.credentials.secretName is required": without(requiredValues(), "openstack.credentials.secretName"),
		"openstack.credentials.cloud is required":      with(requiredValues(), "openstack.credentials.format", "cloudsYaml"),
	}
	for want, vals := range cases {
		_, _, err := renderChart(t, vals, renderOpts{skipSchema: true})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want an error %q, got %v", want, err)
		}
	}
}

func TestKubeVersionConstraint(t *testing.T) {
	old := &chartutil.KubeVersion{Version: "v1.30.9", Major: "1", Minor: "30"}
	_, _, err := renderChart(t, requiredValues(), renderOpts{kube: old})
	if err == nil || !strings.Contains(err.Error(), "kubeVersion") {
		t.Errorf("Kubernetes 1.30 (no CEL ip()/cidr() in new expressions) must be refused by kubeVersion, got %v", err)
	}
}

// The pod-level pass-through values land where Kubernetes reads them.
func TestPodValuesPassThrough(t *testing.T) {
	vals := requiredValues()
	vals = with(vals, "nodeSelector", map[string]any{"node-role.kubernetes.io/infra": ""})
	vals = with(vals, "tolerations", []any{map[string]any{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}})
	vals = with(vals, "affinity", map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
		"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "zone", "operator": "In", "values": []any{"a"}}}}}}}})
	vals = with(vals, "priorityClassName", "system-cluster-critical")
	vals = with(vals, "podAnnotations", map[string]any{"example.com/a": "1"})
	vals = with(vals, "podLabels", map[string]any{"team": "net"})
	vals = with(vals, "imagePullSecrets", []any{map[string]any{"name": "regcred"}})
	vals = with(vals, "resources", map[string]any{"limits": map[string]any{"memory": "512Mi"}})
	vals = with(vals, "serviceAccount", map[string]any{"name": "vpn-op", "annotations": map[string]any{"example.com/sa": "x"}})
	vals = with(vals, "extraArgs", []any{"--zap-devel"})
	vals = with(vals, "extraEnv", []any{map[string]any{"name": "OS_INTERFACE", "value": "internal"}})
	vals = with(vals, "logLevel", "debug")
	vals = with(vals, "images.operator.pullPolicy", "Always")
	r := mustRender(t, vals)
	d, c := r.operator(t)
	pod := d.Spec.Template

	if pod.Spec.NodeSelector["node-role.kubernetes.io/infra"] != "" || len(pod.Spec.NodeSelector) != 1 {
		t.Errorf("nodeSelector %v", pod.Spec.NodeSelector)
	}
	if len(pod.Spec.Tolerations) != 1 || pod.Spec.Tolerations[0].Key != "infra" || pod.Spec.Tolerations[0].Effect != corev1.TaintEffectNoSchedule {
		t.Errorf("tolerations %+v", pod.Spec.Tolerations)
	}
	if a := pod.Spec.Affinity; a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		t.Errorf("affinity %+v", a)
	}
	if pod.Spec.PriorityClassName != "system-cluster-critical" {
		t.Errorf("priorityClassName %q", pod.Spec.PriorityClassName)
	}
	if pod.Annotations["example.com/a"] != "1" || pod.Labels["team"] != "net" {
		t.Errorf("pod annotations %v labels %v", pod.Annotations, pod.Labels)
	}
	if len(pod.Spec.ImagePullSecrets) != 1 || pod.Spec.ImagePullSecrets[0].Name != "regcred" {
		t.Errorf("imagePullSecrets %+v", pod.Spec.ImagePullSecrets)
	}
	// Helm merges maps with the defaults, so the default requests stay.
	if q := c.Resources.Limits[corev1.ResourceMemory]; q.String() != "512Mi" || c.Resources.Requests.Cpu().String() != "50m" {
		t.Errorf("resources %+v", c.Resources)
	}
	if pod.Spec.ServiceAccountName != "vpn-op" {
		t.Errorf("serviceAccountName %q", pod.Spec.ServiceAccountName)
	}
	sa := r.find(t, "ServiceAccount", releaseNS, "vpn-op")
	if sa.GetAnnotations()["example.com/sa"] != "x" {
		t.Errorf("ServiceAccount annotations %v", sa.GetAnnotations())
	}
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		for _, o := range r.objs {
			if o.GetKind() != kind {
				continue
			}
			b := convert[rbacv1.RoleBinding](t, o) // same subject shape for both kinds
			if len(b.Subjects) != 1 || b.Subjects[0].Name != "vpn-op" {
				t.Errorf("%s %s binds %+v, not the renamed ServiceAccount", kind, o.GetName(), b.Subjects)
			}
		}
	}
	if !slices.Contains(c.Args, "--zap-devel") || !slices.Contains(c.Args, "--zap-log-level=debug") {
		t.Errorf("args %q", c.Args)
	}
	if envMap(t, c)["OS_INTERFACE"].Value != "internal" {
		t.Error("extraEnv OS_INTERFACE missing")
	}
	if c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("pullPolicy %q", c.ImagePullPolicy)
	}

	off := with(with(requiredValues(), "rbac.create", false), "metrics.service.enabled", false)
	ro := mustRender(t, off)
	for _, kind := range []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service"} {
		if n := ro.count(kind); n != 0 {
			t.Errorf("rbac.create=false, metrics.service.enabled=false still rendered %d %s", n, kind)
		}
	}
	port := mustRender(t, with(requiredValues(), "metrics.service.port", 9090))
	svc := convert[corev1.Service](t, port.find(t, "Service", releaseNS, fullname+"-metrics"))
	if svc.Spec.Ports[0].Port != 9090 || svc.Spec.Ports[0].TargetPort.StrVal != "metrics" {
		t.Errorf("metrics.service.port=9090 gave %+v", svc.Spec.Ports)
	}
}
