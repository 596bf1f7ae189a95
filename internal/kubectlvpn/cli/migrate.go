package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"bnerd.net/vpn-operator/internal/kubectlvpn/migrate"
)

func newMigrate(g *global) *cobra.Command {
	var from, format, secrets, name, fip, outFile string
	var includeSecrets, dryRun bool
	cmd := &cobra.Command{
		Use:   "migrate --from <swanctl.conf|ipsec.conf> --name <gateway> [--floating-ip <address>]",
		Short: "Write an IPsecGateway from a VM gateway's strongSwan configuration",
		Long: `migrate reads a VM gateway's strongSwan configuration, swanctl.conf or the legacy
ipsec.conf (with --secrets ipsec.secrets for its keys), and writes the IPsecGateway that
replaces it, pinning the VM's floating IP (--floating-ip, else inferred from the VM's
public IKE identity or address) so the clients keep their remote gateway address.

Each IKEv2 pre-shared-key connection to a static IPv4 peer becomes a tunnel (connections
to the same peer become one). Everything that cannot be carried over is listed with the
reason: our side's traffic selectors (they become exposures), certificates and EAP,
IKEv1, address pools, and the settings the operator renders itself.

The manifest goes to stdout (or --output-file), the report to stderr. --dry-run prints
only the report. Pre-shared keys found in the input are written into Secret manifests
only with --include-secrets; otherwise the report names the Secrets to create.
Follow docs/runbooks/vm-migration.md for the cut-over: disassociate the floating IP from
the VM first, or the gateway reports FloatingIPInUse.

Exit status: 0 written; 1 nothing could be carried over or the result would be refused;
2 the input could not be read.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if from == "" || name == "" {
				return &ExitError{Code: ExitIncomplete, Err: errors.New("--from and --name are required")}
			}
			ns, err := g.namespace()
			if err != nil {
				return err
			}
			text, err := os.ReadFile(from)
			if err != nil {
				return &ExitError{Code: ExitIncomplete, Err: err}
			}
			in := migrate.Input{Path: from, Text: string(text), Format: migrate.Format(format)}
			if secrets != "" {
				s, err := os.ReadFile(secrets)
				if err != nil {
					return &ExitError{Code: ExitIncomplete, Err: err}
				}
				in.Secrets = string(s)
			}
			res, err := migrate.Migrate(in, migrate.Options{Name: name, Namespace: ns, FloatingIP: fip, IncludeSecrets: includeSecrets && !dryRun})
			if res != nil {
				report := g.io.Err
				if dryRun {
					report = g.io.Out
				}
				fmt.Fprint(report, res.Report(in))
			}
			if err != nil {
				return &ExitError{Code: ExitProblem, Err: err}
			}
			if dryRun {
				return nil
			}
			man, err := res.Manifest()
			if err != nil {
				return err
			}
			if outFile != "" {
				// The file may hold keys: readable by its owner only.
				return os.WriteFile(outFile, man, 0o600)
			}
			_, err = g.io.Out.Write(man)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "the VM's swanctl.conf or ipsec.conf")
	f.StringVar(&format, "format", "auto", "input format: auto, swanctl or ipsec")
	f.StringVar(&secrets, "secrets", "", "ipsec.secrets for an ipsec.conf input")
	f.StringVar(&name, "name", "", "name of the IPsecGateway to write")
	f.StringVar(&fip, "floating-ip", "", "the VM's floating IP to pin (spec.endpoint.floatingIP); default: inferred")
	f.BoolVar(&includeSecrets, "include-secrets", false, "write the pre-shared keys found into Secret manifests")
	f.BoolVar(&dryRun, "dry-run", false, "print only the report: what would be written and every setting not carried over")
	f.StringVar(&outFile, "output-file", "", "write the manifest to this file (mode 0600) instead of stdout")
	return cmd
}
