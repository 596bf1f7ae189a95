package render

import (
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// A WireGuard gateway's key Secret and pod.
const (
	// WireGuardPrivateKeyKey holds the gateway's current private key (base64, as wg(8)
	// writes it); the only key the pod mounts.
	WireGuardPrivateKeyKey = "privateKey"
	// WireGuardPreviousKeyKey holds the key before a rotation until every peer has
	// completed a handshake with the new one. It is never mounted.
	WireGuardPreviousKeyKey = "previousPrivateKey"

	// WireGuardInterface is the gateway's WireGuard device inside the pod.
	WireGuardInterface = "wg0"
	// WireGuardKeyMountPath holds the mounted private key file.
	WireGuardKeyMountPath = "/etc/bnerd-vpn/wireguard"
	// WireGuardKeyFile is the key's file name under WireGuardKeyMountPath.
	WireGuardKeyFile = "private-key"
	// WireGuardRunPath is the pod's shared scratch volume (state files).
	WireGuardRunPath = "/var/run/bnerd"

	// ContainerWireGuard runs the agent's wireguard role in the WireGuard image.
	ContainerWireGuard = "wireguard"
)

// WireGuardKeySecretName is the name of a gateway's WireGuard key Secret.
func WireGuardKeySecretName(gw string) string { return gw + "-gateway-wireguard" }

// WireGuardKeySecret holds the gateway's private key (and, during a rotation, the
// previous one). token records the rotate annotation's value the key answers, so each
// value rotates once.
func WireGuardKeySecret(g Gateway, privateKey, previousKey, token string) *corev1.Secret {
	s := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: objectMeta(g, WireGuardKeySecretName(g.Name)),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{WireGuardPrivateKeyKey: []byte(privateKey)},
	}
	if previousKey != "" {
		s.Data[WireGuardPreviousKeyKey] = []byte(previousKey)
	}
	if token != "" {
		s.Annotations = map[string]string{v1alpha1.AnnotationRotateWireGuardKey: token}
	}
	return s
}

// WireGuardDeployment runs a WireGuard gateway's pod: init-nat with the interface guard
// on the WireGuard device, the wireguard container (the agent's wireguard role in the
// WireGuard image: creates and configures the device, kernel module or userspace
// fallback), the status agent and the exporter reading its state file. Like the IPsec
// pod it is hard-pinned to the node holding the port and replaced, never surged, and
// hardened the same way: RuntimeDefault seccomp, every capability dropped but what a
// container uses, the status agent and the exporter as UID 65532 on a read-only root,
// the token projected into the status agent alone, the exporter on the pod IP.
func WireGuardDeployment(w Workload) (*appsv1.Deployment, error) {
	g := w.Gateway
	if w.NodeName == "" {
		return nil, fmt.Errorf("deployment: no node selected")
	}
	networks, err := json.Marshal([]map[string]string{{"name": NADName(g.Name), "interface": NIC2Interface}})
	if err != nil {
		return nil, err
	}
	one := int32(1)
	f := false
	grace := int64(30)
	readOnly := int32(0o440)
	run := corev1.VolumeMount{Name: "run", MountPath: WireGuardRunPath}
	runRO := corev1.VolumeMount{Name: "run", MountPath: WireGuardRunPath, ReadOnly: true}
	natState := WireGuardRunPath + "/nat-state.json"
	wgState := WireGuardRunPath + "/wireguard-state.json"
	// As in the IPsec pod (review findings L1/L2): the status agent alone reads the
	// ConfigMap through the API, writes the status and mounts the token; it publishes
	// the configuration to the shared volume for the other containers.
	source := []string{"--namespace=" + g.Namespace, "--configmap=" + ConfigMapName(g.Name)}
	fromFile := []string{"--config-file=" + WireGuardRunPath + "/" + gatewayconfig.ConfigMapKeyConfig}
	agent := func(name, image string, args []string, sc *corev1.SecurityContext, mounts ...corev1.VolumeMount) corev1.Container {
		return corev1.Container{Name: name, Image: image, Args: args, SecurityContext: sc, VolumeMounts: mounts}
	}
	// The exporter only reads the state files the wireguard role and init-nat write
	// (mode 0644) on the shared emptyDir, mounted read-only: no privilege, no token, as
	// in the IPsec pod; on the pod's own address, so nothing reaches it through a tunnel.
	exporter := exporterOnPodIP(agent(ContainerExporter, w.AgentImage, append([]string{"ipsec-exporter", fmt.Sprintf("--listen=$(POD_IP):%d", MetricsPort),
		"--wireguard-state-file=" + wgState, "--nat-state-file=" + natState}, fromFile...), exporterContext(), runRO))
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
					Containers: []corev1.Container{
						agent(ContainerInitNAT, w.AgentImage, append([]string{"init-nat", "--guard=interface", "--tunnel-interface=" + WireGuardInterface,
							"--state-file=" + natState}, fromFile...), dropAllBut("NET_ADMIN"), run),
						// MKNOD: the userspace fallback creates /dev/net/tun where the
						// runtime provides none.
						agent(ContainerWireGuard, w.WireGuardImage, append([]string{"wireguard", "--interface=" + WireGuardInterface,
							"--private-key-file=" + WireGuardKeyMountPath + "/" + WireGuardKeyFile, "--state-file=" + wgState}, fromFile...),
							dropAllBut("NET_ADMIN", "MKNOD"), run,
							corev1.VolumeMount{Name: "wireguard-key", MountPath: WireGuardKeyMountPath, ReadOnly: true}),
						withLiveness(agent(ContainerStatus, w.AgentImage, append([]string{"status-agent", "--wireguard-state-file=" + wgState,
							"--publish-config=" + WireGuardRunPath + "/" + gatewayconfig.ConfigMapKeyConfig}, source...), unprivilegedContext(), run, apiAccessMount), w),
						exporter,
					},
					Volumes: []corev1.Volume{
						// Only the current private key: the previous one (kept during a
						// rotation) never enters the pod.
						{Name: "wireguard-key", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
							SecretName: WireGuardKeySecretName(g.Name), DefaultMode: &readOnly,
							Items: []corev1.KeyToPath{{Key: WireGuardPrivateKeyKey, Path: WireGuardKeyFile}},
						}}},
						{Name: "run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
						apiAccessVolume(),
					},
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
