package gatewayconfig

import (
	"encoding/base64"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// FailClosedChildSuffix names each tunnel's drop shunt. '_' cannot occur in a tunnel name,
// so the child names of two tunnels never collide.
const FailClosedChildSuffix = "_failclosed"

// SecretSectionPrefix prefixes each tunnel's section in secrets.conf.
const SecretSectionPrefix = "ike-"

type writer struct {
	b      strings.Builder
	indent int
}

func (w *writer) open(name string) {
	w.line(name + " {")
	w.indent++
}

func (w *writer) close() {
	w.indent--
	w.line("}")
}

func (w *writer) kv(k, v string) { w.line(k + " = " + v) }

func (w *writer) line(s string) {
	w.b.WriteString(strings.Repeat("  ", w.indent))
	w.b.WriteString(s)
	w.b.WriteByte('\n')
}

// RenderSwanctl renders the connections section of swanctl.conf: one IKEv2 connection per
// tunnel with a tunnel-mode child from the service CIDR to the peer's subnets, and a drop
// shunt from anywhere to those subnets so that, while charon runs, nothing reaches them
// unencrypted when the child SA is missing. It never contains secrets.
func RenderSwanctl(cfg *Config) (string, error) {
	if cfg == nil {
		return "", invalidf("nil config")
	}
	return RenderSwanctlFor(cfg, ConnectionNames(cfg))
}

// RenderSwanctlFor renders the connections of the named tunnels only (the gateway agent
// leaves out a tunnel whose pre-shared key it does not have). The whole config is
// validated; an empty list renders an empty connections section.
func RenderSwanctlFor(cfg *Config, tunnels []string) (string, error) {
	if err := Validate(cfg); err != nil {
		return "", err
	}
	include, err := selectTunnels(cfg, tunnels)
	if err != nil {
		return "", err
	}
	w := &writer{}
	w.line(fmt.Sprintf("# Rendered for %s %s/%s. Secrets are loaded separately.", cfg.Gateway.Kind, cfg.Gateway.Namespace, cfg.Gateway.Name))
	w.open("connections")
	for _, t := range cfg.Tunnels {
		if !include[t.Name] {
			continue
		}
		w.open(t.Name)
		w.kv("version", "2")
		w.kv("local_addrs", "%any")
		w.kv("remote_addrs", t.PeerAddress)
		// NAT-T is forced: behind the floating IP's 1:1 NAT only UDP 500/4500 is opened.
		w.kv("encap", "yes")
		// No MOBIKE: the security group admits IKE only from the peer's one address, so
		// a move to another of the peer's addresses could never work, and charon would
		// otherwise send IKE to the addresses a peer announces, its internal ones
		// included, through whatever path reaches them (seen in the kernel-mode e2e).
		w.kv("mobike", "no")
		// A peer's fresh IKE SA supersedes the one it had (a restart without
		// INITIAL_CONTACT, a peer initiating again while its IKE SA is up): charon, as
		// the responder, deletes the older IKE SA of the same identities and connection
		// settings once the new one is authenticated, so duplicates do not pile up, each
		// with a child SA for the same selectors and rekeyed side by side. charon's
		// default, "no", replaces only on INITIAL_CONTACT. charon checks the policy only
		// as the responder of IKE_AUTH, so it neither touches an IKE SA the gateway
		// initiates (make-before-break) nor resolves two initiations that cross: the
		// agent's loader ends the older of those.
		w.kv("unique", "replace")
		w.kv("proposals", strings.Join(t.IKEProposals, ","))
		w.kv("rekey_time", fmt.Sprintf("%ds", t.IKERekeySeconds))
		w.kv("reauth_time", fmt.Sprintf("%ds", ReauthSeconds))
		w.kv("dpd_delay", fmt.Sprintf("%ds", t.DPDDelaySeconds))
		w.open("local")
		w.kv("auth", "psk")
		w.kv("id", quote(cfg.FloatingIP))
		w.close()
		w.open("remote")
		w.kv("auth", "psk")
		w.kv("id", quote(t.PeerID))
		w.close()
		w.open("children")
		w.open(t.Name)
		w.kv("mode", "tunnel")
		w.kv("local_ts", strings.Join(localTS(cfg, t), ","))
		w.kv("remote_ts", strings.Join(t.RemoteSubnets, ","))
		w.kv("esp_proposals", strings.Join(t.ESPProposals, ","))
		w.kv("rekey_time", fmt.Sprintf("%ds", t.ESPRekeySeconds))
		w.kv("dpd_action", t.DPDAction)
		// The agent's loader initiates (charon's start action would run on every
		// load-conn, and replacing a connection that has it tears its SAs down first).
		w.kv("start_action", "none")
		w.kv("close_action", dpdActions[t.DPDAction])
		w.close()
		// The shunt has the tunnel child's selectors: charon installs drop shunts with a
		// lower priority than IPsec policies, so the child's policy wins while it is
		// installed and the drop policy catches the rest. It must not be wider: with
		// kernel IPsec a forwarded packet meets the outbound policies before source NAT
		// (an exposure's reply still carries the backend's address, a reverse exposure's
		// packet the fabric host's), and a drop policy for 0.0.0.0/0 blocked all of them
		// (seen in the kernel dataplane VM test as XfrmOutPolBlock). After source NAT
		// the kernel looks the policy up again with the service CIDR as source.
		w.open(t.Name + FailClosedChildSuffix)
		w.kv("mode", "drop")
		w.kv("local_ts", cfg.ServiceCIDR)
		w.kv("remote_ts", strings.Join(t.RemoteSubnets, ","))
		w.kv("start_action", "trap")
		w.close()
		w.close() // children
		w.close() // connection
	}
	w.close()
	return w.b.String(), nil
}

// MinPSKLength is the shortest pre-shared key rendered, in bytes (the API's floor).
const MinPSKLength = v1alpha1.MinPSKLength

// MaxPSKLength is the longest pre-shared key rendered, in bytes.
const MaxPSKLength = 4096

// CheckPSK says why a pre-shared key cannot be used ("" when it can). It never quotes
// the key or its exact length.
func CheckPSK(psk []byte) string {
	switch {
	case len(psk) == 0:
		return "is empty"
	case len(psk) < MinPSKLength:
		return fmt.Sprintf("is shorter than %d bytes", MinPSKLength)
	case len(psk) > MaxPSKLength:
		return fmt.Sprintf("is longer than %d bytes", MaxPSKLength)
	}
	return ""
}

// RenderSecrets renders the secrets section of swanctl.conf with one IKE pre-shared key
// per tunnel, keyed by tunnel name in psks. Keys are written base64-encoded (strongSwan's
// 0s prefix), so no key content can break the file's syntax.
func RenderSecrets(cfg *Config, psks map[string]string) (string, error) {
	if cfg == nil {
		return "", invalidf("nil config")
	}
	return RenderSecretsFor(cfg, psks, ConnectionNames(cfg))
}

// RenderSecretsFor renders the keys of the named tunnels only; each must be in psks and
// pass CheckPSK. Errors never quote key material.
func RenderSecretsFor(cfg *Config, psks map[string]string, tunnels []string) (string, error) {
	if err := Validate(cfg); err != nil {
		return "", err
	}
	include, err := selectTunnels(cfg, tunnels)
	if err != nil {
		return "", err
	}
	w := &writer{}
	w.open("secrets")
	for _, t := range cfg.Tunnels {
		if !include[t.Name] {
			continue
		}
		psk, ok := psks[t.Name]
		if !ok || psk == "" {
			return "", fmt.Errorf("%w: tunnel %s: no pre-shared key", ErrIncomplete, t.Name)
		}
		if why := CheckPSK([]byte(psk)); why != "" {
			return "", invalidf("tunnel %s: the pre-shared key (Secret %s) %s", t.Name, t.PSK, why)
		}
		w.open(SecretSectionPrefix + t.Name)
		w.kv("id-local", quote(cfg.FloatingIP))
		w.kv("id-remote", quote(t.PeerID))
		w.kv("secret", "0s"+base64.StdEncoding.EncodeToString([]byte(psk)))
		w.close()
	}
	w.close()
	return w.b.String(), nil
}

func selectTunnels(cfg *Config, tunnels []string) (map[string]bool, error) {
	include := map[string]bool{}
	known := map[string]bool{}
	for _, t := range cfg.Tunnels {
		known[t.Name] = true
	}
	for _, n := range tunnels {
		if !known[n] {
			return nil, invalidf("tunnel %q is not in the config", n)
		}
		include[n] = true
	}
	return include, nil
}

// SharedSecret is one IKE PSK parsed back from secrets.conf.
type SharedSecret struct {
	Section string
	Owners  []string
	Secret  []byte
}

// ParseSecrets reads RenderSecrets' output back (for the agent's VICI load-shared).
// Errors never quote secret values.
func ParseSecrets(text string) ([]SharedSecret, error) {
	root, err := ParseSettings(text)
	if err != nil {
		return nil, fmt.Errorf("%w: secrets: malformed file", ErrInvalid)
	}
	sec := root.Sub("secrets")
	if sec == nil {
		return nil, fmt.Errorf("%w: secrets: no secrets section", ErrInvalid)
	}
	var out []SharedSecret
	for _, s := range sec.Sections {
		if !strings.HasPrefix(s.Name, SecretSectionPrefix) {
			return nil, fmt.Errorf("%w: secrets: unexpected section %q", ErrInvalid, s.Name)
		}
		ss := SharedSecret{Section: s.Name}
		for _, kv := range s.Keys {
			switch {
			case kv.Key == "id" || strings.HasPrefix(kv.Key, "id-"):
				ss.Owners = append(ss.Owners, kv.Value)
			case kv.Key == "secret":
				v, err := decodeSecret(kv.Value)
				if err != nil {
					return nil, fmt.Errorf("%w: secrets: section %s: undecodable secret", ErrInvalid, s.Name)
				}
				ss.Secret = v
			}
		}
		if len(ss.Secret) == 0 || len(ss.Owners) == 0 {
			return nil, fmt.Errorf("%w: secrets: section %s needs ids and a secret", ErrInvalid, s.Name)
		}
		out = append(out, ss)
	}
	return out, nil
}

func decodeSecret(v string) ([]byte, error) {
	switch {
	case strings.HasPrefix(v, "0s"):
		return base64.StdEncoding.DecodeString(v[2:])
	case strings.HasPrefix(v, "0x"):
		var out []byte
		_, err := fmt.Sscanf(v[2:], "%x", &out)
		return out, err
	default:
		return []byte(v), nil
	}
}

// DataplaneMode selects the charon kernel backend.
type DataplaneMode string

const (
	// DataplaneKernel uses the kernel's XFRM/ESP (production).
	DataplaneKernel DataplaneMode = "kernel"
	// DataplaneLibipsec does ESP in userspace over the ipsec0 TUN device (tests, and
	// kernels without ESP).
	DataplaneLibipsec DataplaneMode = "libipsec"
)

// charon's flood limits in the rendered strongswan.conf (see RenderStrongswanConf).
const (
	// BlockThreshold: half-open IKE SAs from one peer address beyond which its
	// IKE_SA_INITs are refused.
	BlockThreshold = 5
	// CookieThresholdIP: half-open IKE SAs from one peer address that make charon
	// demand a cookie from it.
	CookieThresholdIP = 3
	// CookieThreshold: half-open IKE SAs in all that make charon demand cookies.
	CookieThreshold = 10
	// InitLimitHalfOpen: half-open IKE SAs in all beyond which new IKE_SA_INITs are
	// dropped.
	InitLimitHalfOpen = 32
	// IKESALimit: IKE SAs in any state beyond which new IKE_SA_INITs are dropped.
	IKESALimit = 64
	// ReauthSeconds is every tunnel's IKE reauthentication interval: the peer's
	// credentials are checked again and every key is made anew at least once a day,
	// whatever the lifetimes.
	ReauthSeconds = 86400
)

// StrongswanOptions parameterise strongswan.conf.
type StrongswanOptions struct {
	Mode DataplaneMode
	// VICISocket is the charon control socket path (default /var/run/charon.vici).
	VICISocket string
	// LogFile, when set, adds a file logger (tests); otherwise charon logs to stderr.
	LogFile string
}

var rePath = regexp.MustCompile(`^/[A-Za-z0-9/._-]{0,255}$`)

// RenderStrongswanConf renders a standalone strongswan.conf (no includes) for charon or
// charon-systemd. With libipsec, kernel-libipsec must precede kernel-netlink: the first
// registered IPsec backend wins and kernel-netlink still handles addresses and routes.
func RenderStrongswanConf(opts StrongswanOptions) (string, error) {
	sock := opts.VICISocket
	if sock == "" {
		sock = "/var/run/charon.vici"
	}
	if !rePath.MatchString(sock) || strings.Contains(sock, "..") {
		return "", invalidf("vici socket path %q", sock)
	}
	if opts.LogFile != "" && (!rePath.MatchString(opts.LogFile) || strings.Contains(opts.LogFile, "..")) {
		return "", invalidf("log file path %q", opts.LogFile)
	}
	var load string
	switch opts.Mode {
	case DataplaneKernel:
		load = "random nonce openssl pem pkcs1 x509 kdf vici kernel-netlink socket-default"
	case DataplaneLibipsec:
		load = "random nonce openssl pem pkcs1 x509 kdf vici kernel-libipsec kernel-netlink socket-default"
	default:
		return "", invalidf("dataplane mode %q must be %s or %s", opts.Mode, DataplaneKernel, DataplaneLibipsec)
	}
	w := &writer{}
	w.line("# Standalone: read through STRONGSWAN_CONF, no includes.")
	w.open("charon")
	w.kv("load", load)
	w.kv("install_virtual_ip", "no")
	// Retransmissions (IKE_SA_INIT to a peer that does not answer, DPD) at most every
	// 20 s instead of up to 76 s: a client that fixes its side is answered within 20 s,
	// and an unanswered attempt gives up after about 84 s instead of 165 s.
	w.kv("retransmit_limit", "20")
	// Flood limits (security review M4): a peer that sends IKE_SA_INIT after
	// IKE_SA_INIT keeps charon busy with Diffie-Hellman work and half-open state on a node
	// other tenants' gateways share. From one address, more than BlockThreshold half-open
	// IKE SAs are refused outright and CookieThresholdIP of them make charon ask for a
	// cookie first (no DH work for a spoofed source); in all, InitLimitHalfOpen half-open
	// SAs make charon drop new IKE_SA_INITs, and IKESALimit SAs of any state refuse new
	// ones. A gateway has at most 16 tunnels, each with one IKE SA and a second one while
	// it is rekeyed or reauthenticated; the limits leave room for that twice over.
	// BlockThreshold and CookieThresholdIP are strongSwan 5.9's defaults, stated so the
	// rendered file shows every limit charon applies.
	w.kv("block_threshold", strconv.Itoa(BlockThreshold))
	w.kv("cookie_threshold", strconv.Itoa(CookieThreshold))
	w.kv("cookie_threshold_ip", strconv.Itoa(CookieThresholdIP))
	w.kv("init_limit_half_open", strconv.Itoa(InitLimitHalfOpen))
	w.kv("ikesa_limit", strconv.Itoa(IKESALimit))
	w.open("plugins")
	w.open("vici")
	w.kv("socket", "unix://"+sock)
	w.close()
	w.close()
	if opts.LogFile != "" {
		w.open("filelog")
		w.open("main")
		w.kv("path", opts.LogFile)
		w.kv("time_format", "%H:%M:%S")
		w.kv("flush_line", "yes")
		w.kv("default", "1")
		w.close()
		w.close()
	} else {
		w.open("filelog")
		w.open("stderr")
		w.kv("default", "1")
		w.close()
		w.close()
	}
	w.close()
	return w.b.String(), nil
}

// ConnectionNames lists the tunnels the status agent and the exporter report on, sorted:
// the connection names RenderSwanctl produces, or a WireGuard gateway's peer names.
func ConnectionNames(cfg *Config) []string {
	out := make([]string, 0, len(cfg.Tunnels))
	for _, t := range cfg.Tunnels {
		out = append(out, t.Name)
	}
	if cfg.WireGuard != nil {
		for _, p := range cfg.WireGuard.Peers {
			out = append(out, p.Name)
		}
	}
	sort.Strings(out)
	return out
}

// localTS is a tunnel's local traffic selector: the service CIDR (virtual IPs and .1)
// and, for a routed tunnel, the fabric's internal sources it reaches by their real
// addresses.
func localTS(cfg *Config, t Tunnel) []string {
	ts := []string{cfg.ServiceCIDR}
	if t.Mode == ModeRouted {
		ts = append(ts, cfg.InternalSources...)
	}
	return ts
}
