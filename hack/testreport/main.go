// Command testreport reads `go test -json` on stdin and prints what `go test` would
// (package results, and the output of failing tests), then the longest tests, what the
// machine's CPUs did meanwhile (cpu.go) and every skipped test with its reason. With
// -forbid-skips (what `make test` passes when the environment requires every tier to
// run, as CI does) a skipped test fails the run.
//
//	go test -json ./... 2>&1 | go run ./hack/testreport -forbid-skips -list skips.txt
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// event is one line of test2json output.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64 // seconds, on a test's or package's pass or fail
}

// Skip is one skipped test and the reason it printed.
type Skip struct {
	Package, Test, Reason string
}

// Report is what a run of `go test -json` said.
type Report struct {
	Skips  []Skip
	Failed []string // package/test that failed
	// Why holds, for each failing test that printed any, the first lines of its first
	// messages (t.Error, t.Log and the like, in the order printed): the end of a long run's
	// log says why it failed, where the test's whole output can be thousands of lines up.
	Why []Failure
	// Packages counts the packages that ran tests.
	Packages int
	// Durations are the top-level tests that passed or failed, longest first: where a
	// whole run's time went, in every run's log.
	Durations []Duration
}

// Failure is a failing test's first messages, one line each.
type Failure struct {
	Package, Test string
	Messages      []string
}

// Duration is one top-level test's wall time.
type Duration struct {
	Package, Test string
	Seconds       float64
}

// Read copies the human-readable part of the stream to out while collecting the report:
// package lines as `go test` prints them, a failing test's whole output, a skipped
// test's reason. Lines that are not JSON (build errors) are copied as they are.
func Read(in io.Reader, out io.Writer) (*Report, error) {
	r := &Report{}
	buf := map[string][]string{} // package/test -> output so far
	testFailed := map[string]bool{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintln(out, string(line))
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			if e.Test == "" {
				// Package-level output: the "ok"/"FAIL" summary, TestMain's messages.
				if !strings.HasPrefix(e.Output, "=== ") && !strings.HasPrefix(e.Output, "PASS") {
					fmt.Fprint(out, e.Output)
				}
				continue
			}
			buf[key] = append(buf[key], e.Output)
		case "skip":
			if e.Test == "" {
				continue // a package without tests
			}
			r.Skips = append(r.Skips, Skip{Package: e.Package, Test: e.Test, Reason: reason(buf[key])})
			delete(buf, key)
		case "fail":
			r.timed(e)
			if e.Test == "" {
				r.Packages++
				// A package that fails with every test passed failed in TestMain (an
				// after-all check, a control plane that would not start) or in its build.
				if !testFailed[e.Package] {
					r.Failed = append(r.Failed, e.Package+" (no test failed: TestMain, an after-all check or the build)")
				}
				continue
			}
			testFailed[e.Package] = true
			r.Failed = append(r.Failed, e.Package+" "+e.Test)
			if m := messages(buf[key]); len(m) > 0 {
				r.Why = append(r.Why, Failure{Package: e.Package, Test: e.Test, Messages: m})
			}
			fmt.Fprint(out, strings.Join(buf[key], ""))
			delete(buf, key)
		case "pass":
			r.timed(e)
			if e.Test == "" {
				r.Packages++
			}
			delete(buf, key)
		}
	}
	sort.Slice(r.Skips, func(i, j int) bool {
		if r.Skips[i].Package != r.Skips[j].Package {
			return r.Skips[i].Package < r.Skips[j].Package
		}
		return r.Skips[i].Test < r.Skips[j].Test
	})
	sort.SliceStable(r.Durations, func(i, j int) bool { return r.Durations[i].Seconds > r.Durations[j].Seconds })
	return r, sc.Err()
}

// timed records a top-level test's time (a subtest's is within its parent's).
func (r *Report) timed(e event) {
	if e.Test != "" && !strings.Contains(e.Test, "/") {
		r.Durations = append(r.Durations, Duration{Package: e.Package, Test: e.Test, Seconds: e.Elapsed})
	}
}

// Limits of what the summary quotes of a failing test: its first messages, each cut to
// one line of bounded length.
const (
	whyMessages = 4
	whyWidth    = 240
)

// messages picks the first lines of a test's messages out of its output: a message
// starts with the file and line that printed it ("    x_test.go:12: ..."); its further
// lines are indented deeper and are left out, as are the "=== RUN" and "--- FAIL" lines.
func messages(lines []string) []string {
	var out []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		file, _, ok := strings.Cut(t, ": ")
		if !ok || !isFileLine(file) {
			continue
		}
		if len(t) > whyWidth {
			t = t[:whyWidth] + "..."
		}
		out = append(out, t)
		if len(out) == whyMessages {
			break
		}
	}
	return out
}

// isFileLine says whether s is "name.go:123", the prefix the testing package puts on
// every message.
func isFileLine(s string) bool {
	name, line, ok := strings.Cut(s, ".go:")
	if !ok || name == "" || strings.ContainsAny(name, " \t") || line == "" {
		return false
	}
	for _, c := range line {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// reason is the last line a skipped test printed before its "--- SKIP" line.
func reason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "--- SKIP") || strings.HasPrefix(l, "=== ") {
			continue
		}
		return l
	}
	return "(no reason printed)"
}

// longest is how many of the longest tests a report lists.
const longest = 15

func main() {
	forbid := flag.Bool("forbid-skips", false, "fail when any test was skipped")
	list := flag.String("list", "", "also write the skipped tests to this file")
	flag.Parse()
	cpu := startCPUSampler(15 * time.Second)
	r, err := Read(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testreport: %v\n", err)
		os.Exit(2)
	}
	fmt.Printf("the longest tests:\n")
	for _, d := range r.Durations[:min(longest, len(r.Durations))] {
		fmt.Printf("  %7.1fs %s %s\n", d.Seconds, d.Package, d.Test)
	}
	fmt.Print(cpu.end(5 * time.Minute))
	var b strings.Builder
	fmt.Fprintf(&b, "skipped tests: %d\n", len(r.Skips))
	for _, s := range r.Skips {
		fmt.Fprintf(&b, "  %s %s: %s\n", s.Package, s.Test, s.Reason)
	}
	fmt.Print(b.String())
	if *list != "" {
		if err := os.WriteFile(*list, []byte(b.String()), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "testreport: %v\n", err)
			os.Exit(2)
		}
	}
	if len(r.Why) > 0 {
		fmt.Printf("why tests failed (each one's first messages; its whole output is above):\n")
		for _, f := range r.Why {
			fmt.Printf("  %s %s\n", f.Package, f.Test)
			for _, m := range f.Messages {
				fmt.Printf("      %s\n", m)
			}
		}
	}
	if *forbid && len(r.Skips) > 0 {
		fmt.Printf("FAIL: %d tests skipped, and this run requires every test to run (BNERD_REQUIRE_ENVTEST=1 BNERD_REQUIRE_DATAPLANE=1)\n", len(r.Skips))
		os.Exit(1)
	}
	if len(r.Failed) > 0 {
		os.Exit(1)
	}
}
