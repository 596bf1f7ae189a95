package openstacksim

import (
	"slices"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/attachinterfaces"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
)

const (
	workerA = "11111111-1111-4111-8111-111111111111"
	workerB = "22222222-2222-4222-8222-222222222222"
)

func TestNovaAttachDetach(t *testing.T) {
	s := startEstate(t)
	c := login(t, s, "vpn-operator")
	transit, _ := s.NetworkByName("vpn-transit")

	srv := must[*servers.Server](t)(servers.Get(ctx(), c.compute, workerA).Extract())
	if srv.Name != "vpn01-worker-a" || srv.Status != "ACTIVE" {
		t.Fatalf("server %+v", srv)
	}
	wantErr(t, servers.Get(ctx(), c.compute, "99999999-9999-4999-8999-999999999999").Err, 404, "itemNotFound")

	p := must[*ports.Port](t)(ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: transit.ID, Name: "gw"}).Extract())
	ia := must[*attachinterfaces.Interface](t)(attachinterfaces.Create(ctx(), c.compute, workerA,
		attachinterfaces.CreateOpts{PortID: p.ID}).Extract())
	if ia.PortID != p.ID || ia.NetID != transit.ID || ia.MACAddr != p.MACAddress || len(ia.FixedIPs) != 1 {
		t.Fatalf("attachment %+v", ia)
	}
	got := must[*ports.Port](t)(ports.Get(ctx(), c.network, p.ID).Extract())
	if got.DeviceID != workerA || got.DeviceOwner != "compute:nova" || got.Status != "ACTIVE" {
		t.Fatalf("port after attach %+v", got)
	}
	if ifs := s.ServerInterfaces(workerA); !slices.Equal(ifs, []string{p.ID}) {
		t.Fatalf("ServerInterfaces = %v", ifs)
	}
	pages, err := attachinterfaces.List(c.compute, workerA).AllPages(ctx())
	ok(t, err)
	list := must[[]attachinterfaces.Interface](t)(attachinterfaces.ExtractInterfaces(pages))
	if len(list) != 1 || list[0].PortID != p.ID {
		t.Fatalf("interfaces %+v", list)
	}
	srv = must[*servers.Server](t)(servers.Get(ctx(), c.compute, workerA).Extract())
	if _, ok := srv.Addresses["vpn-transit"]; !ok {
		t.Fatalf("addresses %+v", srv.Addresses)
	}

	// Attached elsewhere: Nova refuses with 409 in its own error shape.
	_, err = attachinterfaces.Create(ctx(), c.compute, workerB, attachinterfaces.CreateOpts{PortID: p.ID}).Extract()
	wantErr(t, err, 409, "conflictingRequest")
	_, err = attachinterfaces.Create(ctx(), c.compute, "99999999-9999-4999-8999-999999999999", attachinterfaces.CreateOpts{PortID: p.ID}).Extract()
	wantErr(t, err, 404, "itemNotFound")
	_, err = attachinterfaces.Create(ctx(), c.compute, workerB, attachinterfaces.CreateOpts{PortID: "nope"}).Extract()
	wantErr(t, err, 404, "itemNotFound")

	ok(t, attachinterfaces.Delete(ctx(), c.compute, workerA, p.ID).ExtractErr())
	got = must[*ports.Port](t)(ports.Get(ctx(), c.network, p.ID).Extract())
	if got.DeviceID != "" || got.DeviceOwner != "" || got.Status != "DOWN" {
		t.Fatalf("port after detach %+v", got)
	}
	if ifs := s.ServerInterfaces(workerA); len(ifs) != 0 {
		t.Fatalf("ServerInterfaces after detach = %v", ifs)
	}
	// A detach of a port the server does not hold is accepted, and does nothing.
	ok(t, attachinterfaces.Delete(ctx(), c.compute, workerA, p.ID).ExtractErr())
	if got := must[*ports.Port](t)(ports.Get(ctx(), c.network, p.ID).Extract()); got.DeviceID != "" {
		t.Fatalf("port after a second detach %+v", got)
	}

	// Another project's server does not exist for the customer.
	cu := login(t, s, "customer-diehl")
	wantErr(t, servers.Get(ctx(), cu.compute, workerA).Err, 404, "itemNotFound")
}

func TestNovaDelayedDetach(t *testing.T) {
	s := startEstate(t)
	c := login(t, s, "vpn-operator")
	transit, _ := s.NetworkByName("vpn-transit")
	p := must[*ports.Port](t)(ports.Create(ctx(), c.network, ports.CreateOpts{NetworkID: transit.ID}).Extract())
	must[*attachinterfaces.Interface](t)(attachinterfaces.Create(ctx(), c.compute, workerA, attachinterfaces.CreateOpts{PortID: p.ID}).Extract())
	// With a long delay the answer comes first and the port is still bound.
	s.SetNovaDelays(0, time.Hour)
	ok(t, attachinterfaces.Delete(ctx(), c.compute, workerA, p.ID).ExtractErr())
	if got, _ := s.Port(p.ID); got.DeviceID != workerA {
		t.Fatalf("detach applied before its delay: %+v", got)
	}
	// With a short one it clears in the background. Poll without a deadline
	// of our own: the test binary's timeout is the limit.
	s.SetNovaDelays(0, time.Millisecond)
	ok(t, attachinterfaces.Delete(ctx(), c.compute, workerA, p.ID).ExtractErr())
	for {
		got, _ := s.Port(p.ID)
		if got.DeviceID == "" {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
}
