// Package gatewayconfig is the contract between the operator and a gateway pod: the
// rendered configuration the reconciler writes into the gateway's ConfigMap and Secret,
// and the pure renderers (swanctl.conf, secrets, strongswan.conf, the NAT model) the
// gateway agent consumes. Nothing here performs I/O. The Kubernetes objects that carry
// this configuration (ConfigMap, Secret, Deployment) are package render's.
package gatewayconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Keys and file names of the rendered configuration.
const (
	// ConfigMapKeyConfig holds the JSON-encoded Config: the only key of the gateway's
	// ConfigMap. The gateway agent renders swanctl.conf and the keys from it itself.
	ConfigMapKeyConfig = "gateway.json"
	// ConfigMapKeySwanctl names RenderSwanctl's output where it is written to a file
	// (tests, the agent's file mode); it is no longer part of the ConfigMap.
	ConfigMapKeySwanctl = "swanctl.conf"
	// SecretKeySecrets names RenderSecrets' output where it is written to a file: the
	// agent's file mode reads the pre-shared keys from it. No Secret carries it any more.
	SecretKeySecrets = "secrets.conf"
)

// FormatVersion is bumped on any incompatible change of Config; the agent refuses a
// version it does not know rather than guessing. Version 2: tunnels name the Secret of
// their pre-shared key (the agent reads it), and the operator's address policy travels
// with the config so the agent can check targets against it.
const FormatVersion = 2

// DefaultStatusAgentHeartbeat is how often a gateway pod's status agent confirms its
// report when nothing changed (its --heartbeat flag's default). It is part of the
// contract between the operator and the pod, so it lives here, where both read it: the
// operator calls a report stale after a multiple of it.
const DefaultStatusAgentHeartbeat = time.Minute

// Errors Build wraps. ErrIncomplete means the status lacks an allocation the operator has
// not made yet (wait and retry); ErrInvalid means the spec or status can never render
// (terminal until the object changes).
var (
	ErrIncomplete = errors.New("gateway status incomplete")
	ErrInvalid    = errors.New("gateway configuration invalid")
)

// Config is everything a gateway pod needs. Field names are part of the ConfigMap format.
type Config struct {
	Version int        `json:"version"`
	Gateway GatewayRef `json:"gateway"`

	// ServiceCIDR is the gateway's /24; GatewayAddress is its .1 (reverse-exposure SNAT
	// source).
	ServiceCIDR    string `json:"serviceCIDR"`
	GatewayAddress string `json:"gatewayAddress"`

	// PortFixedIP, SubnetCIDR and SubnetGatewayIP describe the dedicated port (NIC2) for
	// policy routing; PortFixedIP is also the SNAT source towards exposure targets.
	PortFixedIP     string `json:"portFixedIP"`
	SubnetCIDR      string `json:"subnetCIDR"`
	SubnetGatewayIP string `json:"subnetGatewayIP"`

	// FloatingIP is every tunnel's IKE local identity.
	FloatingIP string `json:"floatingIP"`

	// ServiceCIDRPool is the operator's pool of gateway /24s; ExposureTargetCIDRs, when
	// set, the only space exposure targets may lie in. Both only narrow what the agent
	// accepts (addrpolicy); the special-purpose ranges are refused whatever they say.
	ServiceCIDRPool     string   `json:"serviceCIDRPool,omitempty"`
	ExposureTargetCIDRs []string `json:"exposureTargetCIDRs,omitempty"`

	Tunnels          []Tunnel          `json:"tunnels"`
	Exposures        []Exposure        `json:"exposures"`
	ReverseExposures []ReverseExposure `json:"reverseExposures"`
	MSSClamp         MSSClamp          `json:"mssClamp"`

	// Protocol is empty for IPsec and ProtocolWireGuard for a WireGuard gateway, whose
	// peers are in WireGuard (Tunnels is then empty).
	Protocol  string     `json:"protocol,omitempty"`
	WireGuard *WireGuard `json:"wireguard,omitempty"`

	// InternalSources are the fabric's source networks that routed-mode tunnels connect
	// with the client's subnets; set only when a tunnel is routed.
	InternalSources []string `json:"internalSources,omitempty"`

	// UntrustedSources are networks the gateway never accepts traffic from, except its
	// own port's address and traffic to that address: the operator sends the gateway
	// network, where every other gateway's port lives, so no other gateway (or a tenant
	// through its exposures) reaches this one's reverse exposures or routed clients.
	UntrustedSources []string `json:"untrustedSources,omitempty"`
}

// GatewayRef names the custom resource the config was rendered from.
type GatewayRef struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// Tunnel is one IKEv2 connection with one tunnel-mode child SA.
type Tunnel struct {
	Name          string   `json:"name"`
	PeerAddress   string   `json:"peerAddress"`
	PeerID        string   `json:"peerID"`
	RemoteSubnets []string `json:"remoteSubnets"`
	IKEProposals  []string `json:"ikeProposals"`
	ESPProposals  []string `json:"espProposals"`
	// Rekey intervals and DPD delay in seconds.
	IKERekeySeconds int64  `json:"ikeRekeySeconds"`
	ESPRekeySeconds int64  `json:"espRekeySeconds"`
	DPDDelaySeconds int64  `json:"dpdDelaySeconds"`
	DPDAction       string `json:"dpdAction"`
	// Mode is empty (snat) or ModeRouted.
	Mode string `json:"mode,omitempty"`
	// PSK names the Secret (in the gateway's namespace) and key holding the tunnel's
	// pre-shared key. Never the key itself.
	PSK SecretKeyRef `json:"psk"`
}

// SecretKeyRef names a key of a Secret in the gateway's namespace.
type SecretKeyRef struct {
	Secret string `json:"secret"`
	Key    string `json:"key"`
}

// String is "<secret> key <key>", for messages.
func (r SecretKeyRef) String() string { return r.Secret + " key " + r.Key }

// ModeRouted marks a routed-mode tunnel: no SNAT, its subnets and the internal sources
// reach each other by their real addresses.
const ModeRouted = "routed"

// Port is one transport port; Protocol is "tcp" or "udp".
type Port struct {
	Protocol string `json:"protocol"`
	Port     int32  `json:"port"`
}

// Exposure is one of our services the client reaches. Empty Ports means every port and
// protocol.
type Exposure struct {
	Name          string `json:"name"`
	VirtualIP     string `json:"virtualIP"`
	TargetAddress string `json:"targetAddress"`
	Ports         []Port `json:"ports"`
}

// ReverseExposure is one of the client's services our side reaches through Tunnel.
type ReverseExposure struct {
	Name          string `json:"name"`
	Tunnel        string `json:"tunnel"`
	VirtualIP     string `json:"virtualIP"`
	TargetAddress string `json:"targetAddress"`
	Ports         []Port `json:"ports"`
}

// MSSClamp configures TCP MSS clamping of forwarded SYNs. MSS 0 clamps to the route's
// path MTU; a positive value sets that MSS.
type MSSClamp struct {
	Enabled bool  `json:"enabled"`
	MSS     int32 `json:"mss"`
}

// PSKSecrets lists the Secrets the tunnels read their keys from, sorted, once each.
func (c *Config) PSKSecrets() []string {
	seen := map[string]bool{}
	var out []string
	for _, t := range c.Tunnels {
		if t.PSK.Secret != "" && !seen[t.PSK.Secret] {
			seen[t.PSK.Secret] = true
			out = append(out, t.PSK.Secret)
		}
	}
	sortStrings(out)
	return out
}

// PeerSubnets returns the union of every tunnel's (or WireGuard peer's) remote subnets,
// sorted and deduplicated.
func (c *Config) PeerSubnets() []string {
	seen := map[string]bool{}
	var out []string
	add := func(subnets []string) {
		for _, s := range subnets {
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	for _, t := range c.Tunnels {
		add(t.RemoteSubnets)
	}
	if c.WireGuard != nil {
		for _, p := range c.WireGuard.Peers {
			add(p.AllowedIPs)
		}
	}
	sortStrings(out)
	return out
}

// RoutedSubnets returns the remote subnets of routed-mode tunnels, sorted.
func (c *Config) RoutedSubnets() []string {
	var out []string
	for _, t := range c.Tunnels {
		if t.Mode == ModeRouted {
			out = append(out, t.RemoteSubnets...)
		}
	}
	sortStrings(out)
	return out
}

// PeerEndpoints returns the public addresses of the peers (IKE peers, WireGuard peers
// with a fixed endpoint), sorted and deduplicated: traffic the gateway sends them must
// leave through its port.
func (c *Config) PeerEndpoints() []string {
	seen := map[string]bool{}
	var out []string
	add := func(a string) {
		if a != "" && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for _, t := range c.Tunnels {
		add(t.PeerAddress)
	}
	if c.WireGuard != nil {
		for _, p := range c.WireGuard.Peers {
			add(p.EndpointAddress)
		}
	}
	sortStrings(out)
	return out
}

// Marshal encodes cfg for the ConfigMap. The output is deterministic.
func Marshal(cfg *Config) ([]byte, error) {
	if cfg == nil {
		return nil, fmt.Errorf("%w: nil config", ErrInvalid)
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Unmarshal decodes and validates a Config read from the ConfigMap. It refuses unknown
// fields and format versions so a newer operator cannot be half-understood.
func Unmarshal(data []byte) (*Config, error) {
	var cfg Config
	dec := json.NewDecoder(bytesReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("%w: decoding %s: %v", ErrInvalid, ConfigMapKeyConfig, err)
	}
	if cfg.Version != FormatVersion {
		return nil, fmt.Errorf("%w: format version %d, this agent understands %d", ErrInvalid, cfg.Version, FormatVersion)
	}
	if err := Validate(&cfg); err != nil {
		return nil, err
	}
	return &cfg, nil
}
