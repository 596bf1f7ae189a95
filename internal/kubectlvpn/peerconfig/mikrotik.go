package peerconfig

import (
	"fmt"
	"slices"
	"strings"
)

// RouterOS 7 vocabulary (RouterOS manual, IPsec: Profiles, Peers, Identities, Proposals,
// Policies). The IKE profile has AES-CBC only and one hash algorithm; ESP proposals also
// take AES-GCM; neither offers SHA-384 as an integrity algorithm.
var (
	rosProfileEnc = map[string]string{"aes128": "aes-128", "aes192": "aes-192", "aes256": "aes-256", "3des": "3des",
		"camellia128": "camellia-128", "camellia192": "camellia-192", "camellia256": "camellia-256"}
	rosHashes   = map[string]bool{"md5": true, "sha1": true, "sha256": true, "sha512": true}
	rosPRFs     = map[string]bool{"sha1": true, "sha256": true, "sha384": true, "sha512": true}
	rosDHGroups = map[string]bool{"modp768": true, "modp1024": true, "modp1536": true, "modp2048": true, "modp3072": true,
		"modp4096": true, "modp6144": true, "modp8192": true, "ecp256": true, "ecp384": true, "ecp521": true}
	rosESPEnc = map[string]string{"aes128": "aes-128-cbc", "aes192": "aes-192-cbc", "aes256": "aes-256-cbc",
		"aes128ctr": "aes-128-ctr", "aes192ctr": "aes-192-ctr", "aes256ctr": "aes-256-ctr",
		"aes128gcm16": "aes-128-gcm", "aes192gcm16": "aes-192-gcm", "aes256gcm16": "aes-256-gcm", "3des": "3des",
		"camellia128": "camellia-128", "camellia192": "camellia-192", "camellia256": "camellia-256"}
)

// rosString quotes a RouterOS string: backslash, quote, $ (variable expansion) and ?
// (the console's help key) are escaped; control characters cannot be written.
func rosString(s string) (string, error) {
	if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "", fmt.Errorf("contains control characters")
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`, `?`, `\?`).Replace(s) + `"`, nil
}

func renderMikroTik(p *Peer) (string, error) {
	// The profile: the first IKE proposal RouterOS can express in full.
	var encs, dh []string
	var hash, prf, used string
	var skipped []string
	for _, pr := range p.IKE {
		if pr.Enc[0].AEAD() {
			skipped = append(skipped, "IKE proposal "+pr.Raw+" (RouterOS's IKE profile has no AEAD cipher)")
			continue
		}
		var e, d []string
		for _, c := range pr.Enc {
			if n, ok := rosProfileEnc[c.String()]; ok {
				e = append(e, n)
			}
		}
		h := ""
		for _, i := range pr.Integ {
			if rosHashes[i] {
				h = i
				break
			}
		}
		for _, g := range pr.DH {
			if rosDHGroups[g.Name] {
				d = append(d, g.Name)
			}
		}
		if len(e) == 0 || h == "" || len(d) == 0 {
			skipped = append(skipped, "IKE proposal "+pr.Raw+" (no cipher, hash or DH group RouterOS's IKE profile offers)")
			continue
		}
		if used != "" {
			skipped = append(skipped, "IKE proposal "+pr.Raw+" (a RouterOS profile carries one proposal; "+used+" is used)")
			continue
		}
		encs, dh, hash, used = e, d, h, pr.Raw
		prf = "auto"
		for _, x := range pr.PRF {
			if rosPRFs[x] {
				prf = x
				break
			}
		}
	}
	if used == "" {
		return "", notExpressible("RouterOS", "IKE", p.IKE, []string{"its IKE profile offers AES-CBC (128/192/256), 3DES or Camellia with one of MD5, SHA-1, SHA-256, SHA-512, and MODP or ECP 256/384/521 groups; no AES-GCM and no SHA-384"},
			"Add a proposal RouterOS can express to spec.tunnels["+p.Tunnel+"].ike.proposals, for example aes256-sha256-ecp384 (the gateway accepts any proposal of its list).")
	}

	// The proposal: every ESP proposal RouterOS can express that agrees on the PFS group
	// with the first one (a RouterOS proposal has one pfs-group).
	var espEnc, espAuth []string
	pfs, espUsed := "", false
	for _, pr := range p.ESP {
		var e, a []string
		for _, c := range pr.Enc {
			if n, ok := rosESPEnc[c.String()]; ok {
				e = append(e, n)
			}
		}
		if !pr.Enc[0].AEAD() {
			for _, i := range pr.Integ {
				if rosHashes[i] {
					a = append(a, i)
				}
			}
		}
		group := "none"
		if len(pr.DH) > 0 {
			group = ""
			for _, g := range pr.DH {
				if rosDHGroups[g.Name] {
					group = g.Name
					break
				}
			}
		}
		switch {
		case len(e) == 0 || group == "" || (!pr.Enc[0].AEAD() && len(a) == 0):
			skipped = append(skipped, "ESP proposal "+pr.Raw+" (no cipher, integrity or PFS group a RouterOS proposal offers)")
			continue
		case espUsed && group != pfs:
			skipped = append(skipped, "ESP proposal "+pr.Raw+" (a RouterOS proposal has one PFS group, "+pfs+")")
			continue
		}
		espUsed, pfs = true, group
		for _, x := range e {
			if !slices.Contains(espEnc, x) {
				espEnc = append(espEnc, x)
			}
		}
		for _, x := range a {
			if !slices.Contains(espAuth, x) {
				espAuth = append(espAuth, x)
			}
		}
	}
	if !espUsed {
		return "", notExpressible("RouterOS", "ESP", p.ESP, []string{"its proposals offer AES-CBC/CTR/GCM, 3DES or Camellia with MD5, SHA-1, SHA-256 or SHA-512 and MODP or ECP 256/384/521 PFS groups; no SHA-384"},
			"Add a proposal RouterOS can express to spec.tunnels["+p.Tunnel+"].esp.proposals, for example aes256gcm16-ecp384.")
	}
	secret := `"<pre-shared key>"`
	if p.PSK != "" {
		s, err := rosString(p.PSK)
		if err != nil {
			return "", fmt.Errorf("%w: RouterOS cannot take this tunnel's pre-shared key: it %v", ErrNotExpressible, err)
		}
		secret = s
	}
	myID, _ := rosString(map[IDType]string{IDAddress: "address:", IDFQDN: "fqdn:", IDUserFQDN: "user-fqdn:"}[p.LocalIDType] + p.LocalID)

	name := "bnerd-" + p.Tunnel
	var b strings.Builder
	b.WriteString(summary(p, "#"))
	b.WriteString("# RouterOS 7, policy-based. Paste into the terminal or import as a script.\n")
	for _, s := range skipped {
		b.WriteString("# Left out: " + s + ".\n")
	}
	if p.PSK == "" {
		b.WriteString("# Replace <pre-shared key> with the key from " + p.PSKSource + ".\n")
	}
	ln := func(s string) { b.WriteString(s + "\n") }
	ln(fmt.Sprintf("/ip ipsec profile add name=%s enc-algorithm=%s hash-algorithm=%s prf-algorithm=%s dh-group=%s lifetime=%ds dpd-interval=%ds dpd-maximum-failures=5 nat-traversal=yes",
		name, strings.Join(encs, ","), hash, prf, strings.Join(dh, ","), p.IKELifetime, p.DPDDelay))
	ln(fmt.Sprintf("/ip ipsec peer add name=%s address=%s/32 profile=%s exchange-mode=ike2 send-initial-contact=yes", name, p.GatewayAddress, name))
	ln(fmt.Sprintf("/ip ipsec identity add peer=%s auth-method=pre-shared-key secret=%s my-id=%s remote-id=\"address:%s\" generate-policy=no",
		name, secret, myID, p.GatewayAddress))
	prop := fmt.Sprintf("/ip ipsec proposal add name=%s enc-algorithms=%s", name, strings.Join(espEnc, ","))
	if len(espAuth) > 0 {
		prop += " auth-algorithms=" + strings.Join(espAuth, ",")
	}
	ln(prop + fmt.Sprintf(" pfs-group=%s lifetime=%ds", pfs, p.ESPLifetime))
	for _, s := range p.LocalSubnets {
		ln(fmt.Sprintf("/ip ipsec policy add peer=%s tunnel=yes src-address=%s dst-address=%s proposal=%s action=encrypt level=unique", name, s, p.RemoteSubnet, name))
	}
	for _, s := range p.LocalSubnets {
		ln(fmt.Sprintf("/ip firewall nat add chain=srcnat action=accept src-address=%s dst-address=%s place-before=0 comment=%q", s, p.RemoteSubnet, name+": no NAT into the tunnel"))
	}
	return b.String(), nil
}
