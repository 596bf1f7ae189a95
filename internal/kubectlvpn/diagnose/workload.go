package diagnose

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/render"
)

func selectorLabels(g *gw) map[string]string {
	return render.SelectorLabels(render.Gateway{Kind: g.kind, Namespace: g.obj.GetNamespace(), Name: g.obj.GetName()})
}

func selectorString(g *gw) string {
	return labels.SelectorFromSet(selectorLabels(g)).String()
}

func (r *run) checkNode() {
	st := r.g.status
	const id, title = "kubernetes.node", "Pinned node Ready with the port's server"
	if st.NodeName == "" {
		r.add(Check{ID: id, Title: title, Status: Skipped, Detail: "status.nodeName is not set yet (see NodeSelected)"})
		return
	}
	var n corev1.Node
	if err := r.src.Kube.Get(r.ctx, types.NamespacedName{Name: st.NodeName}, &n); err != nil {
		if apierrors.IsNotFound(err) {
			r.add(Check{ID: id, Title: title, Status: Fail, Detail: "node " + st.NodeName + " no longer exists",
				Fix: "The operator moves the gateway to the next eligible node at its next reconcile: " + r.nudge(), Runbook: anchor(FindingNodeGone)})
			return
		}
		r.add(Check{ID: id, Title: title, Status: Skipped, Detail: "could not read node " + st.NodeName + ": " + err.Error()})
		return
	}
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		r.add(Check{ID: id, Title: title, Status: Fail, Detail: "node " + st.NodeName + " is not Ready: the gateway has no standby and its tunnels are down until it moves",
			Fix: "The operator moves the port and the pod to the next Ready node (detach, attach, pod follows); watch PortAttached. If no node is eligible, see NoEligibleNode.", Runbook: anchor(FindingNodeGone)})
		return
	}
	if server, err := openstack.ParseProviderID(n.Spec.ProviderID); err != nil || (st.ServerID != "" && server != st.ServerID) {
		r.add(Check{ID: id, Title: title, Status: Fail,
			Detail:  fmt.Sprintf("node %s has providerID %q, but the port is attached for server %s", st.NodeName, n.Spec.ProviderID, st.ServerID),
			Fix:     "The node was re-created on another server; " + r.nudge(),
			Runbook: anchor(FindingNodeServer)})
		return
	}
	r.add(Check{ID: id, Title: title, Status: Pass, Detail: fmt.Sprintf("%s, Ready, server %s", st.NodeName, st.ServerID)})
}

// podEvents lists the warning events of a pod, newest last.
func (r *run) podEvents(pod *corev1.Pod) []corev1.Event {
	var el corev1.EventList
	if err := r.src.Kube.List(r.ctx, &el, client.InNamespace(pod.Namespace)); err != nil {
		return nil
	}
	var out []corev1.Event
	for _, e := range el.Items {
		if e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Name == pod.Name && e.Type == corev1.EventTypeWarning {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LastTimestamp.Before(&out[j].LastTimestamp) })
	return out
}

// checkPod checks the gateway pod and returns whether one runs ready on the right node.
func (r *run) checkPod() bool {
	g := r.g
	st := g.status
	const id, title = "kubernetes.pod", "Gateway pod running and ready on the pinned node"
	var pods corev1.PodList
	if err := r.src.Kube.List(r.ctx, &pods, client.InNamespace(g.obj.GetNamespace()), client.MatchingLabels(selectorLabels(g))); err != nil {
		r.add(Check{ID: id, Title: title, Status: Skipped, Detail: "could not list pods: " + err.Error()})
		return false
	}
	var live []*corev1.Pod
	for i := range pods.Items {
		if pods.Items[i].DeletionTimestamp == nil {
			live = append(live, &pods.Items[i])
		}
	}
	if len(live) == 0 {
		r.add(Check{ID: id, Title: title, Status: Fail,
			Detail:  fmt.Sprintf("no pod with labels %s in namespace %s", selectorString(g), g.obj.GetNamespace()),
			Fix:     fmt.Sprintf("Look at the Deployment's events: kubectl -n %s describe deployment %s", g.obj.GetNamespace(), render.DeploymentName(g.obj.GetName())),
			Runbook: anchor(FindingNoPod)})
		return false
	}
	pod := live[0]
	if st.NodeName != "" && pod.Spec.NodeName != "" && pod.Spec.NodeName != st.NodeName {
		r.add(Check{ID: id, Title: title, Status: Fail,
			Detail:  fmt.Sprintf("pod %s runs on node %s, but the gateway's port is attached to node %s's server: the host-device plugin cannot find the port's interface there", pod.Name, pod.Spec.NodeName, st.NodeName),
			Fix:     fmt.Sprintf("Delete the pod; its Deployment pins the replacement to %s: kubectl -n %s delete pod %s. If the Deployment itself names another node, the operator puts it back: %s", st.NodeName, pod.Namespace, pod.Name, r.nudge()),
			Runbook: anchor(FindingPodWrongNode)})
		return false
	}
	if pod.Spec.NodeName == "" && pod.Spec.SchedulerName == render.SchedulerName {
		// The operator binds a gateway pod only once no earlier pod of the gateway is left
		// on the node (the port's interface is free again).
		detail := fmt.Sprintf("pod %s is not bound to a node yet: the operator binds it to %s once no earlier pod of the gateway is left there", pod.Name, st.NodeName)
		fix := "Check that the operator runs and read its log: " + r.nudge()
		for i := range pods.Items {
			if p := &pods.Items[i]; p.UID != pod.UID && p.Spec.NodeName == st.NodeName && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				detail += fmt.Sprintf("; pod %s is still there (%s)", p.Name, orPhase(p))
				fix = fmt.Sprintf("Pod %s has not left node %s: its kubelet has not finished stopping it (kubectl -n %s describe pod %s); if the node is gone, the operator moves the gateway", p.Name, st.NodeName, p.Namespace, p.Name)
			}
		}
		r.add(Check{ID: id, Title: title, Status: Fail, Detail: detail, Fix: fix, Runbook: anchor(FindingPodNotReady)})
		return false
	}
	for _, e := range r.podEvents(pod) {
		if strings.Contains(e.Message, "failed to find host device") || strings.Contains(e.Message, "failed to find physical interface") {
			if pod.Status.Phase != corev1.PodRunning {
				r.add(Check{ID: id, Title: title, Status: Fail,
					Detail:  fmt.Sprintf("pod %s cannot start: %s: %s", pod.Name, e.Reason, e.Message),
					Fix:     "The port is not attached to this node's server: check openstack.attachment above, then delete the pod: kubectl -n " + pod.Namespace + " delete pod " + pod.Name,
					Runbook: anchor(FindingPodNoSecondNIC)})
				return false
			}
		}
	}
	for _, cs := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" && w.Reason != "ContainerCreating" {
			r.add(Check{ID: id, Title: title, Status: Fail,
				Detail:  fmt.Sprintf("pod %s: container %s is %s (%d restarts): %s", pod.Name, cs.Name, w.Reason, cs.RestartCount, w.Message),
				Fix:     fmt.Sprintf("Read its log: kubectl -n %s logs %s -c %s --previous", pod.Namespace, pod.Name, cs.Name),
				Runbook: anchor(FindingPodNotReady)})
			return false
		}
	}
	if pod.Status.Phase != corev1.PodRunning {
		r.add(Check{ID: id, Title: title, Status: Fail,
			Detail:  fmt.Sprintf("pod %s is %s: %s", pod.Name, pod.Status.Phase, podConditionText(pod)),
			Fix:     fmt.Sprintf("kubectl -n %s describe pod %s", pod.Namespace, pod.Name),
			Runbook: anchor(FindingPodNotReady)})
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue {
			r.add(Check{ID: id, Title: title, Status: Fail,
				Detail:  fmt.Sprintf("pod %s runs but is not ready: %s", pod.Name, c.Message),
				Fix:     fmt.Sprintf("kubectl -n %s describe pod %s", pod.Namespace, pod.Name),
				Runbook: anchor(FindingPodNotReady)})
			return false
		}
	}
	r.add(Check{ID: id, Title: title, Status: Pass, Detail: fmt.Sprintf("%s on %s", pod.Name, pod.Spec.NodeName)})
	r.pod = pod
	return true
}

func podConditionText(p *corev1.Pod) string {
	var s []string
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			s = append(s, string(c.Type)+": "+c.Message)
		}
	}
	if len(s) == 0 {
		return "no further detail"
	}
	return strings.Join(s, "; ")
}

// orPhase is how a pod that holds a node reads: terminating, or its phase.
func orPhase(p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return "terminating"
	}
	return strings.ToLower(string(p.Status.Phase))
}
