package vici

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/agent/downcause"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// TestListingsAreNeverShort: with 16 tunnels up, 300 listings in a row over one session
// each return all 16 tunnels up, and the session still answers a plain command after
// them. govici v0.8.0 raced the streamed events against the final reply and returned
// short listings (a live tunnel reported down) with the lost events left to break the
// next command on the session.
func TestListingsAreNeverShort(t *testing.T) {
	const n = 16
	p := newPair(t, n, nil)
	var conf strings.Builder
	for i := 1; i <= n; i++ {
		c := client(i, nil)
		conf.WriteString(c)
	}
	// One file, one connections and one secrets section.
	text := conf.String()
	text = "connections {\n" + sections(text, "connections") + "}\nsecrets {\n" + sections(text, "secrets") + "}\n"
	p.loadClient(text)
	p.apply()
	p.until("all 16 tunnels up", time.Minute, func() bool {
		sas := p.sas()
		for _, name := range p.names() {
			if !Summarize(sas[name], name).Up {
				return false
			}
		}
		return true
	})
	s, err := Dial(p.gsock)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for i := 0; i < 300; i++ {
		all, err := ListSAs(ctx, s) // unfiltered: one stream of 16 events
		if err != nil {
			t.Fatalf("listing %d: %v", i, err)
		}
		if len(all) != n {
			t.Fatalf("listing %d returned %d of %d tunnels", i, len(all), n)
		}
		if _, err := charonConns(ctx, s); err != nil {
			t.Fatalf("the command after listing %d failed: %v", i, err)
		}
	}
}

// sections extracts the bodies of every top-level section named name from text.
func sections(text, name string) string {
	var b strings.Builder
	for {
		i := strings.Index(text, name+" {\n")
		if i < 0 {
			return b.String()
		}
		text = text[i+len(name)+3:]
		depth, j := 1, 0
		for ; j < len(text) && depth > 0; j++ {
			switch text[j] {
			case '{':
				depth++
			case '}':
				depth--
			}
		}
		b.WriteString(text[:j-1])
		text = text[j:]
	}
}

// TestRefusalsBackOffAndSayWhy: a client whose pre-shared key differs refuses every
// attempt. The loader retries after 5 s, 10 s, 20 s, ... (on the loader's clock, here a
// fake one advanced by hand), never in between, the cause is authentication failure,
// and the tunnel comes up at the next attempt once the client has the right key.
func TestRefusalsBackOffAndSayWhy(t *testing.T) {
	p := newPair(t, 1, nil)
	p.loadClient(client(1, map[string]string{"psk": "not-the-gateways-key-0123456789"}))
	initiated := func(r Result) bool { return contains(r.Initiated, "t1") }
	if !initiated(p.apply()) {
		t.Fatal("first attempt not made")
	}
	p.until("authentication failure recognised", 20*time.Second, func() bool {
		c, ok := p.causes.Cause("t1")
		return ok && c.Reason == downcause.AuthenticationFailed && len(p.sas()["t1"]) == 0
	})
	// The schedule: attempt k+1 is due backoff(k) after attempt k.
	for k, wait := range []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second} {
		p.clock.Advance(wait - time.Second)
		if initiated(p.apply()) {
			t.Fatalf("attempt %d made %s after the previous one, before its backoff of %s", k+2, wait-time.Second, wait)
		}
		if pl := p.loader.Plan("t1"); pl.Attempts != k+1 || !pl.Next.Equal(p.clock.Now().Add(time.Second)) {
			t.Errorf("plan after %d attempts: %+v", k+1, pl)
		}
		p.clock.Advance(time.Second)
		if !initiated(p.apply()) {
			t.Fatalf("attempt %d not made when due", k+2)
		}
		p.until("attempt refused", 20*time.Second, func() bool { return len(p.sas()["t1"]) == 0 })
	}
	if got := p.loader.backoff(20); got != 5*time.Minute {
		t.Errorf("backoff is not capped at 5 minutes: %s", got)
	}
	// The client fixes its key and initiates itself, long before our next attempt: the
	// tunnel is up, the cause gone.
	p.loadClient(client(1, nil))
	pairRun(t, "ip", "netns", "exec", p.pns, "swanctl", "--initiate", "--child", "gw1", "--uri", "unix://"+p.psock)
	p.until("tunnel up after the client's fix", 20*time.Second, func() bool { return p.up("t1") })
	if c, ok := p.causes.Cause("t1"); ok {
		t.Errorf("cause kept once up: %+v", c)
	}
	// It fails again before the loader ever saw it up: the schedule starts over (an
	// attempt at once, the next after 5 s), it does not continue at 80 s.
	p.loadClient(client(1, map[string]string{"psk": "not-the-gateways-key-0123456789"}))
	pairRun(t, "ip", "netns", "exec", p.pns, "swanctl", "--terminate", "--ike", "gw1", "--uri", "unix://"+p.psock)
	p.until("down again", 20*time.Second, func() bool { return len(p.sas()["t1"]) == 0 })
	p.clock.Advance(time.Second)
	if !initiated(p.apply()) {
		t.Fatal("no attempt at once after the tunnel had been up")
	}
	if pl := p.loader.Plan("t1"); pl.Attempts != 1 || !pl.Next.Equal(p.clock.Now().Add(5*time.Second)) {
		t.Errorf("schedule not started over: %+v", pl)
	}
}

// TestUnansweredPeerRetriedAtOnce: a client that drops IKE is not answered; when charon
// gives up, the next attempt is made without waiting for the backoff (charon's
// retransmissions paced this one already), so a client that starts answering is picked
// up by it.
func TestUnansweredPeerRetriedAtOnce(t *testing.T) {
	p := newPair(t, 1, nil)
	p.loadClient(client(1, nil))
	pairRun(t, "ip", "netns", "exec", p.pns, "nft", "add table ip tndrop")
	pairRun(t, "ip", "netns", "exec", p.pns, "nft", "add chain ip tndrop in { type filter hook input priority 0 ; }")
	pairRun(t, "ip", "netns", "exec", p.pns, "nft", "add rule ip tndrop in udp dport { 500, 4500 } drop")
	p.apply()
	p.until("charon gives up on the unanswered peer", 3*time.Minute, func() bool {
		c, ok := p.causes.Cause("t1")
		return ok && c.Reason == downcause.PeerNotResponding && len(p.sas()["t1"]) == 0
	})
	pairRun(t, "ip", "netns", "exec", p.pns, "nft", "delete table ip tndrop")
	p.clock.Advance(time.Second) // far less than the backoff of 5 s
	if !contains(p.apply().Initiated, "t1") {
		t.Fatal("an unanswered attempt was followed by the backoff")
	}
	p.until("tunnel up once the client answers", 20*time.Second, func() bool { return p.up("t1") })
}

// TestHalfOpenRecovers: the client refuses the tunnel's traffic selectors, so the IKE
// SA comes up without a child SA. The loader retries with backoff, first a child SA in
// the IKE SA, then a new IKE SA; once the client's selectors are fixed the tunnel is up.
func TestHalfOpenRecovers(t *testing.T) {
	p := newPair(t, 1, nil)
	p.loadClient(client(1, map[string]string{"remote_ts": "100.64.8.0/24"}))
	p.apply()
	p.until("half-open: IKE SA without child, cause recognised", 20*time.Second, func() bool {
		c, ok := p.causes.Cause("t1")
		s := Summarize(p.sas()["t1"], "t1")
		return ok && c.Reason == downcause.TrafficSelectorsRefused && s.Established && !s.Up && !s.Negotiating
	})
	firstIKE := p.sas()["t1"][0].UniqueID
	p.apply() // first round half-open: grace for a rekey in flight
	p.clock.Advance(6 * time.Second)
	if !contains(p.apply().Initiated, "t1") {
		t.Fatal("no child SA attempt in the half-open IKE SA")
	}
	p.until("child attempt refused", 20*time.Second, func() bool {
		s := Summarize(p.sas()["t1"], "t1")
		return s.Established && !s.Negotiating
	})
	p.loadClient(client(1, nil))
	p.apply()
	p.clock.Advance(11 * time.Second)
	res := p.apply()
	if !contains(res.Restarted, "t1") || !contains(res.Initiated, "t1") {
		t.Fatalf("second attempt did not start over with a new IKE SA: %+v", res)
	}
	p.until("tunnel up after the client's fix", 20*time.Second, func() bool { return p.up("t1") })
	if id := p.sas()["t1"][0].UniqueID; id == firstIKE {
		t.Errorf("still the half-open IKE SA #%s", id)
	}
}

// TestPFSMismatchAtRekeyRecovers: the client accepts our ESP proposal only without a
// key exchange. The child SA comes up in IKE_AUTH (no key exchange there), every rekey
// is refused, the cause says so while the tunnel is still up, and after the child SA
// expires the loader starts over with a new IKE SA: the tunnel is up again.
func TestPFSMismatchAtRekeyRecovers(t *testing.T) {
	p := newPair(t, 1, func(tn *gatewayconfig.Tunnel) { tn.ESPRekeySeconds = 4 })
	p.loadClient(client(1, map[string]string{"esp": "aes128gcm16"}))
	p.apply()
	p.until("tunnel up", 20*time.Second, func() bool { return p.up("t1") })
	first := p.sas()["t1"][0].UniqueID
	p.until("refused rekey recognised while up", 20*time.Second, func() bool {
		c, ok := p.causes.Cause("t1")
		return ok && c.Reason == downcause.PFSMismatchAtRekey
	})
	// Converge in real time (a fake clock advanced with it) until a new IKE SA carries
	// the tunnel.
	p.until("tunnel up again on a new IKE SA after the child SA expired", time.Minute, func() bool {
		p.clock.Advance(time.Second)
		if r := p.apply(); len(r.Initiated)+len(r.Restarted) > 0 {
			t.Logf("round: %+v, cause %+v", r, p.causes)
		}
		sas := p.sas()["t1"]
		return Summarize(sas, "t1").Up && sas[0].UniqueID != first
	})
}

// TestChangesAreMakeBeforeBreak: changing the tunnel's ESP proposals (child settings)
// and then its IKE proposals (IKE settings) moves the tunnel to SAs made with the new
// settings while a watcher listing every 20 ms never sees it down; the old SAs are
// deleted afterwards. A change the client refuses leaves the old SA carrying and is
// reported; a client that keeps only one IKE SA gets a teardown, and that is reported.
func TestChangesAreMakeBeforeBreak(t *testing.T) {
	p := newPair(t, 1, func(tn *gatewayconfig.Tunnel) {
		tn.ESPProposals = []string{"aes128gcm16-x25519", "aes256gcm16-x25519"}
		tn.IKEProposals = []string{"aes128gcm16-prfsha256-x25519", "aes256gcm16-prfsha384-x25519"}
	})
	p.loadClient(client(1, map[string]string{"esp": "aes128gcm16-x25519,aes256gcm16-x25519", "ike": "aes128gcm16-prfsha256-x25519,aes256gcm16-prfsha384-x25519"}))
	p.apply()
	p.until("tunnel up", 20*time.Second, func() bool { return p.up("t1") })

	var down atomic.Int32
	var samples atomic.Int32
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			sas, err := ListSAsOn(p.gsock)(context.Background(), []string{"t1"})
			if err != nil || !Summarize(sas["t1"], "t1").Up {
				down.Add(1)
			}
			samples.Add(1)
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	ikeID := func() string { return p.sas()["t1"][0].UniqueID }
	childOf := func() (string, string) {
		for _, sa := range p.sas()["t1"] {
			for _, c := range sa.Children {
				if c.Name == "t1" && carriesChild(c.State) {
					return sa.UniqueID, c.UniqueID
				}
			}
		}
		return "", ""
	}

	// Child settings: a new child SA in the same IKE SA, then the old one deleted.
	ike0, child0 := childOf()
	p.cfg.Tunnels[0].ESPProposals = []string{"aes256gcm16-x25519"}
	res := p.apply()
	if !contains(res.Loaded, "t1") || !contains(res.Migrated, "t1") {
		t.Fatalf("ESP change not applied make-before-break: %+v", res)
	}
	p.until("one child SA left", 10*time.Second, func() bool { return len(p.sas()["t1"][0].Children) == 1 })
	if ike1, child1 := childOf(); ike1 != ike0 || child1 == child0 {
		t.Errorf("after the ESP change: IKE SA #%s child #%s (before #%s child #%s)", ike1, child1, ike0, child0)
	}

	// IKE settings: a new IKE SA, then the old one deleted.
	p.cfg.Tunnels[0].IKEProposals = []string{"aes256gcm16-prfsha384-x25519"}
	res = p.apply()
	if !contains(res.Migrated, "t1") {
		t.Fatalf("IKE change not applied make-before-break: %+v", res)
	}
	p.until("one IKE SA left", 10*time.Second, func() bool { return len(p.sas()["t1"]) == 1 })
	if ike2 := ikeID(); ike2 == ike0 {
		t.Errorf("still IKE SA #%s after the IKE change", ike2)
	}
	if d := down.Load(); d != 0 {
		t.Errorf("the tunnel read as down in %d of %d listings during the changes", d, samples.Load())
	}

	// A change the client refuses: the old SA keeps carrying, the status says so.
	before := ikeID()
	p.cfg.Tunnels[0].IKEProposals = []string{"aes128-sha256-modp3072"}
	res = p.apply()
	if contains(res.Migrated, "t1") || contains(res.Restarted, "t1") {
		t.Fatalf("a refused change was applied: %+v", res)
	}
	pl := p.loader.Plan("t1")
	if pl.ChangeReason != ReasonChangeRefused || !strings.Contains(pl.ChangeMessage, "IKE proposal") || !strings.Contains(pl.ChangeMessage, "previous settings") {
		t.Errorf("plan after a refused change: %+v", pl)
	}
	if !p.up("t1") || ikeID() != before {
		t.Errorf("the refused change touched the running SA")
	}
	if d := down.Load(); d != 0 {
		t.Errorf("the tunnel read as down in %d of %d listings", d, samples.Load())
	}

}

// TestChangeNeedingATeardownIsReported: a client that accepts one IKE SA at a time (here
// charon's ikesa_limit = 1; other implementations refuse a second SA from the same peer
// outright) never answers the second one, so an IKE change cannot be made beside the
// running SA: the old SA is torn down first, and the plan says so until the tunnel is up
// on the new settings.
func TestChangeNeedingATeardownIsReported(t *testing.T) {
	p := newPairWith(t, 1, func(tn *gatewayconfig.Tunnel) {
		tn.IKEProposals = []string{"aes128gcm16-prfsha256-x25519", "aes256gcm16-prfsha384-x25519"}
	}, "  ikesa_limit = 1\n")
	p.loadClient(client(1, map[string]string{"ike": "aes128gcm16-prfsha256-x25519,aes256gcm16-prfsha384-x25519"}))
	p.apply()
	p.until("tunnel up", 20*time.Second, func() bool { return p.up("t1") })
	first := p.sas()["t1"][0].UniqueID
	p.cfg.Tunnels[0].IKEProposals = []string{"aes256gcm16-prfsha384-x25519"}
	res := p.apply()
	if !contains(res.Restarted, "t1") {
		t.Fatalf("no teardown although the client takes no second IKE SA: %+v", res)
	}
	if pl := p.loader.Plan("t1"); pl.ChangeReason != ReasonReestablishing || !strings.Contains(pl.ChangeMessage, "torn down") || !strings.Contains(pl.ChangeMessage, "no answer") {
		t.Errorf("plan after the teardown: %+v", pl)
	}
	p.until("tunnel up on the new settings", 20*time.Second, func() bool {
		sas := p.sas()["t1"]
		return Summarize(sas, "t1").Up && sas[0].UniqueID != first
	})
	p.apply()
	if pl := p.loader.Plan("t1"); pl.ChangeReason != "" {
		t.Errorf("change still reported once up: %+v", pl)
	}
}
