package gateway

import (
	"context"
	"fmt"

	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// gatewayStores are the informer stores of both gateway kinds, read in place.
//
// Why: the tenant count and the node load read every gateway of a namespace, or of the
// estate, on a gateway's reconcile. A list through the cache, even without deep copies,
// copies each cached object into a typed list (controller-runtime's SetList); at 5,000
// gateways with 100 links that copy was 14 % of the operator's CPU, 5,000 reconciles
// times 5,000 objects. The stores are the ones the manager's client lists from, so they
// show exactly what a list through it would, without the copy.
type gatewayStores map[string]toolscache.Indexer

// storesOf returns the informer stores of both kinds from the manager's cache, or nil
// when its informers are not client-go's (then every read lists through the client).
func storesOf(mgr ctrl.Manager) gatewayStores {
	out := gatewayStores{}
	for _, kind := range v1alpha1.GatewayKinds {
		inf, err := mgr.GetCache().GetInformer(context.Background(), v1alpha1.NewGateway(kind))
		if err != nil {
			return nil
		}
		s, ok := inf.(interface{ GetIndexer() toolscache.Indexer })
		if !ok {
			return nil
		}
		out[kind] = s.GetIndexer()
	}
	return out
}

// each calls f for every gateway of both kinds in namespace ("": every namespace), in
// place: f must not change what it is given.
func (s gatewayStores) each(namespace string, f func(v1alpha1.Gateway)) error {
	for _, kind := range v1alpha1.GatewayKinds {
		var objs []any
		if namespace == "" {
			objs = s[kind].List()
		} else {
			var err error
			if objs, err = s[kind].ByIndex(toolscache.NamespaceIndex, namespace); err != nil {
				return fmt.Errorf("listing %ss of namespace %s from the cache: %w", kind, namespace, err)
			}
		}
		for _, o := range objs {
			g, ok := o.(v1alpha1.Gateway)
			if !ok {
				return fmt.Errorf("the %s cache holds a %T", kind, o)
			}
			f(g)
		}
	}
	return nil
}
