// Package workflows checks the forge's CI workflow files (.github/workflows) with
// actionlint, pinned in go.mod: their syntax, expressions, job and step keys, the inputs
// of the actions they use and, where shellcheck is installed, the shell of every `run:`
// step. Nothing here runs a workflow: that needs the forge.
package workflows

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rhysd/actionlint"
)

const repoRoot = "../.."

func linter(t *testing.T) *actionlint.Linter {
	t.Helper()
	opts := &actionlint.LinterOptions{WorkingDir: repoRoot, LogWriter: &bytes.Buffer{}}
	if sc, err := exec.LookPath("shellcheck"); err == nil {
		opts.Shellcheck = sc
	} else {
		t.Log("shellcheck is not installed: the run: scripts are not checked by it (apt-get install shellcheck)")
	}
	l, err := actionlint.NewLinter(&bytes.Buffer{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Every workflow file passes actionlint.
func TestWorkflowsLint(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot, ".github", "workflows", "*.y*ml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no workflow in .github/workflows")
	}
	errs, err := linter(t).LintFiles(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range errs {
		t.Errorf("%s:%d:%d: %s [%s]", e.Filepath, e.Line, e.Column, e.Message, e.Kind)
	}
	t.Logf("actionlint: %d workflow files, %d findings", len(files), len(errs))
}

// The negative control: the same linter finds the mistakes a workflow edit makes (a
// misspelled context property, a key no job has, an action input that does not exist).
func TestLinterCatchesMistakes(t *testing.T) {
	bad := []byte(`name: bad
on:
  push:
    tags: ["v*"]
jobs:
  release:
    runs-on: ubuntu-24.04
    timeout-minute: 10
    steps:
      - uses: actions/checkout@v4
        with:
          fetch-deepth: 0
      - run: echo "${{ github.ref_nam }}"
`)
	errs, err := linter(t).Lint("bad.yml", bad, nil)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, e := range errs {
		msgs = append(msgs, e.Message)
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{"timeout-minute", "fetch-deepth", "ref_nam"} {
		if !strings.Contains(all, want) {
			t.Errorf("actionlint did not report %q; it reported:\n%s", want, all)
		}
	}
}

// The release workflow runs on a version tag and runs `make release` with the tag's
// version and a registry: the release a maintainer makes by hand is the one CI makes.
func TestReleaseWorkflowRunsMakeRelease(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, ".github", "workflows", "release.yml"))
	if err != nil {
		t.Fatal(err)
	}
	wf, errs := actionlint.Parse(data)
	if len(errs) > 0 {
		t.Fatalf("release.yml: %v", errs[0])
	}
	var tags []string
	for _, ev := range wf.On {
		if w, ok := ev.(*actionlint.WebhookEvent); ok && w.Hook.Value == "push" && w.Tags != nil {
			for _, v := range w.Tags.Values {
				tags = append(tags, v.Value)
			}
		}
	}
	if len(tags) == 0 || !strings.HasPrefix(tags[0], "v") {
		t.Errorf("release.yml runs on push of tags %v, want version tags v...", tags)
	}
	found := false
	for _, j := range wf.Jobs {
		for _, s := range j.Steps {
			r, ok := s.Exec.(*actionlint.ExecRun)
			if !ok || r.Run == nil {
				continue
			}
			run := strings.TrimSpace(r.Run.Value)
			if strings.HasPrefix(run, "make release ") && strings.Contains(run, "VERSION=") &&
				strings.Contains(run, "GITHUB_REF_NAME") && strings.Contains(run, "REGISTRY=") {
				found = true
			}
		}
	}
	if !found {
		t.Error("no step runs `make release VERSION=<the tag's version> REGISTRY=...`")
	}
}
