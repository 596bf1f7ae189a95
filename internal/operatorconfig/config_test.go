package operatorconfig

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestLoadDefaultsEnvAndFlags(t *testing.T) {
	env := map[string]string{
		"POD_NAMESPACE":                           "bnerd-vpn",
		"IPSEC_INTERNAL_SOURCE_CIDRS":             "10.254.0.0/24, 10.251.0.0/16",
		"IPSEC_CLUSTERLINK_CREDENTIALS_NAMESPACE": "creds",
		"IPSEC_RESYNC_INTERVAL":                   "30s",
		"IPSEC_STATUS_AGENT_STALE_AFTER":          "5m",
		"IPSEC_GATEWAY_DATAPLANE":                 "libipsec",
	}
	c, err := Load(flag.NewFlagSet("t", flag.ContinueOnError), []string{"--router", "r1"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.Namespace != "bnerd-vpn" || c.Router != "r1" || c.ClusterLinkCredentialsNamespace != "creds" ||
		c.ResyncInterval != 30*time.Second || len(c.InternalSourceCIDRs) != 2 ||
		c.ServiceCIDRPool.String() != "100.64.0.0/16" || !c.GatewayNetworkPolicy || c.StatusAgentStaleAfter != 5*time.Minute || c.GatewayDataplane != "libipsec" ||
		c.NodeNotReadyGrace != DefaultNodeNotReadyGrace || c.OpenStackTimeout != DefaultOpenStackTimeout || c.OpenStackQPS != 0 {
		t.Fatalf("unexpected config %+v", c)
	}
}

func TestLoadRefusesBadValues(t *testing.T) {
	for env, want := range map[string]string{
		"IPSEC_SERVICE_CIDR_POOL=100.64.0.0/25":       "/24 or larger",
		"IPSEC_INTERNAL_SOURCE_CIDRS=10.0.0.1/8":      "not an IPv4 network",
		"IPSEC_GATEWAY_NETWORKPOLICY_ENABLED=perhaps": "network policy",
		"IPSEC_RESYNC_INTERVAL=-1s":                   "positive duration",
		"IPSEC_MAX_CONCURRENT_RECONCILES=0":           "positive integer",
		"IPSEC_NODE_NOT_READY_GRACE=-1s":              "zero or more",
		"IPSEC_OPENSTACK_QPS=fast":                    "number of zero or more",
		"IPSEC_OPENSTACK_BURST=-3":                    "integer of zero or more",
		"IPSEC_OPENSTACK_TIMEOUT=0s":                  "positive duration",
		"IPSEC_STATUS_AGENT_STALE_AFTER=30s":          "longer than the agent's heartbeat",
		"IPSEC_GATEWAY_DATAPLANE=wireguard":           "kernel or libipsec",
		"IPSEC_WIREGUARD_KEY_OVERLAP=0s":              "WireGuard key overlap",
	} {
		k, v, _ := strings.Cut(env, "=")
		_, err := Load(flag.NewFlagSet("t", flag.ContinueOnError), nil, func(n string) string {
			if n == k {
				return v
			}
			return ""
		})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: want error containing %q, got %v", env, want, err)
		}
	}
}

func TestRequired(t *testing.T) {
	c := Default()
	err := c.Required()
	if err == nil || !strings.Contains(err.Error(), "IPSEC_EXTERNAL_NETWORK") || !strings.Contains(err.Error(), "IPSEC_ROUTER_ID") {
		t.Fatalf("missing settings must be named: %v", err)
	}
	c.ExternalNetwork, c.Router = "public", "r1"
	if err := c.Required(); err != nil {
		t.Fatalf("complete config refused: %v", err)
	}
}
