package peerconfig

import (
	"encoding/base64"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// libreswan vocabulary (ipsec.conf(5) of libreswan 4.10 and 5.2, the versions Debian 12
// and 13 ship; checked with both versions' own `ipsec addconn --checkconfig` and
// `ipsec algparse`). A proposal is ENCRYPT[+ENCRYPT]-INTEG|PRF[+...]-DH[+DH]; libreswan
// uses one algorithm list as both IKE integrity and PRF, and AEAD ciphers name the PRF
// in that place.
var (
	lswEnc = map[string]string{"aes128": "aes128", "aes192": "aes192", "aes256": "aes256",
		"aes128gcm16": "aes_gcm128", "aes192gcm16": "aes_gcm192", "aes256gcm16": "aes_gcm256",
		"aes128ctr": "aes_ctr128", "aes192ctr": "aes_ctr192", "aes256ctr": "aes_ctr256",
		"camellia128": "camellia128", "camellia192": "camellia192", "camellia256": "camellia256",
		"chacha20poly1305": "chacha20_poly1305", "3des": "3des"}
	lswHash = map[string]string{"md5": "md5", "sha1": "sha1", "sha256": "sha2_256", "sha384": "sha2_384", "sha512": "sha2_512", "aesxcbc": "aes_xcbc"}
	// Key exchange methods by IANA number: MODP 1536-8192, ECP 256/384/521, Curve25519
	// (RFC 5114's groups are not compiled in, Brainpool and Curve448 are not supported).
	lswDH = map[int]bool{5: true, 14: true, 15: true, 16: true, 17: true, 18: true, 19: true, 20: true, 21: true, 31: true}
	// ikelifetime and salifetime are at most 24 h; pluto starts a rekey rekeymargin
	// (9 min, plus up to 100% fuzz) before a lifetime ends.
	lswMaxLifetime     = int64(86400)
	lswDefaultMargin   = int64(540)
	lswDefaultDPDDelay = int64(0)
)

func lswName(p *Peer) string { return "bnerd-" + p.Tunnel }

// lswID writes an identity for leftid/rightid: an address as it is, an FQDN with libreswan's
// @ (taken literally, never resolved), user@FQDN as it is (libreswan's ID_USER_FQDN).
func lswID(id string, t IDType) string {
	if t == IDFQDN {
		return "@" + id
	}
	return id
}

// lswProposal maps one strongSwan proposal; ok is false when one of its kinds has no
// algorithm libreswan offers, why says what is missing.
func lswProposal(pr Proposal, esp bool) (out string, ok bool, why string) {
	var enc, hash, dh []string
	for _, c := range pr.Enc {
		if n, found := lswEnc[c.String()]; found {
			enc = append(enc, n)
		}
	}
	aead := pr.Enc[0].AEAD()
	switch {
	case aead && !esp:
		for _, h := range pr.PRF {
			if n, found := lswHash[h]; found && h != "aesxcbc" {
				hash = append(hash, n)
			}
		}
	case !aead:
		for _, h := range pr.Integ {
			if n, found := lswHash[h]; found {
				hash = append(hash, n)
			}
		}
		// One list serves as integrity and PRF: a proposal whose PRFs differ from its
		// integrity algorithms cannot be written.
		if !esp && !slices.Equal(pr.PRF, pr.Integ) && !slices.Equal(pr.PRF, slices.DeleteFunc(slices.Clone(pr.Integ), func(s string) bool { return s == "aesxcbc" })) {
			return "", false, "libreswan uses one algorithm as integrity and PRF"
		}
	}
	for _, d := range pr.DH {
		if lswDH[d.Number] {
			dh = append(dh, fmt.Sprintf("dh%d", d.Number))
		}
	}
	switch {
	case len(enc) == 0:
		return "", false, "no cipher libreswan offers"
	case (!aead || !esp) && len(hash) == 0:
		return "", false, "no integrity or PRF algorithm libreswan offers"
	case len(pr.DH) > 0 && len(dh) == 0:
		return "", false, "no key exchange method libreswan offers"
	}
	parts := []string{strings.Join(enc, "+")}
	switch {
	case len(hash) > 0:
		parts = append(parts, strings.Join(hash, "+"))
	case len(dh) > 0:
		// An AEAD ESP proposal with PFS names its (absent) integrity before the groups.
		parts = append(parts, "none")
	}
	if len(dh) > 0 {
		parts = append(parts, strings.Join(dh, "+"))
	}
	return strings.Join(parts, "-"), true, ""
}

// renderLibreswan writes a conn section for libreswan 4.x and 5.x (ipsec.conf, or a file
// in /etc/ipsec.d) and, as a comment, the ipsec.secrets line.
func renderLibreswan(p *Peer) (string, error) {
	var ike, skipped []string
	for _, pr := range p.IKE {
		s, ok, why := lswProposal(pr, false)
		if !ok {
			skipped = append(skipped, "IKE proposal "+pr.Raw+" ("+why+")")
			continue
		}
		ike = append(ike, s)
	}
	if len(ike) == 0 {
		return "", notExpressible("libreswan", "IKE", p.IKE, []string{"its IKE proposals take AES (CBC, CTR, GCM-16), Camellia, ChaCha20-Poly1305 or 3DES with SHA-1/SHA-2, MD5 or AES-XCBC, one list as integrity and PRF, and MODP 1536-8192, ECP 256/384/521 or Curve25519"},
			"Add a proposal libreswan can express to spec.tunnels["+p.Tunnel+"].ike.proposals, for example aes256gcm16-prfsha384-ecp384.")
	}
	// libreswan's esp= cannot mix proposals with and without key exchange methods. With
	// pfs=yes a rekey carries one of the listed groups (the first exchange, inside
	// IKE_AUTH, never does); the gateway's proposals without a group are then left out.
	var withDH, withoutDH []Proposal
	for _, pr := range p.ESP {
		if len(pr.DH) > 0 {
			withDH = append(withDH, pr)
		} else {
			withoutDH = append(withoutDH, pr)
		}
	}
	var esp []string
	pfs := len(withDH) > 0
	use, drop := withoutDH, withDH
	if pfs {
		use, drop = withDH, withoutDH
	}
	for _, pr := range use {
		s, ok, why := lswProposal(pr, true)
		if !ok {
			skipped = append(skipped, "ESP proposal "+pr.Raw+" ("+why+")")
			continue
		}
		if !slices.Contains(esp, s) {
			esp = append(esp, s)
		}
	}
	if pfs && len(esp) == 0 {
		// None of the PFS proposals fits: fall back to those without PFS.
		pfs, use, drop = false, withoutDH, nil
		for _, pr := range use {
			if s, ok, _ := lswProposal(pr, true); ok && !slices.Contains(esp, s) {
				esp = append(esp, s)
			}
		}
	}
	for _, pr := range drop {
		if pfs {
			skipped = append(skipped, "ESP proposal "+pr.Raw+" (without PFS: libreswan offers PFS at every rekey, and its esp= cannot mix proposals with and without a group)")
		} else {
			skipped = append(skipped, "ESP proposal "+pr.Raw)
		}
	}
	if len(esp) == 0 {
		return "", notExpressible("libreswan", "ESP", p.ESP, []string{"its ESP proposals take AES (CBC, CTR, GCM-16), Camellia, ChaCha20-Poly1305 or 3DES with SHA-1/SHA-2, MD5 or AES-XCBC, and MODP 1536-8192, ECP 256/384/521 or Curve25519 for PFS"},
			"Add a proposal libreswan can express to spec.tunnels["+p.Tunnel+"].esp.proposals, for example aes256gcm16-ecp384.")
	}
	for _, l := range []struct {
		what string
		v    int64
	}{{"ike.lifetime", p.IKELifetime}, {"esp.lifetime", p.ESPLifetime}} {
		if l.v > lswMaxLifetime {
			return "", fmt.Errorf("%w: libreswan takes lifetimes of at most %ds; spec.tunnels[%s].%s is %ds", ErrNotExpressible, lswMaxLifetime, p.Tunnel, l.what, l.v)
		}
	}

	name := lswName(p)
	var b strings.Builder
	b.WriteString(summary(p, "#"))
	b.WriteString("# libreswan 4.x or 5.x: save as /etc/ipsec.d/" + name + ".conf and the secret (below) as\n")
	b.WriteString("# /etc/ipsec.d/" + name + ".secrets (mode 0600), then: ipsec auto --add " + name + " && ipsec auto --up " + name + "\n")
	b.WriteString("# (libreswan 5: ipsec add " + name + " && ipsec up " + name + ").\n")
	for _, s := range skipped {
		b.WriteString("# Left out: " + s + ".\n")
	}
	ln := func(k, v string) { b.WriteString("\t" + k + "=" + v + "\n") }
	b.WriteString("conn " + name + "\n")
	// IKEv2 is the default of both versions (4.x: ikev2=yes, 5.x: keyexchange=ikev2);
	// neither keyword is valid in the other version, so neither is written.
	ln("authby", "secret")
	// The local address the default route leaves from: the client's public address, or
	// its private one behind a NAT (the gateway identifies it by leftid either way).
	ln("left", "%defaultroute")
	ln("leftid", lswID(p.LocalID, p.LocalIDType))
	lswSubnets(ln, "left", p.LocalSubnets)
	ln("right", p.GatewayAddress.String())
	ln("rightid", p.GatewayAddress.String())
	lswSubnets(ln, "right", p.remoteSubnets())
	ln("ike", strings.Join(ike, ","))
	ln("esp", strings.Join(esp, ","))
	ln("pfs", map[bool]string{true: "yes", false: "no"}[pfs])
	ln("ikelifetime", fmt.Sprintf("%ds", p.IKELifetime))
	ln("salifetime", fmt.Sprintf("%ds", p.ESPLifetime))
	if m := min(p.IKELifetime, p.ESPLifetime); m < 2*lswDefaultMargin {
		// The rekey must start (margin plus up to 100% fuzz) within the shorter lifetime.
		ln("rekeymargin", fmt.Sprintf("%ds", max(m/3, 1)))
	}
	if p.DPDDelay > lswDefaultDPDDelay {
		// IKEv2 liveness checks; a peer that stops answering is declared dead after
		// retransmit-timeout (60 s) and the connection is restarted (auto=start).
		ln("dpddelay", fmt.Sprintf("%ds", p.DPDDelay))
		// 4.x holds a dead connection by default; 5.x restarts it by itself and ignores
		// the keyword with a warning ("obsolete keyword ignored").
		b.WriteString("\t# libreswan 4: restart when the gateway stops answering (5 does so by itself).\n")
		ln("dpdaction", "restart")
	}
	// libreswan's code defaults to no, whatever ipsec.conf(5) says: without it a
	// restarted client leaves its old SAs on the gateway until DPD gives them up (seen
	// with 4.10 and 5.2 in the kernel VM test); with it the gateway replaces them at once.
	ln("initial-contact", "yes")
	ln("auto", "start")
	b.WriteString("\n")
	secret := "<pre-shared key>"
	if p.PSK != "" {
		// Base64 (libreswan's 0s prefix): no key content can break the file's syntax.
		secret = "0s" + base64.StdEncoding.EncodeToString([]byte(p.PSK))
	} else {
		b.WriteString("# Replace <pre-shared key> with the key from " + p.PSKSource + ".\n")
	}
	b.WriteString("# " + name + ".secrets:\n")
	b.WriteString(LibreswanSecretsPrefix + lswID(p.LocalID, p.LocalIDType) + " " + p.GatewayAddress.String() + " : PSK " + secret + "\n")
	return b.String(), nil
}

// LibreswanSecretsPrefix starts the ipsec.secrets line in the libreswan output (a comment,
// so the output can be saved as a conn file as it is).
const LibreswanSecretsPrefix = "#   "

// LibreswanSecrets extracts the ipsec.secrets line from the libreswan output.
func LibreswanSecrets(out string) (string, bool) {
	_, after, ok := strings.Cut(out, ".secrets:\n"+LibreswanSecretsPrefix)
	if !ok {
		return "", false
	}
	line, _, _ := strings.Cut(after, "\n")
	return line + "\n", true
}

// lswSubnets writes one subnet as <side>subnet and several as <side>subnets (one child SA
// each, the syntax both 4.x and 5.x read).
func lswSubnets(ln func(k, v string), side string, subnets []netip.Prefix) {
	if len(subnets) == 1 {
		ln(side+"subnet", subnets[0].String())
		return
	}
	var s []string
	for _, x := range subnets {
		s = append(s, x.String())
	}
	ln(side+"subnets", "{"+strings.Join(s, " ")+"}")
}
