package status

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/vici"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// TestWriterOnRealAPIServer writes tunnel state into a gateway on the real API server:
// the fields land in status, the operator's conditions survive, an unchanged state is not
// written again, and a later operator status write does not conflict with it.
func TestWriterOnRealAPIServer(t *testing.T) {
	testenv.Need(t)
	ctx := context.Background()
	for _, kind := range []string{"IPsecGateway", "VPNGateway"} {
		t.Run(kind, func(t *testing.T) {
			spec := v1alpha1.GatewaySpec{Tunnels: []v1alpha1.Tunnel{{
				Name: "hq", Peer: v1alpha1.Peer{Address: "198.51.100.7", Subnets: []string{"192.168.10.0/24"}},
				PreSharedKey: v1alpha1.SecretKeyRef{Name: "psk"},
			}}}
			meta := metav1.ObjectMeta{Namespace: "default", Name: "status-" + map[string]string{"IPsecGateway": "ipsec", "VPNGateway": "vpn"}[kind]}
			readStatus := func() v1alpha1.GatewayStatus {
				t.Helper()
				key := types.NamespacedName{Namespace: meta.Namespace, Name: meta.Name}
				if kind == "IPsecGateway" {
					o := &v1alpha1.IPsecGateway{}
					if err := env.Client.Get(ctx, key, o); err != nil {
						t.Fatal(err)
					}
					return o.Status
				}
				o := &v1alpha1.VPNGateway{}
				if err := env.Client.Get(ctx, key, o); err != nil {
					t.Fatal(err)
				}
				return o.Status
			}
			operatorCondition := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonReconciled, Message: "operator", LastTransitionTime: metav1.Now()}
			if kind == "IPsecGateway" {
				o := &v1alpha1.IPsecGateway{ObjectMeta: meta, Spec: spec}
				if err := env.Client.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
				o.Status.Conditions = []metav1.Condition{operatorCondition}
				if err := env.Client.Status().Update(ctx, o); err != nil {
					t.Fatal(err)
				}
			} else {
				o := &v1alpha1.VPNGateway{ObjectMeta: meta, Spec: v1alpha1.VPNGatewaySpec{GatewaySpec: spec}}
				if err := env.Client.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
				o.Status.Conditions = []metav1.Condition{operatorCondition}
				if err := env.Client.Status().Update(ctx, o); err != nil {
					t.Fatal(err)
				}
			}

			w := &Writer{Client: env.Client, Kind: kind, Namespace: meta.Namespace, Name: meta.Name}
			now := time.Now()
			sas := map[string][]vici.IKESA{"hq": {{Name: "hq", State: "ESTABLISHED", EstablishedSeconds: 42,
				Children: []vici.ChildSA{{Name: "hq", State: "INSTALLED"}}}}}
			tunnels, ready := Compute([]string{"hq"}, sas, nil, now)
			wrote, err := w.Write(ctx, tunnels, ready)
			if err != nil || !wrote {
				t.Fatalf("first write: wrote=%v err=%v", wrote, err)
			}
			st := readStatus()
			if st.TunnelsReady != "1/1" || len(st.Tunnels) != 1 || st.Tunnels[0].State != StateUp || st.Tunnels[0].ChildSAs != 1 || st.Tunnels[0].EstablishedAt == nil {
				t.Fatalf("tunnel state not stored: %+v", st)
			}
			if len(st.Conditions) != 1 || st.Conditions[0].Message != "operator" {
				t.Fatalf("the operator's conditions were touched: %+v", st.Conditions)
			}
			if st.TunnelsObservedTime == nil || st.Tunnels[0].LastTransitionTime == nil {
				t.Fatalf("no heartbeat or transition time stored: %+v", st)
			}

			// A second poll a second later with the same SAs is not a change.
			tunnels, ready = Compute([]string{"hq"}, sas, nil, now.Add(time.Second))
			if wrote, err := w.Write(ctx, tunnels, ready); err != nil || wrote {
				t.Fatalf("unchanged state written again: wrote=%v err=%v", wrote, err)
			}

			// The tunnel drops: the change is written.
			tunnels, ready = Compute([]string{"hq"}, nil, nil, now)
			if wrote, err := w.Write(ctx, tunnels, ready); err != nil || !wrote {
				t.Fatalf("tunnel down not written: wrote=%v err=%v", wrote, err)
			}
			if st := readStatus(); st.TunnelsReady != "0/1" || st.Tunnels[0].State != StateDown {
				t.Fatalf("tunnel down not stored: %+v", st)
			}
		})
	}
}

// TestGatewayPodRBAC proves the Role the operator renders for a gateway pod on the real
// API server, impersonating the pod's ServiceAccount: the agent can read and patch its
// own gateway's status, watch its own ConfigMap and read, list and watch by name the
// Secret its tunnel names, and nothing else: not the gateway object itself, not another
// gateway, not another Secret (not even the others of its namespace), not another
// ConfigMap.
func TestGatewayPodRBAC(t *testing.T) {
	testenv.Need(t)
	ctx := context.Background()
	spec := v1alpha1.GatewaySpec{Tunnels: []v1alpha1.Tunnel{{
		Name: "hq", Peer: v1alpha1.Peer{Address: "198.51.100.7", Subnets: []string{"192.168.10.0/24"}},
		PreSharedKey: v1alpha1.SecretKeyRef{Name: "psk"},
	}}}
	own := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "rbac-own"}, Spec: spec}
	other := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "rbac-other"}, Spec: spec}
	for _, o := range []*v1alpha1.IPsecGateway{own, other} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	g := render.Gateway{APIVersion: v1alpha1.GroupVersion.String(), Kind: "IPsecGateway", Resource: "ipsecgateways",
		Namespace: own.Namespace, Name: own.Name, UID: own.UID}
	objs := []client.Object{
		render.ServiceAccount(g), render.Role(g, v1alpha1.GroupVersion.Group, "psk"), render.RoleBinding(g),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: own.Namespace, Name: render.ConfigMapName(own.Name)}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: own.Namespace, Name: "unrelated"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: own.Namespace, Name: "psk"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: own.Namespace, Name: "another-tenants-secret"}},
	}
	for _, o := range objs {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + own.Namespace + ":" + render.ServiceAccountName(own.Name)}
	pod, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	// RBAC is evaluated by the authorizer as soon as the binding exists, but poll briefly
	// in case the API server's RBAC cache lags the create.
	w := &Writer{Client: pod, Kind: "IPsecGateway", Namespace: own.Namespace, Name: own.Name}
	tunnels, ready := Compute([]string{"hq"}, nil, nil, time.Now())
	var werr error
	for i := 0; i < 50; i++ {
		if _, werr = w.Write(ctx, tunnels, ready); werr == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if werr != nil {
		t.Fatalf("the pod cannot write its own gateway's status: %v", werr)
	}
	if _, err := cs.CoreV1().ConfigMaps(own.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + render.ConfigMapName(own.Name)}); err != nil {
		t.Fatalf("the pod cannot list its own ConfigMap by name (the agent's watch): %v", err)
	}
	if _, err := cs.CoreV1().ConfigMaps(own.Namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + render.ConfigMapName(own.Name)}); err != nil {
		t.Fatalf("the pod cannot watch its own ConfigMap by name: %v", err)
	}

	if _, err := cs.CoreV1().Secrets(own.Namespace).Get(ctx, "psk", metav1.GetOptions{}); err != nil {
		t.Fatalf("the pod cannot read the Secret its tunnel names: %v", err)
	}
	if _, err := cs.CoreV1().Secrets(own.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=psk"}); err != nil {
		t.Fatalf("the pod cannot list its tunnel's Secret by name (the agent's watch): %v", err)
	}
	if w, err := cs.CoreV1().Secrets(own.Namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=psk"}); err != nil {
		t.Fatalf("the pod cannot watch its tunnel's Secret by name: %v", err)
	} else {
		w.Stop()
	}

	forbidden := map[string]error{}
	_, forbidden["another ConfigMap"] = cs.CoreV1().ConfigMaps(own.Namespace).Get(ctx, "unrelated", metav1.GetOptions{})
	_, forbidden["another Secret of its namespace"] = cs.CoreV1().Secrets(own.Namespace).Get(ctx, "another-tenants-secret", metav1.GetOptions{})
	_, forbidden["every Secret"] = cs.CoreV1().Secrets(own.Namespace).List(ctx, metav1.ListOptions{})
	_, forbidden["another Secret by name"] = cs.CoreV1().Secrets(own.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=another-tenants-secret"})
	_, forbidden["a Secret of another namespace"] = cs.CoreV1().Secrets("kube-system").Get(ctx, "psk", metav1.GetOptions{})
	_, forbidden["every ConfigMap"] = cs.CoreV1().ConfigMaps(own.Namespace).List(ctx, metav1.ListOptions{})
	forbidden["the gateway object"] = pod.Get(ctx, client.ObjectKeyFromObject(own), &v1alpha1.IPsecGateway{})
	ow := &Writer{Client: pod, Kind: "IPsecGateway", Namespace: other.Namespace, Name: other.Name}
	_, forbidden["another gateway's status"] = ow.Write(ctx, tunnels, ready)
	for what, err := range forbidden {
		if !apierrors.IsForbidden(errors.Unwrap(err)) && !apierrors.IsForbidden(err) {
			t.Errorf("the pod's Role must not allow reading %s; got %v", what, err)
		}
	}
}
