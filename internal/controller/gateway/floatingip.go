package gateway

import (
	"context"
	"fmt"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
)

// ensureFloatingIP gives the port its public address: the pinned spec.endpoint.floatingIP
// adopted as it is (never tagged, never released), or one allocated with the gateway's
// tags.
func (r *Reconciler) ensureFloatingIP(ctx context.Context, g *gateway) (bool, error) {
	fail := func(err error) (bool, error) {
		r.condFailed(g, v1alpha1.ConditionFloatingIPReady, v1alpha1.ReasonFloatingIPFailed, err)
		return false, err
	}
	owner := g.owner()
	var pin string
	if g.spec.Endpoint != nil {
		pin = g.spec.Endpoint.FloatingIP
	}

	// What status names, if it still exists.
	var recorded *openstack.FloatingIP
	if id := g.status.FloatingIPID; id != "" {
		f, err := r.net().GetFloatingIP(ctx, id)
		switch {
		case err == nil:
			recorded = f
		case !openstack.IsNotFound(err):
			return fail(err)
		}
	}

	var fip *openstack.FloatingIP
	if pin != "" {
		if recorded != nil && recorded.FloatingIPAddress == pin {
			fip = recorded
		} else {
			f, err := r.net().FindFloatingIPByAddress(ctx, pin)
			if openstack.IsNotFound(err) {
				r.condFalse(g, v1alpha1.ConditionFloatingIPReady, v1alpha1.ReasonFloatingIPMissing,
					fmt.Sprintf("pinned floating IP %s does not exist in the operator's project", pin))
				return false, nil
			}
			if err != nil {
				return fail(err)
			}
			fip = f
		}
		if fip.PortID != "" && fip.PortID != g.port.ID {
			r.condFalse(g, v1alpha1.ConditionFloatingIPReady, v1alpha1.ReasonFloatingIPInUse,
				fmt.Sprintf("pinned floating IP %s is associated with port %s, not the gateway's port %s; disassociate it first", pin, fip.PortID, g.port.ID))
			return false, nil
		}
		// The gateway switched from an allocated address to a pinned one: the old one
		// is the gateway's own and goes, before the port can take the pinned one.
		if recorded != nil && recorded.ID != fip.ID && owner.OwnedBy(recorded.Tags) {
			if err := r.net().DeleteFloatingIP(ctx, recorded.ID); err != nil && !openstack.IsNotFound(err) {
				return fail(err)
			}
		}
	} else {
		if recorded != nil && owner.OwnedBy(recorded.Tags) {
			fip = recorded
		} else {
			if recorded != nil && recorded.PortID == g.port.ID {
				// A formerly pinned address: hand it back untouched but unassociated.
				if _, err := r.net().DisassociateFloatingIP(ctx, recorded.ID); err != nil && !openstack.IsNotFound(err) {
					return fail(err)
				}
			}
			fips, err := r.net().ListFloatingIPs(ctx, openstack.ListFloatingIPsOpts{Tags: owner.Selector()})
			if err != nil {
				return fail(err)
			}
			if len(fips) > 0 {
				fip = &fips[0]
				for _, extra := range fips[1:] {
					if err := r.net().DeleteFloatingIP(ctx, extra.ID); err != nil && !openstack.IsNotFound(err) {
						return fail(err)
					}
				}
			}
		}
		if fip == nil {
			ext, err := r.externalNetworkID(ctx)
			if err != nil {
				return fail(err)
			}
			fip, err = r.net().CreateFloatingIP(ctx, openstack.CreateFloatingIPOpts{
				FloatingNetworkID: ext,
				PortID:            g.port.ID,
				Description:       "bnerd-vpn-operator: endpoint of " + g.String(),
				Tags:              owner.Tags(),
			})
			if err != nil {
				return fail(err)
			}
		}
	}
	// Recorded before associating, so a crash in between adopts rather than allocates.
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
