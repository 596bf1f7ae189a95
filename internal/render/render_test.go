package render

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/gatewaypod"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var gw = Gateway{
	APIVersion: "ipsec.bnerd.net/v1alpha1",
	Kind:       "IPsecGateway",
	Resource:   "ipsecgateways",
	Namespace:  "tenant-a",
	Name:       "acme",
	UID:        "3f1c2b1e-0000-4000-8000-000000000001",
}

func golden(t *testing.T, name string, obj any) {
	t.Helper()
	got, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from %s (run with -update if intended):\n--- got\n%s\n--- want\n%s", name, path, got, want)
	}
}

func testConfig(t *testing.T, exposures ...v1alpha1.Exposure) *gatewayconfig.Config {
	t.Helper()
	spec := &v1alpha1.GatewaySpec{
		Tunnels: []v1alpha1.Tunnel{{
			Name:         "hq",
			Peer:         v1alpha1.Peer{Address: "198.51.100.7", Subnets: []string{"192.168.10.0/24"}},
			PreSharedKey: v1alpha1.SecretKeyRef{Name: "acme-psk", Key: "psk"},
		}},
		Exposures: exposures,
	}
	st := &v1alpha1.GatewayStatus{
		ServiceCIDR: "100.64.3.0/24", ServiceCIDRGatewayAddress: "100.64.3.1",
		FloatingIP: "192.0.2.44", PortFixedIP: "10.254.0.17", SubnetCIDR: "10.254.0.0/24", SubnetGatewayIP: "10.254.0.1",
	}
	for i, e := range exposures {
		st.Exposures = append(st.Exposures, v1alpha1.AllocatedAddress{Name: e.Name, VirtualIP: fmt.Sprintf("100.64.3.%d", 10+i)})
	}
	cfg, err := gatewayconfig.Build(gatewayconfig.Input{Kind: gw.Kind, Namespace: gw.Namespace, Name: gw.Name, Spec: spec, Status: st})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func workload() Workload {
	return Workload{Gateway: gw, NodeName: "node-a", PortMAC: "fa:16:3e:00:00:01",
		GatewayImage: "example.org/strongswan:1", AgentImage: "example.org/agent:1"}
}

func TestGolden(t *testing.T) {
	cm, err := ConfigMap(gw, testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "configmap", cm)
	nad, err := NAD(gw, "", NADInput{MACAddress: "fa:16:3e:00:00:01", FixedIP: "10.254.0.17", SubnetCIDR: "10.254.0.0/24", SubnetGatewayIP: "10.254.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "nad", nad.Object)
	golden(t, "serviceaccount", ServiceAccount(gw))
	golden(t, "role", Role(gw, v1alpha1.GroupVersion.Group, "acme-psk", "branch-psk"))
	golden(t, "rolebinding", RoleBinding(gw))
	d, err := Deployment(workload())
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "deployment", d)
	wg := workload()
	wg.WireGuardImage = "example.org/wireguard:1"
	d, err = WireGuardDeployment(wg)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "deployment-wireguard", d)
	golden(t, "networkpolicy", NetworkPolicy(gw, "bnerd-vpn-system"))
	golden(t, "networkpolicy-no-operator-namespace", NetworkPolicy(gw, ""))
}

func TestDeploymentShape(t *testing.T) {
	d, err := Deployment(workload())
	if err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Fatal("one replica, Recreate")
	}
	ps := d.Spec.Template.Spec
	// Pinned, but bound by the operator (not started by the kubelet at once): no
	// nodeName, the operator as scheduler, the node by name in the required affinity.
	if ps.NodeName != "" || ps.SchedulerName != SchedulerName || PinnedNode(&ps) != "node-a" || ps.NodeSelector != nil {
		t.Fatalf("pin to node-a for the operator's binding expected: nodeName %q scheduler %q affinity %+v", ps.NodeName, ps.SchedulerName, ps.Affinity)
	}
	names := []string{}
	for _, c := range ps.Containers {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != "init-nat,strongswan,status-agent,ipsec-exporter" {
		t.Fatalf("containers %v", names)
	}
	if !hasCap(ps.Containers[0], "NET_ADMIN") {
		t.Fatal("init-nat needs NET_ADMIN")
	}
	if ps.Containers[3].Ports[0].ContainerPort != 9903 {
		t.Fatal("exporter on 9903")
	}
	if !strings.Contains(d.Spec.Template.Annotations[AnnotationNetworks], `"name":"acme-nic2"`) {
		t.Fatalf("multus annotation %q", d.Spec.Template.Annotations[AnnotationNetworks])
	}
	if _, err := Deployment(Workload{Gateway: gw}); err == nil {
		t.Fatal("a deployment without a node must be refused")
	}
}

// The pod's hardening: seccomp at the pod level; the status agent and the exporter run
// as another user than root, without capabilities, on a read-only root file system;
// only the status agent, which talks to the API server, gets the ServiceAccount token;
// charon's directory reaches charon and the status agent only; the exporter binds the
// pod's own address and reads the shared volume read-only; no rendered Secret is
// mounted (review findings L1, L2).
func TestDeploymentHardening(t *testing.T) {
	d, err := Deployment(workload())
	if err != nil {
		t.Fatal(err)
	}
	checkHardening(t, d.Spec.Template.Spec, map[string]bool{ContainerStatus: true})
	ps := d.Spec.Template.Spec
	checkInPod(t, ps, "state")
	// charon's directory (configuration and VICI socket): charon and the status agent.
	for _, c := range ps.Containers {
		mounts := false
		for _, m := range c.VolumeMounts {
			mounts = mounts || m.Name == "run"
		}
		if want := c.Name == ContainerStrongswan || c.Name == ContainerStatus; mounts != want {
			t.Errorf("%s: mounts charon's directory %v, want %v", c.Name, mounts, want)
		}
	}
	if !slices.Contains(byNameOf(ps)[ContainerStrongswan].Args, "--private-dir") {
		t.Errorf("charon must close its directory: %v", byNameOf(ps)[ContainerStrongswan].Args)
	}
	byName := map[string]corev1.Container{}
	for _, c := range ps.Containers {
		byName[c.Name] = c
	}
	if !slices.Contains(byName[ContainerStatus].Args, "--load") {
		t.Errorf("the status agent must load charon with keys it reads itself: %v", byName[ContainerStatus].Args)
	}
	for _, v := range ps.Volumes {
		if v.Secret != nil {
			t.Errorf("volume %s mounts a Secret; the agent reads keys through the API", v.Name)
		}
	}
}

// TestWireGuardDeploymentHardening: the WireGuard pod is hardened as the IPsec one; the
// status agent alone reads the ConfigMap through the API and holds the token, and the
// only Secret mounted is the key, into the wireguard container alone.
func TestWireGuardDeploymentHardening(t *testing.T) {
	w := workload()
	w.WireGuardImage = "example.org/wireguard:1"
	d, err := WireGuardDeployment(w)
	if err != nil {
		t.Fatal(err)
	}
	ps := d.Spec.Template.Spec
	checkHardening(t, ps, map[string]bool{ContainerStatus: true})
	checkInPod(t, ps, "run")
	for _, c := range ps.Containers {
		for _, m := range c.VolumeMounts {
			if m.Name == "wireguard-key" && c.Name != ContainerWireGuard {
				t.Errorf("%s mounts the WireGuard key", c.Name)
			}
		}
		if c.Name == ContainerWireGuard && !slices.Equal(c.SecurityContext.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "MKNOD"}) {
			t.Errorf("wireguard: capabilities %v, want NET_ADMIN and MKNOD only", c.SecurityContext.Capabilities.Add)
		}
	}
}

func byNameOf(ps corev1.PodSpec) map[string]corev1.Container {
	out := map[string]corev1.Container{}
	for _, c := range ps.Containers {
		out[c.Name] = c
	}
	return out
}

// checkInPod: only the status agent reads the configuration through the API (the
// others read its copy on the shared volume), the exporter mounts that volume
// read-only and runs outside root's group.
func checkInPod(t *testing.T, ps corev1.PodSpec, shared string) {
	t.Helper()
	for _, c := range ps.Containers {
		fromAPI := slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--configmap=") })
		fromFile := slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--config-file=") })
		if c.Name == ContainerStatus {
			if !fromAPI || !slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--publish-config=") }) {
				t.Errorf("the status agent must read the ConfigMap and publish it: %v", c.Args)
			}
			continue
		}
		if c.Name != ContainerStrongswan && (fromAPI || !fromFile) {
			t.Errorf("%s must read the status agent's copy of the configuration, not the API: %v", c.Name, c.Args)
		}
		for _, m := range c.VolumeMounts {
			if c.Name == ContainerExporter && m.Name == shared && !m.ReadOnly {
				t.Errorf("the exporter mounts %s writable", shared)
			}
		}
	}
	exp := byNameOf(ps)[ContainerExporter]
	if exp.SecurityContext.RunAsGroup == nil || *exp.SecurityContext.RunAsGroup == 0 {
		t.Errorf("the exporter runs in root's group")
	}
	if slices.ContainsFunc(exp.Args, func(a string) bool { return strings.HasPrefix(a, "--vici-socket") }) {
		t.Errorf("the exporter must not use VICI: %v", exp.Args)
	}
}

// checkHardening: seccomp, no automounted token, no host namespace, all capabilities
// dropped but those added, no privilege escalation, the token exactly in the containers
// of withToken, the status agent and the exporter unprivileged, the exporter on the pod
// IP.
func checkHardening(t *testing.T, ps corev1.PodSpec, withToken map[string]bool) {
	t.Helper()
	if ps.SecurityContext == nil || ps.SecurityContext.SeccompProfile == nil || ps.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("the pod must run with the RuntimeDefault seccomp profile")
	}
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
		t.Error("the token must not be mounted into every container")
	}
	if ps.HostNetwork || ps.HostPID || ps.HostIPC {
		t.Error("no host namespace")
	}
	byName := map[string]corev1.Container{}
	for _, c := range ps.Containers {
		byName[c.Name] = c
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Privileged != nil && *sc.Privileged {
			t.Errorf("%s: privilege escalation must be off", c.Name)
		}
		if sc == nil || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("%s: every capability not added must be dropped", c.Name)
		}
		hasToken := false
		for _, m := range c.VolumeMounts {
			if m.MountPath == ServiceAccountMountPath {
				hasToken = m.ReadOnly
			}
		}
		if wantToken := withToken[c.Name]; hasToken != wantToken {
			t.Errorf("%s: ServiceAccount token mounted = %v, want %v", c.Name, hasToken, wantToken)
		}
	}
	for _, name := range []string{ContainerStatus, ContainerExporter} {
		sc := byName[name].SecurityContext
		if sc.RunAsUser == nil || *sc.RunAsUser == 0 || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("%s must not run as root", name)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s must have a read-only root file system", name)
		}
		if len(sc.Capabilities.Add) != 0 {
			t.Errorf("%s must have no capability, has %v", name, sc.Capabilities.Add)
		}
	}
	exp := byName[ContainerExporter]
	if !slices.Contains(exp.Args, "--listen=$(POD_IP):9903") || len(exp.Env) != 1 || exp.Env[0].ValueFrom.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("the exporter must listen on the pod IP only: %v %v", exp.Args, exp.Env)
	}
}

// Regression (found on the real node, whose kernel has no ESP): the dataplane selects
// charon's backend and the matching guard, and libipsec's TUN device needs CAP_MKNOD in
// the strongswan container only.
func TestDeploymentDataplane(t *testing.T) {
	args := func(c corev1.Container) string { return strings.Join(c.Args, " ") }
	for _, tc := range []struct {
		mode                gatewayconfig.DataplaneMode
		charonArg, guardArg string
		mknod               bool
	}{
		{"", "--dataplane=kernel", "--guard=xfrm", false},
		{gatewayconfig.DataplaneKernel, "--dataplane=kernel", "--guard=xfrm", false},
		{gatewayconfig.DataplaneLibipsec, "--dataplane=libipsec", "--guard=interface --tunnel-interface=ipsec0", true},
	} {
		w := workload()
		w.Dataplane = tc.mode
		d, err := Deployment(w)
		if err != nil {
			t.Fatal(err)
		}
		cs := d.Spec.Template.Spec.Containers
		if !strings.Contains(args(cs[1]), tc.charonArg) || !strings.Contains(args(cs[0]), tc.guardArg) {
			t.Errorf("%q: charon %q, init-nat %q", tc.mode, args(cs[1]), args(cs[0]))
		}
		if hasCap(cs[1], "MKNOD") != tc.mknod {
			t.Errorf("%q: strongswan MKNOD=%v", tc.mode, hasCap(cs[1], "MKNOD"))
		}
		for _, c := range []corev1.Container{cs[0], cs[2], cs[3]} {
			if hasCap(c, "MKNOD") {
				t.Errorf("%s must not get MKNOD", c.Name)
			}
		}
	}
	w := workload()
	w.Dataplane = "wireguard"
	if _, err := Deployment(w); err == nil {
		t.Error("an unknown dataplane was rendered")
	}
}

func hasCap(c corev1.Container, cp corev1.Capability) bool {
	for _, a := range c.SecurityContext.Capabilities.Add {
		if a == cp {
			return true
		}
	}
	return false
}

// An exposure change reaches the pod through the ConfigMap only: the pod template must
// not depend on anything an exposure changes.
func TestExposureChangeLeavesPodTemplateAlone(t *testing.T) {
	before, _ := ConfigMap(gw, testConfig(t))
	after, _ := ConfigMap(gw, testConfig(t, v1alpha1.Exposure{Name: "web", Target: v1alpha1.Target{Address: "10.250.0.20", Ports: []v1alpha1.PortSpec{{Port: 443}}}}))
	if Covers(before.Data, after.Data) {
		t.Fatal("the ConfigMap must change with an exposure")
	}
	d1, _ := Deployment(workload())
	d2, _ := Deployment(workload())
	if !Covers(d1.Spec.Template, d2.Spec.Template) {
		t.Fatal("deployment is not deterministic")
	}
	w := workload()
	w.NodeName = "node-b"
	d3, _ := Deployment(w)
	if Covers(d1.Spec.Template, d3.Spec.Template) {
		t.Fatal("a node change must change the pod template")
	}
}

func TestNADTemplate(t *testing.T) {
	in := NADInput{MACAddress: "fa:16:3e:00:00:01", FixedIP: "10.254.0.17"}
	custom := `{"cniVersion":"0.4.0","name":"{{.Name}}","type":"host-device","hwaddr":"{{.MACAddress}}","ipam":{"type":"static","addresses":[{"address":"{{.FixedIP}}/32"}],"routes":[{"dst":"{{.SubnetCIDR}}"}]}}`
	in.SubnetCIDR = "10.254.0.0/24"
	u, err := NAD(gw, custom, in)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, _ := unstructuredString(u.Object, "spec", "config")
	if !strings.Contains(cfg, `"dst":"10.254.0.0/24"`) || !strings.Contains(cfg, `"name":"acme-nic2"`) {
		t.Fatalf("config %s", cfg)
	}
	if _, err := NAD(gw, `{"name": {{.Nope}}}`, in); err == nil {
		t.Fatal("an unknown template field must fail")
	}
	if _, err := NAD(gw, `not json {{.Name}}`, in); err == nil {
		t.Fatal("non-JSON output must fail")
	}
	if _, err := NAD(gw, "", NADInput{MACAddress: `fa:16:3e:00:00:01", "x": "`, FixedIP: "10.254.0.17"}); err == nil {
		t.Fatal("a MAC that is not a MAC must be refused before it reaches the template")
	}
	if _, err := NAD(gw, "", NADInput{MACAddress: "fa:16:3e:00:00:01", FixedIP: "10.254.0.17/24"}); err == nil {
		t.Fatal("a fixed IP that is not an address must be refused")
	}
}

func unstructuredString(obj map[string]any, fields ...string) (string, bool, error) {
	var cur any = obj
	for _, f := range fields {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		cur = m[f]
	}
	s, ok := cur.(string)
	return s, ok, nil
}

func TestCovers(t *testing.T) {
	d, _ := Deployment(workload())
	live := d.DeepCopy()
	// Server defaults and foreign annotations are not drift.
	live.Spec.Template.Spec.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent
	live.Spec.Template.Spec.DNSPolicy = corev1.DNSClusterFirst
	live.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] = "now"
	if !Covers(d.Spec, live.Spec) {
		t.Fatal("defaults counted as drift")
	}
	live.Spec.Template.Spec.Containers[1].Image = "tampered"
	if Covers(d.Spec, live.Spec) {
		t.Fatal("changed image not detected")
	}
	live = d.DeepCopy()
	live.Spec.Template.Spec.Containers = append(live.Spec.Template.Spec.Containers, corev1.Container{Name: "extra"})
	if Covers(d.Spec, live.Spec) {
		t.Fatal("extra container not detected")
	}
	if !Covers(map[string]string{"a": "1"}, map[string]string{"a": "1", "b": "2"}) {
		t.Fatal("label subset")
	}
	if Covers(map[string]string{"a": "1"}, map[string]string{"a": "2"}) {
		t.Fatal("label change")
	}
}

// Every gateway pod (IPsec with either dataplane, WireGuard) takes the platform's shape:
// by default each container has requests and a memory limit (the pod is Burstable, never
// BestEffort), and a shape's priority class, tolerations, pull secrets, labels and
// annotations land on the pod without touching the operator's own labels. The list of
// containers a shape may name is exactly the containers rendered.
func TestGatewayPodShape(t *testing.T) {
	shape, err := gatewaypod.Parse(`{"priorityClassName":"vpn-gateways","tolerations":[{"key":"dedicated","operator":"Equal","value":"vpn","effect":"NoSchedule"}],
		"imagePullSecrets":[{"name":"regcred"}],"labels":{"team":"net"},"annotations":{"example.com/owner":"platform"},
		"resources":{"wireguard":{"requests":{"cpu":"1","memory":"64Mi"},"limits":{"memory":"512Mi"}}}}`)
	if err != nil {
		t.Fatal(err)
	}
	rendered := map[string]bool{}
	for _, tc := range []struct {
		name   string
		render func(Workload) (*appsv1.Deployment, error)
		mode   gatewayconfig.DataplaneMode
	}{
		{"ipsec kernel", Deployment, gatewayconfig.DataplaneKernel},
		{"ipsec libipsec", Deployment, gatewayconfig.DataplaneLibipsec},
		{"wireguard", WireGuardDeployment, ""},
	} {
		for _, s := range []gatewaypod.Shape{{}, shape} {
			w := workload()
			w.WireGuardImage, w.Dataplane, w.Pod = "example.org/wireguard:1", tc.mode, s
			d, err := tc.render(w)
			if err != nil {
				t.Fatal(err)
			}
			ps := d.Spec.Template.Spec
			for _, c := range ps.Containers {
				rendered[c.Name] = true
				if !slices.Contains(gatewaypod.Containers, c.Name) {
					t.Errorf("%s: container %s is not in gatewaypod.Containers", tc.name, c.Name)
				}
				if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
					t.Errorf("%s: container %s has resources %+v", tc.name, c.Name, c.Resources)
				}
			}
			if d.Spec.Template.Annotations[gatewaypod.AnnotationShape] != s.Hash() {
				t.Errorf("%s: the template records shape %q, want %q", tc.name, d.Spec.Template.Annotations[gatewaypod.AnnotationShape], s.Hash())
			}
			for k, v := range SelectorLabels(gw) {
				if d.Spec.Template.Labels[k] != v {
					t.Errorf("%s: selector label %s=%q lost", tc.name, k, d.Spec.Template.Labels[k])
				}
			}
			if s.PriorityClassName == "" {
				continue
			}
			if ps.PriorityClassName != "vpn-gateways" || len(ps.Tolerations) != 1 || len(ps.ImagePullSecrets) != 1 ||
				d.Spec.Template.Labels["team"] != "net" || d.Spec.Template.Annotations["example.com/owner"] != "platform" {
				t.Errorf("%s: the shape is not on the pod: %+v", tc.name, d.Spec.Template)
			}
			if PinnedNode(&ps) != "node-a" || ps.SchedulerName != SchedulerName || len(ps.NodeSelector) != 0 {
				t.Errorf("%s: pinned to %q, scheduler %q, nodeSelector %v: the pod stays pinned, with no selector that could fail it", tc.name, PinnedNode(&ps), ps.SchedulerName, ps.NodeSelector)
			}
			if tc.name == "wireguard" {
				for _, c := range ps.Containers {
					if c.Name == ContainerWireGuard && c.Resources.Limits.Memory().String() != "512Mi" {
						t.Errorf("wireguard limit %s", c.Resources.Limits.Memory())
					}
				}
			}
		}
	}
	for _, c := range gatewaypod.Containers {
		if !rendered[c] {
			t.Errorf("gatewaypod.Containers names %s, which no gateway pod has", c)
		}
	}
}
