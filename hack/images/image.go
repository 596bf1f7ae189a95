package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/match"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// source is the repository the images' org.opencontainers.image.source names.
const source = "https://github.com/bnerd/bnerd-vpn-operator"

type builder struct {
	repo, cache string
	// version is the release version (v0.2.0), "" for a development build.
	version string
	// built are the binaries this run has built, by platform and package: the agent is
	// in three images and built once.
	built map[string]string
}

// platformImage is one platform's image and what its SBOM is made from.
type platformImage struct {
	platform platform
	image    v1.Image
	digest   v1.Hash
}

type built struct {
	index  v1.ImageIndex
	digest string
	tag    string
	images []platformImage
}

// goBinary builds bin for p as the Dockerfiles do and returns the binary's path.
func (b *builder) goBinary(p platform, bin binary) (string, error) {
	key := p.String() + " " + bin.Package
	if out, ok := b.built[key]; ok {
		return out, nil
	}
	out := filepath.Join(b.cache, "bin", p.OS+"-"+p.Arch, filepath.Base(bin.Package), filepath.Base(bin.Package))
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	ld := ldflags
	if b.version != "" {
		ld += " -X " + versionVar + "=" + b.version
	}
	args := append([]string{"build"}, goBuild...)
	args = append(args, "-ldflags="+ld, "-o", out, bin.Package)
	cmd := exec.Command("go", args...)
	cmd.Dir = b.repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s for %s: %w\n%s", bin.Package, p, err, out)
	}
	if b.built == nil {
		b.built = map[string]string{}
	}
	b.built[key] = out
	return out, nil
}

// build makes d's image for every platform and the index over them.
func (b *builder) build(d imageDef, platforms []platform) (built, error) {
	var out built
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var adds []mutate.IndexAddendum
	for _, p := range platforms {
		img, err := b.platformImage(d, p)
		if err != nil {
			return out, fmt.Errorf("%s: %w", p, err)
		}
		h, err := img.Digest()
		if err != nil {
			return out, err
		}
		out.images = append(out.images, platformImage{platform: p, image: img, digest: h})
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			MediaType: types.OCIManifestSchema1,
			Platform:  &v1.Platform{OS: p.OS, Architecture: p.Arch},
		}})
	}
	idx = mutate.AppendManifests(idx, adds...)
	anns := b.annotations(d)
	if len(anns) > 0 {
		idx = mutate.Annotations(idx, anns).(v1.ImageIndex)
	}
	h, err := idx.Digest()
	if err != nil {
		return out, err
	}
	out.index, out.digest = idx, h.String()
	out.tag = b.version
	if out.tag == "" {
		out.tag = "dev-" + h.Hex[:12]
	}
	return out, nil
}

// annotations are the index's and each image's org.opencontainers.image.* keys.
func (b *builder) annotations(d imageDef) map[string]string {
	anns := map[string]string{
		"org.opencontainers.image.title":  d.Repository,
		"org.opencontainers.image.source": source,
	}
	if d.Title != "" {
		anns["org.opencontainers.image.description"] = d.Title
	}
	if b.version != "" {
		anns["org.opencontainers.image.version"] = b.version
	}
	return anns
}

// platformImage assembles d for p: its base layer (a Debian root, the distroless-like
// root, or none) and a layer with its binaries.
func (b *builder) platformImage(d imageDef, p platform) (v1.Image, error) {
	var layers []layerFile
	switch d.Base {
	case baseDebian:
		pkgs, err := readPackages(filepath.Join(b.repo, d.PackagesFile))
		if err != nil {
			return nil, err
		}
		base, err := b.debianBase(pkgs, p.Arch)
		if err != nil {
			return nil, err
		}
		layers = append(layers, base.layer)
	case baseDistroless:
		// The CA bundle is the same file on every architecture: take it from this
		// machine's root.
		pkgs, err := readPackages(filepath.Join(b.repo, distrolessCAFrom))
		if err != nil {
			return nil, err
		}
		base, err := b.debianBase(pkgs, runtime.GOARCH)
		if err != nil {
			return nil, err
		}
		l, err := b.distrolessLayer(base.caBundle)
		if err != nil {
			return nil, err
		}
		layers = append(layers, l)
	}
	var entries []entry
	for _, bin := range d.Binaries {
		path, err := b.goBinary(p, bin)
		if err != nil {
			return nil, err
		}
		entries = append(entries, parents(bin.Path)...)
		entries = append(entries, entry{Name: bin.Path, Mode: 0o755, Source: path})
	}
	l, err := b.entriesLayer(entries)
	if err != nil {
		return nil, err
	}
	layers = append(layers, l)

	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	var adds []mutate.Addendum
	for _, lf := range layers {
		layer, err := lf.v1()
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.Addendum{Layer: layer, MediaType: types.OCILayer})
	}
	img, err = mutate.Append(img, adds...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = p.OS, p.Arch
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.History = nil
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cf.Config.Entrypoint = d.Entrypoint
	cf.Config.User = d.User
	cf.Config.WorkingDir = "/"
	cf.Config.Labels = b.annotations(d)
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, b.annotations(d)).(v1.Image), nil
}

// writeLayout writes idx into the OCI image layout at dir under ref, replacing an
// earlier index of the same name.
func writeLayout(dir, ref string, idx v1.ImageIndex) error {
	p, err := layout.FromPath(dir)
	if err != nil {
		if p, err = layout.Write(dir, empty.Index); err != nil {
			return err
		}
	}
	anns := map[string]string{"org.opencontainers.image.ref.name": ref}
	return p.ReplaceIndex(idx, match.Annotation("org.opencontainers.image.ref.name", ref), layout.WithAnnotations(anns))
}

// readPackages reads a package list: one per line, `#` comments and blank lines ignored.
func readPackages(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if i := strings.IndexByte(l, '#'); i >= 0 {
			l = l[:i]
		}
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		return nil, errors.New(path + " lists no package")
	}
	return out, nil
}
