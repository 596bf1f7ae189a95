// Command images builds the project's container images without a registry or a Docker
// engine, as OCI archives that containerd imports (`make images`):
//
//   - operator: build/operator.Dockerfile's binary, path, user and entrypoint on a
//     distroless-like root (Debian's CA bundle, passwd and group with nonroot 65532);
//   - gateway: build/gateway.Dockerfile's binary and entrypoint on a Debian root made by
//     debootstrap from build/gateway.packages, the package list the Dockerfile installs;
//   - gateway-wireguard: build/gateway-wireguard.Dockerfile's binary and entrypoint on a
//     Debian root from build/gateway-wireguard.packages (built only when named);
//   - pause: the pod sandbox image of the local node world (hack/images/pause).
//
// Everything is cached under the cache directory by content: the Debian root by its
// package list and suite, each image by its manifest digest, which is also its tag
// (dev-<12 hex>), so an unchanged tree yields the same reference and rolls no pod.
// images_test.go checks that the definitions below match the Dockerfiles.
//
//	go run ./hack/images [--import /path/containerd.sock ...] [operator gateway pause]
//
// prints one line per image: "<name> <reference> <archive>".
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// goBuild are the build flags of both Dockerfiles' `go build` (with CGO_ENABLED=0).
var goBuild = []string{"-trimpath", "-ldflags=-s -w"}

// debianSuite is the Debian release both Dockerfiles build on (debian:bookworm-slim and
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
	Name       string
	Repository string
	// Dockerfile is the file this image must match ("" for none).
	Dockerfile   string
	Base         baseKind
	PackagesFile string
	Binaries     []binary
	Entrypoint   []string
	User         string
}

var defs = []imageDef{
	{
		Name:       "operator",
		Repository: "localhost/bnerd/bnerd-vpn-operator",
		Dockerfile: "build/operator.Dockerfile",
		Base:       baseDistroless,
		Binaries:   []binary{{Package: "./cmd/bnerd-vpn-operator", Path: "/bnerd-vpn-operator"}},
		Entrypoint: []string{"/bnerd-vpn-operator"},
		User:       "65532:65532",
	},
	{
		Name:         "gateway",
		Repository:   "localhost/bnerd/bnerd-vpn-gateway",
		Dockerfile:   "build/gateway.Dockerfile",
		Base:         baseDebian,
		PackagesFile: "build/gateway.packages",
		Binaries:     []binary{{Package: "./cmd/vpn-gateway-agent", Path: "/usr/local/bin/vpn-gateway-agent"}},
		Entrypoint:   []string{"/usr/local/bin/vpn-gateway-agent"},
	},
	{
		// The WireGuard gateway's wireguard container (images.gatewayWireguard). Not built
		// by default: the local worlds run no WireGuard gateway.
		Name:         "gateway-wireguard",
		Repository:   "localhost/bnerd/bnerd-vpn-gateway-wireguard",
		Dockerfile:   "build/gateway-wireguard.Dockerfile",
		Base:         baseDebian,
		PackagesFile: "build/gateway-wireguard.packages",
		Binaries:     []binary{{Package: "./cmd/vpn-gateway-agent", Path: "/usr/local/bin/vpn-gateway-agent"}},
		Entrypoint:   []string{"/usr/local/bin/vpn-gateway-agent"},
	},
	{
		Name:       "pause",
		Repository: "localhost/bnerd/pause",
		Base:       baseNone,
		Binaries:   []binary{{Package: "./hack/images/pause", Path: "/pause"}},
		Entrypoint: []string{"/pause"},
	},
}

func lookup(name string) (imageDef, bool) {
	for _, d := range defs {
		if d.Name == name {
			return d, true
		}
	}
	return imageDef{}, false
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	var imports multiFlag
	cache := flag.String("cache", defaultCache(), "cache directory")
	repo := flag.String("repo", ".", "repository root")
	flag.Var(&imports, "import", "containerd socket to import the images into (k8s.io namespace); repeatable")
	flag.Parse()
	names := flag.Args()
	if len(names) == 0 {
		names = []string{"operator", "gateway"}
	}
	if err := run(*repo, *cache, names, imports); err != nil {
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

func run(repo, cache string, names []string, sockets []string) error {
	repo, err := filepath.Abs(repo)
	if err != nil {
		return err
	}
	b := &builder{repo: repo, cache: cache}
	for _, n := range names {
		d, ok := lookup(n)
		if !ok {
			return fmt.Errorf("unknown image %q (operator, gateway, pause)", n)
		}
		ref, archive, err := b.build(d)
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		for _, s := range sockets {
			if err := importInto(s, ref, archive); err != nil {
				return fmt.Errorf("%s: importing into %s: %w", n, s, err)
			}
		}
		fmt.Printf("%s %s %s\n", n, ref, archive)
	}
	return nil
}

// importInto imports archive into the containerd at socket unless ref is there already
// (the tag is the manifest digest, so a present tag is the same image).
func importInto(socket, ref, archive string) error {
	ctr := func(args ...string) *exec.Cmd {
		return exec.Command("ctr", append([]string{"-a", socket, "-n", "k8s.io"}, args...)...)
	}
	out, err := ctr("images", "ls", "-q", "name=="+ref).Output()
	if err != nil {
		return fmt.Errorf("ctr images ls: %w", err)
	}
	if strings.TrimSpace(string(out)) == ref {
		return nil
	}
	if out, err := ctr("images", "import", archive).CombinedOutput(); err != nil {
		return fmt.Errorf("ctr images import: %w: %s", err, out)
	}
	return nil
}

type builder struct {
	repo, cache string
}

// goBinary builds pkg as the Dockerfiles do and returns the binary's path.
func (b *builder) goBinary(name string, bin binary) (string, error) {
	out := filepath.Join(b.cache, "bin", name, filepath.Base(bin.Path))
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	args := append([]string{"build"}, goBuild...)
	args = append(args, "-o", out, bin.Package)
	cmd := exec.Command("go", args...)
	cmd.Dir = b.repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", bin.Package, err, out)
	}
	return out, nil
}

func (b *builder) build(d imageDef) (ref, archive string, err error) {
	var layers []layerFile
	switch d.Base {
	case baseDebian:
		pkgs, err := readPackages(filepath.Join(b.repo, d.PackagesFile))
		if err != nil {
			return "", "", err
		}
		base, err := b.debianBase(pkgs)
		if err != nil {
			return "", "", err
		}
		layers = append(layers, base.layer)
	case baseDistroless:
		// Debian's CA bundle, from the gateway's package list (ca-certificates): the
		// same source distroless takes it from.
		pkgs, err := readPackages(filepath.Join(b.repo, "build/gateway.packages"))
		if err != nil {
			return "", "", err
		}
		base, err := b.debianBase(pkgs)
		if err != nil {
			return "", "", err
		}
		l, err := b.distrolessLayer(base.caBundle)
		if err != nil {
			return "", "", err
		}
		layers = append(layers, l)
	}
	var entries []entry
	for _, bin := range d.Binaries {
		p, err := b.goBinary(d.Name, bin)
		if err != nil {
			return "", "", err
		}
		entries = append(entries, parents(bin.Path)...)
		entries = append(entries, entry{Name: bin.Path, Mode: 0o755, Source: p})
	}
	l, err := b.entriesLayer(d.Name+"-binaries", entries)
	if err != nil {
		return "", "", err
	}
	layers = append(layers, l)
	return b.writeImage(d, layers)
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
