package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// A real `go test -json` run of a package with a passing, a skipped and a failing test
// (and a skipped subtest): the report lists both skips with their reasons and the
// failure, and prints the failing test's output.
func TestReadRealGoTestOutput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := writeFile(filepath.Join(dir, name), text); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/sample\n\ngo 1.22\n")
	write("sample_test.go", `package sample
import (
	"testing"
	"time"
)
func TestPass(t *testing.T) {}
func TestSlow(t *testing.T) { time.Sleep(300 * time.Millisecond); t.Run("part", func(t *testing.T) {}) }
func TestSkip(t *testing.T) { t.Skip("needs a thing that is missing") }
func TestFail(t *testing.T) { t.Log("context line"); t.Fatal("it broke\nits second line") }
func TestSub(t *testing.T) { t.Run("inner", func(t *testing.T) { t.Skipf("inner %s", "reason") }) }
`)
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(gobin, "test", "-json", "-count=1", "./...")
	cmd.Dir = dir
	raw, _ := cmd.CombinedOutput() // the run fails: TestFail
	var out bytes.Buffer
	r, err := Read(bytes.NewReader(raw), &out)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Skips) != 2 {
		t.Fatalf("skips %+v\n%s", r.Skips, raw)
	}
	if r.Skips[0].Test != "TestSkip" || !strings.Contains(r.Skips[0].Reason, "needs a thing that is missing") {
		t.Errorf("skip %+v", r.Skips[0])
	}
	if r.Skips[1].Test != "TestSub/inner" || !strings.Contains(r.Skips[1].Reason, "inner reason") {
		t.Errorf("skip %+v", r.Skips[1])
	}
	if len(r.Failed) != 1 || !strings.HasSuffix(r.Failed[0], "TestFail") {
		t.Errorf("failed %v", r.Failed)
	}
	printed := out.String()
	if !strings.Contains(printed, "it broke") || !strings.Contains(printed, "context line") || !strings.Contains(printed, "FAIL\texample.com/sample") {
		t.Errorf("the failing test's output is not printed:\n%s", printed)
	}
	// Why it failed, for the end of the log: the first line of each message, with the
	// file and line that printed it.
	if len(r.Why) != 1 || r.Why[0].Test != "TestFail" || len(r.Why[0].Messages) != 2 ||
		!strings.HasPrefix(r.Why[0].Messages[0], "sample_test.go:") || !strings.HasSuffix(r.Why[0].Messages[0], ": context line") ||
		!strings.HasSuffix(r.Why[0].Messages[1], ": it broke") {
		t.Errorf("why %+v", r.Why)
	}
	// The durations: the four top-level tests that passed or failed (not the skipped
	// one, no subtest), the sleeping one first.
	if len(r.Durations) != 4 || r.Durations[0].Test != "TestSlow" || r.Durations[0].Seconds < 0.3 {
		t.Errorf("durations %+v", r.Durations)
	}
	for _, d := range r.Durations {
		if strings.Contains(d.Test, "/") || d.Package != "example.com/sample" {
			t.Errorf("duration of a subtest or without its package: %+v", d)
		}
	}
	if strings.Contains(printed, "=== RUN   TestPass") {
		t.Errorf("passing tests are printed:\n%s", printed)
	}
}

// Lines that are not test2json (a build error) are passed through.
func TestReadPassesThroughOtherLines(t *testing.T) {
	var out bytes.Buffer
	if _, err := Read(strings.NewReader("# example.com/x\n./x.go:1: syntax error\n"), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "syntax error") {
		t.Fatalf("build error lost: %q", out.String())
	}
}

// A message's first line counts only when it starts with the file and line that printed
// it; at most whyMessages are kept, each cut to whyWidth.
func TestMessages(t *testing.T) {
	long := strings.Repeat("x", 300)
	got := messages([]string{
		"=== RUN   TestA\n",
		"    a_test.go:10: first\n",
		"        a continuation: line\n",
		"    not a file: line\n",
		"    a b.go:3: a space in the name\n",
		"    b_test.go:x1: not a line number\n",
		"    a_test.go:11: " + long + "\n",
		"    a_test.go:12: third\n",
		"    a_test.go:13: fourth\n",
		"    a_test.go:14: fifth\n",
		"--- FAIL: TestA (0.00s)\n",
	})
	want := []string{"a_test.go:10: first", "a_test.go:11: " + long[:whyWidth-len("a_test.go:11: ")] + "...", "a_test.go:12: third", "a_test.go:13: fourth"}
	if len(got) != len(want) {
		t.Fatalf("got %q", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("message %d: got %q, want %q", i, got[i], want[i])
		}
	}
}

func writeFile(path, text string) error { return os.WriteFile(path, []byte(text), 0o644) }

// A package whose tests all pass but whose TestMain fails the run (an after-all check)
// is reported as failed, by name.
func TestPackageFailingAfterItsTests(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"go.mod": "module example.com/after\n\ngo 1.22\n",
		"after_test.go": `package after
import ("fmt"; "os"; "testing")
func TestMain(m *testing.M) { m.Run(); fmt.Println("FAIL: after all tests: a leak"); os.Exit(1) }
func TestPass(t *testing.T) {}
`,
	} {
		if err := writeFile(filepath.Join(dir, name), text); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "test", "-json", "-count=1", "./...")
	cmd.Dir = dir
	raw, _ := cmd.CombinedOutput()
	var out bytes.Buffer
	r, err := Read(bytes.NewReader(raw), &out)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Failed) != 1 || !strings.HasPrefix(r.Failed[0], "example.com/after (no test failed") {
		t.Fatalf("failed %v\n%s", r.Failed, raw)
	}
	if !strings.Contains(out.String(), "a leak") {
		t.Errorf("TestMain's message is not printed:\n%s", out.String())
	}
}

// /proc/stat's aggregate line is summed into busy, idle and stolen ticks, and the cpuN
// lines are counted; a line too short or not numeric is an error, not zeros.
func TestParseProcStat(t *testing.T) {
	stat := "cpu  100 5 50 1000 20 3 7 11 40 0\ncpu0 50 2 25 500 10 1 3 5 20 0\ncpu1 50 3 25 500 10 2 4 6 20 0\nintr 1 2 3\nctxt 99\n"
	got, cpus, err := parseProcStat([]byte(stat))
	if err != nil {
		t.Fatal(err)
	}
	if want := (cpuTimes{busy: 100 + 5 + 50 + 3 + 7, idle: 1000 + 20, steal: 11}); got != want || cpus != 2 {
		t.Errorf("got %+v on %d CPUs, want %+v on 2", got, cpus, want)
	}
	for _, bad := range []string{"cpu  1 2 3\ncpu0 1 2 3\n", "cpu  1 2 x 4 5 6 7 8\ncpu0 1\n", "intr 1\n", "cpu  1 2 3 4 5 6 7 8\n"} {
		if _, _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// The summary's totals are the last sample less the first, and each slice's busy share
// is its own: a run busy for its first ten minutes and idle for its last five reads
// 100 %, 100 %, 0 % in slices of five minutes, with the samples a minute apart.
func TestSummarizeSlices(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	var samples []cpuSample
	var c cpuTimes
	for m := 0; m <= 15; m++ {
		samples = append(samples, cpuSample{at: t0.Add(time.Duration(m) * time.Minute), cpuTimes: c})
		if m < 10 {
			c.busy += 2 * 60 * userHZ // both CPUs busy for the minute
		} else {
			c.idle += 2 * 60 * userHZ
		}
	}
	u := summarize(samples, 2, 5*time.Minute)
	if u.wall != 900 || u.busy != 1200 || u.idle != 600 || u.steal != 0 {
		t.Errorf("totals: %+v", u)
	}
	want := []float64{1, 1, 0}
	if len(u.busyShare) != len(want) {
		t.Fatalf("slices: %v, want %v", u.busyShare, want)
	}
	for i := range want {
		if u.busyShare[i] != want[i] {
			t.Errorf("slice %d: %v, want %v", i, u.busyShare[i], want[i])
		}
	}
	line := u.String()
	for _, part := range []string{"2 CPUs", "(900 s)", "busy 1200 s", "idle 600 s", "busy/CPUs 600 s", "100% 100% 0%"} {
		if !strings.Contains(line, part) {
			t.Errorf("%q lacks %q", line, part)
		}
	}
	if got := summarize(samples[:1], 2, time.Minute).String(); !strings.Contains(got, "not measured") {
		t.Errorf("one sample: %q", got)
	}
}
