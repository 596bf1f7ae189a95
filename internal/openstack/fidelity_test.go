package openstack_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
)

// fidelityTable renders the recorded outcomes as a Markdown table: one row per
// conformance case, one column per target that ran.
func fidelityTable() string {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	var targets []string
	for _, byTarget := range results {
		for t := range byTarget {
			if !slices.Contains(targets, t) {
				targets = append(targets, t)
			}
		}
	}
	order := append(append([]string{}, simShapes...), targetReal)
	sort.SliceStable(targets, func(i, j int) bool { return slices.Index(order, targets[i]) < slices.Index(order, targets[j]) })
	names := make([]string, 0, len(results))
	for n := range results {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("| case |")
	for _, t := range targets {
		b.WriteString(" " + t + " |")
	}
	b.WriteString("\n|---|")
	for range targets {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, n := range names {
		fmt.Fprintf(&b, "| %s |", strings.TrimPrefix(n, "TestConformance"))
		for _, t := range targets {
			b.WriteString(" " + cell(results[n][t]) + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

func cell(o outcome) string {
	switch {
	case !o.ran:
		return "—"
	case o.failed:
		return "FAIL"
	case o.skipped:
		return "skip"
	default:
		return "pass"
	}
}

// fidelitySummary counts the cases that ran on a simulator shape and on the real
// target, and how many of them had the same outcome.
func fidelitySummary() string {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	var lines []string
	for _, shape := range simShapes {
		both, agree := 0, 0
		var differ []string
		for n, byTarget := range results {
			s, r := byTarget[shape], byTarget[targetReal]
			if !s.ran || !r.ran || s.skipped || r.skipped {
				continue
			}
			both++
			if s.failed == r.failed {
				agree++
			} else {
				differ = append(differ, strings.TrimPrefix(n, "TestConformance"))
			}
		}
		if both == 0 {
			continue
		}
		sort.Strings(differ)
		lines = append(lines, fmt.Sprintf("fidelity: %s and real agree on %d of %d cases (%.0f%%)%s",
			shape, agree, both, 100*float64(agree)/float64(both), list(differ)))
	}
	return strings.Join(lines, "\n")
}

func list(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return "; they differ on " + strings.Join(s, ", ")
}

// conformanceCases are the TestConformance functions of this package's sources.
func conformanceCases(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "TestConformance") {
					out = append(out, fn.Name.Name)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// The fidelity document lists every conformance case with its outcome per target; a
// case added without a row there fails here.
func TestFidelityDocumentListsEveryCase(t *testing.T) {
	doc, err := os.ReadFile("../../docs/openstack-fidelity.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range conformanceCases(t) {
		if !strings.Contains(string(doc), "| "+strings.TrimPrefix(c, "TestConformance")+" |") {
			t.Errorf("docs/openstack-fidelity.md has no row for %s", c)
		}
	}
}
