package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
	"bnerd.net/vpn-operator/internal/testinfra/realstack"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// cloud is the OpenStack the sandbox's story runs against: the simulator (default) or
// the real one of hack/openstack.sh (--openstack=real), seeded with the same estate.
type cloud interface {
	// env is the operator's OS_* settings.
	env() []string
	// serverID is the Nova server behind a node of the estate.
	serverID(node string) string
	// print shows what the operator made.
	print(ctx context.Context)
	// leftovers lists what the operator made that is still there.
	leftovers(ctx context.Context) []string
	close()
}

// startCloud starts (or, for the real one, finds or brings up) the OpenStack.
func startCloud(ctx context.Context, kind, seedPath string) (cloud, error) {
	switch kind {
	case "sim", "":
		step("starting the OpenStack simulator (seed %s)", seedPath)
		seed, err := openstacksim.LoadSeed(seedPath)
		if err != nil {
			return nil, err
		}
		s, err := openstacksim.Start(seed)
		if err != nil {
			return nil, err
		}
		return simCloud{s}, nil
	case "real":
		return startReal(ctx)
	default:
		return nil, fmt.Errorf("--openstack=%s: want sim or real", kind)
	}
}

type simCloud struct{ s *openstacksim.Server }

func (c simCloud) env() []string {
	id, secret, _ := c.s.AppCredential(operatorCredential)
	return []string{
		"OS_AUTH_URL=" + c.s.AuthURL(), "OS_REGION_NAME=" + c.s.Region(), "OS_AUTH_TYPE=v3applicationcredential",
		"OS_APPLICATION_CREDENTIAL_ID=" + id, "OS_APPLICATION_CREDENTIAL_SECRET=" + secret,
	}
}

func (c simCloud) serverID(node string) string {
	for _, n := range nodes {
		if n.name == node {
			return n.serverID
		}
	}
	return ""
}

func (c simCloud) print(context.Context)              { printOpenStack(c.s) }
func (c simCloud) leftovers(context.Context) []string { return leftovers(c.s) }
func (c simCloud) close()                             { c.s.Close() }

// realCloud is hack/openstack.sh's OpenStack, seeded from examples/sim-estate.yaml.
type realCloud struct {
	c       *realstack.Cloud
	cred    openstack.Credential
	os      *openstack.Clients
	stopped func()
}

func startReal(ctx context.Context) (cloud, error) {
	r := &realCloud{stopped: func() {}}
	c, err := realstack.Load()
	if err != nil {
		// Not running: bring it up for this run, and down again at the end.
		step("starting a real OpenStack (hack/openstack.sh up; the first run installs packages and builds schemas)")
		state := realstack.StateDir()
		script := filepath.Join(testenv.RepoRoot(), "hack", "openstack.sh")
		up := exec.CommandContext(ctx, "bash", script, "up", state)
		up.Stdout, up.Stderr = os.Stderr, os.Stderr
		if err := up.Run(); err != nil {
			return nil, fmt.Errorf("hack/openstack.sh up: %w", err)
		}
		r.stopped = func() {
			step("stopping the real OpenStack")
			down := exec.Command("bash", script, "down", state)
			down.Stdout, down.Stderr = os.Stderr, os.Stderr
			_ = down.Run()
		}
		if c, err = realstack.Load(); err != nil {
			r.stopped()
			return nil, err
		}
	} else {
		step("using the real OpenStack in %s", c.Dir)
	}
	r.c = c
	if r.cred, err = c.Credential(operatorCredential); err != nil {
		r.stopped()
		return nil, err
	}
	if r.os, err = openstack.NewClients(ctx, r.cred, openstack.ClientOptions{Timeout: time.Minute}); err != nil {
		r.stopped()
		return nil, err
	}
	return r, nil
}

func (r *realCloud) env() []string {
	return []string{
		"OS_AUTH_URL=" + r.cred.AuthURL, "OS_REGION_NAME=" + r.cred.Region, "OS_AUTH_TYPE=v3applicationcredential",
		"OS_APPLICATION_CREDENTIAL_ID=" + r.cred.AppCredentialID, "OS_APPLICATION_CREDENTIAL_SECRET=" + r.cred.AppCredentialSecret,
	}
}

func (r *realCloud) serverID(node string) string {
	id, _ := r.c.ID("servers", "vpn-operator/"+node)
	return id
}

// estateRouters are the operator project's routers of the estate.
var estateRouters = []string{"shoot--services--vpn01", "shoot--services--svc01"}

func (r *realCloud) print(ctx context.Context) {
	n := r.os.Networking
	managed := []string{openstack.TagManaged}
	if ps, err := n.ListPorts(ctx, openstack.ListPortsOpts{Tags: managed}); err == nil {
		for _, p := range ps {
			var pairs []string
			for _, a := range p.AllowedAddressPairs {
				pairs = append(pairs, a.IPAddress)
			}
			fmt.Printf("    port %s  %s  mac %s  device %s  allowed-address-pairs %v\n", p.ID, p.FixedIPOn(""), p.MACAddress, p.DeviceID, pairs)
		}
	}
	if fs, err := n.ListFloatingIPs(ctx, openstack.ListFloatingIPsOpts{Tags: managed}); err == nil {
		for _, f := range fs {
			fmt.Printf("    floating IP %s -> port %s\n", f.FloatingIPAddress, f.PortID)
		}
	}
	if gs, err := n.ListSecurityGroups(ctx, managed); err == nil {
		for _, g := range gs {
			fmt.Printf("    security group %s\n", g.Name)
			var rules []string
			for _, rl := range g.Rules {
				if rl.Direction != openstack.DirectionIngress {
					continue
				}
				proto := rl.Protocol
				if proto == "" {
					proto = "any"
				}
				rules = append(rules, fmt.Sprintf("      ingress %s %d-%d from %s", proto, rl.PortRangeMin, rl.PortRangeMax, rl.RemoteIPPrefix))
			}
			slices.Sort(rules)
			fmt.Println(strings.Join(rules, "\n"))
		}
	}
	for _, name := range estateRouters {
		if rt, err := n.ResolveRouter(ctx, name); err == nil {
			for _, x := range rt.Routes {
				fmt.Printf("    router %s route %s via %s\n", name, x.Destination, x.NextHop)
			}
		}
	}
	for _, node := range nodes {
		if ifs, err := r.os.Compute.ListServerInterfaces(ctx, r.serverID(node.name)); err == nil && len(ifs) > 0 {
			var ports []string
			for _, i := range ifs {
				ports = append(ports, i.PortID)
			}
			fmt.Printf("    server %s (%s) interfaces %v\n", node.name, r.serverID(node.name), ports)
		}
	}
}

func (r *realCloud) leftovers(ctx context.Context) []string {
	var left []string
	n := r.os.Networking
	managed := []string{openstack.TagManaged}
	ps, err := n.ListPorts(ctx, openstack.ListPortsOpts{Tags: managed})
	left = appendErr(left, err)
	for _, p := range ps {
		left = append(left, "port "+p.ID)
	}
	fs, err := n.ListFloatingIPs(ctx, openstack.ListFloatingIPsOpts{Tags: managed})
	left = appendErr(left, err)
	for _, f := range fs {
		left = append(left, "floating IP "+f.FloatingIPAddress)
	}
	gs, err := n.ListSecurityGroups(ctx, managed)
	left = appendErr(left, err)
	for _, g := range gs {
		left = append(left, "security group "+g.ID)
	}
	for _, name := range estateRouters {
		rt, err := n.ResolveRouter(ctx, name)
		left = appendErr(left, err)
		if rt == nil {
			continue
		}
		for _, x := range rt.Routes {
			if strings.HasPrefix(x.Destination, "100.64.") || x.Destination == "10.251.0.0/16" {
				left = append(left, fmt.Sprintf("route %s via %s on %s", x.Destination, x.NextHop, name))
			}
		}
	}
	return left
}

func appendErr(left []string, err error) []string {
	if err != nil {
		return append(left, "(cannot tell: "+err.Error()+")")
	}
	return left
}

func (r *realCloud) close() { r.stopped() }
