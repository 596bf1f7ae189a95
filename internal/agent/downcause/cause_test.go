package downcause

import (
	"os"
	"strings"
	"testing"

	govici "github.com/strongswan/govici/vici"
)

// replay feeds a capture of charon's VICI log events (testdata: name|uniqueid|group|msg,
// recorded from two real charons, one of them configured as each case's broken client).
func replay(t *testing.T, tr *Tracker, file string) {
	t.Helper()
	b, err := os.ReadFile("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(l, "|", 4)
		if len(f) != 4 {
			t.Fatalf("bad line %q", l)
		}
		tr.ObserveLine(Line{Name: f[0], ID: f[1], Msg: f[3]})
	}
}

// TestCausesFromCharonLogs: each failure, from the initiator's and from the responder's
// side, yields its reason for the right tunnel and a message naming what differs.
func TestCausesFromCharonLogs(t *testing.T) {
	cases := []struct {
		file, tunnel, reason, message string
	}{
		{"auth-initiator.log", "t1", AuthenticationFailed, "AUTHENTICATION_FAILED"},
		{"auth-responder.log", "gw", AuthenticationFailed, "pre-shared key for '10.9.0.2' - '10.9.0.1' differs"},
		{"ikeprop-initiator.log", "t1", NoCommonIKEProposal, "NO_PROPOSAL_CHOSEN in IKE_SA_INIT"},
		// The responder does not know the connection yet: attributed by the peer's address.
		{"ikeprop-responder.log", "gw", NoCommonIKEProposal, "the peer proposed IKE:AES_GCM_16_128/PRF_HMAC_SHA2_256/CURVE_25519, we accept IKE:AES_CBC_256/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/MODP_2048"},
		{"espprop-initiator.log", "t1", NoCommonESPProposal, "NO_PROPOSAL_CHOSEN in IKE_AUTH"},
		{"espprop-responder.log", "gw", NoCommonESPProposal, "we accept ESP:AES_CBC_256/HMAC_SHA2_256_128/MODP_2048/NO_EXT_SEQ"},
		{"ts-initiator.log", "t1", TrafficSelectorsRefused, "TS_UNACCEPTABLE"},
		{"ts-responder.log", "gw", TrafficSelectorsRefused, "198.51.100.0/24 === 100.64.7.0/24"},
		// Up with a child SA, then every rekey and the re-creation after expiry refused.
		{"pfs-initiator.log", "t1", PFSMismatchAtRekey, "refuses them with one (CREATE_CHILD_SA)"},
		// The client rekeys without a key exchange; we require PFS.
		{"pfs-responder.log", "t1", PFSMismatchAtRekey, "without a key exchange (CREATE_CHILD_SA), we require PFS"},
		{"noanswer-initiator.log", "t1", PeerNotResponding, "IKE_SA_INIT"},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			tr := &Tracker{PeerTunnel: func(addr string) string {
				if addr == "10.9.0.1" {
					return "gw"
				}
				return ""
			}}
			replay(t, tr, c.file)
			got, ok := tr.Cause(c.tunnel)
			if !ok {
				t.Fatalf("no cause for %s", c.tunnel)
			}
			if got.Reason != c.reason || !strings.Contains(got.Message, c.message) {
				t.Errorf("cause %+v, want %s with %q", got, c.reason, c.message)
			}
			for _, other := range []string{"t1", "gw"} {
				if other == c.tunnel {
					continue
				}
				if got, ok := tr.Cause(other); ok {
					t.Errorf("cause attributed to %s too: %+v", other, got)
				}
			}
		})
	}
}

// TestCauseClearedWhenTheTunnelComesUp: an authentication failure, then an IKE SA and a
// child SA established: no cause left. An IKE SA alone clears only IKE-level causes.
func TestCauseClearedWhenTheTunnelComesUp(t *testing.T) {
	tr := &Tracker{}
	replay(t, tr, "auth-initiator.log")
	if _, ok := tr.Cause("t1"); !ok {
		t.Fatal("no cause after the failure")
	}
	tr.ObserveLine(Line{Name: "t1", ID: "40", Msg: "IKE_SA t1[40] established between 10.9.0.1[10.9.0.1]...10.9.0.2[10.9.0.2]"})
	if c, ok := tr.Cause("t1"); ok {
		t.Errorf("authentication failure kept after the IKE SA came up: %+v", c)
	}
	replay(t, tr, "ts-initiator.log")
	tr.ObserveLine(Line{Name: "t1", ID: "41", Msg: "IKE_SA t1[41] established between 10.9.0.1[10.9.0.1]...10.9.0.2[10.9.0.2]"})
	if c, ok := tr.Cause("t1"); !ok || c.Reason != TrafficSelectorsRefused {
		t.Errorf("an IKE SA alone cleared the child-level cause: %+v %v", c, ok)
	}
	tr.ObserveLine(Line{Name: "t1", ID: "41", Msg: "CHILD_SA t1{9} established with SPIs c1b2_i c3d4_o and TS 100.64.7.0/24 === 198.51.100.0/24"})
	if c, ok := tr.Cause("t1"); ok {
		t.Errorf("cause kept after the child SA came up: %+v", c)
	}
}

func TestFromEvent(t *testing.T) {
	m := govici.NewMessage()
	_ = m.Set("ikesa-name", "t1")
	_ = m.Set("ikesa-uniqueid", "7")
	_ = m.Set("msg", "received AUTHENTICATION_FAILED notify error")
	tr := &Tracker{}
	tr.Observe(govici.Event{Name: "ike-updown", Message: m})
	if _, ok := tr.Cause("t1"); ok {
		t.Fatal("a non-log event was read")
	}
	tr.Observe(govici.Event{Name: "log", Message: m})
	if c, ok := tr.Cause("t1"); !ok || c.Reason != AuthenticationFailed {
		t.Errorf("cause %+v %v", c, ok)
	}
}

// TestPeerNotRespondingSaidEarly: from the second retransmission of an unanswered
// IKE_SA_INIT on, long before charon gives up; not for retransmissions of an
// established SA's DPD.
func TestPeerNotRespondingSaidEarly(t *testing.T) {
	tr := &Tracker{}
	for _, m := range []string{
		"generating IKE_SA_INIT request 0 [ SA KE No N(NATD_S_IP) N(NATD_D_IP) N(FRAG_SUP) N(HASH_ALG) N(REDIR_SUP) ]",
		"retransmit 1 of request with message ID 0",
	} {
		tr.ObserveLine(Line{Name: "t1", ID: "3", Msg: m})
	}
	if c, ok := tr.Cause("t1"); ok {
		t.Fatalf("cause after one retransmission: %+v", c)
	}
	tr.ObserveLine(Line{Name: "t1", ID: "3", Msg: "retransmit 2 of request with message ID 0"})
	if c, ok := tr.Cause("t1"); !ok || c.Reason != PeerNotResponding || !strings.Contains(c.Message, "retransmit 2") {
		t.Fatalf("cause %+v %v", c, ok)
	}
	dpd := &Tracker{}
	for _, m := range []string{"generating INFORMATIONAL request 5 [ ]", "retransmit 2 of request with message ID 5", "retransmit 3 of request with message ID 5"} {
		dpd.ObserveLine(Line{Name: "t1", ID: "4", Msg: m})
	}
	if c, ok := dpd.Cause("t1"); ok {
		t.Errorf("cause from DPD retransmissions of an established SA: %+v", c)
	}
}
