package preflight

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

type capture struct {
	mu    sync.Mutex
	lines []string
}

func (c *capture) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		c.mu.Lock()
		c.lines = append(c.lines, args)
		c.mu.Unlock()
	}, funcr.Options{Verbosity: 1})
}

func (c *capture) warnings() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, l := range c.lines {
		if strings.Contains(l, "WARNING") {
			n++
		}
	}
	return n
}

func TestCheckCiliumExclusive(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = corev1.AddToScheme(scheme)
	cm := func(data map[string]string) client.Object {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cilium-config"}, Data: data}
	}
	cases := []struct {
		name    string
		objs    []client.Object
		confirm bool
	}{
		{"configmap missing", nil, false},
		{"key missing", []client.Object{cm(map[string]string{"enable-ipv4": "true"})}, false},
		{"exclusive true", []client.Object{cm(map[string]string{"cni-exclusive": "true"})}, false},
		{"exclusive false", []client.Object{cm(map[string]string{"cni-exclusive": "false"})}, true},
		{"exclusive False with spaces", []client.Object{cm(map[string]string{"cni-exclusive": " False "})}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.objs...).Build()
			var logs capture
			got := CheckCiliumExclusive(context.Background(), c, logs.logger())
			if got != tc.confirm {
				t.Fatalf("confirmed=%v, want %v", got, tc.confirm)
			}
			if w := logs.warnings(); (w > 0) == tc.confirm {
				t.Fatalf("warnings=%d with confirmed=%v; logs: %v", w, got, logs.lines)
			}
		})
	}
}

// The transit network check against the OpenStack simulator: a network shared with
// every project (flag or wildcard RBAC) is a WARNING at start naming the admin's
// command; per-project shares are not.
func TestCheckTransitNetworkShare(t *testing.T) {
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
	ctx := context.Background()
	c, err := openstack.NewClients(ctx, openstack.Credential{AuthURL: s.AuthURL(), Region: s.Region(), AppCredentialID: id, AppCredentialSecret: secret}, openstack.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	net, ok := s.NetworkByName("vpn-transit")
	if !ok {
		t.Fatal("no transit network in the seed")
	}
	check := func() (bool, *capture) {
		cp := &capture{}
		return CheckTransitNetworkShare(ctx, c.Networking, "vpn-transit", cp.logger()), cp
	}
	if ok, cp := check(); !ok || cp.warnings() != 0 {
		t.Fatalf("an unshared network: ok=%v, %d warnings", ok, cp.warnings())
	}
	if _, err := s.AddRBACPolicy(net.ID, "0123456789abcdef0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	if ok, cp := check(); !ok || cp.warnings() != 0 {
		t.Fatalf("a per-project share: ok=%v, %d warnings", ok, cp.warnings())
	}
	if err := s.SetNetworkShared(net.ID, true); err != nil {
		t.Fatal(err)
	}
	ok, cp := check()
	if ok || cp.warnings() != 1 || !strings.Contains(strings.Join(cp.lines, "\n"), "openstack network set --no-share "+net.ID) {
		t.Fatalf("shared=True: ok=%v, log %v", ok, cp.lines)
	}
	if err := s.SetNetworkShared(net.ID, false); err != nil {
		t.Fatal(err)
	}
	pol, err := s.AddRBACPolicy(net.ID, "*")
	if err != nil {
		t.Fatal(err)
	}
	ok, cp = check()
	if ok || cp.warnings() != 1 || !strings.Contains(strings.Join(cp.lines, "\n"), "openstack network rbac delete "+pol.ID) {
		t.Fatalf("wildcard RBAC: ok=%v, log %v", ok, cp.lines)
	}
}
