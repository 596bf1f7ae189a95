package preflight

import (
	"context"

	"github.com/go-logr/logr"

	"bnerd.net/vpn-operator/internal/openstack"
)

// TransitNetworkReader resolves the configured transit network and reads its sharing.
type TransitNetworkReader interface {
	ResolveNetwork(ctx context.Context, nameOrID string) (*openstack.Network, error)
	openstack.NetworkShareReader
}

// CheckTransitNetworkShare reports whether the transit network (name or ID) is shared
// with no more than single projects. Shared with every project (its shared flag, or an
// RBAC policy with target *) logs a WARNING at start: every ClusterLink refuses to build
// or change anything (TransitNetworkSharedWithAllProjects) until an OpenStack admin
// removes that share. An unreadable network logs that it could not be checked; the
// ClusterLinks check again on every reconcile either way.
func CheckTransitNetworkShare(ctx context.Context, n TransitNetworkReader, network string, log logr.Logger) bool {
	net, err := n.ResolveNetwork(ctx, network)
	if err != nil {
		log.Info("WARNING: cannot check whether the transit network is shared with every project; ClusterLinks check it on every reconcile", "network", network, "error", err.Error())
		return false
	}
	share, err := openstack.ReadNetworkShare(ctx, n, net.ID)
	if err != nil {
		log.Info("WARNING: cannot check whether the transit network is shared with every project; ClusterLinks check it on every reconcile", "network", network, "error", err.Error())
		return false
	}
	if share.EveryProject() {
		log.Info("WARNING: the transit network is shared with every project of the cloud: any tenant can put a port on it and reach every linked service cluster through the gateway router. "+
			"Every ClusterLink refuses to build or change anything (TransitNetworkSharedWithAllProjects) until an OpenStack admin removes the share; customers get per-project shares from their ClusterLinks",
			"network", network, "networkID", net.ID, "share", share.How())
		return false
	}
	log.Info("the transit network is not shared with every project", "network", network, "perProjectShares", len(share.PerProject))
	return true
}
