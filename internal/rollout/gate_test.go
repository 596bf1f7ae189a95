package rollout

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestParseBudget(t *testing.T) {
	for _, tc := range []struct {
		in      string
		of      map[int]int // total -> slots
		wantErr bool
	}{
		{in: "1", of: map[int]int{0: 1, 10: 1, 1000: 1}},
		{in: "3", of: map[int]int{1: 3, 1000: 3}},
		{in: "10%", of: map[int]int{0: 1, 1: 1, 9: 1, 10: 1, 11: 2, 1000: 100}},
		{in: "100%", of: map[int]int{7: 7}},
		{in: " 25% ", of: map[int]int{8: 2}},
		{in: "0", wantErr: true},
		{in: "0%", wantErr: true},
		{in: "-2", wantErr: true},
		{in: "101%", wantErr: true},
		{in: "", wantErr: true},
		{in: "ten", wantErr: true},
		{in: "1.5", wantErr: true},
	} {
		b, err := ParseBudget(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseBudget(%q): err %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		for total, want := range tc.of {
			if got := b.Of(total); got != want {
				t.Errorf("ParseBudget(%q).Of(%d) = %d, want %d", tc.in, total, got, want)
			}
		}
	}
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func gws(n int) []Gateway {
	var out []Gateway
	for i := range n {
		name := fmt.Sprintf("gw%d", i)
		out = append(out, Gateway{UID: types.UID("uid-" + name), Kind: "IPsecGateway", Key: types.NamespacedName{Namespace: "t", Name: name}})
	}
	return out
}

func admitted(g *Gate, all []Gateway) []string {
	var out []string
	for _, gw := range all {
		if g.Admit(gw).Admitted {
			out = append(out, gw.Key.Name)
		}
	}
	return out
}

// One canary first; once it is back, the budget; waiting gateways in the order they
// asked; Back wakes exactly the ones that may go now.
func TestCanaryThenBudget(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	var woken []string
	g := &Gate{Budget: Budget{n: 2}, Timeout: time.Minute, Now: c.now, Wake: func(gw Gateway) { woken = append(woken, gw.Key.Name) }}
	all := gws(5)
	if got := admitted(g, all); fmt.Sprint(got) != "[gw0]" {
		t.Fatalf("first round admitted %v, want only the canary gw0", got)
	}
	d := g.Admit(all[3])
	if d.Admitted || d.Slots != 1 || d.Ahead != 3 {
		t.Fatalf("gw3 while the canary rolls: %+v, want not admitted, 1 slot, 3 ahead (gw0 rolling, gw1, gw2 waiting)", d)
	}
	// Asking again keeps the place and the canary's admission.
	if d := g.Admit(all[0]); !d.Admitted || !d.Since.Equal(c.t) {
		t.Fatalf("the canary asking again: %+v", d)
	}
	c.t = c.t.Add(10 * time.Second)
	g.Back(all[0].UID)
	if fmt.Sprint(woken) != "[gw1 gw2]" {
		t.Fatalf("woken after the canary came back: %v, want [gw1 gw2] (budget 2, first asked first)", woken)
	}
	// gw4 asks before gw1 and gw2 come back for their slots: it is behind them.
	if d := g.Admit(all[4]); d.Admitted {
		t.Fatalf("gw4 jumped the queue: %+v", d)
	}
	if got := admitted(g, all[1:3]); fmt.Sprint(got) != "[gw1 gw2]" {
		t.Fatalf("admitted %v, want [gw1 gw2]", got)
	}
	if got := admitted(g, all[3:]); len(got) != 0 {
		t.Fatalf("admitted %v beyond the budget of 2", got)
	}
	woken = nil
	g.Back(all[1].UID)
	if fmt.Sprint(woken) != "[gw3]" {
		t.Fatalf("woken: %v, want [gw3]", woken)
	}
}

// A restart that does not come back within the timeout halts the rollout; its return
// (or its gateway's deletion) resumes it.
func TestOverdueRestartHalts(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	var woken []string
	g := &Gate{Budget: Budget{n: 10, percent: true}, Timeout: time.Minute, Now: c.now, Wake: func(gw Gateway) { woken = append(woken, gw.Key.Name) }}
	all := gws(3)
	admitted(g, all)
	c.t = c.t.Add(2 * time.Minute)
	if _, overdue, ok := g.Rolling(all[0].UID); !ok || !overdue {
		t.Fatalf("the canary after twice the timeout: rolling %v overdue %v", ok, overdue)
	}
	if d := g.Admit(all[1]); d.Admitted || !d.Halted {
		t.Fatalf("admission while halted: %+v", d)
	}
	g.Back(all[0].UID)
	if g.Halted() || fmt.Sprint(woken) != "[gw1 gw2]" {
		t.Fatalf("after the overdue one came back: halted %v, woken %v (want every waiting gateway: the halt ended)", g.Halted(), woken)
	}
	if got := admitted(g, all[1:]); fmt.Sprint(got) != "[gw1]" {
		t.Fatalf("after the halt: admitted %v, want gw1 only (10%% of 3 is 1)", got)
	}
	c.t = c.t.Add(2 * time.Minute)
	if !g.Halted() {
		t.Fatal("gw1 overdue: want halted")
	}
	woken = nil
	g.Admit(all[2]) // finds the halt
	g.Forget(all[1].UID)
	if g.Halted() || fmt.Sprint(woken) != "[gw2]" {
		t.Fatalf("after the overdue gateway was deleted: halted %v, woken %v", g.Halted(), woken)
	}
}

// A restarted operator resumes the restarts its predecessor started: they hold their
// slots (and can be overdue) before anything new is admitted; the canary stage starts
// again.
func TestResume(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	g := &Gate{Budget: Budget{n: 5}, Timeout: time.Minute, Now: c.now}
	all := gws(3)
	g.Resume(map[Gateway]time.Time{all[0]: c.t.Add(-30 * time.Second)})
	if got := admitted(g, all[1:]); len(got) != 0 {
		t.Fatalf("admitted %v while the resumed restart holds the one canary slot", got)
	}
	c.t = c.t.Add(31 * time.Second)
	if !g.Halted() {
		t.Fatal("the resumed restart is overdue after its original start plus the timeout: want halted")
	}
	g.Back(all[0].UID)
	if got := admitted(g, all[1:]); fmt.Sprint(got) != "[gw1 gw2]" {
		t.Fatalf("after it came back: admitted %v", got)
	}
}

// Withdrawing a waiting gateway lets the next one take its place; a restart in
// progress is not withdrawn.
func TestWithdraw(t *testing.T) {
	g := &Gate{Budget: Budget{n: 5}, Timeout: time.Minute}
	all := gws(3)
	admitted(g, all)
	g.Withdraw(all[0].UID)
	g.Withdraw(all[1].UID)
	if _, _, ok := g.Rolling(all[0].UID); !ok {
		t.Fatal("Withdraw ended the canary's restart")
	}
	if ahead, slots, _, ok := g.Queue(all[2].UID); !ok || ahead != 1 || slots != 1 {
		t.Fatalf("gw2 after gw1 withdrew: ahead %d slots %d waiting %v, want 1 ahead (the canary), 1 slot", ahead, slots, ok)
	}
}
