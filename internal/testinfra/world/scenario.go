package world

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testinfra/fabric"
)

// TenantNamespace is the examples' gateway namespace, of tenant acme.
const TenantNamespace = "tenant-a"

// PrepareTenant creates the tenant namespace (labelled as tenant acme's), the tenant
// policy of examples/vpntenantpolicy.yaml and the pre-shared key Secret the example
// gateway references (hq-psk, key psk).
func (w *World) PrepareTenant(ctx context.Context, psk string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: TenantNamespace, Labels: map[string]string{v1alpha1.LabelTenant: "acme"}}}
	if err := w.Kube.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := w.Apply(ctx, "examples/vpntenantpolicy.yaml", &v1alpha1.VPNTenantPolicy{}, ""); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hq-psk", Namespace: TenantNamespace}, StringData: map[string]string{"psk": psk}}
	if err := w.Kube.Create(ctx, sec); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// Apply creates the object of a one-document manifest (path relative to the repository
// root); namespace is the default for a namespaced object that names none.
func (w *World) Apply(ctx context.Context, path string, obj client.Object, namespace string) error {
	if err := w.Load(path, obj, namespace); err != nil {
		return err
	}
	return w.Kube.Create(ctx, obj)
}

// Load decodes the manifest at path (relative to the repository) into obj, in namespace
// unless the manifest names one, without creating it.
func (w *World) Load(path string, obj client.Object, namespace string) error {
	if !filepath.IsAbs(path) {
		path = filepath.Join(w.opts.Repo, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := yaml.NewYAMLOrJSONDecoder(f, 4096).Decode(obj); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if obj.GetNamespace() == "" {
		obj.SetNamespace(namespace)
	}
	return nil
}

// Poll calls cond every interval until it returns true or an error, or timeout passes.
func Poll(ctx context.Context, interval, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// GatewayPod returns the running gateway pod of gateway name (nil when there is none).
func (w *World) GatewayPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	var pods corev1.PodList
	if err := w.Kube.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{render.LabelInstance: name, render.LabelName: render.AppName}); err != nil {
		return nil, err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			return p, nil
		}
	}
	return nil, nil
}

// ContainerID returns the containerd ID of a pod's container ("" when not running).
func ContainerID(p *corev1.Pod, container string) string {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == container && s.State.Running != nil {
			_, id, _ := strings.Cut(s.ContainerID, "://")
			return id
		}
	}
	return ""
}

// KillContainer SIGKILLs a pod's container through its node's containerd (as a crash
// would); the kubelet restarts it.
func (w *World) KillContainer(p *corev1.Pod, container string) error {
	n, ok := w.Node(p.Spec.NodeName)
	if !ok {
		return fmt.Errorf("pod %s runs on unknown node %s", p.Name, p.Spec.NodeName)
	}
	id := ContainerID(p, container)
	if id == "" {
		return fmt.Errorf("container %s of pod %s is not running", container, p.Name)
	}
	_, err := Exec("", "ctr", "-a", n.Containerd, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id)
	return err
}

// PodPID returns the PID of a running container of the pod (for entering its network
// namespace with nsenter).
func (w *World) PodPID(p *corev1.Pod, container string) (string, error) {
	n, ok := w.Node(p.Spec.NodeName)
	if !ok {
		return "", fmt.Errorf("unknown node %s", p.Spec.NodeName)
	}
	id := ContainerID(p, container)
	out, err := Exec("", "ctr", "-a", n.Containerd, "-n", "k8s.io", "tasks", "ls")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == id {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("no task for container %s", container)
}

// InPod runs a command in the pod's network namespace (through one of its containers'
// PIDs).
func (w *World) InPod(p *corev1.Pod, container string, args ...string) (string, error) {
	pid, err := w.PodPID(p, container)
	if err != nil {
		return "", err
	}
	return Exec("", append([]string{"nsenter", "-t", pid, "-n", "--"}, args...)...)
}

// kubeletPID is the PID of a node's kubelet as hack/node/up.sh recorded it (the last
// line for the node wins: a restart appends one).
func (w *World) kubeletPID(n Node) (int, error) {
	suffix := strings.TrimPrefix(n.Namespace, "bn-node-")
	pids, err := os.ReadFile(filepath.Join(w.opts.NodeState, "pids"))
	if err != nil {
		return 0, err
	}
	var kubelet int
	for _, l := range strings.Split(string(pids), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == "kubelet-"+suffix {
			fmt.Sscan(f[1], &kubelet)
		}
	}
	if kubelet == 0 {
		return 0, fmt.Errorf("no kubelet of node %s recorded", n.Name)
	}
	return kubelet, nil
}

// RestartKubelet stops a node's kubelet (SIGTERM, as a service manager's restart does)
// and starts it again with the same command line in the node's network namespace, logged
// and recorded as hack/node/up.sh does, so that hack/node/down.sh stops the new one. The
// node's containers keep running.
func (w *World) RestartKubelet(name string) error {
	n, ok := w.Node(name)
	if !ok {
		return fmt.Errorf("unknown node %s", name)
	}
	pid, err := w.kubeletPID(n)
	if err != nil {
		return err
	}
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) != "kubelet" {
		return fmt.Errorf("process %d of node %s is not a kubelet", pid, name)
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return err
	}
	args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return err
	}
	stopped := false
	for i := 0; i < 200 && !stopped; i++ {
		time.Sleep(50 * time.Millisecond)
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		// Gone, or a zombie waiting for its reaper (it was started by hack/node/up.sh).
		stopped = err != nil || strings.Contains(string(stat), ") Z ")
	}
	if !stopped {
		return fmt.Errorf("the kubelet of node %s (%d) did not stop within 10 s of SIGTERM", name, pid)
	}
	suffix := strings.TrimPrefix(n.Namespace, "bn-node-")
	logf, err := os.OpenFile(filepath.Join(w.opts.NodeState, "logs", "kubelet-"+suffix+".log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command("nsenter", append([]string{"--net=/var/run/netns/" + n.Namespace, "--"}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }() // reaped when it exits (hack/node/down.sh stops it)
	pf, err := os.OpenFile(filepath.Join(w.opts.NodeState, "pids"), os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer pf.Close()
	_, err = fmt.Fprintf(pf, "kubelet-%s %d kubelet\n", suffix, cmd.Process.Pid)
	return err
}

// PowerOffNode makes a node fail as a powered-off machine does: its kubelet and every
// container it ran are killed and its network link goes down at once, and nothing else
// happens: the Node object stays, Ready until the controller manager's node-monitor grace
// period has passed.
func (w *World) PowerOffNode(name string) error {
	n, ok := w.Node(name)
	if !ok {
		return fmt.Errorf("unknown node %s", name)
	}
	// The root namespace's end of the node's link (hack/node/up.sh names it after the
	// node's namespace): down first, so not one more renewal leaves the node.
	if _, err := Exec("", "ip", "link", "set", n.Namespace, "down"); err != nil {
		return err
	}
	return w.stopNode(name)
}

// PartitionNode cuts a node off the network (its link down) and nothing else: its kubelet
// and containers keep running, unable to reach the API server or anyone else. HealNode
// ends it. The kernel drops the routes through a link that goes down (the node's pod
// CIDR's among them): they are kept to be put back.
func (w *World) PartitionNode(name string) error {
	n, ok := w.Node(name)
	if !ok {
		return fmt.Errorf("unknown node %s", name)
	}
	routes, err := Exec("", "ip", "route", "show", "dev", n.Namespace)
	if err != nil {
		return err
	}
	var via []string
	for _, l := range strings.Split(routes, "\n") {
		if strings.Contains(l, " via ") {
			via = append(via, strings.TrimSpace(l))
		}
	}
	w.mu.Lock()
	if w.partitioned == nil {
		w.partitioned = map[string][]string{}
	}
	w.partitioned[name] = via
	w.mu.Unlock()
	_, err = Exec("", "ip", "link", "set", n.Namespace, "down")
	return err
}

// HealNode brings a partitioned node's link back up, with the routes it carried.
func (w *World) HealNode(name string) error {
	n, ok := w.Node(name)
	if !ok {
		return fmt.Errorf("unknown node %s", name)
	}
	if _, err := Exec("", "ip", "link", "set", n.Namespace, "up"); err != nil {
		return err
	}
	w.mu.Lock()
	routes := w.partitioned[name]
	delete(w.partitioned, name)
	w.mu.Unlock()
	for _, r := range routes {
		args := append([]string{"ip", "route", "replace"}, strings.Fields(r)...)
		if !strings.Contains(r, " dev ") {
			args = append(args, "dev", n.Namespace)
		}
		if _, err := Exec("", args...); err != nil {
			return fmt.Errorf("restoring route %q: %w", r, err)
		}
	}
	return nil
}

// stopNode kills a node's kubelet and every container it ran, and marks it lost.
func (w *World) stopNode(name string) error {
	n, ok := w.Node(name)
	if !ok {
		return fmt.Errorf("unknown node %s", name)
	}
	kubelet, err := w.kubeletPID(n)
	if err != nil {
		return err
	}
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", kubelet)); strings.TrimSpace(string(comm)) == "kubelet" {
		if err := syscall.Kill(kubelet, syscall.SIGKILL); err != nil {
			return err
		}
	}
	out, err := Exec("", "ctr", "-a", n.Containerd, "-n", "k8s.io", "tasks", "ls", "-q")
	if err != nil {
		return err
	}
	for _, id := range strings.Fields(out) {
		_, _ = Exec("", "ctr", "-a", n.Containerd, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id)
	}
	w.mu.Lock()
	if w.lost == nil {
		w.lost = map[string]bool{}
	}
	w.lost[name] = true
	w.mu.Unlock()
	return nil
}

// Leftovers lists everything of gateways and links still present anywhere: OpenStack
// objects the operator tagged and routes to the service CIDR pool or the service
// cluster, NIC stand-ins in the nodes, the gateway's containers, nftables tables and
// XFRM state in the nodes, and the gateway's Kubernetes objects in namespace.
func (w *World) Leftovers(ctx context.Context, namespace string) ([]string, error) {
	var left []string
	r, err := w.CloudReader(ctx)
	if err != nil {
		return nil, err
	}
	snap, err := r.Read(ctx)
	if err != nil {
		return nil, err
	}
	tagged := func(t []string) bool { return openstack.HasTags(t, openstack.TagManaged) }
	for _, p := range snap.Ports {
		if tagged(p.Tags) {
			left = append(left, "OpenStack port "+p.ID)
		}
		if strings.HasPrefix(p.DeviceOwner, "compute:") {
			for _, n := range w.Nodes {
				if p.DeviceID == n.ServerID {
					left = append(left, fmt.Sprintf("port %s attached to %s", p.ID, n.Name))
				}
			}
		}
	}
	for _, f := range snap.FloatingIPs {
		if tagged(f.Tags) {
			left = append(left, "OpenStack floating IP "+f.FloatingIP)
		}
	}
	for _, g := range snap.SecurityGroups {
		if tagged(g.Tags) {
			left = append(left, "OpenStack security group "+g.ID)
		}
	}
	for _, rt := range snap.Routers {
		for _, x := range rt.Routes {
			if strings.HasPrefix(x.DestinationCIDR, "100.64.") || x.DestinationCIDR == "10.251.0.0/16" {
				left = append(left, fmt.Sprintf("route %s via %s on router %s", x.DestinationCIDR, x.NextHop, rt.Name))
			}
		}
	}
	for _, n := range w.Nodes {
		w.mu.Lock()
		gone := w.lost[n.Name]
		w.mu.Unlock()
		if gone {
			continue
		}
		out, _ := Exec("", "ip", "-n", n.Namespace, "-o", "link", "show")
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], "bnv") {
				left = append(left, "NIC stand-in "+strings.TrimSuffix(f[1], ":")+" in node "+n.Name)
			}
		}
		if out, _ := Exec(n.Namespace, "ip", "xfrm", "state"); strings.TrimSpace(out) != "" {
			left = append(left, "XFRM state in node "+n.Name)
		}
		if out, _ := Exec(n.Namespace, "nft", "list", "tables"); strings.Contains(out, "bnerd-gw") {
			left = append(left, "nftables table bnerd-gw in node "+n.Name)
		}
		out, _ = Exec("", "ctr", "-a", n.Containerd, "-n", "k8s.io", "containers", "ls")
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "bnerd-vpn-gateway") {
				left = append(left, "gateway container on "+n.Name+": "+strings.Fields(l)[0])
			}
		}
	}
	if out, err := Exec(w.Fabric.FabricNamespace(), "ip", "-o", "link", "show"); err == nil {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], "bnp") && strings.Contains(l, "alias port=") {
				left = append(left, "fabric end of a NIC stand-in "+strings.SplitN(f[1], "@", 2)[0])
			}
		}
	}
	// Sandbox namespaces of gateway pods hold the pod's NAT table and XFRM state; a pod
	// that is gone leaves no sandbox.
	var pods corev1.PodList
	if err := w.Kube.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{render.LabelName: render.AppName}); err != nil {
		return nil, err
	}
	for _, p := range pods.Items {
		left = append(left, "pod "+p.Name)
	}
	var deps appsv1.DeploymentList
	if err := w.Kube.List(ctx, &deps, client.InNamespace(namespace), client.MatchingLabels{render.LabelManagedBy: render.ManagedBy}); err != nil {
		return nil, err
	}
	for _, d := range deps.Items {
		left = append(left, "Deployment "+d.Name)
	}
	var cms corev1.ConfigMapList
	if err := w.Kube.List(ctx, &cms, client.InNamespace(namespace), client.MatchingLabels{render.LabelManagedBy: render.ManagedBy}); err != nil {
		return nil, err
	}
	for _, c := range cms.Items {
		left = append(left, "ConfigMap "+c.Name)
	}
	var secs corev1.SecretList
	if err := w.Kube.List(ctx, &secs, client.InNamespace(namespace), client.MatchingLabels{render.LabelManagedBy: render.ManagedBy}); err != nil {
		return nil, err
	}
	for _, s := range secs.Items {
		left = append(left, "Secret "+s.Name)
	}
	sort.Strings(left)
	return slices.Compact(left), nil
}

// CloudReader reads the cloud with the simulator's admin credential (what the fabric
// sees); its Network client can change the cloud too.
func (w *World) CloudReader(ctx context.Context) (*fabric.Reader, error) {
	return fabric.NewReader(ctx, fabric.Credential{AuthURL: w.AdminEnv["OS_AUTH_URL"], Region: w.AdminEnv["OS_REGION_NAME"],
		ID: w.AdminEnv["OS_APPLICATION_CREDENTIAL_ID"], Secret: w.AdminEnv["OS_APPLICATION_CREDENTIAL_SECRET"]})
}

// GatewayKey is the example gateway.
var GatewayKey = client.ObjectKey{Namespace: TenantNamespace, Name: "acme"}

// Gateway reads the example gateway.
func (w *World) Gateway(ctx context.Context) (*v1alpha1.IPsecGateway, error) {
	gw := &v1alpha1.IPsecGateway{}
	return gw, w.Kube.Get(ctx, GatewayKey, gw)
}

// VIPOf is the virtual IP allocated to the exposure or reverse exposure called name in a
// gateway's status ("" when there is none).
func VIPOf(list []v1alpha1.AllocatedAddress, name string) string {
	for _, a := range list {
		if a.Name == name {
			return a.VirtualIP
		}
	}
	return ""
}
