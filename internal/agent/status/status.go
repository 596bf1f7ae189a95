// Package status turns charon's SAs into the gateway object's status.tunnels and
// status.tunnelsReady and writes them when they changed, with a heartbeat
// (status.tunnelsObservedTime) at least every Heartbeat, so the operator can tell a
// silent agent from a quiet one.
package status

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/downcause"
	"bnerd.net/vpn-operator/internal/agent/vici"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/statuswrite"
)

// Tunnel states reported in status.
const (
	StateUp         = "Up"
	StateConnecting = "Connecting"
	StateDown       = "Down"
)

// ReasonCharonUnreachable: the status agent cannot reach charon over VICI.
const ReasonCharonUnreachable = "CharonUnreachable"

// ReasonWaitingForKey: the loader does not start the tunnel because its pre-shared key
// is missing, unreadable or too short (the message names the Secret and key, never the
// value).
const ReasonWaitingForKey = "WaitingForPreSharedKey"

// Note is what the agent knows about a tunnel beyond charon's listing: the cause of its
// last failure (package cause) and what the loader plans (next attempt, a change being
// applied). Either part may be empty.
type Note struct {
	Reason, Message string
	// Retry is the loader's plan in words ("next attempt at ..."), appended to the
	// message of a tunnel that is not up.
	Retry string
	// Change, when set, is a configuration change in flight; it is reported even on an
	// Up tunnel (ChangeRefused: still on the previous settings) and wins over Reason.
	ChangeReason, ChangeMessage string
	// Warn: Reason applies to an Up tunnel too (trouble ahead, such as refused rekeys).
	Warn bool
}

// Compute derives each configured tunnel's state from the SAs charon reports and the
// notes. now is injected so EstablishedAt is reproducible; it is truncated to whole
// seconds, the precision the API server keeps. A tunnel is Up while an IKE SA that
// carries holds a child SA of its name that carries, so a rekey in flight (old SAs
// REKEYING/REKEYED beside their successors) never reads as an outage (vici.Summarize).
func Compute(tunnels []string, sas map[string][]vici.IKESA, notes func(string) Note, now time.Time) ([]v1alpha1.TunnelState, string) {
	out := make([]v1alpha1.TunnelState, 0, len(tunnels))
	up := 0
	for _, name := range tunnels {
		sum := vici.Summarize(sas[name], name)
		st := v1alpha1.TunnelState{Name: name, State: StateDown, Message: "no IKE SA", IKESAs: int32(sum.IKESAs), ChildSAs: int32(sum.ChildSAs)}
		switch {
		case sum.Up:
			st.State, st.Message = StateUp, ""
			t := metav1.NewTime(now.Add(-time.Duration(sum.Newest.EstablishedSeconds) * time.Second).Truncate(time.Second).UTC())
			st.EstablishedAt = &t
			up++
		case sum.Established:
			st.State, st.Message = StateConnecting, "IKE SA established, no child SA installed"
		case sum.IKESAs > 0:
			st.State, st.Message = StateConnecting, "IKE SA negotiating"
		}
		var n Note
		if notes != nil {
			n = notes(name)
		}
		switch {
		case n.ChangeReason != "":
			st.Reason, st.Message = n.ChangeReason, n.ChangeMessage
		case st.State == StateUp && n.Warn:
			st.Reason, st.Message = n.Reason, n.Message
		case st.State != StateUp:
			if n.Reason != "" {
				st.Reason, st.Message = n.Reason, n.Message
			}
			if n.Retry != "" {
				st.Message += "; " + n.Retry
			}
		}
		out = append(out, st)
	}
	return out, fmt.Sprintf("%d/%d", up, len(tunnels))
}

// Equal compares reported tunnel states. EstablishedAt may jitter by a second between
// polls (charon reports whole seconds of age), which is not a change.
func Equal(a, b []v1alpha1.TunnelState) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Name != y.Name || x.State != y.State || x.IKESAs != y.IKESAs || x.ChildSAs != y.ChildSAs || x.Reason != y.Reason || x.Message != y.Message {
			return false
		}
		if (x.LatestHandshake == nil) != (y.LatestHandshake == nil) || x.LatestHandshake != nil && !x.LatestHandshake.Equal(y.LatestHandshake) {
			return false
		}
		if (x.EstablishedAt == nil) != (y.EstablishedAt == nil) {
			return false
		}
		if x.EstablishedAt != nil {
			d := x.EstablishedAt.Sub(y.EstablishedAt.Time)
			if d > 2*time.Second || d < -2*time.Second {
				return false
			}
		}
	}
	return true
}

// Writer patches the status subresource of one gateway object. One Writer serves one
// agent process: the first Write always writes, so a new agent's report (and its
// heartbeat) is never mistaken for its predecessor's.
type Writer struct {
	Client    client.Client
	Kind      string
	Namespace string
	Name      string
	// InterfacePublicKey is a WireGuard gateway's interface key, written with the
	// tunnels (empty for IPsec).
	InterfacePublicKey string
	// Heartbeat is the longest time between two writes while nothing changes (default
	// gatewayconfig.DefaultStatusAgentHeartbeat).
	Heartbeat time.Duration
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time

	wrote bool
}

func (w *Writer) object() (client.Object, func() *v1alpha1.GatewayStatus, error) {
	if o := v1alpha1.NewGateway(w.Kind); o != nil {
		return o, o.GetGatewayStatus, nil
	}
	return nil, nil, fmt.Errorf("unknown gateway kind %q", w.Kind)
}

// Write stores tunnels, ready and the heartbeat when the state changed, when the last
// heartbeat is Heartbeat old, or on this Writer's first call. It applies only the
// agent's own fields (AgentFields) with server-side apply under the status agent's
// field manager (statuswrite.ManagerStatusAgent), without a resourceVersion
// precondition: the status agent owns them, the operator never sends them, so a
// concurrent operator write to the other status fields is neither clobbered nor a
// conflict, and neither is this write for the operator. Each tunnel keeps the
// lastTransitionTime of the previous report while its state stays the same.
func (w *Writer) Write(ctx context.Context, tunnels []v1alpha1.TunnelState, ready string) (bool, error) {
	obj, st, err := w.object()
	if err != nil {
		return false, err
	}
	// Read through the status subresource: the pod's Role grants get and patch on
	// <kind>/status of its own gateway and nothing on the object itself.
	obj.SetNamespace(w.Namespace)
	obj.SetName(w.Name)
	if err := w.Client.SubResource("status").Get(ctx, obj, obj); err != nil {
		return false, fmt.Errorf("reading %s %s/%s: %w", w.Kind, w.Namespace, w.Name, err)
	}
	clock := time.Now
	if w.Now != nil {
		clock = w.Now
	}
	now := clock().Truncate(time.Second).UTC()
	cur := st()
	tunnels = carryTransitions(cur.Tunnels, tunnels, now)
	if cur.TunnelsReady == ready && Equal(cur.Tunnels, tunnels) && cur.InterfacePublicKey == w.InterfacePublicKey {
		if w.wrote && !w.heartbeatDue(cur.TunnelsObservedTime, now) {
			return false, nil
		}
		// Only the heartbeat moves: the stored states stay as they are (an SA's
		// establishment time jitters by a second between polls), so a heartbeat
		// changes nothing but tunnelsObservedTime.
		tunnels = cur.Tunnels
	}
	observed := metav1.NewTime(now)
	cur.Tunnels, cur.TunnelsReady, cur.TunnelsObservedTime, cur.InterfacePublicKey = tunnels, ready, &observed, w.InterfacePublicKey
	sw := statuswrite.Writer{Client: w.Client, Manager: statuswrite.ManagerStatusAgent, Fields: AgentFields, Unguarded: true}
	if err := sw.Apply(ctx, obj, nil); err != nil {
		return false, fmt.Errorf("writing status of %s %s/%s: %w", w.Kind, w.Namespace, w.Name, err)
	}
	w.wrote = true
	return true, nil
}

// heartbeatDue: no heartbeat yet, the last one is Heartbeat old, or it lies in the
// future (the node's clock went back).
func (w *Writer) heartbeatDue(last *metav1.Time, now time.Time) bool {
	every := w.Heartbeat
	if every <= 0 {
		every = gatewayconfig.DefaultStatusAgentHeartbeat
	}
	return last == nil || now.Sub(last.Time) >= every || now.Before(last.Time)
}

// carryTransitions stamps each tunnel with when it entered its state: the previous
// report's time while the state is the same, now otherwise.
func carryTransitions(prev, next []v1alpha1.TunnelState, now time.Time) []v1alpha1.TunnelState {
	out := make([]v1alpha1.TunnelState, len(next))
	for i, t := range next {
		since := metav1.NewTime(now)
		t.LastTransitionTime = &since
		for _, p := range prev {
			if p.Name == t.Name && p.State == t.State && p.LastTransitionTime != nil {
				kept := *p.LastTransitionTime
				t.LastTransitionTime = &kept
			}
		}
		out[i] = t
	}
	return out
}

// AgentFields are the status fields the status agent owns.
var AgentFields = []string{"tunnels", "tunnelsReady", "tunnelsObservedTime", "interfacePublicKey"}

// Notes composes what the cause tracker and the loader know into Compute's notes. Either
// may be nil (the status agent without its loader has only the causes).
func Notes(causes interface {
	Cause(string) (downcause.Cause, bool)
}, plans func(string) vici.Plan, now func() time.Time) func(string) Note {
	if now == nil {
		now = time.Now
	}
	return func(name string) Note {
		var n Note
		if causes != nil {
			if c, ok := causes.Cause(name); ok {
				n.Reason, n.Message = c.Reason, c.Message
				// Refused rekeys leave the tunnel up until the child SA expires.
				n.Warn = c.Reason == downcause.PFSMismatchAtRekey
			}
		}
		if plans != nil {
			p := plans(name)
			if p.Attempts > 0 && p.Next.After(now()) {
				n.Retry = fmt.Sprintf("next attempt at %s (%d so far)", p.Next.UTC().Format(time.RFC3339), p.Attempts)
			}
			n.ChangeReason, n.ChangeMessage = p.ChangeReason, p.ChangeMessage
		}
		return n
	}
}
