package render

import (
	"fmt"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// A WireGuard gateway's key Secret and pod.
const (
	// WireGuardPrivateKeyKey holds the gateway's current private key (base64, as wg(8)
	// writes it).
	WireGuardPrivateKeyKey = "privateKey"
	// WireGuardPreviousKeyKey holds the key before a rotation during the rotation's
	// overlap, when the pod serves it on the gateway's other port.
	WireGuardPreviousKeyKey = "previousPrivateKey"
	// AnnotationWireGuardKeySlot on the key Secret is the slot ("0" or "1") the current
	// key is served on; the previous key, while there is one, is on the other.
	AnnotationWireGuardKeySlot = "ipsec.bnerd.net/wireguard-key-slot"
	// AnnotationWireGuardKeyRotatedAt on the key Secret is when the current key replaced
	// the previous one (RFC 3339): the overlap's deadline counts from it.
	AnnotationWireGuardKeyRotatedAt = "ipsec.bnerd.net/wireguard-key-rotated-at"

	// WireGuardInterfaces are the devices of the two key slots inside the pod
	// (gatewayconfig.WireGuardInterfaceOf), as the wireguard role and init-nat's guard
	// take them: the current key is served on one, during a rotation's overlap the
	// previous key on the other.
	WireGuardInterfaces = "wg0,wg1"
	// WireGuardKeyMountPath holds the mounted private key file; the previous key, during
	// a rotation's overlap, is mounted under WireGuardPreviousKeyMountPath.
	WireGuardKeyMountPath         = "/etc/bnerd-vpn/wireguard"
	WireGuardPreviousKeyMountPath = "/etc/bnerd-vpn/wireguard-previous"
	// WireGuardKeyFile is the key's file name under WireGuardKeyMountPath.
	WireGuardKeyFile = "private-key"
	// WireGuardRunPath is the pod's shared scratch volume (state files).
	WireGuardRunPath = "/var/run/bnerd"

	// ContainerWireGuard runs the agent's wireguard role in the WireGuard image.
	ContainerWireGuard = "wireguard"
)

// WireGuardKeySecretName is the name of a gateway's WireGuard key Secret.
func WireGuardKeySecretName(gw string) string { return gw + "-gateway-wireguard" }

// WireGuardKeys is what the key Secret records: the current private key and its slot,
// during a rotation's overlap the previous key (on the other slot) and when the
// rotation happened, and the rotate annotation's value the keys answer (so each value
// rotates once).
type WireGuardKeys struct {
	PrivateKey, PreviousKey string
	Slot                    int
	RotatedAt               time.Time
	Token                   string
}

// WireGuardKeySecret holds the gateway's keys.
func WireGuardKeySecret(g Gateway, k WireGuardKeys) *corev1.Secret {
	s := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: objectMeta(g, WireGuardKeySecretName(g.Name)),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{WireGuardPrivateKeyKey: []byte(k.PrivateKey)},
	}
	s.Annotations = map[string]string{AnnotationWireGuardKeySlot: strconv.Itoa(k.Slot)}
	if k.PreviousKey != "" {
		s.Data[WireGuardPreviousKeyKey] = []byte(k.PreviousKey)
	}
	if !k.RotatedAt.IsZero() {
		s.Annotations[AnnotationWireGuardKeyRotatedAt] = k.RotatedAt.UTC().Format(time.RFC3339)
	}
	if k.Token != "" {
		s.Annotations[v1alpha1.AnnotationRotateWireGuardKey] = k.Token
	}
	return s
}

// WireGuardKeysOf reads the record back from a key Secret. A Secret written before key
// slots existed has its current key on slot 0.
func WireGuardKeysOf(s *corev1.Secret) WireGuardKeys {
	k := WireGuardKeys{
		PrivateKey:  string(s.Data[WireGuardPrivateKeyKey]),
		PreviousKey: string(s.Data[WireGuardPreviousKeyKey]),
		Token:       s.Annotations[v1alpha1.AnnotationRotateWireGuardKey],
	}
	if s.Annotations[AnnotationWireGuardKeySlot] == "1" {
		k.Slot = 1
	}
	if t, err := time.Parse(time.RFC3339, s.Annotations[AnnotationWireGuardKeyRotatedAt]); err == nil {
		k.RotatedAt = t
	}
	return k
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
	optional := true
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
	containers := []corev1.Container{
		agent(ContainerInitNAT, w.AgentImage, append([]string{"init-nat", "--guard=interface", "--tunnel-interface=" + WireGuardInterfaces,
			"--state-file=" + natState}, fromFile...), dropAllBut("NET_ADMIN"), run),
		// MKNOD: the userspace fallback creates /dev/net/tun where the
		// runtime provides none.
		agent(ContainerWireGuard, w.WireGuardImage, append([]string{"wireguard", "--interface=" + WireGuardInterfaces,
			"--private-key-file=" + WireGuardKeyMountPath + "/" + WireGuardKeyFile,
			"--previous-private-key-file=" + WireGuardPreviousKeyMountPath + "/" + WireGuardKeyFile, "--state-file=" + wgState}, fromFile...),
			dropAllBut("NET_ADMIN", "MKNOD"), run,
			corev1.VolumeMount{Name: "wireguard-key", MountPath: WireGuardKeyMountPath, ReadOnly: true},
			corev1.VolumeMount{Name: "wireguard-previous-key", MountPath: WireGuardPreviousKeyMountPath, ReadOnly: true}),
		withLiveness(agent(ContainerStatus, w.AgentImage, append([]string{"status-agent", "--wireguard-state-file=" + wgState,
			"--publish-config=" + WireGuardRunPath + "/" + gatewayconfig.ConfigMapKeyConfig}, source...), unprivilegedContext(), run, apiAccessMount), w),
		exporter,
	}
	volumes := []corev1.Volume{
		// The current private key, and during a rotation's overlap the previous
		// one: optional, so the volume is empty outside an overlap, and the
		// kubelet adds and removes the file as the operator writes the Secret.
		{Name: "wireguard-key", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: WireGuardKeySecretName(g.Name), DefaultMode: &readOnly,
			Items: []corev1.KeyToPath{{Key: WireGuardPrivateKeyKey, Path: WireGuardKeyFile}},
		}}},
		{Name: "wireguard-previous-key", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: WireGuardKeySecretName(g.Name), DefaultMode: &readOnly, Optional: &optional,
			Items: []corev1.KeyToPath{{Key: WireGuardPreviousKeyKey, Path: WireGuardKeyFile}},
		}}},
		{Name: "run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		apiAccessVolume(),
	}
	return gatewayDeployment(w, containers, volumes)
}
