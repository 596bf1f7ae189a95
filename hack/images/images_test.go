package main

import (
	"archive/tar"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const repoRoot = "../.."

// dockerfile is a Dockerfile's instructions, continuation lines joined, of the final
// stage (and the build stage's RUN lines).
type dockerfile struct {
	finalFrom string
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
			d.finalFrom = strings.Fields(rest)[0]
			d.copies = nil
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

var goBuildRe = regexp.MustCompile(`^CGO_ENABLED=0 go build (.*) -o /out/(\S+) (\S+)$`)

// Each image make images builds matches its Dockerfile: the same Go package built with
// the same flags, put at the same path, the same entrypoint, user and base release, and
// the gateway's Debian packages from the one list both read.
func TestImagesMatchDockerfiles(t *testing.T) {
	for _, def := range defs {
		if def.Dockerfile == "" {
			continue
		}
		t.Run(def.Name, func(t *testing.T) {
			d := parseDockerfile(t, def.Dockerfile)
			if len(def.Binaries) != 1 {
				t.Fatalf("definition has %d binaries; the Dockerfile builds one", len(def.Binaries))
			}
			bin := def.Binaries[0]
			var out string
			found := false
			for _, r := range d.runs {
				m := goBuildRe.FindStringSubmatch(r)
				if m == nil {
					continue
				}
				found = true
				out = m[2]
				flags := strings.Fields(strings.ReplaceAll(m[1], `-ldflags="-s -w"`, "-ldflags=-s_-w"))
				want := []string{"-trimpath", "-ldflags=-s_-w"}
				if !slices.Equal(flags, want) || !slices.Equal(goBuild, []string{"-trimpath", "-ldflags=-s -w"}) {
					t.Errorf("go build flags: Dockerfile %v, images %v", m[1], goBuild)
				}
				if m[3] != bin.Package {
					t.Errorf("Dockerfile builds %s, images builds %s", m[3], bin.Package)
				}
			}
			if !found {
				t.Fatalf("%s has no `CGO_ENABLED=0 go build ... -o /out/X ./pkg` line", def.Dockerfile)
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
}

func TestPackageList(t *testing.T) {
	pkgs, err := readPackages(filepath.Join(repoRoot, "build/gateway.packages"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"charon-systemd", "libcharon-extra-plugins", "nftables", "iproute2"} {
		if !slices.Contains(pkgs, want) {
			t.Errorf("gateway.packages lacks %s (kernel-libipsec and the agent need it): %v", want, pkgs)
		}
	}
	for _, p := range pkgs {
		if strings.ContainsAny(p, " \t#") {
			t.Errorf("package %q: one name per line", p)
		}
	}
}

// A layer's digest depends on content only: the same tree gives the same digest, a
// changed byte another.
func TestLayersAreReproducible(t *testing.T) {
	dir := t.TempDir()
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
	l1, err := treeLayer(root, filepath.Join(dir, "1.tar"))
	if err != nil {
		t.Fatal(err)
	}
	l2, err := treeLayer(root, filepath.Join(dir, "2.tar"))
	if err != nil {
		t.Fatal(err)
	}
	if l1.Digest != l2.Digest {
		t.Fatalf("same tree, different digests: %s %s", l1.Digest, l2.Digest)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/a"), []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	l3, err := treeLayer(root, filepath.Join(dir, "3.tar"))
	if err != nil {
		t.Fatal(err)
	}
	if l3.Digest == l1.Digest {
		t.Fatal("changed content, same digest")
	}
}

// The archive is an OCI layout containerd imports: index -> manifest -> config whose
// diff IDs are the layers, named by the reference the tool prints.
func TestArchiveLayout(t *testing.T) {
	dir := t.TempDir()
	b := &builder{repo: repoRoot, cache: dir}
	l, err := b.entriesLayer("t", []entry{{Name: "/bin", Dir: true, Mode: 0o755}, {Name: "/bin/x", Mode: 0o755, Data: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	def := imageDef{Name: "t", Repository: "localhost/bnerd/t", Entrypoint: []string{"/bin/x"}, User: "1:1"}
	ref, archive, err := b.writeImage(def, []layerFile{l})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		files[h.Name] = data
	}
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, files["index.json"])
	}
	if got := index.Manifests[0].Annotations["io.containerd.image.name"]; got != ref {
		t.Errorf("image name %q, printed reference %q", got, ref)
	}
	blob := func(d string) []byte { return files["blobs/sha256/"+strings.TrimPrefix(d, "sha256:")] }
	var man struct {
		Config descriptor   `json:"config"`
		Layers []descriptor `json:"layers"`
	}
	if err := json.Unmarshal(blob(index.Manifests[0].Digest), &man); err != nil {
		t.Fatal(err)
	}
	var cfg imageConfig
	if err := json.Unmarshal(blob(man.Config.Digest), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(man.Layers) != 1 || man.Layers[0].Digest != l.Digest || !slices.Equal(cfg.RootFS.DiffIDs, []string{l.Digest}) {
		t.Errorf("layers %v, diff IDs %v, want %s", man.Layers, cfg.RootFS.DiffIDs, l.Digest)
	}
	if digestOf(blob(l.Digest)) != l.Digest {
		t.Error("layer blob does not match its digest")
	}
	if !slices.Equal(cfg.Config.Entrypoint, def.Entrypoint) || cfg.Config.User != "1:1" {
		t.Errorf("config %+v", cfg.Config)
	}
	if !strings.HasPrefix(ref, "localhost/bnerd/t:dev-") {
		t.Errorf("reference %s", ref)
	}
}
