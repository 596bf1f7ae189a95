package diagnose

import (
	"fmt"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// checkWireGuardKey reports the gateway's WireGuard identity: the public key the clients
// need, whether the pod's interface uses it, and a rotation in progress.
func (r *run) checkWireGuardKey() {
	const id, title = "gateway.wireguardkey", "WireGuard gateway key published and in use"
	st := r.g.status
	switch {
	case st.WireGuard == nil || st.WireGuard.PublicKey == "":
		r.add(Check{ID: id, Title: title, Status: Fail, Detail: "status.wireguard.publicKey is not set: the operator has not generated the gateway's key yet",
			Fix: "Look at the WireGuardKeyReady condition; the operator must be running.", Runbook: anchor(FindingWireGuardKey)})
	case st.InterfacePublicKey != "" && st.InterfacePublicKey != st.WireGuard.PublicKey:
		r.add(Check{ID: id, Title: title, Status: Warn,
			Detail: fmt.Sprintf("the gateway's interface still uses %s, not the published %s: the pod has not picked up the rotated key yet (a mounted Secret refreshes within about a minute)", st.InterfacePublicKey, st.WireGuard.PublicKey),
			Fix:    "Wait a minute; if it persists, read the wireguard container's log.", Runbook: anchor(FindingWireGuardKey)})
	case st.WireGuard.PreviousPublicKey != "":
		r.add(Check{ID: id, Title: title, Status: Warn,
			Detail: fmt.Sprintf("key rotation pending: the clients must use %s; the previous key %s is kept until every peer has completed a handshake with the new one", st.WireGuard.PublicKey, st.WireGuard.PreviousPublicKey),
			Fix:    fixText(v1alpha1.ReasonKeyRotationPending), Runbook: anchor(v1alpha1.ReasonKeyRotationPending)})
	default:
		r.add(Check{ID: id, Title: title, Status: Pass, Detail: "public key " + st.WireGuard.PublicKey})
	}
}

func fixText(reason string) string {
	f, _ := fixFor(reason)
	return f
}
