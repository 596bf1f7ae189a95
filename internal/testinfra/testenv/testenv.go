// Package testenv starts a real kube-apiserver and etcd (controller-runtime's envtest)
// with this project's CRDs installed, for integration tests. The binaries are built from
// the Go module proxy by hack/controlplane.sh into a per-version cache.
package testenv

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// RequireEnv, when set to 1, turns a missing control plane into a test failure instead
// of a skip. The project's test command sets it, so CI can never pass by skipping.
const RequireEnv = "BNERD_REQUIRE_ENVTEST"

// Env is a running control plane.
type Env struct {
	Config *rest.Config
	Client client.Client
	Scheme *k8sruntime.Scheme
	BinDir string
	env    *envtest.Environment
}

// RepoRoot is the module root, found from this source file.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// BinDir locates the kube-apiserver, etcd and kubectl binaries: $KUBEBUILDER_ASSETS, or
// the cache hack/controlplane.sh fills (asked in its "print only" mode so the path has one
// definition). It returns "" when they are missing.
func BinDir() string {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d
	}
	out, err := exec.Command("bash", filepath.Join(RepoRoot(), "hack", "controlplane.sh"), "--print-dir").Output()
	if err != nil {
		return ""
	}
	d := strings.TrimSpace(string(out))
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(d, b)); err != nil {
			return ""
		}
	}
	return d
}

// NewScheme returns a scheme with the core Kubernetes types and this project's API.
func NewScheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// Start starts a control plane with the CRDs of config/crd installed. It returns an
// error the caller reports; Skip reports whether it is a skip (binaries missing and not
// required) rather than a failure.
func Start() (*Env, error) { return StartWith(nil) }

// StartWith is Start with further kube-apiserver flags (for example an audit policy
// and log, to see which requests a component makes).
func StartWith(apiServerFlags map[string]string) (*Env, error) {
	if UnitTier() {
		return nil, ErrUnitTier
	}
	dir := BinDir()
	if dir == "" {
		return nil, ErrNoControlPlane
	}
	api := &envtest.APIServer{}
	for k, v := range apiServerFlags {
		api.Configure().Set(k, v)
	}
	env := &envtest.Environment{
		ControlPlane:          envtest.ControlPlane{APIServer: api},
		BinaryAssetsDirectory: dir,
		// The project's CRDs, and the Multus NAD CRD the gateway workload needs.
		CRDDirectoryPaths: []string{
			filepath.Join(RepoRoot(), "config", "crd"),
			filepath.Join(RepoRoot(), "config", "thirdparty"),
		},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting the control plane from %s: %w", dir, err)
	}
	scheme := NewScheme()
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Env{Config: cfg, Client: c, Scheme: scheme, BinDir: dir, env: env}, nil
}

// ErrNoControlPlane means the binaries are not built.
var ErrNoControlPlane = fmt.Errorf("kube-apiserver/etcd not found: run `make controlplane` (or set KUBEBUILDER_ASSETS)")

// ErrUnitTier is Start's refusal under -short: the unit tier starts no control plane. A
// test reaching it missed its SkipUnit.
var ErrUnitTier = errors.New(UnitTierPrefix + " starts no API server; call testenv.SkipUnit before testenv.Start")

// KubeConfig is a kubeconfig file's content for the running control plane.
func (e *Env) KubeConfig() []byte { return e.env.KubeConfig }

// WriteKubeConfig writes the kubeconfig into dir and returns its path.
func (e *Env) WriteKubeConfig(dir string) (string, error) {
	p := filepath.Join(dir, "kubeconfig")
	return p, os.WriteFile(p, e.env.KubeConfig, 0o600)
}

// Stop stops the control plane.
func (e *Env) Stop() error { return e.env.Stop() }

// Main runs a package's tests against one control plane shared by the package: use it
// as `func TestMain(m *testing.M) { testenv.Main(m, &env) }`. Without binaries the tests
// are skipped with the reason, unless RequireEnv is set, which makes that a failure.
//
// Under -short (the unit tier) it starts nothing: Need skips each test with the unit
// tier's reason (or fails it when RequireEnv is set), and the package's other tests run.
//
// afterAll checks run once every test has run, whatever their order or selection (a
// scan of what the whole suite logged, say); one that returns an error fails the run.
func Main(m *testing.M, out **Env, afterAll ...func() error) {
	run := func() int {
		code := m.Run()
		for _, check := range afterAll {
			if err := check(); err != nil {
				fmt.Fprintf(os.Stderr, "FAIL: after all tests: %v\n", err)
				code = 1
			}
		}
		return code
	}
	if UnitTier() {
		skipAll = UnitTierPrefix + " starts no API server; run without -short for this test"
		skipUnit = true
		os.Exit(run())
	}
	e, err := Start()
	if err != nil {
		if err == ErrNoControlPlane && !Required() {
			fmt.Fprintf(os.Stderr, "SKIP: %v\n", err)
			skipAll = err.Error()
			os.Exit(run())
		}
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		os.Exit(1)
	}
	*out = e
	code := run()
	if err := e.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the control plane: %v\n", err)
	}
	os.Exit(code)
}

var (
	skipAll  string
	skipUnit bool // skipAll is the unit tier's, not a missing control plane
)

// Required reports whether a missing control plane must fail rather than skip.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// Need skips the calling test when Main started no control plane: none was found (a
// skip only when RequireEnv is not set, else Main failed already), or the run is the
// unit tier (a failure when RequireEnv is set: nothing skips then).
func Need(t testing.TB) {
	t.Helper()
	if skipAll == "" {
		return
	}
	if skipUnit && Required() {
		t.Fatalf("%s (and %s=1 requires every control-plane test to run)", skipAll, RequireEnv)
	}
	t.Skip(skipAll)
}

// UnitTierPrefix begins the reason of every skip the unit tier makes, so a test report
// tells them apart from a missing prerequisite.
const UnitTierPrefix = "the unit tier (go test -short, make unit)"

// UnitTier reports whether this is a test binary run with -short: the unit tier, which
// starts no API server and needs no root. Outside a test binary it is false.
func UnitTier() bool {
	if !testing.Testing() {
		return false
	}
	if !flag.Parsed() {
		// TestMain runs before testing.M.Run parses the flags; parsing them here is what
		// M.Run would do (it parses only once).
		flag.Parse()
	}
	return testing.Short()
}

// SkipUnit skips the calling test in the unit tier, saying why it is left out (it needs
// an API server, builds and runs binaries, ...). When RequireEnv or RequireDataplaneEnv
// is set nothing may skip, so it fails the test instead. Without -short it does nothing.
func SkipUnit(t testing.TB, why string) {
	t.Helper()
	if !UnitTier() {
		return
	}
	msg := UnitTierPrefix + " leaves this test out: " + why
	for _, v := range []string{RequireEnv, RequireDataplaneEnv} {
		if os.Getenv(v) == "1" {
			t.Fatalf("%s (and %s=1 requires it to run)", msg, v)
		}
	}
	t.Skip(msg)
}

// NeedRoot is the root check of a test that needs root: in the unit tier it skips the
// test whoever runs it (the unit tier needs no root), failing it instead when
// RequireDataplaneEnv is set; otherwise, not run as root, it is SkipDataplane(t, why).
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if UnitTier() {
		msg := UnitTierPrefix + " needs no root, and this test does: " + why
		if os.Getenv(RequireDataplaneEnv) == "1" {
			t.Fatalf("%s (and %s=1 requires it to run)", msg, RequireDataplaneEnv)
		}
		t.Skip(msg)
	}
	if os.Geteuid() != 0 {
		SkipDataplane(t, why)
	}
}

// Codecs decodes YAML manifests into typed objects of the scheme.
func Codecs(s *k8sruntime.Scheme) serializer.CodecFactory { return serializer.NewCodecFactory(s) }

// RequireDataplaneEnv, when set to 1, turns a dataplane test's missing prerequisite
// (root, a Debian package) into a failure. The project's test command sets it when run as
// root, which is how CI runs, so the dataplane tests can never pass there by skipping.
const RequireDataplaneEnv = "BNERD_REQUIRE_DATAPLANE"

// SkipDataplane skips a dataplane test for reason, or fails it when the environment
// requires the dataplane tests to run.
func SkipDataplane(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv(RequireDataplaneEnv) == "1" {
		t.Fatalf("%s (and %s=1 requires the dataplane tests to run)", reason, RequireDataplaneEnv)
	}
	t.Skip(reason)
}
