package gateway

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/crash"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

// directReconciler is a reconciler outside any manager, reading the API server
// directly: a fresh one is a restarted operator.
func (h *harness) directReconciler(cp *crash.Point) *Reconciler {
	d := h.deps()
	d.Client = env.Client
	d.APIReader = env.Client
	d.OpenStack = crash.Clients(h.os, cp)
	return New(d)
}

// converge reconciles until the gateway is Ready (or gone, when deleting); errors are
// retried as the workqueue would.
func converge(t *testing.T, h *harness, r *Reconciler, name string, wantGone bool) {
	t.Helper()
	key := types.NamespacedName{Namespace: h.ns, Name: name}
	var lastErr error
	for i := 0; i < 40; i++ {
		lastErr = r.reconcile(h.ctx, v1alpha1.KindIPsecGateway, key)
		var gw v1alpha1.IPsecGateway
		err := env.Client.Get(h.ctx, key, &gw)
		if wantGone && apierrors.IsNotFound(err) {
			return
		}
		if !wantGone && err == nil && lastErr == nil && converged(gw.Status.Conditions, gw.Generation) {
			return
		}
	}
	t.Fatalf("%s did not converge: %v", name, lastErr)
}

// crashCase is a gateway shape whose create, update and delete sequences are crashed
// after each of their OpenStack writes.
type crashCase struct {
	name string
	spec func(h *harness) v1alpha1.GatewaySpec
	// update, when set, is a spec change whose write sequence is crashed as well.
	update func(*v1alpha1.GatewaySpec)
	// check asserts the converged state (after create, or after the update).
	check func(t *testing.T, h *harness, gw *v1alpha1.IPsecGateway, updated bool)
	// gone asserts what deletion must leave (beyond nothing tagged and no route).
	gone func(t *testing.T, h *harness)
}

const pinnedFIP = "203.0.113.77"

// pinnedFloatingIP returns the user's floating IP (creating it once).
func (h *harness) pinnedFloatingIP(t *testing.T) openstacksim.FloatingIP {
	t.Helper()
	for _, f := range h.sim.FloatingIPs() {
		if f.FloatingIPAddress == pinnedFIP {
			return f
		}
	}
	pub, ok := h.sim.NetworkByName("public")
	if !ok {
		t.Fatal("no public network")
	}
	if _, err := h.os.Networking.CreateFloatingIP(h.ctx, openstack.CreateFloatingIPOpts{FloatingNetworkID: pub.ID, FloatingIPAddress: pinnedFIP}); err != nil {
		t.Fatal(err)
	}
	return h.pinnedFloatingIP(t)
}

func checkAllocatedFIP(t *testing.T, h *harness, gw *v1alpha1.IPsecGateway) {
	t.Helper()
	if _, _, fips := h.tagged(gw.UID); fips != 1 {
		t.Fatalf("%d allocated floating IPs, want 1", fips)
	}
	for _, f := range h.sim.FloatingIPs() {
		if f.ID == gw.Status.FloatingIPID && f.PortID != gw.Status.PortID {
			t.Fatalf("floating IP %s is associated with %q, not the port", f.FloatingIPAddress, f.PortID)
		}
	}
}

func checkPinnedFIP(t *testing.T, h *harness, gw *v1alpha1.IPsecGateway, wantPort string) {
	t.Helper()
	f := h.pinnedFloatingIP(t)
	// While a gateway holds it, only its pinned-by tag; released, no tag at all.
	var wantTags []string
	if gw != nil {
		wantTags = []string{openstack.TagPinnedByPrefix + string(gw.UID)}
	}
	if f.PortID != wantPort || !slices.Equal(f.Tags, wantTags) {
		t.Fatalf("pinned floating IP associated with %q (want %q), tags %v (want %v)", f.PortID, wantPort, f.Tags, wantTags)
	}
	if gw != nil && (gw.Status.FloatingIP != pinnedFIP || gw.Status.FloatingIPID != f.ID) {
		t.Fatalf("status %s/%s for the pinned %s", gw.Status.FloatingIP, gw.Status.FloatingIPID, f.ID)
	}
}

// For every OpenStack write of the create, update and delete sequences, the operator
// dies right after that write succeeded; a restarted operator must converge with
// nothing duplicated, and the deletion must leave nothing behind (and a pinned floating
// IP, which is the user's, exactly as it was: existing, untagged, unassociated; while
// held, it carries only the holder's pinned-by tag). Every crash point is checked to
// have fired.
func TestCrashConsistency(t *testing.T) {
	cases := []crashCase{
		{
			name:  "allocated-floating-ip",
			spec:  func(*harness) v1alpha1.GatewaySpec { return spec(true) },
			check: func(t *testing.T, h *harness, gw *v1alpha1.IPsecGateway, _ bool) { checkAllocatedFIP(t, h, gw) },
		},
		{
			name: "pinned-floating-ip",
			spec: func(h *harness) v1alpha1.GatewaySpec {
				h.pinnedFloatingIP(h.t)
				s := spec(true)
				s.Endpoint = &v1alpha1.Endpoint{FloatingIP: pinnedFIP}
				return s
			},
			check: func(t *testing.T, h *harness, gw *v1alpha1.IPsecGateway, _ bool) {
				if _, _, fips := h.tagged(gw.UID); fips != 0 {
					t.Fatalf("%d floating IPs allocated besides the pinned one", fips)
				}
				checkPinnedFIP(t, h, gw, gw.Status.PortID)
			},
			gone: func(t *testing.T, h *harness) { checkPinnedFIP(t, h, nil, "") },
		},
		{
			// Unpinning disassociates the user's address and allocates one.
			name: "pinned-then-allocated",
			spec: func(h *harness) v1alpha1.GatewaySpec {
				h.pinnedFloatingIP(h.t)
				s := spec(true)
				s.Endpoint = &v1alpha1.Endpoint{FloatingIP: pinnedFIP}
				return s
			},
			update: func(s *v1alpha1.GatewaySpec) { s.Endpoint = nil },
			check: func(t *testing.T, h *harness, gw *v1alpha1.IPsecGateway, updated bool) {
				if !updated {
					checkPinnedFIP(t, h, gw, gw.Status.PortID)
					return
				}
				checkAllocatedFIP(t, h, gw)
				checkPinnedFIP(t, h, nil, "")
			},
			gone: func(t *testing.T, h *harness) { checkPinnedFIP(t, h, nil, "") },
		},
	}
	for _, cc := range cases {
		t.Run(cc.name, func(t *testing.T) {
			h := newHarness(t)
			h.node("node-a", "openstack:///"+serverA, true, nil)
			h.psk("hq-psk", testPSK)
			create, update, del := h.crashRun(t, cc, "clean", 0, 0, 0)
			t.Logf("create sequence (%d writes): %s", len(create), strings.Join(create, ", "))
			t.Logf("update sequence (%d writes): %s", len(update), strings.Join(update, ", "))
			t.Logf("delete sequence (%d writes): %s", len(del), strings.Join(del, ", "))
			if len(create) < 7 || len(del) < 4 || (cc.update != nil && len(update) < 2) {
				t.Fatalf("suspiciously few writes: create %v, update %v, delete %v", create, update, del)
			}
			for k := 1; k <= len(create); k++ {
				t.Run(fmt.Sprintf("create-%d-%s", k, create[k-1]), func(t *testing.T) { h.crashRun(t, cc, fmt.Sprintf("c%d", k), k, 0, 0) })
			}
			for k := 1; k <= len(update); k++ {
				t.Run(fmt.Sprintf("update-%d-%s", k, update[k-1]), func(t *testing.T) { h.crashRun(t, cc, fmt.Sprintf("u%d", k), 0, k, 0) })
			}
			for k := 1; k <= len(del); k++ {
				t.Run(fmt.Sprintf("delete-%d-%s", k, del[k-1]), func(t *testing.T) { h.crashRun(t, cc, fmt.Sprintf("d%d", k), 0, 0, k) })
			}
		})
	}
}

// crashUntilFired reconciles with a reconciler that crashes after the at-th write until
// it did, and fails the test if it never does.
func (h *harness) crashUntilFired(t *testing.T, name, what string, at int) {
	t.Helper()
	cp := &crash.Point{At: at}
	key := types.NamespacedName{Namespace: h.ns, Name: name}
	for i := 0; i < 20 && !cp.Fired(); i++ {
		_ = h.directReconciler(cp).reconcile(h.ctx, v1alpha1.KindIPsecGateway, key)
	}
	if !cp.Fired() {
		t.Fatalf("%s crash point %d never reached (%d writes: %v)", what, at, len(cp.Writes()), cp.Writes())
	}
}

// crashRun creates a gateway, optionally updates it, and deletes it; a crash is
// injected after the createAt-th, updateAt-th or deleteAt-th write of the respective
// sequence, and a restarted operator finishes each step. It returns the writes of the
// three sequences of the run.
func (h *harness) crashRun(t *testing.T, cc crashCase, suffix string, createAt, updateAt, deleteAt int) (create, update, del []string) {
	t.Helper()
	name := "crash-" + suffix
	gw := h.create(name, cc.spec(h))
	verify := func(updated bool) *v1alpha1.IPsecGateway {
		t.Helper()
		cur := h.get(name)
		st := cur.Status
		ports, sgs, _ := h.tagged(gw.UID)
		if ports != 1 || sgs != 1 {
			t.Fatalf("%d ports, %d security groups", ports, sgs)
		}
		if rules := h.ingressRules(st.SecurityGroupID); !sort.StringsAreSorted(rules) || hasDup(rules) || len(rules) != 3 {
			t.Fatalf("rules %v", rules)
		}
		if got := routesVia(h.operatorRouter(), st.PortFixedIP); len(got) != 1 {
			t.Fatalf("routes %v", got)
		}
		port, _ := h.sim.Port(st.PortID)
		if port.DeviceID != serverA || len(port.AllowedAddressPairs) != 1 {
			t.Fatalf("port %+v", port)
		}
		cc.check(t, h, cur, updated)
		return cur
	}

	if createAt > 0 {
		h.crashUntilFired(t, name, "create", createAt)
	}
	cp := &crash.Point{}
	converge(t, h, h.directReconciler(cp), name, false)
	create = cp.Writes()
	st := verify(false).Status

	if cc.update != nil {
		h.mutate(name, cc.update)
		if updateAt > 0 {
			h.crashUntilFired(t, name, "update", updateAt)
		}
		cp = &crash.Point{}
		converge(t, h, h.directReconciler(cp), name, false)
		update = cp.Writes()
		st = verify(true).Status
	}

	if err := env.Client.Delete(h.ctx, h.get(name)); err != nil {
		t.Fatal(err)
	}
	if deleteAt > 0 {
		h.crashUntilFired(t, name, "delete", deleteAt)
	}
	cp = &crash.Point{}
	converge(t, h, h.directReconciler(cp), name, true)
	del = cp.Writes()
	if p, s, f := h.tagged(gw.UID); p+s+f != 0 {
		t.Fatalf("%d ports, %d groups, %d floating IPs left", p, s, f)
	}
	if got := routesVia(h.operatorRouter(), st.PortFixedIP); len(got) != 0 {
		t.Fatalf("routes left: %v", got)
	}
	if cc.gone != nil {
		cc.gone(t, h)
	}
	return create, update, del
}

func (h *harness) deleteDirect(t *testing.T, name string, r *Reconciler) {
	t.Helper()
	gw := h.get(name)
	if err := env.Client.Delete(h.ctx, gw); err != nil {
		t.Fatal(err)
	}
	converge(t, h, r, name, true)
}

func hasDup(s []string) bool {
	for i := 1; i < len(s); i++ {
		if s[i] == s[i-1] {
			return true
		}
	}
	return false
}
