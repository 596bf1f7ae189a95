package testlint

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Module is the operator's module path; the layering rules name packages below it.
const Module = "bnerd.net/vpn-operator"

// Imports maps each package directory (relative to the module root, slash-separated) to
// the module's packages its non-test files import (relative too). Test files are left
// out: a test may reach across layers to build its fixtures.
func Imports(root string) (map[string][]string, error) {
	out := map[string][]string{}
	seen := map[string]map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			// Other modules (test/chart), hidden folders and testdata are not the
			// operator's packages.
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		if seen[pkg] == nil {
			seen[pkg] = map[string]bool{}
			out[pkg] = nil
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !strings.HasPrefix(p, Module+"/") {
				continue
			}
			p = strings.TrimPrefix(p, Module+"/")
			if !seen[pkg][p] {
				seen[pkg][p] = true
				out[pkg] = append(out[pkg], p)
			}
		}
		return nil
	})
	for _, v := range out {
		sort.Strings(v)
	}
	return out, err
}

// LayerRule forbids the packages matched by From to import those matched by To, except
// the packages Except lists (prefixes, like From and To). Why says what the rule keeps
// apart, for the failure message.
type LayerRule struct {
	From, To, Except []string
	Why              string
}

// Layers are the project's import directions: read-only tools and the gateway pod's
// programs never import the controllers; the pod's programs never import the operator's
// configuration; the pod's containers hand each other files (package statefile), never
// import each other's packages; only tests, the sandbox and the simulator's own command
// import the test infrastructure.
var Layers = []LayerRule{
	{
		From:   []string{""},
		To:     []string{"internal/controller"},
		Except: []string{"internal/controller", "cmd/bnerd-vpn-operator", "cmd/sandbox", "test"},
		Why:    "only the operator's entry points and the test harnesses assemble the controllers",
	},
	{
		From: []string{"internal/agent", "cmd/vpn-gateway-agent"},
		To:   []string{"internal/operatorconfig", "internal/render", "internal/openstack", "internal/controller", "internal/tenancy"},
		Why:  "the gateway pod's programs know the pod's contract (package gatewayconfig), not the operator's internals",
	},
	{
		From: []string{"internal/agent/initnat"},
		To:   []string{"internal/agent/exporter", "internal/agent/status", "internal/agent/loader", "internal/agent/wireguard"},
		Why:  "init-nat is its own container; what it shares with the others goes through package statefile",
	},
	{
		From: []string{"internal/agent/exporter"},
		To:   []string{"internal/agent/initnat", "internal/agent/status", "internal/agent/loader", "internal/agent/wireguard"},
		Why:  "the exporter reads the other containers' state files, not their packages",
	},
	{
		From: []string{"internal/kubectlvpn", "internal/clustercheck"},
		To:   []string{"internal/controller"},
		Why:  "the read-only tools must not depend on a reconciler",
	},
	{
		From:   []string{""},
		To:     []string{"internal/testinfra"},
		Except: []string{"internal/testinfra", "test", "hack", "cmd/sandbox", "cmd/openstack-sim"},
		Why:    "the simulator, the packet fabric, the local world and the test API server are test infrastructure: no product binary links them",
	},
}

// LayerViolations lists "pkg imports dep: why" for every import a rule forbids.
func LayerViolations(imports map[string][]string, rules []LayerRule) []string {
	var out []string
	pkgs := make([]string, 0, len(imports))
	for p := range imports {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, r := range rules {
		for _, p := range pkgs {
			if !underAny(p, r.From) || underAny(p, r.Except) {
				continue
			}
			for _, dep := range imports[p] {
				if underAny(dep, r.To) {
					out = append(out, p+" imports "+dep+": "+r.Why)
				}
			}
		}
	}
	return out
}

// underAny: p is one of prefixes or below one of them ("" matches everything).
func underAny(p string, prefixes []string) bool {
	for _, pre := range prefixes {
		if pre == "" || p == pre || strings.HasPrefix(p, pre+"/") {
			return true
		}
	}
	return false
}

// kindSwitch matches code that handles the two gateway kinds one by one: their list
// types, a type switch or assertion on a kind, the kinds' names as literals.
var kindSwitch = regexp.MustCompile(`\b(IPsecGatewayList|VPNGatewayList)\b|case \*?\w+\.(IPsecGateway|VPNGateway)\b|\.\(\*\w+\.(IPsecGateway|VPNGateway)\)|"(IPsecGateway|VPNGateway)"`)

// KindSwitches lists "file:line: text" for every non-test line under dirs (relative to
// root) that handles the gateway kinds one by one instead of through the API's Gateway
// accessor, except the lines allowed lists ("file" or "file:substring").
func KindSwitches(root string, dirs []string, allowed []string) ([]string, error) {
	var out []string
	for _, d := range dirs {
		err := filepath.WalkDir(filepath.Join(root, d), func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			rel = filepath.ToSlash(rel)
			for i, line := range strings.Split(string(b), "\n") {
				if !kindSwitch.MatchString(line) || strings.HasPrefix(strings.TrimSpace(line), "//") || isAllowed(rel, line, allowed) {
					continue
				}
				out = append(out, fmt.Sprintf("%s:%d: %s", rel, i+1, strings.TrimSpace(line)))
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func isAllowed(file, line string, allowed []string) bool {
	for _, a := range allowed {
		f, sub, hasSub := strings.Cut(a, ":")
		if f == file && (!hasSub || strings.Contains(line, sub)) {
			return true
		}
	}
	return false
}
