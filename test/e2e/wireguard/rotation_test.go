package wireguard

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/test/e2e/netns"
)

// TestWireGuardKeyRotation rotates the gateway's key with real handshakes on both keys,
// as the operator and the kubelet would: the config first (the status agent reads it
// from the API), the mounted key files a moment later. Two client sites are on the old
// key; one switches to the new key and port during the overlap, the other does not.
// Neither loses a packet while it stays on its key; the switching site's outage is
// measured; the gateway answers each site through the device it completed its latest
// handshake with; after retirement the old key's device is gone and the site that did
// not switch gets no answer, while the other keeps its traffic.
func TestWireGuardKeyRotation(t *testing.T) {
	w, outer := newWorld(t)
	oldKey := w.gwKey
	oldPub := oldKey.PublicKey().String()
	slot1Port := int(v1alpha1.WireGuardKeyPort(w.obj.Spec.WireGuard, 1))

	roam := w.genKey("q")
	w.obj.Spec.WireGuard.Peers = append(w.obj.Spec.WireGuard.Peers, v1alpha1.WireGuardPeer{
		Name: "roamer", PublicKey: roam[1], AllowedIPs: []string{roamNet}, PersistentKeepalive: 25,
	})
	w.render()
	w.clientWireGuard("q", w.Prefix+"q", 51822, floatingIP+":"+strconv.Itoa(listenPort), roamAddr+"/32")
	w.Eventually("the roamer reaches the exposure", func() bool { return w.roamerCurl() != "" })

	w.Start("ping-site", w.NS("c"), nil, "ping", "-D", "-O", "-n", "-i", "0.1", "100.64.9.12")
	w.Start("ping-roamer", w.NS("q"), nil, "ping", "-D", "-O", "-n", "-i", "0.1", "-I", roamAddr, "100.64.9.12")
	w.Eventually("both sites' pings answered", func() bool {
		return len(pingReplies(w.Log("ping-site"))) > 0 && len(pingReplies(w.Log("ping-roamer"))) > 0
	})

	// The operator rotates: the new key on slot 1's port, the previous one kept on its
	// own. The kubelet has not refreshed the key files yet: the new device waits, the
	// old one keeps serving.
	newKey, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	newPub := newKey.PublicKey().String()
	w.obj.Status.WireGuard = &v1alpha1.WireGuardStatus{PublicKey: newPub, ListenPort: int32(slot1Port), PreviousPublicKey: oldPub, PreviousListenPort: listenPort}
	w.render()
	w.Eventually("the agent waits for the new key's file", func() bool {
		return strings.Contains(w.Log("wireguard"), "waiting for the kubelet to mount the private key of "+w.gwIface1())
	})
	time.Sleep(2500 * time.Millisecond) // the kubelet's refresh takes a while: a few syncs
	if st := w.state(); st.PublicKey != oldPub || st.Previous != nil {
		t.Fatalf("before the new key is mounted the old device must serve alone: %+v", st)
	}
	if n := strings.Count(w.Log("wireguard"), "waiting for the kubelet"); n != 1 {
		t.Errorf("the wait for the new key was logged %d times over several syncs, want once:\n%s", n, w.Log("wireguard"))
	}
	// The kubelet's refresh: current and previous key files.
	writeFile(t, filepath.Join(w.Dir, "gw-previous.key"), oldKey.String())
	writeFile(t, filepath.Join(w.Dir, "gw.key"), newKey.String())
	w.Eventually("both keys served, each on its own device and port", func() bool {
		st := w.state()
		return st.Interface == w.gwIface1() && st.PublicKey == newPub && st.ListenPort == slot1Port &&
			st.Previous != nil && st.Previous.Interface == w.gwIface && st.Previous.PublicKey == oldPub && st.Previous.ListenPort == listenPort
	})
	if strings.Count(w.Log("wireguard"), "created "+w.gwIface+" ") != 1 {
		t.Errorf("the old key's device was recreated by the rotation:\n%s", w.Log("wireguard"))
	}

	// The site's administrator configures the new key and port (what kubectl vpn
	// peer-config prints during the overlap); the roamer does not.
	siteIface := w.Prefix + "c"
	switched := time.Now()
	w.Must(w.NS("p"), "wg", "set", siteIface, "peer", oldPub, "remove")
	w.Must(w.NS("p"), "wg", "set", siteIface, "peer", newPub, "endpoint", fmt.Sprintf("%s:%d", floatingIP, slot1Port), "allowed-ips", serviceCIDR)
	w.Eventually("the site's handshake with the new key", func() bool {
		p, _ := w.state().Peer("site")
		return p.LatestHandshake.After(switched.Add(-time.Second))
	})
	w.Eventually("the site's exposure and reverse exposure through the new key", func() bool {
		return w.Curl("c", "https://100.64.9.10:8443/") == "backend saw "+portFixedIP && w.Curl("f", "http://100.64.9.200:8080/") == "client saw 100.64.9.1"
	})
	if body := w.roamerCurl(); body != "backend saw "+portFixedIP {
		t.Errorf("the roamer, still on the previous key, got %q", body)
	}
	if p, _ := w.state().Previous.Peer("roamer"); p.LatestHandshake.IsZero() {
		t.Errorf("the roamer has no handshake on the previous key's device: %+v", w.state().Previous)
	}
	time.Sleep(3 * time.Second) // more pings on both keys

	// Retirement: the config and the Secret drop the previous key.
	retired := time.Now()
	w.obj.Status.WireGuard = &v1alpha1.WireGuardStatus{PublicKey: newPub, ListenPort: int32(slot1Port)}
	w.render()
	if err := os.Remove(filepath.Join(w.Dir, "gw-previous.key")); err != nil {
		t.Fatal(err)
	}
	w.Eventually("the previous key's device removed", func() bool {
		_, err := w.Sh(w.NS("g"), "ip", "link", "show", w.gwIface)
		return err != nil && w.state().Previous == nil
	})
	time.Sleep(3 * time.Second)
	siteLog, roamLog := w.Log("ping-site"), w.Log("ping-roamer")
	w.Stop("ping-site", syscall.SIGINT)
	w.Stop("ping-roamer", syscall.SIGINT)
	if body := w.roamerCurl(); body != "" {
		t.Errorf("after retirement the roamer, on the retired key, still got an answer: %q", body)
	}
	if w.Curl("c", "https://100.64.9.10:8443/") != "backend saw "+portFixedIP {
		t.Error("after retirement the site on the new key lost its exposure")
	}

	site, roamer := pingReplies(siteLog), pingReplies(roamLog)
	// The roamer, on the old key until retirement: every ping answered up to it (ping -O
	// reports each one unanswered when the next goes out).
	if gap, lost := longestGap(roamer, time.Time{}, retired); lost != 0 || len(unanswered(roamLog, retired)) != 0 {
		t.Errorf("the roamer lost %d pings on the old key during the overlap (longest gap %s), unanswered %v", lost, gap, unanswered(roamLog, retired))
	}
	if n := repliesAfter(roamer, retired.Add(time.Second)); n != 0 {
		t.Errorf("%d pings of the roamer answered after its key was retired", n)
	}
	// The site: no loss before its switch, its outage measured across the switch, and
	// every ping answered after its traffic came back until the end.
	if gap, lost := longestGap(site, time.Time{}, switched); lost != 0 || len(unanswered(siteLog, switched)) != 0 {
		t.Errorf("the site lost %d pings before it switched (longest gap %s), unanswered %v", lost, gap, unanswered(siteLog, switched))
	}
	outage, lost := longestGap(site, switched.Add(-time.Second), retired)
	t.Logf("the site's switch to the new key: %s without an answer, %d pings lost; the roamer: %d pings, none lost until retirement",
		outage.Round(time.Millisecond), lost, len(roamer))
	if repliesAfter(site, switched.Add(outage)) == 0 {
		t.Error("the site's pings never came back on the new key")
	}

	// Only WireGuard on the wire: the new key's port too, never an inner address.
	for _, stop := range outer {
		file := stop()
		inner := netns.ReadPcap(t, file, "net "+clientNet+" or net "+roamNet+" or net 100.64.0.0/10 or net 203.0.113.0/24 or net "+backendNet)
		other := netns.ReadPcap(t, file, fmt.Sprintf("ip and not udp port %d and not udp port %d and not icmp and not (igmp and src host %s)", listenPort, slot1Port, routerWAN))
		if len(inner) != 0 || len(other) != 0 {
			t.Errorf("%s carried more than WireGuard:\n%s\n%s", filepath.Base(file), strings.Join(netns.First(inner, 10), "\n"), strings.Join(netns.First(other, 10), "\n"))
		}
	}
}

func (w *world) roamerCurl() string {
	out, _ := w.Sh(w.NS("q"), "curl", "-sk", "--max-time", "3", "--interface", roamAddr, "https://100.64.9.10:8443/")
	return strings.TrimSpace(out)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// reply is one answered ping: its sequence number and when the answer came (ping -D).
type reply struct {
	seq int
	at  time.Time
}

var rePing = regexp.MustCompile(`^\[(\d+)\.(\d+)\] \d+ bytes from .*icmp_seq=(\d+)`)

func pingReplies(log string) []reply {
	var out []reply
	for _, l := range strings.Split(log, "\n") {
		m := rePing.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		sec, _ := strconv.ParseInt(m[1], 10, 64)
		frac, _ := strconv.ParseFloat("0."+m[2], 64)
		seq, _ := strconv.Atoi(m[3])
		out = append(out, reply{seq: seq, at: time.Unix(sec, int64(frac*1e9))})
	}
	return out
}

var reUnanswered = regexp.MustCompile(`^\[(\d+)\.\d+\] no answer yet for icmp_seq=(\d+)`)

// unanswered returns the sequence numbers ping -O reported unanswered before t.
func unanswered(log string, t time.Time) []int {
	var out []int
	for _, l := range strings.Split(log, "\n") {
		m := reUnanswered.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		sec, _ := strconv.ParseInt(m[1], 10, 64)
		if seq, _ := strconv.Atoi(m[2]); time.Unix(sec, 0).Before(t.Truncate(time.Second)) {
			out = append(out, seq)
		}
	}
	return out
}

func repliesAfter(rs []reply, t time.Time) int {
	n := 0
	for _, r := range rs {
		if r.at.After(t) {
			n++
		}
	}
	return n
}

// longestGap is the longest time between two answers within [from, to], and how many
// sequence numbers went unanswered there.
func longestGap(rs []reply, from, to time.Time) (gap time.Duration, lost int) {
	var last *reply
	for i := range rs {
		r := &rs[i]
		if r.at.Before(from) || r.at.After(to) {
			continue
		}
		if last != nil {
			lost += r.seq - last.seq - 1
			gap = max(gap, r.at.Sub(last.at))
		}
		last = r
	}
	return gap, lost
}
