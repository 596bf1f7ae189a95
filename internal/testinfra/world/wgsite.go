package world

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// The WireGuard client site: a router on the internet running WireGuard in userspace
// (Debian's wireguard-go, brought up by wg-quick as the client's administrator would),
// and a host on its LAN. Its own addresses, beside the IPsec site's and outside the
// estate's floating IP network (203.0.113.0/24).
const (
	WGSiteNamespace     = "bn-wgsite"
	WGSiteHostNamespace = "bn-wghost"
	WGSiteWANAddress    = "192.0.2.8"
	WGSiteUpstream      = "192.0.2.1"
	WGSiteLAN           = "192.168.20.0/24"
	WGSiteLANGateway    = "192.168.20.1"
	WGSiteHostAddress   = "192.168.20.5"
	WGSiteHostPort      = "8443"
	WGSiteHostBody      = "client wiki at 192.168.20.5"
	// WGSiteListenPort is the client's own WireGuard port, the peer's endpoint port.
	WGSiteListenPort = 51820
	// WGSiteInterface is the client's WireGuard interface (wg-quick names it after the
	// configuration file).
	WGSiteInterface = "wgplat"
)

// WGSite is the running WireGuard client site.
type WGSite struct {
	w   *World
	dir string
	// Key is the client's private key; its public key goes into the gateway's peer.
	Key     wgtypes.Key
	servers []*HTTPSServer
}

// StartWireGuardSite builds the WireGuard client site: namespaces, addresses, the LAN
// host's HTTPS service and the client's key pair; no tunnel until Up.
func (w *World) StartWireGuardSite(ctx context.Context) (*WGSite, error) {
	s := &WGSite{w: w, dir: filepath.Join(w.dir, "wgsite")}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, err
	}
	w.onDown(s.stop)
	var err error
	if s.Key, err = wgtypes.GeneratePrivateKey(); err != nil {
		return nil, err
	}
	srv, err := w.plugSite(siteNet{ns: WGSiteNamespace, hostNS: WGSiteHostNamespace, wan: WGSiteWANAddress, upstream: WGSiteUpstream,
		lanGateway: WGSiteLANGateway, host: WGSiteHostAddress, port: WGSiteHostPort, body: WGSiteHostBody})
	if err != nil {
		return nil, err
	}
	s.servers = append(s.servers, srv)
	return s, nil
}

// Up writes the client's wg-quick configuration from conf (what `kubectl vpn peer-config
// --format wireguard` printed, its private key placeholder filled in) and brings it up
// with wg-quick in the site's namespace, in userspace (wireguard-go: this kernel has no
// WireGuard). A configuration already up is taken down first.
func (s *WGSite) Up(conf string) error {
	const placeholder = "<this device's private key>"
	if !strings.Contains(conf, placeholder) {
		return fmt.Errorf("the peer configuration has no private key placeholder:\n%s", conf)
	}
	conf = strings.Replace(conf, placeholder, s.Key.String(), 1)
	f := filepath.Join(s.dir, WGSiteInterface+".conf")
	if err := os.WriteFile(f, []byte(conf), 0o600); err != nil {
		return err
	}
	_ = s.down()
	out, err := s.wgQuick("up", f)
	if err != nil {
		return fmt.Errorf("wg-quick up: %w\n%s", err, out)
	}
	return nil
}

// Show is `wg show` of the client's interface.
func (s *WGSite) Show() (string, error) {
	return Exec(WGSiteNamespace, "wg", "show", WGSiteInterface)
}

func (s *WGSite) wgQuick(verb, file string) (string, error) {
	cmd := exec.Command("ip", "netns", "exec", WGSiteNamespace, "wg-quick", verb, file)
	cmd.Env = append(os.Environ(), "WG_QUICK_USERSPACE_IMPLEMENTATION=wireguard-go")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// down takes the client's interface down with wg-quick; wireguard-go exits with its
// interface.
func (s *WGSite) down() error {
	f := filepath.Join(s.dir, WGSiteInterface+".conf")
	if _, err := Exec(WGSiteNamespace, "ip", "link", "show", WGSiteInterface); err != nil {
		return nil
	}
	if out, err := s.wgQuick("down", f); err != nil {
		return fmt.Errorf("wg-quick down: %w\n%s", err, out)
	}
	return nil
}

func (s *WGSite) stop() error {
	for _, srv := range s.servers {
		_ = srv.Close()
	}
	err := s.down()
	for _, ns := range []string{WGSiteHostNamespace, WGSiteNamespace} {
		if _, serr := os.Stat(filepath.Join("/var/run/netns", ns)); serr == nil {
			_, _ = Exec("", "ip", "netns", "del", ns)
		}
	}
	return err
}

// KubectlVPN runs the kubectl-vpn plugin (built from cmd/kubectl-vpn into the world's
// directory on first use) against the world's cluster, as a platform engineer runs
// `kubectl vpn`, with env added to this process's environment.
func (w *World) KubectlVPN(ctx context.Context, env []string, args ...string) (string, error) {
	bin := filepath.Join(w.dir, "kubectl-vpn")
	if _, err := os.Stat(bin); err != nil {
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/kubectl-vpn")
		build.Dir = w.opts.Repo
		if out, err := build.CombinedOutput(); err != nil {
			return "", fmt.Errorf("building cmd/kubectl-vpn: %w\n%s", err, out)
		}
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", w.KubeConfig}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl vpn %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}
