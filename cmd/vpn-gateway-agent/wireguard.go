package main

import (
	"context"
	"flag"
	"log"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"bnerd.net/vpn-operator/internal/agent/source"
	"bnerd.net/vpn-operator/internal/agent/status"
	"bnerd.net/vpn-operator/internal/agent/wireguard"
)

// runWireGuard is the wireguard role: the WireGuard gateway's interface, kept equal to the
// config from the ConfigMap and the private key from the mounted key Secret.
func runWireGuard(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("wireguard", flag.ExitOnError)
	var c common
	c.register(fs, false)
	iface := fs.String("interface", wireguard.DefaultInterface, "the devices of the two key slots, comma-separated (one name X: X and X1)")
	keyFile := fs.String("private-key-file", "", "the gateway's private key (the mounted key Secret)")
	prevKeyFile := fs.String("previous-private-key-file", "", "the key a rotation replaced, mounted during the rotation's overlap (absent otherwise)")
	stateFile := fs.String("state-file", "", "write the interface's state here for the status agent and the exporter")
	mode := fs.String("mode", string(wireguard.ModeAuto), "auto (the kernel's WireGuard, else wireguard-go in this process), kernel or userspace")
	mtu := fs.Int("mtu", wireguard.DefaultMTU, "interface MTU")
	table := fs.Int("route-table", wireguard.DefaultTable, "routing table of the peers' allowed IPs")
	prio := fs.Int("rule-priority", wireguard.DefaultPriority, "priority of the rule looking that table up (below init-nat's)")
	interval := fs.Duration("interval", time.Second, "how often the interface, key, routes and state are checked")
	_ = fs.Parse(args)
	if *keyFile == "" {
		log.Fatal("wireguard: --private-key-file is required")
	}
	r, err := wireguard.New(wireguard.Options{
		Interface: *iface, KeyFile: *keyFile, PreviousKeyFile: *prevKeyFile, StateFile: *stateFile, Mode: wireguard.Mode(*mode),
		MTU: *mtu, Table: *table, Priority: *prio, Interval: *interval, Logf: log.Printf,
	})
	if err != nil {
		return err
	}
	snaps, err := c.run(ctx)
	if err != nil {
		return err
	}
	return r.Run(ctx, snaps)
}

// runWireGuardStatus is the status agent of a WireGuard gateway: the peers' state from
// the wireguard role's state file into the gateway's status.
func runWireGuardStatus(ctx context.Context, snaps chan source.Snapshot, cl client.Client, stateFile string, interval, heartbeat time.Duration) {
	tn := &source.Tunnels{Logf: log.Printf}
	go tn.Follow(ctx, snaps)
	src := &status.WireGuardSource{StateFile: stateFile}
	// A round as soon as the wireguard role writes news (it rewrites the file every
	// second), besides the interval.
	kick, kicked := status.Kicker()
	go src.WatchState(ctx, time.Second, kicked)
	(&status.Agent{Tunnels: tn.Get, State: src.State, Write: src.Writer(cl, heartbeat), Kick: kick, Interval: interval, Logf: log.Printf}).Run(ctx)
}
