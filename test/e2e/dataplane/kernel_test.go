package dataplane

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// apiAddr is where the API server is reachable inside the VM: 127.0.0.1 in the test's
// namespace and in the gateway pod's, matching the serving certificate.
const apiAddr = "127.0.0.1:6443"

// serviceAccountDir is where kubelet mounts a pod's ServiceAccount token; the agents'
// in-cluster configuration reads it from there.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// podAPI is the kernel mode's view of the API server: the objects the operator would
// create for the gateway, and the pod's identity.
type podAPI struct {
	cl   client.Client
	cs   kubernetes.Interface
	gw   render.Gateway
	args map[string][]string

	mu sync.Mutex
}

// connectPodAPI reaches the forwarded API server, creates the gateway object and the
// pod's ServiceAccount, Role and RoleBinding as rendered for production, and mounts the
// ServiceAccount's token where kubelet would.
func connectPodAPI(t testing.TB, e *env) *podAPI {
	t.Helper()
	g, err := sharedGuestAPI(os.Getenv(apiPortEnv))
	if err != nil {
		t.Fatalf("API port: %v", err)
	}
	for _, ns := range []string{"", e.NS("g")} {
		ln, err := g.listen(ns, apiAddr)
		if err != nil {
			t.Fatalf("API listener in %q: %v", ns, err)
		}
		t.Cleanup(func() { _ = ln.Close() })
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv(kubeconfigEnv))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: testenv.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := &podAPI{cl: cl, cs: cs, gw: render.Gateway{
		APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.KindIPsecGateway, Resource: "ipsecgateways",
		Namespace: "tenant", Name: "e2e",
	}}
	ctx := context.Background()
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: a.gw.Namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	obj := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: a.gw.Namespace, Name: a.gw.Name}, Spec: storedSpec(e.obj.Spec)}
	// Each tunnel's PSK Secret, as the operator grants the pod's Role access to them.
	var secrets []string
	for _, tun := range obj.Spec.Tunnels {
		secrets = append(secrets, tun.PreSharedKey.Name)
	}
	if err := cl.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	// The next test in the same VM run (one API server) creates them again.
	t.Cleanup(func() {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: a.gw.Namespace, Name: render.ConfigMapName(a.gw.Name)}}
		objs := []client.Object{obj, render.ServiceAccount(a.gw), render.Role(a.gw, v1alpha1.GroupVersion.Group), render.RoleBinding(a.gw), cm}
		for _, name := range secrets {
			objs = append(objs, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: a.gw.Namespace, Name: name}})
		}
		for _, o := range objs {
			_ = cl.Delete(context.Background(), o)
		}
	})
	obj.Status = *e.obj.Status.DeepCopy()
	if err := cl.Status().Update(ctx, obj); err != nil {
		t.Fatal(err)
	}
	a.gw.UID = obj.UID
	for _, o := range []client.Object{render.ServiceAccount(a.gw), render.Role(a.gw, v1alpha1.GroupVersion.Group, secrets...), render.RoleBinding(a.gw)} {
		if err := cl.Create(ctx, o); err != nil {
			t.Fatalf("creating %T: %v", o, err)
		}
	}
	exp := int64(4 * 3600)
	tok, err := cs.CoreV1().ServiceAccounts(a.gw.Namespace).CreateToken(ctx, render.ServiceAccountName(a.gw.Name),
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("ServiceAccount token: %v", err)
	}
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		if ca, err = os.ReadFile(cfg.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range map[string]string{"token": tok.Status.Token, "ca.crt": string(ca), "namespace": a.gw.Namespace} {
		writeAtomic(t, filepath.Join(serviceAccountDir, name), content)
	}
	// The pod's emptyDirs: charon's (its socket and strongswan.conf) and the state
	// volume the containers hand each other files on.
	for _, dir := range []string{render.RunMountPath, render.StateMountPath} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d, err := render.Deployment(render.Workload{Gateway: a.gw, NodeName: "vm", PortMAC: "fa:16:3e:00:00:01", GatewayImage: "gateway", AgentImage: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	a.args = map[string][]string{}
	for _, c := range d.Spec.Template.Spec.Containers {
		a.args[c.Name] = c.Args
	}
	return a
}

// publish creates or updates the gateway's ConfigMap as the operator renders it, and
// each tunnel's PSK Secret as the tenant writes it (keys by tunnel name).
func (a *podAPI) publish(t testing.TB, cfg *gatewayconfig.Config, keys map[string]string) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	ctx := context.Background()
	cm, err := render.ConfigMap(a.gw, cfg)
	if err != nil {
		t.Fatal(err)
	}
	objs := []client.Object{cm}
	for _, tun := range cfg.Tunnels {
		objs = append(objs, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: a.gw.Namespace, Name: tun.PSK.Secret},
			Data: map[string][]byte{tun.PSK.Key: []byte(keys[tun.Name])}})
	}
	for _, want := range objs {
		cur := want.DeepCopyObject().(client.Object)
		err := a.cl.Get(ctx, client.ObjectKeyFromObject(want), cur)
		switch {
		case apierrors.IsNotFound(err):
			err = a.cl.Create(ctx, want)
		case err == nil:
			want.SetResourceVersion(cur.GetResourceVersion())
			err = a.cl.Update(ctx, want)
		}
		if err != nil {
			t.Fatalf("publishing %T: %v", want, err)
		}
	}
}

// startContainer runs one of the pod's containers in the gateway's namespace: the agent
// binary (both images' entrypoint) with exactly the arguments render.Deployment gives the
// container, and the environment kubelet provides for in-cluster API access.
func (e *env) startContainer(name string) {
	e.T.Helper()
	args, ok := e.api.args[name]
	if !ok {
		e.T.Fatalf("the rendered Deployment has no container %s", name)
	}
	host, port, _ := net.SplitHostPort(apiAddr)
	// The gateway's namespace has no pod network; loopback stands in for the pod's
	// address, and $(POD_IP) in the arguments is expanded the way kubelet does.
	podIP, _, _ := net.SplitHostPort(metricsAddr)
	env := []string{"KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port, "POD_NAMESPACE=" + e.api.gw.Namespace, "POD_IP=" + podIP}
	expanded := make([]string, len(args))
	for i, a := range args {
		expanded[i] = strings.ReplaceAll(a, "$(POD_IP)", podIP)
	}
	e.Start(name, e.NS("g"), env, append([]string{e.bin.agent}, expanded...)...)
}

// checkStatus waits for the pod's status agent to report the tunnel in the object.
func (a *podAPI) checkStatus(t *testing.T, e *env) {
	var got v1alpha1.GatewayStatus
	e.Eventually("status agent reports the tunnel up", func() bool {
		cur := &v1alpha1.IPsecGateway{}
		if err := a.cl.Get(context.Background(), client.ObjectKey{Namespace: a.gw.Namespace, Name: a.gw.Name}, cur); err != nil {
			return false
		}
		got = cur.Status
		return got.TunnelsReady == "1/1"
	})
	if len(got.Tunnels) != 1 || got.Tunnels[0].Name != "t1" || got.Tunnels[0].State != "Up" || got.Tunnels[0].ChildSAs < 1 || got.Tunnels[0].EstablishedAt == nil {
		t.Errorf("tunnel state in status: %+v", got.Tunnels)
	}
	// The operator's fields survive the agent's writes.
	if got.ServiceCIDR != serviceCIDR || got.FloatingIP != floatingIP {
		t.Errorf("the status agent clobbered the operator's status fields: %+v", got)
	}
}
