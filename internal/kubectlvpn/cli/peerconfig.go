package cli

import (
	"fmt"
	"net/netip"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/kubectlvpn/peerconfig"
	"bnerd.net/vpn-operator/internal/render"
)

func newPeerConfig(g *global) *cobra.Command {
	var kind, tunnel, format string
	var includeSecret bool
	cmd := &cobra.Command{
		Use:   "peer-config <gateway> --tunnel <name> --format " + peerconfig.FormatNames(),
		Short: "Write the client's side of a tunnel, ready to paste into the client's device",
		Long: `peer-config writes the client's side of one tunnel: the gateway's floating IP as the
remote address and identity, the tunnel's peer identity as the local one, the client's
networks and the gateway's service CIDR as traffic selectors, the tunnel's proposals and
lifetimes, and, as comments, the virtual IP of every exposure and what the client's
firewall must admit for reverse exposures.

Formats: strongswan (swanctl.conf), libreswan (an ipsec.conf conn for libreswan 4 and 5,
the ipsec.secrets line as a comment), fortigate (FortiOS CLI), cisco-iosxe (IOS XE CLI,
crypto map), mikrotik (RouterOS 7 CLI), pfsense (the IPsec tunnel form's fields).
A proposal the device cannot negotiate is left out with a note; if none of a phase's
proposals fit, the command fails and says which proposal to add to the gateway.
wireguard writes a wg-quick(8) configuration for a peer of a WireGuard gateway.

The pre-shared key is written only with --include-secret (read from the tunnel's
Secret, which needs get on that Secret); otherwise a placeholder names the Secret.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tunnel == "" || format == "" {
				return &ExitError{Code: ExitIncomplete, Err: fmt.Errorf("--tunnel and --format (%s) are required", peerconfig.FormatNames())}
			}
			ns, err := g.namespace()
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return &ExitError{Code: ExitIncomplete, Err: err}
			}
			k, err := kindFlag(kind)
			if err != nil {
				return &ExitError{Code: ExitIncomplete, Err: err}
			}
			in := peerconfig.Input{Namespace: ns, Name: args[0], Tunnel: tunnel}
			key := types.NamespacedName{Namespace: ns, Name: args[0]}
			found := false
			if k == "" || k == v1alpha1.KindIPsecGateway {
				var o v1alpha1.IPsecGateway
				if err := c.Get(cmd.Context(), key, &o); err == nil {
					in.Kind, in.Spec, in.Status, found = v1alpha1.KindIPsecGateway, &o.Spec, &o.Status, true
				} else if !apierrors.IsNotFound(err) {
					return &ExitError{Code: ExitIncomplete, Err: err}
				}
			}
			if !found && (k == "" || k == v1alpha1.KindVPNGateway) {
				var o v1alpha1.VPNGateway
				if err := c.Get(cmd.Context(), key, &o); err == nil {
					in.Kind, in.Spec, in.Status, in.Protocol, in.WireGuard, found = v1alpha1.KindVPNGateway, &o.Spec.GatewaySpec, &o.Status, o.Spec.Protocol, o.Spec.WireGuard, true
				} else if !apierrors.IsNotFound(err) {
					return &ExitError{Code: ExitIncomplete, Err: err}
				}
			}
			if !found {
				return &ExitError{Code: ExitIncomplete, Err: fmt.Errorf("no IPsecGateway or VPNGateway %s/%s", ns, args[0])}
			}
			// A routed tunnel's client also needs the fabric's networks: the operator
			// renders its internal source CIDRs into the gateway's config.
			in.InternalSources = internalSources(cmd, c, ns, args[0])
			if includeSecret {
				psk, err := readPSK(cmd, g, in)
				if err != nil {
					return &ExitError{Code: ExitIncomplete, Err: err}
				}
				in.PSK = psk
			}
			out, err := peerconfig.Render(in, peerconfig.Format(format))
			if err != nil {
				return &ExitError{Code: ExitProblem, Err: err}
			}
			_, err = fmt.Fprint(g.io.Out, out)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&kind, "kind", "", "gateway kind: ipsecgateway or vpngateway (default: whichever exists)")
	f.StringVar(&tunnel, "tunnel", "", "the tunnel (spec.tunnels[].name)")
	f.StringVar(&format, "format", "", "output format: "+peerconfig.FormatNames())
	f.BoolVar(&includeSecret, "include-secret", false, "write the pre-shared key (read from the tunnel's Secret) into the output")
	return cmd
}

// readPSK reads the tunnel's key from the Secret its spec references. Errors name the
// Secret and key, never a value.
func readPSK(cmd *cobra.Command, g *global, in peerconfig.Input) (string, error) {
	c, err := g.client()
	if err != nil {
		return "", err
	}
	for _, t := range in.Spec.Tunnels {
		if t.Name != in.Tunnel {
			continue
		}
		key := t.PreSharedKey.Key
		if key == "" {
			key = "psk"
		}
		var s corev1.Secret
		if err := c.Get(cmd.Context(), types.NamespacedName{Namespace: in.Namespace, Name: t.PreSharedKey.Name}, &s); err != nil {
			return "", fmt.Errorf("reading Secret %s/%s: %w", in.Namespace, t.PreSharedKey.Name, err)
		}
		v, ok := s.Data[key]
		if !ok || len(v) == 0 {
			return "", fmt.Errorf("Secret %s/%s has no key %q", in.Namespace, t.PreSharedKey.Name, key)
		}
		return string(v), nil
	}
	return "", fmt.Errorf("%s %s/%s has no tunnel %q", in.Kind, in.Namespace, in.Name, in.Tunnel)
}

// internalSources reads the operator's internal source CIDRs from the gateway's rendered
// config (present while a tunnel is routed); nil when there is none to read.
func internalSources(cmd *cobra.Command, c client.Client, ns, name string) []netip.Prefix {
	var cm corev1.ConfigMap
	if err := c.Get(cmd.Context(), types.NamespacedName{Namespace: ns, Name: render.ConfigMapName(name)}, &cm); err != nil {
		return nil
	}
	cfg, err := gatewayconfig.Unmarshal([]byte(cm.Data[gatewayconfig.ConfigMapKeyConfig]))
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, s := range cfg.InternalSources {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}
