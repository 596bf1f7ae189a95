package harness

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/operatorconfig"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

// Names of the estate's fixed parts.
const (
	OperatorProject = "vpn-operator"
	OperatorCred    = "vpn-operator"
	TransitNetwork  = "vpn-transit"
	PublicNetwork   = "public"
	GatewayRouter   = "shoot--services--vpn01"
	// OperatorNamespace is POD_NAMESPACE of the operator process.
	OperatorNamespace = "bnerd-vpn-system"
	// CredentialsNamespace holds cross-tenant ClusterLink Secrets.
	CredentialsNamespace = operatorconfig.DefaultClusterLinkCredentialsNamespace
)

// EstateOptions sizes the simulated cloud.
type EstateOptions struct {
	// TransitCIDR is the transit (gateway) network's one subnet; its size bounds the
	// number of gateway ports plus ClusterLink legs. Default 10.254.0.0/22.
	TransitCIDR string
	// PublicCIDR is the floating IP network; default 198.18.0.0/20.
	PublicCIDR string
	// ServiceClusters are same-tenant service cluster routers, svc000, svc001, ...
	ServiceClusters int
	// Customers are customer projects, each with one application credential and
	// RoutersPerCustomer routers.
	Customers          int
	RoutersPerCustomer int
	// Workers are Nova servers in the operator's project, worker-0, worker-1, ...
	Workers int
}

func (o *EstateOptions) defaults() {
	if o.TransitCIDR == "" {
		o.TransitCIDR = "10.254.0.0/22"
	}
	if o.PublicCIDR == "" {
		o.PublicCIDR = "198.18.0.0/20"
	}
	if o.Workers == 0 {
		o.Workers = 3
	}
	if o.RoutersPerCustomer == 0 {
		o.RoutersPerCustomer = 1
	}
}

// ServiceClusterRouter names the i-th same-tenant service cluster router.
func ServiceClusterRouter(i int) string { return fmt.Sprintf("shoot--services--svc%03d", i) }

// CustomerProject names the i-th customer project (and its application credential).
func CustomerProject(i int) string { return fmt.Sprintf("customer-%03d", i) }

// CustomerRouter names router j of customer i.
func CustomerRouter(i, j int) string { return fmt.Sprintf("shoot--customer%03d--c%02d", i, j) }

// WorkerServerID is the Nova server ID of worker i.
func WorkerServerID(i int) string { return fmt.Sprintf("%08x-0000-4000-8000-%012x", 0x5eed0000+i, i) }

// WorkerNode names worker i's Kubernetes node.
func WorkerNode(i int) string { return fmt.Sprintf("worker-%d", i) }

// Estate builds the seed: the operator's project with the transit network (its router
// leg at .1, DHCP at .2), the gateway cluster's router, the service cluster routers,
// customer projects with their routers and credentials, and the workers.
func Estate(o EstateOptions) *openstacksim.Seed {
	o.defaults()
	transit := netip.MustParsePrefix(o.TransitCIDR)
	at := func(n int) string {
		a := transit.Addr().As4()
		v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
		v += uint32(n)
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}).String()
	}
	seed := &openstacksim.Seed{
		MaxRoutes: -1,
		// Neutron's default quotas (10 security groups, 50 floating IPs, 10 RBAC policies
		// per project) would cap the gateways and cross-tenant links; a platform raises
		// them for the operator's project.
		Projects: []openstacksim.SeedProject{{Name: "admin"}, {Name: OperatorProject, Quotas: map[string]int{
			"port": -1, "security_group": -1, "security_group_rule": -1, "floatingip": -1, "rbac_policy": -1}}},
		Users: []openstacksim.SeedUser{{Name: OperatorProject, Project: OperatorProject, Roles: []string{"member"},
			AppCredentials: []openstacksim.SeedAppCredential{{Name: OperatorCred, Roles: []string{"member"}}}}},
		Networks: []openstacksim.SeedNetwork{
			{Name: PublicNetwork, Project: "admin", External: true,
				Subnets: []openstacksim.SeedSubnet{{Name: "public-subnet", CIDR: o.PublicCIDR}}},
			{Name: TransitNetwork, Project: OperatorProject,
				Subnets: []openstacksim.SeedSubnet{{Name: "vpn-transit-subnet", CIDR: o.TransitCIDR, GatewayIP: at(1)}},
				Ports:   []openstacksim.SeedPort{{Name: "vpn-transit-dhcp", FixedIP: at(2), DeviceOwner: "network:dhcp", DeviceID: "dhcp-vpn-transit"}}},
		},
		Routers: []openstacksim.SeedRouter{{Name: GatewayRouter, Project: OperatorProject, ExternalGateway: PublicNetwork,
			Interfaces: []openstacksim.SeedInterface{{Subnet: "vpn-transit-subnet", IP: at(1)}}}},
	}
	for i := 0; i < o.ServiceClusters; i++ {
		seed.Routers = append(seed.Routers, openstacksim.SeedRouter{Name: ServiceClusterRouter(i), Project: OperatorProject, ExternalGateway: PublicNetwork})
	}
	for i := 0; i < o.Customers; i++ {
		p := CustomerProject(i)
		seed.Projects = append(seed.Projects, openstacksim.SeedProject{Name: p})
		seed.Users = append(seed.Users, openstacksim.SeedUser{Name: p + "-automation", Project: p, Roles: []string{"member"},
			AppCredentials: []openstacksim.SeedAppCredential{{Name: p, Roles: []string{"member"}}}})
		for j := 0; j < o.RoutersPerCustomer; j++ {
			seed.Routers = append(seed.Routers, openstacksim.SeedRouter{Name: CustomerRouter(i, j), Project: p, ExternalGateway: PublicNetwork})
		}
	}
	for i := 0; i < o.Workers; i++ {
		seed.Servers = append(seed.Servers, openstacksim.SeedServer{Name: WorkerNode(i), ID: WorkerServerID(i), Project: OperatorProject})
	}
	return seed
}

// OperatorEnv is the operator process's environment for the simulator s and the API
// server's kubeconfig, plus extra settings (NAME=value).
func OperatorEnv(s *openstacksim.Server, kubeconfig, internalCIDR string, extra ...string) ([]string, error) {
	id, secret, ok := s.AppCredential(OperatorCred)
	if !ok {
		return nil, fmt.Errorf("the estate has no application credential %q", OperatorCred)
	}
	env := []string{
		"KUBECONFIG=" + kubeconfig,
		"OS_AUTH_URL=" + s.AuthURL(),
		"OS_REGION_NAME=" + s.Region(),
		"OS_APPLICATION_CREDENTIAL_ID=" + id,
		"OS_APPLICATION_CREDENTIAL_SECRET=" + secret,
		"POD_NAMESPACE=" + OperatorNamespace,
		"IPSEC_GATEWAY_NETWORK=" + TransitNetwork,
		"IPSEC_EXTERNAL_NETWORK=" + PublicNetwork,
		"IPSEC_ROUTER_ID=" + GatewayRouter,
		"IPSEC_INTERNAL_SOURCE_CIDRS=" + internalCIDR,
	}
	return append(env, extra...), nil
}

// CreateWorkers creates n Ready worker nodes whose providerIDs name the estate's
// servers.
func CreateWorkers(ctx context.Context, c client.Client, n int) error {
	for i := 0; i < n; i++ {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: WorkerNode(i)},
			Spec: corev1.NodeSpec{ProviderID: "openstack:///" + WorkerServerID(i)}}
		if err := c.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		if err := SetNodeReady(ctx, c, node.Name, true); err != nil {
			return err
		}
	}
	return nil
}

// SetNodeReady sets a node's Ready condition, stamping the transition now.
func SetNodeReady(ctx context.Context, c client.Client, name string, ready bool) error {
	var node corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
		return err
	}
	st := corev1.ConditionTrue
	if !ready {
		st = corev1.ConditionFalse
	}
	now := metav1.Now()
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st, LastHeartbeatTime: now, LastTransitionTime: now}}
	return c.Status().Update(ctx, &node)
}

// TenantPolicy gives the gateways of the namespaces a VPNTenantPolicy of their own (one
// tenant) that lets them expose the gateway cluster's node network (10.250.0.0/16, where
// the harnesses' exposure targets live) and hold as many gateways, tunnels and exposures
// as a harness makes. Without it every namespace would get the strict defaults.
func TenantPolicy(ctx context.Context, c client.Client, name string, namespaces ...string) error {
	big, many := int32(100000), int32(10000)
	p := &v1alpha1.VPNTenantPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.VPNTenantPolicySpec{
		NamespaceSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: namespaces}}},
		ExposureTargets: []string{"10.250.0.0/16"},
		Limits:          v1alpha1.TenantLimits{Gateways: &many, Tunnels: &big, RoutedSubnets: &many, Exposures: &big, ReverseExposurePorts: &big},
	}}
	err := c.Create(ctx, p)
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// EnsureNamespace creates a namespace if it does not exist.
func EnsureNamespace(ctx context.Context, c client.Client, name string) error {
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
