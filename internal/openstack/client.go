package openstack

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
)

// ClientOptions tunes how clients talk HTTP.
type ClientOptions struct {
	// Timeout bounds each HTTP request, so a hung endpoint costs a
	// reconcile a bounded wait instead of a stuck worker. Default 30s.
	Timeout time.Duration
	// TLSConfig, when set, replaces the default TLS settings.
	TLSConfig *tls.Config
	// Transport, when set, is used as-is (tests, proxies); TLSConfig is
	// then ignored.
	Transport http.RoundTripper
	// UserAgent is prepended to gophercloud's.
	UserAgent string
	// QPS and Burst pace the client set's requests with a token bucket (QPS <= 0: no
	// pacing), to stay under a cloud's API rate limit instead of running into its 429s.
	QPS   float64
	Burst int
}

const defaultTimeout = 30 * time.Second

// NewClients authenticates cred against Keystone and returns the service
// clients from the token's catalog for cred.Region. Authentication errors
// are classified like any other (IsUnauthorized for a refused credential).
func NewClients(ctx context.Context, cred Credential, opts ClientOptions) (*Clients, error) {
	if err := cred.Validate(); err != nil {
		return nil, err
	}
	provider, err := openstack.NewClient(cred.AuthURL)
	if err != nil {
		return nil, fmt.Errorf("%w: auth URL: %v", ErrInvalidCredential, err)
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	transport := opts.Transport
	if transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		if opts.TLSConfig != nil {
			t.TLSClientConfig = opts.TLSConfig.Clone()
		}
		transport = t
	}
	transport = withRateLimit(transport, opts.QPS, opts.Burst)
	provider.HTTPClient = http.Client{Transport: transport, Timeout: timeout}
	provider.UserAgent.Prepend("bnerd-vpn-operator")
	if opts.UserAgent != "" {
		provider.UserAgent.Prepend(opts.UserAgent)
	}

	ao := cred.authOptions()
	// Application credentials exist only in Keystone v3; skipping version
	// discovery saves a request and a failure mode.
	if err := openstack.AuthenticateV3(ctx, provider, &ao, gophercloud.EndpointOpts{}); err != nil {
		return nil, wrapErr("keystone: authenticate", err)
	}

	eo := gophercloud.EndpointOpts{Region: cred.Region, Availability: availability(cred.Interface)}
	netClient, err := openstack.NewNetworkV2(provider, eo)
	if err != nil {
		return nil, fmt.Errorf("keystone catalog: network endpoint in region %q: %w", cred.Region, err)
	}
	computeClient, err := openstack.NewComputeV2(provider, eo)
	if err != nil {
		return nil, fmt.Errorf("keystone catalog: compute endpoint in region %q: %w", cred.Region, err)
	}
	idClient, err := openstack.NewIdentityV3(provider, gophercloud.EndpointOpts{})
	if err != nil {
		return nil, fmt.Errorf("keystone: identity client: %w", err)
	}
	return &Clients{
		Networking: NewNetworking(netClient),
		Compute:    NewCompute(computeClient),
		Identity: &identity{
			provider: provider, idClient: idClient,
			network: netClient.Endpoint, compute: computeClient.Endpoint, region: cred.Region,
		},
	}, nil
}

func availability(iface string) gophercloud.Availability {
	switch iface {
	case "internal", "internalURL":
		return gophercloud.AvailabilityInternal
	case "admin", "adminURL":
		return gophercloud.AvailabilityAdmin
	default:
		return gophercloud.AvailabilityPublic
	}
}

// Builder makes a client set from a credential; NewClients with fixed
// options is the production one.
type Builder func(ctx context.Context, cred Credential) (*Clients, error)

// ClientCache keeps one client set per key (for example a ClusterLink name)
// and rebuilds it only when the caller's version (for example the Secret's
// UID and resourceVersion) or the credential itself changes. Re-authenticating
// on every reconcile would cost a Keystone round trip each time.
type ClientCache struct {
	build   Builder
	mu      sync.Mutex
	entries map[string]*cacheEntry
}

type cacheEntry struct {
	mu          sync.Mutex // serialises builds for one key
	version     string
	fingerprint string
	clients     *Clients
}

func NewClientCache(build Builder) *ClientCache {
	return &ClientCache{build: build, entries: map[string]*cacheEntry{}}
}

// Get returns the cached client set for key, building it when absent or
// stale. A failed build is not cached: the next Get tries again.
func (c *ClientCache) Get(ctx context.Context, key, version string, cred Credential) (*Clients, error) {
	c.mu.Lock()
	e, ok := c.entries[key]
	if !ok {
		e = &cacheEntry{}
		c.entries[key] = e
	}
	c.mu.Unlock()

	e.mu.Lock()
	defer e.mu.Unlock()
	fp := cred.Fingerprint()
	if e.clients != nil && e.version == version && e.fingerprint == fp {
		return e.clients, nil
	}
	clients, err := c.build(ctx, cred)
	if err != nil {
		e.clients = nil
		return nil, err
	}
	e.clients, e.version, e.fingerprint = clients, version, fp
	return clients, nil
}

// Forget drops key's client set (for example when its ClusterLink is gone).
func (c *ClientCache) Forget(key string) {
	c.mu.Lock()
	delete(c.entries, key)
	c.mu.Unlock()
}

// Len is the number of keys with a cached client set.
func (c *ClientCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, e := range c.entries {
		e.mu.Lock()
		if e.clients != nil {
			n++
		}
		e.mu.Unlock()
	}
	return n
}
