package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// TestDeploymentArgsParse checks the contract between the operator and this binary: every
// container of the Deployment the operator renders starts a role of this agent with flags
// the role defines. Each container's args are run with -h appended: the flag package
// stops with exit status 0 at -h only if every flag before it was accepted, and fails
// with "flag provided but not defined" otherwise.
func TestDeploymentArgsParse(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent; skipped in -short mode")
	}
	bin := filepath.Join(t.TempDir(), "vpn-gateway-agent")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	d, err := render.Deployment(render.Workload{
		Gateway:  render.Gateway{APIVersion: "ipsec.bnerd.net/v1alpha1", Kind: "IPsecGateway", Resource: "ipsecgateways", Namespace: "tenant-a", Name: "acme"},
		NodeName: "node-a", PortMAC: "fa:16:3e:00:00:01", GatewayImage: "gw", AgentImage: "agent",
	})
	if err != nil {
		t.Fatal(err)
	}
	containers := d.Spec.Template.Spec.Containers
	if len(containers) != 4 {
		t.Fatalf("want the four containers of the spec, got %d", len(containers))
	}
	for _, c := range containers {
		if len(c.Command) != 0 {
			t.Errorf("%s: the image's entrypoint is the agent; a command would bypass it", c.Name)
		}
		if len(c.Args) == 0 {
			t.Errorf("%s: no role", c.Name)
			continue
		}
		out, err := exec.Command(bin, append(append([]string{}, c.Args...), "-h")...).CombinedOutput()
		if err != nil || strings.Contains(string(out), "not defined") || strings.Contains(string(out), "usage: vpn-gateway-agent <role>") {
			t.Errorf("%s: %v does not parse: %v\n%s", c.Name, c.Args, err, out)
		}
	}
}

// TestInitNATRefusesWithoutForwarding runs the real binary's init-nat in a fresh network
// namespace without a port device, where forwarding cannot be had: it must exit non-zero
// with a line naming forwarding and the device, before reading any config, so the pod's
// state shows the cause.
func TestInitNATRefusesWithoutForwarding(t *testing.T) {
	testenv.SkipUnit(t, "builds the agent")
	testenv.NeedRoot(t, "needs root for a network namespace")
	if _, err := exec.LookPath("unshare"); err != nil {
		testenv.SkipDataplane(t, "needs unshare (util-linux)")
	}
	bin := filepath.Join(t.TempDir(), "vpn-gateway-agent")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	// The config file does not exist: reaching the config source would be a bug too.
	out, err := exec.Command("unshare", "--net", bin, "init-nat", "--guard=xfrm", "--config-file", filepath.Join(t.TempDir(), "gateway.json")).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("init-nat did not fail: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "forwarding") || !strings.Contains(string(out), "net1") {
		t.Errorf("the refusal does not name forwarding on net1:\n%s", out)
	}
}

// TestInitNATTurnsForwardingOn runs the real binary's init-nat in a fresh network
// namespace that has a port device but forwards nothing (as a pod on a host whose initial
// namespace does not forward): init-nat turns forwarding on for the device itself and
// keeps running instead of refusing.
func TestInitNATTurnsForwardingOn(t *testing.T) {
	testenv.SkipUnit(t, "builds the agent")
	testenv.NeedRoot(t, "needs root for a network namespace")
	bin := filepath.Join(t.TempDir(), "vpn-gateway-agent")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ns := fmt.Sprintf("bn-agent-fwd-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	if out, err := exec.Command("ip", "-n", ns, "link", "add", "net1", "type", "veth", "peer", "name", "net1-peer").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	read := func() string {
		out, _ := exec.Command("ip", "netns", "exec", ns, "cat", "/proc/sys/net/ipv4/conf/net1/forwarding").Output()
		return strings.TrimSpace(string(out))
	}
	if got := read(); got != "0" {
		t.Fatalf("net1 forwards before init-nat (%q): the test would prove nothing", got)
	}
	// No config file: after the forwarding step init-nat waits for one, until killed.
	cmd := exec.Command("ip", "netns", "exec", ns, bin, "init-nat", "--guard=xfrm", "--config-file", filepath.Join(t.TempDir(), "gateway.json"))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for read() != "1" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("init-nat exited (%v) although it could turn forwarding on:\n%s", err, out.String())
	case <-time.After(500 * time.Millisecond):
	}
	_ = cmd.Process.Kill()
	<-done
	if got := read(); got != "1" {
		t.Errorf("net1 forwarding is %q after init-nat started", got)
	}
}
