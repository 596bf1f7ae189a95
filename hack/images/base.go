package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"
)

// baseRecipe is part of every Debian root's cache key: bump it when the way a root is
// made changes.
const baseRecipe = "minbase: debootstrap minbase + suite-updates/security upgrade; packages: apt-get install --no-install-recommends on it; docs removed, v2"

type debianBase struct {
	layer layerFile
	// caBundle is the root's /etc/ssl/certs/ca-certificates.crt (when it has one),
	// dpkgStatus its /var/lib/dpkg/status, both copied out of the root.
	caBundle, dpkgStatus string
}

// debianArch is Debian's name for a Go architecture, qemuArch qemu's (the name of its
// user-mode emulator and of the binfmt_misc entry Debian's qemu-user-static ships).
func debianArch(goarch string) string {
	switch goarch {
	case "arm":
		return "armhf"
	case "ppc64le":
		return "ppc64el"
	}
	return goarch
}

func qemuArch(goarch string) string {
	switch goarch {
	case "amd64":
		return "x86_64"
	case "arm64":
		return "aarch64"
	}
	return goarch
}

// debianBase returns a Debian root for goarch as a layer, made the way the Dockerfiles
// make theirs, the first time (minutes) and cached by its recipe:
//
//   - with no packages, the minbase root (what debian:bookworm-slim is): debootstrap
//     --variant=minbase from the Debian mirror apt already uses, with the suite's updates
//     and security updates applied;
//   - with packages, that root with `apt-get install --no-install-recommends` of exactly
//     them, as each Dockerfile's final stage runs it.
//
// A root for another architecture than this machine's is made without running any of its
// code as root here: debootstrap's first stage only downloads and unpacks; the second
// stage (the maintainer scripts), the upgrade and apt-get run under qemu-user-static
// inside a user namespace with its own binfmt_misc (see emulated). The cache keeps the
// root as it was made: delete ~/.cache/bnerd-vpn-operator/images/base to pick up newer
// Debian updates (the release workflow starts from an empty cache).
func (b *builder) debianBase(pkgs []string, goarch string) (debianBase, error) {
	sorted := append([]string(nil), pkgs...)
	sort.Strings(sorted)
	arch := debianArch(goarch)
	var minbase debianBase
	key := baseRecipe + "\n" + debianSuite + "\n" + arch
	if len(sorted) > 0 {
		var err error
		if minbase, err = b.debianBase(nil, goarch); err != nil {
			return debianBase{}, err
		}
		key += "\n" + minbase.layer.DiffID + "\n" + strings.Join(sorted, "\n")
	}
	sum := sha256.Sum256([]byte(key))
	dir := filepath.Join(b.cache, "base", debianSuite+"-"+arch+"-"+hex.EncodeToString(sum[:])[:12])
	out := debianBase{caBundle: filepath.Join(dir, "ca-certificates.crt"), dpkgStatus: filepath.Join(dir, "dpkg-status")}
	if l, ok := loadLayerMeta(b.cache, filepath.Join(dir, "layer.json")); ok {
		if _, err := os.Stat(out.dpkgStatus); err == nil {
			out.layer = l
			return out, nil
		}
	}
	if os.Geteuid() != 0 {
		return out, fmt.Errorf("making the Debian root needs root (debootstrap, chroot)")
	}
	native := goarch == runtime.GOARCH
	if !native {
		if _, err := os.Stat(binfmtEntry(goarch)); err != nil {
			return out, fmt.Errorf("making a %s root on %s needs Debian's qemu-user-static (%s): %w", arch, runtime.GOARCH, binfmtEntry(goarch), err)
		}
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
	defer os.RemoveAll(rootfs)
	how := "natively"
	if !native {
		how = "under qemu-user-static"
	}
	// run runs script in the root: chroot here, or emulated for another architecture,
	// with this machine's resolver for apt (the image gets an empty resolv.conf: the
	// runtime provides one).
	run := func(script string) error {
		if err := copyFile("/etc/resolv.conf", filepath.Join(rootfs, "etc/resolv.conf")); err != nil {
			return err
		}
		if native {
			return chrootRun(rootfs, script)
		}
		return emulated(goarch, rootfs, "mount -t proc proc \"$ROOTFS/proc\"\n"+
			"for d in "+strings.Join(devices, " ")+"; do [ -e \"$ROOTFS/dev/$d\" ] || : >\"$ROOTFS/dev/$d\"; mount --bind \"/dev/$d\" \"$ROOTFS/dev/$d\"; done\n"+
			"chroot \"$ROOTFS\" /bin/sh -c '"+script+"'")
	}
	start := time.Now()
	if len(sorted) == 0 {
		if _, err := exec.LookPath("debootstrap"); err != nil {
			return out, fmt.Errorf("debootstrap is not installed (apt-get install debootstrap)")
		}
		debs := filepath.Join(b.cache, "debootstrap-cache")
		if err := os.MkdirAll(debs, 0o755); err != nil {
			return out, err
		}
		logf("debootstrap %s/%s minbase from %s, %s: minutes the first time", debianSuite, arch, mirror, how)
		args := []string{"--variant=minbase", "--arch=" + arch, "--cache-dir=" + debs}
		if !native {
			args = append(args, "--foreign")
		}
		if err := runLogged("debootstrap", append(args, debianSuite, rootfs, mirror)...); err != nil {
			return out, err
		}
		if !native {
			// The second stage runs the maintainer scripts.
			if err := emulated(goarch, rootfs, "container=lxc chroot \"$ROOTFS\" /debootstrap/debootstrap --second-stage"); err != nil {
				return out, fmt.Errorf("debootstrap's second stage for %s: %w", arch, err)
			}
		}
		// debian:bookworm-slim carries the point-release and security updates; so does this.
		sources := fmt.Sprintf("deb %s %s main\ndeb %s %s-updates main\n", mirror, debianSuite, mirror, debianSuite)
		if security != "" {
			sources += fmt.Sprintf("deb %s %s-security main\n", security, debianSuite)
		}
		if err := os.WriteFile(filepath.Join(rootfs, "etc/apt/sources.list"), []byte(sources), 0o644); err != nil {
			return out, err
		}
		if err := run("set -e; apt-get -qq update; apt-get -qq -y upgrade; apt-get -qq clean"); err != nil {
			return out, fmt.Errorf("upgrading the %s root: %w", arch, err)
		}
	} else {
		logf("Debian %s/%s: apt-get install %s on the minbase root, %s", debianSuite, arch, strings.Join(sorted, " "), how)
		if err := runLogged("tar", "-xzpf", minbase.layer.Path, "-C", rootfs, "--numeric-owner"); err != nil {
			return out, err
		}
		if err := run("set -e; apt-get -qq update; apt-get install -qq -y --no-install-recommends " + strings.Join(sorted, " ") + "; apt-get -qq clean"); err != nil {
			return out, fmt.Errorf("installing %s in the %s root: %w", strings.Join(sorted, " "), arch, err)
		}
	}
	if err := os.WriteFile(filepath.Join(rootfs, "etc/resolv.conf"), nil, 0o644); err != nil {
		return out, err
	}
	for _, g := range []string{"var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*", "usr/share/doc/*", "usr/share/man/*", "usr/share/info/*", "var/log/*.log", "dev/*", "debootstrap"} {
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
	status, err := os.ReadFile(filepath.Join(rootfs, "var/lib/dpkg/status"))
	if err != nil {
		return out, fmt.Errorf("the Debian root has no dpkg database: %w", err)
	}
	if err := os.WriteFile(out.dpkgStatus, status, 0o644); err != nil {
		return out, err
	}
	if ca, err := os.ReadFile(filepath.Join(rootfs, "etc/ssl/certs/ca-certificates.crt")); err == nil {
		if err := os.WriteFile(out.caBundle, ca, 0o644); err != nil {
			return out, err
		}
	}
	l, err := b.treeLayer(rootfs)
	if err != nil {
		return out, err
	}
	if err := saveLayerMeta(filepath.Join(dir, "layer.json"), l); err != nil {
		return out, err
	}
	logf("Debian root %s/%s (%s) made %s in %s (%d MB compressed layer)", debianSuite, arch, strings.Join(append([]string{"minbase"}, sorted...), " "), how, time.Since(start).Round(time.Second), l.Size>>20)
	out.layer = l
	return out, nil
}

// devices are the device nodes apt and the maintainer scripts use: bound from this
// machine's /dev into a root while it is being made (a layer holds no device node, so a
// root made from the minbase layer has none), removed with /dev/* afterwards.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// chrootRun runs script inside rootfs, with /proc and the devices mounted for the
// maintainer scripts and unmounted again whatever happens.
func chrootRun(rootfs, script string) error {
	proc := filepath.Join(rootfs, "proc")
	if err := syscall.Mount("proc", proc, "proc", 0, ""); err != nil {
		return fmt.Errorf("mounting /proc in the new root: %w", err)
	}
	defer func() { _ = syscall.Unmount(proc, syscall.MNT_DETACH) }()
	for _, d := range devices {
		target := filepath.Join(rootfs, "dev", d)
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if _, err := os.Lstat(target); err != nil {
			if err := os.WriteFile(target, nil, 0o644); err != nil {
				return err
			}
		}
		if err := syscall.Mount("/dev/"+d, target, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding /dev/%s into the new root: %w", d, err)
		}
		defer func() { _ = syscall.Unmount(target, syscall.MNT_DETACH) }()
	}
	cmd := exec.Command("chroot", rootfs, "/bin/sh", "-c", script)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("chroot %s: %w\n%s", script, err, tail(out))
	}
	return nil
}

// binfmtEntry is the binfmt_misc registration Debian's qemu-user-static ships for goarch.
func binfmtEntry(goarch string) string {
	return "/usr/lib/binfmt.d/qemu-" + qemuArch(goarch) + ".conf"
}

// emulated runs script (with $ROOTFS set) as root of a new user namespace that maps this
// machine's UIDs and GIDs 0-65535 to themselves, with its own mount and PID namespaces
// and its own binfmt_misc instance (the kernel gives each user namespace one since 6.7),
// in which qemu-user-static runs goarch's binaries. Nothing is registered for the rest of
// the machine, and every process the scripts leave behind dies with the namespace's
// first process.
func emulated(goarch, rootfs, script string) error {
	full := `set -e
mount --make-rprivate /
mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
cat "$BINFMT" > /proc/sys/fs/binfmt_misc/register
` + script
	cmd := exec.Command("/bin/sh", "-c", full)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C",
		"ROOTFS=" + rootfs, "BINFMT=" + binfmtEntry(goarch)}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 65536}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 65536}},
		GidMappingsEnableSetgroups: true,
		Pdeathsig:                  syscall.SIGKILL,
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w\n%s", err, tail(out))
	}
	return nil
}

func tail(out []byte) string {
	s := string(out)
	if len(s) > 4000 {
		s = s[len(s)-4000:]
	}
	return s
}

func runLogged(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", name, err, tail(out))
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
// home. Nothing in it depends on the architecture.
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
	return b.entriesLayer(entries)
}

// copyFile copies src's content to dst (replacing a link there).
func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	_ = os.Remove(dst)
	return os.WriteFile(dst, data, 0o644)
}
