package peerconfig

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// goldens returns the peer-config golden files of a format (internal/kubectlvpn/peerconfig's
// TestGolden keeps them equal to what the renderer writes).
func goldens(t *testing.T, format string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "internal", "kubectlvpn", "peerconfig", "testdata", "*-"+format+".golden"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no %s golden files: %v", format, err)
	}
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = string(b)
	}
	return out
}

// TestStrongSwanSyntax has strongSwan's own parser read every strongSwan output: each
// golden file loads with `swanctl --load-all` into a real charon (its connections
// accepted by charon, not only by swanctl's file parser). A key charon does not know
// is refused, so the check is not vacuous.
func TestStrongSwanSyntax(t *testing.T) {
	requirements(t)
	e := newEnv(t, "ops")
	dir := e.Dir
	e.AddNS("p")
	e.StartCharon("p", gatewayconfig.DataplaneLibipsec)
	load := func(name, text string) (string, error) {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return e.Swanctl("p", "--load-all", "--noprompt", "--file", f)
	}
	for name, text := range goldens(t, "strongswan") {
		out, err := load(name, text)
		if err != nil || !strings.Contains(out, "successfully loaded 1 connections,") {
			t.Errorf("%s: charon does not load it: %v\n%s", name, err, out)
		}
	}
	bad := "connections {\n  x {\n    remote_addrs = 192.0.2.1\n    rekey_tme = 1h\n    local { auth = psk }\n    remote { auth = psk }\n  }\n}\n"
	if out, err := load("bad.conf", bad); err == nil && !strings.Contains(out, "unknown") && !strings.Contains(out, "failed") {
		t.Errorf("negative control: an unknown key loaded without complaint:\n%s", out)
	}
}

// libreswanClients builds (once, cached) or finds the libreswan 4.10 and 5.2 trees
// hack/vm/libreswan.sh makes for the VM, and returns their root directories by suite.
func libreswanClients(t *testing.T) map[string]string {
	t.Helper()
	testenv.NeedRoot(t, "the libreswan checks need root (chroot into the clients' trees)")
	for _, b := range []string{"debootstrap", "chroot"} {
		if _, err := exec.LookPath(b); err != nil {
			testenv.SkipDataplane(t, "the libreswan checks need "+b+" (hack/vm/libreswan.sh)")
		}
	}
	out, err := exec.Command("bash", filepath.Join(testenv.RepoRoot(), "hack", "vm", "libreswan.sh")).Output()
	if err != nil {
		t.Fatalf("hack/vm/libreswan.sh: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	return map[string]string{"4.10": filepath.Join(dir, "root", "bookworm"), "5.2": filepath.Join(dir, "root", "trixie")}
}

// lswAllowedWarning is the one diagnostic libreswan 5 prints for the output: it ignores
// dpdaction=, which 4.x needs to restart a dead connection.
var lswAllowedWarning = regexp.MustCompile(`(?m)^ipsec addconn: \S+: warning: obsolete keyword ignored: dpdaction=restart\n?`)

// inChroot runs a command in a libreswan tree with file written to its /tmp.
func inChroot(t *testing.T, root, file, content string, args ...string) (string, error) {
	t.Helper()
	rnd := make([]byte, 4)
	_, _ = rand.Read(rnd)
	d := filepath.Join("/tmp", "bnerd-check-"+hex.EncodeToString(rnd))
	if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(filepath.Join(root, d))
	if file != "" {
		if err := os.WriteFile(filepath.Join(root, d, file), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "@FILE@", filepath.Join(d, file))
	}
	out, err := exec.Command("chroot", append([]string{root}, args...)...).CombinedOutput()
	return string(out), err
}

var reLswKV = regexp.MustCompile(`(?m)^\t(ike|esp|pfs)=(\S+)$`)

// TestLibreswanSyntax has both libreswan versions' own parsers read every libreswan
// output: `addconn --checkconfig` parses the file with every keyword and value (it exits
// non-zero on an unknown keyword or a bad value, as the negative controls show), and
// `algparse` parses the ike= and esp= proposals with the algorithm tables pluto uses.
// Loading the output into a running pluto is the VM test's part (TestLibreswanClient).
func TestLibreswanSyntax(t *testing.T) {
	clients := libreswanClients(t)
	for version, root := range clients {
		addconn := func(name, text string) (string, error) {
			return inChroot(t, root, name, text, "/usr/libexec/ipsec/addconn", "--checkconfig", "--config", "@FILE@")
		}
		for name, text := range goldens(t, "libreswan") {
			out, err := addconn(name, text)
			if rest := lswAllowedWarning.ReplaceAllString(out, ""); err != nil || strings.TrimSpace(rest) != "" {
				t.Errorf("libreswan %s: addconn --checkconfig on %s: %v\n%s", version, name, err, out)
			}
			// Options first: algparse reads the rest as proposals.
			args, props := []string{"/usr/libexec/ipsec/algparse", "-v2"}, []string{}
			for _, m := range reLswKV.FindAllStringSubmatch(text, -1) {
				if m[1] == "pfs" {
					args = append(args, "-pfs="+m[2])
				} else {
					props = append(props, m[1]+"="+m[2])
				}
			}
			args = append(args, props...)
			out, err = inChroot(t, root, "", "", args...)
			if err != nil || strings.Contains(out, "ERROR") || strings.Contains(out, "ignoring") || strings.Count(out, "algparse") != 2 {
				t.Errorf("libreswan %s: algparse on %s's proposals: %v\n%s", version, name, err, out)
			}
			t.Logf("libreswan %s reads %s: %s", version, name, strings.Join(strings.Fields(out), " "))
		}
		// Negative controls: the parsers refuse what they do not know.
		if out, err := addconn("bad.conf", "conn x\n\tleft=192.0.2.1\n\tright=192.0.2.2\n\trekeymargn=1m\n"); err == nil {
			t.Errorf("libreswan %s: addconn accepted an unknown keyword:\n%s", version, out)
		}
		if out, err := inChroot(t, root, "", "", "/usr/libexec/ipsec/algparse", "-v2", "ike=aes_gcm256-sha2_384-dh27"); err == nil {
			t.Errorf("libreswan %s: algparse accepted a Brainpool group:\n%s", version, out)
		}
	}
}
