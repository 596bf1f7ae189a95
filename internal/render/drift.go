package render

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// podSecurity is the part of a pod spec that decides what the pod may do and see: host
// namespaces, identity, security contexts, volumes and every container's command,
// environment and mounts. The reconciler tolerates additions elsewhere (defaults the API
// server fills, labels other tools add), but never here: a field that differs from the
// rendered one is drift to revert (PodSecurityDrift).
type podSecurity struct {
	HostNetwork, HostPID, HostIPC bool
	HostUsers                     *bool
	ShareProcessNamespace         *bool
	ServiceAccountName            string
	DeprecatedServiceAccount      string
	AutomountServiceAccountToken  *bool
	RuntimeClassName              *string
	SecurityContext               *corev1.PodSecurityContext
	Volumes                       []corev1.Volume
	InitContainers                []containerSecurity
	Containers                    []containerSecurity
}

type containerSecurity struct {
	Name, Image     string
	Command, Args   []string
	Env             []corev1.EnvVar
	EnvFrom         []corev1.EnvFromSource
	SecurityContext *corev1.SecurityContext
	VolumeMounts    []corev1.VolumeMount
	VolumeDevices   []corev1.VolumeDevice
}

func containersOf(cs []corev1.Container) []containerSecurity {
	out := make([]containerSecurity, 0, len(cs))
	for _, c := range cs {
		out = append(out, containerSecurity{
			Name: c.Name, Image: c.Image, Command: c.Command, Args: c.Args, Env: c.Env, EnvFrom: c.EnvFrom,
			SecurityContext: c.SecurityContext, VolumeMounts: c.VolumeMounts, VolumeDevices: c.VolumeDevices,
		})
	}
	return out
}

func securityOf(ps corev1.PodSpec) podSecurity {
	sa := ps.DeprecatedServiceAccount
	if sa == ps.ServiceAccountName {
		sa = "" // the API server mirrors serviceAccountName into it
	}
	return podSecurity{
		HostNetwork: ps.HostNetwork, HostPID: ps.HostPID, HostIPC: ps.HostIPC,
		HostUsers: ps.HostUsers, ShareProcessNamespace: ps.ShareProcessNamespace,
		ServiceAccountName: ps.ServiceAccountName, DeprecatedServiceAccount: sa,
		AutomountServiceAccountToken: ps.AutomountServiceAccountToken, RuntimeClassName: ps.RuntimeClassName,
		SecurityContext: ps.SecurityContext, Volumes: ps.Volumes,
		InitContainers: containersOf(ps.InitContainers), Containers: containersOf(ps.Containers),
	}
}

// PodSecurityDrift names the security-relevant fields in which live differs from
// desired (empty: none). Nil and empty lists count as equal, as the API server stores
// them.
func PodSecurityDrift(desired, live corev1.PodSpec) []string {
	d, l := securityOf(desired), securityOf(live)
	var out []string
	check := func(name string, a, b any) {
		if !equality.Semantic.DeepEqual(a, b) {
			out = append(out, name)
		}
	}
	check("hostNetwork", d.HostNetwork, l.HostNetwork)
	check("hostPID", d.HostPID, l.HostPID)
	check("hostIPC", d.HostIPC, l.HostIPC)
	check("hostUsers", d.HostUsers, l.HostUsers)
	check("shareProcessNamespace", d.ShareProcessNamespace, l.ShareProcessNamespace)
	check("serviceAccountName", d.ServiceAccountName, l.ServiceAccountName)
	check("serviceAccount", d.DeprecatedServiceAccount, l.DeprecatedServiceAccount)
	check("automountServiceAccountToken", d.AutomountServiceAccountToken, l.AutomountServiceAccountToken)
	check("runtimeClassName", d.RuntimeClassName, l.RuntimeClassName)
	check("securityContext", d.SecurityContext, l.SecurityContext)
	check("volumes", d.Volumes, l.Volumes)
	check("initContainers", d.InitContainers, l.InitContainers)
	check("containers", d.Containers, l.Containers)
	return out
}
