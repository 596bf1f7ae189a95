package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// The operator refuses to start with a credential that lacks a role it needs, naming the
// role, before it touches the cluster: member everywhere; reader where the cloud has the
// secure-RBAC policy defaults and its Keystone puts only the credential's own roles into
// the token (Zed's Keystone with the new defaults switched on: member alone sees nothing
// of its own project). 2025.1's Keystone adds the reader member implies, so member alone
// passes there. A member credential without reader on a cloud that runs the legacy
// defaults starts, with a warning. The real clouds show the same (test/openstack
// TestLeastRoles).
func TestOperatorRefusesCredentialWithoutNeededRole(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the operator; skipped in -short mode")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bnerd-vpn-operator")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cases := []struct {
		name       string
		secureRBAC bool
		implied    bool // Keystone adds implied roles to the token (2025.1)
		credential string
		refused    bool
		mustSay    []string
		mustNotSay []string
	}{
		{"secure RBAC, token without implied roles, member only", true, false, "vpn-operator-member-only", true,
			[]string{"lacks the reader role", "secure-RBAC", "default security group is hidden"}, nil},
		{"secure RBAC, reader only", true, true, "vpn-operator-readonly", true,
			[]string{"lacks the member role"}, nil},
		{"legacy policy, reader only", false, false, "vpn-operator-readonly", true,
			[]string{"lacks the member role"}, nil},
		{"legacy policy, member only", false, false, "vpn-operator-member-only", false,
			[]string{"WARNING: the credential lacks the reader role"}, []string{"checking the operator's OpenStack roles"}},
		{"2025.1: secure RBAC, token with implied roles, member only", true, true, "vpn-operator-member-only", false,
			nil, []string{"lacks the", "checking the operator's OpenStack roles"}},
		// The negative control: the estate's credential carries both and passes.
		{"secure RBAC, member and reader", true, false, "vpn-operator", false,
			nil, []string{"lacks the", "checking the operator's OpenStack roles"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seed, err := openstacksim.LoadSeed(filepath.Join(testenv.RepoRoot(), "examples", "sim-estate.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			seed.SecureRBAC, seed.LegacyPolicy, seed.ImpliedRoles = tc.secureRBAC, !tc.secureRBAC, tc.implied
			srv, err := openstacksim.Start(seed)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			id, secret, ok := srv.AppCredential(tc.credential)
			if !ok {
				t.Fatalf("the estate lacks %s", tc.credential)
			}
			cmd := exec.Command(bin, "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0")
			cmd.Env = []string{
				"PATH=" + os.Getenv("PATH"),
				// No cluster at all: a refusal comes first; a start fails for want of one.
				"KUBECONFIG=" + filepath.Join(dir, "no-such-kubeconfig"),
				"OS_AUTH_URL=" + srv.AuthURL(), "OS_REGION_NAME=" + srv.Region(),
				"OS_APPLICATION_CREDENTIAL_ID=" + id, "OS_APPLICATION_CREDENTIAL_SECRET=" + secret,
				"IPSEC_GATEWAY_NETWORK=vpn-transit", "IPSEC_EXTERNAL_NETWORK=public",
				"IPSEC_ROUTER_ID=shoot--services--vpn01", "POD_NAMESPACE=default",
			}
			done := make(chan struct{})
			var out []byte
			go func() { out, _ = cmd.CombinedOutput(); close(done) }()
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
				_ = cmd.Process.Kill()
				t.Fatal("the operator did not exit")
			}
			msg := string(out)
			if refused := strings.Contains(msg, "checking the operator's OpenStack roles"); refused != tc.refused {
				t.Errorf("refused at the role check: %v, want %v:\n%s", refused, tc.refused, msg)
			}
			// Past the role check the operator reads Neutron's extensions, then fails for
			// want of a cluster.
			if !tc.refused && !strings.Contains(msg, "Neutron extensions") {
				t.Errorf("the operator did not get past the role check:\n%s", msg)
			}
			for _, want := range tc.mustSay {
				if !strings.Contains(msg, want) {
					t.Errorf("output lacks %q:\n%s", want, msg)
				}
			}
			for _, not := range tc.mustNotSay {
				if strings.Contains(msg, not) {
					t.Errorf("output has %q:\n%s", not, msg)
				}
			}
			if strings.Contains(msg, secret) {
				t.Error("the output carries the credential's secret")
			}
		})
	}
}
