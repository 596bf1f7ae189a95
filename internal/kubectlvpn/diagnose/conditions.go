package diagnose

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// PhaseConditions are the gateway's phase conditions in reconcile order.
var PhaseConditions = []string{
	v1alpha1.ConditionValidated, v1alpha1.ConditionAllocated, v1alpha1.ConditionPortReady,
	v1alpha1.ConditionSecurityGroupReady, v1alpha1.ConditionFloatingIPReady, v1alpha1.ConditionRoutingReady,
	v1alpha1.ConditionNodeSelected, v1alpha1.ConditionPortAttached, v1alpha1.ConditionWorkloadReady,
}

func (r *run) kubectlRef() string {
	return strings.ToLower(r.g.kind) + "/" + r.g.obj.GetName()
}

func (r *run) checkObject() {
	g := r.g
	if ts := g.obj.GetDeletionTimestamp(); ts != nil {
		msg := ""
		if c := meta.FindStatusCondition(g.status.Conditions, v1alpha1.ConditionReady); c != nil {
			msg = ": " + c.Message
		}
		r.add(Check{ID: "gateway.deleting", Title: "Gateway not being deleted", Status: Warn,
			Detail:  fmt.Sprintf("deletion requested %s ago; the finalizer %s is held until OpenStack is clean%s", r.now.Sub(ts.Time).Round(1e9), v1alpha1.FinalizerGateway, msg),
			Fix:     "Wait for the cleanup; if it is stuck, the Ready message names the failing step (the operator must be running).",
			Runbook: anchor(FindingGatewayDeleting)})
	}
	if g.isWireGuard() {
		r.checkWireGuardKey()
	}
}

// checkConditions reports each phase condition in reconcile order; it returns whether
// all are True for the current generation.
func (r *run) checkConditions() bool {
	g := r.g
	ok := true
	blocked := ""
	types := PhaseConditions
	if g.isWireGuard() {
		types = append([]string{PhaseConditions[0], v1alpha1.ConditionWireGuardKeyReady}, PhaseConditions[1:]...)
	}
	for _, typ := range types {
		id := "condition." + typ
		title := "Condition " + typ
		if blocked != "" {
			r.add(Check{ID: id, Title: title, Status: Skipped, Detail: "after " + blocked})
			continue
		}
		c := meta.FindStatusCondition(g.status.Conditions, typ)
		switch {
		case c == nil:
			ok = false
			blocked = typ
			r.add(Check{ID: id, Title: title, Status: Fail, Detail: "not reported: the operator has not reconciled this gateway yet",
				Fix:     "Check the operator runs and reconciles: kubectl -n <operator namespace> logs deployment/<operator> | grep " + g.obj.GetName(),
				Runbook: anchor(FindingStaleGeneration)})
		case c.Status != metav1.ConditionTrue:
			ok = false
			blocked = typ
			fix, rb := fixFor(c.Reason)
			r.add(Check{ID: id, Title: title, Status: Fail, Detail: fmt.Sprintf("%s/%s: %s", c.Status, c.Reason, c.Message), Fix: fix, Runbook: rb})
		case c.ObservedGeneration != g.generation:
			ok = false
			r.add(Check{ID: id, Title: title, Status: Warn,
				Detail:  fmt.Sprintf("True for generation %d, the spec is at generation %d", c.ObservedGeneration, g.generation),
				Fix:     "The operator has not reconciled the latest spec: check it runs, then " + fmt.Sprintf(reconcileNudge, strings.ToLower(g.kind), g.obj.GetName(), g.obj.GetNamespace()),
				Runbook: anchor(FindingStaleGeneration)})
		case c.Reason == v1alpha1.ReasonInternalSourcesMissing || c.Reason == v1alpha1.ReasonListenPortOpen || c.Reason == v1alpha1.ReasonKeyRotationPending ||
			c.Reason == v1alpha1.ReasonPreviousKeyRetired:
			fix, rb := fixFor(c.Reason)
			r.add(Check{ID: id, Title: title, Status: Warn, Detail: fmt.Sprintf("True/%s: %s", c.Reason, c.Message), Fix: fix, Runbook: rb})
		default:
			r.add(Check{ID: id, Title: title, Status: Pass, Detail: c.Reason})
		}
	}
	return ok
}
