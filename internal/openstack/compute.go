package openstack

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/attachinterfaces"
)

// NewCompute wraps a Nova service client.
func NewCompute(c *gophercloud.ServiceClient) Compute { return &compute{c: c} }

type compute struct {
	c *gophercloud.ServiceClient
}

var _ Compute = (*compute)(nil)

func toServerInterface(i attachinterfaces.Interface) ServerInterface {
	out := ServerInterface{PortID: i.PortID, NetworkID: i.NetID, MACAddress: i.MACAddr, PortState: i.PortState}
	for _, ip := range i.FixedIPs {
		out.FixedIPs = append(out.FixedIPs, FixedIP{SubnetID: ip.SubnetID, IPAddress: ip.IPAddress})
	}
	return out
}

func (c *compute) ListServerInterfaces(ctx context.Context, serverID string) ([]ServerInterface, error) {
	if serverID == "" {
		return nil, fmt.Errorf("list server interfaces: %w: empty server ID", ErrNotFound)
	}
	pages, err := attachinterfaces.List(c.c, serverID).AllPages(ctx)
	if err != nil {
		return nil, wrapErr("list interfaces of server "+serverID, err)
	}
	all, err := attachinterfaces.ExtractInterfaces(pages)
	if err != nil {
		return nil, wrapErr("list interfaces of server "+serverID, err)
	}
	out := make([]ServerInterface, 0, len(all))
	for _, i := range all {
		out = append(out, toServerInterface(i))
	}
	return out, nil
}

// AttachPort asks Nova to hot-plug portID into serverID. Nova may answer
// before the port is bound; WaitForPortDevice tells when it is.
func (c *compute) AttachPort(ctx context.Context, serverID, portID string) (*ServerInterface, error) {
	i, err := attachinterfaces.Create(ctx, c.c, serverID, attachinterfaces.CreateOpts{PortID: portID}).Extract()
	if err != nil {
		return nil, wrapErr("attach port "+portID+" to server "+serverID, err)
	}
	res := toServerInterface(*i)
	return &res, nil
}

// DetachPort asks Nova to unplug portID; it completes asynchronously.
func (c *compute) DetachPort(ctx context.Context, serverID, portID string) error {
	err := attachinterfaces.Delete(ctx, c.c, serverID, portID).ExtractErr()
	return wrapErr("detach port "+portID+" from server "+serverID, err)
}

// WaitOpts bounds WaitForPortDevice.
type WaitOpts struct {
	// Timeout caps the whole wait; default 2 minutes.
	Timeout time.Duration
	// Interval between polls; default 2 seconds.
	Interval time.Duration
}

// ErrWaitTimeout means the port did not reach the wanted device in time.
// IsTransient reports it, since the attach may still complete.
var ErrWaitTimeout = errors.New("timed out waiting for port device")

// WaitForPortDevice polls the port until its device_id equals serverID
// (after AttachPort) or, with serverID "", until it is cleared (after
// DetachPort). On timeout it returns the last port it read, if any. Real
// Nova binds ports asynchronously; acting on a port before that (deleting
// it, attaching it elsewhere) races Nova.
func WaitForPortDevice(ctx context.Context, net Networking, portID, serverID string, opts WaitOpts) (*Port, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Minute
	}
	if opts.Interval <= 0 {
		opts.Interval = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	ticker := time.NewTicker(opts.Interval)
	defer ticker.Stop()
	var last *Port
	for {
		p, err := net.GetPort(ctx, portID)
		if err == nil {
			last = p
		}
		switch {
		case err == nil && p.DeviceID == serverID:
			return p, nil
		case err != nil && IsNotFound(err) && serverID == "":
			// A port that vanished is attached to nothing.
			return nil, err
		case err != nil && !IsTransient(err):
			return nil, err
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return last, fmt.Errorf("wait for port %s: %w", portID, ctx.Err())
			}
			want := "server " + serverID
			if serverID == "" {
				want = "no device"
			}
			return last, fmt.Errorf("port %s did not reach %s within %s: %w", portID, want, opts.Timeout, errors.Join(ErrWaitTimeout, context.DeadlineExceeded))
		case <-ticker.C:
		}
	}
}
