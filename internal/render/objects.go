package render

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"text/template"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/gatewaypod"
)

// ConfigMap carries the gateway's rendered configuration, gateway.json, and nothing
// else: the agent renders swanctl.conf from it, and reads each tunnel's pre-shared key
// from the tenant's Secret itself. An exposure change only changes this object: the
// agent reloads it without a pod restart.
func ConfigMap(g Gateway, cfg *gatewayconfig.Config) (*corev1.ConfigMap, error) {
	js, err := gatewayconfig.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	// Rendering here too refuses a config the agent would refuse (a WireGuard gateway
	// runs no charon).
	if cfg.Protocol != gatewayconfig.ProtocolWireGuard {
		if _, err := gatewayconfig.RenderSwanctl(cfg); err != nil {
			return nil, err
		}
	}
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: objectMeta(g, ConfigMapName(g.Name)),
		Data:       map[string]string{gatewayconfig.ConfigMapKeyConfig: string(js)},
	}, nil
}

// NADGVK is the Multus NetworkAttachmentDefinition's kind. It is written as unstructured
// so the operator needs no Multus Go module.
var NADGVK = schema.GroupVersionKind{Group: "k8s.cni.cncf.io", Version: "v1", Kind: "NetworkAttachmentDefinition"}

// DefaultNADTemplate moves the dedicated port's device, found by its MAC (interface
// names are not stable across nodes), into the pod with the port's fixed IP as a /32.
const DefaultNADTemplate = `{
  "cniVersion": "0.3.1",
  "name": "{{ .Name }}",
  "type": "host-device",
  "hwaddr": "{{ .MACAddress }}",
  "ipam": {
    "type": "static",
    "addresses": [{ "address": "{{ .FixedIP }}/32" }]
  }
}`

// NADInput are the values a NAD template may use.
type NADInput struct {
	Name            string
	Namespace       string
	MACAddress      string
	FixedIP         string
	SubnetCIDR      string
	SubnetGatewayIP string
}

// NAD renders the NetworkAttachmentDefinition from tmpl (DefaultNADTemplate when
// empty). The result must be JSON; it is stored compacted so that whitespace in the
// template never looks like drift.
func NAD(g Gateway, tmpl string, in NADInput) (*unstructured.Unstructured, error) {
	if _, err := net.ParseMAC(in.MACAddress); err != nil {
		return nil, fmt.Errorf("NAD: port MAC %q: %w", in.MACAddress, err)
	}
	if a, err := netip.ParseAddr(in.FixedIP); err != nil || !a.Is4() {
		return nil, fmt.Errorf("NAD: port fixed IP %q is not an IPv4 address", in.FixedIP)
	}
	if tmpl == "" {
		tmpl = DefaultNADTemplate
	}
	t, err := template.New("nad").Option("missingkey=error").Parse(tmpl)
	if err != nil {
		return nil, fmt.Errorf("NAD template: %w", err)
	}
	in.Name = NADName(g.Name)
	in.Namespace = g.Namespace
	var buf bytes.Buffer
	if err := t.Execute(&buf, in); err != nil {
		return nil, fmt.Errorf("NAD template: %w", err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, buf.Bytes()); err != nil {
		return nil, fmt.Errorf("NAD template does not render JSON: %w", err)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(NADGVK)
	m := objectMeta(g, NADName(g.Name))
	u.SetName(m.Name)
	u.SetNamespace(m.Namespace)
	u.SetLabels(m.Labels)
	u.SetOwnerReferences(m.OwnerReferences)
	if err := unstructured.SetNestedField(u.Object, compact.String(), "spec", "config"); err != nil {
		return nil, err
	}
	return u, nil
}

// ServiceAccount is the gateway pod's identity.
func ServiceAccount(g Gateway) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: objectMeta(g, ServiceAccountName(g.Name)),
	}
}

// Role lets the pod read its own ConfigMap, read the Secrets its tunnels name (get,
// list and watch by name: the agent follows each one), and write its own gateway's
// status; nothing else: resourceNames pin every rule to this gateway's objects. The
// operator may create it only because it holds every permission it grants.
func Role(g Gateway, group string, pskSecrets ...string) *rbacv1.Role {
	rules := []rbacv1.PolicyRule{
		{
			APIGroups:     []string{""},
			Resources:     []string{"configmaps"},
			ResourceNames: []string{ConfigMapName(g.Name)},
			Verbs:         []string{"get", "list", "watch"},
		},
	}
	if len(pskSecrets) > 0 {
		names := append([]string(nil), pskSecrets...)
		sort.Strings(names)
		rules = append(rules, rbacv1.PolicyRule{
			APIGroups:     []string{""},
			Resources:     []string{"secrets"},
			ResourceNames: names,
			Verbs:         []string{"get", "list", "watch"},
		})
	}
	// The status agent renews the gateway's liveness Lease, which the operator created:
	// get and update that one Lease, never create (create cannot be pinned to a name).
	rules = append(rules, rbacv1.PolicyRule{
		APIGroups:     []string{coordinationv1.GroupName},
		Resources:     []string{"leases"},
		ResourceNames: []string{LivenessLeaseName(g.Name)},
		Verbs:         []string{"get", "update"},
	})
	rules = append(rules, rbacv1.PolicyRule{
		APIGroups:     []string{group},
		Resources:     []string{g.Resource + "/status"},
		ResourceNames: []string{g.Name},
		// The status agent reads the status subresource and writes it by server-side
		// apply (a patch); it never updates it.
		Verbs: []string{"get", "patch"},
	})
	return &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
		ObjectMeta: objectMeta(g, RoleName(g.Name)),
		Rules:      rules,
	}
}

// RoleBinding binds Role to ServiceAccount.
func RoleBinding(g Gateway) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: objectMeta(g, RoleName(g.Name)),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: RoleName(g.Name)},
		Subjects: []rbacv1.Subject{{
			Kind: rbacv1.ServiceAccountKind, Name: ServiceAccountName(g.Name), Namespace: g.Namespace,
		}},
	}
}

// Workload is what the Deployment depends on. Nothing here changes with exposures, so an
// exposure change never rolls the pod; a node change (NodeName) or a replaced port
// (PortMAC) does.
type Workload struct {
	Gateway      Gateway
	NodeName     string
	PortMAC      string
	GatewayImage string
	AgentImage   string
	// WireGuardImage runs the wireguard container of a WireGuard gateway.
	WireGuardImage string
	// Dataplane is charon's kernel backend: kernel XFRM (the default) or libipsec
	// (userspace ESP over a TUN device, for kernels without ESP).
	Dataplane gatewayconfig.DataplaneMode
	// Pod is the platform's shape of every gateway pod (resources, priority class,
	// tolerations, pull secrets, extra labels and annotations); the zero Shape gives the
	// default resources.
	Pod gatewaypod.Shape
	// LivenessInterval is how often the status agent renews the gateway's liveness
	// Lease (LivenessLease); zero renders no renewal.
	LivenessInterval time.Duration
}

// LivenessLease is the gateway's liveness Lease: the operator creates it, the status
// agent renews it every LivenessInterval with the pod's name as the holder, and the
// operator moves the gateway off a node whose gateway pods all stopped renewing while the
// API server still calls them ready (the node or its network is gone), without waiting for
// the node's NotReady. spec.leaseDurationSeconds says how long the operator waits.
func LivenessLease(g Gateway, timeout time.Duration) *coordinationv1.Lease {
	seconds := int32((timeout + time.Second - 1) / time.Second)
	return &coordinationv1.Lease{
		TypeMeta:   metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
		ObjectMeta: objectMeta(g, LivenessLeaseName(g.Name)),
		Spec:       coordinationv1.LeaseSpec{LeaseDurationSeconds: &seconds},
	}
}

// withLiveness adds the liveness renewal to a status agent container: the Lease to renew,
// how often, and the pod's name (the Lease's holder) from the downward API.
func withLiveness(c corev1.Container, w Workload) corev1.Container {
	if w.LivenessInterval <= 0 {
		return c
	}
	c.Args = append(c.Args, "--liveness-lease="+LivenessLeaseName(w.Gateway.Name), "--liveness-interval="+w.LivenessInterval.String())
	c.Env = append(c.Env, corev1.EnvVar{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}})
	return c
}

// TunnelInterface is the TUN device charon's libipsec backend creates.
const TunnelInterface = "ipsec0"

// Deployment runs the gateway pod: one replica, hard-pinned to the node whose server
// holds the dedicated port, replaced (never surged) because two pods cannot share it.
func Deployment(w Workload) (*appsv1.Deployment, error) {
	g := w.Gateway
	if w.NodeName == "" {
		return nil, fmt.Errorf("deployment: no node selected")
	}
	// The guard follows the dataplane: with kernel XFRM it drops what leaves without an
	// IPsec transformation; with libipsec, what leaves by any device but the tunnel's.
	dataplane := w.Dataplane
	if dataplane == "" {
		dataplane = gatewayconfig.DataplaneKernel
	}
	var guard []string
	charonCaps := []corev1.Capability{"NET_ADMIN", "NET_RAW", "NET_BIND_SERVICE"}
	switch dataplane {
	case gatewayconfig.DataplaneKernel:
		guard = []string{"--guard=xfrm"}
	case gatewayconfig.DataplaneLibipsec:
		guard = []string{"--guard=interface", "--tunnel-interface=" + TunnelInterface}
		// The container runtime gives no /dev/net/tun; the charon role creates the node.
		charonCaps = append(charonCaps, "MKNOD")
	default:
		return nil, fmt.Errorf("deployment: dataplane %q is neither %s nor %s", dataplane, gatewayconfig.DataplaneKernel, gatewayconfig.DataplaneLibipsec)
	}
	caps := dropAllBut
	unprivileged := unprivilegedContext
	// Review findings L1/L2: charon's directory (its configuration and VICI socket)
	// is mounted into charon and the status agent only; the files the containers hand
	// each other go through the state volume, read-only in the exporter; and the
	// ServiceAccount token reaches the status agent alone, the one container that
	// talks to the API server. init-nat and the exporter read the status agent's copy
	// of the configuration. charon, which parses IKE from the internet, has none of it.
	run := corev1.VolumeMount{Name: "run", MountPath: RunMountPath}
	state := corev1.VolumeMount{Name: "state", MountPath: StateMountPath}
	stateRO := corev1.VolumeMount{Name: "state", MountPath: StateMountPath, ReadOnly: true}
	sock := RunMountPath + "/charon.vici"
	// The status agent reads the ConfigMap through the API (kubelet refreshes a mounted
	// ConfigMap only after up to minutes; a watch applies a change within a second) and
	// publishes it to ConfigFile, which the other roles read when inotify reports the
	// rename (their 200 ms poll is the fallback).
	source := []string{"--namespace=" + g.Namespace, "--configmap=" + ConfigMapName(g.Name)}
	fromFile := []string{"--config-file=" + ConfigFile}
	agent := func(name string, args []string, sc *corev1.SecurityContext, mounts ...corev1.VolumeMount) corev1.Container {
		return corev1.Container{
			Name:            name,
			Image:           w.AgentImage,
			Args:            args,
			SecurityContext: sc,
			VolumeMounts:    mounts,
		}
	}
	containers := []corev1.Container{
		agent(ContainerInitNAT, append(append(append([]string{"init-nat"}, guard...), "--state-file="+NATStateFile), fromFile...),
			caps("NET_ADMIN"), state),
		{
			Name:  ContainerStrongswan,
			Image: w.GatewayImage,
			Args: []string{"charon", "--vici-socket=" + sock, "--conf=" + RunMountPath + "/strongswan.conf", "--dataplane=" + string(dataplane),
				"--private-dir"},
			SecurityContext: caps(charonCaps...),
			VolumeMounts:    []corev1.VolumeMount{run},
		},
		// The status agent also loads the connections over VICI, rendered
		// from gateway.json, with each tunnel's key read from the tenant's
		// Secret through the API (the Role names exactly those Secrets), and
		// publishes the configuration and its listing of the tunnels.
		withLiveness(agent(ContainerStatus, append([]string{"status-agent", "--vici-socket=" + sock, "--load",
			"--publish-config=" + ConfigFile, "--ipsec-state-file=" + IPsecStateFile}, source...),
			unprivileged(), run, state, apiAccessMount), w),
		// The pod's own address only: not the port's address on NIC2 or the
		// service CIDR's, so nothing reaches it through a tunnel.
		exporterOnPodIP(agent(ContainerExporter, append([]string{"ipsec-exporter", fmt.Sprintf("--listen=$(POD_IP):%d", MetricsPort),
			"--ipsec-state-file=" + IPsecStateFile, "--nat-state-file=" + NATStateFile}, fromFile...), exporterContext(), stateRO)),
	}
	volumes := []corev1.Volume{
		{Name: "run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		apiAccessVolume(),
	}
	return gatewayDeployment(w, containers, volumes)
}

// gatewayDeployment is what both gateway pods (IPsec and WireGuard) share around their
// containers and volumes: one replica, replaced and never surged (two pods cannot share
// the port), the port's NIC through Multus with its MAC, the gateway's own
// ServiceAccount with no automounted token, no service links, the RuntimeDefault
// seccomp filter, the platform's pod shape (w.Pod) and the hard pin to the node that
// holds the port.
func gatewayDeployment(w Workload, containers []corev1.Container, volumes []corev1.Volume) (*appsv1.Deployment, error) {
	g := w.Gateway
	networks, err := json.Marshal([]map[string]string{{"name": NADName(g.Name), "interface": NIC2Interface}})
	if err != nil {
		return nil, err
	}
	one := int32(1)
	f := false
	grace := int64(30)
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: objectMeta(g, DeploymentName(g.Name)),
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Selector: &metav1.LabelSelector{MatchLabels: SelectorLabels(g)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels: Labels(g),
					Annotations: map[string]string{
						AnnotationNetworks: string(networks),
						AnnotationPortMAC:  w.PortMAC,
					},
				},
				Spec: corev1.PodSpec{
					ServiceAccountName:            ServiceAccountName(g.Name),
					AutomountServiceAccountToken:  &f,
					EnableServiceLinks:            &f,
					TerminationGracePeriodSeconds: &grace,
					SecurityContext:               podSecurityContext(),
					Containers:                    containers,
					Volumes:                       volumes,
				},
			},
		},
	}
	w.Pod.Apply(&d.Spec.Template)
	// A hard pin, not a scheduling hint: the port is attached to exactly this node's
	// server, and the operator binds the pod there once the port is free (pinTo).
	pinTo(&d.Spec.Template.Spec, w.NodeName)
	return d, nil
}

// What both gateway pods (IPsec and WireGuard) share of their hardening
// (docs/security.md).

// podSecurityContext: the runtime's default seccomp filter for every container.
func podSecurityContext() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
}

// dropAllBut drops every capability but add, and privilege escalation.
func dropAllBut(add ...corev1.Capability) *corev1.SecurityContext {
	f := false
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: &f,
		Capabilities:             &corev1.Capabilities{Add: add, Drop: []corev1.Capability{"ALL"}},
	}
}

// unprivilegedContext is for the containers that need no privilege (the status agent
// and the exporter): another user than root, no capability, a read-only root file
// system (what they write goes to the pod's volumes).
func unprivilegedContext() *corev1.SecurityContext {
	t := true
	uid, gid := int64(AgentUID), int64(AgentGID)
	sc := dropAllBut()
	sc.RunAsUser, sc.RunAsGroup, sc.RunAsNonRoot = &uid, &gid, &t
	sc.ReadOnlyRootFilesystem = &t
	return sc
}

// exporterContext is unprivilegedContext in a group of its own (ExporterGID).
func exporterContext() *corev1.SecurityContext {
	sc := unprivilegedContext()
	gid := int64(ExporterGID)
	sc.RunAsGroup = &gid
	return sc
}

// apiAccessMount mounts apiAccessVolume where client-go looks for the in-cluster token,
// into the containers that talk to the API server only.
var apiAccessMount = corev1.VolumeMount{Name: "api-access", MountPath: ServiceAccountMountPath, ReadOnly: true}

// apiAccessVolume is what automounting would give every container (token, cluster CA,
// namespace), for the containers that need it.
func apiAccessVolume() corev1.Volume {
	readOnly := int32(0o444)
	tokenTTL := int64(3607)
	return corev1.Volume{Name: "api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: &readOnly,
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &tokenTTL}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace",
				FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		},
	}}}
}

// exporterOnPodIP gives the exporter container its POD_IP (its --listen names
// $(POD_IP)) and its metrics port.
func exporterOnPodIP(c corev1.Container) corev1.Container {
	c.Env = []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"}}}}
	c.Ports = []corev1.ContainerPort{{Name: MetricsPortName, ContainerPort: MetricsPort, Protocol: corev1.ProtocolTCP}}
	return c
}

// NetworkPolicy governs NIC1 only (NIC2 is outside NetworkPolicy's reach): metrics from
// anywhere, any port from the operator's namespace when it is known. Egress is left
// unrestricted on purpose (see docs/gateway.md).
func NetworkPolicy(g Gateway, operatorNamespace string) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	metrics := intstr.FromInt32(MetricsPort)
	np := &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: objectMeta(g, NetworkPolicyName(g.Name)),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: SelectorLabels(g)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &metrics}},
				From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}},
			}},
		},
	}
	if operatorNamespace != "" {
		np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{
			From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: operatorNamespace},
			}}},
		})
	}
	return np
}
