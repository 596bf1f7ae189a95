package peerconfig

import (
	"fmt"
	"slices"
	"strings"
)

// pfSense 2.5+ vocabulary: the labels of VPN > IPsec > Tunnels (the $p1_ealgos,
// $p2_ealgos, $p1_halgos, $p2_halgos, $p1_dhgroups and $p2_pfskeygroups lists of
// pfSense's ipsec.inc). pfSense keeps IPsec in its XML configuration and has no CLI for
// it, so the output is the form's fields in order, to be typed in.
var (
	pfCipher = map[string]string{"aes": "AES", "aesgcm128": "AES128-GCM", "aesgcm192": "AES192-GCM", "aesgcm256": "AES256-GCM", "3des": "3DES"}
	pfHashes = map[string]string{"md5": "MD5", "sha1": "SHA1", "sha256": "SHA256", "sha384": "SHA384", "sha512": "SHA512", "aesxcbc": "AES-XCBC"}
	pfGroups = map[int]string{1: "1 (768 bit)", 2: "2 (1024 bit)", 5: "5 (1536 bit)", 14: "14 (2048 bit)", 15: "15 (3072 bit)",
		16: "16 (4096 bit)", 17: "17 (6144 bit)", 18: "18 (8192 bit)", 19: "19 (nist ecp256)", 20: "20 (nist ecp384)",
		21: "21 (nist ecp521)", 22: "22 (1024(sub 160) bit)", 23: "23 (2048(sub 224) bit)", 24: "24 (2048(sub 256) bit)",
		25: "25 (nist ecp192)", 26: "26 (nist ecp224)", 27: "27 (brainpool ecp224)", 28: "28 (brainpool ecp256)",
		29: "29 (brainpool ecp384)", 30: "30 (brainpool ecp512)", 31: "31 (Elliptic Curve 25519, 256 bit)",
		32: "32 (Elliptic Curve 25519, 448 bit)"}
)

// pfAlgorithm is the pfSense label and key length field of a cipher ("" when pfSense has
// no such algorithm). For AES-GCM the length is the ICV's, in bits.
func pfAlgorithm(c Cipher) (string, string) {
	switch c.Name {
	case "aes":
		return pfCipher["aes"], fmt.Sprintf("%d bits", c.KeyBits)
	case "aesgcm":
		return pfCipher[fmt.Sprintf("aesgcm%d", c.KeyBits)], fmt.Sprintf("%d bits", c.ICV*8)
	case "3des":
		return pfCipher["3des"], ""
	}
	return "", ""
}

func renderPfSense(p *Peer) (string, error) {
	type p1row struct{ alg, keylen, hash, dh string }
	var rows []p1row
	var skipped []string
	for _, pr := range p.IKE {
		n := len(rows)
		for _, c := range pr.Enc {
			alg, kl := pfAlgorithm(c)
			if alg == "" {
				continue
			}
			// With AES-GCM pfSense uses the row's hash as the PRF.
			hashes := pr.Integ
			if c.AEAD() {
				hashes = pr.PRF
			}
			for _, h := range hashes {
				if pfHashes[h] == "" {
					continue
				}
				for _, d := range pr.DH {
					if pfGroups[d.Number] != "" {
						rows = append(rows, p1row{alg, kl, pfHashes[h], pfGroups[d.Number]})
					}
				}
			}
		}
		if len(rows) == n {
			skipped = append(skipped, "IKE proposal "+pr.Raw)
		}
	}
	if len(rows) == 0 {
		return "", notExpressible("pfSense", "IKE", p.IKE, []string{"its phase 1 offers AES, AES-GCM (128/192/256) and 3DES with MD5, SHA-1, SHA-2 or AES-XCBC"},
			"Add a proposal pfSense can express to spec.tunnels["+p.Tunnel+"].ike.proposals, for example aes256gcm16-prfsha384-ecp384.")
	}
	var encs, hashes []string
	pfs := ""
	for _, pr := range p.ESP {
		var e, h []string
		for _, c := range pr.Enc {
			if alg, kl := pfAlgorithm(c); alg != "" {
				e = append(e, strings.TrimSpace(alg+" "+kl))
			}
		}
		if !pr.Enc[0].AEAD() {
			for _, x := range pr.Integ {
				if pfHashes[x] != "" {
					h = append(h, pfHashes[x])
				}
			}
		}
		group := "off"
		if len(pr.DH) > 0 {
			group = pfGroups[pr.DH[0].Number]
		}
		if len(e) == 0 || group == "" || (!pr.Enc[0].AEAD() && len(h) == 0) || (pfs != "" && group != pfs) {
			skipped = append(skipped, "ESP proposal "+pr.Raw)
			continue
		}
		pfs = group
		for _, x := range e {
			if !slices.Contains(encs, x) {
				encs = append(encs, x)
			}
		}
		for _, x := range h {
			if !slices.Contains(hashes, x) {
				hashes = append(hashes, x)
			}
		}
	}
	if len(encs) == 0 {
		return "", notExpressible("pfSense", "ESP", p.ESP, []string{"its phase 2 offers AES, AES-GCM (128/192/256) and 3DES with MD5, SHA-1, SHA-2 or AES-XCBC and one PFS group"},
			"Add a proposal pfSense can express to spec.tunnels["+p.Tunnel+"].esp.proposals, for example aes256gcm16-ecp384.")
	}

	var b strings.Builder
	b.WriteString(summary(p, "#"))
	b.WriteString("# pfSense 2.5 or later: VPN > IPsec > Tunnels. Enter these fields; leave the others at their defaults.\n")
	for _, s := range skipped {
		b.WriteString("# " + s + " left out: pfSense cannot express it here.\n")
	}
	field := func(k, v string) { b.WriteString(fmt.Sprintf("  %-24s %s\n", k+":", v)) }
	b.WriteString("\n[Add P1]\n")
	field("Description", "bnerd "+p.Tunnel)
	field("Key Exchange version", "IKEv2")
	field("Internet Protocol", "IPv4")
	field("Interface", "WAN")
	field("Remote Gateway", p.GatewayAddress.String())
	field("Authentication Method", "Mutual PSK")
	switch p.LocalIDType {
	case IDAddress:
		field("My identifier", "IP address: "+p.LocalID)
	case IDFQDN:
		field("My identifier", "Distinguished name: "+p.LocalID)
	case IDUserFQDN:
		field("My identifier", "User distinguished name: "+p.LocalID)
	}
	field("Peer identifier", "IP address: "+p.GatewayAddress.String())
	if p.PSK == "" {
		field("Pre-Shared Key", "<pre-shared key from "+p.PSKSource+">")
	} else {
		field("Pre-Shared Key", p.PSK)
	}
	for i, r := range rows {
		v := r.alg
		if r.keylen != "" {
			v += ", Key length " + r.keylen
		}
		field(fmt.Sprintf("Encryption Algorithm %d", i+1), v+", Hash "+r.hash+", DH Group "+r.dh)
	}
	field("Life Time", fmt.Sprint(p.IKELifetime))
	field("NAT Traversal", "Auto")
	field("Dead Peer Detection", fmt.Sprintf("Enable DPD, Delay %d, Max failures 5", p.DPDDelay))
	for i, s := range p.LocalSubnets {
		b.WriteString(fmt.Sprintf("\n[Add P2 %d of %d] (under the P1 above)\n", i+1, len(p.LocalSubnets)))
		field("Description", fmt.Sprintf("bnerd %s %d", p.Tunnel, i+1))
		field("Mode", "Tunnel IPv4")
		field("Local Network", fmt.Sprintf("Network: %s / %d", s.Addr(), s.Bits()))
		field("NAT/BINAT translation", "None")
		field("Remote Network", fmt.Sprintf("Network: %s / %d", p.RemoteSubnet.Addr(), p.RemoteSubnet.Bits()))
		field("Protocol", "ESP")
		field("Encryption Algorithms", strings.Join(encs, "; "))
		if len(hashes) > 0 {
			field("Hash Algorithms", strings.Join(hashes, ", "))
		}
		field("PFS key group", pfs)
		field("Life Time", fmt.Sprint(p.ESPLifetime))
	}
	if len(p.ReverseExposures) > 0 {
		b.WriteString("\nThen add a rule on Firewall > Rules > IPsec: pass from " + p.SNATSource.String() + " to the reverse exposures' targets above.\n")
	}
	return b.String(), nil
}
