// Package cli is the `kubectl vpn` plugin's command tree (cmd/kubectl-vpn is its
// main): check, diagnose, peer-config, migrate and tenant, over internal/clustercheck and
// the pure builders of internal/kubectlvpn/diagnose, internal/kubectlvpn/peerconfig and internal/kubectlvpn/migrate.
// Cluster access follows kubectl's own flags and kubeconfig; OpenStack access (check and
// diagnose, read-only) follows the operator's: OS_CLOUD with a clouds.yaml, or OS_*
// variables, with OS_CACERT for a private CA.
package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/version"
)

// Exit codes of the plugin.
const (
	ExitOK         = 0 // all is well / done
	ExitProblem    = 1 // diagnose found a problem; migrate could carry nothing over
	ExitIncomplete = 2 // the command could not do its whole job (unreadable source, skipped checks, usage)
)

// ExitError carries an exit code through cobra.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit %d", e.Code)
	}
	return e.Err.Error()
}
func (e *ExitError) Unwrap() error { return e.Err }

// Code returns the exit code for an error Execute returned.
func Code(err error) int {
	if err == nil {
		return ExitOK
	}
	var e *ExitError
	if errors.As(err, &e) {
		return e.Code
	}
	return ExitIncomplete
}

// IO are the command's streams and environment.
type IO struct {
	Out, Err io.Writer
	// Getenv reads the environment (os.Getenv in the binary).
	Getenv func(string) string
}

// options shared by the subcommands.
type global struct {
	io        IO
	kube      clientcmd.ClientConfig
	overrides *clientcmd.ConfigOverrides
	// restConfig, when set, replaces the kubeconfig (tests).
	restConfig *rest.Config
}

func (g *global) rest() (*rest.Config, error) {
	if g.restConfig != nil {
		return g.restConfig, nil
	}
	return g.kube.ClientConfig()
}

func (g *global) namespace() (string, error) {
	if g.overrides.Context.Namespace != "" {
		return g.overrides.Context.Namespace, nil
	}
	ns, _, err := g.kube.Namespace()
	if err != nil || ns == "" {
		return "default", nil
	}
	return ns, nil
}

func (g *global) client() (client.Client, error) {
	cfg, err := g.rest()
	if err != nil {
		return nil, err
	}
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: s})
}

// NewCommand builds the command tree. restConfig, when non-nil, is used instead of the
// kubeconfig (tests against a control plane).
func NewCommand(streams IO, restConfig *rest.Config) *cobra.Command {
	g := &global{io: streams, overrides: &clientcmd.ConfigOverrides{}, restConfig: restConfig}
	root := &cobra.Command{
		Use:   "kubectl-vpn",
		Short: "Operate bnerd-vpn-operator gateways: check the cluster, diagnose them, write a client's side, migrate a VM gateway, show a tenant's usage",
		Long: `kubectl vpn operates the gateways of bnerd-vpn-operator.

  kubectl vpn check                                 what the cluster lacks for the operator
  kubectl vpn diagnose <gateway>                    what is wrong first, and the fix
  kubectl vpn peer-config <gateway> --tunnel <t> --format <f>
                                                    the client's side of a tunnel
  kubectl vpn migrate --from <swanctl.conf|ipsec.conf> --name <gateway>
                                                    an IPsecGateway from a VM gateway
  kubectl vpn tenant [namespace]                    the tenant policy and its usage

Install: put the kubectl-vpn binary on your PATH (go install ./cmd/kubectl-vpn from a
checkout, or a krew manifest); kubectl finds it as "kubectl vpn".`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Version,
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.Err)
	loading := clientcmd.NewDefaultClientConfigLoadingRules()
	root.PersistentFlags().StringVar(&loading.ExplicitPath, "kubeconfig", "", "path to the kubeconfig file")
	clientcmd.BindOverrideFlags(g.overrides, root.PersistentFlags(), clientcmd.RecommendedConfigOverrideFlags(""))
	g.kube = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, g.overrides)

	root.AddCommand(newCheck(g), newDiagnose(g), newPeerConfig(g), newMigrate(g), newTenant(g))
	return root
}
