package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/exporter"
	"bnerd.net/vpn-operator/internal/agent/statefile"
	"bnerd.net/vpn-operator/internal/agent/vici"
	"bnerd.net/vpn-operator/internal/kubectlvpn/diagnose"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	testenv.Main(m, &env)
}

// run executes the plugin's command tree against the test API server.
func run(t *testing.T, getenv map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := NewCommand(IO{Out: &out, Err: &errb, Getenv: func(k string) string { return getenv[k] }}, env.Config)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	if err != nil {
		errb.WriteString(err.Error())
	}
	return out.String(), errb.String(), Code(err)
}

func gatewayWithStatus(t *testing.T, ns, name string) *v1alpha1.IPsecGateway {
	t.Helper()
	ctx := context.Background()
	_ = env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	g := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.GatewaySpec{
		Tunnels: []v1alpha1.Tunnel{{Name: "hq", Peer: v1alpha1.Peer{Address: "198.51.100.7", Subnets: []string{"192.168.10.0/24"}},
			PreSharedKey: v1alpha1.SecretKeyRef{Name: name + "-psk", Key: "psk"},
			IKE:          v1alpha1.IKEOptions{Proposals: []string{"aes256-sha256-ecp384"}}}},
		Exposures: []v1alpha1.Exposure{{Name: "portal", Target: v1alpha1.Target{Address: "10.250.0.20", Ports: []v1alpha1.PortSpec{{Port: 443}}}}},
	}}
	if err := env.Client.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	g.Status = v1alpha1.GatewayStatus{ServiceCIDR: "100.64.9.0/24", FloatingIP: "203.0.113.44", NodeName: "cli-node",
		Exposures: []v1alpha1.AllocatedAddress{{Name: "portal", VirtualIP: "100.64.9.10"}},
		Tunnels:   []v1alpha1.TunnelState{{Name: "hq", State: "Up"}}, TunnelsReady: "1/1"}
	if err := env.Client.Status().Update(ctx, g); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestPeerConfigCommand(t *testing.T) {
	testenv.Need(t)
	ctx := context.Background()
	gatewayWithStatus(t, "cli-peer", "office")
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "cli-peer", Name: "office-psk"},
		Data: map[string][]byte{"psk": []byte("cli-test-key-4711")}}); err != nil {
		t.Fatal(err)
	}

	out, errs, code := run(t, nil, "peer-config", "office", "-n", "cli-peer", "--tunnel", "hq", "--format", "strongswan")
	if code != ExitOK || !strings.Contains(out, "remote_addrs = 203.0.113.44") || strings.Contains(out, "cli-test-key-4711") || !strings.Contains(out, "Secret cli-peer/office-psk") {
		t.Errorf("without --include-secret: exit %d\n%s\n%s", code, out, errs)
	}
	out, errs, code = run(t, nil, "peer-config", "office", "-n", "cli-peer", "--tunnel", "hq", "--format", "mikrotik", "--include-secret")
	if code != ExitOK || !strings.Contains(out, `secret="cli-test-key-4711"`) {
		t.Errorf("--include-secret: exit %d\n%s\n%s", code, out, errs)
	}
	_, errs, code = run(t, nil, "peer-config", "office", "-n", "cli-peer", "--tunnel", "hq", "--format", "wireguard")
	if code != ExitProblem || !strings.Contains(errs, "IPsec gateway") {
		t.Errorf("wireguard: exit %d %s", code, errs)
	}
	_, errs, code = run(t, nil, "peer-config", "office", "-n", "cli-peer", "--tunnel", "nope", "--format", "fortigate")
	if code != ExitProblem || !strings.Contains(errs, `no tunnel "nope"`) {
		t.Errorf("unknown tunnel: exit %d %s", code, errs)
	}
	_, errs, code = run(t, nil, "peer-config", "missing", "-n", "cli-peer", "--tunnel", "hq", "--format", "fortigate")
	if code != ExitIncomplete || !strings.Contains(errs, "no IPsecGateway or VPNGateway cli-peer/missing") {
		t.Errorf("unknown gateway: exit %d %s", code, errs)
	}
}

func TestMigrateCommand(t *testing.T) {
	testenv.Need(t)
	conf := filepath.Join(testenv.RepoRoot(), "internal", "kubectlvpn", "migrate", "testdata", "corpus", "ipsec-legacy.conf")
	secrets := filepath.Join(testenv.RepoRoot(), "internal", "kubectlvpn", "migrate", "testdata", "corpus", "ipsec-legacy.secrets")
	out, errs, code := run(t, nil, "migrate", "--from", conf, "--secrets", secrets, "--name", "legacy", "-n", "tenant-x", "--floating-ip", "203.0.113.20")
	if code != ExitOK || !strings.Contains(out, "kind: IPsecGateway") || !strings.Contains(out, "floatingIP: 203.0.113.20") || !strings.Contains(errs, "Not carried over") {
		t.Errorf("migrate: exit %d\n%s\n%s", code, out, errs)
	}
	if strings.Contains(out+errs, "corpus-legacy") {
		t.Error("a key leaked without --include-secrets")
	}
	out, _, code = run(t, nil, "migrate", "--from", conf, "--secrets", secrets, "--name", "legacy", "--dry-run", "--include-secrets")
	if code != ExitOK || strings.Contains(out, "kind:") || !strings.Contains(out, "conn oldpartner: keyexchange = ikev1") || strings.Contains(out, "corpus-legacy") {
		t.Errorf("--dry-run: exit %d\n%s", code, out)
	}
	file := filepath.Join(t.TempDir(), "gw.yaml")
	if _, errs, code = run(t, nil, "migrate", "--from", conf, "--secrets", secrets, "--name", "legacy", "--include-secrets", "--output-file", file); code != ExitOK {
		t.Fatalf("--output-file: exit %d %s", code, errs)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the manifest with keys must be mode 0600: %v %v", fi.Mode(), err)
	}
	bad := filepath.Join(t.TempDir(), "v1.conf")
	_ = os.WriteFile(bad, []byte("conn a\n  keyexchange=ikev1\n  right=198.51.100.1\n  rightsubnet=10.9.0.0/24\n"), 0o644)
	if _, errs, code = run(t, nil, "migrate", "--from", bad, "--name", "x"); code != ExitProblem || !strings.Contains(errs, "IKEv2 only") {
		t.Errorf("nothing to migrate: exit %d %s", code, errs)
	}
}

func TestDiagnoseCommandExitCodes(t *testing.T) {
	testenv.Need(t)
	gatewayWithStatus(t, "cli-diag", "fresh")
	// No conditions yet: a problem (exit 1), named.
	out, _, code := run(t, nil, "diagnose", "fresh", "-n", "cli-diag", "--skip-exporter")
	if code != ExitProblem || !strings.Contains(out, "PROBLEM: Condition Validated") {
		t.Errorf("exit %d\n%s", code, out)
	}
	out, _, code = run(t, nil, "diagnose", "fresh", "-n", "cli-diag", "-o", "json", "--skip-exporter")
	var rep diagnose.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != ExitProblem || rep.First() == nil {
		t.Errorf("json: exit %d %v\n%s", code, err, out)
	}
	// Without any OpenStack credential the report says so.
	if !strings.Contains(out, "no OpenStack credential") {
		t.Errorf("the missing credential is not named:\n%s", out)
	}
	_, errs, code := run(t, nil, "diagnose", "nope", "-n", "cli-diag")
	if code != ExitIncomplete || !strings.Contains(errs, "no IPsecGateway or VPNGateway") {
		t.Errorf("unknown gateway: exit %d %s", code, errs)
	}
	// A named cloud without a clouds.yaml is an unreadable credential, not a silent skip.
	out, _, _ = run(t, map[string]string{"OS_CLOUD": "prod", "OS_CLIENT_CONFIG_FILE": filepath.Join(t.TempDir(), "none.yaml")}, "diagnose", "fresh", "-n", "cli-diag", "--skip-exporter")
	if !strings.Contains(out, `cloud "prod" named but no clouds.yaml found`) {
		t.Errorf("clouds.yaml missing:\n%s", out)
	}
}

// The exporter is read the way the plugin reads it in a cluster: through the API
// server's pod proxy to the pod's IP and the exporter port, served by the real exporter
// collector. Needs root: the pod IP must be a local, non-loopback address (the API server
// refuses to proxy to loopback), so the test adds one on a veth pair it creates.
func TestDiagnoseReadsExporterThroughPodProxy(t *testing.T) {
	testenv.Need(t)
	testenv.NeedRoot(t, "the pod-proxy test needs root to add a pod address on a veth pair")
	rnd := make([]byte, 2)
	_, _ = rand.Read(rnd)
	a, b := "opv"+hex.EncodeToString(rnd), "opw"+hex.EncodeToString(rnd)
	const podIP = "10.213.77.1"
	sh := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", args, err, out)
		}
	}
	sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", a).Run() })
	sh("ip", "addr", "add", podIP+"/32", "dev", a)
	sh("ip", "link", "set", a, "up")
	sh("ip", "link", "set", b, "up")

	reg := prometheus.NewRegistry()
	nat := filepath.Join(t.TempDir(), "nat.json")
	if err := statefile.WriteNATState(nat, statefile.NATState{Applies: 7}); err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(&exporter.Collector{Tunnels: func() []string { return []string{"hq"} }, NATStateFile: nat,
		SAs: func(context.Context, []string) (map[string][]vici.IKESA, error) {
			return map[string][]vici.IKESA{"hq": {{Name: "hq", State: "ESTABLISHED", EstablishedSeconds: 60,
				Children: []vici.ChildSA{{Name: "hq", UniqueID: "1", State: "INSTALLED"}}}}}, nil
		}})
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // the address needs a moment to leave tentative state
		if ln, err = net.Listen("tcp", podIP+":9903"); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	ctx := context.Background()
	g := gatewayWithStatus(t, "cli-proxy", "office")
	d := render.SelectorLabels(render.Gateway{Kind: "IPsecGateway", Name: g.Name})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace, Name: "office-gateway-x", Labels: d},
		Spec: corev1.PodSpec{NodeName: "cli-node", Containers: []corev1.Container{{Name: render.ContainerExporter, Image: "x"}}}}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: podIP, PodIPs: []corev1.PodIP{{IP: podIP}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	out, _, _ := run(t, nil, "diagnose", "office", "-n", g.Namespace, "--skip-openstack", "-o", "json")
	var rep diagnose.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, c := range rep.Checks {
		if c.ID == "exporter" {
			if c.Status != diagnose.Pass || !strings.Contains(c.Detail, "NAT applied 7 times") {
				t.Errorf("exporter check through the pod proxy: %+v", c)
			}
			return
		}
	}
	t.Errorf("no exporter check:\n%s", out)
}
