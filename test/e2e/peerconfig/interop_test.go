package peerconfig

import (
	"regexp"
	"strings"
	"testing"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/test/e2e/netns"
)

// clientProfile is a client's strongSwan configured by hand the way its IT would write
// it for a given product's defaults: the proposals in strongSwan notation.
type clientProfile struct {
	name string
	// what the profile stands for, and where its proposals come from
	about    string
	ike, esp string
	// pfs: the client's ESP proposals all carry a DH group.
	pfs bool
}

// The proposals each product offers by default (docs/interop.md names the sources and
// the versions): a textbook strongSwan site-to-site, FortiOS' phase1/phase2-interface
// defaults (DH groups 14 and 5, PFS on), Cisco IOS-XE's IKEv2 smart defaults (proposal
// "default", IPsec profile "default": AES-GCM-256 or AES-128/SHA-1, no PFS), and a client
// without PFS.
var clientProfiles = []clientProfile{
	{name: "strongswan-textbook", about: "strongSwan's documented site-to-site example",
		ike: "aes256-sha256-modp2048", esp: "aes256-sha256-modp2048", pfs: true},
	{name: "fortigate-default", about: "FortiOS phase1-interface/phase2-interface defaults",
		ike: "aes128-sha256-modp2048-modp1536,aes256-sha256-modp2048-modp1536,aes128gcm16-prfsha256-modp2048-modp1536,aes256gcm16-prfsha384-modp2048-modp1536,chacha20poly1305-prfsha256-modp2048-modp1536",
		esp: "aes128-sha1-modp2048-modp1536,aes256-sha1-modp2048-modp1536,aes128-sha256-modp2048-modp1536,aes256-sha256-modp2048-modp1536,aes128gcm16-modp2048-modp1536,aes256gcm16-modp2048-modp1536,chacha20poly1305-modp2048-modp1536",
		pfs: true},
	{name: "cisco-iosxe-smart-defaults", about: "Cisco IOS-XE IKEv2 smart defaults",
		ike: "aes256-sha512-sha384-prfsha512-prfsha384-ecp256-modp2048-ecp521-modp1536",
		esp: "aes256gcm16,aes128-sha1", pfs: false},
	{name: "no-pfs", about: "a client that turned PFS off",
		ike: "aes256-sha256-modp2048", esp: "aes256-sha256", pfs: false},
}

// site is the profile's swanctl.conf: proposals and identities only, strongSwan's
// defaults for everything else.
func (p clientProfile) site() netns.SiteSwanctl {
	return netns.SiteSwanctl{Name: "hq", LocalAddrs: peerWAN, RemoteAddrs: floatingIP, IKE: p.ike, ESP: p.esp,
		LocalID: peerID, RemoteID: floatingIP, LocalTS: clientNet, RemoteTS: serviceCIDR, PSK: psk}
}

// reChild matches a CHILD_SA line of `swanctl --list-sas`: its state and algorithms
// (the DH group, when there is one, is the last element).
var reChild = regexp.MustCompile(`(?m)^\s+hq: #(\d+), reqid \d+, (\w+), [A-Za-z-]+, ESP:(\S+)`)

type child struct {
	id    string
	state string
	algs  string
}

func children(sas string) []child {
	var out []child
	for _, m := range reChild.FindAllStringSubmatch(sas, -1) {
		out = append(out, child{m[1], m[2], m[3]})
	}
	return out
}

func installed(sas string) []child {
	var out []child
	for _, c := range children(sas) {
		if c.state == "INSTALLED" {
			out = append(out, c)
		}
	}
	return out
}

// withDH reports whether a child's algorithms name a Diffie-Hellman group.
func withDH(algs string) bool {
	return strings.Contains(algs, "MODP_") || strings.Contains(algs, "ECP_") || strings.Contains(algs, "CURVE_")
}

// The gateway's default proposals meet the defaults of the clients platform teams meet:
// for each client profile, configured by hand in the client's own strongSwan, the
// tunnel comes up against the gateway as the operator renders it (its default IKE and
// ESP proposals, the agent's loader), carries traffic, and survives a CHILD_SA rekey
// initiated by either side. A client with PFS gets PFS at the rekey; a client without
// PFS keeps working after it (it is never refused at the first rekey). A client whose
// proposals are all below the crypto floor is refused at the first exchange.
func TestDefaultProposalsMeetRealClients(t *testing.T) {
	requirements(t)
	e := newEnv(t, "oio")
	e.agent = e.Build("./cmd/vpn-gateway-agent")["./cmd/vpn-gateway-agent"]
	e.topology()
	g := gateway() // no proposals in the spec: the API's defaults
	e.StartCharon("p", gatewayconfig.DataplaneLibipsec)
	e.StartCharon("g", gatewayconfig.DataplaneLibipsec)
	e.gatewaySide(g)

	load := func(p clientProfile) {
		t.Helper()
		if err := e.LoadSite("p", p.site()); err != nil {
			t.Fatalf("%s: the client's charon refuses its own configuration: %v", p.name, err)
		}
		// Then no SA of the previous profile on either side: whatever comes up next was
		// negotiated with this profile (the gateway re-initiates by itself).
		e.Eventually(p.name+": no IKE SA of the previous profile", func() bool {
			_, _ = e.Swanctl("p", "--terminate", "--ike", "hq", "--force", "--timeout", "2")
			_, _ = e.Swanctl("g", "--terminate", "--ike", "hq", "--force", "--timeout", "2")
			sas, _ := e.Swanctl("p", "--list-sas")
			return !strings.Contains(sas, "ESTABLISHED")
		})
	}
	up := func(p clientProfile) []child {
		t.Helper()
		var sas string
		e.Eventually(p.name+": tunnel up with an installed child SA on the gateway", func() bool {
			// The client initiates as a client would; the gateway initiates on its own too.
			_, _ = e.Swanctl("p", "--initiate", "--child", "hq", "--timeout", "5")
			sas, _ = e.Swanctl("g", "--list-sas", "--ike", "hq")
			return strings.Contains(sas, "ESTABLISHED") && len(installed(sas)) > 0
		})
		e.Eventually(p.name+": traffic through the tunnel", func() bool {
			_, err := e.Sh(e.NS("c"), "ping", "-c", "1", "-W", "2", exposureVIP)
			return err == nil
		})
		return installed(sas)
	}
	rekey := func(p clientProfile, side string) child {
		t.Helper()
		before, _ := e.Swanctl("g", "--list-sas", "--ike", "hq")
		old := map[string]bool{}
		for _, c := range installed(before) {
			old[c.id] = true
		}
		if out, err := e.Swanctl(side, "--rekey", "--child", "hq"); err != nil {
			t.Fatalf("%s: rekey from %s: %v\n%s", p.name, side, err, out)
		}
		var fresh child
		e.Eventually(p.name+": a new child SA after the rekey from "+side, func() bool {
			sas, _ := e.Swanctl("g", "--list-sas", "--ike", "hq")
			for _, c := range installed(sas) {
				if !old[c.id] {
					fresh = c
					return true
				}
			}
			return false
		})
		e.Eventually(p.name+": traffic after the rekey from "+side, func() bool {
			_, err := e.Sh(e.NS("c"), "ping", "-c", "1", "-W", "2", exposureVIP)
			return err == nil
		})
		return fresh
	}

	for _, p := range clientProfiles {
		t.Run(p.name, func(t *testing.T) {
			load(p)
			first := up(p)
			t.Logf("%s (%s): first child %+v", p.name, p.about, first)
			for _, side := range []string{"g", "p"} {
				c := rekey(p, side)
				t.Logf("%s: rekeyed from %s: %s", p.name, side, c.algs)
				if p.pfs != withDH(c.algs) {
					t.Errorf("%s: rekeyed child SA %s, PFS %v; want PFS %v", p.name, c.algs, withDH(c.algs), p.pfs)
				}
			}
		})
	}

	// The negative control of the PFS decision: a gateway whose ESP proposals all ask for
	// PFS (as every default of earlier releases did) brings the tunnel of a client
	// without PFS up, because IKEv2 creates the first CHILD_SA without a DH exchange, and
	// fails it at the first rekey: exactly what the defaults avoid. The algorithms are
	// the client's own; only the DH group differs.
	t.Run("pfs-only-gateway-fails-a-client-without-pfs-at-rekey", func(t *testing.T) {
		pfsOnly := gateway()
		pfsOnly.Spec.Tunnels[0].ESP.Proposals = []string{"aes256-sha256-modp2048"}
		loaded := strings.Count(e.Log("loader"), "loaded connection hq")
		e.writeGatewayFiles(pfsOnly)
		e.Eventually("the gateway reloaded the PFS-only proposals", func() bool {
			return strings.Count(e.Log("loader"), "loaded connection hq") > loaded
		})
		p := clientProfile{name: "no-pfs-vs-pfs-only", ike: "aes256-sha256-modp2048", esp: "aes256-sha256"}
		load(p)
		up(p)
		mark := len(e.CharonLog("g"))
		// The client's view of the child SA can be ahead of the gateway's listing by a
		// moment: ask until the gateway has one to rekey.
		var out string
		e.Eventually("the gateway rekeys its child SA", func() bool {
			o, err := e.Swanctl("g", "--rekey", "--child", "hq")
			out = o
			return err == nil
		})
		t.Logf("rekey: %s", strings.TrimSpace(out))
		e.Eventually("the rekey refused by the client", func() bool {
			return strings.Contains(e.CharonLog("g")[mark:], "NO_PROPOSAL_CHOSEN")
		})
		e.writeGatewayFiles(gateway())
	})

	// Below the floor: refused at IKE_SA_INIT, never an SA.
	t.Run("below-the-floor", func(t *testing.T) {
		weak := clientProfile{name: "weak", ike: "aes128-sha1-modp1024,3des-sha1-modp1024", esp: "aes128-sha1"}
		load(weak)
		out, _ := e.Swanctl("p", "--initiate", "--child", "hq", "--timeout", "10")
		if !strings.Contains(out, "NO_PROPOSAL_CHOSEN") {
			t.Errorf("a client below the floor was not refused at the first exchange:\n%s", out)
		}
		// Either side initiating: never an IKE SA.
		for i := 0; i < 3; i++ {
			if sas, _ := e.Swanctl("p", "--list-sas"); strings.Contains(sas, "ESTABLISHED") {
				t.Fatalf("an IKE SA with a client below the floor:\n%s", sas)
			}
			_, _ = e.Swanctl("p", "--initiate", "--child", "hq", "--timeout", "3")
		}
	})
}
