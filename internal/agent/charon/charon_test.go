package charon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

func TestPrepareRendersAndExecsCharon(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "strongswan.conf")
	for _, mode := range []gatewayconfig.DataplaneMode{gatewayconfig.DataplaneKernel, gatewayconfig.DataplaneLibipsec} {
		flushed := 0
		var logs []string
		st, err := Prepare(Options{Dataplane: mode, VICISocket: "/run/x/charon.vici", Conf: conf, Binary: "/usr/sbin/charon-systemd",
			FlushXFRM: func() (int, int, error) { flushed++; return 4, 2, nil },
			Logf:      func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) },
		}, []string{"PATH=/bin"})
		if err != nil {
			t.Fatal(err)
		}
		// Kernel IPsec only: libipsec keeps its SAs in charon's memory.
		if want := map[gatewayconfig.DataplaneMode]int{gatewayconfig.DataplaneKernel: 1}[mode]; flushed != want {
			t.Errorf("%s: XFRM flushed %d times, want %d", mode, flushed, want)
		}
		if mode == gatewayconfig.DataplaneKernel && (len(logs) != 1 || !strings.Contains(logs[0], "4 SAs and 2 policies")) {
			t.Errorf("%s: logs %v", mode, logs)
		}
		if st.Path != "/usr/sbin/charon-systemd" || len(st.Argv) != 1 || st.Argv[0] != st.Path {
			t.Errorf("exec %+v", st)
		}
		if strings.Join(st.Env, " ") != "PATH=/bin STRONGSWAN_CONF="+conf {
			t.Errorf("env %v", st.Env)
		}
		b, err := os.ReadFile(conf)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "unix:///run/x/charon.vici") {
			t.Errorf("%s: VICI socket not rendered:\n%s", mode, b)
		}
		if got := strings.Contains(string(b), "kernel-libipsec"); got != (mode == gatewayconfig.DataplaneLibipsec) {
			t.Errorf("%s: kernel-libipsec loaded=%v:\n%s", mode, got, b)
		}
	}
	if _, err := Prepare(Options{Dataplane: "bogus", Conf: conf}, nil); err == nil {
		t.Error("an unknown dataplane was accepted")
	}
}

// Regression (the real node): libipsec needs /dev/net/tun, which the container runtime
// does not provide; the charon role creates it, and only in libipsec mode.
func TestPrepareCreatesTheTUNDevice(t *testing.T) {
	testenv.NeedRoot(t, "creating a device node needs root (CAP_MKNOD)")
	dir := t.TempDir()
	for _, mode := range []gatewayconfig.DataplaneMode{gatewayconfig.DataplaneKernel, gatewayconfig.DataplaneLibipsec} {
		tun := filepath.Join(dir, string(mode), "net", "tun")
		if _, err := Prepare(Options{Dataplane: mode, Conf: filepath.Join(dir, "c.conf"), Binary: "/bin/true", TUNDevice: tun}, nil); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(tun)
		if mode == gatewayconfig.DataplaneKernel {
			if err == nil {
				t.Error("kernel mode created a TUN device")
			}
			continue
		}
		if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			t.Fatalf("no TUN character device at %s: %v", tun, err)
		}
		// A second start finds it and leaves it.
		if _, err := Prepare(Options{Dataplane: mode, Conf: filepath.Join(dir, "c.conf"), Binary: "/bin/true", TUNDevice: tun}, nil); err != nil {
			t.Errorf("second start: %v", err)
		}
	}
}

// TestPreparePrivateDirAndNoLinkFollowed (review L1): with PrivateDir the run directory
// is closed to all but root's group, and a link planted where strongswan.conf goes is
// replaced, not written through.
func TestPreparePrivateDirAndNoLinkFollowed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil { // as kubelet leaves an emptyDir
		t.Fatal(err)
	}
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("untouched"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "strongswan.conf")
	if err := os.Symlink(victim, conf); err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(Options{Dataplane: gatewayconfig.DataplaneLibipsec, VICISocket: filepath.Join(dir, "charon.vici"), Conf: conf,
		Binary: "/usr/sbin/charon-systemd", PrivateDir: true}, nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "untouched" {
		t.Errorf("strongswan.conf was written through the planted link: the victim holds %q", b)
	}
	if fi, err := os.Lstat(conf); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("strongswan.conf is not a regular file: %v %v", fi, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o750 {
		t.Errorf("run directory mode %v, want 0750", fi.Mode().Perm())
	}
}
