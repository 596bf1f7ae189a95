package gateway

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
)

// errCrash stands for the operator dying right after an OpenStack write took effect:
// the write happened, its answer never arrived, nothing after it ran.
var errCrash = errors.New("simulated crash after a successful write")

// crashPoint counts OpenStack writes and "crashes" after the at-th one succeeded.
type crashPoint struct {
	mu    sync.Mutex
	at, n int
	ops   []string
	fired bool
}

func (c *crashPoint) after(op string, err error) error {
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	c.ops = append(c.ops, op)
	if c.at > 0 && c.n == c.at {
		c.fired = true
		return errCrash
	}
	return nil
}

type crashNet struct {
	openstack.Networking
	c *crashPoint
}

func (n crashNet) CreatePort(ctx context.Context, o openstack.CreatePortOpts) (*openstack.Port, error) {
	p, err := n.Networking.CreatePort(ctx, o)
	if err = n.c.after("CreatePort", err); err != nil {
		return nil, err
	}
	return p, nil
}
func (n crashNet) UpdatePortAllowedAddressPairs(ctx context.Context, id string, pairs []openstack.AddressPair) (*openstack.Port, error) {
	p, err := n.Networking.UpdatePortAllowedAddressPairs(ctx, id, pairs)
	if err = n.c.after("UpdatePortAllowedAddressPairs", err); err != nil {
		return nil, err
	}
	return p, nil
}
func (n crashNet) UpdatePortSecurityGroups(ctx context.Context, id string, sgs []string) (*openstack.Port, error) {
	p, err := n.Networking.UpdatePortSecurityGroups(ctx, id, sgs)
	if err = n.c.after("UpdatePortSecurityGroups", err); err != nil {
		return nil, err
	}
	return p, nil
}
func (n crashNet) DeletePort(ctx context.Context, id string) error {
	return n.c.after("DeletePort", n.Networking.DeletePort(ctx, id))
}
func (n crashNet) CreateSecurityGroup(ctx context.Context, o openstack.CreateSecurityGroupOpts) (*openstack.SecurityGroup, error) {
	g, err := n.Networking.CreateSecurityGroup(ctx, o)
	if err = n.c.after("CreateSecurityGroup", err); err != nil {
		return nil, err
	}
	return g, nil
}
func (n crashNet) DeleteSecurityGroup(ctx context.Context, id string) error {
	return n.c.after("DeleteSecurityGroup", n.Networking.DeleteSecurityGroup(ctx, id))
}
func (n crashNet) CreateSecurityGroupRule(ctx context.Context, o openstack.CreateSecurityGroupRuleOpts) (*openstack.SecurityGroupRule, error) {
	r, err := n.Networking.CreateSecurityGroupRule(ctx, o)
	if err = n.c.after("CreateSecurityGroupRule", err); err != nil {
		return nil, err
	}
	return r, nil
}
func (n crashNet) DeleteSecurityGroupRule(ctx context.Context, id string) error {
	return n.c.after("DeleteSecurityGroupRule", n.Networking.DeleteSecurityGroupRule(ctx, id))
}
func (n crashNet) CreateFloatingIP(ctx context.Context, o openstack.CreateFloatingIPOpts) (*openstack.FloatingIP, error) {
	f, err := n.Networking.CreateFloatingIP(ctx, o)
	if err = n.c.after("CreateFloatingIP", err); err != nil {
		return nil, err
	}
	return f, nil
}
func (n crashNet) AssociateFloatingIP(ctx context.Context, id, port string) (*openstack.FloatingIP, error) {
	f, err := n.Networking.AssociateFloatingIP(ctx, id, port)
	if err = n.c.after("AssociateFloatingIP", err); err != nil {
		return nil, err
	}
	return f, nil
}
func (n crashNet) DeleteFloatingIP(ctx context.Context, id string) error {
	return n.c.after("DeleteFloatingIP", n.Networking.DeleteFloatingIP(ctx, id))
}
func (n crashNet) AddRouterRoutes(ctx context.Context, id string, routes []openstack.Route) (*openstack.Router, error) {
	r, err := n.Networking.AddRouterRoutes(ctx, id, routes)
	if err = n.c.after("AddRouterRoutes", err); err != nil {
		return nil, err
	}
	return r, nil
}
func (n crashNet) RemoveRouterRoutes(ctx context.Context, id string, routes []openstack.Route) (*openstack.Router, error) {
	r, err := n.Networking.RemoveRouterRoutes(ctx, id, routes)
	if err = n.c.after("RemoveRouterRoutes", err); err != nil {
		return nil, err
	}
	return r, nil
}

type crashCompute struct {
	openstack.Compute
	c *crashPoint
}

func (c crashCompute) AttachPort(ctx context.Context, server, port string) (*openstack.ServerInterface, error) {
	i, err := c.Compute.AttachPort(ctx, server, port)
	if err = c.c.after("AttachPort", err); err != nil {
		return nil, err
	}
	return i, nil
}
func (c crashCompute) DetachPort(ctx context.Context, server, port string) error {
	return c.c.after("DetachPort", c.Compute.DetachPort(ctx, server, port))
}

// directReconciler is a reconciler outside any manager, reading the API server
// directly: a fresh one is a restarted operator.
func (h *harness) directReconciler(cp *crashPoint) *Reconciler {
	d := h.deps()
	d.Client = env.Client
	d.APIReader = env.Client
	d.OpenStack = &openstack.Clients{
		Networking: crashNet{Networking: h.os.Networking, c: cp},
		Compute:    crashCompute{Compute: h.os.Compute, c: cp},
		Identity:   h.os.Identity,
	}
	return New(d)
}

// converge reconciles until the gateway is Ready (or gone, when deleting); errors are
// retried as the workqueue would.
func converge(t *testing.T, h *harness, r *Reconciler, name string, wantGone bool) {
	t.Helper()
	key := types.NamespacedName{Namespace: h.ns, Name: name}
	var lastErr error
	for i := 0; i < 40; i++ {
		lastErr = r.reconcile(h.ctx, KindIPsecGateway, key)
		var gw v1alpha1.IPsecGateway
		err := env.Client.Get(h.ctx, key, &gw)
		if wantGone && apierrors.IsNotFound(err) {
			return
		}
		if !wantGone && err == nil && lastErr == nil && isReady(gw.Status.Conditions, gw.Generation) {
			return
		}
	}
	t.Fatalf("%s did not converge: %v", name, lastErr)
}

// For every OpenStack write of the create sequence, the operator dies right after that
// write succeeded; a restarted operator must converge with nothing duplicated, and the
// deletion must leave nothing behind.
func TestCrashConsistency(t *testing.T) {
	h := newHarness(t)
	h.node("node-a", "openstack:///"+serverA, true, nil)
	h.psk("hq-psk", "k")

	// The clean run tells how many writes a create takes.
	clean := &crashPoint{}
	h.create("clean", spec(true))
	converge(t, h, h.directReconciler(clean), "clean", false)
	writes := clean.n
	t.Logf("create sequence: %d writes: %s", writes, strings.Join(clean.ops, ", "))
	if writes < 8 {
		t.Fatalf("suspiciously few writes: %v", clean.ops)
	}
	h.deleteDirect(t, "clean", h.directReconciler(&crashPoint{}))

	for k := 1; k <= writes; k++ {
		name := fmt.Sprintf("crash-%d", k)
		t.Run(name, func(t *testing.T) {
			cp := &crashPoint{at: k}
			gw := h.create(name, spec(true))
			r1 := h.directReconciler(cp)
			key := types.NamespacedName{Namespace: h.ns, Name: name}
			for i := 0; i < 20 && !cp.fired; i++ {
				_ = r1.reconcile(h.ctx, KindIPsecGateway, key)
			}
			if !cp.fired {
				t.Fatalf("crash point %d never reached (%d writes: %v)", k, cp.n, cp.ops)
			}
			crashedAt := cp.ops[k-1]

			converge(t, h, h.directReconciler(&crashPoint{}), name, false)
			st := h.get(name).Status
			ports, sgs, fips := h.tagged(gw.UID)
			if ports != 1 || sgs != 1 || fips != 1 {
				t.Fatalf("after a crash at %s: %d ports, %d security groups, %d floating IPs", crashedAt, ports, sgs, fips)
			}
			rules := h.ingressRules(st.SecurityGroupID)
			if !sort.StringsAreSorted(rules) || hasDup(rules) || len(rules) != 3 {
				t.Fatalf("after a crash at %s: rules %v", crashedAt, rules)
			}
			if got := routesVia(h.operatorRouter(), st.PortFixedIP); len(got) != 1 {
				t.Fatalf("after a crash at %s: routes %v", crashedAt, got)
			}
			port, _ := h.sim.Port(st.PortID)
			if port.DeviceID != serverA || len(port.AllowedAddressPairs) != 1 {
				t.Fatalf("after a crash at %s: port %+v", crashedAt, port)
			}

			h.deleteDirect(t, name, h.directReconciler(&crashPoint{}))
			if p, s, f := h.tagged(gw.UID); p+s+f != 0 {
				t.Fatalf("after a crash at %s and deletion: %d ports, %d groups, %d floating IPs left", crashedAt, p, s, f)
			}
			if got := routesVia(h.operatorRouter(), st.PortFixedIP); len(got) != 0 {
				t.Fatalf("routes left: %v", got)
			}
		})
	}

	// The deletion sequence: a crash after each of its writes is survived too.
	h.create("del", spec(true))
	converge(t, h, h.directReconciler(&crashPoint{}), "del", false)
	gwDel := h.get("del")
	delCount := &crashPoint{}
	if err := env.Client.Delete(h.ctx, gwDel); err != nil {
		t.Fatal(err)
	}
	_ = h.directReconciler(delCount).reconcile(h.ctx, KindIPsecGateway, client.ObjectKeyFromObject(gwDel))
	h.waitGone("del")
	t.Logf("delete sequence: %d writes: %s", delCount.n, strings.Join(delCount.ops, ", "))
	for k := 1; k <= delCount.n; k++ {
		name := fmt.Sprintf("crash-del-%d", k)
		t.Run(name, func(t *testing.T) {
			gw := h.create(name, spec(true))
			converge(t, h, h.directReconciler(&crashPoint{}), name, false)
			st := h.get(name).Status
			if err := env.Client.Delete(h.ctx, gw); err != nil {
				t.Fatal(err)
			}
			cp := &crashPoint{at: k}
			key := types.NamespacedName{Namespace: h.ns, Name: name}
			for i := 0; i < 20 && !cp.fired; i++ {
				_ = h.directReconciler(cp).reconcile(h.ctx, KindIPsecGateway, key)
			}
			converge(t, h, h.directReconciler(&crashPoint{}), name, true)
			if p, s, f := h.tagged(gw.UID); p+s+f != 0 {
				t.Fatalf("crash at delete write %d: %d ports, %d groups, %d floating IPs left", k, p, s, f)
			}
			if got := routesVia(h.operatorRouter(), st.PortFixedIP); len(got) != 0 {
				t.Fatalf("routes left: %v", got)
			}
		})
	}
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
