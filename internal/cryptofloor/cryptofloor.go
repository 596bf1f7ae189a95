// Package cryptofloor is the crypto floor of the gateway's IKE and ESP proposals: the
// algorithms a proposal may name and how they must combine. The API's validation, the
// CRD's admission rules (generated from the same lists, see CELRules) and the gateway
// agent's own config check all use it, so a proposal below the floor is refused at every
// layer that could act on it.
//
// The floor: AEAD (AES-GCM or AES-CCM with a 12- or 16-octet ICV, ChaCha20-Poly1305) or
// AES (CBC or CTR) with SHA-2 integrity; Diffie-Hellman groups modp2048 and larger,
// ecp256 and larger (NIST and Brainpool), curve25519 and curve448. Never null, DES,
// 3DES, MD5, SHA-1, modp768, modp1024 or modp1536, nor the RFC 5114 groups.
package cryptofloor

import (
	"fmt"
	"slices"
	"strings"
)

// Kind says which SA a proposal negotiates.
type Kind string

const (
	IKE Kind = "IKE"
	ESP Kind = "ESP"
)

// The allowed tokens, by role, in strongSwan's proposal notation.
var (
	AEAD = []string{
		"aes128gcm16", "aes192gcm16", "aes256gcm16", "aes128gcm12", "aes192gcm12", "aes256gcm12",
		"aes128gcm", "aes192gcm", "aes256gcm",
		// strongSwan's aliases naming the ICV in bits (pfSense writes these).
		"aes128gcm128", "aes192gcm128", "aes256gcm128", "aes128gcm96", "aes192gcm96", "aes256gcm96",
		"aes128ccm128", "aes192ccm128", "aes256ccm128", "aes128ccm96", "aes192ccm96", "aes256ccm96",
		"aes128ccm16", "aes192ccm16", "aes256ccm16", "aes128ccm12", "aes192ccm12", "aes256ccm12",
		"chacha20poly1305",
	}
	Cipher    = []string{"aes128", "aes192", "aes256", "aes128ctr", "aes192ctr", "aes256ctr"}
	Integrity = []string{"sha256", "sha384", "sha512"}
	PRF       = []string{"prfsha256", "prfsha384", "prfsha512"}
	DH        = []string{
		"modp2048", "modp3072", "modp4096", "modp6144", "modp8192",
		"ecp256", "ecp384", "ecp521", "ecp256bp", "ecp384bp", "ecp512bp",
		"curve25519", "x25519", "curve448", "x448",
	}
	// ESN are ESP's extended sequence number options.
	ESN = []string{"esn", "noesn"}
)

// weak names the well-known tokens below the floor, so a refusal can say why.
var weak = map[string]string{
	"null": "no encryption", "des": "DES is broken", "3des": "3DES has a 64-bit block",
	"blowfish": "64-bit block cipher", "cast128": "64-bit block cipher",
	"md5": "MD5 is broken", "sha1": "SHA-1 is deprecated", "sha": "SHA-1 is deprecated",
	"sha256_96": "truncated SHA-256", "aesxcbc": "not SHA-2", "aescmac": "not SHA-2",
	"prfsha1": "SHA-1 is deprecated", "prfmd5": "MD5 is broken", "prfaesxcbc": "not SHA-2",
	"modp768": "768-bit DH is broken", "modp1024": "1024-bit DH is too weak",
	"modp1536": "1536-bit DH is too weak", "modp1024s160": "RFC 5114 group", "modp2048s224": "RFC 5114 group",
	"modp2048s256": "RFC 5114 group", "ecp192": "curve below 256 bits", "ecp224": "curve below 256 bits",
	"ecp224bp":   "curve below 256 bits",
	"aes128gcm8": "64-bit ICV", "aes192gcm8": "64-bit ICV", "aes256gcm8": "64-bit ICV",
	"aes128ccm8": "64-bit ICV", "aes192ccm8": "64-bit ICV", "aes256ccm8": "64-bit ICV",
	"aes128gcm64": "64-bit ICV", "aes192gcm64": "64-bit ICV", "aes256gcm64": "64-bit ICV",
	"aes128ccm64": "64-bit ICV", "aes192ccm64": "64-bit ICV", "aes256ccm64": "64-bit ICV",
}

// Allowed lists every token a proposal of kind may contain.
func Allowed(k Kind) []string {
	out := slices.Concat(AEAD, Cipher, Integrity, DH)
	switch k {
	case IKE:
		out = append(out, PRF...)
	case ESP:
		out = append(out, ESN...)
	}
	return out
}

// Check returns nil when proposal (one strongSwan proposal such as
// aes256gcm16-prfsha384-ecp384) meets the floor for kind, else an error that names the
// offending algorithm and the rule.
func Check(k Kind, proposal string) error {
	if proposal == "" {
		return fmt.Errorf("empty proposal")
	}
	allowed := Allowed(k)
	var aead, cipher, integ, prf, dh int
	for _, t := range strings.Split(proposal, "-") {
		switch {
		case slices.Contains(AEAD, t):
			aead++
		case slices.Contains(Cipher, t):
			cipher++
		case slices.Contains(Integrity, t):
			integ++
		case slices.Contains(PRF, t) && k == IKE:
			prf++
		case slices.Contains(DH, t):
			dh++
		case slices.Contains(allowed, t):
		default:
			if why, ok := weak[t]; ok {
				return fmt.Errorf("%q is below the crypto floor (%s)", t, why)
			}
			if slices.Contains(PRF, t) {
				return fmt.Errorf("%q is a PRF, which only IKE proposals carry", t)
			}
			return fmt.Errorf("%q is not an allowed %s algorithm (allowed: %s)", t, k, strings.Join(allowed, ", "))
		}
	}
	switch {
	case aead == 0 && cipher == 0:
		return fmt.Errorf("names no encryption algorithm (AES-GCM, AES-CCM, ChaCha20-Poly1305, or AES with SHA-2 integrity)")
	case aead > 0 && cipher > 0:
		return fmt.Errorf("mixes AEAD and non-AEAD encryption in one proposal; write them as two proposals")
	case k == ESP && aead > 0 && integ > 0:
		return fmt.Errorf("an AEAD proposal carries no integrity algorithm (its ICV is the integrity)")
	case cipher > 0 && integ == 0:
		return fmt.Errorf("AES without an integrity algorithm; add sha256, sha384 or sha512")
	case k == IKE && aead > 0 && prf == 0 && integ == 0:
		// With AEAD, strongSwan proposes an IKE proposal's integrity algorithms as its
		// PRFs (aes256gcm16-sha256-modp2048, as pfSense writes it, means prfsha256).
		return fmt.Errorf("an AEAD IKE proposal needs a PRF: add prfsha256, prfsha384 or prfsha512")
	case k == IKE && dh == 0:
		return fmt.Errorf("an IKE proposal needs a Diffie-Hellman group (modp2048 or larger, ecp256 or larger, curve25519, curve448)")
	}
	return nil
}

// HasDH reports whether an ESP proposal names a Diffie-Hellman group, that is whether a
// CHILD_SA rekeyed with it has perfect forward secrecy.
func HasDH(proposal string) bool {
	for _, t := range strings.Split(proposal, "-") {
		if slices.Contains(DH, t) {
			return true
		}
	}
	return false
}

// celList renders a CEL list literal of strings.
func celList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = "'" + s + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// CELRules are the admission rules the CRD carries for one proposal of kind: every token
// allowed, and for IKE a Diffie-Hellman group. The structural rules (AEAD or cipher with
// integrity, a PRF with AEAD in IKE) are Check's alone. A test keeps the CRD markers
// equal to these strings.
func CELRules(k Kind) []string {
	rules := []string{"self.split('-').all(t, t in " + celList(Allowed(k)) + ")"}
	if k == IKE {
		rules = append(rules, "self.split('-').exists(t, t in "+celList(DH)+")")
	}
	return rules
}
