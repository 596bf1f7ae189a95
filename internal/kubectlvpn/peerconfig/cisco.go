package peerconfig

import (
	"fmt"
	"slices"
	"strings"
)

// Cisco IOS XE vocabulary (IOS XE Security Configuration Guide, "Configuring Internet Key
// Exchange Version 2" and "Configuring Security for VPNs with IPsec").
var (
	ciscoIKEEnc = map[string]string{"aes128": "aes-cbc-128", "aes192": "aes-cbc-192", "aes256": "aes-cbc-256",
		"aes128gcm16": "aes-gcm-128", "aes256gcm16": "aes-gcm-256"}
	ciscoHashes    = map[string]bool{"md5": true, "sha1": true, "sha256": true, "sha384": true, "sha512": true}
	ciscoGroups    = map[int]bool{1: true, 2: true, 5: true, 14: true, 15: true, 16: true, 19: true, 20: true, 21: true, 24: true}
	ciscoESPEnc    = map[string]string{"aes128": "esp-aes 128", "aes192": "esp-aes 192", "aes256": "esp-aes 256", "aes128gcm16": "esp-gcm 128", "aes256gcm16": "esp-gcm 256"}
	ciscoESPInteg  = map[string]string{"md5": "esp-md5-hmac", "sha1": "esp-sha-hmac", "sha256": "esp-sha256-hmac", "sha384": "esp-sha384-hmac", "sha512": "esp-sha512-hmac"}
	ciscoIKELife   = [2]int64{120, 86400}
	ciscoESPLife   = [2]int64{120, 2592000}
	ciscoDPDMin    = int64(10)
	ciscoDPDMax    = int64(3600)
	ciscoPSKMaxLen = 128
)

type ciscoIKEProposal struct {
	enc, integ, prf []string
	groups          []int
}

func renderCiscoIOSXE(p *Peer) (string, error) {
	var ike []ciscoIKEProposal
	var skipped []string
	for _, pr := range p.IKE {
		var cp ciscoIKEProposal
		for _, c := range pr.Enc {
			if e, ok := ciscoIKEEnc[c.String()]; ok {
				cp.enc = append(cp.enc, e)
			}
		}
		if !pr.Enc[0].AEAD() {
			for _, h := range pr.Integ {
				if ciscoHashes[h] {
					cp.integ = append(cp.integ, h)
				}
			}
		}
		for _, h := range pr.PRF {
			if ciscoHashes[h] {
				cp.prf = append(cp.prf, h)
			}
		}
		for _, d := range pr.DH {
			if ciscoGroups[d.Number] {
				cp.groups = append(cp.groups, d.Number)
			}
		}
		if len(cp.enc) == 0 || len(cp.prf) == 0 || len(cp.groups) == 0 || (!pr.Enc[0].AEAD() && len(cp.integ) == 0) {
			skipped = append(skipped, "IKE proposal "+pr.Raw)
			continue
		}
		ike = append(ike, cp)
	}
	if len(ike) == 0 {
		return "", notExpressible("Cisco IOS XE", "IKE", p.IKE, []string{"its IKEv2 proposals take AES-CBC or AES-GCM-16 (128/256) with SHA-1/SHA-2 and DH groups 1, 2, 5, 14, 15, 16, 19, 20, 21, 24"},
			"Add a proposal IOS XE can express to spec.tunnels["+p.Tunnel+"].ike.proposals, for example aes256gcm16-prfsha384-ecp384.")
	}
	var transforms []string
	var pfs int
	for _, pr := range p.ESP {
		var sets []string
		for _, c := range pr.Enc {
			e, ok := ciscoESPEnc[c.String()]
			if !ok {
				continue
			}
			if c.AEAD() {
				sets = append(sets, e)
				continue
			}
			for _, h := range pr.Integ {
				if i, ok := ciscoESPInteg[h]; ok {
					sets = append(sets, e+" "+i)
				}
			}
		}
		group := 0
		if len(pr.DH) > 0 {
			for _, d := range pr.DH {
				if ciscoGroups[d.Number] {
					group = d.Number
					break
				}
			}
			if group == 0 {
				sets = nil
			}
		}
		// A crypto map entry carries one PFS setting: proposals that disagree with the
		// first usable one's are left out.
		if len(sets) > 0 && len(transforms) > 0 && group != pfs {
			sets = nil
		}
		if len(sets) == 0 {
			skipped = append(skipped, "ESP proposal "+pr.Raw)
			continue
		}
		if len(transforms) == 0 {
			pfs = group
		}
		for _, s := range sets {
			if !slices.Contains(transforms, s) {
				transforms = append(transforms, s)
			}
		}
	}
	if len(transforms) == 0 {
		return "", notExpressible("Cisco IOS XE", "ESP", p.ESP, []string{"its transform sets take esp-aes (128/192/256) with esp-md5/sha/sha256/sha384/sha512-hmac or esp-gcm 128/256, PFS groups 1, 2, 5, 14, 15, 16, 19, 20, 21, 24"},
			"Add a proposal IOS XE can express to spec.tunnels["+p.Tunnel+"].esp.proposals, for example aes256gcm16-ecp384.")
	}
	if p.IKELifetime < ciscoIKELife[0] || p.IKELifetime > ciscoIKELife[1] {
		return "", fmt.Errorf("%w: IOS XE takes an IKEv2 lifetime of %d-%d seconds; spec.tunnels[%s].ike.lifetime is %ds", ErrNotExpressible, ciscoIKELife[0], ciscoIKELife[1], p.Tunnel, p.IKELifetime)
	}
	if p.ESPLifetime < ciscoESPLife[0] || p.ESPLifetime > ciscoESPLife[1] {
		return "", fmt.Errorf("%w: IOS XE takes an IPsec SA lifetime of %d-%d seconds; spec.tunnels[%s].esp.lifetime is %ds", ErrNotExpressible, ciscoESPLife[0], ciscoESPLife[1], p.Tunnel, p.ESPLifetime)
	}
	if p.PSK != "" && (len(p.PSK) > ciscoPSKMaxLen || strings.ContainsFunc(p.PSK, func(r rune) bool { return r <= 0x20 || r == 0x7f || r == '?' })) {
		return "", fmt.Errorf("%w: IOS XE takes a pre-shared key of at most %d printable characters without spaces or '?'; this tunnel's key does not fit", ErrNotExpressible, ciscoPSKMaxLen)
	}

	name := "BNERD-" + strings.ToUpper(p.Tunnel)
	var b strings.Builder
	b.WriteString(summary(p, "!"))
	b.WriteString("! IOS XE, policy-based (crypto map). Replace <wan-interface>, and exempt the\n")
	b.WriteString("! traffic selectors above from your NAT.\n")
	for _, s := range skipped {
		b.WriteString("! " + s + " left out: IOS XE cannot express it here.\n")
	}
	if p.PSK == "" {
		b.WriteString("! Replace <pre-shared-key> with the key from " + p.PSKSource + ".\n")
	}
	dpd := p.DPDDelay
	if dpd < ciscoDPDMin {
		dpd = ciscoDPDMin
		b.WriteString(fmt.Sprintf("! DPD every %ds on the gateway; IOS XE's minimum is %ds.\n", p.DPDDelay, ciscoDPDMin))
	}
	if dpd > ciscoDPDMax {
		dpd = ciscoDPDMax
	}
	ln := func(s string) { b.WriteString(s + "\n") }

	var propNames []string
	for i, cp := range ike {
		n := fmt.Sprintf("%s-%d", name, i+1)
		propNames = append(propNames, n)
		ln("crypto ikev2 proposal " + n)
		ln(" encryption " + strings.Join(cp.enc, " "))
		if len(cp.integ) > 0 {
			ln(" integrity " + strings.Join(cp.integ, " "))
		}
		ln(" prf " + strings.Join(cp.prf, " "))
		ln(" group " + joinInts(cp.groups))
		ln("!")
	}
	ln("crypto ikev2 policy " + name)
	ln(" proposal " + strings.Join(propNames, " "))
	ln("!")
	ln("crypto ikev2 keyring " + name)
	ln(" peer bnerd-gateway")
	ln("  address " + p.GatewayAddress.String())
	if p.PSK == "" {
		ln("  pre-shared-key <pre-shared-key>")
	} else {
		ln("  pre-shared-key " + p.PSK)
	}
	ln(" !")
	ln("!")
	ln("crypto ikev2 profile " + name)
	ln(" match identity remote address " + p.GatewayAddress.String() + " 255.255.255.255")
	switch p.LocalIDType {
	case IDAddress:
		ln(" identity local address " + p.LocalID)
	case IDFQDN:
		ln(" identity local fqdn " + p.LocalID)
	case IDUserFQDN:
		ln(" identity local email " + p.LocalID)
	}
	ln(" authentication remote pre-share")
	ln(" authentication local pre-share")
	ln(" keyring local " + name)
	ln(fmt.Sprintf(" lifetime %d", p.IKELifetime))
	ln(fmt.Sprintf(" dpd %d 5 on-demand", dpd))
	ln("!")
	var tsNames []string
	for i, t := range transforms {
		n := fmt.Sprintf("%s-%d", name, i+1)
		tsNames = append(tsNames, n)
		ln("crypto ipsec transform-set " + n + " " + t)
		ln(" mode tunnel")
		ln("!")
	}
	ln("ip access-list extended " + name)
	for _, s := range p.LocalSubnets {
		ln(fmt.Sprintf(" permit ip %s %s %s %s", s.Addr(), wildcard(s), p.RemoteSubnet.Addr(), wildcard(p.RemoteSubnet)))
	}
	ln("!")
	ln("crypto map " + name + " 10 ipsec-isakmp")
	ln(" set peer " + p.GatewayAddress.String())
	ln(" set transform-set " + strings.Join(tsNames, " "))
	if pfs != 0 {
		ln(fmt.Sprintf(" set pfs group%d", pfs))
	}
	ln(fmt.Sprintf(" set security-association lifetime seconds %d", p.ESPLifetime))
	ln(" set ikev2-profile " + name)
	ln(" match address " + name)
	ln("!")
	ln("interface <wan-interface>")
	ln(" crypto map " + name)
	ln("!")
	return b.String(), nil
}
