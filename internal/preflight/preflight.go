// Package preflight checks cluster prerequisites the operator depends on but cannot
// fix itself. Findings are logged loudly; none stops the operator.
package preflight

import (
	"context"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Where Cilium keeps its agent configuration and the key that decides whether it
// removes other CNI configurations (Multus') from the node.
const (
	CiliumConfigNamespace = "kube-system"
	CiliumConfigName      = "cilium-config"
	CiliumCNIExclusiveKey = "cni-exclusive"
)

// CheckCiliumExclusive reports whether kube-system/cilium-config confirms
// cni-exclusive "false". Anything else (the key set otherwise, missing, the ConfigMap
// missing or unreadable) logs a WARNING: with Cilium's default, Multus is silently kept
// out of the CNI chain and gateway pods never get their second NIC, with no error
// anywhere. The operator cannot change the setting; whoever provisions the cluster owns
// it.
func CheckCiliumExclusive(ctx context.Context, c client.Reader, log logr.Logger) bool {
	var cm corev1.ConfigMap
	err := c.Get(ctx, client.ObjectKey{Namespace: CiliumConfigNamespace, Name: CiliumConfigName}, &cm)
	const consequence = "if Cilium runs with cni-exclusive true (its default) it renames Multus' CNI config on every node, and gateway pods never get their second NIC (no error is reported anywhere); set cni-exclusive to \"false\" (on Gardener: spec.networking.providerConfig.cni.exclusive: false)"
	if err != nil {
		log.Info("WARNING: cannot confirm that Cilium's cni-exclusive is \"false\": "+consequence,
			"configMap", CiliumConfigNamespace+"/"+CiliumConfigName, "error", err.Error())
		return false
	}
	v, ok := cm.Data[CiliumCNIExclusiveKey]
	if !ok {
		log.Info("WARNING: cannot confirm that Cilium's cni-exclusive is \"false\": the key is not set, so Cilium's default (true) applies; "+consequence,
			"configMap", CiliumConfigNamespace+"/"+CiliumConfigName)
		return false
	}
	if strings.TrimSpace(strings.ToLower(v)) != "false" {
		log.Info("WARNING: Cilium's cni-exclusive is not \"false\": "+consequence,
			"configMap", CiliumConfigNamespace+"/"+CiliumConfigName, "value", v)
		return false
	}
	log.V(1).Info("Cilium's cni-exclusive is \"false\"; Multus can chain")
	return true
}
