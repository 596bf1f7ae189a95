package vici

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	govici "github.com/strongswan/govici/vici"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// TestLoaderEndsAnSAOnTheWrongPath runs two real charons in network namespaces joined by
// two links. The gateway's IKE SA first comes up over the wrong one (as it would over the
// pod network if charon initiated before the port's routing existed); once the loader
// knows the port's address, it ends that SA and initiates again, and the new SA runs from
// the port's address over the right link.
func TestLoaderEndsAnSAOnTheWrongPath(t *testing.T) {
	testenv.NeedRoot(t, "needs root (network namespaces, charon)")
	for _, b := range []string{"charon-systemd", "ip"} {
		if _, err := exec.LookPath(b); err != nil {
			testenv.SkipDataplane(t, "needs "+b+" (hack/install-deps.sh)")
		}
	}
	if _, err := os.Stat("/usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so"); err != nil {
		testenv.SkipDataplane(t, "needs strongSwan's kernel-libipsec plugin (libcharon-extra-plugins)")
	}
	dir := t.TempDir()
	suffix := fmt.Sprintf("%d", os.Getpid()%100000)
	g, p := "bn-vlg-"+suffix, "bn-vlp-"+suffix
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	for _, ns := range []string{g, p} {
		run("ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		run("ip", "-n", ns, "link", "set", "lo", "up")
	}
	// "net1": the port's link (10.9.1.0/24); "eth0": the pod network (10.9.2.0/24). The
	// peer's address 10.9.9.9 is reachable over both.
	run("ip", "link", "add", "net1", "netns", g, "type", "veth", "peer", "name", "via-a", "netns", p)
	run("ip", "link", "add", "eth0", "netns", g, "type", "veth", "peer", "name", "via-b", "netns", p)
	for _, c := range [][]string{
		{"ip", "-n", g, "addr", "add", "10.9.1.2/24", "dev", "net1"}, {"ip", "-n", g, "link", "set", "net1", "up"},
		{"ip", "-n", g, "addr", "add", "10.9.2.2/24", "dev", "eth0"}, {"ip", "-n", g, "link", "set", "eth0", "up"},
		{"ip", "-n", p, "addr", "add", "10.9.1.1/24", "dev", "via-a"}, {"ip", "-n", p, "link", "set", "via-a", "up"},
		{"ip", "-n", p, "addr", "add", "10.9.2.1/24", "dev", "via-b"}, {"ip", "-n", p, "link", "set", "via-b", "up"},
		{"ip", "-n", p, "addr", "add", "10.9.9.9/32", "dev", "lo"},
		{"ip", "-n", g, "route", "add", "10.9.9.9/32", "via", "10.9.2.1"}, // the wrong path first
	} {
		run(c...)
	}
	charon := func(ns, name string) string {
		t.Helper()
		sock := filepath.Join(dir, name+".vici")
		conf, err := gatewayconfig.RenderStrongswanConf(gatewayconfig.StrongswanOptions{Mode: gatewayconfig.DataplaneLibipsec, VICISocket: sock, LogFile: filepath.Join(dir, name+".log")})
		if err != nil {
			t.Fatal(err)
		}
		cf := filepath.Join(dir, name+".conf")
		if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("ip", "netns", "exec", ns, "charon-systemd")
		cmd.Env = append(os.Environ(), "STRONGSWAN_CONF="+cf)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
		for i := 0; i < 200; i++ {
			if s, err := govici.NewSession(govici.WithSocketPath(sock)); err == nil {
				s.Close()
				return sock
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("charon %s does not answer", name)
		return ""
	}
	gsock, psock := charon(g, "gateway"), charon(p, "peer")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const psk = "wrong-path-test-key-0123456789"
	secrets := fmt.Sprintf("secrets {\n  ike-t {\n    id-1 = gw\n    id-2 = peer\n    secret = %q\n  }\n}\n", psk)
	peer := &Syncer{Socket: psock}
	if _, err := peer.Apply(ctx, `connections {
  t {
    version = 2
    remote_addrs = %any
    local {
      auth = psk
      id = peer
    }
    remote {
      auth = psk
      id = gw
    }
    children {
      t {
        local_ts = 10.99.0.0/24
        remote_ts = 10.98.0.0/24
      }
    }
  }
}
`, secrets); err != nil {
		t.Fatalf("loading the peer: %v", err)
	}
	// The peer only answers; the gateway initiates.
	// Without MOBIKE: with it, charon may move the SA to the new path by itself when the
	// routes change (a race this test must not depend on); the loader's rule is for the
	// SAs it does not move.
	gwConf := `connections {
  t {
    version = 2
    mobike = no
    local_addrs = %any
    remote_addrs = 10.9.9.9
    local {
      auth = psk
      id = gw
    }
    remote {
      auth = psk
      id = peer
    }
    children {
      t {
        local_ts = 10.98.0.0/24
        remote_ts = 10.99.0.0/24
        start_action = start
      }
    }
  }
}
`
	gw := &Syncer{Socket: gsock, Logf: t.Logf}
	localHost := func() string {
		s, err := govici.NewSession(govici.WithSocketPath(gsock))
		if err != nil {
			return ""
		}
		defer s.Close()
		sas, err := ListSAs(ctx, s)
		if err != nil {
			return ""
		}
		for _, sa := range sas["t"] {
			if sa.State == "ESTABLISHED" {
				return sa.LocalHost
			}
		}
		return ""
	}
	waitHost := func(want string) {
		t.Helper()
		for i := 0; i < 300; i++ {
			if localHost() == want {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("no established SA from %s (have %q); logs in %s", want, localHost(), dir)
	}
	if _, err := gw.Apply(ctx, gwConf, secrets); err != nil {
		t.Fatal(err)
	}
	waitHost("10.9.2.2")

	// The routing is now right, and the loader learns the port's address.
	run("ip", "-n", g, "route", "replace", "10.9.9.9/32", "via", "10.9.1.1")
	gw.SetLocalAddress("10.9.1.2")
	res, err := gw.Apply(ctx, gwConf, secrets)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(res.Terminated, ",") != "t" || strings.Join(res.Initiated, ",") != "t" {
		t.Fatalf("terminated %v, initiated %v: want the wrong-path SA ended and initiated again", res.Terminated, res.Initiated)
	}
	waitHost("10.9.1.2")
	// Converged: a further round changes nothing.
	res, err = gw.Apply(ctx, gwConf, secrets)
	if err != nil || len(res.Terminated)+len(res.Initiated)+len(res.Loaded) != 0 {
		t.Errorf("second round %+v, %v: want nothing to do", res, err)
	}
}
