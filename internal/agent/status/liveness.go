package status

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Renewer renews the gateway's liveness Lease (render.LivenessLease) every Interval with
// the pod's name as the holder. The operator created the Lease; the pod may only get and
// update it. When the node or its network goes, the renewals stop at once, and the
// operator moves the gateway after its liveness timeout instead of after the node's
// NotReady (40-50 s on a default cluster).
type Renewer struct {
	Client   client.Client
	Key      client.ObjectKey
	Holder   string
	Interval time.Duration
	Logf     func(string, ...any)
}

// Run renews until ctx ends. A failed renewal is logged when its error changes (not every
// second) and retried at the next tick.
func (r *Renewer) Run(ctx context.Context) {
	var lease *coordinationv1.Lease
	lastErr := ""
	t := time.NewTicker(r.Interval)
	defer t.Stop()
	for {
		var err error
		lease, err = r.renew(ctx, lease)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if msg != lastErr && r.Logf != nil {
			if err != nil {
				r.Logf("liveness lease %s: renewal failed: %v", r.Key.Name, err)
			} else {
				r.Logf("liveness lease %s: renewed", r.Key.Name)
			}
		}
		lastErr = msg
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// renew stamps the Lease once. It reads the Lease only when it holds no current copy
// (the first time, and after a failed write): a renewal is one update.
func (r *Renewer) renew(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	// A hung request must not hold back the next renewal.
	ctx, cancel := context.WithTimeout(ctx, r.Interval)
	defer cancel()
	if lease == nil {
		lease = &coordinationv1.Lease{}
		if err := r.Client.Get(ctx, r.Key, lease); err != nil {
			return nil, err
		}
	}
	stamp := metav1.NewMicroTime(time.Now())
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != r.Holder {
		holder := r.Holder
		lease.Spec.HolderIdentity = &holder
		lease.Spec.AcquireTime = &stamp
		transitions := int32(1)
		if lease.Spec.LeaseTransitions != nil {
			transitions = *lease.Spec.LeaseTransitions + 1
		}
		lease.Spec.LeaseTransitions = &transitions
	}
	lease.Spec.RenewTime = &stamp
	if err := r.Client.Update(ctx, lease); err != nil {
		return nil, err
	}
	return lease, nil
}
