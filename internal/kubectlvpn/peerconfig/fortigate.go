package peerconfig

import (
	"fmt"
	"slices"
	"strings"
)

// FortiOS vocabulary (FortiOS CLI reference, config vpn ipsec phase1-interface and
// phase2-interface): phase 1 proposals are <cipher>-<hash> for classic ciphers and
// <aead>-prf<hash> for AEAD ones; phase 2 proposals are <cipher>-<hash> or the bare AEAD
// name; DH groups by number.
var (
	fortiP1Ciphers   = map[string]string{"aes128": "aes128", "aes192": "aes192", "aes256": "aes256", "3des": "3des"}
	fortiP1AEAD      = map[string]string{"aes128gcm16": "aes128gcm", "aes256gcm16": "aes256gcm", "chacha20poly1305": "chacha20poly1305"}
	fortiHashes      = map[string]bool{"md5": true, "sha1": true, "sha256": true, "sha384": true, "sha512": true}
	fortiP2AEAD      = map[string]string{"aes128gcm16": "aes128gcm", "aes256gcm16": "aes256gcm", "chacha20poly1305": "chacha20poly1305"}
	fortiDHGroups    = map[int]bool{1: true, 2: true, 5: true, 14: true, 15: true, 16: true, 17: true, 18: true, 19: true, 20: true, 21: true, 27: true, 28: true, 29: true, 30: true, 31: true, 32: true}
	fortiKeylifeMin  = int64(120)
	fortiKeylifeMax  = int64(172800)
	fortiMaxNameP1   = 15
	fortiPSKMaxBytes = 128
)

// fortiProposals maps strongSwan proposals to FortiOS proposal names and DH numbers.
func fortiProposals(props []Proposal, phase2 bool) (names []string, dh []int, skipped []string) {
	for _, p := range props {
		var out []string
		for _, c := range p.Enc {
			if c.AEAD() {
				table := fortiP1AEAD
				if phase2 {
					table = fortiP2AEAD
				}
				n, ok := table[c.String()]
				if !ok {
					continue
				}
				if phase2 {
					out = append(out, n)
					continue
				}
				for _, prf := range p.PRF {
					if fortiHashes[prf] {
						out = append(out, n+"-prf"+prf)
					}
				}
				continue
			}
			n, ok := fortiP1Ciphers[c.String()]
			if !ok {
				continue
			}
			for _, h := range p.Integ {
				if fortiHashes[h] {
					out = append(out, n+"-"+h)
				}
			}
		}
		var groups []int
		for _, d := range p.DH {
			if fortiDHGroups[d.Number] {
				groups = append(groups, d.Number)
			}
		}
		if len(out) == 0 || (!phase2 && len(groups) == 0) || (phase2 && len(p.DH) > 0 && len(groups) == 0) {
			skipped = append(skipped, p.Raw)
			continue
		}
		for _, n := range out {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		for _, g := range groups {
			if !slices.Contains(dh, g) {
				dh = append(dh, g)
			}
		}
	}
	return names, dh, skipped
}

func fortiString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

func renderFortiGate(p *Peer) (string, error) {
	p1, p1dh, p1skip := fortiProposals(p.IKE, false)
	if len(p1) == 0 {
		return "", notExpressible("FortiOS", "IKE", p.IKE, []string{"phase 1 takes AES-CBC/3DES with MD5/SHA-1/SHA-2, AES-GCM-16 (128 or 256 bit) or ChaCha20-Poly1305 with a PRF, and DH groups 1, 2, 5, 14-21, 27-32"},
			"Add a proposal FortiOS can express to spec.tunnels["+p.Tunnel+"].ike.proposals, for example aes256gcm16-prfsha384-ecp384.")
	}
	p2, p2dh, p2skip := fortiProposals(p.ESP, true)
	if len(p2) == 0 {
		return "", notExpressible("FortiOS", "ESP", p.ESP, []string{"phase 2 takes AES-CBC with MD5/SHA-1/SHA-2, AES-GCM-16 (128 or 256 bit) or ChaCha20-Poly1305, and DH groups 1, 2, 5, 14-21, 27-32"},
			"Add a proposal FortiOS can express to spec.tunnels["+p.Tunnel+"].esp.proposals, for example aes256gcm16-ecp384.")
	}
	for _, l := range []struct {
		what string
		v    int64
	}{{"ike.lifetime", p.IKELifetime}, {"esp.lifetime", p.ESPLifetime}} {
		if l.v < fortiKeylifeMin || l.v > fortiKeylifeMax {
			return "", fmt.Errorf("%w: FortiOS takes key lifetimes of %d-%d seconds; spec.tunnels[%s].%s is %ds", ErrNotExpressible, fortiKeylifeMin, fortiKeylifeMax, p.Tunnel, l.what, l.v)
		}
	}
	if p.PSK != "" && (len(p.PSK) < 6 || len(p.PSK) > fortiPSKMaxBytes || strings.ContainsFunc(p.PSK, func(r rune) bool { return r < 0x20 || r == 0x7f })) {
		return "", fmt.Errorf("%w: FortiOS takes a pre-shared key of 6-%d printable characters; this tunnel's key does not fit", ErrNotExpressible, fortiPSKMaxBytes)
	}

	name := "bn-" + p.Tunnel
	if len(name) > fortiMaxNameP1 {
		name = name[:fortiMaxNameP1]
	}
	var b strings.Builder
	b.WriteString(summary(p, "#"))
	b.WriteString("# FortiOS 7.x, route-based (interface mode). Replace <wan-interface> and <lan-interface>.\n")
	for _, s := range p1skip {
		b.WriteString("# IKE proposal " + s + " left out: FortiOS cannot express it.\n")
	}
	for _, s := range p2skip {
		b.WriteString("# ESP proposal " + s + " left out: FortiOS cannot express it.\n")
	}
	if p.PSK == "" {
		b.WriteString("# Replace <pre-shared key> with the key from " + p.PSKSource + ".\n")
	}
	ln := func(indent int, s string) { b.WriteString(strings.Repeat("    ", indent) + s + "\n") }

	ln(0, "config vpn ipsec phase1-interface")
	ln(1, "edit "+fortiString(name))
	ln(2, `set interface "<wan-interface>"`)
	ln(2, "set ike-version 2")
	ln(2, "set remote-gw "+p.GatewayAddress.String())
	ln(2, "set peertype one")
	ln(2, "set peerid "+fortiString(p.GatewayAddress.String()))
	ln(2, "set localid-type "+map[IDType]string{IDAddress: "address", IDFQDN: "fqdn", IDUserFQDN: "user-fqdn"}[p.LocalIDType])
	ln(2, "set localid "+fortiString(p.LocalID))
	ln(2, "set net-device disable")
	ln(2, "set proposal "+strings.Join(p1, " "))
	ln(2, "set dhgrp "+joinInts(p1dh))
	ln(2, "set nattraversal enable")
	ln(2, fmt.Sprintf("set keylife %d", p.IKELifetime))
	ln(2, "set dpd on-idle")
	ln(2, fmt.Sprintf("set dpd-retryinterval %d", p.DPDDelay))
	ln(2, "set authmethod psk")
	if p.PSK == "" {
		ln(2, `set psksecret "<pre-shared key>"`)
	} else {
		ln(2, "set psksecret "+fortiString(p.PSK))
	}
	ln(1, "next")
	ln(0, "end")

	ln(0, "config vpn ipsec phase2-interface")
	for i, s := range p.LocalSubnets {
		ln(1, "edit "+fortiString(fmt.Sprintf("%s-%d", name, i+1)))
		ln(2, "set phase1name "+fortiString(name))
		ln(2, "set proposal "+strings.Join(p2, " "))
		if len(p2dh) > 0 {
			ln(2, "set pfs enable")
			ln(2, "set dhgrp "+joinInts(p2dh))
		} else {
			ln(2, "set pfs disable")
		}
		ln(2, fmt.Sprintf("set keylifeseconds %d", p.ESPLifetime))
		ln(2, "set auto-negotiate enable")
		ln(2, "set src-subnet "+s.Addr().String()+" "+mask(s))
		ln(2, "set dst-subnet "+p.RemoteSubnet.Addr().String()+" "+mask(p.RemoteSubnet))
		ln(1, "next")
	}
	ln(0, "end")

	ln(0, "config firewall address")
	ln(1, "edit "+fortiString(name+"-remote"))
	ln(2, "set subnet "+p.RemoteSubnet.Addr().String()+" "+mask(p.RemoteSubnet))
	ln(1, "next")
	var locals []string
	for i, s := range p.LocalSubnets {
		n := fmt.Sprintf("%s-local-%d", name, i+1)
		locals = append(locals, fortiString(n))
		ln(1, "edit "+fortiString(n))
		ln(2, "set subnet "+s.Addr().String()+" "+mask(s))
		ln(1, "next")
	}
	ln(0, "end")

	ln(0, "config router static")
	ln(1, "edit 0")
	ln(2, "set dst "+p.RemoteSubnet.Addr().String()+" "+mask(p.RemoteSubnet))
	ln(2, "set device "+fortiString(name))
	ln(1, "next")
	ln(0, "end")

	ln(0, "config firewall policy")
	ln(1, "edit 0")
	ln(2, "set name "+fortiString(name+"-out"))
	ln(2, `set srcintf "<lan-interface>"`)
	ln(2, "set dstintf "+fortiString(name))
	ln(2, "set srcaddr "+strings.Join(locals, " "))
	ln(2, "set dstaddr "+fortiString(name+"-remote"))
	ln(2, "set action accept")
	ln(2, `set schedule "always"`)
	ln(2, `set service "ALL"`)
	ln(1, "next")
	if len(p.ReverseExposures) > 0 {
		ln(1, "edit 0")
		ln(2, "set name "+fortiString(name+"-in"))
		ln(2, "set srcintf "+fortiString(name))
		ln(2, `set dstintf "<lan-interface>"`)
		ln(2, "set srcaddr "+fortiString(name+"-remote"))
		ln(2, "set dstaddr "+strings.Join(locals, " "))
		ln(2, "set action accept")
		ln(2, `set schedule "always"`)
		ln(2, `set service "ALL"`)
		ln(1, "next")
	}
	ln(0, "end")
	return b.String(), nil
}

func joinInts(v []int) string {
	var s []string
	for _, x := range v {
		s = append(s, fmt.Sprint(x))
	}
	return strings.Join(s, " ")
}
