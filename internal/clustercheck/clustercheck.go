// Package clustercheck is `kubectl vpn check`: whether a cluster meets what the operator
// needs before (and after) it is installed, and what is missing. It checks the CRDs,
// Multus' NetworkAttachmentDefinition CRD, Cilium's cni-exclusive, the operator's
// Deployment and its OpenStack credential Secret, the PodSecurity level of the gateway
// namespaces and the gateway pods' pull secrets there, the nodes a gateway can be placed
// on, and, given an OpenStack credential, Neutron's extensions, the project's quotas, the
// transit network, the router and the floating IP network.
//
// It only reads. Each source may be missing or forbidden; its checks are then skipped
// with the reason, and a report with skipped checks is never "all well".
package clustercheck

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/gophercloud/gophercloud/v2/openstack/config/clouds"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/gatewaypod"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/preflight"
)

// Status of one check.
type Status string

const (
	Pass    Status = "ok"
	Warn    Status = "warning"
	Fail    Status = "FAIL"
	Skipped Status = "skipped"
)

// Check is one finding.
type Check struct {
	// ID names the check (stable, for scripts and tests), e.g. "crds" or "openstack.quotas".
	ID     string `json:"id"`
	Status Status `json:"status"`
	// Detail is what was found.
	Detail string `json:"detail"`
	// Fix is the step that fixes a failure or warning.
	Fix string `json:"fix,omitempty"`
	// Requested marks a check skipped because the caller asked for it.
	Requested bool `json:"requested,omitempty"`
}

// Report is the checks in the order they were made.
type Report struct {
	Checks []Check `json:"checks"`
}

// Healthy is true only when every check passed (a skip the caller asked for aside).
func (r *Report) Healthy() bool {
	for _, c := range r.Checks {
		if c.Status != Pass && !(c.Status == Skipped && c.Requested) {
			return false
		}
	}
	return true
}

// Problems are the failures and warnings.
func (r *Report) Problems() []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.Status == Fail || c.Status == Warn {
			out = append(out, c)
		}
	}
	return out
}

// Incomplete reports whether a check was skipped without being asked to.
func (r *Report) Incomplete() bool {
	return slices.ContainsFunc(r.Checks, func(c Check) bool { return c.Status == Skipped && !c.Requested })
}

// Get returns the check with id (nil when there is none).
func (r *Report) Get(id string) *Check {
	for i := range r.Checks {
		if r.Checks[i].ID == id {
			return &r.Checks[i]
		}
	}
	return nil
}

func (r *Report) add(id string, st Status, detail, fix string) {
	r.Checks = append(r.Checks, Check{ID: id, Status: st, Detail: detail, Fix: fix})
}

// Options are what the check is told besides what it finds.
type Options struct {
	// OperatorNamespace is the release namespace (default bnerd-vpn-system).
	OperatorNamespace string
	// CredentialSecret names the operator's credential Secret when no operator
	// Deployment says which (a check before the install).
	CredentialSecret string
	// GatewayNamespaces are checked besides the namespaces that hold gateways.
	GatewayNamespaces []string
	// Router, ExternalNetwork and GatewayNetwork stand in for the operator's settings
	// when no operator Deployment gives them (the chart's values).
	Router, ExternalNetwork, GatewayNetwork string
}

// Sources are where the check reads from. Kube is required; OpenStack is nil when no
// credential was given (then OpenStackSkip says why, and OpenStackRequested whether the
// caller asked to skip it).
type Sources struct {
	Kube               client.Reader
	OpenStack          *openstack.Clients
	OpenStackSkip      string
	OpenStackRequested bool
}

// DefaultOperatorNamespace is the namespace the documentation installs into.
const DefaultOperatorNamespace = "bnerd-vpn-system"

// PodSecurityEnforce is the PodSecurity admission label a gateway namespace needs at
// "privileged": the gateway pod's containers add NET_ADMIN (and NET_RAW,
// NET_BIND_SERVICE, MKNOD), which the baseline level forbids.
const PodSecurityEnforce = "pod-security.kubernetes.io/enforce"

// operatorView is what the operator's Deployment says of its configuration.
type operatorView struct {
	found                                   bool
	deployment                              string
	secret, format, cloud, cloudsKey        string
	router, externalNetwork, gatewayNetwork string
	pod                                     gatewaypod.Shape
}

// Run makes every check.
func Run(ctx context.Context, src Sources, o Options) *Report {
	if o.OperatorNamespace == "" {
		o.OperatorNamespace = DefaultOperatorNamespace
	}
	r := &Report{}
	checkCRDs(ctx, src.Kube, r)
	checkMultus(ctx, src.Kube, r)
	checkCilium(ctx, src.Kube, r)
	op := checkOperator(ctx, src.Kube, o, r)
	checkCredential(ctx, src.Kube, o, op, r)
	namespaces := gatewayNamespaces(ctx, src.Kube, o, r)
	checkPodSecurity(ctx, src.Kube, namespaces, r)
	checkPullSecrets(ctx, src.Kube, namespaces, op, r)
	checkNodes(ctx, src.Kube, op, r)
	checkOpenStack(ctx, src, o, op, r)
	return r
}

var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// crdState reads a CRD: whether it exists, is established and serves version.
func crdState(ctx context.Context, c client.Reader, name, version string) (exists, established, serves bool, err error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(crdGVK)
	if err := c.Get(ctx, client.ObjectKey{Name: name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return false, false, false, nil
		}
		return false, false, false, err
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, x := range conds {
		m, _ := x.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			established = true
		}
	}
	versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	for _, x := range versions {
		m, _ := x.(map[string]any)
		if m["name"] == version && m["served"] == true {
			serves = true
		}
	}
	return true, established, serves, nil
}

func checkCRDs(ctx context.Context, c client.Reader, r *Report) {
	var missing, notReady []string
	for _, name := range []string{"ipsecgateways.ipsec.bnerd.net", "vpngateways.ipsec.bnerd.net", "clusterlinks.ipsec.bnerd.net"} {
		exists, est, serves, err := crdState(ctx, c, name, v1alpha1.GroupVersion.Version)
		switch {
		case err != nil:
			r.add("crds", Skipped, "cannot read CustomResourceDefinitions: "+err.Error(), "")
			return
		case !exists:
			missing = append(missing, name)
		case !est || !serves:
			notReady = append(notReady, name)
		}
	}
	switch {
	case len(missing) > 0:
		r.add("crds", Fail, "missing: "+strings.Join(missing, ", "),
			"install the chart (crds.enabled, the default, installs and upgrades them), or apply the release's CRDs: kubectl apply --server-side -f <chart>/files/crds/")
	case len(notReady) > 0:
		r.add("crds", Fail, "not established or not serving "+v1alpha1.GroupVersion.Version+": "+strings.Join(notReady, ", "),
			"kubectl get crd "+notReady[0]+" -o yaml: see its status conditions")
	default:
		r.add("crds", Pass, "IPsecGateway, VPNGateway and ClusterLink CRDs established, serving "+v1alpha1.GroupVersion.String(), "")
	}
}

func checkMultus(ctx context.Context, c client.Reader, r *Report) {
	const nad = "network-attachment-definitions.k8s.cni.cncf.io"
	exists, est, _, err := crdState(ctx, c, nad, "v1")
	switch {
	case err != nil:
		r.add("multus", Skipped, "cannot read CustomResourceDefinitions: "+err.Error(), "")
	case !exists || !est:
		r.add("multus", Fail, "no NetworkAttachmentDefinition CRD ("+nad+"): Multus is not installed, so gateway pods cannot get their second interface",
			"install Multus with the host-device and static IPAM CNI plugins on every node (docs/install.md, Prerequisites)")
	default:
		r.add("multus", Pass, "NetworkAttachmentDefinition CRD established (Multus); the host-device and static CNI plugins on the nodes are not visible from the API and not checked", "")
	}
}

func checkCilium(ctx context.Context, c client.Reader, r *Report) {
	var cm corev1.ConfigMap
	err := c.Get(ctx, client.ObjectKey{Namespace: preflight.CiliumConfigNamespace, Name: preflight.CiliumConfigName}, &cm)
	switch {
	case apierrors.IsNotFound(err):
		r.add("cilium", Pass, "no kube-system/cilium-config: not a Cilium cluster, nothing to check", "")
	case err != nil:
		r.add("cilium", Skipped, "cannot read kube-system/cilium-config: "+err.Error(), "")
	case strings.TrimSpace(strings.ToLower(cm.Data[preflight.CiliumCNIExclusiveKey])) == "false":
		r.add("cilium", Pass, "Cilium's cni-exclusive is \"false\": Multus can chain", "")
	default:
		v, ok := cm.Data[preflight.CiliumCNIExclusiveKey]
		if !ok {
			v = "unset (Cilium's default: true)"
		}
		r.add("cilium", Fail, "Cilium's cni-exclusive is "+v+": Cilium renames Multus' CNI configuration away and gateway pods never get their second interface",
			"set cni-exclusive to \"false\" in kube-system/cilium-config (on Gardener: spec.networking.providerConfig.cni.exclusive: false)")
	}
}

// checkOperator finds the operator's Deployment and reads its configuration.
func checkOperator(ctx context.Context, c client.Reader, o Options, r *Report) operatorView {
	v := operatorView{router: o.Router, externalNetwork: o.ExternalNetwork, gatewayNetwork: o.GatewayNetwork, secret: o.CredentialSecret, pod: gatewaypod.DefaultShape()}
	var deps appsv1.DeploymentList
	err := c.List(ctx, &deps, client.InNamespace(o.OperatorNamespace), client.MatchingLabels{"app.kubernetes.io/name": "bnerd-vpn-operator"})
	if err != nil {
		r.add("operator", Skipped, "cannot list Deployments in "+o.OperatorNamespace+": "+err.Error(), "")
		return v
	}
	if len(deps.Items) == 0 {
		r.add("operator", Warn, "no bnerd-vpn-operator Deployment in namespace "+o.OperatorNamespace+" (not installed yet, or installed elsewhere: --operator-namespace)",
			"helm install the chart into "+o.OperatorNamespace+" (docs/install.md); the checks below use the flags given for its settings")
		return v
	}
	d := deps.Items[0]
	v.found, v.deployment = true, d.Name
	for _, ctr := range d.Spec.Template.Spec.Containers {
		if ctr.Name != "operator" {
			continue
		}
		env := map[string]string{}
		for _, e := range ctr.Env {
			env[e.Name] = e.Value
		}
		v.router = firstOf(o.Router, env["IPSEC_ROUTER_ID"])
		v.externalNetwork = firstOf(o.ExternalNetwork, env["IPSEC_EXTERNAL_NETWORK"])
		v.gatewayNetwork = firstOf(o.GatewayNetwork, env["IPSEC_GATEWAY_NETWORK"])
		if s, err := gatewaypod.Parse(env["IPSEC_GATEWAY_POD"]); err == nil {
			v.pod = s
		}
		v.format = "env"
		for _, ef := range ctr.EnvFrom {
			if ef.SecretRef != nil {
				v.secret = ef.SecretRef.Name
			}
		}
		if cloud := env["OS_CLOUD"]; cloud != "" {
			v.format, v.cloud = "cloudsYaml", cloud
			for _, vol := range d.Spec.Template.Spec.Volumes {
				if vol.Name == "openstack-credentials" && vol.Secret != nil {
					v.secret = vol.Secret.SecretName
					if len(vol.Secret.Items) > 0 {
						v.cloudsKey = vol.Secret.Items[0].Key
					}
				}
			}
		}
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	if d.Status.AvailableReplicas < 1 {
		r.add("operator", Fail, fmt.Sprintf("Deployment %s/%s has no available replica (%d of %d)", d.Namespace, d.Name, d.Status.AvailableReplicas, want),
			fmt.Sprintf("kubectl -n %s describe deployment %s; kubectl -n %s logs deployment/%s (a missing credential Secret shows as CreateContainerConfigError)", d.Namespace, d.Name, d.Namespace, d.Name))
		return v
	}
	r.add("operator", Pass, fmt.Sprintf("Deployment %s/%s available (%d of %d replicas)", d.Namespace, d.Name, d.Status.AvailableReplicas, want), "")
	return v
}

func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// checkCredential: the credential Secret exists in the operator's namespace and holds a
// complete credential. Only key names are reported, never a value.
func checkCredential(ctx context.Context, c client.Reader, o Options, op operatorView, r *Report) {
	if op.secret == "" {
		r.add("credential", Skipped, "no credential Secret to check: no operator Deployment names one; give it with --credential-secret", "")
		return
	}
	var s corev1.Secret
	err := c.Get(ctx, client.ObjectKey{Namespace: o.OperatorNamespace, Name: op.secret}, &s)
	switch {
	case apierrors.IsNotFound(err):
		r.add("credential", Fail, "Secret "+o.OperatorNamespace+"/"+op.secret+" does not exist: the operator pod cannot start (CreateContainerConfigError)",
			"create it before the release: kubectl -n "+o.OperatorNamespace+" create secret generic "+op.secret+" --from-literal=OS_AUTH_URL=... (docs/install.md, The OpenStack credential)")
		return
	case err != nil:
		r.add("credential", Skipped, "cannot read Secret "+o.OperatorNamespace+"/"+op.secret+": "+err.Error(), "")
		return
	}
	lookup := func(k string) string { return string(s.Data[k]) }
	var cerr error
	what := "OS_* keys"
	if op.format == "cloudsYaml" {
		key := firstOf(op.cloudsKey, "clouds.yaml")
		what = "clouds.yaml entry " + op.cloud
		data, ok := s.Data[key]
		if !ok {
			r.add("credential", Fail, "Secret "+o.OperatorNamespace+"/"+op.secret+" has no key "+key, "put the clouds.yaml under that key (openstack.credentials.cloudsYamlKey)")
			return
		}
		_, cerr = openstack.CredentialFromCloudsYAML(withoutFiles(data), op.cloud)
	} else {
		_, cerr = openstack.CredentialFromEnv(lookup)
	}
	if cerr != nil {
		r.add("credential", Fail, "Secret "+o.OperatorNamespace+"/"+op.secret+" ("+what+"): "+cerr.Error(),
			"an application credential needs OS_AUTH_URL, OS_APPLICATION_CREDENTIAL_ID and OS_APPLICATION_CREDENTIAL_SECRET (and OS_REGION_NAME)")
		return
	}
	r.add("credential", Pass, "Secret "+o.OperatorNamespace+"/"+op.secret+" holds a complete credential ("+what+")", "")
}

// withoutFiles drops the file paths (cacert, cert, key) from a clouds.yaml: they name
// files inside the operator's pod, which this machine does not have.
func withoutFiles(data []byte) []byte {
	var cs clouds.Clouds
	if err := sigsyaml.Unmarshal(data, &cs); err != nil {
		return data
	}
	for name, cl := range cs.Clouds {
		cl.CACertFile, cl.ClientCertFile, cl.ClientKeyFile = "", "", ""
		cs.Clouds[name] = cl
	}
	out, err := sigsyaml.Marshal(cs)
	if err != nil {
		return data
	}
	return out
}

// gatewayNamespaces are the namespaces that hold gateways and those named.
func gatewayNamespaces(ctx context.Context, c client.Reader, o Options, r *Report) []string {
	set := map[string]bool{}
	for _, n := range o.GatewayNamespaces {
		set[n] = true
	}
	gws, err := v1alpha1.ListGateways(ctx, c)
	// A kind the API server does not serve (its CRD not installed) holds no gateways.
	if err != nil && !apierrors.IsNotFound(err) && !strings.Contains(err.Error(), "no matches for kind") {
		r.add("gateway-namespaces", Skipped, "cannot list gateways: "+err.Error()+"; name gateway namespaces with --gateway-namespace", "")
	}
	for _, g := range gws {
		set[g.GetNamespace()] = true
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func checkPodSecurity(ctx context.Context, c client.Reader, namespaces []string, r *Report) {
	if len(namespaces) == 0 {
		r.add("podsecurity", Skipped, "no gateway namespace: none holds a gateway yet; name the ones you will use with --gateway-namespace", "")
		return
	}
	var bad, unlabelled, good []string
	for _, ns := range namespaces {
		var n corev1.Namespace
		if err := c.Get(ctx, client.ObjectKey{Name: ns}, &n); err != nil {
			if apierrors.IsNotFound(err) {
				bad = append(bad, ns+" (does not exist)")
				continue
			}
			r.add("podsecurity", Skipped, "cannot read namespace "+ns+": "+err.Error(), "")
			return
		}
		switch lvl, ok := n.Labels[PodSecurityEnforce]; {
		case !ok:
			unlabelled = append(unlabelled, ns)
		case lvl == "privileged":
			good = append(good, ns)
		default:
			bad = append(bad, ns+" ("+lvl+")")
		}
	}
	fix := func(list []string) string {
		var cmds []string
		for _, ns := range list {
			cmds = append(cmds, "kubectl label namespace "+strings.Fields(ns)[0]+" "+PodSecurityEnforce+"=privileged --overwrite")
		}
		return strings.Join(cmds, "; ")
	}
	switch {
	case len(bad) > 0:
		r.add("podsecurity", Fail, "gateway namespaces that do not admit the gateway pod (it adds NET_ADMIN, which baseline forbids): "+strings.Join(bad, ", "), fix(bad))
	case len(unlabelled) > 0:
		r.add("podsecurity", Warn, "gateway namespaces without the "+PodSecurityEnforce+" label, so the API server's default level applies (privileged unless its admission configuration sets another): "+strings.Join(unlabelled, ", "), fix(unlabelled))
	default:
		r.add("podsecurity", Pass, PodSecurityEnforce+"=privileged on every gateway namespace: "+strings.Join(good, ", "), "")
	}
}

func checkPullSecrets(ctx context.Context, c client.Reader, namespaces []string, op operatorView, r *Report) {
	if len(op.pod.ImagePullSecrets) == 0 {
		r.add("pull-secrets", Pass, "the gateway pods name no image pull secret (gatewayPods.imagePullSecrets)", "")
		return
	}
	if len(namespaces) == 0 {
		r.add("pull-secrets", Skipped, "no gateway namespace to look in; name them with --gateway-namespace", "")
		return
	}
	var missing []string
	for _, ns := range namespaces {
		for _, ps := range op.pod.ImagePullSecrets {
			m := &metav1.PartialObjectMetadata{}
			m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
			err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: ps.Name}, m)
			switch {
			case apierrors.IsNotFound(err):
				missing = append(missing, ns+"/"+ps.Name)
			case err != nil:
				r.add("pull-secrets", Skipped, "cannot read Secret "+ns+"/"+ps.Name+": "+err.Error(), "")
				return
			}
		}
	}
	if len(missing) > 0 {
		r.add("pull-secrets", Fail, "image pull secrets the gateway pods name are missing: "+strings.Join(missing, ", "),
			"create each in its namespace (kubectl -n <namespace> create secret docker-registry <name> ...), or let the nodes pull without one")
		return
	}
	r.add("pull-secrets", Pass, "every gateway namespace holds the gateway pods' image pull secrets", "")
}

func checkNodes(ctx context.Context, c client.Reader, op operatorView, r *Report) {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		r.add("nodes", Skipped, "cannot list nodes: "+err.Error(), "")
		return
	}
	var eligible, badID []string
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if isControlPlane(n) {
			continue
		}
		if _, err := openstack.ParseProviderID(n.Spec.ProviderID); err != nil {
			badID = append(badID, fmt.Sprintf("%s (%q)", n.Name, n.Spec.ProviderID))
			continue
		}
		if isReady(n) && !n.Spec.Unschedulable && op.pod.Fits(n) {
			eligible = append(eligible, n.Name)
		}
	}
	switch {
	case len(eligible) == 0:
		detail := "no node can take a gateway: none is a Ready, schedulable worker with providerID openstack:///<server-uuid> that " + op.pod.Describe()
		if len(badID) > 0 {
			detail += "; providerIDs that name no OpenStack server: " + strings.Join(badID, ", ")
		}
		r.add("nodes", Fail, detail, "run the OpenStack cloud controller manager (it sets spec.providerID), make a worker Ready, or widen gatewayPods.nodeSelector and tolerations")
	case len(badID) > 0:
		r.add("nodes", Warn, fmt.Sprintf("%d node(s) can take gateways (%s); these cannot, their providerID names no OpenStack server: %s", len(eligible), strings.Join(eligible, ", "), strings.Join(badID, ", ")),
			"set spec.providerID to openstack:///<server-uuid> (the OpenStack cloud controller manager does)")
	default:
		r.add("nodes", Pass, fmt.Sprintf("%d node(s) can take gateways: %s", len(eligible), strings.Join(eligible, ", ")), "")
	}
}

func isReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func isControlPlane(n *corev1.Node) bool {
	for _, l := range []string{"node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"} {
		if _, ok := n.Labels[l]; ok {
			return true
		}
	}
	return false
}

// What one gateway holds in the operator's project: a port, a floating IP, a security
// group, and the group's rules (the two default egress rules, IKE from each peer, the
// internal sources; five is the least a one-tunnel gateway has).
var perGateway = map[string]int{
	openstack.QuotaPort: 1, openstack.QuotaFloatingIP: 1, openstack.QuotaSecurityGroup: 1, openstack.QuotaSecurityGroupRule: 5,
}

// fewGateways: less room than this many gateways is a warning.
const fewGateways = 5

func checkOpenStack(ctx context.Context, src Sources, o Options, op operatorView, r *Report) {
	ids := []string{"openstack.auth", "openstack.extensions", "openstack.quotas", "openstack.transit-network", "openstack.router", "openstack.external-network"}
	if src.OpenStack == nil {
		for _, id := range ids {
			r.Checks = append(r.Checks, Check{ID: id, Status: Skipped, Detail: src.OpenStackSkip, Requested: src.OpenStackRequested})
		}
		return
	}
	cl := src.OpenStack
	tok, err := cl.Identity.TokenInfo(ctx)
	if err != nil {
		r.add("openstack.auth", Fail, "the credential does not authenticate: "+err.Error(), "check OS_AUTH_URL, the credential, and OS_CACERT for a private CA")
		for _, id := range ids[1:] {
			r.add(id, Skipped, "not authenticated", "")
		}
		return
	}
	r.add("openstack.auth", Pass, fmt.Sprintf("authenticated: project %s (%s), region %s, Neutron at %s", tok.ProjectName, tok.ProjectID, tok.Region, tok.NetworkEndpoint), "")

	if f, err := openstack.DiscoverFeatures(ctx, cl.Networking); err != nil {
		r.add("openstack.extensions", Fail, "cannot read Neutron's extensions: "+err.Error(), "")
	} else if m := f.Missing(); len(m) > 0 {
		r.add("openstack.extensions", Fail, "Neutron lacks extensions the operator needs: "+strings.Join(m, ", "), "enable them in Neutron (service plugins and ML2 extension drivers)")
	} else {
		r.add("openstack.extensions", Pass, "Neutron offers every extension the operator needs ("+strings.Join(openstack.RequiredExtensions, ", ")+")", "")
	}

	checkQuotas(ctx, cl, tok.ProjectID, r)

	if op.gatewayNetwork == "" {
		r.add("openstack.transit-network", Skipped, "no transit network named: give --gateway-network (the chart's gatewayNetwork, default vpn-transit)", "")
	} else if net, err := cl.Networking.ResolveNetwork(ctx, op.gatewayNetwork); err != nil {
		r.add("openstack.transit-network", Fail, "transit network "+op.gatewayNetwork+": "+err.Error(), "create it (docs/runbooks/transit-network.md) or set gatewayNetwork to its name or ID")
	} else if subs, err := cl.Networking.ListSubnets(ctx, net.ID); err != nil {
		r.add("openstack.transit-network", Fail, "transit network "+op.gatewayNetwork+": listing its subnets: "+err.Error(), "")
	} else if len(subs) != 1 {
		r.add("openstack.transit-network", Fail, fmt.Sprintf("transit network %s has %d subnets; the operator needs exactly one", op.gatewayNetwork, len(subs)), "docs/runbooks/transit-network.md")
	} else if share, err := openstack.ReadNetworkShare(ctx, cl.Networking, net.ID); err == nil && share.EveryProject() {
		r.add("openstack.transit-network", Fail, "transit network "+op.gatewayNetwork+" is shared with every project ("+share.How()+"): every ClusterLink refuses to work until the share is removed",
			"remove the share (docs/runbooks/decommission-share.md); ClusterLinks share it per project themselves")
	} else {
		r.add("openstack.transit-network", Pass, fmt.Sprintf("transit network %s (%s) with one subnet %s", op.gatewayNetwork, net.ID, subs[0].CIDR), "")
	}

	if op.router == "" {
		r.add("openstack.router", Skipped, "no router named: give --router (the chart's router value)", "")
	} else if rt, err := cl.Networking.ResolveRouter(ctx, op.router); err != nil {
		r.add("openstack.router", Fail, "router "+op.router+": "+err.Error(), "set router to this cluster's Neutron router (name or ID)")
	} else {
		r.add("openstack.router", Pass, "router "+op.router+" ("+rt.ID+")", "")
	}

	if op.externalNetwork == "" {
		r.add("openstack.external-network", Skipped, "no floating IP network named: give --external-network (the chart's externalNetwork value)", "")
	} else if net, err := cl.Networking.ResolveNetwork(ctx, op.externalNetwork); err != nil {
		r.add("openstack.external-network", Fail, "floating IP network "+op.externalNetwork+": "+err.Error(), "set externalNetwork to the network floating IPs come from")
	} else if !net.External {
		r.add("openstack.external-network", Fail, "network "+op.externalNetwork+" is not external (router:external false): no floating IP comes from it", "set externalNetwork to an external network")
	} else {
		r.add("openstack.external-network", Pass, "floating IP network "+op.externalNetwork+" ("+net.ID+") is external", "")
	}
}

func checkQuotas(ctx context.Context, cl *openstack.Clients, project string, r *Report) {
	qr, ok := cl.Networking.(openstack.QuotaReader)
	if !ok {
		r.add("openstack.quotas", Skipped, "this client cannot read quotas", "")
		return
	}
	q, err := qr.QuotaDetails(ctx, project)
	if err != nil {
		r.add("openstack.quotas", Warn, "cannot read the project's Neutron quotas: "+err.Error(), "ask the cloud's admins for the port, floating IP, security group and rule quotas")
		return
	}
	room := -1
	var parts, short []string
	for _, res := range []string{openstack.QuotaPort, openstack.QuotaFloatingIP, openstack.QuotaSecurityGroup, openstack.QuotaSecurityGroupRule} {
		u := q[res]
		if u.Headroom() < 0 {
			parts = append(parts, res+" unlimited")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %d of %d used", res, u.Used+u.Reserved, u.Limit))
		fit := u.Headroom() / perGateway[res]
		if fit < 1 {
			short = append(short, res)
		}
		if room < 0 || fit < room {
			room = fit
		}
	}
	detail := strings.Join(parts, ", ")
	switch {
	case len(short) > 0:
		r.add("openstack.quotas", Fail, "no room for one more gateway ("+strings.Join(short, ", ")+" exhausted): "+detail,
			"raise the project's Neutron quotas (openstack quota set --ports/--floating-ips/--secgroups/--secgroup-rules)")
	case room >= 0 && room < fewGateways:
		r.add("openstack.quotas", Warn, fmt.Sprintf("room for %d more gateway(s): %s", room, detail), "raise the project's Neutron quotas before more gateways are created")
	case room < 0:
		r.add("openstack.quotas", Pass, "no limit: "+detail, "")
	default:
		r.add("openstack.quotas", Pass, fmt.Sprintf("room for %d more gateway(s): %s", room, detail), "")
	}
}

// JSON renders the report.
func (r *Report) JSON() ([]byte, error) { return json.MarshalIndent(r, "", "  ") }
