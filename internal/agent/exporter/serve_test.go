package exporter

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	govici "github.com/strongswan/govici/vici"

	"bnerd.net/vpn-operator/internal/agent/vici"
)

func TestRekeysCountsRekeyEventsPerConnection(t *testing.T) {
	var r Rekeys
	ev := func(name string, conns ...string) govici.Event {
		m := govici.NewMessage()
		for _, c := range conns {
			_ = m.Set(c, govici.NewMessage())
		}
		return govici.Event{Name: name, Message: m}
	}
	r.Observe(ev("ike-rekey", "t1"))
	r.Observe(ev("child-rekey", "t1"))
	r.Observe(ev("child-rekey", "t2"))
	r.Observe(ev("ike-updown", "t1")) // not a rekey
	c := r.Counts()
	if c["t1"] != 2 || c["t2"] != 1 || len(c) != 2 {
		t.Errorf("counts %v", c)
	}
	c["t1"] = 99
	if r.Counts()["t1"] != 2 {
		t.Error("Counts returned the live map")
	}
}

func TestServeUntilCancelled(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := &Collector{Tunnels: func() []string { return []string{"t1"} },
		SAs: func(context.Context, []string) (map[string][]vici.IKESA, error) { return nil, nil }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, col) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `bnerd_ipsec_tunnel_up{tunnel="t1"} 0`) {
		t.Errorf("metrics:\n%s", body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
