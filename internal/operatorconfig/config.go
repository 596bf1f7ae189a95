// Package operatorconfig is the operator's own configuration: which OpenStack networks,
// router and pools it manages, and the knobs the specification names. Every field has a
// flag and an environment variable; the environment is what the Helm chart sets.
package operatorconfig

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/gatewaypod"
	"bnerd.net/vpn-operator/internal/rollout"
)

// Config is the operator's configuration.
type Config struct {
	// Namespace is the operator's own namespace (POD_NAMESPACE). Gateway NetworkPolicies
	// admit any port from it.
	Namespace string
	// GatewayNetwork is the transit network (name or ID) carrying gateway ports and
	// ClusterLink legs.
	GatewayNetwork string
	// ExternalNetwork is the network floating IPs are allocated from (name or ID).
	ExternalNetwork string
	// Router is the gateway cluster's own router (name or ID): reverse-exposure routes
	// and ClusterLink forward routes go on it.
	Router string
	// ServiceCIDRPool is the pool each gateway's /24 is carved from.
	ServiceCIDRPool netip.Prefix
	// InternalSourceCIDRs are the fabric's source networks admitted to reverse exposures
	// by the gateway security group.
	InternalSourceCIDRs []netip.Prefix
	// ExposureTargetCIDRs, when not empty, is the only space exposure targets may lie
	// in (the special-purpose ranges, the pool and the gateway network are refused
	// whatever it says).
	ExposureTargetCIDRs []netip.Prefix
	// ClusterLinkSafeRoles extends the built-in list of OpenStack roles a cross-tenant
	// ClusterLink's credential may carry; any other role is refused.
	ClusterLinkSafeRoles []string
	// ClusterLinkReverseRouteMode is the reverse-route mode of a same-tenant ClusterLink
	// whose spec.reverseRouteMode is unset: "PerGateway" (the default: a route per
	// gateway on the service cluster's router) or "Aggregate" (one route for the whole
	// service-CIDR pool via the gateway cluster's router).
	ClusterLinkReverseRouteMode string
	// GatewayNetworkPolicy toggles the per-gateway <name>-nic1 NetworkPolicy.
	GatewayNetworkPolicy bool
	// GatewayImage runs strongSwan; AgentImage runs the gateway agent's roles;
	// WireGuardImage runs a WireGuard gateway's interface (the agent's wireguard role).
	GatewayImage   string
	AgentImage     string
	WireGuardImage string
	// GatewayDataplane is charon's kernel backend in every gateway pod: "kernel" (XFRM,
	// the default) or "libipsec" (userspace ESP over a TUN device, for nodes whose kernel
	// has no ESP).
	GatewayDataplane string
	// GatewayPod is the platform's shape of every gateway pod: resources per container,
	// priority class, node selector and tolerations, pull secrets and policy, extra labels
	// and annotations (the chart's gatewayPods values, as JSON).
	GatewayPod gatewaypod.Shape
	// NADTemplate is a Go text/template for the NetworkAttachmentDefinition's CNI config;
	// empty means the built-in host-device-by-MAC template.
	NADTemplate string
	// ClusterLinkCredentialsNamespace is the only namespace customer credential Secrets
	// are read from.
	ClusterLinkCredentialsNamespace string
	// ResyncInterval is the periodic re-reconcile of every object.
	ResyncInterval time.Duration
	// MaxConcurrentReconciles per controller.
	MaxConcurrentReconciles int
	// NodeNotReadyGrace is how long a gateway stays on its node after the node stopped
	// being Ready before it is moved to another one: a node that flaps back within it
	// keeps its gateways. A deleted node is left at once.
	NodeNotReadyGrace time.Duration
	// GatewayLivenessTimeout is how long a gateway pod's status agent may go without
	// renewing the gateway's liveness Lease (it renews every third of it) before the
	// operator counts the pod silent; a node all of whose gateway pods are silent while
	// the API server still calls them ready is declared failed and its gateways move at
	// once, without waiting for NotReady. Zero turns the Lease and the detection off.
	GatewayLivenessTimeout time.Duration
	// NodeMaxGateways is the most gateways the operator places on one node (0: no
	// limit): each takes a NIC slot of the node's server, and a server has a bounded
	// number. New gateways go to the eligible node holding the fewest.
	NodeMaxGateways int
	// OpenStackQPS and OpenStackBurst pace the operator's OpenStack requests (QPS 0: not
	// paced), to stay under the cloud's API rate limit.
	OpenStackQPS   float64
	OpenStackBurst int
	// OpenStackTimeout bounds each OpenStack request: a hung request holds a worker no
	// longer than this.
	OpenStackTimeout time.Duration
	// StatusAgentStaleAfter is how old a gateway status agent's heartbeat
	// (status.tunnelsObservedTime) may be before its report is stale: TunnelsUp turns
	// Unknown/StatusAgentSilent and Ready with it. The agent writes one at least every
	// DefaultStatusAgentHeartbeat, so the default tolerates two missed heartbeats.
	StatusAgentStaleAfter time.Duration
	// GatewayRolloutBudget is how many gateways may restart at once when the operator's
	// own rendering of their pods changes (new images, new pod settings): "N" or "N%" of
	// the gateways, after one canary (internal/rollout).
	GatewayRolloutBudget string
	// GatewayRolloutTimeout is how long a restarted gateway has to come back (pod ready,
	// the tunnels that were up before up again) before the rollout halts on it.
	GatewayRolloutTimeout time.Duration
	// WireGuardKeyOverlap is how long a rotated WireGuard key keeps serving beside the
	// new one at the longest: a platform's bound on how long a replaced key stays valid.
	WireGuardKeyOverlap time.Duration
}

// Defaults from the specification.
const (
	DefaultServiceCIDRPool                 = "100.64.0.0/16"
	DefaultClusterLinkCredentialsNamespace = "bnerd-vpn-clusterlinks"
	// DefaultClusterLinkReverseRouteMode keeps the specification's route per gateway:
	// an upgrade does not change what a service cluster's router carries.
	DefaultClusterLinkReverseRouteMode = "PerGateway"
	DefaultResyncInterval              = 5 * time.Minute
	DefaultGatewayNetwork              = "vpn-transit"
	DefaultGatewayImage                = "ghcr.io/bnerd/bnerd-vpn-gateway:v0.1.0"
	DefaultAgentImage                  = "ghcr.io/bnerd/bnerd-vpn-status-agent:v0.1.0"
	DefaultNodeNotReadyGrace           = 5 * time.Second
	DefaultGatewayLivenessTimeout      = 6 * time.Second
	DefaultOpenStackTimeout            = 30 * time.Second
	DefaultWireGuardImage              = "ghcr.io/bnerd/bnerd-vpn-gateway-wireguard:v0.1.0"
	DefaultGatewayDataplane            = "kernel"
	DefaultGatewayRolloutBudget        = "10%"
	DefaultGatewayRolloutTimeout       = 10 * time.Minute
	// DefaultWireGuardKeyOverlap gives clients a week to configure a rotated key.
	DefaultWireGuardKeyOverlap = 7 * 24 * time.Hour
)

// The status agent's heartbeat and the age at which the operator calls its report stale.
const (
	// DefaultStatusAgentHeartbeat is how often a gateway's status agent confirms its
	// report when nothing changed (the pod's contract, package gatewayconfig).
	DefaultStatusAgentHeartbeat = gatewayconfig.DefaultStatusAgentHeartbeat
	// DefaultStatusAgentStaleAfter is three heartbeats.
	DefaultStatusAgentStaleAfter = 3 * DefaultStatusAgentHeartbeat
)

// Default returns the configuration with every default applied and nothing read.
func Default() Config {
	return Config{
		GatewayNetwork:                  DefaultGatewayNetwork,
		ServiceCIDRPool:                 netip.MustParsePrefix(DefaultServiceCIDRPool),
		GatewayNetworkPolicy:            true,
		GatewayImage:                    DefaultGatewayImage,
		AgentImage:                      DefaultAgentImage,
		WireGuardImage:                  DefaultWireGuardImage,
		GatewayDataplane:                DefaultGatewayDataplane,
		GatewayPod:                      gatewaypod.DefaultShape(),
		ClusterLinkCredentialsNamespace: DefaultClusterLinkCredentialsNamespace,
		ClusterLinkReverseRouteMode:     DefaultClusterLinkReverseRouteMode,
		ResyncInterval:                  DefaultResyncInterval,
		MaxConcurrentReconciles:         4,
		NodeNotReadyGrace:               DefaultNodeNotReadyGrace,
		GatewayLivenessTimeout:          DefaultGatewayLivenessTimeout,
		OpenStackTimeout:                DefaultOpenStackTimeout,
		StatusAgentStaleAfter:           DefaultStatusAgentStaleAfter,
		GatewayRolloutBudget:            DefaultGatewayRolloutBudget,
		GatewayRolloutTimeout:           DefaultGatewayRolloutTimeout,
		WireGuardKeyOverlap:             DefaultWireGuardKeyOverlap,
	}
}

// Load reads the environment, then the flags (a flag wins over its variable).
func Load(fs *flag.FlagSet, args []string, getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	c := Default()
	var pool, internal, targets, roles, resync, netpol, conc, stale, grace, liveness, maxGW, osQPS, osBurst, osTimeout, podShape, rolloutTimeout, keyOverlap string
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	fs.StringVar(&c.Namespace, "namespace", env("POD_NAMESPACE", ""), "operator namespace (POD_NAMESPACE)")
	fs.StringVar(&c.GatewayNetwork, "gateway-network", env("IPSEC_GATEWAY_NETWORK", c.GatewayNetwork), "transit network name or ID (IPSEC_GATEWAY_NETWORK)")
	fs.StringVar(&c.ExternalNetwork, "external-network", env("IPSEC_EXTERNAL_NETWORK", ""), "floating IP network name or ID (IPSEC_EXTERNAL_NETWORK)")
	fs.StringVar(&c.Router, "router", env("IPSEC_ROUTER_ID", ""), "gateway cluster router name or ID (IPSEC_ROUTER_ID)")
	fs.StringVar(&pool, "service-cidr-pool", env("IPSEC_SERVICE_CIDR_POOL", DefaultServiceCIDRPool), "pool of gateway /24s (IPSEC_SERVICE_CIDR_POOL)")
	fs.StringVar(&internal, "internal-source-cidrs", env("IPSEC_INTERNAL_SOURCE_CIDRS", ""), "comma-separated fabric source CIDRs admitted to reverse exposures (IPSEC_INTERNAL_SOURCE_CIDRS)")
	fs.StringVar(&targets, "exposure-target-cidrs", env("IPSEC_EXPOSURE_TARGET_CIDRS", ""), "comma-separated CIDRs exposure targets must lie in; empty allows any address outside the refused ranges (IPSEC_EXPOSURE_TARGET_CIDRS)")
	fs.StringVar(&roles, "clusterlink-safe-roles", env("IPSEC_CLUSTERLINK_SAFE_ROLES", ""), "comma-separated OpenStack roles a ClusterLink customer credential may carry besides the built-in member roles (IPSEC_CLUSTERLINK_SAFE_ROLES)")
	fs.StringVar(&c.ClusterLinkReverseRouteMode, "clusterlink-reverse-route-mode", env("IPSEC_CLUSTERLINK_REVERSE_ROUTE_MODE", c.ClusterLinkReverseRouteMode), "reverse-route mode of a same-tenant ClusterLink that sets none: PerGateway or Aggregate (IPSEC_CLUSTERLINK_REVERSE_ROUTE_MODE)")
	fs.StringVar(&netpol, "gateway-network-policy", env("IPSEC_GATEWAY_NETWORKPOLICY_ENABLED", "true"), "create the <name>-nic1 NetworkPolicy (IPSEC_GATEWAY_NETWORKPOLICY_ENABLED)")
	fs.StringVar(&c.GatewayImage, "gateway-image", env("IPSEC_GATEWAY_IMAGE", c.GatewayImage), "strongSwan image (IPSEC_GATEWAY_IMAGE)")
	fs.StringVar(&c.AgentImage, "agent-image", env("IPSEC_AGENT_IMAGE", c.AgentImage), "gateway agent image (IPSEC_AGENT_IMAGE)")
	fs.StringVar(&c.WireGuardImage, "gateway-wireguard-image", env("IPSEC_GATEWAY_WIREGUARD_IMAGE", c.WireGuardImage), "WireGuard gateway image (IPSEC_GATEWAY_WIREGUARD_IMAGE)")
	fs.StringVar(&c.GatewayDataplane, "gateway-dataplane", env("IPSEC_GATEWAY_DATAPLANE", c.GatewayDataplane), "gateway pods' IPsec dataplane: kernel or libipsec (IPSEC_GATEWAY_DATAPLANE)")
	fs.StringVar(&podShape, "gateway-pod", env("IPSEC_GATEWAY_POD", ""), "shape of every gateway pod as JSON: resources per container, priorityClassName, nodeSelector, tolerations, imagePullSecrets, imagePullPolicy, labels, annotations; empty: the default resources (IPSEC_GATEWAY_POD)")
	fs.StringVar(&c.NADTemplate, "nad-template", env("IPSEC_NAD_TEMPLATE", ""), "NetworkAttachmentDefinition config template (IPSEC_NAD_TEMPLATE)")
	fs.StringVar(&c.ClusterLinkCredentialsNamespace, "clusterlink-credentials-namespace", env("IPSEC_CLUSTERLINK_CREDENTIALS_NAMESPACE", c.ClusterLinkCredentialsNamespace), "namespace of ClusterLink customer credentials (IPSEC_CLUSTERLINK_CREDENTIALS_NAMESPACE)")
	fs.StringVar(&resync, "resync-interval", env("IPSEC_RESYNC_INTERVAL", c.ResyncInterval.String()), "periodic resync (IPSEC_RESYNC_INTERVAL)")
	fs.StringVar(&conc, "max-concurrent-reconciles", env("IPSEC_MAX_CONCURRENT_RECONCILES", strconv.Itoa(c.MaxConcurrentReconciles)), "workers per controller (IPSEC_MAX_CONCURRENT_RECONCILES)")
	fs.StringVar(&grace, "node-not-ready-grace", env("IPSEC_NODE_NOT_READY_GRACE", c.NodeNotReadyGrace.String()), "how long a gateway stays on a node that stopped being Ready before it moves (IPSEC_NODE_NOT_READY_GRACE)")
	fs.StringVar(&liveness, "gateway-liveness-timeout", env("IPSEC_GATEWAY_LIVENESS_TIMEOUT", c.GatewayLivenessTimeout.String()), "how long a gateway pod may go without renewing its liveness Lease before its node counts as failed, 0 to turn off (IPSEC_GATEWAY_LIVENESS_TIMEOUT)")
	fs.StringVar(&maxGW, "node-max-gateways", env("IPSEC_NODE_MAX_GATEWAYS", "0"), "most gateways on one node, 0 for no limit (IPSEC_NODE_MAX_GATEWAYS)")
	fs.StringVar(&osQPS, "openstack-qps", env("IPSEC_OPENSTACK_QPS", "0"), "OpenStack requests per second, 0 for unpaced (IPSEC_OPENSTACK_QPS)")
	fs.StringVar(&osBurst, "openstack-burst", env("IPSEC_OPENSTACK_BURST", "0"), "OpenStack request burst above the QPS (IPSEC_OPENSTACK_BURST)")
	fs.StringVar(&osTimeout, "openstack-timeout", env("IPSEC_OPENSTACK_TIMEOUT", c.OpenStackTimeout.String()), "bound of each OpenStack request (IPSEC_OPENSTACK_TIMEOUT)")
	fs.StringVar(&stale, "status-agent-stale-after", env("IPSEC_STATUS_AGENT_STALE_AFTER", c.StatusAgentStaleAfter.String()), "age of a status agent's heartbeat after which its tunnel report is stale (IPSEC_STATUS_AGENT_STALE_AFTER)")
	fs.StringVar(&c.GatewayRolloutBudget, "gateway-rollout-budget", env("IPSEC_GATEWAY_ROLLOUT_BUDGET", c.GatewayRolloutBudget), "gateways restarting at once when the operator's rendering of their pods changes, N or N% after one canary (IPSEC_GATEWAY_ROLLOUT_BUDGET)")
	fs.StringVar(&rolloutTimeout, "gateway-rollout-timeout", env("IPSEC_GATEWAY_ROLLOUT_TIMEOUT", c.GatewayRolloutTimeout.String()), "how long a restarted gateway has to come back before the rollout halts (IPSEC_GATEWAY_ROLLOUT_TIMEOUT)")
	fs.StringVar(&keyOverlap, "wireguard-key-overlap", env("IPSEC_WIREGUARD_KEY_OVERLAP", c.WireGuardKeyOverlap.String()), "how long a rotated WireGuard key keeps serving beside the new one at the longest (IPSEC_WIREGUARD_KEY_OVERLAP)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}

	var err error
	if c.ServiceCIDRPool, err = netip.ParsePrefix(pool); err != nil || !c.ServiceCIDRPool.Addr().Is4() || c.ServiceCIDRPool.Bits() > 24 || c.ServiceCIDRPool.Masked() != c.ServiceCIDRPool {
		return c, fmt.Errorf("service CIDR pool %q: must be an IPv4 network of /24 or larger with no host bits set", pool)
	}
	if c.InternalSourceCIDRs, err = ParseCIDRList(internal); err != nil {
		return c, fmt.Errorf("internal source CIDRs: %w", err)
	}
	if c.ExposureTargetCIDRs, err = ParseCIDRList(targets); err != nil {
		return c, fmt.Errorf("exposure target CIDRs: %w", err)
	}
	for _, r := range strings.Split(roles, ",") {
		if r = strings.TrimSpace(r); r != "" {
			c.ClusterLinkSafeRoles = append(c.ClusterLinkSafeRoles, r)
		}
	}
	if c.GatewayNetworkPolicy, err = strconv.ParseBool(netpol); err != nil {
		return c, fmt.Errorf("gateway network policy switch %q: %w", netpol, err)
	}
	if c.ClusterLinkReverseRouteMode != "PerGateway" && c.ClusterLinkReverseRouteMode != "Aggregate" {
		return c, fmt.Errorf("ClusterLink reverse-route mode %q: must be PerGateway or Aggregate", c.ClusterLinkReverseRouteMode)
	}
	if c.GatewayDataplane != "kernel" && c.GatewayDataplane != "libipsec" {
		return c, fmt.Errorf("gateway dataplane %q: must be kernel or libipsec", c.GatewayDataplane)
	}
	if c.GatewayPod, err = gatewaypod.Parse(podShape); err != nil {
		return c, err
	}
	if c.ResyncInterval, err = time.ParseDuration(resync); err != nil || c.ResyncInterval <= 0 {
		return c, fmt.Errorf("resync interval %q: must be a positive duration", resync)
	}
	if c.StatusAgentStaleAfter, err = time.ParseDuration(stale); err != nil || c.StatusAgentStaleAfter <= DefaultStatusAgentHeartbeat {
		return c, fmt.Errorf("status agent stale-after %q: must be a duration longer than the agent's heartbeat (%s)", stale, DefaultStatusAgentHeartbeat)
	}
	if c.MaxConcurrentReconciles, err = strconv.Atoi(conc); err != nil || c.MaxConcurrentReconciles < 1 {
		return c, fmt.Errorf("max concurrent reconciles %q: must be a positive integer", conc)
	}
	if c.NodeNotReadyGrace, err = time.ParseDuration(grace); err != nil || c.NodeNotReadyGrace < 0 {
		return c, fmt.Errorf("node not-ready grace %q: must be a duration of zero or more", grace)
	}
	if c.GatewayLivenessTimeout, err = time.ParseDuration(liveness); err != nil || c.GatewayLivenessTimeout != 0 && c.GatewayLivenessTimeout < 3*time.Second {
		return c, fmt.Errorf("gateway liveness timeout %q: must be 0 (off) or a duration of at least 3s (the pod renews every third of it)", liveness)
	}
	if c.NodeMaxGateways, err = strconv.Atoi(maxGW); err != nil || c.NodeMaxGateways < 0 {
		return c, fmt.Errorf("node max gateways %q: must be an integer of zero or more", maxGW)
	}
	if c.OpenStackQPS, err = strconv.ParseFloat(osQPS, 64); err != nil || c.OpenStackQPS < 0 {
		return c, fmt.Errorf("OpenStack QPS %q: must be a number of zero or more", osQPS)
	}
	if c.OpenStackBurst, err = strconv.Atoi(osBurst); err != nil || c.OpenStackBurst < 0 {
		return c, fmt.Errorf("OpenStack burst %q: must be an integer of zero or more", osBurst)
	}
	if c.OpenStackTimeout, err = time.ParseDuration(osTimeout); err != nil || c.OpenStackTimeout <= 0 {
		return c, fmt.Errorf("OpenStack timeout %q: must be a positive duration", osTimeout)
	}
	if _, err := rollout.ParseBudget(c.GatewayRolloutBudget); err != nil {
		return c, err
	}
	if c.WireGuardKeyOverlap, err = time.ParseDuration(keyOverlap); err != nil || c.WireGuardKeyOverlap <= 0 {
		return c, fmt.Errorf("WireGuard key overlap %q: must be a positive duration", keyOverlap)
	}
	if c.GatewayRolloutTimeout, err = time.ParseDuration(rolloutTimeout); err != nil || c.GatewayRolloutTimeout <= 0 {
		return c, fmt.Errorf("gateway rollout timeout %q: must be a positive duration", rolloutTimeout)
	}
	return c, nil
}

// Required checks what the operator binary cannot run without, so a missing setting is
// one clear error at start instead of a condition on every gateway later.
func (c Config) Required() error {
	var missing []string
	if c.GatewayNetwork == "" {
		missing = append(missing, "the gateway network (--gateway-network / IPSEC_GATEWAY_NETWORK)")
	}
	if c.ExternalNetwork == "" {
		missing = append(missing, "the external network for floating IPs (--external-network / IPSEC_EXTERNAL_NETWORK)")
	}
	if c.Router == "" {
		missing = append(missing, "the gateway cluster's router (--router / IPSEC_ROUTER_ID)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing configuration: %s", strings.Join(missing, "; "))
	}
	return nil
}

// ParseCIDRList parses a comma-separated list of IPv4 CIDRs; blanks are ignored.
func ParseCIDRList(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil || !p.Addr().Is4() || p.Masked() != p {
			return nil, fmt.Errorf("%q is not an IPv4 network in CIDR notation", f)
		}
		out = append(out, p)
	}
	return out, nil
}
