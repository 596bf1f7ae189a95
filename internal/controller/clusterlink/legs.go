package clusterlink

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/controller/outcome"
	"bnerd.net/vpn-operator/internal/ipam"
	"bnerd.net/vpn-operator/internal/openstack"
)

// OwnerKind is the kind written into the tags of every OpenStack object a ClusterLink owns.
const OwnerKind = "ClusterLink"

// OwnerRouterInterface is Neutron's device_owner of a router interface port.
const OwnerRouterInterface = "network:router_interface"

type transitNet struct {
	network *openstack.Network
	subnet  openstack.Subnet
	prefix  netip.Prefix
}

func owner(link *v1alpha1.ClusterLink) openstack.Owner {
	return openstack.Owner{Kind: OwnerKind, Name: link.Name, UID: string(link.UID)}
}

// transitNetwork resolves the configured transit network and its one IPv4 subnet
// once; both are estate-level constants.
func (r *Reconciler) transitNetwork(ctx context.Context) (*transitNet, error) {
	r.netMu.Lock()
	defer r.netMu.Unlock()
	if r.transit != nil {
		return r.transit, nil
	}
	n, err := r.OpenStack.Networking.ResolveNetwork(ctx, r.Config.GatewayNetwork)
	if err != nil {
		return nil, fmt.Errorf("resolving the transit network %q: %w", r.Config.GatewayNetwork, err)
	}
	subs, err := r.OpenStack.Networking.ListSubnets(ctx, n.ID)
	if err != nil {
		return nil, fmt.Errorf("listing the subnets of the transit network %s: %w", n.ID, err)
	}
	var v4 []openstack.Subnet
	var prefix netip.Prefix
	for _, s := range subs {
		if p, err := netip.ParsePrefix(s.CIDR); err == nil && p.Addr().Is4() {
			v4 = append(v4, s)
			prefix = p
		}
	}
	if len(v4) != 1 {
		return nil, fmt.Errorf("the transit network %s has %d IPv4 subnets; ClusterLink needs exactly one", n.ID, len(v4))
	}
	r.transit = &transitNet{network: n, subnet: v4[0], prefix: prefix.Masked()}
	return r.transit, nil
}

// ensureShared shares the transit network with the customer project (RBAC
// access_as_shared, exactly that project), on every reconcile. A refusal or a rule
// someone else owns is fine as long as the customer can already see the network.
func (r *Reconciler) ensureShared(ctx context.Context, lc *linkCtx) (bool, error) {
	tn := lc.tn
	op := r.OpenStack.Networking
	netID, project := tn.network.ID, lc.projectID
	pols, err := op.ListRBACPolicies(ctx, openstack.ListRBACPoliciesOpts{
		ObjectID: netID, ObjectType: openstack.RBACObjectNetwork, TargetProject: project, Action: openstack.RBACActionAccessAsShared,
	})
	if err != nil {
		lc.set.False(v1alpha1.ConditionTransitNetworkShared, v1alpha1.ReasonEnsureNetworkSharedFailed, lc.opPrefix()+"listing RBAC policies: "+outcome.Describe(err))
		return false, err
	}
	for _, p := range pols {
		if p.ObjectID == netID && p.TargetProject == project && p.Action == openstack.RBACActionAccessAsShared {
			lc.set.True(v1alpha1.ConditionTransitNetworkShared, v1alpha1.ReasonShared,
				fmt.Sprintf("transit network %s is shared with project %s (RBAC policy %s)", netID, project, p.ID))
			return true, nil
		}
	}
	pol, err := op.ShareNetwork(ctx, netID, project)
	if err == nil {
		lc.eventf(corev1.EventTypeNormal, "TransitNetworkShared", "shared transit network %s with project %s (RBAC policy %s)", netID, project, pol.ID)
		lc.set.True(v1alpha1.ConditionTransitNetworkShared, v1alpha1.ReasonShared,
			fmt.Sprintf("transit network %s is shared with project %s (RBAC policy %s)", netID, project, pol.ID))
		return true, nil
	}
	if !openstack.IsForbidden(err) && !openstack.IsConflict(err) {
		lc.set.False(v1alpha1.ConditionTransitNetworkShared, v1alpha1.ReasonEnsureNetworkSharedFailed, lc.opPrefix()+outcome.Describe(err))
		return false, err
	}
	// Refused, or a rule owned by someone else exists (409 DuplicateRbacPolicy): what
	// counts is whether the customer can see the network.
	if _, verr := lc.legClients.Networking.GetNetwork(ctx, netID); verr != nil {
		if !openstack.IsNotFound(verr) {
			lc.set.False(v1alpha1.ConditionTransitNetworkShared, v1alpha1.ReasonNetworkVisibilityCheckFailed,
				fmt.Sprintf("%schecking whether project %s can see transit network %s after the share was refused (%s): %s",
					lc.legPrefix(), project, netID, err.Error(), outcome.Describe(verr)))
			return false, verr
		}
		lc.set.False(v1alpha1.ConditionTransitNetworkShared, v1alpha1.ReasonTransitNetworkNotShared, fmt.Sprintf(
			"%ssharing transit network %s with project %s failed (%s) and the project cannot see it; an OpenStack admin runs once: "+
				"openstack network rbac create --type network --action access_as_shared --target-project %s %s",
			lc.opPrefix(), netID, project, err.Error(), project, netID))
		return false, nil
	}
	lc.set.True(v1alpha1.ConditionTransitNetworkShared, v1alpha1.ReasonShared,
		fmt.Sprintf("transit network %s is visible to project %s through a rule the operator does not own", netID, project))
	return true, nil
}

// listedClaims reads every ClusterLink's transit IP (status and pin), keyed by UID,
// plus the UIDs' names for messages. It reads the cache, without copying (the links
// carry a reverse route per gateway in their status: a thousand gateways made each
// uncached list megabytes): the cache was synced before the first reconcile, so it
// holds every allocation a predecessor persisted, and this process's allocations that
// the cache may not show yet are in the in-memory claims the allocation also checks.
func (r *Reconciler) listedClaims(ctx context.Context) (map[string][]netip.Addr, map[string]string, error) {
	var list v1alpha1.ClusterLinkList
	if err := r.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, err
	}
	claims := map[string][]netip.Addr{}
	names := map[string]string{}
	for _, l := range list.Items {
		uid := string(l.UID)
		names[uid] = l.Name
		for _, s := range []string{l.Status.TransitIP, l.Spec.TransitIP} {
			if a, err := netip.ParseAddr(s); err == nil {
				claims[uid] = append(claims[uid], a)
			}
		}
	}
	return claims, names, nil
}

func adoptable(p *openstack.Port, routerID string) bool {
	_, tagged := openstack.OwnerFromTags(p.Tags)
	return !tagged && p.DeviceID == routerID && p.DeviceOwner == OwnerRouterInterface
}

// ensureTransitIP allocates the leg's transit IP and writes it to status before any
// port is made at it. Cross-tenant legs without a pin take the address Neutron gives
// the customer's port (a customer may not choose addresses on a network it does not
// own), so their allocation is recorded in ensureLeg.
func (r *Reconciler) ensureTransitIP(ctx context.Context, lc *linkCtx) (bool, error) {
	link := lc.link
	uid := string(link.UID)
	if cur := link.Status.TransitIP; cur != "" {
		return r.keepTransitIP(lc, cur), nil
	}
	if lc.cross && link.Spec.TransitIP == "" {
		if conditionMissing(lc, v1alpha1.ConditionTransitIPAllocated) {
			lc.set.Unknown(v1alpha1.ConditionTransitIPAllocated, v1alpha1.ReasonInProgress, "the customer's leg port will take the address Neutron allocates")
		}
		return true, nil
	}

	fail := func(err error) (bool, error) {
		lc.set.False(v1alpha1.ConditionTransitIPAllocated, v1alpha1.ReasonTransitIPAllocationFailed, lc.opPrefix()+outcome.Describe(err))
		return false, err
	}
	// A port tagged for this link exists when a previous reconcile created it and
	// crashed before recording it: adopt its address.
	own, err := lc.legClients.Networking.ListPorts(ctx, openstack.ListPortsOpts{Tags: owner(link).Selector(), NetworkID: lc.tn.network.ID})
	if err != nil {
		return fail(err)
	}
	for _, p := range own {
		if ip := p.FixedIPOn(lc.tn.subnet.ID); ip != "" {
			a, _ := netip.ParseAddr(ip)
			r.claims.Hold(uid, a)
			link.Status.TransitIP, link.Status.LegPortID = ip, p.ID
			if err := r.persist(ctx, lc); err != nil {
				return false, err
			}
			lc.set.True(v1alpha1.ConditionTransitIPAllocated, v1alpha1.ReasonTransitIPAllocated, "transit IP "+ip+" (from this link's own port "+p.ID+")")
			return true, nil
		}
	}

	occupied, err := r.occupiedTransitIPs(ctx, lc)
	if err != nil {
		return fail(err)
	}
	listed, names, err := r.listedClaims(ctx)
	if err != nil {
		return false, err
	}
	a, err := r.claims.Allocate(uid, listed, chooseTransitIP(lc, occupied, names))
	if err != nil {
		lc.set.False(v1alpha1.ConditionTransitIPAllocated, v1alpha1.ReasonTransitIPAllocationFailed, err.Error())
		return false, nil
	}
	link.Status.TransitIP = a.String()
	if err := r.persist(ctx, lc); err != nil {
		r.claims.Release(uid)
		link.Status.TransitIP = ""
		return false, err
	}
	lc.eventf(corev1.EventTypeNormal, "TransitIPAllocated", "allocated transit IP %s", a)
	lc.set.True(v1alpha1.ConditionTransitIPAllocated, v1alpha1.ReasonTransitIPAllocated, "transit IP "+a.String())
	return true, nil
}

// keepTransitIP holds the recorded transit IP (a pin that differs from it does not move
// the leg); false when the record is not an address.
func (r *Reconciler) keepTransitIP(lc *linkCtx, cur string) bool {
	a, err := netip.ParseAddr(cur)
	if err != nil {
		lc.set.False(v1alpha1.ConditionTransitIPAllocated, v1alpha1.ReasonTransitIPAllocationFailed, fmt.Sprintf("status.transitIP %q is not an address", cur))
		return false
	}
	r.claims.Hold(string(lc.link.UID), a)
	if pin := lc.link.Spec.TransitIP; pin != "" && pin != cur {
		lc.set.False(v1alpha1.ConditionTransitIPAllocated, v1alpha1.ReasonTransitIPAllocationFailed, fmt.Sprintf(
			"spec.transitIP %s differs from the allocated %s; the leg stays at %s (recreate the ClusterLink to move it)", pin, cur, cur))
		return true
	}
	lc.set.True(v1alpha1.ConditionTransitIPAllocated, v1alpha1.ReasonTransitIPAllocated, "transit IP "+cur)
	return true
}

// occupiedTransitIPs maps every address on the transit network to the port holding it
// (read-only: links allocating at the same time share it). The list is every port of the
// network, a thousand and more in a large estate; links that ask while one is in flight
// share the next one (freshread), so links allocating together make fewer lists than
// one each, each as fresh as a link's own (started after it asked). The allocation itself
// stays under the claims' lock, where a link sees the addresses the others just took.
// Only the attributes the choice reads come back (occupancyFields).
func (r *Reconciler) occupiedTransitIPs(ctx context.Context, lc *linkCtx) (map[netip.Addr]*openstack.Port, error) {
	network := lc.tn.network.ID
	return r.occupied.Do(ctx, network, func(ctx context.Context) (map[netip.Addr]*openstack.Port, error) {
		ports, err := r.OpenStack.Networking.ListPorts(ctx, openstack.ListPortsOpts{NetworkID: network, Fields: occupancyFields})
		if err != nil {
			return nil, err
		}
		occupied := map[netip.Addr]*openstack.Port{}
		for i := range ports {
			for _, f := range ports[i].FixedIPs {
				if a, err := netip.ParseAddr(f.IPAddress); err == nil {
					occupied[a] = &ports[i]
				}
			}
		}
		return occupied, nil
	})
}

// occupancyFields are the port attributes the transit-IP choice reads: the addresses, and
// what adoptable and the refusal of a held pin look at. The rest of a port (its name,
// MAC, security groups, bindings, timestamps) is most of its size, and the list holds
// every port of the transit network.
var occupancyFields = []string{"id", "fixed_ips", "device_id", "device_owner", "tags"}

// chooseTransitIP picks the link's address under the claims' lock: its pin, if no other
// link claims it and no port but an adoptable hand-made leg holds it; else the next
// address that is neither claimed nor held.
func chooseTransitIP(lc *linkCtx, occupied map[netip.Addr]*openstack.Port, names map[string]string) func(claimed func(netip.Addr) (string, bool)) (netip.Addr, error) {
	tn, routerID := lc.tn, lc.router.ID
	return func(claimed func(netip.Addr) (string, bool)) (netip.Addr, error) {
		if pin := lc.link.Spec.TransitIP; pin != "" {
			a, err := netip.ParseAddr(pin)
			if err != nil {
				return a, err
			}
			if err := ipam.CheckTransitIP(tn.prefix, a); err != nil {
				return a, err
			}
			if o, taken := claimed(a); taken {
				n := names[o]
				if n == "" {
					n = "uid " + o
				}
				return a, fmt.Errorf("spec.transitIP %s is already claimed by ClusterLink %s", a, n)
			}
			if p := occupied[a]; p != nil && !adoptable(p, routerID) {
				return a, fmt.Errorf("spec.transitIP %s is held by port %s (device %q), which is not an untagged leg attached to router %s", a, p.ID, p.DeviceID, routerID)
			}
			return a, nil
		}
		return ipam.NextTransitIP(tn.prefix, func(a netip.Addr) bool {
			if _, taken := claimed(a); taken {
				return false
			}
			p := occupied[a]
			return p == nil || adoptable(p, routerID)
		})
	}
}

func conditionMissing(lc *linkCtx, t string) bool {
	for _, c := range lc.link.Status.Conditions {
		if c.Type == t {
			return false
		}
	}
	return true
}

// ensureLeg finds the leg port (by status ID, then by tag, then an adoptable hand-made
// port at the transit IP), creates it as a last resort, records it, and attaches it to
// the service cluster's router. Each step either hands on the port or stops the phase
// (its condition already says why).
func (r *Reconciler) ensureLeg(ctx context.Context, lc *linkCtx) (bool, error) {
	port, err := r.ownedOrNewLeg(ctx, lc)
	var stop legStopped
	switch {
	case errors.As(err, &stop):
		return false, stop.err
	case err != nil:
		return false, r.legFailed(lc, v1alpha1.ReasonEnsureLegPortFailed, err, "%s", err.Error())
	}
	if stop, err := r.recordLeg(ctx, lc, port); stop {
		return false, err
	}
	return r.attachLeg(ctx, lc, port)
}

// legStopped is an adoption or creation that stopped the phase after saying why in its
// condition (err: the error the phase returns, nil for a wait on a human).
type legStopped struct{ err error }

func (s legStopped) Error() string { return "the leg phase stopped" }

// ownedOrNewLeg is the link's leg port through openstack.Owned: the one status names if
// it still carries the link's tags, else one with the tags (the one at the recorded
// transit IP first; an unattached duplicate goes), else a hand-made leg adopted at the
// transit IP, else a new one.
func (r *Reconciler) ownedOrNewLeg(ctx context.Context, lc *linkCtx) (*openstack.Port, error) {
	link, net, own := lc.link, lc.legClients.Networking, owner(lc.link)
	found, err := openstack.Owned[openstack.Port]{
		Owner: own, RecordedID: link.Status.LegPortID, Tags: openstack.PortTags,
		Get: func(ctx context.Context, id string) (*openstack.Port, error) {
			p, err := net.GetPort(ctx, id)
			if err != nil {
				err = fmt.Errorf("reading leg port %s: %w", id, err)
			}
			return p, err
		},
		List: func(ctx context.Context) ([]openstack.Port, error) {
			ps, err := net.ListPorts(ctx, openstack.ListPortsOpts{Tags: own.Selector(), NetworkID: lc.tn.network.ID})
			if err != nil {
				err = fmt.Errorf("looking up the leg port by tag: %w", err)
			}
			return ps, err
		},
		Keep: func(a, b *openstack.Port) bool {
			at := link.Status.TransitIP
			return at != "" && a.FixedIPOn(lc.tn.subnet.ID) == at && b.FixedIPOn(lc.tn.subnet.ID) != at
		},
		InUse:  func(p *openstack.Port) bool { return p.DeviceID != "" },
		ID:     func(p *openstack.Port) string { return p.ID },
		Delete: net.DeletePort,
		Adopt:  func(ctx context.Context) (*openstack.Port, error) { return r.adoptLeg(ctx, lc) },
		Create: func(ctx context.Context) (*openstack.Port, error) { return r.createLeg(ctx, lc) },
	}.Ensure(ctx)
	for _, id := range found.Deleted {
		lc.log.Info("deleted a duplicate leg port", "port", id)
	}
	return found.Object, err
}

// legFailed sets LegAttached false with the reason, marks the phases after it waiting,
// and says the reverse routes cannot be reached without a leg; it returns err.
func (r *Reconciler) legFailed(lc *linkCtx, reason string, err error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if err != nil {
		msg = strings.TrimSuffix(msg, err.Error()) + outcome.Describe(err)
	}
	lc.set.False(v1alpha1.ConditionLegAttached, reason, lc.legPrefix()+msg)
	r.waiting(lc, v1alpha1.ConditionLegAttached, []string{v1alpha1.ConditionRouteInstalled, v1alpha1.ConditionReverseRoutesInstalled})
	if conditionMissing(lc, v1alpha1.ConditionReverseRoutesInstalled) || lc.link.Status.ReverseRoutes == nil {
		lc.set.False(v1alpha1.ConditionReverseRoutesInstalled, v1alpha1.ReasonEnsureReverseRoutesFailed, "the leg is not attached, so the service cluster's router cannot reach any gateway port")
	}
	return err
}

// adoptLeg adopts a hand-made leg at the link's transit IP (the recorded one, or a
// cross-tenant link's pin): an untagged port attached to the service cluster's router
// gets the link's tags. A port there that is not adoptable stops the phase (or, for a
// link whose address the operator chose, sends it to another address): legStopped.
func (r *Reconciler) adoptLeg(ctx context.Context, lc *linkCtx) (*openstack.Port, error) {
	link, net, own := lc.link, lc.legClients.Networking, owner(lc.link)
	adoptIP := link.Status.TransitIP
	if lc.cross {
		adoptIP = link.Spec.TransitIP
	}
	if adoptIP == "" {
		return nil, nil
	}
	ps, err := net.ListPorts(ctx, openstack.ListPortsOpts{NetworkID: lc.tn.network.ID, IPAddress: adoptIP})
	if err != nil {
		return nil, legStopped{r.legFailed(lc, v1alpha1.ReasonEnsureLegPortFailed, err, "looking up ports at %s: %s", adoptIP, err.Error())}
	}
	if len(ps) == 0 {
		return nil, nil
	}
	p := &ps[0]
	if !adoptable(p, lc.router.ID) {
		if r.mayReallocate(lc) {
			_, err := r.reallocate(ctx, lc, fmt.Sprintf("transit IP %s was taken by port %s (device %q) before this link's leg was created", adoptIP, p.ID, p.DeviceID))
			return nil, legStopped{err}
		}
		also := ""
		if !lc.cross {
			// Our leg is gone and someone else holds its address: our route via it
			// would deliver this link's traffic to them. Theirs stays.
			if err := r.removeForwardRoutes(ctx, lc); err != nil {
				also = "; also failed to remove this link's gateway route via " + adoptIP + ": " + outcome.Describe(err)
			}
		}
		return nil, legStopped{r.legFailed(lc, v1alpha1.ReasonEnsureLegPortFailed, nil,
			"transit IP %s is held by port %s (device %q), which is not an untagged leg attached to router %s; free the address or recreate the link%s",
			adoptIP, p.ID, p.DeviceID, lc.router.Name, also)}
	}
	tags := slices.Clone(p.Tags)
	for _, t := range own.Tags() {
		if !slices.Contains(tags, t) {
			tags = append(tags, t)
		}
	}
	if _, err := net.ReplacePortTags(ctx, p.ID, tags); err != nil {
		return nil, legStopped{r.legFailed(lc, v1alpha1.ReasonEnsureLegPortFailed, err, "tagging hand-made leg port %s for adoption: %s", p.ID, err.Error())}
	}
	p.Tags = tags
	lc.eventf(corev1.EventTypeNormal, "LegPortAdopted", "adopted hand-made leg port %s at %s on router %s", p.ID, adoptIP, lc.router.Name)
	return p, nil
}

// createLeg creates the leg port at the link's transit IP (a cross-tenant link's pin,
// else the allocated one), or at Neutron's choice for a cross-tenant link without a
// pin. A creation that stops the phase says why in its condition: legStopped.
func (r *Reconciler) createLeg(ctx context.Context, lc *linkCtx) (*openstack.Port, error) {
	link, tn := lc.link, lc.tn
	if lc.cross && link.Status.TransitIP == "" {
		// A cross-tenant leg without a pin takes Neutron's address, so nothing of it is
		// on record before it exists. The customer project goes on record first: a
		// deletion that finds it looks for a leg by tag even if the create's answer (or
		// the status write after it) was lost.
		if err := r.persist(ctx, lc); err != nil {
			return nil, legStopped{err}
		}
	}
	opts := wantedLeg(link, lc.cross, tn, lc.router.Name)
	p, err := lc.legClients.Networking.CreatePort(ctx, opts)
	if err != nil && openstack.NeutronErrorType(err) == "IpAddressAlreadyAllocated" && r.mayReallocate(lc) {
		_, err := r.reallocate(ctx, lc, fmt.Sprintf("transit IP %s was taken by another port before this link's leg was created", opts.IPAddress))
		return nil, legStopped{err}
	}
	if err != nil {
		return nil, legStopped{r.legFailed(lc, v1alpha1.ReasonEnsureLegPortFailed, err, "creating the leg port: %s", err.Error())}
	}
	lc.eventf(corev1.EventTypeNormal, "LegPortCreated", "created leg port %s at %s", p.ID, p.FixedIPOn(tn.subnet.ID))
	return p, nil
}

// wantedLeg is the link's leg port as it is created on the transit subnet: at a
// cross-tenant link's pin (none: Neutron's choice, as the customer may not choose
// addresses on a network it does not own), else at the transit IP the operator
// allocated and recorded.
func wantedLeg(link *v1alpha1.ClusterLink, cross bool, tn *transitNet, routerName string) openstack.CreatePortOpts {
	opts := openstack.CreatePortOpts{
		NetworkID:   tn.network.ID,
		SubnetID:    tn.subnet.ID,
		Name:        openstack.ResourceName(OwnerKind, "", link.Name),
		Description: "ClusterLink " + link.Name + ": leg of router " + routerName + " on the transit network",
		Tags:        owner(link).Tags(),
		IPAddress:   link.Status.TransitIP,
	}
	if cross {
		opts.IPAddress = link.Spec.TransitIP
	}
	return opts
}

// recordLeg checks the port's transit address against status and records the port
// (and a Neutron-chosen address) before anything routes via it.
func (r *Reconciler) recordLeg(ctx context.Context, lc *linkCtx, port *openstack.Port) (stop bool, err error) {
	link := lc.link
	ip := port.FixedIPOn(lc.tn.subnet.ID)
	if ip == "" {
		return true, r.legFailed(lc, v1alpha1.ReasonEnsureLegPortFailed, nil, "leg port %s has no address on the transit subnet %s", port.ID, lc.tn.subnet.ID)
	}
	if cur := link.Status.TransitIP; cur != "" && ip != cur {
		if lc.cross {
			_, err := r.transitIPMismatch(ctx, lc, port, cur, ip)
			return true, err
		}
		return true, r.legFailed(lc, v1alpha1.ReasonEnsureLegPortFailed, nil, "leg port %s sits at %s, but status.transitIP is %s", port.ID, ip, cur)
	}
	record := link.Status.LegPortID != port.ID
	if link.Status.TransitIP == "" {
		a, _ := netip.ParseAddr(ip)
		r.claims.Hold(string(link.UID), a)
		link.Status.TransitIP = ip
		lc.set.True(v1alpha1.ConditionTransitIPAllocated, v1alpha1.ReasonTransitIPAllocated, "transit IP "+ip+" (allocated by Neutron to the customer's leg port)")
		record = true
	}
	if record {
		link.Status.LegPortID = port.ID
		if err := r.persist(ctx, lc); err != nil {
			return true, err
		}
	}
	lc.port = port
	return false, nil
}

// attachLeg attaches the leg port to the service cluster's router, unless it is there
// already; a port on another device is not taken from it.
func (r *Reconciler) attachLeg(ctx context.Context, lc *linkCtx, port *openstack.Port) (bool, error) {
	ip := port.FixedIPOn(lc.tn.subnet.ID)
	switch {
	case port.DeviceID == lc.router.ID:
	case port.DeviceID != "":
		return false, r.legFailed(lc, v1alpha1.ReasonEnsureRouterHasPortFailed, nil, "leg port %s is attached to device %s, not router %s", port.ID, port.DeviceID, lc.router.ID)
	default:
		if err := lc.legClients.Networking.AddRouterInterface(ctx, lc.router.ID, port.ID); err != nil {
			return false, r.legFailed(lc, v1alpha1.ReasonEnsureRouterHasPortFailed, err, "attaching leg port %s to router %s: %s", port.ID, lc.router.Name, err.Error())
		}
		lc.eventf(corev1.EventTypeNormal, "LegAttached", "attached leg port %s (%s) to router %s", port.ID, ip, lc.router.Name)
	}
	lc.attached = true
	lc.set.True(v1alpha1.ConditionLegAttached, v1alpha1.ReasonAttached,
		fmt.Sprintf("leg port %s (%s) is attached to router %s (%s)", port.ID, ip, lc.router.Name, lc.router.ID))
	return true, nil
}

// transitIPMismatch handles a cross-tenant leg that came back at another address: the
// old address may be handed to someone else, so the route via it goes at once; the
// recreated port goes too, and nothing is routed to the new one.
func (r *Reconciler) transitIPMismatch(ctx context.Context, lc *linkCtx, port *openstack.Port, old, got string) (bool, error) {
	var problems []string
	if err := r.removeForwardRoutes(ctx, lc); err != nil {
		problems = append(problems, "also failed to remove the gateway route via "+old+": operator credential: "+err.Error())
	}
	if err := lc.legClients.Networking.DeletePort(ctx, port.ID); err != nil && !openstack.IsNotFound(err) {
		problems = append(problems, "also failed to delete the recreated port "+port.ID+": "+lc.legPrefix()+err.Error())
	}
	lc.link.Status.LegPortID = ""
	msg := fmt.Sprintf("%sthe leg port came back at %s instead of status.transitIP %s (it was removed out of band and recreated); "+
		"the gateway route via %s was removed and the recreated port %s deleted, and no route to %s is installed; recreate the ClusterLink to link the service cluster again",
		lc.legPrefix(), got, old, old, port.ID, got)
	for _, p := range problems {
		msg += "; " + p
	}
	lc.set.False(v1alpha1.ConditionLegAttached, v1alpha1.ReasonTransitIPMismatch, msg)
	lc.set.False(v1alpha1.ConditionRouteInstalled, v1alpha1.ReasonEnsureRouteFailed, lc.opPrefix()+"no gateway route: the leg's transit IP changed (TransitIPMismatch)")
	lc.set.False(v1alpha1.ConditionReverseRoutesInstalled, v1alpha1.ReasonEnsureReverseRoutesFailed, lc.legPrefix()+"the leg is gone (TransitIPMismatch)")
	lc.eventf(corev1.EventTypeWarning, v1alpha1.ReasonTransitIPMismatch, "%s", msg)
	if len(problems) > 0 {
		return false, errors.New("transit IP mismatch cleanup incomplete")
	}
	return false, nil
}

// mayReallocate: the transit IP was chosen by the operator and nothing was ever built
// at it (no leg, hence no route via it), so it can be given up. Transit IPs come from
// the transit network's subnet, where Neutron also hands out addresses to other ports
// (gateway ports among them): one can take the address between the allocation and the
// leg's creation.
func (r *Reconciler) mayReallocate(lc *linkCtx) bool {
	st := lc.link.Status
	return !lc.cross && lc.link.Spec.TransitIP == "" && st.LegPortID == "" && st.TransitIP != ""
}

// reallocate gives up a transit IP that another port took before the leg existed.
func (r *Reconciler) reallocate(ctx context.Context, lc *linkCtx, why string) (bool, error) {
	link := lc.link
	taken := link.Status.TransitIP
	link.Status.TransitIP = ""
	if err := r.persist(ctx, lc); err != nil {
		link.Status.TransitIP = taken
		return false, err
	}
	r.claims.Release(string(link.UID))
	lc.set.Unknown(v1alpha1.ConditionTransitIPAllocated, v1alpha1.ReasonInProgress, why+"; allocating another")
	lc.set.Unknown(v1alpha1.ConditionLegAttached, v1alpha1.ReasonNotReady, "waiting for "+v1alpha1.ConditionTransitIPAllocated)
	lc.eventf(corev1.EventTypeWarning, "TransitIPTaken", "%s; allocating another", why)
	// The next reconcile allocates anew, once the cache shows the cleared address. Not
	// an error: a burst of new gateways on the transit subnet makes the race routine,
	// and it is handled (the Event says so); an error would back off and count in the
	// controller's error metric and log.
	return false, outcome.Wait(cacheCatchUp, "%s; allocating another", why)
}
