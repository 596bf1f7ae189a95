// Command images builds the project's container images without a Docker engine, for one
// or more platforms, and pushes them to an OCI registry (`make images`, `make release`):
//
//   - operator: build/operator.Dockerfile's binary, path, user and entrypoint on a
//     distroless-like root (Debian's CA bundle, passwd and group with nonroot 65532);
//   - gateway: build/gateway.Dockerfile's binary and entrypoint on a Debian root made by
//     debootstrap from build/gateway.packages, the package list the Dockerfile installs;
//   - gateway-wireguard: the same for build/gateway-wireguard.Dockerfile;
//   - status-agent: the same for build/status-agent.Dockerfile;
//   - pause: the pod sandbox image of the local node world (hack/images/pause).
//
// The layers are written here (reproducible tars of a Debian root and of the binaries);
// go-containerregistry assembles them into OCI images, one per platform, and an OCI
// image index per image, and pushes those with the registry client's own auth (the
// Docker config's credentials, as `docker login` and `crane auth login` write them).
// Each pushed platform image gets its SBOM (SPDX JSON, made by syft) as an OCI referrer:
// an artifact whose subject is the image, found by the registry's referrers API or the
// referrers tag schema on registries without it.
//
// Everything is cached under the cache directory by content: a Debian root by its
// package list, suite and architecture; a layer by its diff ID; an SBOM by the image it
// describes. Without --version an image's tag is its index digest (dev-<12 hex>), so an
// unchanged tree gives the same reference and rolls no pod. images_test.go checks that
// the definitions below match the Dockerfiles.
//
//	go run ./hack/images [--platforms linux/amd64,linux/arm64] [--version 0.2.0]
//	    [--push REGISTRY/PREFIX] [--sbom] [--layout DIR] [operator gateway ...]
//
// prints one line per image: "<name> <reference> <index digest>".
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

// goBuild are the build flags of every Dockerfile's `go build` (with CGO_ENABLED=0),
// before the version stamp.
var goBuild = []string{"-trimpath", "-buildvcs=false"}

// ldflags are the Dockerfiles' -ldflags; versionVar receives the release version.
const (
	ldflags    = "-s -w"
	versionVar = "bnerd.net/vpn-operator/internal/version.Version"
)

// debianSuite is the Debian release the Dockerfiles build on (debian:bookworm-slim and
// distroless static-debian12).
const debianSuite = "bookworm"

type baseKind int

const (
	// baseNone: only the binaries.
	baseNone baseKind = iota
	// baseDebian: debootstrap --variant=minbase of packagesFile.
	baseDebian
	// baseDistroless: CA bundle, passwd, group, /tmp and nonroot's home, as distroless
	// static's :nonroot.
	baseDistroless
)

type binary struct {
	// Package is the Go package built, relative to the repository root.
	Package string
	// Path is where the binary lands in the image.
	Path string
}

type imageDef struct {
	Name string
	// Repository is the image's name under the registry prefix.
	Repository string
	// Title is the image's org.opencontainers.image.title and description.
	Title string
	// Dockerfile is the file this image must match ("" for none).
	Dockerfile   string
	Base         baseKind
	PackagesFile string
	Binaries     []binary
	Entrypoint   []string
	User         string
	// WorldOnly images are the local world's (pause), never part of a release.
	WorldOnly bool
}

// distrolessCAFrom is the package list of the Debian root the operator's CA bundle comes
// from (ca-certificates, the same source distroless takes it from): the smallest one.
const distrolessCAFrom = "build/status-agent.packages"

var agent = binary{Package: "./cmd/vpn-gateway-agent", Path: "/usr/local/bin/vpn-gateway-agent"}

var defs = []imageDef{
	{
		Name:       "operator",
		Repository: "bnerd-vpn-operator",
		Title:      "bnerd-vpn-operator: the operator",
		Dockerfile: "build/operator.Dockerfile",
		Base:       baseDistroless,
		Binaries:   []binary{{Package: "./cmd/bnerd-vpn-operator", Path: "/bnerd-vpn-operator"}},
		Entrypoint: []string{"/bnerd-vpn-operator"},
		User:       "65532:65532",
	},
	{
		Name:         "gateway",
		Repository:   "bnerd-vpn-gateway",
		Title:        "bnerd-vpn-operator: IPsec gateway (strongSwan charon and the gateway agent)",
		Dockerfile:   "build/gateway.Dockerfile",
		Base:         baseDebian,
		PackagesFile: "build/gateway.packages",
		Binaries:     []binary{agent},
		Entrypoint:   []string{agent.Path},
	},
	{
		Name:         "gateway-wireguard",
		Repository:   "bnerd-vpn-gateway-wireguard",
		Title:        "bnerd-vpn-operator: WireGuard gateway (the gateway agent's wireguard role)",
		Dockerfile:   "build/gateway-wireguard.Dockerfile",
		Base:         baseDebian,
		PackagesFile: "build/gateway-wireguard.packages",
		Binaries:     []binary{agent},
		Entrypoint:   []string{agent.Path},
	},
	{
		Name:         "status-agent",
		Repository:   "bnerd-vpn-status-agent",
		Title:        "bnerd-vpn-operator: gateway agent (init-nat, status agent, exporter)",
		Dockerfile:   "build/status-agent.Dockerfile",
		Base:         baseDebian,
		PackagesFile: "build/status-agent.packages",
		Binaries:     []binary{agent},
		Entrypoint:   []string{agent.Path},
	},
	{
		Name:       "pause",
		Repository: "pause",
		Title:      "bnerd-vpn-operator: the local node world's pod sandbox",
		Base:       baseNone,
		Binaries:   []binary{{Package: "./hack/images/pause", Path: "/pause"}},
		Entrypoint: []string{"/pause"},
		WorldOnly:  true,
	},
}

// releaseImages are the images a release publishes.
func releaseImages() []string {
	var out []string
	for _, d := range defs {
		if !d.WorldOnly {
			out = append(out, d.Name)
		}
	}
	return out
}

func lookup(name string) (imageDef, bool) {
	for _, d := range defs {
		if d.Name == name {
			return d, true
		}
	}
	return imageDef{}, false
}

func main() {
	cache := flag.String("cache", defaultCache(), "cache directory")
	repo := flag.String("repo", ".", "repository root")
	platforms := flag.String("platforms", "linux/"+runtime.GOARCH, "comma-separated OS/architecture pairs")
	version := flag.String("version", "", "release version (0.2.0 or v0.2.0): the tag and the binaries' version; empty for a content tag")
	push := flag.String("push", "", "registry and prefix to push to (registry.example.com/team); empty builds only")
	prefix := flag.String("prefix", "localhost/bnerd", "registry prefix of the printed references when nothing is pushed")
	sbom := flag.Bool("sbom", false, "attach an SPDX SBOM (syft) to each pushed platform image as an OCI referrer (without --push: make and cache them)")
	layoutDir := flag.String("layout", "", "also write the images into this OCI image layout")
	out := flag.String("out", "", "also write the printed lines to this file")
	flag.StringVar(&syftBinary, "syft", "", "syft binary for --sbom")
	flag.Parse()
	names := flag.Args()
	if len(names) == 0 {
		names = releaseImages()
	}
	o := options{
		repo: *repo, cache: *cache, names: names, version: *version, push: *push, prefix: *prefix,
		sbom: *sbom, layout: *layoutDir, out: *out,
	}
	var err error
	if o.platforms, err = parsePlatforms(*platforms); err == nil {
		err = run(o)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "images: %v\n", err)
		os.Exit(1)
	}
}

func defaultCache() string {
	if d := os.Getenv("BNERD_CACHE"); d != "" {
		return filepath.Join(d, "images")
	}
	d, err := os.UserCacheDir()
	if err != nil {
		d = filepath.Join(os.TempDir(), "cache")
	}
	return filepath.Join(d, "bnerd-vpn-operator", "images")
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, "images: "+format+"\n", args...) }

type platform struct{ OS, Arch string }

func (p platform) String() string { return p.OS + "/" + p.Arch }

func parsePlatforms(s string) ([]platform, error) {
	var out []platform
	for _, f := range strings.Split(s, ",") {
		os, arch, ok := strings.Cut(strings.TrimSpace(f), "/")
		if !ok || os != "linux" || arch == "" || strings.Contains(arch, "/") {
			return nil, fmt.Errorf("platform %q: want linux/<arch>", f)
		}
		out = append(out, platform{OS: os, Arch: arch})
	}
	if len(out) == 0 {
		return nil, errors.New("no platform")
	}
	return out, nil
}

// normalizeVersion turns 0.2.0 or v0.2.0 into the image tag and binary version v0.2.0.
func normalizeVersion(v string) string {
	if v == "" || strings.HasPrefix(v, "v") {
		return v
	}
	return "v" + v
}

type options struct {
	repo, cache string
	names       []string
	platforms   []platform
	version     string
	push        string
	prefix      string
	sbom        bool
	layout      string
	out         string
}

func run(o options) error {
	repo, err := filepath.Abs(o.repo)
	if err != nil {
		return err
	}
	unlock, err := lockCache(o.cache)
	if err != nil {
		return err
	}
	defer unlock()
	b := &builder{repo: repo, cache: o.cache, version: normalizeVersion(o.version)}
	var lines []string
	for _, n := range o.names {
		d, ok := lookup(n)
		if !ok {
			return fmt.Errorf("unknown image %q (%s, pause)", n, strings.Join(releaseImages(), ", "))
		}
		built, err := b.build(d, o.platforms)
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		prefix := o.prefix
		if o.push != "" {
			prefix = strings.TrimSuffix(o.push, "/")
		}
		ref := prefix + "/" + d.Repository + ":" + built.tag
		if o.layout != "" {
			if err := writeLayout(o.layout, ref, built.index); err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
		}
		switch {
		case o.push != "":
			if err := b.push(ref, built, o.sbom); err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
		case o.sbom:
			// Made and cached only (`make node-deps` warms the world's release this way).
			for _, pi := range built.images {
				if _, err := b.sbom(pi, d.Repository, built.tag); err != nil {
					return fmt.Errorf("%s: SBOM of %s: %w", n, pi.platform, err)
				}
			}
		}
		line := fmt.Sprintf("%s %s %s", n, ref, built.digest)
		fmt.Println(line)
		lines = append(lines, line)
	}
	if o.out != "" {
		return os.WriteFile(o.out, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	}
	return nil
}

// lockCache takes the cache's lock: one build at a time per cache, since two would make
// the same Debian root at once.
func lockCache(cache string) (func(), error) {
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(cache, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		logf("waiting for another build using %s", cache)
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
			lock.Close()
			return nil, err
		}
	}
	return func() { lock.Close() }, nil
}
