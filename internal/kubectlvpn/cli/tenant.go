package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/tenancy"
)

// TenantReport is what `kubectl vpn tenant` prints: the policy that governs a
// namespace and what its tenant's gateways hold against the limits, counted the way
// the operator counts.
type TenantReport struct {
	Namespace string `json:"namespace"`
	// Policy is the governing VPNTenantPolicy ("" under the strict defaults).
	Policy string `json:"policy,omitempty"`
	// Conflict counts the policies selecting the namespace when more than one does.
	Conflict        int                   `json:"conflict,omitempty"`
	Namespaces      []string              `json:"namespaces"`
	RoutedSubnets   []string              `json:"routedSubnets"`
	ExposureTargets []string              `json:"exposureTargets"`
	FloatingIPs     []string              `json:"floatingIPs"`
	Limits          v1alpha1.TenantUsage  `json:"limits"`
	Usage           v1alpha1.TenantUsage  `json:"usage"`
	Gateways        []TenantGatewayReport `json:"gateways"`
	// Partial says why the gateways of some namespaces could not be read (the
	// caller's RBAC); Usage is then the operator's count from the policy's status.
	Partial string `json:"partial,omitempty"`
}

// TenantGatewayReport is one gateway of the tenant.
type TenantGatewayReport struct {
	Gateway string               `json:"gateway"`
	Usage   v1alpha1.TenantUsage `json:"usage"`
	// Refused names the limits the gateway would pass (it is refused), if any.
	Refused []string `json:"refused,omitempty"`
}

func newTenant(g *global) *cobra.Command {
	var output string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "tenant [namespace]",
		Short: "Show the tenant policy that governs a namespace and what its gateways hold against the limits",
		Long: `tenant shows which VPNTenantPolicy governs a namespace (or that the strict
defaults apply, or that two policies conflict), what it allows (routed-subnet ranges,
exposure targets, floating IPs to pin), its limits, and what the tenant's gateways hold
against them, gateway by gateway, counted as the operator counts (admitted gateways
first, oldest first; a gateway that would pass a limit is refused).

Kubernetes access: list on vpntenantpolicies, get on the namespace (or the policy's
status names it), list on the gateway kinds in the tenant's namespaces; without the
latter the usage is the operator's own count from the policy's status.

Exit status: 0; 1 when a gateway is refused or policies conflict; 2 on failure.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, err := g.namespace()
			if err != nil {
				return err
			}
			if len(args) == 1 {
				ns = args[0]
			}
			c, err := g.client()
			if err != nil {
				return &ExitError{Code: ExitIncomplete, Err: err}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			rep, err := BuildTenantReport(ctx, c, ns)
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
				return &ExitError{Code: ExitIncomplete, Err: fmt.Errorf("--output %q: want text or json", output)}
			}
			if rep.Conflict > 1 || rep.refused() > 0 {
				return &ExitError{Code: ExitProblem}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "bound of the whole command")
	return cmd
}

func (r *TenantReport) refused() int {
	n := 0
	for _, g := range r.Gateways {
		if len(g.Refused) > 0 {
			n++
		}
	}
	return n
}

// BuildTenantReport reads the policies, the namespace and the tenant's gateways.
func BuildTenantReport(ctx context.Context, c client.Client, namespace string) (*TenantReport, error) {
	var policies v1alpha1.VPNTenantPolicyList
	if err := c.List(ctx, &policies); err != nil {
		return nil, fmt.Errorf("listing VPNTenantPolicies: %w", err)
	}
	var ns corev1.Namespace
	err := c.Get(ctx, client.ObjectKey{Name: namespace}, &ns)
	if err != nil && !apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("reading namespace %s: %w", namespace, err)
	}
	var pol tenancy.Policy
	var governing *v1alpha1.VPNTenantPolicy
	if err == nil {
		pol = tenancy.For(policies.Items, namespace, ns.Labels)
	} else {
		// The namespace is not readable: the operator's view, the policies whose status
		// names it.
		var names []string
		for i := range policies.Items {
			for _, n := range policies.Items[i].Status.Namespaces {
				if n == namespace {
					names = append(names, policies.Items[i].Name)
				}
			}
		}
		switch len(names) {
		case 0:
			pol = tenancy.Strict(namespace)
		case 1:
			for i := range policies.Items {
				if policies.Items[i].Name == names[0] {
					pol = tenancy.FromSpec(names[0], namespace, &policies.Items[i].Spec)
				}
			}
		default:
			pol = tenancy.Strict(namespace)
			pol.Conflicting = len(names)
		}
	}
	rep := &TenantReport{Namespace: namespace, Policy: pol.Name, Limits: pol.Limits,
		RoutedSubnets: prefixStrings(pol.RoutedSubnets), ExposureTargets: prefixStrings(pol.ExposureTargets),
		FloatingIPs: addrStrings(pol.FloatingIPs), Namespaces: []string{namespace}}
	if pol.Conflicting > 1 {
		rep.Conflict = pol.Conflicting
		rep.Limits = v1alpha1.TenantUsage{}
		return rep, nil
	}
	if pol.Name != "" {
		for i := range policies.Items {
			if policies.Items[i].Name == pol.Name {
				governing = &policies.Items[i]
			}
		}
		if governing != nil && len(governing.Status.Namespaces) > 0 {
			rep.Namespaces = append([]string(nil), governing.Status.Namespaces...)
		}
	}
	var gws []v1alpha1.Gateway
	var unread []string
	for _, n := range rep.Namespaces {
		in, err := v1alpha1.ListGateways(ctx, c, client.InNamespace(n))
		if err != nil {
			if apierrors.IsForbidden(err) {
				unread = append(unread, n)
				continue
			}
			return nil, fmt.Errorf("in %s: %w", n, err)
		}
		gws = append(gws, in...)
	}
	members := tenancy.Members(gws, nil)
	total, refused := tenancy.Admit(pol.Limits, members)
	rep.Usage = total
	for _, m := range members {
		gr := TenantGatewayReport{Gateway: m.Ref, Usage: m.Usage}
		if x, ok := tenancy.RefusalOf(refused, m.UID); ok {
			gr.Refused = x.Passes
		}
		rep.Gateways = append(rep.Gateways, gr)
	}
	sort.Slice(rep.Gateways, func(i, j int) bool { return rep.Gateways[i].Gateway < rep.Gateways[j].Gateway })
	if len(unread) > 0 {
		rep.Partial = "cannot list the gateways of " + strings.Join(unread, ", ") + " (RBAC); usage as the operator counted it"
		if governing != nil {
			rep.Usage = governing.Status.Usage
		}
	}
	return rep, nil
}

func prefixStrings(ps []netip.Prefix) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

func addrStrings(as []netip.Addr) []string {
	out := []string{}
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}

// Write prints the report for a human.
func (r *TenantReport) Write(w io.Writer) {
	switch {
	case r.Conflict > 1:
		fmt.Fprintf(w, "namespace %s: %d VPNTenantPolicies select it, so none applies and its gateways are refused (TenantPolicyConflict)\n", r.Namespace, r.Conflict)
		return
	case r.Policy == "":
		fmt.Fprintf(w, "namespace %s: no VPNTenantPolicy selects it; the strict defaults apply\n", r.Namespace)
	default:
		fmt.Fprintf(w, "namespace %s: VPNTenantPolicy %s (namespaces: %s)\n", r.Namespace, r.Policy, strings.Join(r.Namespaces, ", "))
	}
	none := func(s []string, empty string) string {
		if len(s) == 0 {
			return empty
		}
		return strings.Join(s, ", ")
	}
	fmt.Fprintf(w, "  routed subnets:    %s\n", none(r.RoutedSubnets, "none (routed mode off)"))
	fmt.Fprintf(w, "  exposure targets:  %s\n", none(r.ExposureTargets, "none beyond the linked clusters serving each gateway"))
	fmt.Fprintf(w, "  floating IPs:      %s\n", none(r.FloatingIPs, "none (no pins)"))
	fmt.Fprintf(w, "\n  %-24s %8s %8s\n", "", "USED", "LIMIT")
	for _, x := range []struct {
		name        string
		used, limit int32
	}{
		{"gateways", r.Usage.Gateways, r.Limits.Gateways},
		{"tunnels", r.Usage.Tunnels, r.Limits.Tunnels},
		{"routed subnets", r.Usage.RoutedSubnets, r.Limits.RoutedSubnets},
		{"exposures", r.Usage.Exposures, r.Limits.Exposures},
		{"reverse-exposure ports", r.Usage.ReverseExposurePorts, r.Limits.ReverseExposurePorts},
	} {
		fmt.Fprintf(w, "  %-24s %8d %8d\n", x.name, x.used, x.limit)
	}
	if r.Partial != "" {
		fmt.Fprintf(w, "\n  note: %s\n", r.Partial)
	}
	if len(r.Gateways) == 0 {
		return
	}
	fmt.Fprintf(w, "\n  %-48s %4s %4s %4s %4s  %s\n", "GATEWAY", "TUN", "RTD", "EXP", "REVP", "STATE")
	for _, g := range r.Gateways {
		state := "admitted"
		if len(g.Refused) > 0 {
			state = "refused: would pass " + strings.Join(g.Refused, ", ")
		}
		fmt.Fprintf(w, "  %-48s %4d %4d %4d %4d  %s\n", g.Gateway, g.Usage.Tunnels, g.Usage.RoutedSubnets, g.Usage.Exposures, g.Usage.ReverseExposurePorts, state)
	}
}
