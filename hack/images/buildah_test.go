package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"

	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// TestDockerfilesBuildWithBuildah builds every Dockerfile in build/ the way a provider's
// CI would, with buildah (Debian's, chroot isolation, its own storage: overlay where the
// kernel mounts one, else vfs), and compares the result with the image hack/images builds
// for the same version: the same binary, byte for byte, at the same path, the same
// entrypoint and user, and the same Debian packages.
//
// This machine reaches no container registry, so the Dockerfiles' base images are
// stand-ins served by a local registry (Debian's docker-registry), under the names the
// Dockerfiles use (registries.conf maps docker.io and gcr.io to it):
//   - debian:bookworm-slim: a debootstrap minbase root of bookworm;
//   - golang:1.26-bookworm: that root with Debian's CA bundle and this machine's Go
//     toolchain in /usr/local/go, its module proxy a read-only mount of this machine's
//     module cache (go.sum verifies what it serves) and its build cache this machine's
//     (as a CI's cache mounts would be), so the builds need no network for Go and
//     compile only what changed;
//   - gcr.io/distroless/static-debian12:nonroot: hack/images' distroless-like root.
//
// The final stages' apt-get runs against the Debian mirror apt uses here. Only
// linux/amd64 is built: the arm64 final stages would run arm64's apt-get under emulation,
// which hack/images does for its roots already (the build stages cross-compile natively).
func TestDockerfilesBuildWithBuildah(t *testing.T) {
	testenv.SkipUnit(t, "builds four Dockerfiles")
	testenv.NeedRoot(t, "buildah's chroot isolation and debootstrap need root")
	for _, bin := range []string{"buildah", "debootstrap", "/usr/bin/docker-registry"} {
		if _, err := exec.LookPath(bin); err != nil {
			testenv.SkipDataplane(t, fmt.Sprintf("needs %s (apt-get install buildah debootstrap docker-registry)", bin))
		}
	}
	if runtime.GOARCH != "amd64" {
		t.Skipf("the stand-in golang image carries this machine's toolchain; the comparison is made on amd64 (this is %s)", runtime.GOARCH)
	}
	dir := t.TempDir()
	b := &builder{repo: repoRoot, cache: defaultCache(), version: "v0.0.0-dockerfile"}
	// The cache's lock while the roots and hack/images' own images are made (not while
	// buildah builds: a world's release may want the cache meanwhile).
	unlock, err := lockCache(b.cache)
	if err != nil {
		t.Fatal(err)
	}
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	host := startPlainRegistry(t, dir)

	// The stand-in base images.
	minbase, err := b.debianBase(nil, runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	goroot, err := b.treeLayerAt(runtime.GOROOT(), "usr/local/go")
	if err != nil {
		t.Fatal(err)
	}
	gomodcache := goEnv(t, "GOMODCACHE")
	gocache := goEnv(t, "GOCACHE")
	// Every module go.sum names in this machine's cache (the Dockerfiles' `go mod
	// download` also fetches the Windows-only ones no build here needed), so the builds
	// need no network for Go.
	dl := exec.Command("go", "mod", "download")
	dl.Dir = repoRoot
	if out, err := dl.CombinedOutput(); err != nil {
		t.Fatalf("go mod download: %v\n%s", err, out)
	}
	path := "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	standIn(t, host+"/docker.io/library/debian:bookworm-slim", []layerFile{minbase.layer}, []string{path}, "")
	// The golang image has Debian's CA bundle (its base is buildpack-deps' scm image): the
	// minbase root with ca-certificates (and nftables, iproute2: the status agent's root).
	pkgs, err := readPackages(filepath.Join(repoRoot, distrolessCAFrom))
	if err != nil {
		t.Fatal(err)
	}
	caRoot, err := b.debianBase(pkgs, runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	standIn(t, host+"/docker.io/library/golang:1.26-bookworm", []layerFile{caRoot.layer, goroot},
		[]string{"PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "GOPATH=/go",
			"GOTOOLCHAIN=local", "GOPROXY=file:///goproxy,off", "GOSUMDB=off"}, "")
	distroless, err := b.distrolessLayer(caRoot.caBundle)
	if err != nil {
		t.Fatal(err)
	}
	standIn(t, host+"/gcr.io/distroless/static-debian12:nonroot", []layerFile{distroless}, []string{path}, "65532")

	want := map[string]v1.Image{}
	for _, def := range defs {
		if def.Dockerfile == "" {
			continue
		}
		if want[def.Name], err = b.platformImage(def, platform{"linux", "amd64"}); err != nil {
			t.Fatal(err)
		}
	}
	unlock()
	locked = false

	conf := filepath.Join(dir, "registries.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`unqualified-search-registries = ["docker.io"]
short-name-mode = "permissive"

[[registry]]
prefix = "docker.io"
location = "%[1]s/docker.io"
insecure = true

[[registry]]
prefix = "gcr.io"
location = "%[1]s/gcr.io"
insecure = true
`, host)), 0o644); err != nil {
		t.Fatal(err)
	}
	storage := filepath.Join(dir, "storage")
	driver := buildahStorageDriver(t, dir)
	buildah := func(args ...string) ([]byte, error) {
		cmd := exec.Command("buildah", append([]string{"--root", storage, "--runroot", filepath.Join(dir, "run"), "--storage-driver", driver}, args...)...)
		cmd.Env = append(os.Environ(), "CONTAINERS_REGISTRIES_CONF="+conf, "BUILDAH_ISOLATION=chroot")
		return cmd.CombinedOutput()
	}
	t.Cleanup(func() { _, _ = buildah("rm", "--all"); _, _ = buildah("rmi", "--all", "--force") })

	for _, def := range defs {
		if def.Dockerfile == "" {
			continue
		}
		t.Run(def.Name, func(t *testing.T) {
			t0 := time.Now()
			tag := "localhost/bnerd/" + def.Repository + ":dockerfile"
			out, err := buildah("build", "--isolation", "chroot", "--layers", "--pull-always",
				"--platform", "linux/amd64", "--build-arg", "VERSION="+b.version,
				"--volume", filepath.Join(gomodcache, "cache", "download")+":/goproxy:ro",
				"--volume", gocache+":/root/.cache/go-build",
				"-f", filepath.Join(repoRoot, def.Dockerfile), "-t", tag, repoRoot)
			if err != nil {
				t.Fatalf("buildah build %s: %v\n%s", def.Dockerfile, err, lastLines(out, 40))
			}
			t.Logf("buildah build -f %s: %s", def.Dockerfile, time.Since(t0).Round(time.Second))
			oci := filepath.Join(dir, "oci-"+def.Name)
			if out, err := buildah("push", tag, "oci:"+oci); err != nil {
				t.Fatalf("buildah push: %v\n%s", err, out)
			}
			compareImages(t, def, firstImage(t, oci), want[def.Name])
		})
	}
}

// buildahStorageDriver is overlay where the kernel mounts one in dir (buildah's usual
// driver: a step's layer is a directory of its changes), otherwise vfs, which copies the
// whole root for every layer: this test took 766 s with vfs and 149 s with overlay, one
// after the other on an idle 2-core machine (docs/release.md).
func buildahStorageDriver(t *testing.T, dir string) string {
	t.Helper()
	probe := filepath.Join(dir, "overlay-probe")
	for _, d := range []string{"lower", "upper", "work", "merged"} {
		if err := os.MkdirAll(filepath.Join(probe, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	merged := filepath.Join(probe, "merged")
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", filepath.Join(probe, "lower"), filepath.Join(probe, "upper"), filepath.Join(probe, "work"))
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Logf("overlay does not mount here (%v): buildah's storage is vfs, which copies every layer", err)
		return "vfs"
	}
	if err := unix.Unmount(merged, 0); err != nil {
		t.Fatalf("unmounting the overlay probe: %v", err)
	}
	t.Logf("buildah's storage is overlay")
	return "overlay"
}

func lastLines(b []byte, n int) string {
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

func goEnv(t *testing.T, key string) string {
	t.Helper()
	out, err := exec.Command("go", "env", key).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// startPlainRegistry runs docker-registry on a free loopback port over plain HTTP (the
// stand-ins are local; registries.conf marks the mirror insecure).
func startPlainRegistry(t *testing.T, dir string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := l.Addr().String()
	l.Close()
	cfg := filepath.Join(dir, "registry.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("version: 0.1\nlog: {level: warn, accesslog: {disabled: true}}\nstorage:\n  filesystem: {rootdirectory: %s}\nhttp:\n  addr: %s\n", filepath.Join(dir, "registry"), host)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/bin/docker-registry", "serve", cfg)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for i := 0; ; i++ {
		resp, err := http.Get("http://" + host + "/v2/")
		if err == nil {
			resp.Body.Close()
			return host
		}
		if i > 300 {
			t.Fatalf("docker-registry did not answer: %v\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// standIn pushes an image of layers with env and user to ref.
func standIn(t *testing.T, ref string, layers []layerFile, env []string, user string) {
	t.Helper()
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	for _, lf := range layers {
		l, err := lf.v1()
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.Append(img, mutate.Addendum{Layer: l, MediaType: types.OCILayer}); err != nil {
			t.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Env, cf.Config.User = env, user
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatalf("pushing the stand-in %s: %v", ref, err)
	}
}

func firstImage(t *testing.T, dir string) v1.Image {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) == 0 {
		t.Fatalf("OCI layout %s: %v", dir, err)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// dpkgPackages lists the installed packages (name only: a Debian point release between
// the cached root and today's apt-get may move versions).
func dpkgPackages(status []byte) []string {
	var out []string
	for _, para := range strings.Split(string(status), "\n\n") {
		var pkg string
		installed := false
		for _, l := range strings.Split(para, "\n") {
			if v, ok := strings.CutPrefix(l, "Package: "); ok {
				pkg = v
			}
			if l == "Status: install ok installed" {
				installed = true
			}
		}
		if pkg != "" && installed {
			out = append(out, pkg)
		}
	}
	slices.Sort(out)
	return out
}

func compareImages(t *testing.T, def imageDef, got, want v1.Image) {
	t.Helper()
	gf, err := got.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	wf, err := want.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gf.Config.Entrypoint, wf.Config.Entrypoint) || gf.Config.User != wf.Config.User || gf.Architecture != wf.Architecture {
		t.Errorf("config: Dockerfile entrypoint %v user %q arch %s; hack/images %v %q %s",
			gf.Config.Entrypoint, gf.Config.User, gf.Architecture, wf.Config.Entrypoint, wf.Config.User, wf.Architecture)
	}
	bin := strings.TrimPrefix(def.Binaries[0].Path, "/")
	gfiles := filesOf(t, got)
	wfiles := filesOf(t, want)
	gs, ws := sha256.Sum256(gfiles[bin]), sha256.Sum256(wfiles[bin])
	if len(gfiles[bin]) == 0 || gs != ws {
		t.Errorf("/%s differs: Dockerfile %x (%d bytes), hack/images %x (%d bytes)", bin, gs[:6], len(gfiles[bin]), ws[:6], len(wfiles[bin]))
	} else {
		t.Logf("/%s: the same %d bytes (sha256 %x...)", bin, len(gfiles[bin]), gs[:6])
	}
	if def.Base == baseDebian {
		gp, wp := dpkgPackages(gfiles["var/lib/dpkg/status"]), dpkgPackages(wfiles["var/lib/dpkg/status"])
		if !slices.Equal(gp, wp) {
			var only []string
			for _, p := range gp {
				if !slices.Contains(wp, p) {
					only = append(only, "+"+p)
				}
			}
			for _, p := range wp {
				if !slices.Contains(gp, p) {
					only = append(only, "-"+p)
				}
			}
			t.Errorf("Debian packages differ (+ only the Dockerfile's, - only hack/images'): %v", only)
		} else {
			t.Logf("the same %d Debian packages", len(gp))
		}
	}
}
