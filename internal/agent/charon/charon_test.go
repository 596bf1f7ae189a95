package charon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
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
