package gatewayconfig

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	govici "github.com/strongswan/govici/vici"

	"bnerd.net/vpn-operator/internal/cryptofloor"
)

// requireDataplaneEnv is testenv.RequireDataplaneEnv, repeated so that this package's
// test binary (which the fuzzer instruments as a whole) does not link the control-plane
// test environment.
const requireDataplaneEnv = "BNERD_REQUIRE_DATAPLANE"

// charon is a strongSwan daemon of this test process, in a network namespace of its own
// (nothing it might try to send leaves it), reached over its own VICI socket. The
// rendered configuration is loaded into it with strongSwan's own swanctl, so the file
// goes through libstrongswan's settings parser and charon's checks, not only ours.
type charon struct {
	dir    string
	socket string
	cmd    *exec.Cmd
	exited chan struct{}
}

// startCharon starts a charon for the test, or reports why it cannot: it needs root
// (a network namespace) and strongSwan's packages. Under BNERD_REQUIRE_DATAPLANE=1 a
// missing prerequisite fails the test; otherwise the caller runs without it.
func startCharon(tb testing.TB) (*charon, string) {
	tb.Helper()
	why := ""
	switch {
	case testing.Short():
		// testenv.UnitTierPrefix, repeated for the reason above.
		why = "the unit tier (go test -short, make unit) needs no root, and this check does (a network namespace)"
	case os.Geteuid() != 0:
		why = "needs root for a network namespace"
	}
	for _, bin := range []string{"charon-systemd", "swanctl", "unshare"} {
		if _, err := exec.LookPath(bin); err != nil && why == "" {
			why = "needs " + bin + " (Debian packages charon-systemd, strongswan-swanctl; hack/install-deps.sh)"
		}
	}
	if why != "" {
		if os.Getenv(requireDataplaneEnv) == "1" {
			tb.Fatalf("strongSwan check: %s (and %s=1 requires it)", why, requireDataplaneEnv)
		}
		return nil, why
	}
	dir, err := os.MkdirTemp("", "bn-charon-")
	if err != nil {
		tb.Fatal(err)
	}
	c := &charon{dir: dir, socket: filepath.Join(dir, "charon.vici"), exited: make(chan struct{})}
	conf := fmt.Sprintf(`charon-systemd {
  load = random nonce openssl pem pkcs1 x509 kdf vici kernel-netlink socket-default
  port = 0
  port_nat_t = 0
  install_routes = no
  plugins {
    vici {
      socket = unix://%s
    }
  }
  journal {
    default = -1
  }
  filelog {
    main {
      path = %s
      default = 1
    }
  }
}
`, c.socket, filepath.Join(dir, "charon.log"))
	if err := os.WriteFile(filepath.Join(dir, "strongswan.conf"), []byte(conf), 0o600); err != nil {
		tb.Fatal(err)
	}
	// swanctl looks for credentials beside the file it loads; empty directories keep its
	// output to what it did with the configuration.
	for _, d := range []string{"x509", "x509ca", "x509ocsp", "x509aa", "x509ac", "x509crl", "pubkey", "private", "rsa", "ecdsa", "bliss", "pkcs8", "pkcs12"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			tb.Fatal(err)
		}
	}
	c.cmd = exec.Command("unshare", "--net", "charon-systemd")
	c.cmd.Env = append(os.Environ(), "STRONGSWAN_CONF="+filepath.Join(dir, "strongswan.conf"))
	c.cmd.Dir = dir
	// The daemon dies with this process even if it is killed (a fuzz worker can be):
	// the parent-death signal is tied to the thread that started it, which is kept.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives as long as the daemon
		started <- c.cmd.Start()
		if c.cmd.Process != nil {
			_ = c.cmd.Wait()
		}
		close(c.exited)
	}()
	if err := <-started; err != nil {
		tb.Fatalf("starting charon: %v", err)
	}
	tb.Cleanup(c.stop)
	deadline := time.Now().Add(30 * time.Second) // a generous bound for the socket
	for {
		if _, err := os.Stat(c.socket); err == nil {
			break
		}
		select {
		case <-c.exited:
			log, _ := os.ReadFile(filepath.Join(dir, "charon.log"))
			tb.Fatalf("charon exited at start:\n%s", log)
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatal("charon's VICI socket never appeared")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c, ""
}

func (c *charon) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
	_ = os.RemoveAll(c.dir)
}

// loaded is what charon holds after a load: connections with their children and remote
// identity, and the IDs of the shared keys.
type loaded struct {
	conns  map[string]loadedConn
	shared []string
}

type loadedConn struct {
	children []string
	remoteID string
}

// load runs `swanctl --load-all` on text as the only configuration (connections and
// secrets of earlier loads are unloaded), and returns swanctl's output and what charon
// then holds.
func (c *charon) load(text string) (string, *loaded, error) {
	path := filepath.Join(c.dir, "swanctl.conf")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return "", nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "swanctl", "--load-all", "--noprompt", "--uri", "unix://"+c.socket, "--file", path).CombinedOutput()
	if err != nil {
		return string(out), nil, fmt.Errorf("swanctl --load-all: %w", err)
	}
	s, err := govici.NewSession(govici.WithSocketPath(c.socket))
	if err != nil {
		return string(out), nil, err
	}
	defer s.Close()
	l := &loaded{conns: map[string]loadedConn{}}
	// The names from get-conns, a plain request. The details come from list-conns, a
	// streamed one, asked per connection and repeated when the event went missing:
	// govici v0.8.0 can end a stream before delivering its last events (it selects at
	// random between the queued events and the final reply).
	gc, err := s.Call(ctx, "get-conns", nil)
	if err != nil {
		return string(out), nil, err
	}
	names, _ := gc.Get("conns").([]string)
	for _, name := range names {
		req := govici.NewMessage()
		_ = req.Set("ike", name)
		var conn *govici.Message
		for attempt := 0; conn == nil && attempt < 50; attempt++ {
			for m, err := range s.CallStreaming(ctx, "list-conns", "list-conn", req) {
				if err != nil {
					return string(out), nil, err
				}
				if c, ok := m.Get(name).(*govici.Message); ok {
					conn = c
				}
			}
		}
		if conn == nil {
			return string(out), nil, fmt.Errorf("list-conns never returned connection %q", name)
		}
		var lc loadedConn
		if ch, ok := conn.Get("children").(*govici.Message); ok {
			lc.children = ch.Keys()
			sort.Strings(lc.children)
		}
		if r, ok := conn.Get("remote-1").(*govici.Message); ok {
			lc.remoteID, _ = r.Get("id").(string)
		}
		l.conns[name] = lc
	}
	sh, err := s.Call(ctx, "get-shared", nil)
	if err != nil {
		return string(out), nil, err
	}
	l.shared, _ = sh.Get("keys").([]string)
	sort.Strings(l.shared)
	return string(out), l, nil
}

// checkWithCharon loads cfg's rendering (and, when given, its secrets) into charon and
// checks that strongSwan parsed the file and holds exactly the rendered connections,
// children, remote identities and keys. Every algorithm the crypto floor admits is one
// strongSwan knows (TestEveryAllowedAlgorithmLoadsIntoCharon), so any refusal of an
// accepted configuration is a failure.
func checkWithCharon(t *testing.T, c *charon, cfg *Config, swanctl, secrets string) {
	t.Helper()
	out, got, err := c.load(swanctl + "\n" + secrets)
	if err != nil {
		t.Fatalf("strongSwan refused the rendering: %v\n%s\n%s", err, out, swanctl)
	}
	if len(got.conns) != len(cfg.Tunnels) {
		t.Fatalf("strongSwan loaded %d connections from %d tunnels: %v\n%s", len(got.conns), len(cfg.Tunnels), got.conns, swanctl)
	}
	for _, tun := range cfg.Tunnels {
		lc, ok := got.conns[tun.Name]
		if !ok {
			t.Fatalf("strongSwan has no connection %q: %v\n%s", tun.Name, got.conns, swanctl)
		}
		want := []string{tun.Name, tun.Name + FailClosedChildSuffix}
		sort.Strings(want)
		if strings.Join(lc.children, ",") != strings.Join(want, ",") {
			t.Fatalf("connection %s: children %v, want %v\n%s", tun.Name, lc.children, want, swanctl)
		}
		wantID := tun.PeerID
		if wantID == "" {
			wantID = tun.PeerAddress
		}
		// A colon makes strongSwan read a typed identity ("keyid:...", an IPv6
		// address) and print it its own way; anything else must arrive unchanged.
		if lc.remoteID != wantID && !strings.Contains(wantID, ":") {
			t.Fatalf("connection %s: strongSwan's remote identity %q, rendered %q\n%s", tun.Name, lc.remoteID, wantID, swanctl)
		}
	}
	if secrets != "" {
		var want []string
		for _, tun := range cfg.Tunnels {
			want = append(want, SecretSectionPrefix+tun.Name)
		}
		sort.Strings(want)
		if strings.Join(got.shared, ",") != strings.Join(want, ",") {
			t.Fatalf("strongSwan holds keys %v, want %v", got.shared, want)
		}
	}
}

// Every token the crypto floor admits is an algorithm this strongSwan knows: a
// proposal built around each one loads into charon, in its IKE and its ESP role. A
// proposal naming an algorithm strongSwan does not know is refused by charon, so the
// check above cannot pass by accident.
func TestEveryAllowedAlgorithmLoadsIntoCharon(t *testing.T) {
	c, why := startCharon(t)
	if c == nil {
		t.Skip(why)
	}
	in := sampleInput()
	in.Spec.Tunnels = in.Spec.Tunnels[:1]
	in.Spec.ReverseExposures = in.Spec.ReverseExposures[:1]
	var ike, esp []string
	for _, a := range cryptofloor.AEAD {
		ike = append(ike, a+"-prfsha256-ecp256")
		esp = append(esp, a)
	}
	for _, a := range cryptofloor.Cipher {
		ike = append(ike, a+"-sha256-ecp256")
		esp = append(esp, a+"-sha256")
	}
	for _, a := range cryptofloor.Integrity {
		ike = append(ike, "aes256-"+a+"-ecp256")
		esp = append(esp, "aes256-"+a)
	}
	for _, a := range cryptofloor.PRF {
		ike = append(ike, "aes256gcm16-"+a+"-ecp256")
	}
	for _, a := range cryptofloor.DH {
		ike = append(ike, "aes256-sha256-"+a)
		esp = append(esp, "aes256gcm16-"+a)
	}
	for _, a := range cryptofloor.ESN {
		esp = append(esp, "aes256gcm16-"+a)
	}
	tested := 0
	for i := 0; i < len(ike) || i < len(esp); i += 8 {
		// Eight proposals at a time: the API's limit per list.
		in.Spec.Tunnels[0].IKE.Proposals = window(ike, i)
		in.Spec.Tunnels[0].ESP.Proposals = window(esp, i)
		cfg, err := Build(in)
		if err != nil {
			t.Fatal(err)
		}
		text, err := RenderSwanctl(cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkWithCharon(t, c, cfg, text, "")
		tested += len(in.Spec.Tunnels[0].IKE.Proposals) + len(in.Spec.Tunnels[0].ESP.Proposals)
	}
	if tested != len(ike)+len(esp) {
		t.Fatalf("tested %d of %d proposals", tested, len(ike)+len(esp))
	}
	// The negative control: charon does refuse a name it does not know.
	bad := "connections { x { version = 2\n remote_addrs = 198.51.100.7\n proposals = nosuchcipher-sha256-modp2048\n local { auth = psk }\n remote { auth = psk }\n children { x { remote_ts = 10.0.0.0/24 } } } }\n"
	if out, _, err := c.load(bad); err == nil || !strings.Contains(out, "invalid value for: proposals") {
		t.Fatalf("charon accepted an unknown algorithm: %v\n%s", err, out)
	}
}

func window(list []string, i int) []string {
	if len(list) == 0 {
		return nil
	}
	i %= len(list)
	j := min(i+8, len(list))
	return list[i:j]
}

// The golden rendering and secrets load into a real charon exactly as rendered.
func TestRenderingLoadsIntoCharon(t *testing.T) {
	c, why := startCharon(t)
	if c == nil {
		t.Skip(why)
	}
	cfg := mustBuild(t)
	text, err := RenderSwanctl(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := RenderSecrets(cfg, map[string]string{"hq": "k1 of twenty bytes or more", "branch": "k2 of twenty bytes or more"})
	if err != nil {
		t.Fatal(err)
	}
	checkWithCharon(t, c, cfg, text, sec)
	// And the comparison has teeth: a key smuggled into the rendering reaches charon.
	_, got, err := c.load(strings.Replace(text, `id = "vpn.acme.example"`, `id = "vpn.acme.example"`+"\n      id = smuggled", 1))
	if err != nil {
		t.Fatal(err)
	}
	if id := got.conns["hq"].remoteID; id != "smuggled" {
		t.Fatalf("charon read the remote identity %q; an injected key would not be seen", id)
	}
}
