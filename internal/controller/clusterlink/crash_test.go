package clusterlink

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/crash"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

// crashReconciler is a fresh reconciler (a restarted operator: nothing in memory)
// whose operator and customer credentials both write through cp.
func (h *harness) crashReconciler(cp *crash.Point) *Reconciler {
	d := h.deps()
	d.OpenStack = crash.Clients(h.op, cp)
	build := d.CustomerClients
	d.CustomerClients = func(ctx context.Context, c openstack.Credential) (*openstack.Clients, error) {
		cl, err := build(ctx, c)
		if err != nil {
			return nil, err
		}
		return crash.Clients(cl, cp), nil
	}
	return New(d)
}

type crashScenario struct {
	name   string
	seed   func(*openstacksim.Seed)
	router string
	cidr   string
	opts   []linkOpt
	cross  bool
	setup  func(h *harness, link string)
}

func handMadeLeg(s *openstacksim.Seed) {
	for i := range s.Routers {
		switch s.Routers[i].Name {
		case "shoot--services--svc01":
			s.Routers[i].Interfaces = append(s.Routers[i].Interfaces, openstacksim.SeedInterface{Subnet: "vpn-transit-subnet", IP: "10.254.0.3"})
		case "shoot--services--vpn01":
			s.Routers[i].Routes = append(s.Routers[i].Routes, openstacksim.Route{Destination: svcCIDR, NextHop: "10.254.0.3"})
		}
	}
}

// For every OpenStack write of a ClusterLink's create and delete sequences, same-tenant
// and cross-tenant (and adopting a hand-made leg, whose tag replacement is a write of
// its own), the operator dies right after that write succeeded; a restarted operator
// converges with nothing duplicated, and the deletion leaves nothing behind. Each crash
// point is checked to have fired.
func TestCrashConsistency(t *testing.T) {
	scenarios := []crashScenario{
		{name: "same-tenant", router: "shoot--services--svc01", cidr: svcCIDR},
		{name: "same-tenant-adopting", seed: handMadeLeg, router: "shoot--services--svc01", cidr: svcCIDR, opts: []linkOpt{pin("10.254.0.3")}},
		{name: "cross-tenant", router: diehlRouter, cidr: diehlCIDR, opts: []linkOpt{crossTenant(projDiehl)}, cross: true,
			setup: func(h *harness, link string) { h.secret(link, "diehl", nil) }},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			// The clean run tells how many writes each sequence takes.
			h := newCrashHarness(t, sc)
			create, del := h.runCrash(t, sc, "clean", 0, 0)
			t.Logf("create sequence: %s", strings.Join(create, ", "))
			t.Logf("delete sequence: %s", strings.Join(del, ", "))
			if len(create) < 2 || len(del) < 3 {
				t.Fatalf("suspiciously short sequences: create %v, delete %v", create, del)
			}
			for k := 1; k <= len(create); k++ {
				t.Run(fmt.Sprintf("create-crash-%d-%s", k, create[k-1]), func(t *testing.T) {
					h := newCrashHarness(t, sc)
					h.runCrash(t, sc, fmt.Sprintf("c%d", k), k, 0)
				})
			}
			for k := 1; k <= len(del); k++ {
				t.Run(fmt.Sprintf("delete-crash-%d-%s", k, del[k-1]), func(t *testing.T) {
					h := newCrashHarness(t, sc)
					h.runCrash(t, sc, fmt.Sprintf("d%d", k), 0, k)
				})
			}
		})
	}
}

func newCrashHarness(t *testing.T, sc crashScenario) *harness {
	var mut []func(*openstacksim.Seed)
	if sc.seed != nil {
		mut = append(mut, sc.seed)
	}
	return newHarness(t, mut...)
}

// runCrash creates a link (crashing after the createAt-th write, if set), converges it
// with a restarted operator and checks it; then deletes it (crashing after the
// deleteAt-th write, if set), finishes the deletion with a restarted operator and checks
// that nothing is left. It returns the writes of the two sequences.
func (h *harness) runCrash(t *testing.T, sc crashScenario, suffix string, createAt, deleteAt int) (create, del []string) {
	t.Helper()
	name := "crash-" + suffix
	gwName := "gw-" + suffix
	if sc.cross {
		customerNS(t, "tenant-crash", projDiehl)
	}
	ipsecGateway(t, "tenant-crash", gwName, true, "100.64.7.0/24", "10.254.0.107")
	if sc.setup != nil {
		sc.setup(h, name)
	}
	h.newLink(name, sc.router, sc.cidr, sc.opts...)

	cp := &crash.Point{At: createAt}
	if createAt > 0 {
		r := h.crashReconciler(cp)
		for i := 0; i < 20 && !cp.Fired(); i++ {
			_, _ = r.Reconcile(h.ctx, requestFor(name))
		}
		if !cp.Fired() {
			t.Fatalf("create crash point %d never reached (%d writes: %v)", createAt, len(cp.Writes()), cp.Writes())
		}
		cp = &crash.Point{}
	}
	h.r = h.crashReconciler(cp)
	l := h.untilReady(name)
	create = cp.Writes()

	// Converged: one leg, attached, at the recorded address; one route each way.
	legs := h.linkPorts(l)
	rt := h.router(sc.router)
	if len(legs) != 1 || legs[0].ID != l.Status.LegPortID || legs[0].DeviceID != rt.ID || len(h.portsAt(l.Status.TransitIP)) != 1 {
		t.Fatalf("legs %+v for status %s at %s", legs, l.Status.LegPortID, l.Status.TransitIP)
	}
	var fwd []openstacksim.Route
	for _, x := range h.opRouter().Routes {
		if x.NextHop == l.Status.TransitIP {
			fwd = append(fwd, x)
		}
	}
	if len(fwd) != 1 || fwd[0].Destination != sc.cidr {
		t.Fatalf("routes via the leg on the gateway router: %v", fwd)
	}
	if len(rt.Routes) != 1 || !hasRoute(rt, "100.64.7.0/24", "10.254.0.107") {
		t.Fatalf("reverse routes on %s: %v", sc.router, rt.Routes)
	}
	if sc.cross && len(h.sharesFor(projDiehl)) != 1 {
		t.Fatalf("RBAC shares %v", h.sharesFor(projDiehl))
	}

	h.delete(name)
	cp = &crash.Point{At: deleteAt}
	if deleteAt > 0 {
		r := h.crashReconciler(cp)
		for i := 0; i < 20 && !cp.Fired(); i++ {
			_, _ = r.Reconcile(h.ctx, requestFor(name))
		}
		if !cp.Fired() {
			t.Fatalf("delete crash point %d never reached (%d writes: %v)", deleteAt, len(cp.Writes()), cp.Writes())
		}
		cp = &crash.Point{}
	}
	h.r = h.crashReconciler(cp)
	h.until(name, "gone", nil)
	del = cp.Writes()
	if n := len(h.linkPorts(l)) + len(h.portsAt(l.Status.TransitIP)); n != 0 {
		t.Fatalf("%d ports left of the link", n)
	}
	for _, x := range h.opRouter().Routes {
		if x.NextHop == l.Status.TransitIP {
			t.Fatalf("route left on the gateway router: %v", x)
		}
	}
	if rt := h.router(sc.router); len(rt.Routes) != 0 {
		t.Fatalf("reverse routes left on %s: %v", sc.router, rt.Routes)
	}
	if sc.cross && len(h.sharesFor(projDiehl)) != 1 {
		t.Fatalf("the share is kept on delete, by design: %v", h.sharesFor(projDiehl))
	}
	deleteIPsecGateway(t, "tenant-crash", gwName)
	return create, del
}

func requestFor(name string) ctrl.Request {
	return ctrl.Request{NamespacedName: types.NamespacedName{Name: name}}
}
