package openstacksim

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
)

// TestCommandServesTheSeed builds cmd/openstack-sim, runs it on the example
// estate, authenticates with the environment it prints and stops it by PID.
func TestCommandServesTheSeed(t *testing.T) {
	// The test builds the command with the go tool that runs the tests.
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		t.Fatalf("the go tool of this test run (%s) is missing: %v", gobin, err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "openstack-sim")
	if out, err := exec.Command(gobin, "build", "-o", bin, "bnerd.net/vpn-operator/cmd/openstack-sim").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ready := filepath.Join(dir, "env")
	clouds := filepath.Join(dir, "clouds.yaml")
	cmd := exec.Command(bin, "--seed", estatePath, "--credential", "vpn-operator", "--ready-file", ready, "--clouds-yaml", clouds)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// A file, not a buffer: the child writes it while the test reads it.
	errFile, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer errFile.Close()
	cmd.Stderr = errFile
	stderr := func() string {
		b, _ := os.ReadFile(errFile.Name())
		return string(b)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	exited := false
	t.Cleanup(func() {
		if !exited {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
	})

	env := map[string]string{}
	var printed strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		printed.WriteString(line + "\n")
		kv, ok := strings.CutPrefix(line, "export ")
		if !ok {
			t.Fatalf("unexpected stdout line %q", line)
		}
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
		if k == "OS_APPLICATION_CREDENTIAL_SECRET" {
			break
		}
	}
	if env["OS_APPLICATION_CREDENTIAL_SECRET"] == "" {
		t.Fatalf("no credential printed; stderr:\n%s", stderr())
	}
	if env["OS_AUTH_TYPE"] != "v3applicationcredential" || env["OS_REGION_NAME"] != "RegionOne" ||
		!strings.HasPrefix(env["OS_AUTH_URL"], "http://127.0.0.1:") {
		t.Fatalf("env %v", env)
	}
	if b, err := os.ReadFile(ready); err != nil || string(b) != printed.String() {
		t.Fatalf("ready file %q (%v) differs from stdout %q", b, err, printed.String())
	}
	if fi, err := os.Stat(clouds); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("clouds.yaml: %v %v", fi, err)
	}

	for k, v := range env {
		t.Setenv(k, v)
	}
	opts, err := openstack.AuthOptionsFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	pc, err := openstack.AuthenticatedClient(ctx(), opts)
	if err != nil {
		t.Fatalf("authenticate with printed env: %v", err)
	}
	nc, err := openstack.NewNetworkV2(pc, gophercloud.EndpointOpts{Region: env["OS_REGION_NAME"]})
	if err != nil {
		t.Fatal(err)
	}
	pages, err := networks.List(nc, networks.ListOpts{Name: "vpn-transit"}).AllPages(ctx())
	if err != nil {
		t.Fatal(err)
	}
	nets, _ := networks.ExtractNetworks(pages)
	if len(nets) != 1 {
		t.Fatalf("vpn-transit via subprocess: %+v", nets)
	}
	if strings.Contains(stderr(), env["OS_APPLICATION_CREDENTIAL_SECRET"]) {
		t.Fatal("secret logged on stderr")
	}

	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	exited = true
	if err != nil {
		t.Fatalf("exit after SIGTERM: %v; stderr:\n%s", err, stderr())
	}
}
