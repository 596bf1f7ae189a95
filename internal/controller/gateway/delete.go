package gateway

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/controller/outcome"
	"bnerd.net/vpn-operator/internal/controller/skeleton"
	"bnerd.net/vpn-operator/internal/openstack"
)

// finalize removes everything the gateway made in OpenStack, in reverse order of
// creation, then releases its allocations and the finalizer. The Kubernetes objects go
// with the garbage collector (owner references). Any failure keeps the finalizer and is
// retried: nothing tagged for the gateway is ever stranded silently.
func (r *Reconciler) finalize(ctx context.Context, g *gateway) error {
	if !controllerutil.ContainsFinalizer(g.obj, v1alpha1.FinalizerGateway) {
		return nil
	}
	if err := r.cleanupOpenStack(ctx, g); err != nil {
		r.condFalse(g, v1alpha1.ConditionReady, v1alpha1.ReasonDeleting, "cleaning up OpenStack resources: "+outcome.Describe(err))
		if perr := r.persist(ctx, g); perr != nil {
			logr.FromContextOrDiscard(ctx).Info("recording the state of the deletion failed", "error", perr.Error())
		}
		return err
	}
	r.releaseAllocation(ctx, g)
	r.novaDone(g.obj.GetUID())
	r.novaMu.Lock()
	delete(r.avoid, g.obj.GetUID())
	delete(r.placed, g.obj.GetUID())
	r.novaMu.Unlock()
	if r.secrets != nil {
		r.secrets.Set(g.String(), nil, nil)
	}
	r.fresh.Forget(g.obj.GetUID())
	r.forgetActedOn(g.obj.GetUID())
	r.forgetStored(g.obj.GetUID())
	r.gate.Forget(g.obj.GetUID())
	r.forgetWaiting(g.obj.GetUID())
	g.events.Emit(r.Recorder, g.obj)
	if err := skeleton.RemoveFinalizer(ctx, r.Client, g.obj, v1alpha1.FinalizerGateway); err != nil {
		return err
	}
	logr.FromContextOrDiscard(ctx).Info("gateway cleaned up")
	return nil
}

// cleanupOpenStack undoes what the gateway made in OpenStack, each step safe to repeat
// after a crash: the routes via its port, the port's attachment, the floating IPs, the
// port, the security group.
func (r *Reconciler) cleanupOpenStack(ctx context.Context, g *gateway) error {
	ports, err := r.findOwnedPorts(ctx, g)
	if err != nil {
		return err
	}
	for _, step := range []func(context.Context, *gateway, []openstack.Port) error{
		r.removeRoutesVia, r.detachPorts, r.releaseOwnedFloatingIPs, r.deletePorts,
	} {
		if err := step(ctx, g, ports); err != nil {
			return err
		}
	}
	return r.deleteSecurityGroups(ctx, g)
}

// removeRoutesVia removes the routes via the gateway's port, on every router of the
// project. A route to this gateway's service CIDR or routed subnets via a recorded
// address goes even when the port is already gone; a route to anything else only while
// the port still holds that address (once freed, the address may be another gateway's).
func (r *Reconciler) removeRoutesVia(ctx context.Context, g *gateway, ports []openstack.Port) error {
	log := logr.FromContextOrDiscard(ctx)
	type nexthop struct {
		ip       string
		anyRoute bool
	}
	var hops []nexthop
	projectID := ""
	for _, p := range ports {
		projectID = p.ProjectID
		for _, ip := range p.FixedIPs {
			hops = append(hops, nexthop{ip.IPAddress, true})
		}
	}
	if g.status.PortFixedIP != "" {
		hops = append(hops, nexthop{g.status.PortFixedIP, false})
	}
	// This gateway's own destinations: its service CIDR and its routed subnets. The
	// service CIDR is the allocator's or the port's record, never status as it is: a
	// forged status naming another gateway's /24 would remove that gateway's routes.
	own := map[string]bool{}
	if cidr := r.recordedCIDR(g, ports); cidr != "" {
		own[cidr] = true
	}
	for _, s := range routedSubnets(g.spec) {
		own[s] = true
	}
	if len(hops) > 0 {
		routers, err := r.projectRouters(ctx, projectID)
		if err != nil {
			return err
		}
		for _, rt := range routers {
			var stale []openstack.Route
			for _, x := range rt.Routes {
				for _, h := range hops {
					if x.NextHop == h.ip && (h.anyRoute || own[x.Destination]) {
						stale = append(stale, x)
						break
					}
				}
			}
			if len(stale) > 0 {
				log.Info("removing routes via the gateway port", "router", rt.ID, "routes", fmt.Sprint(stale))
				if _, err := r.net().RemoveRouterRoutes(ctx, rt.ID, stale); err != nil && !openstack.IsNotFound(err) {
					return err
				}
			}
		}
	}
	return nil
}

// detachPorts detaches the port from whichever server holds it. Nova detaches in its
// own time: ask once, then poll (the deletion waits, no worker does).
func (r *Reconciler) detachPorts(ctx context.Context, g *gateway, ports []openstack.Port) error {
	log := logr.FromContextOrDiscard(ctx)
	for i, p := range ports {
		if p.DeviceID == "" {
			continue
		}
		op := novaOp{detach: true, port: p.ID, server: p.DeviceID}
		if !r.novaAsked(g, op, "") {
			log.Info("detaching gateway port", "port", p.ID, "server", p.DeviceID)
			if err := r.OpenStack.Compute.DetachPort(ctx, p.DeviceID, p.ID); err != nil && !openstack.IsNotFound(err) {
				return err
			}
			r.novaStart(g.obj.GetUID(), op)
			fresh, err := r.net().GetPort(ctx, p.ID)
			switch {
			case openstack.IsNotFound(err):
				ports[i].DeviceID = ""
				continue
			case err != nil:
				return err
			case fresh.DeviceID == "":
				ports[i] = *fresh
				continue
			}
		}
		return outcome.Wait(r.PortWait.Interval, "%s", op.waiting())
	}
	return nil
}

// releaseOwnedFloatingIPs: a pinned floating IP is only disassociated and untagged (it
// is the user's); allocated ones are released.
func (r *Reconciler) releaseOwnedFloatingIPs(ctx context.Context, g *gateway, ports []openstack.Port) error {
	owner := g.owner()
	portIDs := map[string]bool{}
	for _, p := range ports {
		portIDs[p.ID] = true
	}
	if g.spec.Endpoint != nil && g.spec.Endpoint.FloatingIP != "" {
		f, err := r.net().FindFloatingIPByAddress(ctx, g.spec.Endpoint.FloatingIP)
		switch {
		case err == nil && !owner.OwnedBy(f.Tags):
			if portIDs[f.PortID] {
				if _, err := r.net().DisassociateFloatingIP(ctx, f.ID); err != nil && !openstack.IsNotFound(err) {
					return err
				}
			}
			// Free for another gateway of a tenant the platform lets pin it.
			if err := r.unpin(ctx, f, owner.UID); err != nil {
				return err
			}
		case err != nil && !openstack.IsNotFound(err):
			return err
		}
	}
	fips, err := r.net().ListFloatingIPs(ctx, openstack.ListFloatingIPsOpts{Tags: owner.Selector()})
	if err != nil {
		return err
	}
	for _, f := range fips {
		if err := r.net().DeleteFloatingIP(ctx, f.ID); err != nil && !openstack.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// deletePorts deletes the gateway's ports, then any a lost create response left behind
// (found by its tags).
func (r *Reconciler) deletePorts(ctx context.Context, g *gateway, ports []openstack.Port) error {
	owner := g.owner()
	for _, p := range ports {
		if err := r.net().DeletePort(ctx, p.ID); err != nil && !openstack.IsNotFound(err) {
			return err
		}
	}
	// A tag lookup after the deletes catches a port a lost create response left behind.
	if g.status.PortID != "" {
		more, err := r.net().ListPorts(ctx, openstack.ListPortsOpts{Tags: owner.Selector()})
		if err != nil {
			return err
		}
		for _, p := range more {
			if p.DeviceID != "" {
				return fmt.Errorf("port %s is still attached to server %s", p.ID, p.DeviceID)
			}
			if err := r.net().DeletePort(ctx, p.ID); err != nil && !openstack.IsNotFound(err) {
				return err
			}
		}
	}
	return nil
}

// deleteSecurityGroups deletes the gateway's security group, last: once no port uses it.
func (r *Reconciler) deleteSecurityGroups(ctx context.Context, g *gateway) error {
	owner := g.owner()
	sgs, err := r.net().ListSecurityGroups(ctx, owner.Selector())
	if err != nil {
		return err
	}
	for _, sg := range sgs {
		if err := r.net().DeleteSecurityGroup(ctx, sg.ID); err != nil && !openstack.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// projectRouters lists the routers to sweep: every router of the project, plus the
// configured router in case it lives elsewhere.
func (r *Reconciler) projectRouters(ctx context.Context, projectID string) ([]openstack.Router, error) {
	if projectID == "" {
		id, err := r.operatorProjectID(ctx)
		if err != nil {
			return nil, err
		}
		projectID = id
	}
	routers, err := r.net().ListRouters(ctx, projectID)
	if err != nil {
		return nil, err
	}
	if r.Config.Router != "" {
		id, err := r.operatorRouterID(ctx)
		if err != nil && !openstack.IsNotFound(err) {
			return nil, err
		}
		found := id == ""
		for _, rt := range routers {
			if rt.ID == id {
				found = true
			}
		}
		if !found {
			rt, err := r.net().GetRouter(ctx, id)
			if err != nil && !openstack.IsNotFound(err) {
				return nil, err
			}
			if err == nil {
				routers = append(routers, *rt)
			}
		}
	}
	return routers, nil
}

func (r *Reconciler) operatorProjectID(ctx context.Context) (string, error) {
	r.resolveMu.Lock()
	defer r.resolveMu.Unlock()
	if r.projectID != "" {
		return r.projectID, nil
	}
	if r.OpenStack.Identity == nil {
		return "", fmt.Errorf("no identity client to find the operator's project")
	}
	ti, err := r.OpenStack.Identity.TokenInfo(ctx)
	if err != nil {
		return "", err
	}
	r.projectID = ti.ProjectID
	return ti.ProjectID, nil
}

// recordedCIDR is the gateway's service CIDR as the operator recorded it: the /24 the
// allocator holds for its UID, else the service-CIDR tag of its port ("" when neither).
func (r *Reconciler) recordedCIDR(g *gateway, ports []openstack.Port) string {
	r.poolMu.Lock()
	pool := r.pool
	r.poolMu.Unlock()
	if pool != nil {
		if c, ok := pool.Lookup(string(g.obj.GetUID())); ok {
			return c.String()
		}
	}
	for _, p := range ports {
		if c := openstack.ServiceCIDRTag(p.Tags); c != "" {
			return c
		}
	}
	return ""
}
