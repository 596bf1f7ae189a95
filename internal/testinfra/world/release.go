package world

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// PreviousRelease is a release built from an earlier commit of this repository and pushed
// to the world's registry beside the current one: what a provider runs before upgrading.
type PreviousRelease struct {
	Release
	// Commit is the commit it was built from.
	Commit string
	// Images are the pushed references by name (operator, gateway, gateway-wireguard,
	// status-agent), tagged v<Version>.
	Images map[string]string
}

// PushPreviousRelease builds the release of commit (the images and the chart, with that
// commit's own hack/release.sh, for this machine's platform only) from the commit's tree
// and pushes it to the world's registry as version 0.0.0-prev.<commit[:12]>. The tree
// comes from the clone's history; a shallow clone is deepened from its origin first. The
// images are cached by content like every release's, so a second run only pushes.
func (w *World) PushPreviousRelease(ctx context.Context, commit string) (*PreviousRelease, error) {
	repo := w.opts.Repo
	if !hasCommit(repo, commit) {
		// A shallow clone: its origin (the repository it was cloned from) has the history.
		if out, err := exec.CommandContext(ctx, "git", "-C", repo, "fetch", "--quiet", "origin", commit).CombinedOutput(); err != nil || !hasCommit(repo, commit) {
			return nil, fmt.Errorf("commit %s (the previous release) is not in this clone and fetching it from origin failed: %v %s", commit, err, out)
		}
	}
	src := filepath.Join(w.dir, "previous-release")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return nil, err
	}
	archive := exec.CommandContext(ctx, "bash", "-c", `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, "archive", repo, commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("extracting %s: %v %s", commit, err, out)
	}
	short := commit
	if len(short) > 12 {
		short = short[:12]
	}
	version := "0.0.0-prev." + short
	dist := filepath.Join(src, "dist")
	t0 := time.Now()
	logf, err := os.Create(filepath.Join(w.dir, "previous-release.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.CommandContext(ctx, "bash", "hack/release.sh")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "VERSION="+version, "REGISTRY="+w.Registry, "RELEASE_PARTS=images,chart",
		"PLATFORMS=linux/"+runtime.GOARCH, "DIST="+dist, "SSL_CERT_FILE="+w.RegistryCA, "GOFLAGS=-mod=readonly")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("building the release of %s (hack/release.sh) failed: %w; log: %s", commit, err, logf.Name())
	}
	prev := &PreviousRelease{Commit: commit, Images: map[string]string{}}
	images, err := os.ReadFile(filepath.Join(dist, "images.txt"))
	if err != nil {
		return nil, err
	}
	for _, l := range strings.Split(strings.TrimSpace(string(images)), "\n") {
		if f := strings.Fields(l); len(f) == 3 {
			prev.Images[f[0]] = f[1]
		}
	}
	chart, err := os.ReadFile(filepath.Join(dist, "chart.txt"))
	if err != nil {
		return nil, err
	}
	f := strings.Fields(string(chart))
	if len(f) != 4 || f[0] != "chart" {
		return nil, fmt.Errorf("chart file %q", chart)
	}
	prev.Release = Release{Chart: f[1], Version: f[2]}
	w.progress("    release of %s built and pushed as %s --version %s in %.1fs (log %s)", short, prev.Chart, prev.Version,
		time.Since(t0).Seconds(), logf.Name())
	return prev, nil
}

func hasCommit(repo, commit string) bool {
	return exec.Command("git", "-C", repo, "cat-file", "-e", commit+"^{commit}").Run() == nil
}

// InstallRelease installs or upgrades the operator to rel with the Helm SDK (`helm
// upgrade --install --wait`), with the world's values (ChartValues), as a provider
// upgrading a release does, and returns how long the Helm SDK took (the operator Ready
// included).
func (w *World) InstallRelease(ctx context.Context, rel Release) (time.Duration, error) {
	t0 := time.Now()
	if err := w.helmInstall(ctx, rel); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}
