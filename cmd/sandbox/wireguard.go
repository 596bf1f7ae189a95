package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/testinfra/world"
)

// wireGuardPeer is the peer of examples/vpngateway-wireguard.yaml that the sandbox's
// WireGuard client site plays.
const wireGuardPeer = "hq"

// runWireGuard applies the WireGuard example beside the IPsec gateway: a second client
// site whose router runs wg-quick (wireguard-go: this kernel has no WireGuard) configured
// from `kubectl vpn peer-config --format wireguard`, its host reaching the portal through
// the tunnel and the service cluster reaching its wiki through the reverse exposure. The
// example's key for hq is a placeholder: the site's router has its own key pair, and its
// public key goes into the peer, as a tenant does. It returns the gateway, to be deleted
// with the others.
func runWireGuard(ctx context.Context, w *world.World, timeout time.Duration, path string) (*v1alpha1.VPNGateway, error) {
	step("WireGuard client site: its router at %s runs wg-quick (userspace wireguard-go); host %s serving :%s", world.WGSiteWANAddress, world.WGSiteHostAddress, world.WGSiteHostPort)
	site, err := w.StartWireGuardSite(ctx)
	if err != nil {
		return nil, err
	}
	gw := &v1alpha1.VPNGateway{}
	if err := w.Load(path, gw, world.TenantNamespace); err != nil {
		return nil, err
	}
	found := false
	for i := range gw.Spec.WireGuard.Peers {
		if p := &gw.Spec.WireGuard.Peers[i]; p.Name == wireGuardPeer {
			p.PublicKey, found = site.Key.PublicKey().String(), true
		}
	}
	if !found {
		return nil, fmt.Errorf("%s has no peer %s for the client site", path, wireGuardPeer)
	}
	step("applying %s, peer %s's publicKey set to the client router's own (%s)", path, wireGuardPeer, site.Key.PublicKey())
	if err := w.Kube.Create(ctx, gw); err != nil {
		return nil, err
	}
	converged := append(append([]string{}, v1alpha1.GatewayConditionTypesFor(true)...), v1alpha1.ConditionPodReady)
	if err := waitReady(ctx, w.Kube, gw, func() []metav1.Condition { return gw.Status.Conditions }, converged, timeout, productNotReady); err != nil {
		return gw, err
	}
	conf, err := w.KubectlVPN(ctx, nil, "peer-config", gw.Name, "-n", gw.Namespace, "--tunnel", wireGuardPeer, "--format", "wireguard")
	if err != nil {
		return gw, err
	}
	step("the client configures its side from kubectl vpn peer-config %s -n %s --tunnel %s --format wireguard (its private key put in for the placeholder):", gw.Name, gw.Namespace, wireGuardPeer)
	fmt.Println(indent(strings.TrimSpace(conf)))
	if err := site.Up(conf); err != nil {
		return gw, err
	}
	if err := waitReady(ctx, w.Kube, gw, func() []metav1.Condition { return gw.Status.Conditions }, []string{v1alpha1.ConditionReady}, timeout, nil); err != nil {
		return gw, err
	}
	if err := answered(ctx, timeout, "the WireGuard tunnel", []request{
		{"WireGuard client host " + world.WGSiteHostAddress, world.WGSiteHostNamespace, "exposure portal (svc01)", "https://" + world.VIPOf(gw.Status.Exposures, "portal") + ":443/", world.ServiceHostBody},
		{"service cluster host " + world.ServiceHostAddress, world.ServiceHostNamespace, "reverse exposure wiki (WireGuard client)", "https://" + world.VIPOf(gw.Status.ReverseExposures, "wiki") + ":" + world.WGSiteHostPort + "/", world.WGSiteHostBody},
	}); err != nil {
		return gw, err
	}
	if out, err := site.Show(); err == nil {
		step("the client's view (wg show at the WireGuard client site)")
		fmt.Println(indent(strings.TrimSpace(out)))
	}
	return gw, nil
}
