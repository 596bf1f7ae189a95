package peerconfig

import (
	"encoding/base64"
	"fmt"
	"strings"
)

// connName is the swanctl connection, child and secret name on the client.
func connName(p *Peer) string { return "bnerd-" + p.Tunnel }

// renderStrongSwan writes a swanctl.conf for a strongSwan 5.8+ client: load it with
// `swanctl --load-all --file <file>`. Every value comes from a validated gateway object
// (addresses, CIDRs, proposal keywords, identities without quotes or spaces), and the
// identities are quoted anyway.
func renderStrongSwan(p *Peer) (string, error) {
	var b strings.Builder
	b.WriteString(summary(p, "#"))
	b.WriteString("# Load with: swanctl --load-all --file <this file>\n")
	name := connName(p)
	var ike, esp []string
	for _, x := range p.IKE {
		ike = append(ike, x.Raw)
	}
	for _, x := range p.ESP {
		esp = append(esp, x.Raw)
	}
	w := &writer{b: &b}
	w.open("connections")
	w.open(name)
	w.kv("version", "2")
	w.kv("remote_addrs", p.GatewayAddress.String())
	w.kv("proposals", strings.Join(ike, ","))
	w.kv("rekey_time", fmt.Sprintf("%ds", p.IKELifetime))
	w.kv("dpd_delay", fmt.Sprintf("%ds", p.DPDDelay))
	w.open("local")
	w.kv("auth", "psk")
	w.kv("id", quote(p.LocalID))
	w.close()
	w.open("remote")
	w.kv("auth", "psk")
	w.kv("id", quote(p.GatewayAddress.String()))
	w.close()
	w.open("children")
	w.open(name)
	w.kv("mode", "tunnel")
	w.kv("local_ts", prefixesList(p))
	w.kv("remote_ts", strings.ReplaceAll(prefixesText(p.remoteSubnets()), " ", ""))
	w.kv("esp_proposals", strings.Join(esp, ","))
	w.kv("rekey_time", fmt.Sprintf("%ds", p.ESPLifetime))
	w.kv("dpd_action", "restart")
	// The gateway initiates as well; trapping here brings the tunnel up on the first
	// packet without racing the gateway's own initiation.
	w.kv("start_action", "trap")
	w.close()
	w.close() // children
	w.close() // connection
	w.close() // connections

	if p.PSK == "" {
		b.WriteString("# The secrets section needs the pre-shared key from " + p.PSKSource + ":\n")
		b.WriteString("# secrets {\n")
		b.WriteString("#   ike-" + name + " {\n")
		b.WriteString("#     id-local = " + quote(p.LocalID) + "\n")
		b.WriteString("#     id-gateway = " + quote(p.GatewayAddress.String()) + "\n")
		b.WriteString("#     secret = <pre-shared key>\n")
		b.WriteString("#   }\n")
		b.WriteString("# }\n")
		return b.String(), nil
	}
	w.open("secrets")
	w.open("ike-" + name)
	w.kv("id-local", quote(p.LocalID))
	w.kv("id-gateway", quote(p.GatewayAddress.String()))
	// Base64 (strongSwan's 0s prefix): no key content can break the file's syntax.
	w.kv("secret", "0s"+base64.StdEncoding.EncodeToString([]byte(p.PSK)))
	w.close()
	w.close()
	return b.String(), nil
}

func prefixesList(p *Peer) string {
	var s []string
	for _, x := range p.LocalSubnets {
		s = append(s, x.String())
	}
	return strings.Join(s, ",")
}

type writer struct {
	b      *strings.Builder
	indent int
}

func (w *writer) open(name string) { w.line(name + " {"); w.indent++ }
func (w *writer) close()           { w.indent--; w.line("}") }
func (w *writer) kv(k, v string)   { w.line(k + " = " + v) }
func (w *writer) line(s string) {
	w.b.WriteString(strings.Repeat("  ", w.indent))
	w.b.WriteString(s)
	w.b.WriteByte('\n')
}

func quote(v string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
}
