package openstacksim

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/attachinterfaces"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
)

func TestCountersReadOnlySequenceHasZeroWrites(t *testing.T) {
	s := startEstate(t)
	c := login(t, s, "vpn-operator")
	transit, _ := s.NetworkByName("vpn-transit")
	vpn01, _ := s.RouterByName("shoot--services--vpn01")
	p := must[*ports.Port](t)(ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: transit.ID}).Extract())

	s.ResetCounters()
	// What a converged reconcile does: look, change nothing. A token
	// renewal in the middle does not count as a write.
	must[*ports.Port](t)(ports.Get(ctx(), c.network, p.ID).Extract())
	must[[]ports.Port](t)(extractPorts(c, ports.ListOpts{Tags: "bnerd.net/gateway=ns/gw"}))
	must[*routers.Router](t)(routers.Get(ctx(), c.network, vpn01.ID).Extract())
	s.ExpireTokens()
	_, err := attachinterfaces.List(c.compute, workerA).AllPages(ctx())
	ok(t, err)
	got := s.Counters()
	if got.Writes != 0 {
		t.Fatalf("writes = %d: %v", got.Writes, got.ByRoute)
	}
	for route, want := range map[string]int{
		"GET /network/v2.0/ports/{id}":                1,
		"GET /network/v2.0/ports":                     1,
		"GET /network/v2.0/routers/{id}":              1,
		"GET /compute/v2.1/servers/{id}/os-interface": 2, // 401, then the retry
		"POST /identity/v3/auth/tokens":               1,
	} {
		if got.ByRoute[route] != want {
			t.Fatalf("%s = %d, want %d (all: %v)", route, got.ByRoute[route], want, got.ByRoute)
		}
	}
	if got.Reads != 5 || got.Tokens != 1 {
		t.Fatalf("reads=%d tokens=%d (%v)", got.Reads, got.Tokens, got.ByRoute)
	}

	name := "renamed"
	must[*ports.Port](t)(ports.Update(ctx(), c.network, p.ID, ports.UpdateOpts{Name: &name}).Extract())
	got = s.Counters()
	if got.Writes != 1 || got.ByRoute["PUT /network/v2.0/ports/{id}"] != 1 {
		t.Fatalf("after one write: %+v", got)
	}
	log := s.RequestLog()
	last := log[len(log)-1]
	if last.Method != "PUT" || last.Route != "PUT /network/v2.0/ports/{id}" || last.Status != 200 || last.ProjectID == "" {
		t.Fatalf("last log entry %+v", last)
	}
}

func TestFaultStatusRetryAfterAndOneShot(t *testing.T) {
	s := startEstate(t)
	c := login(t, s, "vpn-operator")
	transit, _ := s.NetworkByName("vpn-transit")
	p := must[*ports.Port](t)(ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: transit.ID}).Extract())

	remove := s.Inject(Fault{Method: "GET", PathPattern: "/network/v2.0/ports/*", Status: 503, RetryAfter: 1500 * time.Millisecond})
	_, err := ports.Get(ctx(), c.network, p.ID).Extract()
	wantErr(t, err, 503, "ServiceUnavailable")
	var ue gophercloud.ErrUnexpectedResponseCode
	if !errors.As(err, &ue) || ue.ResponseHeader.Get("Retry-After") != "2" {
		t.Fatalf("Retry-After header: %v", ue.ResponseHeader)
	}
	// Other routes are untouched.
	must[[]ports.Port](t)(extractPorts(c, ports.ListOpts{NetworkID: transit.ID}))
	remove()
	must[*ports.Port](t)(ports.Get(ctx(), c.network, p.ID).Extract())

	// One-shot: the next two creates fail with 500, the third succeeds.
	s.Inject(Fault{Method: "POST", PathPattern: "/network/v2.0/ports", Status: 500, Count: 2})
	for i := 0; i < 2; i++ {
		_, err := ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: transit.ID}).Extract()
		wantErr(t, err, 500, "HTTPInternalServerError")
	}
	must[*ports.Port](t)(ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: transit.ID}).Extract())
	if n := s.Counters().Faulted; n != 3 {
		t.Fatalf("faulted = %d, want 3", n)
	}

	// 429 on Nova, in Nova's shape, selected by route template.
	s.Inject(Fault{PathPattern: "/compute/v2.1/servers/{id}/os-interface", Status: 429, RetryAfter: time.Second, Count: 1})
	_, err = attachinterfaces.List(c.compute, workerA).AllPages(ctx())
	wantErr(t, err, 429, "overLimit")

	// A regexp pattern and a rate: about half of 200 requests fail.
	s.ClearFaults()
	s.Inject(Fault{PathPattern: "re:^/network/v2\\.0/ports/[0-9a-f-]+$", Status: 500, Rate: 0.5})
	var failed, passed int
	for i := 0; i < 200; i++ {
		if _, err := ports.Get(ctx(), c.network, p.ID).Extract(); err != nil {
			failed++
		} else {
			passed++
		}
	}
	if failed == 0 || passed == 0 {
		t.Fatalf("rate 0.5: failed=%d passed=%d", failed, passed)
	}
}

func TestFaultLatency(t *testing.T) {
	s := startEstate(t)
	c := login(t, s, "vpn-operator")
	s.Inject(Fault{Method: "GET", PathPattern: "/network/v2.0/routers/*", Latency: 150 * time.Millisecond, Count: 1})
	vpn01, _ := s.RouterByName("shoot--services--vpn01")
	start := time.Now()
	must[*routers.Router](t)(routers.Get(ctx(), c.network, vpn01.ID).Extract())
	// A lower bound only: the request cannot have been answered sooner.
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("answered after %v, latency not applied", d)
	}
}

func TestFaultDropAndHang(t *testing.T) {
	s := startEstate(t)
	c := login(t, s, "vpn-operator")
	transit, _ := s.NetworkByName("vpn-transit")

	s.Inject(Fault{Method: "POST", PathPattern: "/network/v2.0/ports", Drop: true, Count: 1})
	before := len(s.Ports())
	_, err := ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: transit.ID}).Extract()
	if err == nil || gophercloud.ResponseCodeIs(err, 500) {
		t.Fatalf("dropped request: want a transport error, got %v", err)
	}
	if len(s.Ports()) != before {
		t.Fatal("dropped create reached the handler")
	}
	must[*ports.Port](t)(ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: transit.ID}).Extract())
	if len(s.Ports()) != before+1 {
		t.Fatal("create after the drop did not work")
	}

	s.Inject(Fault{Method: "GET", PathPattern: "/network/v2.0/ports", Hang: true})
	cctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = ports.List(c.network, ports.ListOpts{NetworkID: transit.ID}).AllPages(cctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung request: want deadline exceeded, got %v", err)
	}
	// Raw HTTP sees the connection end without a response when dropped.
	s.Inject(Fault{Method: "GET", PathPattern: "/compute/*", Drop: true})
	resp, err := http.Get(s.URL() + "/compute/")
	if err == nil {
		resp.Body.Close()
		t.Fatalf("drop answered %d", resp.StatusCode)
	}
	if !strings.Contains(err.Error(), "EOF") && !strings.Contains(err.Error(), "reset") {
		t.Logf("drop error: %v", err)
	}
}

// TestTallyCountsByQuery: a tally counts the requests its predicate accepts (here the
// port lists of one whole network, not those by tag), and keeps counting after a reset.
func TestTallyCountsByQuery(t *testing.T) {
	s := startEstate(t)
	c := login(t, s, "vpn-operator")
	transit, _ := s.NetworkByName("vpn-transit")
	s.Tally("whole network", func(r RequestRecord) bool {
		return r.Method == "GET" && r.Path == "/network/v2.0/ports" && r.Query == "network_id="+transit.ID
	})
	must[[]ports.Port](t)(extractPorts(c, ports.ListOpts{NetworkID: transit.ID}))
	must[[]ports.Port](t)(extractPorts(c, ports.ListOpts{NetworkID: transit.ID, Tags: "bnerd.net/gateway=ns/gw"}))
	if got := s.Counters().Tallies["whole network"]; got != 1 {
		t.Fatalf("tally = %d after one whole-network list and one by tag, want 1", got)
	}
	s.ResetCounters()
	if got := s.Counters().Tallies["whole network"]; got != 0 {
		t.Fatalf("tally = %d after a reset, want 0", got)
	}
	must[[]ports.Port](t)(extractPorts(c, ports.ListOpts{NetworkID: transit.ID}))
	if got := s.Counters().Tallies["whole network"]; got != 1 {
		t.Fatalf("tally = %d after a reset and one list, want 1 (the predicate stays)", got)
	}
}
