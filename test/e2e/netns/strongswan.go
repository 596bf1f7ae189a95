package netns

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// Sock is the VICI socket of role's charon: <Dir>/<role>/charon.vici, unless Sockets
// names another.
func (e *Env) Sock(role string) string {
	if s, ok := e.Sockets[role]; ok {
		return s
	}
	return filepath.Join(e.Dir, role, "charon.vici")
}

// Swanctl runs swanctl in role's namespace against role's charon.
func (e *Env) Swanctl(role string, args ...string) (string, error) {
	return e.Sh(e.NS(role), append(append([]string{"swanctl"}, args...), "--uri", "unix://"+e.Sock(role))...)
}

// StartCharon runs charon-systemd (process "charon-<role>") in role's namespace with a
// strongswan.conf from the production renderer for mode (<Dir>/<role>/strongswan.conf,
// logging to <Dir>/<role>/charon.log, CharonLog), and waits until it answers on its
// socket. A socket left by a charon that was killed is removed first, so the wait sees
// the new one.
func (e *Env) StartCharon(role string, mode gatewayconfig.DataplaneMode) {
	e.T.Helper()
	d := filepath.Join(e.Dir, role)
	_ = os.MkdirAll(d, 0o755)
	_ = os.Remove(e.Sock(role))
	conf, err := gatewayconfig.RenderStrongswanConf(gatewayconfig.StrongswanOptions{Mode: mode, VICISocket: e.Sock(role), LogFile: filepath.Join(d, "charon.log")})
	if err != nil {
		e.T.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "strongswan.conf"), []byte(conf), 0o644); err != nil {
		e.T.Fatal(err)
	}
	e.Start("charon-"+role, e.NS(role), []string{"STRONGSWAN_CONF=" + filepath.Join(d, "strongswan.conf")}, "charon-systemd")
	e.WaitCharon(role)
}

// WaitCharon waits until role's charon answers on its socket.
func (e *Env) WaitCharon(role string) {
	e.T.Helper()
	e.Eventually("charon in "+role+" answers", func() bool { _, err := e.Swanctl(role, "--stats"); return err == nil })
}

// CharonLog is the log file of role's charon started by StartCharon so far (charon-systemd
// itself writes little to its output).
func (e *Env) CharonLog(role string) string {
	b, _ := os.ReadFile(filepath.Join(e.Dir, role, "charon.log"))
	return string(b)
}

// SiteSwanctl is a client site's own strongSwan configuration (swanctl.conf), written by
// hand as the site's administrator would: one IKEv2 connection with pre-shared keys and
// one child, under the same name, and its secret. The suites' sites differ only in these
// fields; String renders them in one fixed layout.
type SiteSwanctl struct {
	// Name is the connection's and its child's name (default "gw"); the secret is
	// "ike-<Name>".
	Name                    string
	LocalAddrs, RemoteAddrs string
	// LocalID and RemoteID are the IKE identities, also the secret's id-a and id-b.
	LocalID, RemoteID string
	LocalTS, RemoteTS string
	// IKE and ESP are the proposals and esp_proposals.
	IKE, ESP string
	PSK      string
	// Encap forces UDP encapsulation (encap = yes), as the gateway does.
	Encap bool
	// UniqueReplace (unique = replace): a new IKE SA with the gateway replaces the old one.
	UniqueReplace bool
	// DPDDelay is the connection's dpd_delay, DPDAction the child's dpd_action (empty:
	// strongSwan's defaults, no line).
	DPDDelay, DPDAction string
}

// String is the swanctl.conf text.
func (s SiteSwanctl) String() string {
	name := s.Name
	if name == "" {
		name = "gw"
	}
	var b strings.Builder
	line := func(indent int, format string, a ...any) {
		b.WriteString(strings.Repeat("  ", indent))
		fmt.Fprintf(&b, format, a...)
		b.WriteString("\n")
	}
	line(0, "connections {")
	line(1, "%s {", name)
	line(2, "version = 2")
	line(2, "local_addrs = %s", s.LocalAddrs)
	line(2, "remote_addrs = %s", s.RemoteAddrs)
	if s.Encap {
		line(2, "encap = yes")
	}
	if s.UniqueReplace {
		line(2, "unique = replace")
	}
	line(2, "proposals = %s", s.IKE)
	if s.DPDDelay != "" {
		line(2, "dpd_delay = %s", s.DPDDelay)
	}
	for _, side := range []struct{ name, id string }{{"local", s.LocalID}, {"remote", s.RemoteID}} {
		line(2, "%s {", side.name)
		line(3, "auth = psk")
		line(3, "id = %s", side.id)
		line(2, "}")
	}
	line(2, "children {")
	line(3, "%s {", name)
	line(4, "local_ts = %s", s.LocalTS)
	line(4, "remote_ts = %s", s.RemoteTS)
	line(4, "esp_proposals = %s", s.ESP)
	if s.DPDAction != "" {
		line(4, "dpd_action = %s", s.DPDAction)
	}
	line(3, "}")
	line(2, "}")
	line(1, "}")
	line(0, "}")
	line(0, "secrets {")
	line(1, "ike-%s {", name)
	line(2, "id-a = %s", s.LocalID)
	line(2, "id-b = %s", s.RemoteID)
	line(2, "secret = \"%s\"", s.PSK)
	line(1, "}")
	line(0, "}")
	return b.String()
}

// LoadSite writes conf to <Dir>/<role>/swanctl.conf and loads it into role's charon: its
// secret, after clearing the credentials loaded before (the site's charon holds no others,
// and a changed key must not stay beside the old one), and its connection, which replaces
// the one loaded before. The SAs are left alone: the connection has no start action.
func (e *Env) LoadSite(role string, conf SiteSwanctl) error {
	f := filepath.Join(e.Dir, role, "swanctl.conf")
	if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(f, []byte(conf.String()), 0o600); err != nil {
		return err
	}
	if out, err := e.Swanctl(role, "--load-creds", "--clear", "--noprompt", "--file", f); err != nil {
		return fmt.Errorf("%s: loading the site's secret: %v\n%s", role, err, out)
	}
	if out, err := e.Swanctl(role, "--load-conns", "--file", f); err != nil {
		return fmt.Errorf("%s: loading the site's connection: %v\n%s", role, err, out)
	}
	return nil
}
