package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// syncBuffer is a bytes.Buffer the process writes and the test reads concurrently.
type syncBuffer struct {
	mu chan struct{}
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu <- struct{}{}
	defer func() { <-s.mu }()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu <- struct{}{}
	defer func() { <-s.mu }()
	return s.b.String()
}

// TestOperatorBinaryWithCloudsYAML runs the operator program as a user would, with its
// OpenStack credential in a clouds.yaml (OS_CLOUD, OS_CLIENT_CONFIG_FILE) and its
// configuration in the environment: it authenticates, reconciles a ClusterLink to Ready
// against the simulator, never prints the credential's secret, and stops on SIGTERM.
func TestOperatorBinaryWithCloudsYAML(t *testing.T) {
	testenv.Need(t)
	if testing.Short() {
		t.Skip("builds and runs the operator; skipped in -short mode")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bnerd-vpn-operator")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	seed, err := openstacksim.LoadSeed(filepath.Join(testenv.RepoRoot(), "examples", "sim-estate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	os1, err := openstacksim.Start(seed)
	if err != nil {
		t.Fatal(err)
	}
	defer os1.Close()
	id, secret, ok := os1.AppCredential("vpn-operator")
	if !ok {
		t.Fatal("seed lacks the vpn-operator credential")
	}
	clouds := fmt.Sprintf(`clouds:
  estate:
    auth_type: v3applicationcredential
    region_name: %s
    auth:
      auth_url: %s
      application_credential_id: %s
      application_credential_secret: %s
`, os1.Region(), os1.AuthURL(), id, secret)
	cloudsPath := filepath.Join(dir, "clouds.yaml")
	if err := os.WriteFile(cloudsPath, []byte(clouds), 0o600); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := env.WriteKubeConfig(dir)
	if err != nil {
		t.Fatal(err)
	}

	out := &syncBuffer{mu: make(chan struct{}, 1)}
	cmd := exec.Command(bin, "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0")
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"KUBECONFIG=" + kubeconfig,
		"OS_CLOUD=estate",
		"OS_CLIENT_CONFIG_FILE=" + cloudsPath,
		"IPSEC_GATEWAY_NETWORK=vpn-transit",
		"IPSEC_EXTERNAL_NETWORK=public",
		"IPSEC_ROUTER_ID=shoot--services--vpn01",
		"POD_NAMESPACE=default",
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
	}()

	ctx := context.Background()
	link := &v1alpha1.ClusterLink{
		ObjectMeta: metav1.ObjectMeta{Name: "binary-svc01"},
		Spec:       v1alpha1.ClusterLinkSpec{ServiceClusterRouter: "shoot--services--svc01", ServiceClusterCIDR: "10.251.0.0/16"},
	}
	if err := env.Client.Create(ctx, link); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute) // a generous bound, not a latency assertion
	for {
		cur := &v1alpha1.ClusterLink{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(link), cur); err != nil {
			t.Fatal(err)
		}
		if meta.IsStatusConditionTrue(cur.Status.Conditions, v1alpha1.ConditionReady) {
			if cur.Status.TransitIP == "" {
				t.Fatalf("Ready without a transit IP: %+v", cur.Status)
			}
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("operator exited: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("ClusterLink not Ready (conditions %+v); operator output:\n%s", cur.Status.Conditions, out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := env.Client.Delete(ctx, link); err != nil {
		t.Fatal(err)
	}

	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("operator did not stop on SIGTERM\n%s", out.String())
	}
	logs := out.String()
	if !strings.Contains(logs, "authenticated to OpenStack") {
		t.Errorf("no authentication line in the log:\n%s", logs)
	}
	// The start-up check of the transit network's sharing ran (and found it private).
	if !strings.Contains(logs, "the transit network is not shared with every project") {
		t.Errorf("no transit network check at start in the log:\n%s", logs)
	}
	if strings.Contains(logs, secret) {
		t.Error("the application credential secret reached the operator's output")
	}
}
