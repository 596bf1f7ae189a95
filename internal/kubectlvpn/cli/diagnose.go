package cli

import (
	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"bnerd.net/vpn-operator/internal/kubectlvpn/diagnose"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/version"
)

// cloudsYAMLPaths are where the OpenStack client looks for clouds.yaml, after
// OS_CLIENT_CONFIG_FILE.
func cloudsYAMLPaths(getenv func(string) string) []string {
	var out []string
	if p := getenv("OS_CLIENT_CONFIG_FILE"); p != "" {
		return []string{p}
	}
	out = append(out, "clouds.yaml")
	if home := getenv("HOME"); home != "" {
		out = append(out, filepath.Join(home, ".config", "openstack", "clouds.yaml"))
	}
	return append(out, "/etc/openstack/clouds.yaml")
}

// openstackCredential reads the credential the way the operator does: a clouds.yaml
// entry when a cloud is named (flag --os-cloud or OS_CLOUD), else the OS_* variables;
// with the TLS settings of a private CA (OS_CACERT or the entry's cacert). ok is false
// (with the reason) when neither is there.
func openstackCredential(getenv func(string) string, cloud string) (openstack.Credential, *tls.Config, bool, error) {
	env := func(k string) string {
		if k == "OS_CLOUD" && cloud != "" {
			return cloud
		}
		return getenv(k)
	}
	if env("OS_CLOUD") == "" && getenv("OS_AUTH_URL") == "" {
		return openstack.Credential{}, nil, false, nil
	}
	c, tlsConfig, err := openstack.LoadCloud(env, os.ReadFile, cloudsYAMLPaths(getenv)...)
	return c, tlsConfig, err == nil, err
}

func newDiagnose(g *global) *cobra.Command {
	var kind, router, cloud, output string
	var skipOpenStack, skipExporter bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "diagnose <gateway>",
		Short: "Find the first thing wrong with a gateway and the runbook step that fixes it",
		Long: `diagnose walks a gateway from its conditions down to its tunnels: each phase
condition in reconcile order; in OpenStack the port, its attachment to the pinned node's
server, the security group's IKE rules, the floating IP, the reverse-exposure route and
the transit network's sharing; the node and the gateway pod; the status agent's view of
the tunnels; and through the API server's pod proxy the exporter's view of charon and NAT.
It prints the first problem with its fix and the runbook section, then every check.

It only reads. OpenStack access: OS_CLOUD (or --os-cloud) with a clouds.yaml
(OS_CLIENT_CONFIG_FILE, ./clouds.yaml, ~/.config/openstack/clouds.yaml,
/etc/openstack/clouds.yaml), else the OS_* variables; a reader-role application
credential of the operator's project is enough. Kubernetes access: get on the gateway
kinds, nodes, deployments, pods, events, and get on pods/proxy for the exporter.

Exit status: 0 all is well; 1 a problem or warning was found; 2 the diagnosis is
incomplete (checks skipped: no OpenStack credential, exporter unreachable) or failed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, err := g.namespace()
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return &ExitError{Code: ExitIncomplete, Err: err}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			src := diagnose.Sources{Kube: c, Router: router, SkipOpenStack: skipOpenStack, SkipExporter: skipExporter}
			if !skipOpenStack {
				cred, tlsConfig, ok, err := openstackCredential(g.io.Getenv, cloud)
				switch {
				case err != nil:
					src.OpenStackSkipReason = "OpenStack credential: " + err.Error()
				case !ok:
					src.OpenStackSkipReason = "no OpenStack credential: set OS_CLOUD (with a clouds.yaml) or the OS_* variables, or pass --skip-openstack"
				default:
					clients, err := openstack.NewClients(ctx, cred, openstack.ClientOptions{UserAgent: "kubectl-vpn/" + version.Version, Timeout: 30 * time.Second, TLSConfig: tlsConfig})
					if err != nil {
						src.OpenStackSkipReason = "authenticating to OpenStack: " + err.Error()
					} else {
						src.OpenStack = diagnose.ReadOnly(clients)
					}
				}
			}
			if !skipExporter {
				rc, err := g.rest()
				if err != nil {
					return &ExitError{Code: ExitIncomplete, Err: err}
				}
				cs, err := kubernetes.NewForConfig(rc)
				if err != nil {
					return &ExitError{Code: ExitIncomplete, Err: err}
				}
				src.Metrics = func(ctx context.Context, ns, pod string) ([]byte, error) {
					return cs.CoreV1().Pods(ns).ProxyGet("http", pod, strconv.Itoa(render.MetricsPort), "/metrics", nil).DoRaw(ctx)
				}
			}
			k, err := kindFlag(kind)
			if err != nil {
				return &ExitError{Code: ExitIncomplete, Err: err}
			}
			rep, err := diagnose.Diagnose(ctx, src, k, ns, args[0])
			if err != nil {
				return &ExitError{Code: ExitIncomplete, Err: err}
			}
			switch output {
			case "json":
				enc := json.NewEncoder(g.io.Out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			case "", "text":
				rep.Write(g.io.Out)
			default:
				return &ExitError{Code: ExitIncomplete, Err: fmt.Errorf("--output %q: text or json", output)}
			}
			return exitFor(rep)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kind, "kind", "", "gateway kind: ipsecgateway or vpngateway (default: whichever exists)")
	f.StringVar(&router, "router", "", "the gateway cluster's router (name or ID) for the reverse-exposure route check (default: every router of the port's project)")
	f.StringVar(&cloud, "os-cloud", "", "clouds.yaml entry to use (default $OS_CLOUD)")
	f.BoolVar(&skipOpenStack, "skip-openstack", false, "do not check OpenStack (no credential at hand)")
	f.BoolVar(&skipExporter, "skip-exporter", false, "do not read the gateway pod's exporter through the API server's pod proxy")
	f.StringVarP(&output, "output", "o", "text", "text or json")
	f.DurationVar(&timeout, "timeout", time.Minute, "give up after this long")
	return cmd
}

// exitFor maps a report to the exit status: 0 all is well (checks skipped on request
// aside), 1 a problem or warning, 2 checks skipped for lack of access.
func exitFor(rep *diagnose.Report) error {
	switch {
	case rep.First() != nil:
		return &ExitError{Code: ExitProblem}
	case !rep.Healthy():
		return &ExitError{Code: ExitIncomplete}
	}
	return nil
}

func kindFlag(k string) (string, error) {
	switch strings.ToLower(k) {
	case "":
		return "", nil
	case "ipsecgateway", "ipsecgateways", "ipsecgw", "ipgw":
		return v1alpha1.KindIPsecGateway, nil
	case "vpngateway", "vpngateways", "vpngw":
		return v1alpha1.KindVPNGateway, nil
	}
	return "", fmt.Errorf("--kind %q: ipsecgateway or vpngateway", k)
}
