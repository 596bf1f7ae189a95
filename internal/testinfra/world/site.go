package world

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The client site, as the client's IT runs it: a gateway on the internet with its own
// strongSwan, and a host on its LAN. Addresses match examples/ipsecgateway.yaml: the
// tunnel's peer is 198.51.100.7 with the subnet 192.168.10.0/24, and the reverse exposure
// "erp" is the host 192.168.10.5:8443.
const (
	SiteNamespace     = "bn-site"
	SiteHostNamespace = "bn-chost"
	SiteWANAddress    = "198.51.100.7"
	SiteUpstream      = "198.51.100.1"
	SiteLAN           = "192.168.10.0/24"
	SiteLANGateway    = "192.168.10.1"
	SiteHostAddress   = "192.168.10.5"
	SiteHostPort      = "8443"
	SiteHostBody      = "client erp at 192.168.10.5"
)

// The service clusters' hosts: the exposure targets of examples/ipsecgateway.yaml.
const (
	ServiceHostNamespace = "bn-svc"
	ServiceHostNetwork   = "shoot--services--svc01"
	ServiceHostAddress   = "10.251.0.20"
	ServiceHostBody      = "svc01 portal at 10.251.0.20"
	DirectoryNamespace   = "bn-vpn01"
	DirectoryNetwork     = "shoot--services--vpn01"
	DirectoryAddress     = "10.250.0.21"
	DirectoryBody        = "vpn01 directory at 10.250.0.21"
)

// clientStrongswanConf is the client's own daemon configuration, written by hand: its
// kernel has no ESP either, so it runs libipsec too.
const clientStrongswanConf = `charon {
  load = random nonce openssl pem pkcs1 x509 kdf vici kernel-libipsec kernel-netlink socket-default
  plugins {
    vici {
      socket = unix://%s
    }
  }
  filelog {
    main {
      path = %s
      time_format = %%H:%%M:%%S
      flush_line = yes
      default = 1
    }
  }
}
`

// clientConnection is one of the client's tunnels to the platform, written by hand from
// what the platform team hands over: the gateway's floating IP (its IKE identity too), the
// gateway's service CIDR, and the pre-shared key. The client only answers; the gateway
// initiates.
const clientConnection = `  %[1]s {
    version = 2
    local_addrs = 198.51.100.7
    remote_addrs = %[2]s
    proposals = aes256gcm16-prfsha384-ecp384
    dpd_delay = 10s
    local {
      auth = psk
      id = 198.51.100.7
    }
    remote {
      auth = psk
      id = %[2]s
    }
    children {
      %[1]s {
        local_ts = 192.168.10.0/24
        remote_ts = %[3]s
        esp_proposals = aes256gcm16-ecp384
        dpd_action = clear
      }
    }
  }
`

// clientSecret is the pre-shared key of one connection.
const clientSecret = `  ike-%[1]s {
    id-a = 198.51.100.7
    id-b = %[2]s
    secret = "%[3]s"
  }
`

// SitePeer is one gateway the client site has a tunnel to.
type SitePeer struct {
	// Name names the connection and its child (Configure's is "platform").
	Name                         string
	FloatingIP, ServiceCIDR, PSK string
}

// Site is the running client site.
type Site struct {
	w       *World
	dir     string
	charon  *exec.Cmd
	done    chan struct{}
	servers []*HTTPSServer
}

// StartSite builds the client site: namespaces, addresses, its own guard, the host's
// HTTPS service, and charon (with no connection until Configure).
func (w *World) StartSite(ctx context.Context) (*Site, error) {
	s := &Site{w: w, dir: filepath.Join(w.dir, "site")}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, err
	}
	w.onDown(s.stop)
	srv, err := w.plugSite(siteNet{ns: SiteNamespace, hostNS: SiteHostNamespace, wan: SiteWANAddress, upstream: SiteUpstream,
		lanGateway: SiteLANGateway, host: SiteHostAddress, port: SiteHostPort, body: SiteHostBody})
	if err != nil {
		return nil, err
	}
	s.servers = append(s.servers, srv)

	sock := filepath.Join(s.dir, "charon.vici")
	conf := filepath.Join(s.dir, "strongswan.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(clientStrongswanConf, sock, filepath.Join(s.dir, "charon.log"))), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(s.dir, "charon.stdout"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("ip", "netns", "exec", SiteNamespace, "charon-systemd")
	cmd.Env = append(os.Environ(), "STRONGSWAN_CONF="+conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	s.charon, s.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(s.done) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := s.Swanctl("--stats"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the client's charon does not answer; log %s", filepath.Join(s.dir, "charon.log"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return s, nil
}

// Swanctl runs swanctl against the client's charon.
func (s *Site) Swanctl(args ...string) (string, error) {
	return Exec(SiteNamespace, append([]string{"swanctl"}, append(args, "--uri", "unix://"+filepath.Join(s.dir, "charon.vici"))...)...)
}

// Configure loads the client's tunnel "platform": the gateway's floating IP and service
// CIDR, and the pre-shared key.
func (s *Site) Configure(floatingIP, serviceCIDR, psk string) error {
	return s.ConfigurePeers([]SitePeer{{Name: "platform", FloatingIP: floatingIP, ServiceCIDR: serviceCIDR, PSK: psk}})
}

// ConfigurePeers loads the client's tunnels, one per gateway, replacing those loaded
// before.
func (s *Site) ConfigurePeers(peers []SitePeer) error {
	var conns, secrets strings.Builder
	for _, p := range peers {
		fmt.Fprintf(&conns, clientConnection, p.Name, p.FloatingIP, p.ServiceCIDR)
		fmt.Fprintf(&secrets, clientSecret, p.Name, p.FloatingIP, p.PSK)
	}
	f := filepath.Join(s.dir, "swanctl.conf")
	conf := "connections {\n" + conns.String() + "}\nsecrets {\n" + secrets.String() + "}\n"
	if err := os.WriteFile(f, []byte(conf), 0o600); err != nil {
		return err
	}
	if _, err := s.Swanctl("--load-creds", "--noprompt", "--file", f); err != nil {
		return err
	}
	_, err := s.Swanctl("--load-conns", "--file", f)
	return err
}

// Log is the client charon's log.
func (s *Site) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "charon.log"))
	return string(b)
}

func (s *Site) stop() error {
	for _, srv := range s.servers {
		_ = srv.Close()
	}
	if s.charon != nil {
		_ = s.charon.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			_ = s.charon.Process.Kill()
			<-s.done
		}
	}
	for _, ns := range []string{SiteHostNamespace, SiteNamespace} {
		if _, err := os.Stat(filepath.Join("/var/run/netns", ns)); err == nil {
			_, _ = Exec("", "ip", "netns", "del", ns)
		}
	}
	return nil
}

// StartServiceHosts plugs the exposure targets into their networks and serves HTTPS on
// them: the portal in the service cluster svc01 (10.251.0.20:443) and the directory in
// the gateway cluster's own node network (10.250.0.21:636).
func (w *World) StartServiceHosts() error {
	hosts := []struct{ ns, network, addr, port, body string }{
		{ServiceHostNamespace, ServiceHostNetwork, ServiceHostAddress, "443", ServiceHostBody},
		{DirectoryNamespace, DirectoryNetwork, DirectoryAddress, "636", DirectoryBody},
	}
	for _, h := range hosts {
		ns := h.ns
		w.onDown(func() error {
			if _, err := os.Stat(filepath.Join("/var/run/netns", ns)); err == nil {
				_, err = Exec("", "ip", "netns", "del", ns)
				return err
			}
			return nil
		})
		if _, err := Exec("", "ip", "netns", "add", ns); err != nil {
			return err
		}
		if _, err := Exec(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"); err != nil {
			return err
		}
		if _, err := Exec("", "ip", "-n", ns, "link", "set", "lo", "up"); err != nil {
			return err
		}
		if err := w.Fabric.PlugHost(h.network, ns, "eth0", h.addr+"/16"); err != nil {
			return err
		}
		srv, err := ServeHTTPS(ns, h.addr+":"+h.port, h.body)
		if err != nil {
			return err
		}
		w.onDown(srv.Close)
	}
	return nil
}

func nftIn(ns, rules string) error {
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft in %s: %w: %s", ns, err, out)
	}
	return nil
}

// siteNet is a client site's network: its router's namespace on the internet (wan, via
// upstream) and its LAN host's namespace behind lanGateway, serving HTTPS.
type siteNet struct {
	ns, hostNS, wan, upstream, lanGateway, host, port, body string
}

// plugSite builds a client site's network: both namespaces, the router's uplink and the
// LAN, the client's own fail-closed rule (its LAN's traffic to the platform's service
// CIDRs never leaves the WAN in the clear, so captures on the public segment measure the
// platform's side only), and the host's HTTPS service.
func (w *World) plugSite(n siteNet) (*HTTPSServer, error) {
	for _, ns := range []string{n.ns, n.hostNS} {
		if _, err := Exec("", "ip", "netns", "add", ns); err != nil {
			return nil, err
		}
		if _, err := Exec(ns, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.disable_ipv6=1"); err != nil {
			return nil, err
		}
		if _, err := Exec("", "ip", "-n", ns, "link", "set", "lo", "up"); err != nil {
			return nil, err
		}
	}
	if err := w.Fabric.PlugUpstream(n.ns, "wan0", n.wan+"/24", n.upstream+"/24"); err != nil {
		return nil, err
	}
	for _, args := range [][]string{
		{"ip", "link", "add", "lan0", "netns", n.ns, "type", "veth", "peer", "name", "eth0", "netns", n.hostNS},
		{"ip", "-n", n.ns, "addr", "add", n.lanGateway + "/24", "dev", "lan0"},
		{"ip", "-n", n.ns, "link", "set", "lan0", "up"},
		{"ip", "-n", n.hostNS, "addr", "add", n.host + "/24", "dev", "eth0"},
		{"ip", "-n", n.hostNS, "link", "set", "eth0", "up"},
		{"ip", "-n", n.hostNS, "route", "add", "default", "via", n.lanGateway},
	} {
		if _, err := Exec("", args...); err != nil {
			return nil, err
		}
	}
	if err := nftIn(n.ns, `table ip site_guard {
  chain forward {
    type filter hook forward priority filter; policy accept;
    oifname "wan0" ip daddr 100.64.0.0/10 counter drop
  }
}`); err != nil {
		return nil, err
	}
	return ServeHTTPS(n.hostNS, n.host+":"+n.port, n.body)
}
