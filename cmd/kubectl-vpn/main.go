// Command kubectl-vpn is the kubectl plugin of bnerd-vpn-operator: on PATH it runs as
// `kubectl vpn`. See docs/runbooks/kubectl-vpn.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"bnerd.net/vpn-operator/internal/kubectlvpn/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd := cli.NewCommand(cli.IO{Out: os.Stdout, Err: os.Stderr, Getenv: os.Getenv}, nil)
	err := cmd.ExecuteContext(ctx)
	if err != nil && err.Error() != "" {
		if _, isExit := err.(*cli.ExitError); !isExit || err.(*cli.ExitError).Err != nil {
			fmt.Fprintln(os.Stderr, "kubectl vpn:", err)
		}
	}
	os.Exit(cli.Code(err))
}
