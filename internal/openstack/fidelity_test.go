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
	order := append(append([]string{}, simShapes...), realTargets...)
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

// recorded: the case ran on the target or was judged not to apply to it.
func (o outcome) recorded() bool { return o.ran || o.na != "" }

func cell(o outcome) string {
	switch {
	case o.na != "":
		return "n/a (" + o.na + ")"
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

// fidelitySummary counts, for each pair of a simulator shape and a real target, the
// cases that ran on both and how many of them had the same outcome. A case that does
// not apply to one of the two (n/a) ran on at most one and is left out of the count, by
// name.
func fidelitySummary() string {
	var lines []string
	for _, tg := range targets {
		if isReal(tg.name) && tg.err != nil {
			lines = append(lines, "fidelity: "+tg.name+" not measured: "+tg.err.Error())
		}
	}
	resultsMu.Lock()
	defer resultsMu.Unlock()
	if s := summarize(results); s != "" {
		lines = append(lines, s)
	}
	return strings.Join(lines, "\n")
}

func summarize(results map[string]map[string]outcome) string {
	var lines []string
	for _, real := range realTargets {
		for _, shape := range simShapes {
			if line := agreement(results, shape, real); line != "" {
				lines = append(lines, line)
			}
		}
	}
	return strings.Join(lines, "\n")
}

// agreement is the line for one simulator shape and one real target; "" when no case
// ran on both.
func agreement(results map[string]map[string]outcome, shape, real string) string {
	both, agree := 0, 0
	var differ, na []string
	for n, byTarget := range results {
		s, r := byTarget[shape], byTarget[real]
		name := strings.TrimPrefix(n, "TestConformance")
		switch {
		case !s.recorded() || !r.recorded():
			continue
		case s.na != "" || r.na != "":
			na = append(na, name)
			continue
		case s.skipped || r.skipped:
			continue
		}
		both++
		if s.failed == r.failed {
			agree++
		} else {
			differ = append(differ, name)
		}
	}
	if both == 0 {
		return ""
	}
	sort.Strings(differ)
	sort.Strings(na)
	return fmt.Sprintf("fidelity: %s and %s agree on %d of the %d cases both ran (%.0f%%)%s%s",
		shape, real, agree, both, 100*float64(agree)/float64(both), list("; they differ on ", differ), list("; not counted, n/a on one of them: ", na))
}

func list(prefix string, s []string) string {
	if len(s) == 0 {
		return ""
	}
	return prefix + strings.Join(s, ", ")
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

// docTable reads the first table after heading in the fidelity document: case ->
// target column -> cell.
func docTable(doc, heading string) map[string]map[string]string {
	_, after, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		return nil
	}
	out := map[string]map[string]string{}
	var cols []string
	for _, line := range strings.Split(after, "\n") {
		if !strings.HasPrefix(line, "|") {
			if cols != nil {
				break // the table ended
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case cols == nil:
			cols = cells
		case strings.HasPrefix(cells[0], "---"):
		default:
			row := map[string]string{}
			for i := 1; i < len(cells) && i < len(cols); i++ {
				row[cols[i]] = cells[i]
			}
			out[cells[0]] = row
		}
	}
	return out
}

const fidelityDoc = "../../docs/openstack-fidelity.md"

// The fidelity document lists every conformance case; a case added without a row there
// fails here. Its current table ("## After") must also say what this process found for
// every case and target that ran before this test (go test runs this file's tests after
// conformance_test.go's and exampleestate_test.go's; with -run or -shuffle fewer are
// checked, never wrongly): "pass", or "n/a (why)" with the reason the suite gives. When
// every case was decided on the real target too, the agreement figures the suite prints
// must appear in the document word for word.
func TestFidelityDocumentListsEveryCase(t *testing.T) {
	raw, err := os.ReadFile(fidelityDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	cases := conformanceCases(t)
	for _, c := range cases {
		if !strings.Contains(doc, "| "+strings.TrimPrefix(c, "TestConformance")+" |") {
			t.Errorf("docs/openstack-fidelity.md has no row for %s", c)
		}
	}

	table := docTable(doc, "## After")
	if len(table) == 0 {
		t.Fatal(`docs/openstack-fidelity.md has no table under "## After"`)
	}
	resultsMu.Lock()
	checked, onReal := 0, map[string]int{}
	for name, byTarget := range results {
		row := strings.TrimPrefix(name, "TestConformance")
		for target, o := range byTarget {
			if isReal(target) && o.recorded() {
				onReal[target]++
			}
			if o.failed {
				continue // the case's own failure says more than a stale table would
			}
			checked++
			got, inDoc := table[row][target]
			if want := cell(o); !inDoc || got != want {
				t.Errorf("docs/openstack-fidelity.md, %s on %s: says %q, this run found %q", row, target, got, want)
			}
		}
	}
	resultsMu.Unlock()
	t.Logf("%d outcomes of this run checked against the table", checked)
	for _, real := range realTargets {
		if onReal[real] != len(cases) {
			continue
		}
		for _, shape := range simShapes {
			resultsMu.Lock()
			line := agreement(results, shape, real)
			resultsMu.Unlock()
			if line != "" && !strings.Contains(doc, line) {
				t.Errorf("docs/openstack-fidelity.md does not state this run's figure:\n%s", line)
			}
		}
	}

	// The figures the document states are its table's.
	fromTable := map[string]map[string]outcome{}
	for row, byTarget := range table {
		fromTable[row] = map[string]outcome{}
		for target, c := range byTarget {
			o, ok := parseCell(c)
			if !ok {
				t.Errorf("docs/openstack-fidelity.md, %s on %s: %q is not pass, FAIL, skip or n/a (why)", row, target, c)
			}
			fromTable[row][target] = o
		}
	}
	for _, line := range strings.Split(summarize(fromTable), "\n") {
		if !strings.Contains(doc, "    "+line+"\n") {
			t.Errorf("docs/openstack-fidelity.md does not state its table's figure:\n%s", line)
		}
	}
}

// parseCell reads a cell of the table back (cell's inverse).
func parseCell(c string) (outcome, bool) {
	switch {
	case c == "pass":
		return outcome{ran: true}, true
	case c == "FAIL":
		return outcome{ran: true, failed: true}, true
	case c == "skip":
		return outcome{ran: true, skipped: true}, true
	case strings.HasPrefix(c, "n/a (") && strings.HasSuffix(c, ")"):
		return outcome{na: strings.TrimSuffix(strings.TrimPrefix(c, "n/a ("), ")")}, true
	}
	return outcome{}, false
}
