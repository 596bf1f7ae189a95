package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"bnerd.net/vpn-operator/internal/clustercheck"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/version"
)

func newCheck(g *global) *cobra.Command {
	var o clustercheck.Options
	var cloud, output string
	var skipOpenStack bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check that a cluster meets the operator's prerequisites, and print what is missing",
		Long: `check verifies what docs/install.md asks of a cluster, before the install and after
it: the IPsecGateway, VPNGateway and ClusterLink CRDs; Multus (its
NetworkAttachmentDefinition CRD); Cilium's cni-exclusive; the operator's Deployment
and its OpenStack credential Secret (complete, never printed); the PodSecurity level of
every gateway namespace (the namespaces that hold gateways and those named with
--gateway-namespace); the gateway pods' image pull secrets there; nodes a gateway can
be placed on (Ready workers whose providerID names an OpenStack server). With an
OpenStack credential (OS_CLOUD or --os-cloud with a clouds.yaml, else the OS_*
variables; OS_CACERT for a private CA) it also checks Neutron's extensions, the
project's quotas, the transit network, the router and the floating IP network; a
reader-role application credential of the operator's project is enough.

Before the install, name what the operator's Deployment would say:
  kubectl vpn check --credential-secret operator-openstack --gateway-namespace tenant-a \
    --router <router> --external-network <network> --gateway-network vpn-transit

It only reads. Kubernetes access: get CustomResourceDefinitions, list IPsecGateways and
VPNGateways, get namespaces, list nodes, list deployments and get secrets in the
operator's namespace, get secrets in the gateway namespaces (pull secrets, metadata
only), get kube-system/cilium-config.

Exit status: 0 every check passed; 1 something is missing or wrong; 2 the check is
incomplete (checks skipped: no OpenStack credential, no permission).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return &ExitError{Code: ExitIncomplete, Err: err}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			src := clustercheck.Sources{Kube: c, OpenStackRequested: skipOpenStack}
			switch {
			case skipOpenStack:
				src.OpenStackSkip = "skipped on request (--skip-openstack)"
			default:
				cred, tlsConfig, ok, err := openstackCredential(g.io.Getenv, cloud)
				switch {
				case err != nil:
					src.OpenStackSkip = "OpenStack credential: " + err.Error()
				case !ok:
					src.OpenStackSkip = "no OpenStack credential: set OS_CLOUD (with a clouds.yaml) or the OS_* variables, or pass --skip-openstack"
				default:
					clients, err := openstack.NewClients(ctx, cred, openstack.ClientOptions{UserAgent: "kubectl-vpn/" + version.Version, Timeout: 30 * time.Second, TLSConfig: tlsConfig})
					if err != nil {
						src.OpenStackSkip = "authenticating to OpenStack: " + err.Error()
					} else {
						src.OpenStack = clients
					}
				}
			}
			rep := clustercheck.Run(ctx, src, o)
			switch output {
			case "json":
				b, err := rep.JSON()
				if err != nil {
					return err
				}
				fmt.Fprintln(g.io.Out, string(b))
			case "text":
				if err := rep.WriteText(g.io.Out); err != nil {
					return err
				}
			default:
				return &ExitError{Code: ExitIncomplete, Err: fmt.Errorf("-o %q: want text or json", output)}
			}
			switch {
			case len(rep.Problems()) > 0:
				return &ExitError{Code: ExitProblem, Err: fmt.Errorf("%d prerequisite(s) missing or wrong", len(rep.Problems()))}
			case rep.Incomplete():
				return &ExitError{Code: ExitIncomplete, Err: fmt.Errorf("the check is incomplete")}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.OperatorNamespace, "operator-namespace", clustercheck.DefaultOperatorNamespace, "the operator's release namespace")
	f.StringVar(&o.CredentialSecret, "credential-secret", "", "the operator's OpenStack credential Secret in that namespace, when no operator Deployment names it (before the install)")
	f.StringSliceVar(&o.GatewayNamespaces, "gateway-namespace", nil, "a namespace gateways will live in, besides those that hold gateways (repeatable)")
	f.StringVar(&o.Router, "router", "", "the Neutron router (the chart's router value), when no operator Deployment gives it")
	f.StringVar(&o.ExternalNetwork, "external-network", "", "the floating IP network (the chart's externalNetwork), when no operator Deployment gives it")
	f.StringVar(&o.GatewayNetwork, "gateway-network", "", "the transit network (the chart's gatewayNetwork), when no operator Deployment gives it")
	f.StringVar(&cloud, "os-cloud", "", "clouds.yaml entry to use (default $OS_CLOUD)")
	f.BoolVar(&skipOpenStack, "skip-openstack", false, "do not check OpenStack")
	f.StringVarP(&output, "output", "o", "text", "text or json")
	f.DurationVar(&timeout, "timeout", 2*time.Minute, "how long the whole check may take")
	return cmd
}
