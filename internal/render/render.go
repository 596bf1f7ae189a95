// Package render builds the Kubernetes objects of a gateway: its ConfigMap and Secret,
// the Multus NetworkAttachmentDefinition, the RBAC of its pod, the Deployment and the
// NIC1 NetworkPolicy. Builders are pure: same input, same object. The reconciler owns
// creating, comparing and updating them.
//
// Two packages render, at two levels: this one the Kubernetes objects (it puts the
// gateway's configuration into the ConfigMap and Secret as opaque text), package
// gatewayconfig what is inside them (the pod's config format, swanctl.conf, the
// secrets, strongswan.conf, the NAT model), which the gateway pod's programs read too.
package render

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Label keys and values on every object of a gateway.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelComponent = "app.kubernetes.io/component"
	LabelGateway   = "ipsec.bnerd.net/gateway"
	LabelKind      = "ipsec.bnerd.net/gateway-kind"

	AppName   = "bnerd-vpn-gateway"
	ManagedBy = "bnerd-vpn-operator"
)

// Annotations on the gateway pod.
const (
	// AnnotationNetworks is Multus' request for secondary interfaces.
	AnnotationNetworks = "k8s.v1.cni.cncf.io/networks"
	// AnnotationPortMAC records the dedicated port's MAC: a replaced port (new MAC) must
	// roll the pod, because the host device it selects changed.
	AnnotationPortMAC = "ipsec.bnerd.net/port-mac"
)

// Fixed facts of the gateway pod.
const (
	MetricsPort     = 9903
	MetricsPortName = "metrics"
	// NIC2Interface is the name of the dedicated port inside the pod.
	NIC2Interface = "net1"

	// RunMountPath is charon's directory (strongswan.conf, the VICI socket), mounted
	// into charon and the status agent only and closed by charon to all but root's
	// group (mode 0750).
	RunMountPath = "/var/run/charon"
	// StateMountPath is the pod's exchange of files between containers: the status
	// agent's copy of the configuration and its IPsec listing, init-nat's statistics
	// (and the WireGuard pod's interface state). The exporter mounts it read-only.
	StateMountPath = "/var/run/bnerd"
	// ServiceAccountMountPath is where client-go looks for the in-cluster token; only
	// the status agent mounts it.
	ServiceAccountMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"
	// AgentUID runs the containers that need no privilege (status agent, exporter).
	AgentUID = 65532
	// AgentGID is the status agent's primary group: root's group, the one that may
	// enter charon's directory and open its VICI socket (charon creates it root:root,
	// mode 0770). Nothing else on the read-only root file system is writable by it.
	AgentGID = 0
	// ExporterGID is the exporter's group: not root's, so that even a mount of
	// charon's directory added to it would not open the socket.
	ExporterGID = 65532
)

// Files on StateMountPath.
const (
	// ConfigFile is the status agent's copy of the ConfigMap's gateway.json, read by
	// the containers that have no token.
	ConfigFile = StateMountPath + "/gateway.json"
	// NATStateFile is init-nat's apply statistics for the exporter.
	NATStateFile = StateMountPath + "/nat-state.json"
	// IPsecStateFile is the status agent's listing of the tunnels for the exporter.
	IPsecStateFile = StateMountPath + "/ipsec-state.json"
)

// Container names of the gateway pod.
const (
	ContainerInitNAT    = "init-nat"
	ContainerStrongswan = "strongswan"
	ContainerStatus     = "status-agent"
	ContainerExporter   = "ipsec-exporter"
)

// Gateway identifies the custom resource that owns the rendered objects.
type Gateway struct {
	// APIVersion and Kind of the owner (IPsecGateway or VPNGateway).
	APIVersion string
	Kind       string
	// Resource is the owner's plural resource name, for the pod's RBAC.
	Resource  string
	Namespace string
	Name      string
	UID       types.UID
}

// Object names, all derived from the gateway's name. LegacySecretName is the Secret of
// rendered keys earlier releases wrote; the operator deletes it (the pod reads the
// tenant's Secrets itself now).
func ConfigMapName(gw string) string      { return gw + "-gateway" }
func LegacySecretName(gw string) string   { return gw + "-gateway-psk" }
func ServiceAccountName(gw string) string { return gw + "-gateway" }
func RoleName(gw string) string           { return gw + "-gateway" }
func DeploymentName(gw string) string     { return gw + "-gateway" }
func NADName(gw string) string            { return gw + "-nic2" }
func NetworkPolicyName(gw string) string  { return gw + "-nic1" }
func LivenessLeaseName(gw string) string  { return gw + "-gateway-liveness" }

// SelectorLabels select the gateway's pod; they never change for a gateway, so the
// Deployment's immutable selector stays valid.
func SelectorLabels(g Gateway) map[string]string {
	return map[string]string{
		LabelName:     AppName,
		LabelInstance: g.Name,
		LabelKind:     KindLabel(g.Kind),
	}
}

// KindLabel is the value of LabelKind for a gateway kind.
func KindLabel(kind string) string { return strings.ToLower(kind) }

// PodSelector selects the pods of every gateway (the operator's cache of pods is
// limited to them).
func PodSelector() map[string]string {
	return map[string]string{LabelName: AppName, LabelManagedBy: ManagedBy}
}

// Labels are put on every object of the gateway.
func Labels(g Gateway) map[string]string {
	l := SelectorLabels(g)
	l[LabelManagedBy] = ManagedBy
	l[LabelGateway] = g.Name
	return l
}

// OwnerReference makes the gateway the controller of an object, so the garbage
// collector removes the object with the gateway and the operator's watch sees its drift.
func OwnerReference(g Gateway) metav1.OwnerReference {
	t := true
	return metav1.OwnerReference{
		APIVersion:         g.APIVersion,
		Kind:               g.Kind,
		Name:               g.Name,
		UID:                g.UID,
		Controller:         &t,
		BlockOwnerDeletion: &t,
	}
}

func objectMeta(g Gateway, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            name,
		Namespace:       g.Namespace,
		Labels:          Labels(g),
		OwnerReferences: []metav1.OwnerReference{OwnerReference(g)},
	}
}
