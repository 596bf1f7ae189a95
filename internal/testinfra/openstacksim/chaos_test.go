package openstacksim

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/attachinterfaces"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
)

func TestRateLimitAnswers429WithRetryAfter(t *testing.T) {
	s := startEstate(t)
	c := login(t, s, "vpn-operator")
	admin := login(t, s, "admin")
	vpn01, _ := s.RouterByName("shoot--services--vpn01")
	// One token a second, two in the bucket: the third request in a row is refused.
	s.SetRateLimit(RateLimit{QPS: 1, Burst: 2, PerProject: true})
	for i := 0; i < 2; i++ {
		must[*routers.Router](t)(routers.Get(ctx(), c.network, vpn01.ID).Extract())
	}
	_, err := routers.Get(ctx(), c.network, vpn01.ID).Extract()
	wantErr(t, err, 429, "OverLimit")
	var ue gophercloud.ErrUnexpectedResponseCode
	if !errors.As(err, &ue) || ue.ResponseHeader.Get("Retry-After") != "1" {
		t.Fatalf("Retry-After: %v", ue.ResponseHeader)
	}
	// Another project has its own bucket; Nova has its own, limited the same way.
	must[*routers.Router](t)(routers.Get(ctx(), admin.network, vpn01.ID).Extract())
	for i := 0; i < 2; i++ {
		_, err = attachinterfaces.List(c.compute, workerA).AllPages(ctx())
		ok(t, err)
	}
	_, err = attachinterfaces.List(c.compute, workerA).AllPages(ctx())
	wantErr(t, err, 429, "overLimit")
	if n := s.RateLimited(); n != 2 {
		t.Fatalf("RateLimited = %d, want 2", n)
	}
	// Refused requests take no token: after the advertised wait the next one passes.
	time.Sleep(1100 * time.Millisecond)
	must[*routers.Router](t)(routers.Get(ctx(), c.network, vpn01.ID).Extract())

	// Off again: nothing is refused.
	s.SetRateLimit(RateLimit{})
	for i := 0; i < 20; i++ {
		must[*routers.Router](t)(routers.Get(ctx(), c.network, vpn01.ID).Extract())
	}
	if n := s.RateLimited(); n != 2 {
		t.Fatalf("RateLimited = %d after switching off", n)
	}
}

func TestStormSwitchesAFaultOnAndOff(t *testing.T) {
	s := startEstate(t)
	c := login(t, s, "vpn-operator")
	vpn01, _ := s.RouterByName("shoot--services--vpn01")
	stop := s.Storm(Fault{Method: "GET", PathPattern: "/network/v2.0/routers/{id}", Status: 409}, 200*time.Millisecond, 100*time.Millisecond)
	var conflicts, passed int
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		_, err := routers.Get(ctx(), c.network, vpn01.ID).Extract()
		switch {
		case err == nil:
			passed++
		case gophercloud.ResponseCodeIs(err, 409):
			conflicts++
		default:
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	if conflicts == 0 || passed == 0 {
		t.Fatalf("a storm both hits and passes: conflicts=%d passed=%d", conflicts, passed)
	}
	for i := 0; i < 20; i++ {
		must[*routers.Router](t)(routers.Get(ctx(), c.network, vpn01.ID).Extract())
	}
}

func TestNovaChaosFailedAttachAttachesNothing(t *testing.T) {
	s := startEstate(t)
	c := login(t, s, "vpn-operator")
	transit, _ := s.NetworkByName("vpn-transit")
	p := must[*ports.Port](t)(ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: transit.ID}).Extract())
	s.SetNovaChaos(NovaChaos{FailAttachRate: 1})
	_, err := attachinterfaces.Create(ctx(), c.compute, workerA, attachinterfaces.CreateOpts{PortID: p.ID}).Extract()
	wantErr(t, err, 500, "computeFault")
	if got, _ := s.Port(p.ID); got.DeviceID != "" {
		t.Fatalf("a failed attach bound the port to %s", got.DeviceID)
	}
	if _, fail, _ := s.NovaChaosSeen(); fail != 1 {
		t.Fatalf("failed attaches seen = %d", fail)
	}
	s.SetNovaChaos(NovaChaos{})
	must[*attachinterfaces.Interface](t)(attachinterfaces.Create(ctx(), c.compute, workerA, attachinterfaces.CreateOpts{PortID: p.ID}).Extract())
}

func TestNovaChaosSlowAttachFinishesAfterTheClientGaveUp(t *testing.T) {
	s := startEstate(t)
	c := login(t, s, "vpn-operator")
	transit, _ := s.NetworkByName("vpn-transit")
	p := must[*ports.Port](t)(ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: transit.ID}).Extract())
	s.SetNovaChaos(NovaChaos{SlowAttachRate: 1, SlowAttach: 400 * time.Millisecond})
	cctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := attachinterfaces.Create(cctx, c.compute, workerA, attachinterfaces.CreateOpts{PortID: p.ID}).Extract()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the client's deadline, got %v", err)
	}
	if got, _ := s.Port(p.ID); got.DeviceID != "" {
		t.Fatal("attached before Nova finished")
	}
	waitFor(t, "the slow attach to finish", func() bool { got, _ := s.Port(p.ID); return got.DeviceID == workerA })
}

func TestNovaChaosSlowDetachAcceptsAtOnceAndFinishesLater(t *testing.T) {
	s := startEstate(t)
	c := login(t, s, "vpn-operator")
	transit, _ := s.NetworkByName("vpn-transit")
	p := must[*ports.Port](t)(ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: transit.ID}).Extract())
	must[*attachinterfaces.Interface](t)(attachinterfaces.Create(ctx(), c.compute, workerA, attachinterfaces.CreateOpts{PortID: p.ID}).Extract())
	s.SetNovaChaos(NovaChaos{SlowDetachRate: 1, SlowDetach: 300 * time.Millisecond})
	ok(t, attachinterfaces.Delete(ctx(), c.compute, workerA, p.ID).ExtractErr())
	if got, _ := s.Port(p.ID); got.DeviceID != workerA {
		t.Fatal("detached before Nova got to it")
	}
	waitFor(t, "the slow detach to finish", func() bool { got, _ := s.Port(p.ID); return got.DeviceID == "" })
}

func TestLatencyDelaysEveryRequest(t *testing.T) {
	s := startEstate(t)
	c := login(t, s, "vpn-operator")
	vpn01, _ := s.RouterByName("shoot--services--vpn01")
	s.SetLatency(100 * time.Millisecond)
	start := time.Now()
	for i := 0; i < 3; i++ {
		must[*routers.Router](t)(routers.Get(ctx(), c.network, vpn01.ID).Extract())
	}
	// A lower bound only: three requests in a row cannot have been answered sooner.
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("three requests answered in %v: latency not applied", d)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second) // generous: an outcome, not a timing
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// With Nova chaos on, operations on one server land in the order they were asked for,
// as Nova's instance lock makes them: a detach asked while a slow attach is under way is
// accepted at once and done after the attach, never overtaken by it.
func TestNovaChaosKeepsOperationsOnAServerInOrder(t *testing.T) {
	s := startEstate(t)
	c := login(t, s, "vpn-operator")
	transit, _ := s.NetworkByName("vpn-transit")
	p := must[*ports.Port](t)(ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: transit.ID}).Extract())
	s.SetNovaChaos(NovaChaos{SlowAttachRate: 1, SlowAttach: 300 * time.Millisecond})
	cctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, _ = attachinterfaces.Create(cctx, c.compute, workerA, attachinterfaces.CreateOpts{PortID: p.ID}).Extract() // gives up waiting
	time.Sleep(100 * time.Millisecond)
	// Chaos stays on (so the instance lock applies) but picks nothing more.
	s.SetNovaChaos(NovaChaos{SlowDetachRate: 1e-9})
	if err := attachinterfaces.Delete(ctx(), c.compute, workerA, p.ID).ExtractErr(); err != nil {
		t.Fatalf("detach while the instance is busy: %v", err)
	}
	waitFor(t, "attach then detach, in that order", func() bool {
		got, _ := s.Port(p.ID)
		return got.DeviceID == "" && got.RevisionNumber >= 3
	})
	time.Sleep(400 * time.Millisecond)
	if got, _ := s.Port(p.ID); got.DeviceID != "" {
		t.Fatalf("the slow attach landed after the detach: port on %s", got.DeviceID)
	}
}
