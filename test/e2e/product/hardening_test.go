package product

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"bnerd.net/vpn-operator/internal/agent/nat"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testinfra/world"
)

// podHardened checks, on the real kubelet and containerd, what the rendered pod's
// security settings must become (docs/security.md, "The gateway pod is hardened"): read
// from the containers' processes on the host, not from the pod spec. The status agent
// and the exporter run as UID 65532 with no effective capability, no new privileges and
// a read-only root; the status agent alone has the ServiceAccount token; charon and
// init-nat run under seccomp without it; the exporter listens on the pod's address only
// and serves the tunnel from the status agent's state; a new connection from the
// client's subnet through the tunnel to the pod itself is dropped by the input chain.
func (e *env) podHardened(t *testing.T) {
	e.t = t
	pod, err := e.w.GatewayPod(e.ctx, world.TenantNamespace, "acme")
	if err != nil || pod == nil {
		t.Fatalf("the gateway pod: %v", err)
	}
	// The runtime resolves /var/run to /run in images where it is a link.
	tokenDirs := []string{render.ServiceAccountMountPath, strings.TrimPrefix(render.ServiceAccountMountPath, "/var")}
	for _, c := range []struct {
		name      string
		nonRoot   bool
		wantToken bool
	}{
		{render.ContainerInitNAT, false, false},
		{render.ContainerStrongswan, false, false},
		{render.ContainerStatus, true, true},
		{render.ContainerExporter, true, false},
	} {
		pid, err := e.w.PodPID(pod, c.name)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		st := procStatus(t, pid)
		if st["Seccomp"] != "2" {
			t.Errorf("%s: Seccomp %q, want 2 (filter: RuntimeDefault)", c.name, st["Seccomp"])
		}
		if st["NoNewPrivs"] != "1" {
			t.Errorf("%s: NoNewPrivs %q, want 1", c.name, st["NoNewPrivs"])
		}
		mounts, err := os.ReadFile(filepath.Join("/proc", pid, "mountinfo"))
		if err != nil {
			t.Fatal(err)
		}
		hasToken := false
		rootRO := false
		for _, l := range strings.Split(string(mounts), "\n") {
			f := strings.Fields(l)
			if len(f) < 6 {
				continue
			}
			if slices.Contains(tokenDirs, f[4]) {
				hasToken = true
			}
			if f[4] == "/" {
				rootRO = strings.HasPrefix(f[5], "ro")
			}
		}
		if hasToken != c.wantToken {
			t.Errorf("%s: ServiceAccount token mounted %v, want %v", c.name, hasToken, c.wantToken)
		}
		if !c.nonRoot {
			continue
		}
		if uid := strings.Fields(st["Uid"]); len(uid) < 2 || uid[1] != strconv.Itoa(render.AgentUID) {
			t.Errorf("%s: Uid %q, want 65532", c.name, st["Uid"])
		}
		if st["CapEff"] != "0000000000000000" || st["CapPrm"] != "0000000000000000" {
			t.Errorf("%s: CapEff %s CapPrm %s, want none", c.name, st["CapEff"], st["CapPrm"])
		}
		if !rootRO {
			t.Errorf("%s: the root file system is writable", c.name)
		}
	}
	// The exporter listens on the pod's own address and nowhere else.
	var listens string
	e.waitFor("the exporter listening", time.Minute, func() bool {
		listens, _ = e.w.InPod(pod, render.ContainerExporter, "ss", "-Hltn", "sport", "= :9903")
		return strings.TrimSpace(listens) != ""
	})
	for _, l := range strings.Split(strings.TrimSpace(listens), "\n") {
		f := strings.Fields(l)
		if len(f) < 4 || f[3] != podIP(pod)+":9903" {
			t.Errorf("the exporter listens on %q, want only %s:9903", l, podIP(pod))
		}
	}
	e.exporterServesTheTunnel(t, pod)
	e.containersStayInTheirLane(t, pod)
	e.clientCannotReachPod(t, pod)
}

// exporterServesTheTunnel scrapes the exporter, which reads the status agent's state
// file and no longer charon: the tunnel is up, charon answered, init-nat applied.
func (e *env) exporterServesTheTunnel(t *testing.T, pod *corev1.Pod) {
	url := "http://" + net.JoinHostPort(podIP(pod), strconv.Itoa(render.MetricsPort)) + "/metrics"
	var body string
	e.waitFor("the exporter serving tunnel_up 1 from the status agent's state", time.Minute, func() bool {
		body, _ = e.w.InPod(pod, render.ContainerExporter, "curl", "-s", "--max-time", "4", url)
		up := false
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "bnerd_ipsec_tunnel_up{") && strings.HasSuffix(l, "} 1") {
				up = true
			}
		}
		return up && strings.Contains(body, "\nbnerd_ipsec_vici_up 1\n")
	})
	for _, want := range []string{"bnerd_ipsec_child_sas{", "bnerd_gateway_nat_applies_total "} {
		if !strings.Contains(body, want) {
			t.Errorf("the exporter serves no %s:\n%s", want, body)
		}
	}
}

// containersStayInTheirLane tries, in each container of the gateway pod with that
// container's own user, groups and mounts (kubectl exec), what review findings L1 and
// L2 said it could do: reach charon's VICI socket, write or plant a link in charon's
// directory or the shared volume, read the API token. Each forbidden action must fail,
// and the allowed ones beside it succeed (the controls: the status agent reaches the
// socket and writes the shared volume; charon writes its own directory).
func (e *env) containersStayInTheirLane(t *testing.T, pod *corev1.Pod) {
	sock := render.RunMountPath + "/charon.vici"
	token := render.ServiceAccountMountPath + "/token"
	probe := func(container, script string) string {
		out, err := e.w.KubectlRun(e.ctx, "exec", "-n", world.TenantNamespace, pod.Name, "-c", container, "--", "sh", "-c", script+" >/dev/null 2>&1; echo rc=$?")
		if err != nil {
			t.Fatalf("exec in %s: %v %s", container, err, out)
		}
		return strings.TrimSpace(out)
	}
	allowed, denied := "rc=0", func(rc string) bool { return rc != "rc=0" }
	for _, c := range []struct {
		container, what, script string
		allow                   bool
	}{
		{render.ContainerExporter, "see charon's VICI socket", "test -S " + sock, false},
		{render.ContainerExporter, "read the API token", "cat " + token, false},
		{render.ContainerExporter, "write the shared volume", "touch " + render.StateMountPath + "/x", false},
		{render.ContainerExporter, "replace the configuration copy by a link", "ln -sf /etc/passwd " + render.ConfigFile, false},
		{render.ContainerExporter, "run in root's group", "id -G | grep -qw 0", false},
		{render.ContainerInitNAT, "see charon's VICI socket", "test -S " + sock, false},
		{render.ContainerInitNAT, "read the API token", "cat " + token, false},
		{render.ContainerStrongswan, "read the API token", "cat " + token, false},
		{render.ContainerStrongswan, "write its own directory (control)", "touch " + render.RunMountPath + "/x && rm " + render.RunMountPath + "/x", true},
		{render.ContainerStatus, "write charon's directory", "touch " + render.RunMountPath + "/x", false},
		{render.ContainerStatus, "plant a link in charon's directory", "ln -s /etc/passwd " + render.RunMountPath + "/strongswan.conf.new", false},
		{render.ContainerStatus, "replace strongswan.conf", "mv -f " + render.RunMountPath + "/strongswan.conf " + render.StateMountPath + "/moved", false},
		{render.ContainerStatus, "see charon's VICI socket (control)", "test -S " + sock, true},
		{render.ContainerStatus, "read the API token (control)", "cat " + token, true},
		{render.ContainerStatus, "write the shared volume (control)", "touch " + render.StateMountPath + "/x && rm " + render.StateMountPath + "/x", true},
	} {
		got := probe(c.container, c.script)
		if c.allow && got != allowed {
			t.Errorf("%s could not %s (%s): %s", c.container, c.what, c.script, got)
		}
		if !c.allow && !denied(got) {
			t.Errorf("%s could %s (%s)", c.container, c.what, c.script)
		}
	}
	// charon's directory itself: root's group may enter, nobody else.
	st, err := e.w.KubectlRun(e.ctx, "exec", "-n", world.TenantNamespace, pod.Name, "-c", render.ContainerStrongswan, "--", "stat", "-c", "%a %u %g", render.RunMountPath)
	if err != nil || strings.TrimSpace(st) != "750 0 0" {
		t.Errorf("charon's directory is %q (%v), want mode 750 owned by root:root", strings.TrimSpace(st), err)
	}
}

// clientCannotReachPod dials, from the client's host through the tunnel, a port of the
// service CIDR's .1 (the pod's own address there) on which nothing listens. With the
// input chain the SYN is dropped and the dial times out; without it the pod answers
// with a reset ("connection refused"), which the control below provokes by flushing the
// chain (init-nat reverts that drift within a second, which the test then waits for).
func (e *env) clientCannotReachPod(t *testing.T, pod *corev1.Pod) {
	gwAddr := e.gateway().Status.ServiceCIDRGatewayAddress
	if gwAddr == "" {
		t.Fatal("no serviceCIDRGatewayAddress in the status")
	}
	dial := func() error {
		return world.InNS(world.SiteHostNamespace, func() error {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(gwAddr, "9903"), 1500*time.Millisecond)
			if err == nil {
				_ = c.Close()
			}
			return err
		})
	}
	refused := func(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
	timedOut := func(err error) bool {
		var ne net.Error
		return errors.As(err, &ne) && ne.Timeout()
	}
	// The tunnel carries traffic at this moment, so a silent dial is the chain's doing.
	dir := "https://" + world.VIPOf(e.gateway().Status.Exposures, "directory") + ":636/"
	e.waitFor("the directory exposure answering through the tunnel", time.Minute, func() bool {
		return e.answers(world.SiteHostNamespace, dir, world.DirectoryBody)
	})
	if err := dial(); !timedOut(err) {
		t.Errorf("a new connection from the client's host to %s:9903 through the tunnel: %v, want a time-out (dropped)", gwAddr, err)
	}
	// Control: without the input chain the same dial reaches the pod, which refuses it.
	var got error
	for i := 0; i < 10 && !refused(got); i++ {
		if out, err := e.w.InPod(pod, render.ContainerInitNAT, "nft", "flush", "chain", "ip", nat.DefaultTable, nat.ChainInput); err != nil {
			t.Fatalf("flushing the input chain: %v %s", err, out)
		}
		got = dial()
	}
	if !refused(got) {
		t.Errorf("with the input chain flushed the dial still gets %v, so something else drops it", got)
	}
	// init-nat puts the chain back; the client is dropped again.
	e.waitFor("the input chain restored", time.Minute, func() bool { return timedOut(dial()) })
}

func podIP(p *corev1.Pod) string { return p.Status.PodIP }

// procStatus reads /proc/<pid>/status into a map of its fields.
func procStatus(t *testing.T, pid string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}
