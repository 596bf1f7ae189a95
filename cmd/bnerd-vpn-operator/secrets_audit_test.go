package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// auditEvent is the part of a kube-apiserver audit event the test reads.
type auditEvent struct {
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	UserAgent  string `json:"userAgent"`
	ObjectRef  struct {
		Resource  string `json:"resource"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"objectRef"`
}

const operatorUserAgent = "bnerd-vpn-operator-under-audit"

// The operator as the binary wires it (setupControllers, managerOptions) runs against a
// kube-apiserver that writes an audit log of every Secret request. With a gateway
// whose tunnel names a PSK Secret and a cross-tenant ClusterLink with its credential
// Secret, both reconciled to the point where the Secrets are checked and followed,
// the log shows the operator never listing or watching Secrets cluster-wide or in a
// whole namespace: every list and watch names one Secret (a metadata.name field
// selector) in one namespace, every get one Secret the resources name, and it writes
// none. A cluster-wide list made by the test itself is in the log, so the log does
// record such requests.
func TestOperatorNeverListsOrWatchesSecretsWholesale(t *testing.T) {
	testenv.Need(t)
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  resources:
  - group: ""
    resources: ["secrets"]
- level: None
`), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "audit.log")
	aenv, err := testenv.StartWith(map[string]string{"audit-policy-file": policy, "audit-log-path": logPath})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = aenv.Stop() }()

	seed, err := openstacksim.LoadSeed(filepath.Join(testenv.RepoRoot(), "examples", "sim-estate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := openstacksim.Start(seed)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	id, secret, _ := s.AppCredential("vpn-operator")
	cred := openstack.Credential{AuthURL: s.AuthURL(), Region: s.Region(), AppCredentialID: id, AppCredentialSecret: secret}
	clients, err := openstack.NewClients(ctx, cred, openstack.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token, err := clients.Identity.TokenInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}

	c := aenv.Client
	for _, ns := range []string{"audit-operator", "audit-tenant", "bnerd-vpn-clusterlinks"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	envVars := map[string]string{"POD_NAMESPACE": "audit-operator", "IPSEC_GATEWAY_NETWORK": "vpn-transit",
		"IPSEC_EXTERNAL_NETWORK": "public", "IPSEC_ROUTER_ID": "shoot--services--vpn01"}
	f, cfg, err := parseFlags([]string{"--metrics-bind-address=0", "--health-probe-bind-address=0", "--leader-elect=false"},
		func(k string) string { return envVars[k] })
	if err != nil {
		t.Fatal(err)
	}
	scheme, err := newScheme()
	if err != nil {
		t.Fatal(err)
	}
	opts := managerOptions(f, cfg, scheme)
	opts.Logger = logr.Discard()
	rc := rest.CopyConfig(aenv.Config)
	rc.UserAgent = operatorUserAgent
	mgr, err := ctrl.NewManager(rc, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := setupControllers(mgr, cfg, clients, openstack.ClientOptions{}, cred, token.ProjectID); err != nil {
		t.Fatal(err)
	}
	mctx, mcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			mcancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		}
	}
	defer stop()

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "audit-node"}, Spec: corev1.NodeSpec{ProviderID: "openstack:///11111111-1111-4111-8111-111111111111"}}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if err := c.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	// An unrelated Secret in the tenant's namespace and one elsewhere: the operator
	// must never touch them.
	for _, sec := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "audit-tenant", Name: "hq-psk"}, Data: map[string][]byte{"psk": []byte("an audited key of more than twenty bytes")}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "audit-tenant", Name: "unrelated"}, Data: map[string][]byte{"x": []byte("y")}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "elsewhere"}, Data: map[string][]byte{"x": []byte("y")}},
	} {
		if err := c.Create(ctx, sec); err != nil {
			t.Fatal(err)
		}
	}
	gw := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "audit-tenant", Name: "gw"}, Spec: v1alpha1.GatewaySpec{
		Tunnels: []v1alpha1.Tunnel{{Name: "hq", Peer: v1alpha1.Peer{Address: "198.51.100.7", Subnets: []string{"192.168.10.0/24"}},
			PreSharedKey: v1alpha1.SecretKeyRef{Name: "hq-psk"}}},
	}}
	if err := c.Create(ctx, gw); err != nil {
		t.Fatal(err)
	}
	cid, csecret, _ := s.AppCredential("customer-diehl")
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "bnerd-vpn-clusterlinks", Name: "clusterlink-diehl01"},
		Data: map[string][]byte{openstack.EnvAppCredentialID: []byte(cid), openstack.EnvAppCredentialSecret: []byte(csecret)}}); err != nil {
		t.Fatal(err)
	}
	customer, _ := s.ProjectByName("customer-diehl")
	link := &v1alpha1.ClusterLink{ObjectMeta: metav1.ObjectMeta{Name: "diehl01", Annotations: map[string]string{v1alpha1.AnnotationCustomerAPIAccess: "none"}},
		Spec: v1alpha1.ClusterLinkSpec{ServiceClusterRouter: "shoot--diehl--diehl01", ServiceClusterCIDR: "10.234.0.0/16",
			CredentialsSecretRef: &v1alpha1.SecretRef{Name: "clusterlink-diehl01", Namespace: "bnerd-vpn-clusterlinks"}, CustomerProjectID: customer.ID}}
	if err := c.Create(ctx, link); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the gateway's workload phase checked the key", func() bool {
		var g v1alpha1.IPsecGateway
		_ = c.Get(ctx, client.ObjectKeyFromObject(gw), &g)
		return meta.IsStatusConditionTrue(g.Status.Conditions, v1alpha1.ConditionWorkloadReady)
	})
	waitUntil(t, "the ClusterLink Ready", func() bool {
		var l v1alpha1.ClusterLink
		_ = c.Get(ctx, client.ObjectKeyFromObject(link), &l)
		return meta.IsStatusConditionTrue(l.Status.Conditions, v1alpha1.ConditionReady)
	})
	stop()

	// The negative control: a cluster-wide list, made here with another user agent.
	cc := rest.CopyConfig(aenv.Config)
	cc.UserAgent = "audit-control"
	cs, err := kubernetes.NewForConfig(cc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}

	file, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	var ops, controls int
	watched := map[string]bool{}
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line: %v", err)
		}
		if e.ObjectRef.Resource != "secrets" {
			continue
		}
		if strings.HasPrefix(e.UserAgent, "audit-control") && e.Verb == "list" && e.ObjectRef.Namespace == "" {
			controls++
		}
		if !strings.HasPrefix(e.UserAgent, operatorUserAgent) {
			continue
		}
		ops++
		ref := e.ObjectRef.Namespace + "/" + e.ObjectRef.Name
		switch e.Verb {
		case "list", "watch":
			if e.ObjectRef.Namespace == "" || !strings.Contains(e.RequestURI, "fieldSelector=metadata.name%3D") {
				t.Errorf("the operator made a wholesale Secret %s: %s", e.Verb, e.RequestURI)
			}
			if e.Verb == "watch" {
				watched[e.ObjectRef.Namespace] = true
			}
		case "get", "delete":
			// A get names its Secret; a delete is the removal of an earlier release's
			// rendered Secret, which this gateway never had.
			if ref != "audit-tenant/hq-psk" && ref != "bnerd-vpn-clusterlinks/clusterlink-diehl01" && ref != "audit-tenant/gw-gateway-psk" {
				t.Errorf("the operator %s a Secret no resource names: %s", e.Verb, ref)
			}
		default:
			t.Errorf("the operator wrote a Secret: %s %s", e.Verb, e.RequestURI)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if controls == 0 {
		t.Fatal("the audit log does not show the test's own cluster-wide Secret list: it cannot show the operator's either")
	}
	for _, ns := range []string{"audit-tenant", "bnerd-vpn-clusterlinks"} {
		if !watched[ns] {
			t.Errorf("no named watch of a Secret in %s: the test did not see the operator follow its Secrets (%v)", ns, watched)
		}
	}
	t.Logf("%d Secret requests by the operator, every one by name; watches %v", ops, watched)
}
