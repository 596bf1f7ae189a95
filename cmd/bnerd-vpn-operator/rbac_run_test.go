package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// The operator as the binary wires it runs as a ServiceAccount that holds nothing but
// the generated ClusterRole (config/rbac/role.yaml, the chart's) and, in its namespace,
// what the chart's leader-election Role grants, against an API server that audits
// every request of that ServiceAccount. It takes a gateway to WorkloadReady and a
// ClusterLink to Ready (finalizers added, status applied), writes a VPNTenantPolicy's
// status, and removes both finalizers when the gateway and the ClusterLink are deleted;
// the audit log shows no request of it refused. A request the role does not grant,
// made as the same ServiceAccount by the test, is in the log as 403, so the log would
// show the operator's.
func TestOperatorWorksWithTheGeneratedClusterRole(t *testing.T) {
	testenv.Need(t)
	const (
		opNS   = "rbac-operator"
		tenant = "rbac-tenant"
		creds  = "bnerd-vpn-clusterlinks"
	)
	user := "system:serviceaccount:" + opNS + ":operator"
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(fmt.Sprintf(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`)), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "audit.log")
	aenv, err := testenv.StartWith(map[string]string{"audit-policy-file": policy, "audit-log-path": logPath})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = aenv.Stop() }()
	c := aenv.Client
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	for _, ns := range []string{opNS, tenant, creds} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: opNS, Name: "operator"}}); err != nil {
		t.Fatal(err)
	}
	role := generatedClusterRole(t, "rbac-operator")
	if err := c.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: opNS, Name: "operator"}}
	if err := c.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "rbac-operator"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}, Subjects: subjects}); err != nil {
		t.Fatal(err)
	}

	seed, err := openstacksim.LoadSeed(filepath.Join(testenv.RepoRoot(), "examples", "sim-estate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := openstacksim.Start(seed)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
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

	envVars := map[string]string{"POD_NAMESPACE": opNS, "IPSEC_GATEWAY_NETWORK": "vpn-transit",
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
	skipNameValidation := true // other tests of the package run the same controllers
	opts.Controller.SkipNameValidation = &skipNameValidation
	asOperator := rest.CopyConfig(aenv.Config)
	asOperator.Impersonate = rest.ImpersonationConfig{UserName: user,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + opNS, "system:authenticated"}}
	mgr, err := ctrl.NewManager(asOperator, opts)
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

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "rbac-node"}, Spec: corev1.NodeSpec{ProviderID: "openstack:///11111111-1111-4111-8111-111111111111"}}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if err := c.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "hq-psk"},
		Data: map[string][]byte{"psk": []byte("a key of more than twenty bytes for RBAC")}}); err != nil {
		t.Fatal(err)
	}
	gw := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "gw"}, Spec: v1alpha1.GatewaySpec{
		Tunnels: []v1alpha1.Tunnel{{Name: "hq", Peer: v1alpha1.Peer{Address: "198.51.100.7", Subnets: []string{"192.168.10.0/24"}},
			PreSharedKey: v1alpha1.SecretKeyRef{Name: "hq-psk"}}},
	}}
	if err := c.Create(ctx, gw); err != nil {
		t.Fatal(err)
	}
	cid, csecret, _ := s.AppCredential("customer-diehl")
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: creds, Name: "clusterlink-diehl01"},
		Data: map[string][]byte{openstack.EnvAppCredentialID: []byte(cid), openstack.EnvAppCredentialSecret: []byte(csecret)}}); err != nil {
		t.Fatal(err)
	}
	customer, _ := s.ProjectByName("customer-diehl")
	link := &v1alpha1.ClusterLink{ObjectMeta: metav1.ObjectMeta{Name: "diehl01", Annotations: map[string]string{v1alpha1.AnnotationCustomerAPIAccess: "none"}},
		Spec: v1alpha1.ClusterLinkSpec{ServiceClusterRouter: "shoot--diehl--diehl01", ServiceClusterCIDR: "10.234.0.0/16",
			CredentialsSecretRef: &v1alpha1.SecretRef{Name: "clusterlink-diehl01", Namespace: creds}, CustomerProjectID: customer.ID}}
	if err := c.Create(ctx, link); err != nil {
		t.Fatal(err)
	}
	// A policy that selects no namespace of the test: only its status is written.
	pol := &v1alpha1.VPNTenantPolicy{ObjectMeta: metav1.ObjectMeta{Name: "rbac-nobody"}, Spec: v1alpha1.VPNTenantPolicySpec{
		NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"ipsec.bnerd.net/tenant": "nobody"}}}}
	if err := c.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}

	waitUntil(t, "the gateway WorkloadReady", func() bool {
		var g v1alpha1.IPsecGateway
		_ = c.Get(ctx, client.ObjectKeyFromObject(gw), &g)
		return meta.IsStatusConditionTrue(g.Status.Conditions, v1alpha1.ConditionWorkloadReady) && len(g.Finalizers) > 0
	})
	waitUntil(t, "the ClusterLink Ready", func() bool {
		var l v1alpha1.ClusterLink
		_ = c.Get(ctx, client.ObjectKeyFromObject(link), &l)
		return meta.IsStatusConditionTrue(l.Status.Conditions, v1alpha1.ConditionReady) && len(l.Finalizers) > 0
	})
	waitUntil(t, "the VPNTenantPolicy's status written", func() bool {
		var p v1alpha1.VPNTenantPolicy
		_ = c.Get(ctx, client.ObjectKeyFromObject(pol), &p)
		return meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionReady) != nil
	})
	if err := c.Delete(ctx, gw); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, link); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the gateway's finalizer removed", func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(gw), &v1alpha1.IPsecGateway{}))
	})
	waitUntil(t, "the ClusterLink's finalizer removed", func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(link), &v1alpha1.ClusterLink{}))
	})
	stop()

	// The control: as the same ServiceAccount, a write the role does not grant.
	ac, err := client.New(asOperator, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	control := &v1alpha1.VPNTenantPolicy{ObjectMeta: metav1.ObjectMeta{Name: "rbac-control"}}
	if err := ac.Create(ctx, control); !apierrors.IsForbidden(err) {
		t.Fatalf("creating a VPNTenantPolicy as the operator: %v, want forbidden", err)
	}

	// The log backend writes an event after the response has gone out: read the log
	// again until the control's line is there.
	var requests, controls int
	var refused []string
	read := func() bool {
		requests, controls, refused = 0, 0, nil
		data, err := os.ReadFile(logPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(data, []byte("\n")) {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			var e struct {
				Verb       string `json:"verb"`
				RequestURI string `json:"requestURI"`
				ObjectRef  struct {
					Resource string `json:"resource"`
					Name     string `json:"name"`
				} `json:"objectRef"`
				ResponseStatus struct {
					Code int `json:"code"`
				} `json:"responseStatus"`
				User struct {
					Username string `json:"username"`
				} `json:"user"`
				ImpersonatedUser struct {
					Username string `json:"username"`
				} `json:"impersonatedUser"`
			}
			if err := json.Unmarshal(line, &e); err != nil {
				return false // a line being written
			}
			// The API server judges its audit policy before impersonation, so the policy
			// logs everyone and the operator's requests are picked out here.
			if e.User.Username != user && e.ImpersonatedUser.Username != user {
				continue
			}
			if e.ObjectRef.Resource == "vpntenantpolicies" && e.Verb == "create" && e.ResponseStatus.Code == 403 {
				controls++
				continue
			}
			requests++
			if e.ResponseStatus.Code == 403 {
				refused = append(refused, e.Verb+" "+e.RequestURI)
			}
		}
		return controls > 0
	}
	deadline := time.Now().Add(30 * time.Second)
	for !read() && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if controls != 1 {
		t.Fatalf("the audit log shows %d refused control requests, want 1: it cannot show the operator's", controls)
	}
	for _, r := range refused {
		t.Errorf("the operator was refused: %s", r)
	}
	t.Logf("%d requests by the operator, none refused", requests)
}
