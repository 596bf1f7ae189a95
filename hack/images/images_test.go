package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const repoRoot = "../.."

// dockerfile is a Dockerfile's instructions, continuation lines joined.
type dockerfile struct {
	froms     []string // every FROM line
	finalFrom string
	args      []string // every ARG
	runs      []string // every RUN of every stage
	copies    []string // COPY of the final stage
	entry     []string
	user      string
}

func parseDockerfile(t *testing.T, path string) dockerfile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	var cur string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		cur += l
		if strings.TrimSpace(cur) != "" {
			lines = append(lines, strings.Join(strings.Fields(cur), " "))
		}
		cur = ""
	}
	var d dockerfile
	for _, l := range lines {
		op, rest, _ := strings.Cut(l, " ")
		switch strings.ToUpper(op) {
		case "FROM":
			d.froms = append(d.froms, rest)
			f := strings.Fields(rest)
			d.finalFrom = f[0]
			if strings.HasPrefix(f[0], "--platform=") && len(f) > 1 {
				d.finalFrom = f[1]
			}
			d.copies = nil
		case "ARG":
			d.args = append(d.args, rest)
		case "RUN":
			d.runs = append(d.runs, rest)
		case "COPY":
			d.copies = append(d.copies, rest)
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &d.entry); err != nil {
				t.Fatalf("%s: ENTRYPOINT is not exec form: %v", path, err)
			}
		case "USER":
			d.user = rest
		}
	}
	return d
}

var goBuildRe = regexp.MustCompile(`^CGO_ENABLED=0 GOOS=\$TARGETOS GOARCH=\$TARGETARCH go build (.*) -ldflags="([^"]*)" -o /out/(\S+) (\S+)$`)

// Each image make images builds matches its Dockerfile: the same Go package built with
// the same flags and version stamp for the target platform, put at the same path, the
// same entrypoint, user and base release, and each Debian image's packages from the one
// list both read.
func TestImagesMatchDockerfiles(t *testing.T) {
	n := 0
	for _, def := range defs {
		if def.Dockerfile == "" {
			continue
		}
		n++
		t.Run(def.Name, func(t *testing.T) {
			d := parseDockerfile(t, def.Dockerfile)
			if len(def.Binaries) != 1 {
				t.Fatalf("definition has %d binaries; the Dockerfile builds one", len(def.Binaries))
			}
			bin := def.Binaries[0]
			// The build stage runs on the builder's platform and cross-compiles: a
			// multi-platform build compiles natively, never under emulation.
			if len(d.froms) < 2 || !strings.HasPrefix(d.froms[0], "--platform=$BUILDPLATFORM golang:") {
				t.Errorf("the build stage is not `FROM --platform=$BUILDPLATFORM golang:...`: %v", d.froms)
			}
			for _, a := range []string{"TARGETOS", "TARGETARCH"} {
				if !slices.Contains(d.args, a) {
					t.Errorf("no `ARG %s` (buildx and buildah set it per platform): %v", a, d.args)
				}
			}
			if !slices.ContainsFunc(d.args, func(a string) bool { return strings.HasPrefix(a, "VERSION=") }) {
				t.Errorf("no `ARG VERSION=...`: %v", d.args)
			}
			var out string
			found := false
			for _, r := range d.runs {
				m := goBuildRe.FindStringSubmatch(r)
				if m == nil {
					continue
				}
				found = true
				out = m[3]
				if flags := strings.Fields(m[1]); !slices.Equal(flags, goBuild) {
					t.Errorf("go build flags: Dockerfile %v, images %v", flags, goBuild)
				}
				if want := ldflags + " -X " + versionVar + "=$VERSION"; m[2] != want {
					t.Errorf("-ldflags: Dockerfile %q, images %q", m[2], want)
				}
				if m[4] != bin.Package {
					t.Errorf("Dockerfile builds %s, images builds %s", m[4], bin.Package)
				}
			}
			if !found {
				t.Fatalf("%s has no `CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build ... -o /out/X ./pkg` line", def.Dockerfile)
			}
			wantCopy := "--from=build /out/" + out + " " + bin.Path
			if !slices.Contains(d.copies, wantCopy) {
				t.Errorf("final stage copies %v; want %q", d.copies, wantCopy)
			}
			if !slices.Equal(d.entry, def.Entrypoint) {
				t.Errorf("ENTRYPOINT %v, images %v", d.entry, def.Entrypoint)
			}
			if d.user != def.User {
				t.Errorf("USER %q, images %q", d.user, def.User)
			}
			switch def.Base {
			case baseDebian:
				if d.finalFrom != "debian:"+debianSuite+"-slim" {
					t.Errorf("base %s, images debootstraps %s", d.finalFrom, debianSuite)
				}
				wantPkgCopy := def.PackagesFile + " /tmp/" + filepath.Base(def.PackagesFile)
				if !slices.Contains(d.copies, wantPkgCopy) {
					t.Errorf("the Dockerfile does not COPY %s", wantPkgCopy)
				}
				installs := 0
				for _, r := range d.runs {
					if !strings.Contains(r, "apt-get install") {
						continue
					}
					installs++
					if !strings.Contains(r, "/tmp/"+filepath.Base(def.PackagesFile)+" |") || !strings.Contains(r, "xargs apt-get install -y --no-install-recommends &&") {
						t.Errorf("apt-get install must take exactly the package list: %s", r)
					}
				}
				if installs != 1 {
					t.Errorf("%d apt-get install lines; want the one reading the list", installs)
				}
			case baseDistroless:
				if !strings.HasPrefix(d.finalFrom, "gcr.io/distroless/static-debian12:") || debianSuite != "bookworm" {
					t.Errorf("base %s; images builds a distroless-like root from Debian %s", d.finalFrom, debianSuite)
				}
				if def.User != "65532:65532" || !strings.HasSuffix(d.finalFrom, ":nonroot") {
					t.Errorf("the operator runs as distroless' nonroot user (65532)")
				}
			}
		})
	}
	// Every image a release publishes has its Dockerfile.
	if n != len(releaseImages()) {
		t.Errorf("%d Dockerfiles for %d release images %v", n, len(releaseImages()), releaseImages())
	}
}

func TestPackageLists(t *testing.T) {
	for file, wants := range map[string][]string{
		// kernel-libipsec and the agent's roles in the strongswan container.
		"build/gateway.packages": {"charon-systemd", "libcharon-extra-plugins", "nftables", "iproute2"},
		// init-nat's nft(8); ip and ss for whoever debugs a pod.
		"build/status-agent.packages":      {"nftables", "iproute2", "ca-certificates"},
		"build/gateway-wireguard.packages": {"wireguard-tools", "iproute2"},
	} {
		pkgs, err := readPackages(filepath.Join(repoRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range wants {
			if !slices.Contains(pkgs, want) {
				t.Errorf("%s lacks %s: %v", file, want, pkgs)
			}
		}
		for _, p := range pkgs {
			if strings.ContainsAny(p, " \t#") {
				t.Errorf("%s: package %q: one name per line", file, p)
			}
		}
	}
}

// A layer's digests depend on content only: the same tree gives the same layer, a
// changed byte another.
func TestLayersAreReproducible(t *testing.T) {
	dir := t.TempDir()
	b := &builder{repo: repoRoot, cache: filepath.Join(dir, "cache")}
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/a"), []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a", filepath.Join(root, "etc/b")); err != nil {
		t.Fatal(err)
	}
	l1, err := b.treeLayer(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(l1.Path); err != nil { // written again, not found in the cache
		t.Fatal(err)
	}
	l2, err := b.treeLayer(root)
	if err != nil {
		t.Fatal(err)
	}
	if l1 != l2 {
		t.Fatalf("same tree, different layers: %+v %+v", l1, l2)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/a"), []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	l3, err := b.treeLayer(root)
	if err != nil {
		t.Fatal(err)
	}
	if l3.DiffID == l1.DiffID || l3.Digest == l1.Digest {
		t.Fatal("changed content, same digest")
	}
}

// filesOf reads every regular file of an image's layers.
func filesOf(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				data, _ := io.ReadAll(tr)
				files[h.Name] = data
			}
		}
		rc.Close()
	}
	return files
}

// The pause image (no Debian root, so no root needed) for two platforms: an OCI index
// with one image per platform, each carrying its platform's binary, the same digest when
// built again, the version as the tag and in the annotations, and an OCI layout that
// reads back.
func TestMultiPlatformImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the pause binary twice (-short)")
	}
	cache := t.TempDir()
	b := &builder{repo: repoRoot, cache: cache, version: "v1.2.3"}
	def, _ := lookup("pause")
	platforms := []platform{{"linux", "amd64"}, {"linux", "arm64"}}
	bt, err := b.build(def, platforms)
	if err != nil {
		t.Fatal(err)
	}
	if bt.tag != "v1.2.3" {
		t.Errorf("tag %q, want the version", bt.tag)
	}
	im, err := bt.index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := bt.index.MediaType(); mt != types.OCIImageIndex {
		t.Errorf("index media type %s", mt)
	}
	if im.Annotations["org.opencontainers.image.version"] != "v1.2.3" {
		t.Errorf("index annotations %v", im.Annotations)
	}
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	if len(im.Manifests) != 2 {
		t.Fatalf("%d manifests, want 2", len(im.Manifests))
	}
	for i, desc := range im.Manifests {
		p := platforms[i]
		if desc.Platform == nil || desc.Platform.OS != p.OS || desc.Platform.Architecture != p.Arch {
			t.Errorf("manifest %d platform %v, want %s", i, desc.Platform, p)
		}
		img, err := bt.index.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != p.Arch || cf.OS != p.OS || !slices.Equal(cf.Config.Entrypoint, def.Entrypoint) {
			t.Errorf("%s config: %s/%s entrypoint %v", p, cf.OS, cf.Architecture, cf.Config.Entrypoint)
		}
		files := filesOf(t, img)
		bin, ok := files["pause"]
		if !ok {
			t.Fatalf("%s: no /pause in the image: %v", p, files)
		}
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatal(err)
		}
		if f.Machine != machines[p.Arch] {
			t.Errorf("%s: /pause is built for %s", p, f.Machine)
		}
	}
	again, err := b.build(def, platforms)
	if err != nil {
		t.Fatal(err)
	}
	if again.digest != bt.digest {
		t.Errorf("built twice from the same tree: %s, then %s", bt.digest, again.digest)
	}
	dev, err := (&builder{repo: repoRoot, cache: cache}).build(def, platforms[:1])
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^dev-[0-9a-f]{12}$`).MatchString(dev.tag) || strings.TrimPrefix(dev.tag, "dev-") != strings.TrimPrefix(dev.digest, "sha256:")[:12] {
		t.Errorf("development tag %q for index %s: want dev-<the digest's first 12 hex>", dev.tag, dev.digest)
	}

	dir := filepath.Join(t.TempDir(), "layout")
	ref := "localhost/bnerd/pause:v1.2.3"
	if err := writeLayout(dir, ref, bt.index); err != nil {
		t.Fatal(err)
	}
	if err := writeLayout(dir, ref, bt.index); err != nil { // replaced, not added twice
		t.Fatal(err)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	root, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	rm, err := root.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(rm.Manifests) != 1 || rm.Manifests[0].Digest.String() != bt.digest || rm.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != ref {
		t.Errorf("layout index %+v", rm.Manifests)
	}
}

// Pushing writes the index under its tag and each platform image's SBOM as an OCI
// referrer, found through the referrers tag schema on a registry without the referrers
// API (as Debian's docker-registry 2.8) and through the API where there is one.
func TestPushWithSBOMReferrers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the pause binary (-short)")
	}
	for _, api := range []bool{false, true} {
		t.Run(map[bool]string{false: "referrers tag schema", true: "referrers API"}[api], func(t *testing.T) {
			srv := httptest.NewServer(registry.New(registry.WithReferrersSupport(api), registry.Logger(log.New(io.Discard, "", 0))))
			defer srv.Close()
			u, _ := url.Parse(srv.URL)
			cache := t.TempDir()
			b := &builder{repo: repoRoot, cache: cache, version: "v1.2.3"}
			def, _ := lookup("pause")
			bt, err := b.build(def, []platform{{"linux", "amd64"}, {"linux", "arm64"}})
			if err != nil {
				t.Fatal(err)
			}
			// The SBOMs come from the cache, so this test needs no syft: what is pushed is
			// what the cache holds for each image.
			docs := map[v1.Hash][]byte{}
			for _, pi := range bt.images {
				doc := []byte(`{"spdxVersion":"SPDX-2.3","name":"pause ` + pi.platform.String() + `"}`)
				docs[pi.digest] = doc
				if err := os.MkdirAll(filepath.Join(cache, "sbom"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(cache, "sbom", pi.digest.Hex+".spdx.json"), doc, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ref := u.Host + "/bnerd/pause:" + bt.tag
			if err := b.push(ref, bt, true); err != nil {
				t.Fatal(err)
			}
			r, err := name.ParseReference(ref)
			if err != nil {
				t.Fatal(err)
			}
			got, err := remote.Index(r)
			if err != nil {
				t.Fatal(err)
			}
			if h, _ := got.Digest(); h.String() != bt.digest {
				t.Errorf("pushed index %s, built %s", h, bt.digest)
			}
			for subject, doc := range docs {
				idx, err := remote.Referrers(r.Context().Digest(subject.String()))
				if err != nil {
					t.Fatal(err)
				}
				im, err := idx.IndexManifest()
				if err != nil {
					t.Fatal(err)
				}
				// The in-memory registry's API reports the config's media type as the
				// artifact type (the spec prefers the manifest's artifactType, as the tag
				// schema above does): the manifest below is checked either way.
				if len(im.Manifests) != 1 || (!api && im.Manifests[0].ArtifactType != sbomMediaType) {
					t.Fatalf("referrers of %s: %+v", subject, im.Manifests)
				}
				art, err := remote.Image(r.Context().Digest(im.Manifests[0].Digest.String()))
				if err != nil {
					t.Fatal(err)
				}
				m, err := art.Manifest()
				if err != nil {
					t.Fatal(err)
				}
				if m.ArtifactType != sbomMediaType || m.Subject == nil || m.Subject.Digest != subject || m.Config.MediaType != emptyMediaType || len(m.Layers) != 1 || m.Layers[0].MediaType != sbomMediaType {
					t.Errorf("SBOM manifest %+v", m)
				}
				layers, _ := art.Layers()
				rc, err := layers[0].Compressed()
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(rc)
				rc.Close()
				if !bytes.Equal(body, doc) {
					t.Errorf("SBOM blob %s, want %s", body, doc)
				}
			}
		})
	}
}
