package vici

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// soakEnv lengthens TestRekeysNeverReadDown (a Go duration, "10m"); the default runs in
// make test.
const soakEnv = "BNERD_REKEY_SOAK"

// shape is a listing in the short form of the recorded listings (settle_test.go).
func shape(sas []IKESA) string {
	var b []string
	for _, sa := range sas {
		var c []string
		for _, ch := range sa.Children {
			c = append(c, ch.State)
		}
		b = append(b, sa.State+"["+strings.Join(c, ",")+"]")
	}
	return strings.Join(b, " ")
}

// slowIKE is the IKE proposal of the rekey soak: a MODP-8192 key exchange keeps charon
// busy with each IKE rekey for a while (tens of milliseconds here), the old IKE SA held
// all along, so listings catch the rekey halfway at nearly every IKE rekey instead of
// now and then.
const slowIKE = "aes128gcm16-prfsha256-modp8192"

// rekeyingClient is the client's configuration with its IKE and child SA rekeyed every
// 10 s, with the margins of widened.
func rekeyingClient() string {
	c := client(1, map[string]string{"ike": slowIKE})
	c = strings.Replace(c, "    unique = no\n", "    unique = no\n    rekey_time = 10s\n", 1)
	return widened(strings.Replace(c, "        esp_proposals = aes128gcm16-x25519\n", "        esp_proposals = aes128gcm16-x25519\n        rekey_time = 10s\n", 1))
}

// widened gives the IKE SA (the first rekey_time of 10 s in conf) and the child SA (the
// second) 20 s between the rekey and the expiry instead of charon's 10 % (1 s), and 1 s
// of jitter. A slow IKE rekey holds the IKE SA, and a child SA rekey due meanwhile waits
// for it: with 1 s to spare, a loaded machine let child SAs expire (a real outage, read
// down rightly), which is not what this soak is about.
func widened(conf string) string {
	const rekey = "rekey_time = 10s\n"
	i := strings.Index(conf, rekey)
	if i < 0 {
		return conf
	}
	i += len(rekey)
	conf = conf[:i] + "over_time = 20s\nrand_time = 1s\n" + conf[i:]
	if j := strings.Index(conf[i:], rekey); j >= 0 {
		j += i + len(rekey)
		conf = conf[:j] + "life_time = 30s\nrand_time = 1s\n" + conf[j:]
	}
	return conf
}

// TestRekeysNeverReadDown: with the IKE SA and the child SA rekeyed every 10 s, first by
// charon (the gateway), then by the client (charon answers), listers as the status
// agent and the exporter use them (ListSAsOn, 50 times a second, each with its own memory)
// never read the tunnel down, and the loader, applying every 50 ms as on charon's
// events, never initiates a redundant SA. Raw listers beside them (one list-sas each,
// no re-listing) show what the settling hides: every listing of theirs that read down
// after reading up is logged with its shape, and every distinct shape they saw (the
// recorded listings of TestSettleOverRecordedListings). 30 s each here;
// BNERD_REKEY_SOAK=10m by hand; BNERD_REKEY_SETTLE=off removes the settling (the
// negative control: the settled listers then read down). Both sides at the same
// lifetimes would collide at nearly every rekey, and charon 5.9.8 has lost both IKE SAs
// of a collision for real (no SA left): not a listing's fault, so left out here.
func TestRekeysNeverReadDown(t *testing.T) {
	window := 30 * time.Second
	if v := os.Getenv(soakEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s: %v", soakEnv, err)
		}
		window = d
	}
	if os.Getenv("BNERD_REKEY_SETTLE") == "off" {
		old := relistPauses
		relistPauses = nil
		t.Cleanup(func() { relistPauses = old })
	}
	t.Run("charon initiates", func(t *testing.T) { soakRekeys(t, window, 10, client(1, map[string]string{"ike": slowIKE})) })
	t.Run("the client initiates", func(t *testing.T) { soakRekeys(t, window, 3600, rekeyingClient()) })
}

// soakRekeys lists the tunnel for window with the gateway's lifetimes at gwRekey seconds
// and the client configured by clientConf.
func soakRekeys(t *testing.T, window time.Duration, gwRekey int64, clientConf string) {
	p := newPair(t, 1, func(tn *gatewayconfig.Tunnel) {
		tn.IKERekeySeconds, tn.ESPRekeySeconds = gwRekey, gwRekey
		tn.IKEProposals = []string{slowIKE}
	})
	p.loadClient(clientConf)
	sw, sec := p.rendered()
	sw = widened(sw)
	if _, err := p.loader.Apply(context.Background(), sw, sec); err != nil {
		t.Fatal(err)
	}
	p.until("tunnel up", 20*time.Second, func() bool { return p.up("t1") })

	type tally struct {
		listings, down int
		ike, child     map[string]bool
	}
	var (
		mu       sync.Mutex
		settled  = tally{ike: map[string]bool{}, child: map[string]bool{}}
		raw      tally
		shapes   = map[string]int{}
		evidence []string
		// failed counts listings and loader rounds that failed (under this load charon
		// sometimes leaves connections in its socket's backlog: the exporter then leaves
		// the gauges out, the status agent keeps its report); lastErr is one of them.
		failed  int
		lastErr error
	)
	deadline := time.Now().Add(window)
	var wg sync.WaitGroup
	var initiated []string
	wg.Add(1)
	go func() { // the loader, as the status agent runs it on charon's events
		defer wg.Done()
		for time.Now().Before(deadline) {
			res, err := p.loader.Apply(context.Background(), sw, sec)
			mu.Lock()
			if err != nil {
				failed, lastErr = failed+1, err
			}
			initiated = append(initiated, res.Initiated...)
			initiated = append(initiated, res.Restarted...)
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}()
	for i := 0; i < 2; i++ {
		wg.Add(2)
		go func() { // as the exporter and the status agent list, 50 times a second
			defer wg.Done()
			list := ListSAsOn(p.gsock)
			for ; time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				sas, err := list(context.Background(), []string{"t1"})
				mu.Lock()
				settled.listings++
				if err != nil {
					failed, lastErr = failed+1, err
				} else if !Summarize(sas["t1"], "t1").Up {
					settled.down++
					evidence = append(evidence, "SETTLED LISTING READ DOWN: "+shape(sas["t1"]))
				}
				for _, sa := range sas["t1"] {
					settled.ike[sa.UniqueID] = true
					for _, c := range sa.Children {
						settled.child[c.UniqueID] = true
					}
				}
				mu.Unlock()
			}
		}()
		go func() { // one list-sas, nothing else
			defer wg.Done()
			s, err := Dial(p.gsock)
			for err != nil && time.Now().Before(deadline) { // a full backlog (see failed)
				time.Sleep(10 * time.Millisecond)
				s, err = Dial(p.gsock)
			}
			if err != nil {
				t.Error(err)
				return
			}
			defer s.Close()
			wasUp := true
			for time.Now().Before(deadline) {
				out := map[string][]IKESA{}
				err := listSAs(context.Background(), s, "t1", out)
				up := Summarize(out["t1"], "t1").Up
				mu.Lock()
				raw.listings++
				if err == nil {
					shapes[shape(out["t1"])]++
					if !up {
						raw.down++
						if wasUp {
							evidence = append(evidence, time.Now().Format("15:04:05.000000")+" raw listing read down after up: "+shape(out["t1"]))
						}
					}
				}
				mu.Unlock()
				wasUp = up
			}
		}()
	}
	wg.Wait()
	keys := make([]string, 0, len(shapes))
	for k := range shapes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("raw listing %-50q %7d times, reads up: %v", k, shapes[k], Summarize(listing(k), "t1").Up)
	}
	for _, e := range evidence {
		t.Log(e)
	}
	t.Logf("FIGURE %s, rekeys every 10 s for %s: %d IKE SAs and %d child SAs seen; settled listings %d, read down %d; raw listings %d, read down %d",
		t.Name(), window, len(settled.ike), len(settled.child), settled.listings, settled.down, raw.listings, raw.down)
	if failed > 0 {
		t.Logf("%d listings or loader rounds failed, e.g. %v", failed, lastErr)
	}
	if len(initiated) != 0 {
		t.Errorf("the loader initiated or restarted during the rekeys: %v", initiated)
	}
	if settled.down != 0 {
		t.Errorf("the tunnel read down in %d of %d settled listings", settled.down, settled.listings)
	}
	// Every 10 s, by both sides: at least one IKE rekey and one child rekey per 20 s
	// whatever the jitter, or the lifetimes were not applied and nothing was proven.
	if min := 1 + int(window/(20*time.Second)); len(settled.ike) < min || len(settled.child) < min {
		t.Errorf("only %d IKE SAs and %d child SAs in %s; the rekeys did not happen", len(settled.ike), len(settled.child), window)
	}
	if t.Failed() {
		b, _ := os.ReadFile(filepath.Join(p.dir, "gateway.log"))
		t.Logf("gateway charon log (tail):\n%s", tail(string(b), 80))
	}
}

// TestRealOutagesReadDownAtOnce is the negative control of the settling: a tunnel that
// really goes down reads down at the very next listing of a lister that last saw it up
// (after its bounded re-listings), whether its IKE SA was terminated or charon was
// killed.
func TestRealOutagesReadDownAtOnce(t *testing.T) {
	p := newPair(t, 1, nil)
	p.loadClient(client(1, nil))
	p.apply()
	p.until("tunnel up", 20*time.Second, func() bool { return p.up("t1") })
	list := ListSAsOn(p.gsock)
	read := func() (bool, error) {
		sas, err := list(context.Background(), []string{"t1"})
		return Summarize(sas["t1"], "t1").Up, err
	}
	if up, err := read(); !up || err != nil {
		t.Fatalf("before: up %v, %v", up, err)
	}
	// The client must not answer a new attempt while the terminated SA is read.
	p.loadClient("connections {\n}\nsecrets {\n}\n")
	pairRun(t, "ip", "netns", "exec", p.gns, "swanctl", "--terminate", "--ike", "t1", "--uri", "unix://"+p.gsock)
	if up, err := read(); up || err != nil {
		t.Errorf("the listing after the IKE SA was terminated: up %v, %v", up, err)
	}

	p.loadClient(client(1, nil))
	p.clock.Advance(time.Hour) // past the loader's back-off
	p.apply()
	p.until("tunnel up again", 20*time.Second, func() bool { return p.up("t1") })
	if up, err := read(); !up || err != nil {
		t.Fatalf("up again: up %v, %v", up, err)
	}
	gw := p.procs["gateway"]
	if err := gw.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = gw.Process.Wait()
	if up, err := read(); up || !errors.Is(err, ErrCharonNotRunning) {
		t.Errorf("the listing after charon was killed: up %v, %v; want ErrCharonNotRunning", up, err)
	}
}
