package runbooks

import (
	"bytes"
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/kubectlvpn/cli"
	"bnerd.net/vpn-operator/internal/kubectlvpn/diagnose"
	"bnerd.net/vpn-operator/internal/kubectlvpn/peerconfig"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	testenv.Main(m, &env)
}

func root() string { return testenv.RepoRoot() }

func allBlocks(t *testing.T) []block {
	t.Helper()
	files, err := runbookFiles(root())
	if err != nil || len(files) < 9 {
		t.Fatalf("runbooks: %v %v", files, err)
	}
	bs, err := readBlocks(files)
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

func where(b block) string { return filepath.Base(b.file) + ":" + strconv.Itoa(b.line) }

// Every YAML manifest of the runbooks is admitted by the real API server with strict
// field validation; the operator's kinds also pass Validate() and the plaintext policy,
// so an example never teaches a spec the operator would refuse.
func TestManifestsAdmitted(t *testing.T) {
	testenv.Need(t)
	ctx := context.Background()
	n := 0
	for _, b := range allBlocks(t) {
		if b.info != "yaml" {
			continue
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(b.text), 4096)
		for {
			var u unstructured.Unstructured
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("%s: %v", where(b), err)
			}
			if len(u.Object) == 0 {
				continue
			}
			n++
			if ns := u.GetNamespace(); ns != "" {
				if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
					t.Fatal(err)
				}
			}
			if err := env.Client.Create(ctx, u.DeepCopy(), client.DryRunAll, client.FieldValidation("Strict")); err != nil {
				t.Errorf("%s: %s %s refused by the API server: %v", where(b), u.GetKind(), u.GetName(), err)
				continue
			}
			switch u.GetKind() {
			case "IPsecGateway":
				var g v1alpha1.IPsecGateway
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &g); err != nil {
					t.Fatal(err)
				}
				if errs := append(g.Spec.Validate(), g.Spec.PlaintextExposures()...); len(errs) > 0 {
					t.Errorf("%s: the operator would refuse gateway %s: %v", where(b), g.Name, errs.ToAggregate())
				}
			case "ClusterLink":
				var l v1alpha1.ClusterLink
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &l); err != nil {
					t.Fatal(err)
				}
				if errs := l.Spec.Validate(); len(errs) > 0 {
					t.Errorf("%s: the operator would refuse link %s: %v", where(b), l.Name, errs.ToAggregate())
				}
			}
		}
	}
	if n < 5 {
		t.Errorf("only %d manifests found in the runbooks", n)
	}
}

// Every `kubectl vpn` invocation in the runbooks parses with the plugin's real command
// tree and flags, names an existing subcommand, gives its required flags, and uses a
// format the plugin knows.
func TestKubectlVPNInvocations(t *testing.T) {
	n := 0
	for _, b := range allBlocks(t) {
		if b.info != "sh" && b.info != "console" {
			continue
		}
		for _, line := range commands(b) {
			words := shellWords(line)
			if len(words) < 2 || words[0] != "kubectl" || words[1] != "vpn" {
				continue
			}
			n++
			checkInvocation(t, where(b), words[2:], false)
		}
	}
	// The runbooks' prose names invocations too (`kubectl vpn ...` in backticks).
	files, _ := runbookFiles(root())
	re := regexp.MustCompile("`(kubectl vpn [^`]+)`")
	for _, f := range files {
		data, _ := os.ReadFile(f)
		for _, m := range re.FindAllStringSubmatch(string(data), -1) {
			words := shellWords(m[1])
			// Prose may elide arguments ("kubectl vpn peer-config ... --format <device>").
			if slices.ContainsFunc(words, func(w string) bool { return strings.Contains(w, "<") || w == "..." }) {
				continue
			}
			n++
			checkInvocation(t, filepath.Base(f)+" (prose)", words[2:], true)
		}
	}
	if n < 8 {
		t.Errorf("only %d kubectl vpn invocations found", n)
	}
}

// checkInvocation parses args with the plugin's command tree. Prose mentions
// (`kubectl vpn diagnose`) name a command and maybe a flag, so only those are checked.
func checkInvocation(t *testing.T, at string, args []string, prose bool) {
	t.Helper()
	cmd := cli.NewCommand(cli.IO{Out: io.Discard, Err: io.Discard, Getenv: func(string) string { return "" }}, nil)
	if len(args) == 1 && (args[0] == "--help" || args[0] == "-h") {
		return
	}
	sub, rest, err := cmd.Find(args)
	if err != nil || sub == cmd {
		t.Errorf("%s: kubectl vpn %s: no such subcommand (%v)", at, strings.Join(args, " "), err)
		return
	}
	sub.InitDefaultHelpFlag()
	if err := sub.ParseFlags(rest); err != nil {
		t.Errorf("%s: kubectl vpn %s: %v", at, strings.Join(args, " "), err)
		return
	}
	if help, _ := sub.Flags().GetBool("help"); help || prose {
		return
	}
	if err := sub.ValidateArgs(sub.Flags().Args()); err != nil {
		t.Errorf("%s: kubectl vpn %s: %v", at, strings.Join(args, " "), err)
	}
	required := map[string][]string{"peer-config": {"tunnel", "format"}, "migrate": {"from", "name"}}
	for _, f := range required[sub.Name()] {
		if !sub.Flags().Changed(f) {
			t.Errorf("%s: kubectl vpn %s lacks --%s", at, strings.Join(args, " "), f)
		}
	}
	if sub.Name() == "peer-config" {
		f, _ := sub.Flags().GetString("format")
		if !slices.Contains(peerconfig.Formats, peerconfig.Format(f)) {
			t.Errorf("%s: unknown format %q", at, f)
		}
	}
	_ = cobra.Command{}
}

// Annotations the runbooks tell people to set are the API's own (or the documented
// converge-now annotation diagnose prints).
func TestAnnotations(t *testing.T) {
	known := map[string]bool{
		v1alpha1.AnnotationAbandonCustomerResources: true,
		v1alpha1.AnnotationCustomerAPIAccess:        true,
		diagnose.NudgeAnnotation:                    true,
	}
	n := 0
	for _, b := range allBlocks(t) {
		if b.info != "sh" && b.info != "console" {
			continue
		}
		for _, line := range commands(b) {
			words := shellWords(line)
			if len(words) < 2 || words[0] != "kubectl" || words[1] != "annotate" {
				continue
			}
			for _, w := range words[2:] {
				k, _, ok := strings.Cut(w, "=")
				if ok && strings.Contains(k, "bnerd.net/") {
					n++
					if !known[k] {
						t.Errorf("%s: annotation %q is not one the operator or diagnose knows", where(b), k)
					}
				}
			}
		}
	}
	if n < 2 {
		t.Errorf("found %d annotate commands", n)
	}
}

// reasons parses api/v1alpha1/conditions.go for every Reason* constant's value.
func reasons(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root(), "api", "v1alpha1", "conditions.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, name := range vs.Names {
			if strings.HasPrefix(name.Name, "Reason") && i < len(vs.Values) {
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
					v, _ := strconv.Unquote(lit.Value)
					if !slices.Contains(out, v) {
						out = append(out, v)
					}
				}
			}
		}
		return true
	})
	if len(out) < 50 {
		t.Fatalf("found only %d reasons in conditions.go", len(out))
	}
	return out
}

// Every condition reason has a troubleshooting entry: its own heading, or a row of the
// "all is well" table. The reasons diagnose links to, its findings and the chart's
// alerts all have theirs.
func TestTroubleshootingCoversEverything(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root(), "docs", "runbooks", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	h3 := headings(text, 3)
	for _, r := range reasons(t) {
		if !slices.Contains(h3, r) && !strings.Contains(text, "| `"+r+"` |") {
			t.Errorf("reason %s has no troubleshooting entry (a ### %s heading or an all-is-well row)", r, r)
		}
	}
	for _, r := range diagnose.GatewayReasons {
		if !slices.Contains(h3, r) {
			t.Errorf("diagnose links reason %s to the troubleshooting page, which has no ### %s heading", r, r)
		}
	}
	for _, f := range diagnose.Findings {
		if !slices.Contains(h3, f) {
			t.Errorf("diagnose finding %q has no ### heading", f)
		}
	}
	a := anchors(text)
	for _, h := range append(append([]string{}, diagnose.Findings...), diagnose.GatewayReasons...) {
		link := diagnose.Anchor(h)
		if _, frag, _ := strings.Cut(link, "#"); !a[frag] {
			t.Errorf("diagnose's link %s does not resolve", link)
		}
	}
	rule, err := os.ReadFile(filepath.Join(root(), "charts", "bnerd-vpn-operator", "templates", "gateway-prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := regexp.MustCompile(`(?m)^\s+- alert: (\S+)$`).FindAllStringSubmatch(string(rule), -1)
	if len(alerts) < 5 {
		t.Fatalf("found %d alerts in the chart", len(alerts))
	}
	for _, m := range alerts {
		if !strings.Contains(text, "| `"+m[1]+"` |") {
			t.Errorf("alert %s has no row in the troubleshooting page's alert table", m[1])
		}
	}
}

// Relative links between the documents resolve, anchors included.
func TestLinks(t *testing.T) {
	files, _ := runbookFiles(root())
	for _, f := range files {
		data, _ := os.ReadFile(f)
		for _, m := range reLink.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.HasPrefix(target, "http") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), path)
			}
			b, err := os.ReadFile(dest)
			if err != nil {
				t.Errorf("%s: link %s: %v", filepath.Base(f), target, err)
				continue
			}
			if frag != "" && !anchors(string(b))[frag] {
				t.Errorf("%s: link %s: no such heading", filepath.Base(f), target)
			}
		}
	}
}

// The ClusterRole kubectl-vpn.md documents is enough for diagnose: run as a user bound to
// exactly that role, diagnose of a converged gateway reads everything it needs
// (OpenStack and the exporter skipped on request) and finds nothing wrong; the role does
// not let the user read Secrets.
func TestDocumentedRBACIsEnough(t *testing.T) {
	testenv.Need(t)
	ctx := context.Background()
	var role rbacv1.ClusterRole
	for _, b := range allBlocks(t) {
		if b.info == "yaml" && filepath.Base(b.file) == "kubectl-vpn.md" && strings.Contains(b.text, "kind: ClusterRole") {
			if err := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(b.text), 4096).Decode(&role); err != nil {
				t.Fatal(err)
			}
		}
	}
	if role.Name == "" {
		t.Fatal("kubectl-vpn.md has no ClusterRole")
	}
	role.ResourceVersion = ""
	if err := env.Client.Create(ctx, &role); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	const user = "oncall@example"
	if err := env.Client.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "oncall-diagnose"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}); err != nil {
		t.Fatal(err)
	}

	ns, name, node := "rbac-check", "acme", "rbac-node"
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: corev1.NodeSpec{ProviderID: "openstack:///11111111-1111-4111-8111-111111111111"}}
	must(env.Client.Create(ctx, n))
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	must(env.Client.Status().Update(ctx, n))
	g := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.GatewaySpec{
		Tunnels: []v1alpha1.Tunnel{{Name: "hq", Peer: v1alpha1.Peer{Address: "198.51.100.7", Subnets: []string{"192.168.10.0/24"}}, PreSharedKey: v1alpha1.SecretKeyRef{Name: "hq-psk"}}}}}
	must(env.Client.Create(ctx, g))
	now := metav1.Now()
	g.Status.NodeName, g.Status.ServerID = node, "11111111-1111-4111-8111-111111111111"
	for _, c := range diagnose.PhaseConditions {
		g.Status.Conditions = append(g.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: "Test", ObservedGeneration: g.Generation, LastTransitionTime: now})
	}
	est := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	g.Status.Tunnels = []v1alpha1.TunnelState{{Name: "hq", State: "Up", EstablishedAt: &est}}
	must(env.Client.Status().Update(ctx, g))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "acme-gateway-1",
		Labels: render.SelectorLabels(render.Gateway{Kind: "IPsecGateway", Name: name})},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "strongswan", Image: "x"}}}}
	must(env.Client.Create(ctx, pod))
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	must(env.Client.Status().Update(ctx, pod))

	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	var out, errb bytes.Buffer
	cmd := cli.NewCommand(cli.IO{Out: &out, Err: &errb, Getenv: func(string) string { return "" }}, cfg)
	cmd.SetArgs([]string{"diagnose", name, "-n", ns, "--skip-openstack", "--skip-exporter"})
	err := cmd.ExecuteContext(ctx)
	if cli.Code(err) != 0 || strings.Contains(strings.ToLower(out.String()+errb.String()), "forbidden") {
		t.Errorf("diagnose as %s: exit %d %v\n%s%s", user, cli.Code(err), err, out.String(), errb.String())
	}

	can := func(verb, resource, sub string) bool {
		sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{User: user,
			ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: resource, Subresource: sub}}}
		must(env.Client.Create(ctx, sar))
		return sar.Status.Allowed
	}
	if !can("get", "pods", "proxy") {
		t.Error("the documented role does not allow the exporter read (get pods/proxy)")
	}
	if can("get", "secrets", "") {
		t.Error("the documented role lets the user read Secrets")
	}
}
