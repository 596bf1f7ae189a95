package cryptofloor

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	cases := []struct {
		kind     Kind
		proposal string
		want     string // substring of the error; empty = accepted
	}{
		{IKE, "aes256gcm16-prfsha384-ecp384", ""},
		{IKE, "aes256-sha256-modp2048", ""},
		{IKE, "chacha20poly1305-prfsha256-curve25519", ""},
		{IKE, "aes256-aes128-sha512-sha384-sha256-ecp384-ecp256-modp3072-modp2048", ""},
		{ESP, "aes256gcm16", ""},
		{ESP, "aes256gcm16-ecp384-esn", ""},
		{ESP, "aes128ctr-sha512-modp8192", ""},
		{IKE, "aes256gcm128-sha256-modp2048", ""}, // pfSense's notation: bit-sized ICV, integrity as PRF
		{ESP, "aes256gcm96-modp2048", ""},
		{ESP, "aes256gcm64", "64-bit ICV"},
		{IKE, "", "empty"},
		{IKE, "3des-sha256-modp2048", `"3des" is below the crypto floor`},
		{IKE, "aes256-sha1-modp2048", `"sha1" is below`},
		{IKE, "aes256-sha256-modp1536", `"modp1536" is below`},
		{IKE, "aes256-sha256-modp2048s256", "RFC 5114"},
		{ESP, "aes128gcm8", "64-bit ICV"},
		{ESP, "camellia128-sha256", "not an allowed ESP algorithm"},
		{ESP, "aes256gcm16-prfsha256", "only IKE proposals carry"},
		{IKE, "aes256-sha256", "needs a Diffie-Hellman group"},
		{IKE, "aes256gcm16-ecp384", "needs a PRF"},
		{ESP, "aes256gcm16-sha256-ecp384", "carries no integrity algorithm"},
		{ESP, "aes256-modp2048", "without an integrity algorithm"},
		{ESP, "sha256-modp2048", "names no encryption algorithm"},
		{ESP, "aes256gcm16-aes256-sha256", "mixes AEAD and non-AEAD"},
		{ESP, "esn", "names no encryption algorithm"},
	}
	for _, tc := range cases {
		err := Check(tc.kind, tc.proposal)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %q: want accepted, got %v", tc.kind, tc.proposal, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s %q: want an error containing %q, got %v", tc.kind, tc.proposal, tc.want, err)
		}
	}
}

// No token is both allowed and named weak, and every weak token is refused.
func TestWeakNeverAllowed(t *testing.T) {
	for _, k := range []Kind{IKE, ESP} {
		for _, a := range Allowed(k) {
			if _, bad := weak[a]; bad {
				t.Errorf("%s allows %q, which is listed as weak", k, a)
			}
		}
	}
	for w := range weak {
		if Check(IKE, "aes256-sha256-modp2048-"+w) == nil || Check(ESP, "aes256gcm16-"+w) == nil {
			t.Errorf("weak token %q accepted", w)
		}
	}
}

func TestHasDH(t *testing.T) {
	if !HasDH("aes256-sha256-modp2048") || !HasDH("aes256gcm16-x25519") || HasDH("aes256gcm16") || HasDH("aes256-sha256-esn") {
		t.Fatal("HasDH")
	}
}
