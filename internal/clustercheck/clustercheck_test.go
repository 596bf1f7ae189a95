package clustercheck_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/clustercheck"
	"bnerd.net/vpn-operator/internal/kubectlvpn/cli"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	testenv.Main(m, &env)
}

const serverA = "11111111-1111-4111-8111-111111111111"

// world is a cluster set up as docs/install.md asks, with the simulator seeded with
// examples/sim-estate.yaml as its OpenStack.
type world struct {
	t                  *testing.T
	ctx                context.Context
	opNS, gwNS         string
	sim                *openstacksim.Server
	appID, appSecret   string
	os                 *openstack.Clients
	opts               clustercheck.Options
	node, deployment   string
	nadCRD, pullSecret string
}

func seed(t *testing.T, mutate func(*openstacksim.Seed)) *openstacksim.Server {
	t.Helper()
	sd, err := openstacksim.LoadSeed(filepath.Join(testenv.RepoRoot(), "examples", "sim-estate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if mutate != nil {
		mutate(sd)
	}
	s, err := openstacksim.Start(sd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func healthyWorld(t *testing.T, s *openstacksim.Server) *world {
	t.Helper()
	testenv.Need(t)
	ctx := context.Background()
	n := time.Now().UnixNano() % 100000
	w := &world{t: t, ctx: ctx, sim: s, opNS: fmt.Sprintf("check-op-%d", n), gwNS: fmt.Sprintf("check-gw-%d", n),
		node: fmt.Sprintf("check-node-%d", n), deployment: "bnerd-vpn-operator", pullSecret: "regcred"}
	var ok bool
	if w.appID, w.appSecret, ok = s.AppCredential("vpn-operator"); !ok {
		t.Fatal("no vpn-operator application credential in the seed")
	}
	c := env.Client
	mk := func(o client.Object) {
		t.Helper()
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), o) })
	}
	mk(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.opNS}})
	mk(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.gwNS, Labels: map[string]string{clustercheck.PodSecurityEnforce: "privileged"}}})
	mk(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.opNS, Name: "operator-openstack"}, Data: map[string][]byte{
		"OS_AUTH_URL": []byte(s.AuthURL()), "OS_REGION_NAME": []byte(s.Region()),
		"OS_APPLICATION_CREDENTIAL_ID": []byte(w.appID), "OS_APPLICATION_CREDENTIAL_SECRET": []byte(w.appSecret),
	}})
	mk(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.gwNS, Name: w.pullSecret}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)}})
	// The operator's Deployment as the chart renders it (the parts the check reads).
	one := int32(1)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.opNS, Name: w.deployment, Labels: map[string]string{"app.kubernetes.io/name": "bnerd-vpn-operator"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "bnerd-vpn-operator"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app.kubernetes.io/name": "bnerd-vpn-operator"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "operator", Image: "example.org/operator:1",
					Env: []corev1.EnvVar{
						{Name: "IPSEC_ROUTER_ID", Value: "shoot--services--vpn01"},
						{Name: "IPSEC_EXTERNAL_NETWORK", Value: "public"},
						{Name: "IPSEC_GATEWAY_NETWORK", Value: "vpn-transit"},
						{Name: "IPSEC_GATEWAY_POD", Value: `{"imagePullSecrets":[{"name":"regcred"}]}`},
					},
					EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "operator-openstack"}}}},
				}}},
			},
		},
	}
	mk(d)
	w.setAvailable(1)
	mk(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: w.node}, Spec: corev1.NodeSpec{ProviderID: "openstack:///" + serverA}})
	w.setNodeReady()
	psk := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.gwNS, Name: "hq-psk"}, StringData: map[string]string{"psk": "a test key of more than twenty bytes"}}
	mk(psk)
	mk(&v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: w.gwNS, Name: "acme"}, Spec: v1alpha1.GatewaySpec{
		Tunnels: []v1alpha1.Tunnel{{Name: "hq", Peer: v1alpha1.Peer{Address: "198.51.100.7", Subnets: []string{"192.168.10.0/24"}},
			PreSharedKey: v1alpha1.SecretKeyRef{Name: "hq-psk"}}}}})
	// Cilium, set as the operator needs it.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cilium-config"}, Data: map[string]string{"cni-exclusive": "false"}}
	if err := c.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), cm) })
	var err error
	w.os, err = openstack.NewClients(ctx, openstack.Credential{AuthURL: s.AuthURL(), Region: s.Region(), AppCredentialID: w.appID, AppCredentialSecret: w.appSecret},
		openstack.ClientOptions{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w.opts = clustercheck.Options{OperatorNamespace: w.opNS}
	return w
}

func (w *world) setAvailable(n int32) {
	w.t.Helper()
	var d appsv1.Deployment
	if err := env.Client.Get(w.ctx, client.ObjectKey{Namespace: w.opNS, Name: w.deployment}, &d); err != nil {
		w.t.Fatal(err)
	}
	d.Status.Replicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas = 1, n, n
	if err := env.Client.Status().Update(w.ctx, &d); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) setNodeReady() {
	w.t.Helper()
	var n corev1.Node
	if err := env.Client.Get(w.ctx, client.ObjectKey{Name: w.node}, &n); err != nil {
		w.t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(), Reason: "Test"}}
	if err := env.Client.Status().Update(w.ctx, &n); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) run() *clustercheck.Report {
	w.t.Helper()
	return clustercheck.Run(w.ctx, clustercheck.Sources{Kube: env.Client, OpenStack: w.os}, w.opts)
}

// cli runs `kubectl vpn check` as a user does, with the OS_* variables of the
// operator's credential, and returns its output and exit code.
func (w *world) cli(args ...string) (string, int) {
	w.t.Helper()
	var out, errOut bytes.Buffer
	envVars := map[string]string{"OS_AUTH_URL": w.sim.AuthURL(), "OS_REGION_NAME": w.sim.Region(),
		"OS_APPLICATION_CREDENTIAL_ID": w.appID, "OS_APPLICATION_CREDENTIAL_SECRET": w.appSecret}
	cmd := cli.NewCommand(cli.IO{Out: &out, Err: &errOut, Getenv: func(k string) string { return envVars[k] }}, env.Config)
	cmd.SetArgs(append([]string{"check", "--operator-namespace", w.opNS}, args...))
	err := cmd.Execute()
	return out.String() + errOut.String(), cli.Code(err)
}

// On a cluster set up as docs/install.md asks, every check passes, from the library and
// from the plugin (exit 0), and nothing of the credential's secret is printed.
func TestHealthyCluster(t *testing.T) {
	w := healthyWorld(t, seed(t, nil))
	rep := w.run()
	for _, c := range rep.Checks {
		if c.Status != clustercheck.Pass {
			t.Errorf("%s: %s %s (fix: %s)", c.ID, c.Status, c.Detail, c.Fix)
		}
	}
	if !rep.Healthy() {
		t.Error("the report of a healthy cluster is not healthy")
	}
	for _, id := range []string{"crds", "multus", "cilium", "operator", "credential", "podsecurity", "pull-secrets", "nodes",
		"openstack.auth", "openstack.extensions", "openstack.quotas", "openstack.transit-network", "openstack.router", "openstack.external-network"} {
		if rep.Get(id) == nil {
			t.Errorf("no check %s", id)
		}
	}
	out, code := w.cli()
	if code != cli.ExitOK || !strings.Contains(out, "The cluster meets every prerequisite checked.") {
		t.Errorf("kubectl vpn check on a healthy cluster: exit %d\n%s", code, out)
	}
	if strings.Contains(out, w.appSecret) {
		t.Error("the output shows the credential's secret")
	}
	// Without an OpenStack credential the check says it is incomplete (exit 2), unless
	// asked to skip OpenStack.
	var buf bytes.Buffer
	cmd := cli.NewCommand(cli.IO{Out: &buf, Err: &buf, Getenv: func(string) string { return "" }}, env.Config)
	cmd.SetArgs([]string{"check", "--operator-namespace", w.opNS})
	if code := cli.Code(cmd.Execute()); code != cli.ExitIncomplete || !strings.Contains(buf.String(), "no OpenStack credential") {
		t.Errorf("without an OpenStack credential: exit %d\n%s", code, buf.String())
	}
	buf.Reset()
	cmd = cli.NewCommand(cli.IO{Out: &buf, Err: &buf, Getenv: func(string) string { return "" }}, env.Config)
	cmd.SetArgs([]string{"check", "--operator-namespace", w.opNS, "--skip-openstack", "-o", "json"})
	if code := cli.Code(cmd.Execute()); code != cli.ExitOK || !strings.Contains(buf.String(), `"id": "openstack.quotas"`) {
		t.Errorf("--skip-openstack -o json: exit %d\n%s", code, buf.String())
	}
}

// Each missing or wrong prerequisite is found and named with its fix, one at a time on
// the healthy cluster, and the plugin exits 1 and says what is missing.
func TestBrokenCluster(t *testing.T) {
	w := healthyWorld(t, seed(t, nil))
	c := env.Client
	expect := func(id string, st clustercheck.Status, words ...string) {
		t.Helper()
		rep := w.run()
		got := rep.Get(id)
		if got == nil || got.Status != st {
			t.Errorf("%s: got %+v, want %s", id, got, st)
			return
		}
		for _, word := range words {
			if !strings.Contains(got.Detail+" "+got.Fix, word) {
				t.Errorf("%s: %q does not say %q", id, got.Detail+" fix: "+got.Fix, word)
			}
		}
		for _, other := range rep.Checks {
			if other.ID != id && other.Status != clustercheck.Pass {
				t.Errorf("%s broken, but %s is %s too: %s", id, other.ID, other.Status, other.Detail)
			}
		}
		out, code := w.cli()
		if code != cli.ExitProblem || !strings.Contains(out, "Missing or wrong") || !strings.Contains(out, id) || strings.Contains(out, w.appSecret) {
			t.Errorf("%s: kubectl vpn check exit %d\n%s", id, code, out)
		}
	}
	update := func(o client.Object, mutate func()) {
		t.Helper()
		if err := c.Get(w.ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatal(err)
		}
		mutate()
		if err := c.Update(w.ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.gwNS}}
	update(ns, func() { ns.Labels[clustercheck.PodSecurityEnforce] = "baseline" })
	expect("podsecurity", clustercheck.Fail, w.gwNS+" (baseline)", "kubectl label namespace "+w.gwNS+" pod-security.kubernetes.io/enforce=privileged --overwrite")
	update(ns, func() { delete(ns.Labels, clustercheck.PodSecurityEnforce) })
	expect("podsecurity", clustercheck.Warn, "default level")
	update(ns, func() { ns.Labels[clustercheck.PodSecurityEnforce] = "privileged" })

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cilium-config"}}
	update(cm, func() { delete(cm.Data, "cni-exclusive") })
	expect("cilium", clustercheck.Fail, "Cilium's default: true", "cni-exclusive")
	update(cm, func() { cm.Data = map[string]string{"cni-exclusive": "false"} })

	w.setAvailable(0)
	expect("operator", clustercheck.Fail, "no available replica", "CreateContainerConfigError")
	w.setAvailable(1)

	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.opNS, Name: "operator-openstack"}}
	update(sec, func() { delete(sec.Data, "OS_APPLICATION_CREDENTIAL_SECRET") })
	expect("credential", clustercheck.Fail, "missing OS_APPLICATION_CREDENTIAL_SECRET")
	if err := c.Delete(w.ctx, sec); err != nil {
		t.Fatal(err)
	}
	expect("credential", clustercheck.Fail, "does not exist", "create secret generic operator-openstack")
	sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.opNS, Name: "operator-openstack"}, Data: map[string][]byte{
		"OS_AUTH_URL": []byte(w.sim.AuthURL()), "OS_APPLICATION_CREDENTIAL_ID": []byte(w.appID), "OS_APPLICATION_CREDENTIAL_SECRET": []byte(w.appSecret)}}
	if err := c.Create(w.ctx, sec); err != nil {
		t.Fatal(err)
	}

	if err := c.Delete(w.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.gwNS, Name: w.pullSecret}}); err != nil {
		t.Fatal(err)
	}
	expect("pull-secrets", clustercheck.Fail, w.gwNS+"/"+w.pullSecret)
	if err := c.Create(w.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.gwNS, Name: w.pullSecret}}); err != nil {
		t.Fatal(err)
	}

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: w.node}}
	update(node, func() {
		node.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}}
	})
	expect("nodes", clustercheck.Fail, "no node can take a gateway", "taint")
	update(node, func() { node.Spec.Taints = nil })

	// The operator is told a router and a transit network that do not exist.
	w.opts.Router, w.opts.GatewayNetwork = "no-such-router", "no-such-network"
	rep := w.run()
	if r := rep.Get("openstack.router"); r.Status != clustercheck.Fail || !strings.Contains(r.Detail, "no-such-router") {
		t.Errorf("router: %+v", r)
	}
	if r := rep.Get("openstack.transit-network"); r.Status != clustercheck.Fail || !strings.Contains(r.Detail, "no-such-network") {
		t.Errorf("transit network: %+v", r)
	}
	w.opts.Router, w.opts.GatewayNetwork = "", ""

	// A NetworkAttachmentDefinition CRD removed: Multus is not there.
	nad := readCRD(t, filepath.Join(testenv.RepoRoot(), "config", "thirdparty", "k8s.cni.cncf.io_network-attachment-definitions.yaml"))
	if err := c.Delete(w.ctx, nad.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { restoreCRD(t, nad) })
	waitGone(t, nad.GetName())
	expect("multus", clustercheck.Fail, "Multus is not installed")
	restoreCRD(t, nad)

	crd := readCRD(t, filepath.Join(testenv.RepoRoot(), "config", "crd", "ipsec.bnerd.net_clusterlinks.yaml"))
	if err := c.Delete(w.ctx, crd.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { restoreCRD(t, crd) })
	waitGone(t, crd.GetName())
	expect("crds", clustercheck.Fail, "clusterlinks.ipsec.bnerd.net", "crds.enabled")
	restoreCRD(t, crd)
}

// The OpenStack side of a broken cloud: a Neutron without a required extension, and a
// project whose floating IP quota is used up.
func TestBrokenCloud(t *testing.T) {
	s := seed(t, func(sd *openstacksim.Seed) {
		var exts []string
		for _, e := range openstacksim.DefaultNeutronExtensions {
			if e != openstack.ExtStandardAttrTag {
				exts = append(exts, e)
			}
		}
		sd.NeutronExtensions = exts
		for i := range sd.Projects {
			if sd.Projects[i].Name == "vpn-operator" {
				sd.Projects[i].Quotas["floatingip"] = 0
				sd.Projects[i].Quotas["security_group"] = 3
			}
		}
	})
	w := healthyWorld(t, s)
	rep := w.run()
	if c := rep.Get("openstack.extensions"); c.Status != clustercheck.Fail || !strings.Contains(c.Detail, openstack.ExtStandardAttrTag) {
		t.Errorf("extensions: %+v", c)
	}
	if c := rep.Get("openstack.quotas"); c.Status != clustercheck.Fail || !strings.Contains(c.Detail, "floatingip exhausted") || !strings.Contains(c.Detail, "floatingip 0 of 0 used") {
		t.Errorf("quotas: %+v", c)
	}
	out, code := w.cli()
	if code != cli.ExitProblem || !strings.Contains(out, "openstack quota set") {
		t.Errorf("kubectl vpn check exit %d\n%s", code, out)
	}
}

func readCRD(t *testing.T, path string) *unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096).Decode(&u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

func waitGone(t *testing.T, name string) {
	t.Helper()
	if err := testenv.WaitCRDGone(context.Background(), env.Client, name, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// restoreCRD creates the CRD again (once a deletion has finished; nothing when it is
// there) and waits until it is established.
func restoreCRD(t *testing.T, crd *unstructured.Unstructured) {
	t.Helper()
	live := &unstructured.Unstructured{}
	live.SetAPIVersion("apiextensions.k8s.io/v1")
	live.SetKind("CustomResourceDefinition")
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: crd.GetName()}, live); err != nil || live.GetDeletionTimestamp() != nil {
		waitGone(t, crd.GetName())
		if err := env.Client.Create(context.Background(), crd.DeepCopy()); err != nil {
			t.Fatalf("creating CRD %s again: %v", crd.GetName(), err)
		}
	}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("apiextensions.k8s.io/v1")
		u.SetKind("CustomResourceDefinition")
		if err := env.Client.Get(ctx, client.ObjectKey{Name: crd.GetName()}, u); err != nil {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("CRD %s not established again", crd.GetName())
	}
}
