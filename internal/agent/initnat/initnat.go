// Package initnat is the init-nat role's loop: it turns on IPv4 forwarding on the port
// and tunnel devices (refusing to run when it cannot), then keeps the pod's policy routing
// and the NAT/guard table equal to the latest valid config, repairs drift, and records
// every apply for the exporter.
package initnat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"bnerd.net/vpn-operator/internal/agent/routing"
	"bnerd.net/vpn-operator/internal/agent/source"
	"bnerd.net/vpn-operator/internal/agent/statefile"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// Programmer is the NAT table owner (*nat.Programmer).
type Programmer interface {
	Timed(ctx context.Context, m *gatewayconfig.NAT) (time.Duration, bool, error)
	Applied() *gatewayconfig.NAT
	Invalidate()
}

// DriftChecker compares the kernel's table with the last sync and counts the guard's
// drops on the way (*nat.DriftChecker).
type DriftChecker interface {
	Check(elements bool) (string, error)
	GuardDropped() (uint64, bool)
}

// Config is what the role's flags set.
type Config struct {
	// Interface is the dedicated port's device; TunnelInterface the libipsec TUN device
	// or a WireGuard gateway's devices, comma-separated (empty with kernel IPsec, where
	// decrypted traffic arrives on Interface).
	Interface, TunnelInterface string
	RouteTable, RulePriority   int
	// DriftInterval is how often the table, chains and rules are compared; every
	// ElementEvery-th check also counts elements.
	DriftInterval time.Duration
	ElementEvery  int
	// RouteInterval is how often the policy routing is re-applied.
	RouteInterval time.Duration
	// ApplyTimeout bounds one ruleset apply (the nft process knftables runs).
	ApplyTimeout time.Duration
	// StateFile receives statefile.NATState after every apply ("" = none).
	StateFile string
}

// Runner runs the loop with its dependencies injected.
type Runner struct {
	Config
	NAT   Programmer
	Drift DriftChecker
	// Route applies the policy routing (routing.Apply).
	Route func(routing.Params) error
	// ReadFile reads the forwarding sysctls (os.ReadFile).
	ReadFile func(string) ([]byte, error)
	// Forward turns IPv4 forwarding on for the named devices that exist
	// (routing.EnsureForwarding); nil leaves forwarding as the pod got it.
	Forward func(devices ...string) error
	// WriteState stores the apply statistics (statefile.WriteNATState on StateFile).
	WriteState func(statefile.NATState) error
	Logf       func(format string, args ...any)
	Now        func() time.Time

	st    statefile.NATState
	cfg   *gatewayconfig.Config
	model *gatewayconfig.NAT
	ticks int
}

// ForwardingSysctl is the IPv4 forwarding switch of a device in the pod's network
// namespace. The kernel forwards a packet when its input device forwards, so the port
// (NIC2) and the tunnel device are what count; net.ipv4.ip_forward only sets them all.
func ForwardingSysctl(device string) string {
	return "/proc/sys/net/ipv4/conf/" + device + "/forwarding"
}

// ErrForwardingOff: the gateway cannot forward exposures, and running would look healthy
// while nothing passes.
var ErrForwardingOff = errors.New("IPv4 forwarding is off on the port device and could not be turned on " +
	"(init-nat sets net.ipv4.conf.<port>.forwarding itself with NET_ADMIN): exposures cannot be forwarded")

// CheckForwarding returns ErrForwardingOff unless device forwards.
func CheckForwarding(read func(string) ([]byte, error), device string) error {
	b, err := read(ForwardingSysctl(device))
	if err != nil {
		return fmt.Errorf("%w: reading %s: %v", ErrForwardingOff, ForwardingSysctl(device), err)
	}
	if v := string(bytes.TrimSpace(b)); v != "1" {
		return fmt.Errorf("%w: %s = %s", ErrForwardingOff, ForwardingSysctl(device), v)
	}
	return nil
}

// forward turns forwarding on for the port and the tunnel device; the tunnel device is
// recreated whenever charon restarts, so this runs on every drift tick.
func (r *Runner) forward() {
	if r.Forward == nil {
		return
	}
	devs := []string{r.Interface}
	for _, name := range strings.Split(r.TunnelInterface, ",") {
		if name = strings.TrimSpace(name); name != "" {
			devs = append(devs, name)
		}
	}
	if err := r.Forward(devs...); err != nil {
		r.logf("forwarding: %v", err)
	}
}

func (r *Runner) logf(format string, args ...any) {
	if r.Logf != nil {
		r.Logf(format, args...)
	}
}

func (r *Runner) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// State returns the statistics recorded so far.
func (r *Runner) State() statefile.NATState { return r.st }

func (r *Runner) record(d time.Duration, err error) {
	r.st.Applies++
	r.st.LastApplySeconds = d.Seconds()
	r.st.LastApplyUnixSeconds = r.now().Unix()
	if err != nil {
		r.st.ApplyErrors++
	}
	r.writeState()
}

func (r *Runner) writeState() {
	if r.WriteState == nil {
		return
	}
	if err := r.WriteState(r.st); err != nil {
		r.logf("writing state file: %v", err)
	}
}

func (r *Runner) routeParams() routing.Params {
	p := routing.Params{
		Interface: r.Interface, TunnelInterface: r.TunnelInterface,
		PortFixedIP: r.cfg.PortFixedIP, SubnetCIDR: r.cfg.SubnetCIDR,
		SubnetGatewayIP: r.cfg.SubnetGatewayIP, ServiceGatewayAddress: r.cfg.GatewayAddress,
		Table: r.RouteTable, Priority: r.RulePriority,
	}
	p.PeerAddresses = r.cfg.PeerEndpoints()
	return p
}

func (r *Runner) route() {
	if r.cfg == nil || r.Route == nil {
		return
	}
	if err := r.Route(r.routeParams()); err != nil {
		r.logf("policy routing: %v", err)
	}
}

func (r *Runner) apply(ctx context.Context, reason string) {
	timeout := r.ApplyTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d, full, err := r.NAT.Timed(actx, r.model)
	r.record(d, err)
	if err != nil {
		r.logf("NAT apply (%s) failed after %s: %v", reason, d, err)
		return
	}
	r.logf("NAT applied (%s, full=%v) in %s", reason, full, d)
}

// config takes a new snapshot: an invalid one keeps the current ruleset, since dropping
// it would open the guard.
func (r *Runner) config(ctx context.Context, s source.Snapshot) {
	if len(s.Config) == 0 {
		r.logf("no %s yet", gatewayconfig.ConfigMapKeyConfig)
		return
	}
	nc, err := gatewayconfig.Unmarshal(s.Config)
	if err != nil {
		r.record(0, err)
		r.logf("config rejected, keeping the current ruleset: %v", err)
		return
	}
	nm, err := gatewayconfig.NATModel(nc)
	if err != nil {
		r.record(0, err)
		r.logf("NAT model rejected, keeping the current ruleset: %v", err)
		return
	}
	r.cfg, r.model = nc, nm
	r.route()
	r.apply(ctx, "config")
}

// drift runs one drift check and repairs what it finds.
func (r *Runner) drift(ctx context.Context) {
	if r.model == nil {
		return
	}
	if r.NAT.Applied() == nil {
		r.apply(ctx, "retry")
		return
	}
	r.ticks++
	every := r.ElementEvery
	msg, err := r.Drift.Check(every <= 1 || r.ticks%every == 0)
	if err != nil {
		r.logf("drift check: %v", err)
		return
	}
	if n, ok := r.Drift.GuardDropped(); ok && n != r.st.GuardDroppedPackets {
		r.st.GuardDroppedPackets = n
		r.writeState()
	}
	if msg != "" {
		r.logf("drift detected: %s; repairing", msg)
		r.st.DriftRepairs++
		r.NAT.Invalidate()
		r.apply(ctx, "drift")
	}
}

// Run turns forwarding on and checks it, then loops until ctx ends. The table stays when
// it returns: the guard must outlive the agent.
func (r *Runner) Run(ctx context.Context, snaps <-chan source.Snapshot) error {
	read := r.ReadFile
	if read == nil {
		read = os.ReadFile
	}
	r.forward()
	if err := CheckForwarding(read, r.Interface); err != nil {
		return err
	}
	driftEvery, routeEvery := r.DriftInterval, r.RouteInterval
	if driftEvery <= 0 {
		driftEvery = 500 * time.Millisecond
	}
	if routeEvery <= 0 {
		routeEvery = 5 * time.Second
	}
	tick := time.NewTicker(driftEvery)
	defer tick.Stop()
	routeTick := time.NewTicker(routeEvery)
	defer routeTick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case s := <-snaps:
			r.config(ctx, s)
		case <-tick.C:
			r.forward()
			r.drift(ctx)
		case <-routeTick.C:
			r.route()
		}
	}
}
