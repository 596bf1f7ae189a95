package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	ctrl "sigs.k8s.io/controller-runtime"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// metricsReaderRule is the rule of the chart's <fullname>-metrics-reader ClusterRole
// (templates/metrics-reader.yaml; test/chart checks the rendered one is this).
var metricsReaderRule = rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}

// The operator's metrics, served as the binary serves them by default (managerOptions
// with --metrics-secure), by a manager that runs as a ServiceAccount holding only the
// generated ClusterRole (config/rbac/role.yaml): a scrape without a token is refused
// (401), so is one with a token the API server does not know (401) and one whose
// ServiceAccount may not get /metrics (403); a ServiceAccount bound to the
// metrics-reader rule reads the series. With --metrics-cert-dir the server presents that
// certificate (the client verifies it against its CA).
func TestMetricsNeedAuthenticationAndAuthorisation(t *testing.T) {
	testenv.Need(t)
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "metrics-auth"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{"operator", "nobody", "prometheus"} {
		if err := env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}}); err != nil {
			t.Fatal(err)
		}
	}
	operatorRole := generatedClusterRole(t, "metrics-auth-operator")
	bind(t, ctx, operatorRole, ns, "operator")
	reader := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "metrics-auth-reader"}, Rules: []rbacv1.PolicyRule{metricsReaderRule}}
	bind(t, ctx, reader, ns, "prometheus")

	// A series of this test's own in the registry the server exposes.
	probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: "bnerd_test_metrics_auth_probe", Help: "set by the test"})
	probe.Set(42)
	if err := crmetrics.Registry.Register(probe); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { crmetrics.Registry.Unregister(probe) })

	// A certificate of the test's own for --metrics-cert-dir.
	certDir := t.TempDir()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKeyWithFixtures("localhost", []net.IP{{127, 0, 0, 1}}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(certDir, "tls.crt"), certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(certDir, "tls.key"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(certPEM) {
		t.Fatal("the test's certificate does not parse")
	}

	addr := freeLocalAddr(t)
	f, cfg, err := parseFlags([]string{"--metrics-bind-address=" + addr, "--metrics-cert-dir=" + certDir,
		"--health-probe-bind-address=0", "--leader-elect=false"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if !f.metricsSecure {
		t.Fatal("--metrics-secure is not the default")
	}
	scheme, err := newScheme()
	if err != nil {
		t.Fatal(err)
	}
	opts := managerOptions(f, cfg, scheme)
	opts.Logger = logr.Discard()
	asOperator := rest.CopyConfig(env.Config)
	asOperator.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":operator",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	mgr, err := ctrl.NewManager(asOperator, opts)
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	token := func(sa string) string {
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost"}}}
	scrape := func(bearer string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
		if err != nil {
			return 0, "", err
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	waitUntil(t, "the metrics server answers over TLS with the certificate of --metrics-cert-dir", func() bool {
		_, _, err := scrape("")
		return err == nil
	})

	// Plain HTTP on the same port is not served.
	if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || strings.Contains(string(body), "bnerd_test_metrics_auth_probe") {
			t.Errorf("plain HTTP got %d with the metrics", resp.StatusCode)
		}
	}

	readerToken := token("prometheus")
	for _, tc := range []struct {
		name, bearer string
		want         int
	}{
		{"no token", "", http.StatusUnauthorized},
		// controller-runtime's filter answers 500 when the TokenReview itself fails, as
		// it does for a string that is no token at all: refused either way.
		{"a token the API server did not issue", "not-a-token", http.StatusInternalServerError},
		{"a ServiceAccount without the metrics-reader role", token("nobody"), http.StatusForbidden},
		{"a ServiceAccount bound to the metrics-reader role", readerToken, http.StatusOK},
	} {
		code, body, err := scrape(tc.bearer)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if code != tc.want {
			t.Errorf("%s: HTTP %d, want %d: %s", tc.name, code, tc.want, body)
		}
		served := strings.Contains(body, "bnerd_test_metrics_auth_probe 42")
		if served != (tc.want == http.StatusOK) {
			t.Errorf("%s: the series served: %v, want %v", tc.name, served, tc.want == http.StatusOK)
		}
	}
}

// The same server with --metrics-secure=false serves plain HTTP to anyone (local use,
// and the soak and scale harnesses, which pass it explicitly).
func TestMetricsInsecureServesPlainHTTP(t *testing.T) {
	testenv.Need(t)
	ctx := t.Context()
	addr := freeLocalAddr(t)
	f, cfg, err := parseFlags([]string{"--metrics-bind-address=" + addr, "--metrics-secure=false",
		"--health-probe-bind-address=0", "--leader-elect=false"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	scheme, err := newScheme()
	if err != nil {
		t.Fatal(err)
	}
	opts := managerOptions(f, cfg, scheme)
	opts.Logger = logr.Discard()
	if opts.Metrics.SecureServing || opts.Metrics.FilterProvider != nil {
		t.Fatalf("--metrics-secure=false still serves securely: %+v", opts.Metrics)
	}
	mgr, err := ctrl.NewManager(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	var code int
	waitUntil(t, "plain HTTP metrics without a token", func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		resp.Body.Close()
		code = resp.StatusCode
		return true
	})
	if code != http.StatusOK {
		t.Errorf("plain HTTP scrape: %d, want 200", code)
	}
}

// generatedClusterRole is config/rbac/role.yaml under another name.
func generatedClusterRole(t *testing.T, name string) *rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(data, &role); err != nil {
		t.Fatal(err)
	}
	if len(role.Rules) == 0 {
		t.Fatal("config/rbac/role.yaml has no rules")
	}
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: role.Rules}
}

// bind creates role and a ClusterRoleBinding of it to the ServiceAccount ns/sa.
func bind(t *testing.T, ctx context.Context, role *rbacv1.ClusterRole, ns, sa string) {
	t.Helper()
	if err := env.Client.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name + "-" + ns + "-" + sa},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}}}
	if err := env.Client.Create(ctx, crb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), crb)
		_ = env.Client.Delete(context.Background(), role)
	})
}

func freeLocalAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
