package diagnose

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/exporter"
	"bnerd.net/vpn-operator/internal/agent/statefile"
	"bnerd.net/vpn-operator/internal/agent/status"
	"bnerd.net/vpn-operator/internal/agent/vici"
	"bnerd.net/vpn-operator/internal/conditions"
	"bnerd.net/vpn-operator/internal/controller/gateway"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/operatorconfig"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	testenv.Main(m, &env)
}

// Servers of examples/sim-estate.yaml.
const (
	serverA = "11111111-1111-4111-8111-111111111111"
	serverB = "22222222-2222-4222-8222-222222222222"
	peer    = "198.51.100.7"
)

// world is a real API server, the OpenStack simulator and the operator's gateway
// reconciler in a manager, with a gateway converged by it. No kubelet runs, so the test
// plays the gateway pod (and its status agent and exporter) itself.
type world struct {
	t    *testing.T
	ctx  context.Context
	sim  *openstacksim.Server
	ro   OpenStack // a reader-role credential: diagnose needs nothing more
	ns   string
	name string

	exporter *fakeCharon
	natState string
}

func openstackClients(t *testing.T, ctx context.Context, s *openstacksim.Server, credential string) *openstack.Clients {
	t.Helper()
	id, secret, ok := s.AppCredential(credential)
	if !ok {
		t.Fatalf("seed has no %s application credential", credential)
	}
	c, err := openstack.NewClients(ctx, openstack.Credential{AuthURL: s.AuthURL(), Region: s.Region(), AppCredentialID: id, AppCredentialSecret: secret},
		openstack.ClientOptions{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newWorld(t *testing.T) *world {
	t.Helper()
	testenv.Need(t)
	seed, err := openstacksim.LoadSeed(filepath.Join(testenv.RepoRoot(), "examples", "sim-estate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := openstacksim.Start(seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := &world{t: t, ctx: ctx, sim: s, ns: "diag", name: "office", natState: filepath.Join(t.TempDir(), "nat.json")}
	w.ro = ReadOnly(openstackClients(t, ctx, s, "vpn-operator-readonly"))

	c := env.Client
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}))
	// The tenant may expose the node network, where the gateway's portal lives.
	must(c.Create(ctx, &v1alpha1.VPNTenantPolicy{ObjectMeta: metav1.ObjectMeta{Name: "diag"}, Spec: v1alpha1.VPNTenantPolicySpec{
		NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: w.ns}},
		ExposureTargets:   []string{"10.250.0.0/16"}}}))
	for name, server := range map[string]string{"dg-node-a": serverA, "dg-node-b": serverB} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: "openstack:///" + server}}
		must(c.Create(ctx, n))
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		must(c.Status().Update(ctx, n))
	}
	must(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "hq-psk"}, Data: map[string][]byte{"psk": []byte("diagnose-test-psk-0123456789")}}))

	cfg := operatorconfig.Default()
	cfg.Namespace = "bnerd-vpn-system"
	cfg.GatewayNetwork, cfg.ExternalNetwork, cfg.Router = "vpn-transit", "public", "shoot--services--vpn01"
	cfg.InternalSourceCIDRs = []netip.Prefix{netip.MustParsePrefix("10.250.0.0/16")}
	cfg.ResyncInterval = 30 * time.Minute
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Cache:  cache.Options{DefaultNamespaces: map[string]cache.Config{w.ns: {}}},
		Logger: logr.Discard(),
	})
	must(err)
	r := gateway.New(gateway.Deps{
		OpenStack: openstackClients(t, ctx, s, "vpn-operator"), Config: cfg, Log: logr.Discard(),
		PortWait: openstack.WaitOpts{Timeout: 30 * time.Second, Interval: 20 * time.Millisecond}, SkipNameValidation: true,
	})
	must(r.SetupWithManager(mgr))
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	gw := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: w.name}, Spec: v1alpha1.GatewaySpec{
		Tunnels: []v1alpha1.Tunnel{{Name: "hq", Peer: v1alpha1.Peer{Address: peer, Subnets: []string{"192.168.10.0/24"}},
			PreSharedKey: v1alpha1.SecretKeyRef{Name: "hq-psk", Key: "psk"}}},
		Exposures: []v1alpha1.Exposure{{Name: "portal", Target: v1alpha1.Target{Address: "10.250.0.20", Ports: []v1alpha1.PortSpec{{Port: 443, Protocol: v1alpha1.ProtocolTCP}}}}},
		ReverseExposures: []v1alpha1.ReverseExposure{{Name: "erp", Tunnel: "hq",
			Target: v1alpha1.Target{Address: "192.168.10.5", Ports: []v1alpha1.PortSpec{{Port: 8443, Protocol: v1alpha1.ProtocolTCP}}}}},
	}}
	must(c.Create(ctx, gw))
	w.waitConverged()
	w.exporter = &fakeCharon{up: true, nat: statefile.NATState{Applies: 3}}
	w.exporter.writeNAT(t, w.natState)
	w.startPod(w.gateway().Status.NodeName)
	w.reportTunnels("Up", "")
	return w
}

func (w *world) gateway() *v1alpha1.IPsecGateway {
	w.t.Helper()
	var g v1alpha1.IPsecGateway
	if err := env.Client.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: w.name}, &g); err != nil {
		w.t.Fatal(err)
	}
	return &g
}

// waitConverged waits until every phase condition is True for the current generation
// (Ready also needs the pod and the tunnels, which the tests play next).
func (w *world) waitConverged() {
	w.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		g := w.gateway()
		ok := true
		for _, typ := range v1alpha1.GatewayPhaseConditionTypes {
			ok = ok && conditions.IsTrue(g.Status.Conditions, typ, g.Generation)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("gateway never converged: %+v", g.Status.Conditions)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startPod plays the gateway pod the Deployment describes, as the scheduler and kubelet
// would run it: on nodeName, Running and Ready, unless pending.
func (w *world) startPod(nodeName string) *corev1.Pod {
	w.t.Helper()
	ctx := w.ctx
	var old corev1.PodList
	_ = env.Client.List(ctx, &old, client.InNamespace(w.ns))
	for i := range old.Items {
		_ = env.Client.Delete(ctx, &old.Items[i], client.GracePeriodSeconds(0))
	}
	var d appsv1.Deployment
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: render.DeploymentName(w.name)}, &d); err != nil {
		w.t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, GenerateName: render.DeploymentName(w.name) + "-", Labels: d.Spec.Template.Labels},
		Spec: *d.Spec.Template.Spec.DeepCopy()}
	pod.Spec.NodeName = nodeName
	if err := env.Client.Create(ctx, pod); err != nil {
		w.t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.96.0.10",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}}
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Ready: true, Image: c.Image,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}})
	}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		w.t.Fatal(err)
	}
	return pod
}

// reportTunnels writes status.tunnels as the status agent does (its own writer).
func (w *world) reportTunnels(state, msg string) { w.reportTunnelsAt(time.Now(), state, msg) }

// reportTunnelsAt writes the report with the heartbeat at.
func (w *world) reportTunnelsAt(at time.Time, state, msg string) {
	w.t.Helper()
	st := v1alpha1.TunnelState{Name: "hq", State: state, Message: msg}
	ready := "0/1"
	if state == "Up" {
		t := metav1.NewTime(time.Now().Add(-3 * time.Minute).Truncate(time.Second))
		st.EstablishedAt, st.IKESAs, st.ChildSAs, ready = &t, 1, 1, "1/1"
	}
	agent := &status.Writer{Client: env.Client, Kind: "IPsecGateway", Namespace: w.ns, Name: w.name, Now: func() time.Time { return at }}
	if _, err := agent.Write(w.ctx, []v1alpha1.TunnelState{st}, ready); err != nil {
		w.t.Fatal(err)
	}
}

// fakeCharon is the SA source of the real exporter collector: charon's answer over VICI.
type fakeCharon struct {
	mu  sync.Mutex
	up  bool // tunnel hq established
	nat statefile.NATState
	// viciDown: charon does not answer.
	viciDown bool
}

func (f *fakeCharon) writeNAT(t *testing.T, path string) {
	t.Helper()
	if err := statefile.WriteNATState(path, f.nat); err != nil {
		t.Fatal(err)
	}
}

func (f *fakeCharon) sas(context.Context, []string) (map[string][]vici.IKESA, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.viciDown {
		return nil, fmt.Errorf("%w: connecting to charon: no such file", vici.ErrCharonNotRunning)
	}
	if !f.up {
		return map[string][]vici.IKESA{}, nil
	}
	return map[string][]vici.IKESA{"hq": {{Name: "hq", UniqueID: "1", State: "ESTABLISHED", EstablishedSeconds: 180,
		Children: []vici.ChildSA{{Name: "hq", UniqueID: "2", State: "INSTALLED", BytesIn: 1000, BytesOut: 2000}}}}}, nil
}

// metrics serves the real exporter collector's text exposition.
func (w *world) metrics(ctx context.Context, ns, pod string) ([]byte, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(&exporter.Collector{Tunnels: func() []string { return []string{"hq"} }, SAs: w.exporter.sas, NATStateFile: w.natState})
	fams, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		if err := enc.Encode(f); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

func (w *world) sources() Sources {
	return Sources{Kube: env.Client, OpenStack: w.ro, Metrics: w.metrics}
}

func (w *world) diagnose() *Report {
	w.t.Helper()
	rep, err := Diagnose(w.ctx, w.sources(), "", w.ns, w.name)
	if err != nil {
		w.t.Fatal(err)
	}
	return rep
}

// expectFirst asserts the first problem is the given check with the words given.
func (w *world) expectFirst(rep *Report, id string, words ...string) {
	w.t.Helper()
	var b bytes.Buffer
	rep.Write(&b)
	first := rep.First()
	if first == nil || first.ID != id {
		w.t.Fatalf("first problem %+v, want %s\n%s", first, id, b.String())
	}
	for _, word := range words {
		if !strings.Contains(first.Detail+" "+first.Fix, word) {
			w.t.Errorf("%s does not say %q:\n%s", id, word, b.String())
		}
	}
	if !strings.HasPrefix(first.Runbook, TroubleshootingDoc+"#") {
		w.t.Errorf("%s has no runbook link: %q", id, first.Runbook)
	}
	w.t.Logf("found:\n%s", b.String())
}

// nudgeAndHeal applies the documented fix "let the operator converge now" (the
// annotation the findings print) and waits until diagnose is clean again.
func (w *world) nudgeAndHeal() {
	w.t.Helper()
	w.nudge()
	w.expectHealthy("after the documented fix")
}

// nudge sets the annotation the findings print, as `kubectl annotate --overwrite` does.
func (w *world) nudge() {
	w.t.Helper()
	g := w.gateway()
	base := g.DeepCopy()
	if g.Annotations == nil {
		g.Annotations = map[string]string{}
	}
	g.Annotations[NudgeAnnotation] = fmt.Sprint(time.Now().UnixNano())
	// A merge patch, as kubectl annotate sends: no conflict with a status write of the
	// operator in between.
	if err := env.Client.Patch(w.ctx, g, client.MergeFrom(base)); err != nil {
		w.t.Fatal(err)
	}
}

// expectFirstSoon waits until the first problem is the given check, then asserts its
// words as expectFirst does; it returns that problem.
func (w *world) expectFirstSoon(id string, words ...string) *Check {
	w.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		rep := w.diagnose()
		if first := rep.First(); (first != nil && first.ID == id) || time.Now().After(deadline) {
			w.expectFirst(rep, id, words...)
			return first
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (w *world) expectHealthy(when string) {
	w.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		rep := w.diagnose()
		if rep.Healthy() {
			return
		}
		if time.Now().After(deadline) {
			var b bytes.Buffer
			rep.Write(&b)
			w.t.Fatalf("%s: not healthy:\n%s", when, b.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// One converged gateway; each fault is injected out of band, found and named first,
// then healed with the fix diagnose prints, and diagnose is clean again.
func TestDiagnose(t *testing.T) {
	w := newWorld(t)

	t.Run("healthy", func(t *testing.T) {
		w.t = t
		rep := w.diagnose()
		var b bytes.Buffer
		rep.Write(&b)
		if !rep.Healthy() {
			t.Fatalf("a converged gateway is not healthy:\n%s", b.String())
		}
		if !strings.Contains(b.String(), "All is well.") {
			t.Errorf("verdict missing:\n%s", b.String())
		}
		t.Logf("\n%s", b.String())
	})

	t.Run("port detached out of band", func(t *testing.T) {
		w.t = t
		st := w.gateway().Status
		if err := w.sim.DetachInterface(st.ServerID, st.PortID); err != nil {
			t.Fatal(err)
		}
		// Nova takes its time to plug the port in again: diagnose names the wait
		// (PortAttached Unknown/Attaching) until it has, then all is well.
		w.sim.SetNovaDelays(5*time.Second, 0)
		defer w.sim.SetNovaDelays(0, 0)
		w.expectFirst(w.diagnose(), "openstack.attachment", "detached out of band", st.PortID, "reconcile-requested", "once PortAttached is True again, delete the gateway pod")
		w.nudge()
		wait := w.expectFirstSoon("condition.PortAttached", "Unknown/Attaching", st.PortID, st.ServerID, "Wait: Nova is attaching")
		if !strings.HasSuffix(wait.Runbook, "#attaching") {
			t.Errorf("the wait links to %s, want the Attaching entry", wait.Runbook)
		}
		w.expectHealthy("after the documented fix")
	})

	t.Run("security group rule deleted", func(t *testing.T) {
		w.t = t
		st := w.gateway().Status
		sg, ok := w.sim.SecurityGroup(st.SecurityGroupID)
		if !ok {
			t.Fatal("no security group")
		}
		deleted := false
		for _, r := range sg.Rules {
			if r.Protocol == "udp" && r.PortRangeMin == 4500 && r.RemoteIPPrefix == peer+"/32" {
				if err := w.sim.DeleteSecurityGroupRule(r.ID); err != nil {
					t.Fatal(err)
				}
				deleted = true
			}
		}
		if !deleted {
			t.Fatal("no udp/4500 rule to delete")
		}
		w.expectFirst(w.diagnose(), "openstack.securitygroup", "udp/4500 from "+peer+"/32 (tunnel hq)")
		w.nudgeAndHeal()
	})

	t.Run("route missing", func(t *testing.T) {
		w.t = t
		st := w.gateway().Status
		rt, ok := w.sim.RouterByName("shoot--services--vpn01")
		if !ok {
			t.Fatal("no router")
		}
		if err := w.sim.RemoveRoute(rt.ID, st.ServiceCIDR, st.PortFixedIP); err != nil {
			t.Fatal(err)
		}
		w.expectFirst(w.diagnose(), "openstack.routing", "no route "+st.ServiceCIDR+" via "+st.PortFixedIP, "router set --route")
		w.nudgeAndHeal()
	})

	t.Run("pod on the wrong node", func(t *testing.T) {
		w.t = t
		st := w.gateway().Status
		other := "dg-node-a"
		if st.NodeName == other {
			other = "dg-node-b"
		}
		pod := w.startPod(other)
		// What the host-device CNI plugin reports on a node whose server lacks the port.
		pod.Status = corev1.PodStatus{Phase: corev1.PodPending}
		if err := env.Client.Status().Update(w.ctx, pod); err != nil {
			t.Fatal(err)
		}
		ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, GenerateName: "cni-"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: w.ns, Name: pod.Name, UID: pod.UID},
			Type:           corev1.EventTypeWarning, Reason: "FailedCreatePodSandBox", LastTimestamp: metav1.Now(),
			Message: `Failed to create pod sandbox: plugin type="host-device" failed (add): failed to find host device: failed to find physical interface`}
		if err := env.Client.Create(w.ctx, ev); err != nil {
			t.Fatal(err)
		}
		w.expectFirst(w.diagnose(), "kubernetes.pod", "runs on node "+other, "attached to node "+st.NodeName, "delete pod")
		// The fix: delete the pod; the Deployment's replacement is pinned to the right node.
		w.startPod(st.NodeName)
		w.expectHealthy("after replacing the pod")
	})

	t.Run("pod waiting for the operator's binding", func(t *testing.T) {
		w.t = t
		st := w.gateway().Status
		old := w.startPod(st.NodeName)
		var d appsv1.Deployment
		if err := env.Client.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: render.DeploymentName(w.name)}, &d); err != nil {
			t.Fatal(err)
		}
		// As the ReplicaSet creates it, unbound, while the old pod still runs on the node.
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, GenerateName: render.DeploymentName(w.name) + "-", Labels: d.Spec.Template.Labels},
			Spec: *d.Spec.Template.Spec.DeepCopy()}
		if err := env.Client.Create(w.ctx, pod); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Delete(w.ctx, old, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
		old.Name, old.ResourceVersion, old.UID = "", "", ""
		old.Finalizers = []string{"test.bnerd.net/hold"}
		if err := env.Client.Create(w.ctx, old); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Delete(w.ctx, old); err != nil {
			t.Fatal(err)
		}
		w.expectFirst(w.diagnose(), "kubernetes.pod", "not bound to a node yet", "binds it to "+st.NodeName, old.Name+" is still there (terminating)", "has not left node")
		_ = env.Client.Get(w.ctx, client.ObjectKeyFromObject(old), old)
		old.Finalizers = nil
		if err := env.Client.Update(w.ctx, old); err != nil {
			t.Fatal(err)
		}
		_ = env.Client.Delete(w.ctx, old, client.GracePeriodSeconds(0))
		w.startPod(st.NodeName)
		w.expectHealthy("after the pod is bound and runs")
	})

	t.Run("pod pending without its second interface", func(t *testing.T) {
		w.t = t
		st := w.gateway().Status
		pod := w.startPod(st.NodeName)
		pod.Status = corev1.PodStatus{Phase: corev1.PodPending}
		if err := env.Client.Status().Update(w.ctx, pod); err != nil {
			t.Fatal(err)
		}
		ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, GenerateName: "cni-"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: w.ns, Name: pod.Name, UID: pod.UID},
			Type:           corev1.EventTypeWarning, Reason: "FailedCreatePodSandBox", LastTimestamp: metav1.Now(),
			Message: "failed to find host device: failed to find physical interface"}
		if err := env.Client.Create(w.ctx, ev); err != nil {
			t.Fatal(err)
		}
		w.expectFirst(w.diagnose(), "kubernetes.pod", "cannot start", "FailedCreatePodSandBox")
		w.startPod(st.NodeName)
		w.expectHealthy("after replacing the pod")
	})

	t.Run("tunnel down", func(t *testing.T) {
		w.t = t
		w.reportTunnels("Down", "no IKE SA")
		w.exporter.mu.Lock()
		w.exporter.up = false
		w.exporter.mu.Unlock()
		w.expectFirst(w.diagnose(), "status.tunnels", "0/1 up", "hq is Down (no IKE SA; peer "+peer+")", "peer-config")
		w.exporter.mu.Lock()
		w.exporter.up = true
		w.exporter.mu.Unlock()
		w.reportTunnels("Up", "")
		w.expectHealthy("with the tunnel up again")
	})

	t.Run("status agent silent", func(t *testing.T) {
		w.t = t
		w.reportTunnelsAt(time.Now().Add(-10*time.Minute), "Up", "")
		w.expectFirst(w.diagnose(), "status.tunnels", "is not current: the status agent last reported at", "-c status-agent")
		w.reportTunnels("Up", "")
		w.expectHealthy("with a fresh report")
	})

	t.Run("status agent stale", func(t *testing.T) {
		w.t = t
		w.exporter.mu.Lock()
		w.exporter.up = false
		w.exporter.mu.Unlock()
		w.expectFirst(w.diagnose(), "exporter", "status says Up, charon says down", "status-agent")
		w.exporter.mu.Lock()
		w.exporter.up = true
		w.exporter.mu.Unlock()
	})

	t.Run("charon unreachable", func(t *testing.T) {
		w.t = t
		w.exporter.mu.Lock()
		w.exporter.viciDown = true
		w.exporter.mu.Unlock()
		w.expectFirst(w.diagnose(), "exporter", "charon does not answer", "-c strongswan")
		w.exporter.mu.Lock()
		w.exporter.viciDown = false
		w.exporter.mu.Unlock()
	})

	t.Run("NAT apply errors", func(t *testing.T) {
		w.t = t
		w.exporter.nat = statefile.NATState{Applies: 5, ApplyErrors: 2}
		w.exporter.writeNAT(t, w.natState)
		rep := w.diagnose()
		w.expectFirst(rep, "exporter", "2 of 5 NAT ruleset applies failed")
		if rep.First().Status != Warn {
			t.Errorf("NAT errors are a warning, got %s", rep.First().Status)
		}
		w.exporter.nat = statefile.NATState{Applies: 5}
		w.exporter.writeNAT(t, w.natState)
		w.expectHealthy("without NAT errors")
	})

	t.Run("transit network shared with every project", func(t *testing.T) {
		w.t = t
		net, ok := w.sim.NetworkByName("vpn-transit")
		if !ok {
			t.Fatal("no transit network")
		}
		pol, err := w.sim.AddRBACPolicy(net.ID, "*")
		if err != nil {
			t.Fatal(err)
		}
		w.expectFirst(w.diagnose(), "openstack.transit", "with every project", "openstack network rbac delete "+pol.ID)
		if err := w.sim.DeleteRBACPolicy(pol.ID); err != nil {
			t.Fatal(err)
		}
		w.expectHealthy("without the wildcard share")
	})

	t.Run("condition false names its reason and fix", func(t *testing.T) {
		w.t = t
		// The PSK Secret gone: WorkloadReady=False/PreSharedKeyNotFound at the next reconcile.
		if err := env.Client.Delete(w.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "hq-psk"}}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(60 * time.Second)
		var rep *Report
		for {
			rep = w.diagnose()
			if f := rep.First(); f != nil && f.ID == "condition.WorkloadReady" {
				break
			}
			if time.Now().After(deadline) {
				var b bytes.Buffer
				rep.Write(&b)
				t.Fatalf("WorkloadReady never failed:\n%s", b.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
		w.expectFirst(rep, "condition.WorkloadReady", "PreSharedKeyNotFound", "create secret generic")
		if !strings.HasSuffix(rep.First().Runbook, "#presharedkeynotfound") {
			t.Errorf("runbook %q", rep.First().Runbook)
		}
		if err := env.Client.Create(w.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "hq-psk"}, Data: map[string][]byte{"psk": []byte("diagnose-test-psk-0123456789")}}); err != nil {
			t.Fatal(err)
		}
		w.expectHealthy("with the Secret back")
	})

	t.Run("without OpenStack credentials nothing is all well", func(t *testing.T) {
		w.t = t
		src := w.sources()
		src.OpenStack, src.OpenStackSkipReason = nil, "no OpenStack credential (set OS_CLOUD or OS_* variables)"
		rep, err := Diagnose(w.ctx, src, "", w.ns, w.name)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		rep.Write(&b)
		if rep.Healthy() || rep.First() != nil || !strings.Contains(b.String(), "skipped") {
			t.Errorf("skipped checks must not read as healthy:\n%s", b.String())
		}
	})

	t.Run("no such gateway", func(t *testing.T) {
		if _, err := Diagnose(w.ctx, w.sources(), "", w.ns, "nope"); err == nil || !strings.Contains(err.Error(), "no IPsecGateway or VPNGateway") {
			t.Errorf("%v", err)
		}
	})

	// Diagnose reads the PSK Secret nowhere: the test's key never reaches a report.
	t.Run("no secret in any report", func(t *testing.T) {
		var b bytes.Buffer
		w.diagnose().Write(&b)
		if strings.Contains(b.String(), "diagnose-test-psk") {
			t.Error("the pre-shared key appears in the report")
		}
	})

}

func TestHealthyVerdict(t *testing.T) {
	pass := Check{ID: "a", Status: Pass}
	cases := []struct {
		name    string
		checks  []Check
		healthy bool
		first   string
	}{
		{"all pass", []Check{pass}, true, ""},
		{"skipped for lack of access", []Check{pass, {ID: "openstack", Status: Skipped}}, false, ""},
		{"skipped on request", []Check{pass, {ID: "openstack", Status: Skipped, Requested: true}}, true, ""},
		{"warning", []Check{pass, {ID: "w", Status: Warn}}, false, "w"},
		{"failure before a warning", []Check{{ID: "w", Status: Warn}, {ID: "f", Status: Fail}}, false, "f"},
		{"nothing checked", nil, false, ""},
	}
	for _, c := range cases {
		r := &Report{Checks: c.checks}
		if r.Healthy() != c.healthy {
			t.Errorf("%s: healthy %v", c.name, r.Healthy())
		}
		first := ""
		if f := r.First(); f != nil {
			first = f.ID
		}
		if first != c.first {
			t.Errorf("%s: first %q, want %q", c.name, first, c.first)
		}
	}
}
