package gateway

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
)

// ensureFloatingIP gives the port its public address: the pinned spec.endpoint.floatingIP
// (one the tenant's policy lists, checked at Validated) adopted with a pinned-by tag
// naming this gateway, never released, and refused while it carries another gateway's
// tag; or one allocated with the gateway's tags.
func (r *Reconciler) ensureFloatingIP(ctx context.Context, g *gateway) (bool, error) {
	fail := func(err error) (bool, error) {
		r.condFailed(g, v1alpha1.ConditionFloatingIPReady, v1alpha1.ReasonFloatingIPFailed, err)
		return false, err
	}
	var pin string
	if g.spec.Endpoint != nil {
		pin = g.spec.Endpoint.FloatingIP
	}

	recorded, err := r.recordedFloatingIP(ctx, g)
	if err != nil {
		return fail(err)
	}
	var fip *openstack.FloatingIP
	stop := false
	if pin != "" {
		fip, stop, err = r.pinnedFloatingIP(ctx, g, pin, recorded)
	} else {
		fip, err = r.allocatedFloatingIP(ctx, g, recorded)
	}
	if err != nil {
		return fail(err)
	}
	if stop {
		return false, nil
	}
	// Noted in status for the later phases; the status write comes at the end of the
	// reconcile (FloatingIPReady is not a recorded phase). What keeps a crash before that
	// write from allocating a second address is the tag: an allocated address is created
	// with the owner's tags and found by them, a pinned one carries the owner's pin tag.
	g.status.FloatingIP = fip.FloatingIPAddress
	g.status.FloatingIPID = fip.ID
	if fip.PortID != g.port.ID {
		f, err := r.net().AssociateFloatingIP(ctx, fip.ID, g.port.ID)
		if err != nil {
			return fail(err)
		}
		fip = f
	}
	how := "allocated"
	if pin != "" {
		how = "pinned"
	}
	r.condTrue(g, v1alpha1.ConditionFloatingIPReady, v1alpha1.ReasonFloatingIPReady,
		fmt.Sprintf("%s floating IP %s is associated with port %s", how, fip.FloatingIPAddress, g.port.ID))
	return true, nil
}

// recordedFloatingIP is the floating IP status names, if it still exists.
func (r *Reconciler) recordedFloatingIP(ctx context.Context, g *gateway) (*openstack.FloatingIP, error) {
	id := g.status.FloatingIPID
	if id == "" {
		return nil, nil
	}
	f, err := r.net().GetFloatingIP(ctx, id)
	switch {
	case err == nil:
		return f, nil
	case openstack.IsNotFound(err):
		return nil, nil
	}
	return nil, err
}

// pinnedFloatingIP adopts the pinned address: it must exist in the operator's project,
// carry no other gateway's tag and sit on no other port; it gets this gateway's pin tag
// before it is associated. stop: refused, the condition says why.
func (r *Reconciler) pinnedFloatingIP(ctx context.Context, g *gateway, pin string, recorded *openstack.FloatingIP) (fip *openstack.FloatingIP, stop bool, err error) {
	owner := g.owner()
	if recorded != nil && recorded.FloatingIPAddress == pin {
		fip = recorded
	} else {
		f, err := r.net().FindFloatingIPByAddress(ctx, pin)
		if openstack.IsNotFound(err) {
			r.condFalse(g, v1alpha1.ConditionFloatingIPReady, v1alpha1.ReasonFloatingIPMissing,
				fmt.Sprintf("pinned floating IP %s does not exist in the operator's project", pin))
			return nil, true, nil
		}
		if err != nil {
			return nil, false, err
		}
		fip = f
	}
	if reserved(fip, owner) {
		// Never say whose: the tag names another tenant's gateway.
		r.condFalse(g, v1alpha1.ConditionFloatingIPReady, v1alpha1.ReasonFloatingIPReserved,
			fmt.Sprintf("pinned floating IP %s is held by another gateway (its tag says so); it becomes free when that gateway releases it", pin))
		return nil, true, nil
	}
	if fip.PortID != "" && fip.PortID != g.port.ID {
		// The port may be another tenant's: its ID goes to the operator's log only.
		logr.FromContextOrDiscard(ctx).Info("pinned floating IP is associated with another port", "floatingIP", pin, "port", fip.PortID)
		r.condFalse(g, v1alpha1.ConditionFloatingIPReady, v1alpha1.ReasonFloatingIPInUse,
			fmt.Sprintf("pinned floating IP %s is associated with another port, not the gateway's port %s; disassociate it first (openstack floating ip unset --port %s)", pin, g.port.ID, pin))
		return nil, true, nil
	}
	// The gateway switched from another address to this pinned one: an allocated one
	// is the gateway's own and goes, a formerly pinned one is handed back untouched
	// (unassociated, its tag removed), before the port can take the new one.
	if recorded != nil && recorded.ID != fip.ID {
		if err := r.releaseFloatingIP(ctx, g, recorded); err != nil {
			return nil, false, err
		}
	}
	// Tagged before it is associated, and read back: of two gateways adopting the
	// same free address at once, the one whose tag stayed goes on.
	if openstack.PinnedBy(fip.Tags) != owner.UID {
		if _, err := r.net().ReplaceFloatingIPTags(ctx, fip.ID, openstack.WithPin(fip.Tags, owner.UID)); err != nil {
			return nil, false, err
		}
		f, err := r.net().GetFloatingIP(ctx, fip.ID)
		if err != nil {
			return nil, false, err
		}
		if reserved(f, owner) {
			r.condFalse(g, v1alpha1.ConditionFloatingIPReady, v1alpha1.ReasonFloatingIPReserved,
				fmt.Sprintf("pinned floating IP %s was taken by another gateway at the same moment", pin))
			return nil, true, nil
		}
		fip = f
	}
	return fip, false, nil
}

// allocatedFloatingIP is the gateway's own address: the recorded one while it carries
// the gateway's tags, else one found by them (extras a lost create response left are
// deleted), else a new one. A formerly pinned address is handed back first.
func (r *Reconciler) allocatedFloatingIP(ctx context.Context, g *gateway, recorded *openstack.FloatingIP) (*openstack.FloatingIP, error) {
	owner := g.owner()
	if recorded != nil && owner.OwnedBy(recorded.Tags) {
		return recorded, nil
	}
	if recorded != nil {
		// A formerly pinned address: hand it back unassociated and untagged.
		if err := r.releaseFloatingIP(ctx, g, recorded); err != nil {
			return nil, err
		}
	}
	found, err := openstack.Owned[openstack.FloatingIP]{
		Owner: owner,
		List: func(ctx context.Context) ([]openstack.FloatingIP, error) {
			return r.net().ListFloatingIPs(ctx, openstack.ListFloatingIPsOpts{Tags: owner.Selector()})
		},
		ID:     func(f *openstack.FloatingIP) string { return f.ID },
		Delete: r.net().DeleteFloatingIP,
		Create: func(ctx context.Context) (*openstack.FloatingIP, error) {
			ext, err := r.externalNetworkID(ctx)
			if err != nil {
				return nil, err
			}
			return r.net().CreateFloatingIP(ctx, openstack.CreateFloatingIPOpts{
				FloatingNetworkID: ext,
				PortID:            g.port.ID,
				Description:       "bnerd-vpn-operator: endpoint of " + g.String(),
				Tags:              owner.Tags(),
			})
		},
	}.Ensure(ctx)
	return found.Object, err
}

// reserved: the floating IP carries another gateway's pinned-by tag, or is another
// gateway's own (allocated) address.
func reserved(f *openstack.FloatingIP, owner openstack.Owner) bool {
	if by := openstack.PinnedBy(f.Tags); by != "" && by != owner.UID {
		return true
	}
	if o, ok := openstack.OwnerFromTags(f.Tags); ok && o.UID != owner.UID {
		return true
	}
	return false
}

// releaseFloatingIP lets go of an address the gateway no longer uses: its own
// allocated one is deleted; a pinned one is disassociated from the gateway's port and
// loses this gateway's tag, and is otherwise left as it is (it is never released).
func (r *Reconciler) releaseFloatingIP(ctx context.Context, g *gateway, f *openstack.FloatingIP) error {
	owner := g.owner()
	if owner.OwnedBy(f.Tags) {
		if err := r.net().DeleteFloatingIP(ctx, f.ID); err != nil && !openstack.IsNotFound(err) {
			return err
		}
		return nil
	}
	if g.port != nil && f.PortID == g.port.ID {
		if _, err := r.net().DisassociateFloatingIP(ctx, f.ID); err != nil && !openstack.IsNotFound(err) {
			return err
		}
	}
	return r.unpin(ctx, f, owner.UID)
}

// unpin removes uid's pinned-by tag from a floating IP (another gateway's stays).
func (r *Reconciler) unpin(ctx context.Context, f *openstack.FloatingIP, uid string) error {
	if openstack.PinnedBy(f.Tags) != uid {
		return nil
	}
	if _, err := r.net().ReplaceFloatingIPTags(ctx, f.ID, openstack.WithPin(f.Tags, "")); err != nil && !openstack.IsNotFound(err) {
		return err
	}
	return nil
}
