package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// On a Neutron without an extension it needs, the operator does not start: it exits
// with a message naming the missing extensions, before it touches the cluster.
func TestOperatorRefusesNeutronWithoutRequiredExtensions(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the operator; skipped in -short mode")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bnerd-vpn-operator")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	seed, err := openstacksim.LoadSeed(filepath.Join(testenv.RepoRoot(), "examples", "sim-estate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	seed.NeutronExtensions = slices.DeleteFunc(slices.Clone(openstacksim.ZedNeutronExtensions), func(a string) bool {
		return a == "standard-attr-tag" || a == "allowed-address-pairs"
	})
	srv, err := openstacksim.Start(seed)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	id, secret, _ := srv.AppCredential("vpn-operator")
	cmd := exec.Command(bin, "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0")
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		// No cluster at all: the refusal comes first.
		"KUBECONFIG=" + filepath.Join(dir, "no-such-kubeconfig"),
		"OS_AUTH_URL=" + srv.AuthURL(), "OS_REGION_NAME=" + srv.Region(),
		"OS_APPLICATION_CREDENTIAL_ID=" + id, "OS_APPLICATION_CREDENTIAL_SECRET=" + secret,
		"IPSEC_GATEWAY_NETWORK=vpn-transit", "IPSEC_EXTERNAL_NETWORK=public",
		"IPSEC_ROUTER_ID=shoot--services--vpn01", "POD_NAMESPACE=default",
	}
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("the operator did not exit")
	}
	msg := string(out)
	if err == nil {
		t.Fatalf("the operator started on a Neutron without standard-attr-tag: %s", msg)
	}
	for _, want := range []string{"Neutron lacks required extensions", "standard-attr-tag", "allowed-address-pairs"} {
		if !strings.Contains(msg, want) {
			t.Errorf("output lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, secret) {
		t.Error("the output carries the credential's secret")
	}
}
