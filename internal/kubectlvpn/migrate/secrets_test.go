package migrate

import (
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
)

// leak is the marker every secret of the cases below carries (in the forms base64 and
// hex encode it to as well); no part of the report may contain it.
const leak = "XLEAKX"

var leakForms = []string{
	leak,
	base64.StdEncoding.EncodeToString([]byte(leak + "-key-material-of-twenty")),
	hex.EncodeToString([]byte(leak + "-key-material-of-twenty")),
}

// A working connection, so each case produces a full report.
const swanctlConn = `connections {
    hq {
        remote_addrs = 198.51.100.7
        local { auth = psk }
        remote { auth = psk }
        children { net { remote_ts = 192.168.7.0/24 } }
    }
}
`

const ipsecConn = `conn hq
    keyexchange=ikev2
    authby=secret
    right=198.51.100.7
    rightsubnet=192.168.7.0/24
    auto=start
`

// TestReportCarriesNoSecret feeds key material in every form a configuration can hold it
// (well formed, continued over lines, unreadable, misplaced, in the wrong file) and checks
// that the report names line numbers at most, never the material (security review L5).
func TestReportCarriesNoSecret(t *testing.T) {
	b64 := leakForms[1]
	hx := leakForms[2]
	cases := []struct {
		name string
		in   Input
	}{
		{"swanctl plain", Input{Text: swanctlConn + "secrets {\n  ike-hq {\n    id = 198.51.100.7\n    secret = " + leak + "-plain-key-material-123\n  }\n}\n"}},
		{"swanctl quoted", Input{Text: swanctlConn + "secrets {\n  ike-hq {\n    secret = \"" + leak + " quoted key material 123\"\n  }\n}\n"}},
		{"swanctl base64", Input{Text: swanctlConn + "secrets {\n  ike-hq {\n    secret = 0s" + b64 + "\n  }\n}\n"}},
		{"swanctl hex", Input{Text: swanctlConn + "secrets {\n  ike-hq {\n    secret = 0x" + hx + "\n  }\n}\n"}},
		{"swanctl continuation without =", Input{Text: swanctlConn + "secrets {\n  ike-hq {\n    secret = 0sQUJD\n      " + b64 + "\n  }\n}\n"}},
		{"swanctl continuation, plain", Input{Text: swanctlConn + "secrets {\n  ike-hq {\n    secret = 0sQUJD\n      " + leak + "continued\n  }\n}\n"}},
		{"swanctl continuation with padding", Input{Text: swanctlConn + "secrets {\n  ike-hq {\n    secret = 0sQUJD\n      xleakxabc==\n  }\n}\n"}},
		{"swanctl quoted over lines", Input{Text: swanctlConn + "secrets {\n  ike-hq {\n    secret = \"first half\n " + leak + " second = half\"\n  }\n}\n"}},
		{"swanctl brace in value", Input{Text: swanctlConn + "secrets {\n  ike-hq {\n    secret = ab}" + leak + "cd\n  }\n  ike-2 { secret = " + leak + "x }\n}\n"}},
		{"swanctl unclosed", Input{Text: swanctlConn + "secrets {\n  ike-hq {\n    secret = " + leak + "-unclosed\n"}},
		{"swanctl include in secrets", Input{Text: swanctlConn + "secrets {\n  include /etc/" + leak + ".conf\n}\n"}},
		{"swanctl other secret kinds", Input{Text: swanctlConn + "secrets {\n  eap-a { secret = " + leak + "1 }\n  xauth-b { secret = " + leak + "2 }\n  private-c { file = k.pem\n secret = " + leak + "3 }\n  ntlm-d { secret = " + leak + "4 }\n}\n"}},
		{"swanctl secrets inside a connection", Input{Text: "connections {\n  hq {\n    remote_addrs = 198.51.100.7\n    local { auth = psk }\n    remote { auth = psk }\n    children { net { remote_ts = 192.168.7.0/24 } }\n    secrets { ike { secret = " + leak + "5 } }\n    psk = " + leak + "6\n  }\n}\n"}},
		{"swanctl secret as a section name", Input{Text: swanctlConn + leak + "7 {\n}\n" + "secrets {\n  ike-" + leak + "8 {\n"}},
		{"ipsec.secrets lines pasted into ipsec.conf", Input{Text: ipsecConn + ": PSK \"" + leak + "9\"\n    198.51.100.7 : PSK 0s" + b64 + "\n  %any : PSK \"" + leak + "10=\"\n"}},
		{"ipsec.conf key-like setting", Input{Text: ipsecConn + "    psk=" + leak + "11\n    leftpassword=" + leak + "12\n"}},
		{"ipsec.conf unreadable", Input{Text: ipsecConn + "    " + leak + "13\n" + leak + "14 stray\n"}},
		{"ipsec.secrets", Input{Text: ipsecConn, Secrets: "198.51.100.7 : PSK \"" + leak + "15\"\n" + leak + "16 broken\ninclude /etc/" + leak + "17\n: RSA " + leak + "18\n"}},
		{"ipsec.secrets continued", Input{Text: ipsecConn, Secrets: "198.51.100.7 : PSK \"" + leak + "19\n " + leak + "20\"\n"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := c.in
			in.Path = "vm.conf"
			for _, include := range []bool{false, true} {
				res, _ := Migrate(in, Options{Name: "vpn", Namespace: "tenant-a", IncludeSecrets: include})
				if res == nil {
					t.Fatal("no result")
				}
				report := res.Report(in)
				for _, f := range leakForms {
					for _, s := range []string{f, strings.ToLower(f)} {
						if strings.Contains(report, s) {
							t.Errorf("the report contains key material %q:\n%s", s, report)
						}
					}
				}
			}
		})
	}
}

// The report's last check blanks a key read from the input wherever it would appear, so a
// future drop that quotes a line cannot print one.
func TestReportScrubsKeysRead(t *testing.T) {
	in := Input{Path: "vm.conf", Text: swanctlConn + "secrets {\n  ike-hq {\n    secret = " + leak + "-key-material\n  }\n}\n"}
	res, err := Migrate(in, Options{Name: "vpn", Namespace: "tenant-a"})
	if err != nil {
		t.Fatal(err)
	}
	res.drop("a future drop quoting "+leak+"-key-material", "", "test")
	if r := res.Report(in); strings.Contains(r, leak) || !strings.Contains(r, "<key not shown>") {
		t.Errorf("the key was not blanked:\n%s", r)
	}
}
