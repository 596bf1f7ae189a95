package peerconfig

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// Every vendor output is checked line by line against that vendor's documented command
// syntax, transcribed below with its source. This is a check against documentation only:
// none of these devices runs here. (The strongSwan output is also proven against a real
// charon in test/e2e/peerconfig.)

// --- FortiOS: CLI Reference 7.x, "config vpn ipsec phase1-interface",
// "config vpn ipsec phase2-interface", "config firewall address", "config router static",
// "config firewall policy". Proposal names: the phase1/phase2 proposal option lists of the
// same reference.
var fortiDocPhase1Proposals = func() map[string]bool {
	m := map[string]bool{}
	for _, c := range []string{"des", "3des", "aes128", "aes192", "aes256", "aria128", "aria192", "aria256", "seed"} {
		for _, h := range []string{"md5", "sha1", "sha256", "sha384", "sha512"} {
			m[c+"-"+h] = true
		}
	}
	for _, c := range []string{"aes128gcm", "aes256gcm", "chacha20poly1305"} {
		for _, h := range []string{"prfsha1", "prfsha256", "prfsha384", "prfsha512"} {
			m[c+"-"+h] = true
		}
	}
	return m
}()

var fortiDocPhase2Proposals = func() map[string]bool {
	m := map[string]bool{"aes128gcm": true, "aes256gcm": true, "chacha20poly1305": true}
	for _, c := range []string{"null", "des", "3des", "aes128", "aes192", "aes256", "aria128", "aria192", "aria256", "seed"} {
		for _, h := range []string{"null", "md5", "sha1", "sha256", "sha384", "sha512"} {
			m[c+"-"+h] = true
		}
	}
	return m
}()

var (
	reFortiIP     = `(\d{1,3}\.){3}\d{1,3}`
	reFortiSubnet = regexp.MustCompile(`^` + reFortiIP + ` ` + reFortiIP + `$`)
	reQuoted      = regexp.MustCompile(`^"([^"\\]|\\.)*"$`)
)

func fortiInts(lo, hi int) func(string) bool {
	return func(v string) bool { n, err := strconv.Atoi(v); return err == nil && n >= lo && n <= hi }
}

func fortiEnum(vals ...string) func(string) bool {
	return func(v string) bool { return slices.Contains(vals, v) }
}

func fortiEach(ok func(string) bool) func(string) bool {
	return func(v string) bool {
		for _, x := range strings.Fields(v) {
			if !ok(x) {
				return false
			}
		}
		return v != ""
	}
}

var fortiDocDH = fortiEach(fortiEnum("1", "2", "5", "14", "15", "16", "17", "18", "19", "20", "21", "27", "28", "29", "30", "31", "32"))

var fortiDoc = map[string]map[string]func(string) bool{
	"vpn ipsec phase1-interface": {
		"interface": reQuoted.MatchString, "ike-version": fortiEnum("1", "2"), "remote-gw": regexp.MustCompile(`^` + reFortiIP + `$`).MatchString,
		"peertype": fortiEnum("any", "one", "dialup", "peer", "peergrp"), "peerid": reQuoted.MatchString,
		"localid-type": fortiEnum("auto", "fqdn", "user-fqdn", "keyid", "address", "asn1dn"), "localid": reQuoted.MatchString,
		"net-device": fortiEnum("enable", "disable"), "proposal": fortiEach(func(v string) bool { return fortiDocPhase1Proposals[v] }),
		"dhgrp": fortiDocDH, "nattraversal": fortiEnum("enable", "disable", "forced"), "keylife": fortiInts(120, 172800),
		"dpd": fortiEnum("disable", "on-idle", "on-demand"), "dpd-retryinterval": fortiInts(1, 3600),
		"authmethod": fortiEnum("psk", "signature"), "psksecret": reQuoted.MatchString,
	},
	"vpn ipsec phase2-interface": {
		"phase1name": reQuoted.MatchString, "proposal": fortiEach(func(v string) bool { return fortiDocPhase2Proposals[v] }),
		"pfs": fortiEnum("enable", "disable"), "dhgrp": fortiDocDH, "keylifeseconds": fortiInts(120, 172800),
		"auto-negotiate": fortiEnum("enable", "disable"), "src-subnet": reFortiSubnet.MatchString, "dst-subnet": reFortiSubnet.MatchString,
	},
	"firewall address": {"subnet": reFortiSubnet.MatchString},
	"router static":    {"dst": reFortiSubnet.MatchString, "device": reQuoted.MatchString},
	"firewall policy": {
		"name": reQuoted.MatchString, "srcintf": reQuoted.MatchString, "dstintf": reQuoted.MatchString,
		"srcaddr": fortiEach(reQuoted.MatchString), "dstaddr": fortiEach(reQuoted.MatchString),
		"action": fortiEnum("accept", "deny", "ipsec"), "schedule": reQuoted.MatchString, "service": fortiEach(reQuoted.MatchString),
	},
}

func checkFortiGate(t *report, out string) {
	t.Helper()
	var block string
	inEdit := false
	for n, raw := range strings.Split(out, "\n") {
		l := strings.TrimSpace(raw)
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "config "):
			block = strings.TrimPrefix(l, "config ")
			if fortiDoc[block] == nil {
				t.Errorf("line %d: undocumented block %q", n+1, l)
			}
		case l == "end":
			block = ""
		case strings.HasPrefix(l, "edit "):
			v := strings.TrimPrefix(l, "edit ")
			if !reQuoted.MatchString(v) && v != "0" {
				t.Errorf("line %d: edit takes a quoted name or 0: %q", n+1, l)
			}
			if block == "vpn ipsec phase1-interface" && len(v)-2 > 15 {
				t.Errorf("line %d: an interface-mode phase 1 name has at most 15 characters: %q", n+1, l)
			}
			inEdit = true
		case l == "next":
			inEdit = false
		case strings.HasPrefix(l, "set "):
			key, val, _ := strings.Cut(strings.TrimPrefix(l, "set "), " ")
			check := fortiDoc[block][key]
			switch {
			case !inEdit || block == "":
				t.Errorf("line %d: set outside config/edit: %q", n+1, l)
			case check == nil:
				t.Errorf("line %d: %q is not a documented setting of config %s", n+1, key, block)
			case !check(val):
				t.Errorf("line %d: %q is not a documented value of %s %s", n+1, val, block, key)
			}
		default:
			t.Errorf("line %d: not FortiOS CLI: %q", n+1, l)
		}
	}
}

// --- Cisco IOS XE: Security Configuration Guide, "Configuring Internet Key Exchange
// Version 2 and FlexVPN Site-to-Site" (crypto ikev2 proposal/policy/keyring/profile) and
// "Configuring Security for VPNs with IPsec" (transform-set, crypto map, access list).
var ciscoDoc = func() []*regexp.Regexp {
	ip := `(\d{1,3}\.){3}\d{1,3}`
	name := `[A-Za-z0-9_-]+`
	var out []*regexp.Regexp
	for _, p := range []string{
		`crypto ikev2 proposal ` + name,
		` encryption( (aes-cbc-128|aes-cbc-192|aes-cbc-256|aes-gcm-128|aes-gcm-256|3des))+`,
		` integrity( (md5|sha1|sha256|sha384|sha512))+`,
		` prf( (md5|sha1|sha256|sha384|sha512))+`,
		` group( (1|2|5|14|15|16|19|20|21|24))+`,
		`crypto ikev2 policy ` + name,
		` proposal( ` + name + `)+`,
		`crypto ikev2 keyring ` + name,
		` peer ` + name,
		`  address ` + ip,
		`  pre-shared-key \S+`,
		` !`,
		`crypto ikev2 profile ` + name,
		` match identity remote address ` + ip + ` ` + ip,
		` identity local (address ` + ip + `|fqdn \S+|email \S+@\S+)`,
		` authentication (remote|local) pre-share`,
		` keyring local ` + name,
		` lifetime \d+`,
		` dpd \d+ \d+ (on-demand|periodic)`,
		`crypto ipsec transform-set ` + name + ` (esp-gcm (128|256)|esp-aes (128|192|256) esp-(md5|sha|sha256|sha384|sha512)-hmac)`,
		` mode tunnel`,
		`ip access-list extended ` + name,
		` permit ip ` + ip + ` ` + ip + ` ` + ip + ` ` + ip,
		`crypto map ` + name + ` \d+ ipsec-isakmp`,
		` set peer ` + ip,
		` set transform-set( ` + name + `)+`,
		` set pfs group(1|2|5|14|15|16|19|20|21|24)`,
		` set security-association lifetime seconds \d+`,
		` set ikev2-profile ` + name,
		` match address ` + name,
		`interface \S+`,
		` crypto map ` + name,
		`!.*`,
	} {
		out = append(out, regexp.MustCompile(`^`+p+`$`))
	}
	return out
}()

func checkCisco(t *report, out string) {
	t.Helper()
	for n, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if !slices.ContainsFunc(ciscoDoc, func(r *regexp.Regexp) bool { return r.MatchString(l) }) {
			t.Errorf("line %d: not a documented IOS XE command: %q", n+1, l)
		}
	}
}

// --- RouterOS 7: manual, IPsec (Profiles, Peers, Identities, Proposals, Policies) and
// IP/Firewall/NAT.
var rosDoc = map[string]map[string]func(string) bool{
	"/ip ipsec profile": {
		"name": nonEmpty, "enc-algorithm": rosList("3des", "aes-128", "aes-192", "aes-256", "blowfish", "camellia-128", "camellia-192", "camellia-256", "des"),
		"hash-algorithm": rosList("md5", "sha1", "sha256", "sha512"), "prf-algorithm": rosList("auto", "sha1", "sha256", "sha384", "sha512"),
		"dh-group": rosList("modp768", "modp1024", "modp1536", "modp2048", "modp3072", "modp4096", "modp6144", "modp8192", "ecp256", "ecp384", "ecp521"),
		"lifetime": rosTime, "dpd-interval": rosTime, "dpd-maximum-failures": func(v string) bool { n, err := strconv.Atoi(v); return err == nil && n >= 1 && n <= 100 },
		"nat-traversal": rosList("yes", "no"),
	},
	"/ip ipsec peer": {
		"name": nonEmpty, "address": regexp.MustCompile(`^(\d{1,3}\.){3}\d{1,3}/\d{1,2}$`).MatchString, "profile": nonEmpty,
		"exchange-mode": rosList("aggressive", "base", "main", "ike2"), "send-initial-contact": rosList("yes", "no"),
	},
	"/ip ipsec identity": {
		"peer": nonEmpty, "auth-method": rosList("digital-signature", "eap", "eap-radius", "pre-shared-key", "pre-shared-key-xauth", "rsa-key", "rsa-signature-hybrid"),
		"secret": reQuoted.MatchString, "my-id": regexp.MustCompile(`^"(auto|(address|fqdn|user-fqdn|key-id):[^"]+)"$`).MatchString,
		"remote-id":       regexp.MustCompile(`^"(auto|ignore|(address|fqdn|user-fqdn|key-id):[^"]+)"$`).MatchString,
		"generate-policy": rosList("no", "port-override", "port-strict"),
	},
	"/ip ipsec proposal": {
		"name": nonEmpty, "auth-algorithms": rosList("md5", "null", "sha1", "sha256", "sha512"),
		"enc-algorithms": rosList("null", "des", "3des", "aes-128-cbc", "aes-128-ctr", "aes-128-gcm", "aes-192-cbc", "aes-192-ctr", "aes-192-gcm",
			"aes-256-cbc", "aes-256-ctr", "aes-256-gcm", "blowfish", "camellia-128", "camellia-192", "camellia-256", "twofish"),
		"pfs-group": rosList("ecp256", "ecp384", "ecp521", "modp768", "modp1024", "modp1536", "modp2048", "modp3072", "modp4096", "modp6144", "modp8192", "none"),
		"lifetime":  rosTime,
	},
	"/ip ipsec policy": {
		"peer": nonEmpty, "tunnel": rosList("yes", "no"), "src-address": isPrefix, "dst-address": isPrefix, "proposal": nonEmpty,
		"action": rosList("discard", "encrypt", "none"), "level": rosList("require", "unique", "use"),
	},
	"/ip firewall nat": {
		"chain": nonEmpty, "action": rosList("accept", "masquerade", "src-nat", "dst-nat"), "src-address": isPrefix, "dst-address": isPrefix,
		"place-before": func(v string) bool { _, err := strconv.Atoi(v); return err == nil }, "comment": reQuoted.MatchString,
	},
}

func nonEmpty(v string) bool { return v != "" && !strings.ContainsAny(v, " \"") }
func isPrefix(v string) bool {
	_, err := parsePrefix(v)
	return err == nil
}
func parsePrefix(v string) (string, error) {
	if !regexp.MustCompile(`^(\d{1,3}\.){3}\d{1,3}/\d{1,2}$`).MatchString(v) {
		return "", fmt.Errorf("not a prefix")
	}
	return v, nil
}
func rosTime(v string) bool { return regexp.MustCompile(`^(\d+[wdhms])+$`).MatchString(v) }
func rosList(vals ...string) func(string) bool {
	return func(v string) bool {
		for _, x := range strings.Split(v, ",") {
			if !slices.Contains(vals, x) {
				return false
			}
		}
		return true
	}
}

// rosArgs splits "k=v k2="quoted value"" honouring quotes and escapes.
func rosArgs(s string) ([][2]string, error) {
	var out [][2]string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		k, rest, ok := strings.Cut(s, "=")
		if !ok {
			return nil, fmt.Errorf("argument without =: %q", s)
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			i := 1
			for ; i < len(rest) && rest[i] != '"'; i++ {
				if rest[i] == '\\' {
					i++
				}
			}
			if i >= len(rest) {
				return nil, fmt.Errorf("unterminated quote in %q", rest)
			}
			v, s = rest[:i+1], rest[i+1:]
		} else {
			v, s, _ = strings.Cut(rest, " ")
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

func checkMikroTik(t *report, out string) {
	t.Helper()
	for n, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		menu, args, ok := strings.Cut(l, " add ")
		doc := rosDoc[menu]
		if !ok || doc == nil {
			t.Errorf("line %d: not a documented RouterOS menu: %q", n+1, l)
			continue
		}
		kvs, err := rosArgs(args)
		if err != nil {
			t.Errorf("line %d: %v", n+1, err)
			continue
		}
		for _, kv := range kvs {
			check := doc[kv[0]]
			if check == nil {
				t.Errorf("line %d: %q is not a documented property of %s", n+1, kv[0], menu)
			} else if !check(kv[1]) {
				t.Errorf("line %d: %q is not a documented value of %s %s", n+1, kv[1], menu, kv[0])
			}
		}
	}
}

// --- pfSense: the form labels of VPN > IPsec > Tunnels (Edit Phase 1 / Phase 2) and the
// option lists of src/etc/inc/ipsec.inc.
var pfDoc = map[string]*regexp.Regexp{
	"Description":           regexp.MustCompile(`^.+$`),
	"Key Exchange version":  regexp.MustCompile(`^(IKEv1|IKEv2|Auto)$`),
	"Internet Protocol":     regexp.MustCompile(`^(IPv4|IPv6|Both)$`),
	"Interface":             regexp.MustCompile(`^WAN$`),
	"Remote Gateway":        regexp.MustCompile(`^(\d{1,3}\.){3}\d{1,3}$`),
	"Authentication Method": regexp.MustCompile(`^Mutual PSK$`),
	"My identifier":         regexp.MustCompile(`^(IP address: (\d{1,3}\.){3}\d{1,3}|Distinguished name: \S+|User distinguished name: \S+@\S+)$`),
	"Peer identifier":       regexp.MustCompile(`^IP address: (\d{1,3}\.){3}\d{1,3}$`),
	"Pre-Shared Key":        regexp.MustCompile(`^.+$`),
	"Encryption Algorithm":  regexp.MustCompile(`^(AES, Key length (128|192|256) bits|AES(128|192|256)-GCM, Key length (64|96|128) bits|3DES), Hash (MD5|SHA1|SHA256|SHA384|SHA512|AES-XCBC), DH Group (\d+ \(.*\))$`),
	"Life Time":             regexp.MustCompile(`^\d+$`),
	"NAT Traversal":         regexp.MustCompile(`^(Auto|Force)$`),
	"Dead Peer Detection":   regexp.MustCompile(`^Enable DPD, Delay \d+, Max failures \d+$`),
	"Mode":                  regexp.MustCompile(`^(Tunnel IPv4|Tunnel IPv6|Transport|Routed \(VTI\))$`),
	"Local Network":         regexp.MustCompile(`^Network: (\d{1,3}\.){3}\d{1,3} / \d{1,2}$`),
	"NAT/BINAT translation": regexp.MustCompile(`^None$`),
	"Remote Network":        regexp.MustCompile(`^Network: (\d{1,3}\.){3}\d{1,3} / \d{1,2}$`),
	"Protocol":              regexp.MustCompile(`^(ESP|AH)$`),
	"Encryption Algorithms": regexp.MustCompile(`^((AES (128|192|256) bits|AES(128|192|256)-GCM (64|96|128) bits|3DES)(; |$))+$`),
	"Hash Algorithms":       regexp.MustCompile(`^((MD5|SHA1|SHA256|SHA384|SHA512|AES-XCBC)(, |$))+$`),
	"PFS key group":         regexp.MustCompile(`^(off|\d+ \(.*\))$`),
}

var rePfField = regexp.MustCompile(`^  ([A-Za-z/ -]+?)( \d+)?:\s+(.*)$`)

func checkPfSense(t *report, out string) {
	t.Helper()
	groups := map[string]bool{}
	for _, g := range pfGroups {
		groups[g] = true
	}
	for n, l := range strings.Split(out, "\n") {
		if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "[Add P") || strings.HasPrefix(l, "Then add") {
			continue
		}
		m := rePfField.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("line %d: not a form field: %q", n+1, l)
			continue
		}
		re := pfDoc[m[1]]
		if re == nil || !re.MatchString(m[3]) {
			t.Errorf("line %d: %q is not a documented value of field %q", n+1, m[3], m[1])
		}
		if i := strings.Index(m[3], "DH Group "); i >= 0 && !groups[m[3][i+len("DH Group "):]] {
			t.Errorf("line %d: DH group label %q is not pfSense's", n+1, m[3][i:])
		}
	}
}

// --- strongSwan: swanctl.conf(5). The output parses with the project's settings parser
// and uses only documented keys.
var swanctlDoc = map[string]bool{
	"connections{}": true, "secrets{}": true,
	"version": true, "remote_addrs": true, "local_addrs": true, "proposals": true, "rekey_time": true, "dpd_delay": true,
	"local{}": true, "remote{}": true, "auth": true, "id": true, "children{}": true,
	"mode": true, "local_ts": true, "remote_ts": true, "esp_proposals": true, "dpd_action": true, "start_action": true,
	"secret": true,
}

func checkStrongSwan(t *report, out string) {
	t.Helper()
	root, err := gatewayconfig.ParseSettings(out)
	if err != nil {
		t.Errorf("does not parse as swanctl.conf: %v", err)
		return
	}
	for _, p := range root.Paths() {
		parts := strings.Split(p, ".")
		last := parts[len(parts)-1]
		// Connection, child and secret section names are the user's.
		if len(parts) >= 2 && (parts[0] == "connections" || parts[0] == "secrets") && (len(parts) == 2 || (len(parts) == 4 && parts[2] == "children")) {
			continue
		}
		if parts[0] == "secrets" && strings.HasPrefix(last, "id") {
			continue
		}
		if !swanctlDoc[last] {
			t.Errorf("%s is not a documented swanctl.conf key", p)
		}
	}
}

// --- libreswan: ipsec.conf(5) of libreswan 4.10 and 5.2 (the conn parameters both
// versions document; ike= and esp= in the grammar of the "ike" and "esp" entries). The
// e2e test (test/e2e/peerconfig, TestLibreswanSyntax) also has both versions' own
// parsers read every output.
var (
	lswAlg    = `(aes(128|192|256)|aes_gcm(128|192|256)|aes_ctr(128|192|256)|camellia(128|192|256)|chacha20_poly1305|3des)`
	lswHashRe = `(md5|sha1|sha2_256|sha2_384|sha2_512|aes_xcbc|none)`
	lswDHRe   = `dh(5|14|15|16|17|18|19|20|21|31)`
	lswProp   = lswAlg + `(\+` + lswAlg + `)*-` + lswHashRe + `(\+` + lswHashRe + `)*(-` + lswDHRe + `(\+` + lswDHRe + `)*)?`
	lswESP    = lswAlg + `(\+` + lswAlg + `)*(-` + lswHashRe + `(\+` + lswHashRe + `)*(-` + lswDHRe + `(\+` + lswDHRe + `)*)?)?`
	lswIP     = `(\d{1,3}\.){3}\d{1,3}`
	lswNet    = lswIP + `/\d{1,2}`
	lswTime   = `\d+s`
)

var lswDoc = map[string]*regexp.Regexp{
	"authby": regexp.MustCompile(`^secret$`), "left": regexp.MustCompile(`^(%defaultroute|` + lswIP + `)$`),
	"leftid": regexp.MustCompile(`^(` + lswIP + `|@[A-Za-z0-9.-]+|[^@\s]+@[A-Za-z0-9.-]+)$`), "right": regexp.MustCompile(`^` + lswIP + `$`),
	"rightid": regexp.MustCompile(`^` + lswIP + `$`), "leftsubnet": regexp.MustCompile(`^` + lswNet + `$`), "rightsubnet": regexp.MustCompile(`^` + lswNet + `$`),
	"leftsubnets": regexp.MustCompile(`^\{` + lswNet + `( ` + lswNet + `)*\}$`), "rightsubnets": regexp.MustCompile(`^\{` + lswNet + `( ` + lswNet + `)*\}$`),
	"ike": regexp.MustCompile(`^` + lswProp + `(,` + lswProp + `)*$`), "esp": regexp.MustCompile(`^` + lswESP + `(,` + lswESP + `)*$`),
	"pfs": regexp.MustCompile(`^(yes|no)$`), "ikelifetime": regexp.MustCompile(`^` + lswTime + `$`), "salifetime": regexp.MustCompile(`^` + lswTime + `$`),
	"rekeymargin": regexp.MustCompile(`^` + lswTime + `$`), "dpddelay": regexp.MustCompile(`^` + lswTime + `$`),
	"dpdaction": regexp.MustCompile(`^(hold|clear|restart)$`), "initial-contact": regexp.MustCompile(`^(yes|no)$`),
	"auto": regexp.MustCompile(`^(add|ondemand|start|ignore)$`),
}

var reLswSecret = regexp.MustCompile(`^#   \S+ ` + lswIP + ` : PSK (<pre-shared key>|0s[A-Za-z0-9+/]+=*)$`)

func checkLibreswan(t *report, out string) {
	t.Helper()
	inConn, secret := false, false
	for n, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		switch {
		case strings.HasPrefix(l, "conn "):
			inConn = true
		case l == "":
			inConn = false
		case strings.HasPrefix(l, "#   ") && strings.Contains(l, " : PSK "):
			secret = true
			if !reLswSecret.MatchString(l) {
				t.Errorf("line %d: not an ipsec.secrets PSK line: %q", n+1, l)
			}
		case strings.HasPrefix(l, "#"), inConn && strings.HasPrefix(l, "\t#"):
		case inConn && strings.HasPrefix(l, "\t"):
			k, v, ok := strings.Cut(strings.TrimPrefix(l, "\t"), "=")
			re := lswDoc[k]
			switch {
			case !ok || re == nil:
				t.Errorf("line %d: %q is not a conn parameter of libreswan 4 and 5", n+1, k)
			case !re.MatchString(v):
				t.Errorf("line %d: %q is not a documented value of %s", n+1, v, k)
			}
		default:
			t.Errorf("line %d: not ipsec.conf: %q", n+1, l)
		}
	}
	if !secret {
		t.Errorf("no ipsec.secrets line")
	}
}

// report collects a checker's findings.
type report struct{ msgs []string }

func (r *report) Helper()                        {}
func (r *report) Errorf(format string, a ...any) { r.msgs = append(r.msgs, fmt.Sprintf(format, a...)) }

func TestVendorSyntax(t *testing.T) {
	checks := map[Format]func(*report, string){
		FormatStrongSwan: checkStrongSwan, FormatLibreswan: checkLibreswan, FormatFortiGate: checkFortiGate, FormatCiscoIOSXE: checkCisco,
		FormatMikroTik: checkMikroTik, FormatPfSense: checkPfSense, FormatWireGuard: checkWireGuard,
	}
	for _, g := range goldenCases() {
		t.Run(g.name, func(t *testing.T) {
			out, err := Render(g.in(), g.format)
			if err != nil {
				t.Fatal(err)
			}
			r := &report{}
			checks[g.format](r, out)
			for _, m := range r.msgs {
				t.Error(m)
			}
		})
	}
	// The checkers themselves catch a wrong keyword (they are not vacuous).
	bad := map[Format]string{
		FormatFortiGate:  "config vpn ipsec phase1-interface\n    edit \"x\"\n        set proposal aes256gcm16-sha384\n    next\nend\n",
		FormatCiscoIOSXE: "crypto ikev2 proposal X\n encryption aes-gcm-384\n",
		FormatMikroTik:   "/ip ipsec profile add name=x hash-algorithm=sha384\n",
		FormatPfSense:    "  Encryption Algorithm 1:  AES256-GCM, Key length 256 bits, Hash SHA384, DH Group 20 (nist ecp384)\n",
		FormatStrongSwan: "connections {\n  x {\n    remote_addr = 1.2.3.4\n  }\n}\n",
		FormatLibreswan:  "conn x\n\tike=aes_gcm256-sha2_384-ecp384\n\n# x.secrets:\n#   1.2.3.4 1.2.3.5 : PSK 0sAA==\n",
		FormatWireGuard:  "[Peer]\nPublicKey = abc\nAllowedIP = 10.0.0.0/8\n",
	}
	for f, text := range bad {
		r := &report{}
		checks[f](r, text)
		if len(r.msgs) == 0 {
			t.Errorf("%s checker accepted %q", f, text)
		}
	}
}

// wgQuickKeys are the keys wg-quick(8) accepts per section (wg(8)'s plus wg-quick's own).
var wgQuickKeys = map[string][]string{
	"Interface": {"PrivateKey", "ListenPort", "FwMark", "Address", "DNS", "MTU", "Table", "PreUp", "PostUp", "PreDown", "PostDown", "SaveConfig"},
	"Peer":      {"PublicKey", "PresharedKey", "AllowedIPs", "Endpoint", "PersistentKeepalive"},
}

var reWGKey = regexp.MustCompile(`^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw480]=$`)

// checkWireGuard checks wg-quick syntax: known sections and keys, keys in base64 (the
// private key may be the placeholder), addresses and networks that parse.
func checkWireGuard(r *report, text string) {
	section := ""
	for n, raw := range strings.Split(text, "\n") {
		l := strings.TrimSpace(raw)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, "[") {
			section = strings.Trim(l, "[]")
			if _, ok := wgQuickKeys[section]; !ok {
				r.Errorf("line %d: unknown section %q", n+1, l)
			}
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || !slices.Contains(wgQuickKeys[section], k) {
			r.Errorf("line %d: %q is not a wg-quick key of [%s]", n+1, k, section)
			continue
		}
		switch k {
		case "PublicKey":
			if !reWGKey.MatchString(v) {
				r.Errorf("line %d: %q is not a WireGuard key", n+1, v)
			}
		case "PrivateKey":
			if v != "<this device's private key>" && !reWGKey.MatchString(v) {
				r.Errorf("line %d: private key neither a key nor the placeholder", n+1)
			}
		case "AllowedIPs":
			for _, c := range strings.Split(v, ",") {
				if _, err := netip.ParsePrefix(strings.TrimSpace(c)); err != nil {
					r.Errorf("line %d: allowed IP %q: %v", n+1, c, err)
				}
			}
		case "Endpoint":
			if _, err := netip.ParseAddrPort(v); err != nil {
				r.Errorf("line %d: endpoint %q: %v", n+1, v, err)
			}
		case "ListenPort", "PersistentKeepalive":
			if x, err := strconv.Atoi(v); err != nil || x < 0 || x > 65535 {
				r.Errorf("line %d: %s %q", n+1, k, v)
			}
		}
	}
}
