package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/conditions"
	"bnerd.net/vpn-operator/internal/ipam"
	"bnerd.net/vpn-operator/internal/openstack"
)

// cidrPool returns the service CIDR allocator, rebuilt on first use. The record of an
// allocation is the service-CIDR tag on the gateway's dedicated port (in the operator's
// project, written only by the operator); a gateway's status is consulted only for a
// gateway whose port carries no such tag yet (its port not made yet, or made by an
// earlier release), and a /24 a port records is never given to such a status claim.
// Status alone cannot be the record: the gateway pod's token may write status.
// Reading around the cache matters here: a cache that has not synced yet would make
// taken /24s look free.
func (r *Reconciler) cidrPool(ctx context.Context) (*ipam.ServiceCIDRPool, error) {
	r.poolMu.Lock()
	defer r.poolMu.Unlock()
	if r.pool != nil {
		return r.pool, nil
	}
	pool, err := ipam.NewServiceCIDRPool(r.Config.ServiceCIDRPool)
	if err != nil {
		return nil, err
	}
	gws, err := v1alpha1.ListGateways(ctx, r.apiReader())
	if err != nil {
		return nil, fmt.Errorf("rebuilding allocations: %w", err)
	}
	recorded, err := r.recordedServiceCIDRs(ctx)
	if err != nil {
		return nil, err
	}
	log := logr.FromContextOrDiscard(ctx)
	restoreAllocations(log, pool, statusClaims(gws), recorded)
	r.pool = pool
	log.Info("service CIDR allocations rebuilt from the gateway ports' records and status", "pool", pool.Pool().String(), "allocated", pool.Len(), "recordedOnPorts", len(recorded))
	return pool, nil
}

// statusClaim is the service CIDR a gateway's status names.
type statusClaim struct {
	uid, cidr, who string
	created        int64
}

func statusClaims(gws []v1alpha1.Gateway) []statusClaim {
	var claims []statusClaim
	for _, o := range gws {
		claims = append(claims, statusClaim{string(o.GetUID()), o.GetGatewayStatus().ServiceCIDR, v1alpha1.DescribeGateway(o), o.GetCreationTimestamp().UnixNano()})
	}
	return claims
}

// restoreAllocations fills pool from what the ports record and, for a gateway whose
// port records nothing, from its status. A record that cannot be restored is logged
// and skipped: the gateway's next reconcile allocates or is told why not.
func restoreAllocations(log logr.Logger, pool *ipam.ServiceCIDRPool, claims []statusClaim, recorded []recordedCIDR) {
	// First what the ports record, for the gateways that exist (a port left by a
	// deleted gateway holds nothing).
	byUID := map[string]bool{}
	for _, c := range claims {
		byUID[c.uid] = true
	}
	for _, rec := range recorded {
		if !byUID[rec.uid] {
			continue
		}
		p, err := netip.ParsePrefix(rec.cidr)
		if err == nil {
			err = pool.Claim(rec.uid, p)
		}
		if err != nil {
			log.Info("WARNING: a gateway port's recorded service CIDR could not be restored", "port", rec.port, "serviceCIDR", rec.cidr, "error", err.Error())
		}
	}
	// The older gateway keeps a /24 that two statuses name (only possible after manual
	// status edits); the younger one is told so by its Allocated condition.
	sort.Slice(claims, func(i, j int) bool {
		if claims[i].created != claims[j].created {
			return claims[i].created < claims[j].created
		}
		return claims[i].uid < claims[j].uid
	})
	for _, c := range claims {
		if c.cidr == "" {
			continue
		}
		if _, held := pool.Lookup(c.uid); held {
			continue // its port's record decided
		}
		p, err := netip.ParsePrefix(c.cidr)
		if err == nil {
			err = pool.Claim(c.uid, p)
		}
		if err != nil {
			log.Info("WARNING: a gateway's recorded service CIDR could not be restored", "owner", c.who, "serviceCIDR", c.cidr, "error", err.Error())
		}
	}
}

type recordedCIDR struct{ uid, cidr, port string }

// recordedServiceCIDRs lists the service CIDR every gateway port of the operator's
// records, sorted by UID.
func (r *Reconciler) recordedServiceCIDRs(ctx context.Context) ([]recordedCIDR, error) {
	var out []recordedCIDR
	for _, kind := range v1alpha1.GatewayKinds {
		ports, err := r.net().ListPorts(ctx, openstack.ListPortsOpts{Tags: []string{openstack.TagManaged, openstack.SanitizeTag(openstack.TagKindPrefix + kind)}})
		if err != nil {
			return nil, fmt.Errorf("listing the gateway ports to rebuild allocations: %w", err)
		}
		for _, p := range ports {
			owner, ok := openstack.OwnerFromTags(p.Tags)
			cidr := openstack.ServiceCIDRTag(p.Tags)
			if ok && cidr != "" {
				out = append(out, recordedCIDR{owner.UID, cidr, p.ID})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].uid < out[j].uid })
	return out, nil
}

// ensureAllocated gives the gateway its /24 and every exposure its virtual IP.
func (r *Reconciler) ensureAllocated(ctx context.Context, g *gateway) (bool, error) {
	pool, err := r.cidrPool(ctx)
	if err != nil {
		r.condFailed(g, v1alpha1.ConditionAllocated, v1alpha1.ReasonAllocationFailed, err)
		return false, err
	}
	cidr, refusal := r.allocateServiceCIDR(ctx, g, pool)
	if refusal == "" {
		// Recorded before the virtual IPs: the /24 is claimed, so it must survive a
		// restart even if the exposures cannot be given addresses yet.
		g.status.ServiceCIDR = cidr.String()
		g.status.ServiceCIDRGatewayAddress = ipam.GatewayAddress(cidr).String()
		refusal = assignVirtualIPs(g, cidr)
	}
	if refusal != "" {
		r.condFalse(g, v1alpha1.ConditionAllocated, v1alpha1.ReasonAllocationFailed, refusal)
		return false, nil
	}
	r.condTrue(g, v1alpha1.ConditionAllocated, v1alpha1.ReasonAllocated,
		fmt.Sprintf("service CIDR %s; %d exposure and %d reverse exposure virtual IPs", cidr, len(g.status.Exposures), len(g.status.ReverseExposures)))
	return true, nil
}

// allocateServiceCIDR claims the gateway's /24 in the pool: the one it holds, else the
// one its pinned virtual IPs lie in, else a free one outside the client's networks. A
// refusal says why none can be had.
func (r *Reconciler) allocateServiceCIDR(ctx context.Context, g *gateway, pool *ipam.ServiceCIDRPool) (netip.Prefix, string) {
	uid := string(g.obj.GetUID())
	pinned, hasPins := ipam.PinnedCIDR(pinnedVirtualIPs(g.spec)...)
	peerNets := peerSubnets(g.spec)
	overlap := func(c netip.Prefix) string {
		if o, bad := ipam.OverlapsAny(c, peerNets); bad {
			return fmt.Sprintf("the service CIDR %s overlaps the client's subnet %s; the client's networks must lie outside the gateway's virtual IPs", c, o)
		}
		return ""
	}
	// The allocator's record is the truth, not the status: the gateway pod may write
	// status. A differing status is put back, never claimed.
	if held, ok := pool.Lookup(uid); ok && g.status.ServiceCIDR != held.String() {
		r.statusForged(ctx, g, "serviceCIDR", g.status.ServiceCIDR, held.String(), "the /24 the allocator holds for this gateway")
		g.status.ServiceCIDR = held.String()
	}
	switch {
	case g.status.ServiceCIDR != "":
		cur, err := netip.ParsePrefix(g.status.ServiceCIDR)
		if err != nil {
			return netip.Prefix{}, fmt.Sprintf("status.serviceCIDR %q is not a CIDR", g.status.ServiceCIDR)
		}
		if hasPins && pinned != cur {
			return netip.Prefix{}, fmt.Sprintf("pinned virtual IPs lie in %s, but the gateway's service CIDR is %s; a gateway's service CIDR never moves (pin addresses inside %s, or recreate the gateway)", pinned, cur, cur)
		}
		if err := pool.Claim(uid, cur); err != nil {
			return netip.Prefix{}, fmt.Sprintf("status.serviceCIDR %s: %v", cur, err)
		}
		return cur, overlap(cur)
	case hasPins:
		if msg := overlap(pinned); msg != "" {
			return netip.Prefix{}, msg
		}
		if err := pool.Claim(uid, pinned); err != nil {
			return netip.Prefix{}, fmt.Sprintf("pinned virtual IPs need the service CIDR %s: %v", pinned, err)
		}
		return pinned, ""
	default:
		c, err := pool.Allocate(uid, peerNets...)
		if err != nil {
			return netip.Prefix{}, err.Error()
		}
		return c, ""
	}
}

// pinnedVirtualIPs is every virtual IP the spec pins, exposures and reverse exposures.
func pinnedVirtualIPs(spec *v1alpha1.GatewaySpec) []string {
	var pins []string
	for _, e := range spec.Exposures {
		pins = append(pins, e.VirtualIP)
	}
	for _, e := range spec.ReverseExposures {
		pins = append(pins, e.VirtualIP)
	}
	return pins
}

// peerSubnets is the client's networks: the gateway's /24 must not overlap them, or a
// virtual IP could not be told apart from a client address (and the guard would drop it).
func peerSubnets(spec *v1alpha1.GatewaySpec) []netip.Prefix {
	var peerNets []netip.Prefix
	for _, t := range spec.Tunnels {
		for _, s := range t.Peer.Subnets {
			if p, err := netip.ParsePrefix(s); err == nil {
				peerNets = append(peerNets, p)
			}
		}
	}
	return peerNets
}

// assignVirtualIPs gives every exposure and reverse exposure its virtual IP in cidr,
// keeping the ones status records; a refusal says why one cannot be had.
func assignVirtualIPs(g *gateway, cidr netip.Prefix) string {
	fwdReq := make([]ipam.VIPRequest, 0, len(g.spec.Exposures))
	for _, e := range g.spec.Exposures {
		fwdReq = append(fwdReq, ipam.VIPRequest{Name: e.Name, Pinned: e.VirtualIP})
	}
	revReq := make([]ipam.VIPRequest, 0, len(g.spec.ReverseExposures))
	for _, e := range g.spec.ReverseExposures {
		revReq = append(revReq, ipam.VIPRequest{Name: e.Name, Pinned: e.VirtualIP})
	}
	fwd, err := ipam.AssignVIPs(cidr, ipam.ForwardRange, fwdReq, toAssignments(g.status.Exposures))
	if err != nil {
		return allocMessage(err)
	}
	rev, err := ipam.AssignVIPs(cidr, ipam.ReverseRange, revReq, toAssignments(g.status.ReverseExposures))
	if err != nil {
		return allocMessage(err)
	}
	g.status.Exposures = fromAssignments(fwd)
	g.status.ReverseExposures = fromAssignments(rev)
	return ""
}

func allocMessage(err error) string {
	if errors.Is(err, ipam.ErrRangeExhausted) {
		return err.Error() + "; the ranges never borrow from each other"
	}
	return err.Error()
}

func toAssignments(in []v1alpha1.AllocatedAddress) []ipam.VIPAssignment {
	out := make([]ipam.VIPAssignment, 0, len(in))
	for _, a := range in {
		out = append(out, ipam.VIPAssignment{Name: a.Name, VirtualIP: a.VirtualIP})
	}
	return out
}

func fromAssignments(in []ipam.VIPAssignment) []v1alpha1.AllocatedAddress {
	if len(in) == 0 {
		return nil
	}
	out := make([]v1alpha1.AllocatedAddress, 0, len(in))
	for _, a := range in {
		out = append(out, v1alpha1.AllocatedAddress{Name: a.Name, VirtualIP: a.VirtualIP})
	}
	return out
}

// releaseAllocation frees the gateway's /24 once its finalizer has cleaned up, and wakes
// the gateways waiting for a /24 (a pinned one this gateway held, or any when the pool
// was full): they would otherwise wait for the resync.
func (r *Reconciler) releaseAllocation(ctx context.Context, g *gateway) {
	r.poolMu.Lock()
	pool := r.pool
	r.poolMu.Unlock()
	if pool == nil {
		return
	}
	if _, held := pool.Lookup(string(g.obj.GetUID())); !held {
		return
	}
	pool.Release(string(g.obj.GetUID()))
	r.wakeAllocationWaiters(ctx, g.obj.GetUID())
}

// wakeBuffer bounds the wake-up queue per kind; a wake-up that does not fit is dropped
// (the resync still comes).
const wakeBuffer = 1024

// wakeAllocationWaiters reconciles again every gateway whose allocation failed.
func (r *Reconciler) wakeAllocationWaiters(ctx context.Context, except types.UID) {
	for _, kind := range v1alpha1.GatewayKinds {
		gws, err := r.listGateways(ctx, kind)
		if err != nil {
			logr.FromContextOrDiscard(ctx).Info("listing gateways to wake after a release failed", "error", err.Error())
			continue
		}
		for _, w := range gws {
			c := conditions.Get(w.status.Conditions, v1alpha1.ConditionAllocated)
			if w.obj.GetUID() == except || c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonAllocationFailed {
				continue
			}
			select {
			case r.wake[kind] <- event.GenericEvent{Object: w.obj}:
			default:
			}
		}
	}
}
