package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// baseRecipe is part of the Debian root's cache key: bump it when the way the root is
// made changes.
const baseRecipe = "debootstrap minbase + suite-updates/security upgrade + docs removed, v1"

type debianBase struct {
	layer    layerFile
	caBundle string
}

// debianBase returns the Debian root for pkgs as a layer, making it with debootstrap the
// first time (about five minutes) from the Debian mirror apt already uses.
func (b *builder) debianBase(pkgs []string) (debianBase, error) {
	sorted := append([]string(nil), pkgs...)
	sort.Strings(sorted)
	sum := sha256.Sum256([]byte(baseRecipe + "\n" + debianSuite + "\n" + strings.Join(sorted, "\n")))
	dir := filepath.Join(b.cache, "base", debianSuite+"-"+hex.EncodeToString(sum[:])[:12])
	meta := filepath.Join(dir, "layer.json")
	var out debianBase
	if data, err := os.ReadFile(meta); err == nil && json.Unmarshal(data, &out.layer) == nil {
		out.layer.Path = filepath.Join(dir, "layer.tar")
		out.caBundle = filepath.Join(dir, "ca-certificates.crt")
		if _, err := os.Stat(out.layer.Path); err == nil {
			return out, nil
		}
	}
	if os.Geteuid() != 0 {
		return out, fmt.Errorf("making the Debian root with debootstrap needs root")
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return out, fmt.Errorf("debootstrap is not installed (apt-get install debootstrap)")
	}
	mirror, security := aptMirrors()
	if mirror == "" {
		return out, fmt.Errorf("no Debian mirror found in apt's sources")
	}
	rootfs := filepath.Join(dir, "rootfs")
	_ = os.RemoveAll(rootfs)
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return out, err
	}
	if err := os.MkdirAll(filepath.Join(b.cache, "debootstrap-cache"), 0o755); err != nil {
		return out, err
	}
	start := time.Now()
	logf("debootstrap %s (minbase + %s) from %s: a few minutes the first time", debianSuite, strings.Join(sorted, ","), mirror)
	if err := runLogged("debootstrap", "--variant=minbase", "--include="+strings.Join(sorted, ","),
		"--cache-dir="+filepath.Join(b.cache, "debootstrap-cache"), debianSuite, rootfs, mirror); err != nil {
		return out, err
	}
	// debian:bookworm-slim carries the point-release and security updates; so does this.
	sources := fmt.Sprintf("deb %s %s main\ndeb %s %s-updates main\n", mirror, debianSuite, mirror, debianSuite)
	if security != "" {
		sources += fmt.Sprintf("deb %s %s-security main\n", security, debianSuite)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "etc/apt/sources.list"), []byte(sources), 0o644); err != nil {
		return out, err
	}
	if err := chrootUpgrade(rootfs); err != nil {
		return out, err
	}
	for _, g := range []string{"var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*", "usr/share/doc/*", "usr/share/man/*", "usr/share/info/*", "var/log/*.log", "dev/*"} {
		matches, _ := filepath.Glob(filepath.Join(rootfs, g))
		for _, m := range matches {
			if g == "var/lib/apt/lists/*" && filepath.Base(m) == "partial" {
				continue
			}
			if err := os.RemoveAll(m); err != nil {
				return out, err
			}
		}
	}
	ca, err := os.ReadFile(filepath.Join(rootfs, "etc/ssl/certs/ca-certificates.crt"))
	if err != nil {
		return out, fmt.Errorf("the Debian root has no CA bundle: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca-certificates.crt"), ca, 0o644); err != nil {
		return out, err
	}
	l, err := treeLayer(rootfs, filepath.Join(dir, "layer.tar"))
	if err != nil {
		return out, err
	}
	data, _ := json.Marshal(l)
	if err := os.WriteFile(meta, data, 0o644); err != nil {
		return out, err
	}
	if err := os.RemoveAll(rootfs); err != nil {
		return out, err
	}
	logf("Debian root made in %s (%d MB layer)", time.Since(start).Round(time.Second), l.Size>>20)
	return debianBase{layer: l, caBundle: filepath.Join(dir, "ca-certificates.crt")}, nil
}

// chrootUpgrade applies the suite's updates inside rootfs, with /proc mounted for the
// maintainer scripts and unmounted again whatever happens.
func chrootUpgrade(rootfs string) error {
	proc := filepath.Join(rootfs, "proc")
	if err := syscall.Mount("proc", proc, "proc", 0, ""); err != nil {
		return fmt.Errorf("mounting /proc in the new root: %w", err)
	}
	defer func() { _ = syscall.Unmount(proc, syscall.MNT_DETACH) }()
	for _, args := range [][]string{
		{"apt-get", "-qq", "update"},
		{"apt-get", "-qq", "-y", "upgrade"},
		{"apt-get", "-qq", "clean"},
	} {
		cmd := exec.Command("chroot", append([]string{rootfs}, args...)...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C"}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("chroot %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

func runLogged(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		tail := string(out)
		if len(tail) > 4000 {
			tail = tail[len(tail)-4000:]
		}
		return fmt.Errorf("%s: %w\n%s", name, err, tail)
	}
	return nil
}

// aptMirrors reads the Debian archive and security mirrors apt is configured with, so
// nothing here names a host of its own.
func aptMirrors() (mirror, security string) {
	var uris []string
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	for _, f := range files {
		uris = append(uris, fieldValues(f, "URIs:")...)
	}
	for _, l := range fieldValues("/etc/apt/sources.list", "deb") {
		if strings.Contains(l, "://") {
			uris = append(uris, l)
		}
	}
	for _, u := range uris {
		u = strings.TrimRight(u, "/")
		switch {
		case strings.HasSuffix(u, "-security") || strings.Contains(u, "security."):
			if security == "" {
				security = u
			}
		case mirror == "":
			mirror = u
		}
	}
	return mirror, security
}

// fieldValues returns the first word after prefix on each line of path that starts with
// it.
func fieldValues(path, prefix string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == prefix {
			v := fields[1]
			if strings.HasPrefix(v, "[") { // deb [signed-by=...] uri
				for _, x := range fields[2:] {
					if strings.Contains(x, "://") {
						v = x
						break
					}
				}
			}
			out = append(out, v)
		}
	}
	return out
}

// distrolessLayer is what the operator needs of distroless static's :nonroot: the CA
// bundle, passwd and group naming root and nonroot (65532), a sticky /tmp and nonroot's
// home.
func (b *builder) distrolessLayer(caBundle string) (layerFile, error) {
	entries := []entry{
		{Name: "/etc", Dir: true, Mode: 0o755},
		{Name: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Name: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n")},
		{Name: "/etc/nsswitch.conf", Mode: 0o644, Data: []byte("hosts: files dns\n")},
		{Name: "/etc/ssl", Dir: true, Mode: 0o755},
		{Name: "/etc/ssl/certs", Dir: true, Mode: 0o755},
		{Name: "/etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Source: caBundle},
		{Name: "/home", Dir: true, Mode: 0o755},
		{Name: "/home/nonroot", Dir: true, Mode: 0o700, UID: 65532, GID: 65532},
		{Name: "/tmp", Dir: true, Mode: 0o1777},
	}
	return b.entriesLayer("distroless-base", entries)
}
