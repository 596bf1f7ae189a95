package peerconfig

import (
	"fmt"
	"strings"
)

// Proposal is one strongSwan proposal split into its algorithm kinds, each in the order
// of preference the proposal gives. Raw is the proposal as written.
type Proposal struct {
	Raw   string
	Enc   []Cipher
	Integ []string // sha1, sha256, sha384, sha512, md5, aesxcbc
	PRF   []string // the same names, without strongSwan's "prf" prefix
	DH    []DHGroup
}

// Cipher is an encryption algorithm with its key size in bits. AEAD ciphers carry their
// ICV length in bytes (aes256gcm16: 16).
type Cipher struct {
	Name    string // aes, aesgcm, chacha20poly1305, 3des, aesctr, camellia
	KeyBits int
	ICV     int // AEAD only
}

// AEAD reports whether the cipher authenticates itself (no separate integrity).
func (c Cipher) AEAD() bool { return c.Name == "aesgcm" || c.Name == "chacha20poly1305" }

func (c Cipher) String() string {
	switch c.Name {
	case "aesgcm":
		return fmt.Sprintf("aes%dgcm%d", c.KeyBits, c.ICV)
	case "chacha20poly1305", "3des":
		return c.Name
	default:
		return fmt.Sprintf("%s%d", c.Name, c.KeyBits)
	}
}

// DHGroup is a key exchange method with its IANA (IKEv2 transform type 4) number.
type DHGroup struct {
	Name   string // strongSwan's keyword
	Number int
}

// dhGroups are strongSwan's key exchange keywords this package knows, by IANA number.
var dhGroups = map[string]int{
	"modp768": 1, "modp1024": 2, "modp1536": 5, "modp2048": 14, "modp3072": 15, "modp4096": 16,
	"modp6144": 17, "modp8192": 18, "ecp256": 19, "ecp384": 20, "ecp521": 21,
	"modp1024s160": 22, "modp2048s224": 23, "modp2048s256": 24, "ecp192": 25, "ecp224": 26,
	"ecp224bp": 27, "ecp256bp": 28, "ecp384bp": 29, "ecp512bp": 30,
	"curve25519": 31, "x25519": 31, "curve448": 32, "x448": 32,
}

var hashes = map[string]bool{"md5": true, "sha1": true, "sha256": true, "sha384": true, "sha512": true, "aesxcbc": true}

// ParseProposal splits a strongSwan proposal (as the gateway's spec carries it) into its
// algorithms. esp says whether it is an ESP proposal (DH there means PFS, and PRFs are
// not allowed). An unknown keyword is an error naming it: a peer configuration must
// never silently drop an algorithm.
func ParseProposal(raw string, esp bool) (Proposal, error) {
	p := Proposal{Raw: raw}
	for _, kw := range strings.Split(raw, "-") {
		switch {
		case kw == "esn" || kw == "noesn":
			// Extended sequence numbers are negotiated, not configured, on the vendors here.
		case strings.HasPrefix(kw, "prf") && hashes[strings.TrimPrefix(kw, "prf")]:
			if esp {
				return p, fmt.Errorf("proposal %q: %s is an IKE PRF, not valid in an ESP proposal", raw, kw)
			}
			p.PRF = append(p.PRF, strings.TrimPrefix(kw, "prf"))
		case hashes[kw]:
			p.Integ = append(p.Integ, kw)
		case dhGroups[kw] != 0:
			p.DH = append(p.DH, DHGroup{Name: kw, Number: dhGroups[kw]})
		default:
			c, ok := parseCipher(kw)
			if !ok {
				return p, fmt.Errorf("proposal %q: unknown algorithm %q", raw, kw)
			}
			p.Enc = append(p.Enc, c)
		}
	}
	if len(p.Enc) == 0 {
		return p, fmt.Errorf("proposal %q names no encryption algorithm", raw)
	}
	aead := p.Enc[0].AEAD()
	for _, c := range p.Enc {
		if c.AEAD() != aead {
			return p, fmt.Errorf("proposal %q mixes AEAD and classic ciphers, which one proposal cannot carry", raw)
		}
	}
	if !aead && len(p.Integ) == 0 {
		return p, fmt.Errorf("proposal %q has a classic cipher but no integrity algorithm", raw)
	}
	if !esp && len(p.DH) == 0 {
		return p, fmt.Errorf("IKE proposal %q has no key exchange method", raw)
	}
	if !esp && len(p.PRF) == 0 {
		// strongSwan derives the PRF from the integrity algorithm when none is given.
		for _, i := range p.Integ {
			if i != "aesxcbc" {
				p.PRF = append(p.PRF, i)
			}
		}
	}
	if !esp && aead && len(p.PRF) == 0 {
		return p, fmt.Errorf("IKE proposal %q uses an AEAD cipher without a PRF", raw)
	}
	if aead {
		// An AEAD proposal's integrity is its ICV: strongSwan drops the integrity
		// algorithms (in IKE after taking them as PRFs).
		p.Integ = nil
	}
	return p, nil
}

func parseCipher(kw string) (Cipher, bool) {
	switch kw {
	case "3des":
		return Cipher{Name: "3des", KeyBits: 192}, true
	case "chacha20poly1305":
		return Cipher{Name: "chacha20poly1305", KeyBits: 256, ICV: 16}, true
	}
	for _, bits := range []int{128, 192, 256} {
		b := fmt.Sprint(bits)
		switch kw {
		case "aes" + b:
			return Cipher{Name: "aes", KeyBits: bits}, true
		case "aes" + b + "ctr":
			return Cipher{Name: "aesctr", KeyBits: bits}, true
		case "camellia" + b:
			return Cipher{Name: "camellia", KeyBits: bits}, true
		}
		for _, icv := range []int{8, 12, 16} {
			// strongSwan also names the ICV in bits: aes256gcm128 = aes256gcm16.
			if kw == fmt.Sprintf("aes%sgcm%d", b, icv) || kw == fmt.Sprintf("aes%sgcm%d", b, icv*8) {
				return Cipher{Name: "aesgcm", KeyBits: bits, ICV: icv}, true
			}
		}
		// strongSwan's aliases aes128gcm = aes128gcm16.
		if kw == "aes"+b+"gcm" {
			return Cipher{Name: "aesgcm", KeyBits: bits, ICV: 16}, true
		}
	}
	if kw == "aes" {
		return Cipher{Name: "aes", KeyBits: 128}, true
	}
	return Cipher{}, false
}
