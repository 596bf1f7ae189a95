package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TunnelMode selects how a tunnel's traffic is translated at the gateway.
// +kubebuilder:validation:Enum=snat;routed
type TunnelMode string

const (
	// TunnelModeSNAT source-NATs the client's traffic to the gateway's own port address.
	TunnelModeSNAT TunnelMode = "snat"
	// TunnelModeRouted routes the client's real subnets through the gateway without SNAT
	// in either direction: the operator routes them to the gateway's port on its router,
	// and the fabric's internal source CIDRs and the client reach each other by their real
	// addresses.
	TunnelModeRouted TunnelMode = "routed"
)

// Protocol is a transport protocol of an exposed port.
// +kubebuilder:validation:Enum=TCP;UDP
type Protocol string

const (
	ProtocolTCP Protocol = "TCP"
	ProtocolUDP Protocol = "UDP"
)

// GatewaySpec is the desired state shared by IPsecGateway and VPNGateway. Its
// cross-field rules sit on each kind's spec (VPNGateway's depend on the protocol).
type GatewaySpec struct {
	// Endpoint configures the gateway's public IKE endpoint.
	// +optional
	Endpoint *Endpoint `json:"endpoint,omitempty"`

	// Tunnels are the IPsec connections to the client's peers. Every tunnel's IKE local
	// identity is the gateway's floating IP. Required for IPsec; a VPNGateway with protocol
	// wireguard names its peers in spec.wireguard instead.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(x, self.exists_one(y, y.name == x.name))",message="tunnel names must be unique"
	// +optional
	Tunnels []Tunnel `json:"tunnels,omitempty"`

	// Exposures are our services the client reaches through the tunnel. Each gets a virtual
	// IP from .10-.199 of the gateway's service CIDR, DNATed to its target.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=190
	// +kubebuilder:validation:XValidation:rule="self.all(x, self.exists_one(y, y.name == x.name))",message="exposure names must be unique"
	// +optional
	Exposures []Exposure `json:"exposures,omitempty"`

	// ReverseExposures are the client's services our side reaches. Each gets a virtual IP
	// from .200-.254 of the gateway's service CIDR, DNATed through the named tunnel to its
	// target with the service CIDR's .1 as source.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=55
	// +kubebuilder:validation:XValidation:rule="self.all(x, self.exists_one(y, y.name == x.name))",message="reverse exposure names must be unique"
	// +optional
	ReverseExposures []ReverseExposure `json:"reverseExposures,omitempty"`
}

// Endpoint configures the gateway's public IKE endpoint.
type Endpoint struct {
	// FloatingIP pins an existing floating IP (for example when migrating a gateway from a
	// VM). It is adopted and associated with the gateway's port; on deletion it is only
	// disassociated, never released. Unset: the operator allocates one.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="endpoint.floatingIP must be an IPv4 address such as 203.0.113.10"
	// +optional
	FloatingIP string `json:"floatingIP,omitempty"`
}

// Tunnel is one IKEv2 connection with one child SA to a client peer.
type Tunnel struct {
	// Name identifies the tunnel within the gateway (a DNS label).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Mode is snat (the client's traffic is source-NATed to the gateway's port address and
	// reaches only exposures) or routed (the client's subnets and the fabric's internal
	// source CIDRs reach each other by their real addresses, without SNAT; the operator
	// routes the subnets to the gateway on its router).
	// +kubebuilder:default=snat
	// +optional
	Mode TunnelMode `json:"mode,omitempty"`

	// Peer is the client's IKE endpoint and the networks behind it.
	Peer Peer `json:"peer"`

	// PreSharedKey references the Secret key holding the IKE pre-shared key, at least 20
	// bytes long. The Secret must live in the gateway's namespace; the gateway pod reads
	// it itself (through a Role limited to the Secrets its tunnels name).
	PreSharedKey SecretKeyRef `json:"preSharedKey"`

	// IKE sets the IKE SA's proposals and lifetime.
	// +kubebuilder:default={}
	// +optional
	IKE IKEOptions `json:"ike,omitempty"`

	// ESP sets the child SA's proposals and lifetime.
	// +kubebuilder:default={}
	// +optional
	ESP ESPOptions `json:"esp,omitempty"`

	// DPD sets dead peer detection.
	// +kubebuilder:default={}
	// +optional
	DPD DPDOptions `json:"dpd,omitempty"`
}

// Peer is the client's side of a tunnel.
type Peer struct {
	// Address is the peer's public IPv4 address. The gateway's security group admits
	// UDP 500 and 4500 from this address only. Special-purpose addresses are refused;
	// the operator refuses its own ranges (the service-CIDR pool, the gateway network,
	// the internal source networks) with Validated=False/PeerAddressNotAllowed.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="peer.address must be an IPv4 address such as 198.51.100.7"
	// +kubebuilder:validation:XValidation:rule="!isIP(self) || ip(self).family() != 4 || !['0.0.0.0/8', '127.0.0.0/8', '169.254.0.0/16', '224.0.0.0/4', '240.0.0.0/4'].exists(r, cidr(r).containsIP(ip(self)))",message="peer.address must not be a special-purpose address (0.0.0.0/8, loopback 127.0.0.0/8, link-local 169.254.0.0/16 with the cloud metadata service 169.254.169.254, multicast 224.0.0.0/4, reserved 240.0.0.0/4 with the broadcast address)"
	Address string `json:"address"`

	// ID is the peer's IKE identity (an IP address, an FQDN or user@FQDN). Defaults to
	// the address.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9.@:_-]*$`
	// +optional
	ID string `json:"id,omitempty"`

	// Subnets are the client's networks: the remote traffic selectors of the child SA.
	// Traffic to them never leaves the gateway except through the tunnel.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=18
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4 && cidr(self).masked() == cidr(self)",message="each peer subnet must be an IPv4 network in CIDR notation with no host bits set, such as 192.168.10.0/24"
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || cidr(self).ip().family() != 4 || !['0.0.0.0/8', '127.0.0.0/8', '169.254.0.0/16', '224.0.0.0/4', '240.0.0.0/4'].exists(r, cidr(r).containsIP(cidr(self).ip()) || cidr(self).containsIP(cidr(r).ip()))",message="a peer subnet must not overlap a special-purpose range (0.0.0.0/8, loopback 127.0.0.0/8, link-local 169.254.0.0/16 with the cloud metadata service, multicast 224.0.0.0/4, reserved 240.0.0.0/4)"
	Subnets []string `json:"subnets"`
}

// SecretKeyRef names one key of a Secret in the object's own namespace.
type SecretKeyRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Key within the Secret.
	// +kubebuilder:default=psk
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Key string `json:"key,omitempty"`
}

// IKEOptions are the IKE SA's algorithms and lifetime.
type IKEOptions struct {
	// Proposals in strongSwan notation, most preferred first, within the crypto floor
	// (docs/security.md). The default meets a textbook strongSwan (aes256-sha256-modp2048),
	// a FortiGate's and a Cisco IOS-XE's default IKEv2 proposals (docs/interop.md).
	// +kubebuilder:default={"aes256gcm16-aes128gcm16-prfsha384-prfsha256-ecp384-ecp256-modp3072-modp2048","aes256-aes128-sha512-sha384-sha256-ecp384-ecp256-modp3072-modp2048"}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]+(-[a-z0-9]+)*$`
	// +kubebuilder:validation:items:XValidation:rule="self.split('-').all(t, t in ['aes128gcm16', 'aes192gcm16', 'aes256gcm16', 'aes128gcm12', 'aes192gcm12', 'aes256gcm12', 'aes128gcm', 'aes192gcm', 'aes256gcm', 'aes128gcm128', 'aes192gcm128', 'aes256gcm128', 'aes128gcm96', 'aes192gcm96', 'aes256gcm96', 'aes128ccm128', 'aes192ccm128', 'aes256ccm128', 'aes128ccm96', 'aes192ccm96', 'aes256ccm96', 'aes128ccm16', 'aes192ccm16', 'aes256ccm16', 'aes128ccm12', 'aes192ccm12', 'aes256ccm12', 'chacha20poly1305', 'aes128', 'aes192', 'aes256', 'aes128ctr', 'aes192ctr', 'aes256ctr', 'sha256', 'sha384', 'sha512', 'modp2048', 'modp3072', 'modp4096', 'modp6144', 'modp8192', 'ecp256', 'ecp384', 'ecp521', 'ecp256bp', 'ecp384bp', 'ecp512bp', 'curve25519', 'x25519', 'curve448', 'x448', 'prfsha256', 'prfsha384', 'prfsha512'])",message="an IKE proposal uses an algorithm below the crypto floor: allowed are AES-GCM/CCM (12- or 16-octet ICV), ChaCha20-Poly1305, AES with sha256/sha384/sha512, prfsha256/384/512, DH groups modp2048 and up, ecp256 and up, curve25519, curve448 (never null, des, 3des, md5, sha1, modp768, modp1024, modp1536)"
	// +kubebuilder:validation:items:XValidation:rule="self.split('-').exists(t, t in ['modp2048', 'modp3072', 'modp4096', 'modp6144', 'modp8192', 'ecp256', 'ecp384', 'ecp521', 'ecp256bp', 'ecp384bp', 'ecp512bp', 'curve25519', 'x25519', 'curve448', 'x448'])",message="an IKE proposal needs a Diffie-Hellman group: modp2048 or larger, ecp256 or larger, curve25519 or curve448"
	// +optional
	Proposals []string `json:"proposals,omitempty"`
	// Lifetime of the IKE SA before it is rekeyed (seconds, or with an s, m, h or d suffix),
	// from 10m to 24h.
	// +kubebuilder:default="4h"
	// +kubebuilder:validation:Pattern=`^[0-9]{1,6}[smhd]?$`
	// +kubebuilder:validation:MaxLength=7
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]{1,6}[smhd]?$') || [(self.matches('[smhd]$') ? int(self.substring(0, size(self) - 1)) : int(self)) * (self.endsWith('d') ? 86400 : self.endsWith('h') ? 3600 : self.endsWith('m') ? 60 : 1)].all(n, n >= 600 && n <= 86400)",message="ike.lifetime must be between 10m and 24h (600 to 86400 seconds)"
	// +optional
	Lifetime string `json:"lifetime,omitempty"`
}

// ESPOptions are the child SA's algorithms and lifetime.
type ESPOptions struct {
	// Proposals in strongSwan notation, most preferred first, within the crypto floor. A
	// Diffie-Hellman group in a proposal asks for perfect forward secrecy at each rekey.
	// The default offers PFS first and the same algorithms without it after, so a client
	// with PFS gets it and a client without PFS still rekeys (docs/interop.md).
	// +kubebuilder:default={"aes256gcm16-aes128gcm16-ecp384-ecp256-modp3072-modp2048","aes256-aes128-sha512-sha384-sha256-ecp384-ecp256-modp3072-modp2048","aes256gcm16-aes128gcm16","aes256-aes128-sha512-sha384-sha256"}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]+(-[a-z0-9]+)*$`
	// +kubebuilder:validation:items:XValidation:rule="self.split('-').all(t, t in ['aes128gcm16', 'aes192gcm16', 'aes256gcm16', 'aes128gcm12', 'aes192gcm12', 'aes256gcm12', 'aes128gcm', 'aes192gcm', 'aes256gcm', 'aes128gcm128', 'aes192gcm128', 'aes256gcm128', 'aes128gcm96', 'aes192gcm96', 'aes256gcm96', 'aes128ccm128', 'aes192ccm128', 'aes256ccm128', 'aes128ccm96', 'aes192ccm96', 'aes256ccm96', 'aes128ccm16', 'aes192ccm16', 'aes256ccm16', 'aes128ccm12', 'aes192ccm12', 'aes256ccm12', 'chacha20poly1305', 'aes128', 'aes192', 'aes256', 'aes128ctr', 'aes192ctr', 'aes256ctr', 'sha256', 'sha384', 'sha512', 'modp2048', 'modp3072', 'modp4096', 'modp6144', 'modp8192', 'ecp256', 'ecp384', 'ecp521', 'ecp256bp', 'ecp384bp', 'ecp512bp', 'curve25519', 'x25519', 'curve448', 'x448', 'esn', 'noesn'])",message="an ESP proposal uses an algorithm below the crypto floor: allowed are AES-GCM/CCM (12- or 16-octet ICV), ChaCha20-Poly1305, AES with sha256/sha384/sha512, prfsha256/384/512, DH groups modp2048 and up, ecp256 and up, curve25519, curve448 (never null, des, 3des, md5, sha1, modp768, modp1024, modp1536)"
	// +optional
	Proposals []string `json:"proposals,omitempty"`
	// Lifetime of the child SA before it is rekeyed (seconds, or with an s, m, h or d suffix),
	// from 5m to 8h.
	// +kubebuilder:default="1h"
	// +kubebuilder:validation:Pattern=`^[0-9]{1,6}[smhd]?$`
	// +kubebuilder:validation:MaxLength=7
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]{1,6}[smhd]?$') || [(self.matches('[smhd]$') ? int(self.substring(0, size(self) - 1)) : int(self)) * (self.endsWith('d') ? 86400 : self.endsWith('h') ? 3600 : self.endsWith('m') ? 60 : 1)].all(n, n >= 300 && n <= 28800)",message="esp.lifetime must be between 5m and 8h (300 to 28800 seconds)"
	// +optional
	Lifetime string `json:"lifetime,omitempty"`
}

// DPDOptions configure dead peer detection.
type DPDOptions struct {
	// Delay between liveness checks when no traffic is seen (seconds, or with an s, m, h or
	// d suffix), from 10s to 1h.
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Pattern=`^[0-9]{1,6}[smhd]?$`
	// +kubebuilder:validation:MaxLength=7
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]{1,6}[smhd]?$') || [(self.matches('[smhd]$') ? int(self.substring(0, size(self) - 1)) : int(self)) * (self.endsWith('d') ? 86400 : self.endsWith('h') ? 3600 : self.endsWith('m') ? 60 : 1)].all(n, n >= 10 && n <= 3600)",message="dpd.delay must be between 10s and 1h (10 to 3600 seconds)"
	// +optional
	Delay string `json:"delay,omitempty"`
	// Action when the peer is found dead: restart re-initiates, clear closes, trap waits
	// for traffic.
	// +kubebuilder:default=restart
	// +kubebuilder:validation:Enum=restart;clear;trap
	// +optional
	Action string `json:"action,omitempty"`
}

// PortSpec is one exposed port.
type PortSpec struct {
	// Port number.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
	// Protocol of the port.
	// +kubebuilder:default=TCP
	// +optional
	Protocol Protocol `json:"protocol,omitempty"`
}

// Target is where an exposure's traffic is delivered.
type Target struct {
	// Address is the target's IPv4 address (an internal load-balancer VIP, a NodePort
	// address, a VM).
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="target.address must be an IPv4 address such as 10.250.0.20"
	// +kubebuilder:validation:XValidation:rule="!isIP(self) || ip(self).family() != 4 || !['0.0.0.0/8', '127.0.0.0/8', '169.254.0.0/16', '224.0.0.0/4', '240.0.0.0/4'].exists(r, cidr(r).containsIP(ip(self)))",message="target.address must not be a special-purpose address (0.0.0.0/8, loopback 127.0.0.0/8, link-local 169.254.0.0/16 with the cloud metadata service 169.254.169.254, multicast 224.0.0.0/4, reserved 240.0.0.0/4)"
	Address string `json:"address"`
	// Ports forwarded to the target. Empty means every port and protocol.
	// +listType=map
	// +listMapKey=port
	// +listMapKey=protocol
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Ports []PortSpec `json:"ports,omitempty"`
}

// Exposure is one of our services the client reaches through the tunnel.
type Exposure struct {
	// Name identifies the exposure within the gateway (a DNS label).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// VirtualIP pins the exposure's address; it must lie in .10-.199 of the gateway's
	// service CIDR. Unset: one is allocated and reported in status.exposures.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="virtualIP must be an IPv4 address such as 100.64.3.10"
	// +optional
	VirtualIP string `json:"virtualIP,omitempty"`
	// Target receives the exposure's traffic.
	Target Target `json:"target"`
	// AllowPlaintext acknowledges that this exposure carries a protocol that is not
	// encrypted end to end (plain HTTP, LDAP, ...) or every port. Traffic from the gateway
	// to the target crosses the fabric unencrypted, so such an exposure is refused unless
	// this is set.
	// +optional
	AllowPlaintext bool `json:"allowPlaintext,omitempty"`
}

// ReverseExposure is one of the client's services our side reaches through a tunnel.
type ReverseExposure struct {
	// Name identifies the reverse exposure within the gateway (a DNS label).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// Tunnel names the tunnel the target sits behind.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	Tunnel string `json:"tunnel"`
	// VirtualIP pins the reverse exposure's address; it must lie in .200-.254 of the
	// gateway's service CIDR. Unset: one is allocated and reported in
	// status.reverseExposures.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="virtualIP must be an IPv4 address such as 100.64.3.200"
	// +optional
	VirtualIP string `json:"virtualIP,omitempty"`
	// Target is the client's service, inside one of the tunnel's peer subnets.
	Target Target `json:"target"`
}

// AllocatedAddress reports the virtual IP given to an exposure or reverse exposure.
type AllocatedAddress struct {
	// Name of the exposure or reverse exposure.
	Name string `json:"name"`
	// VirtualIP allocated (or pinned) for it.
	VirtualIP string `json:"virtualIP"`
}

// TunnelState is a tunnel's state as the gateway's status agent last saw it.
type TunnelState struct {
	// Name of the tunnel.
	Name string `json:"name"`
	// State is Up when an IKE SA and at least one child SA are installed, Connecting
	// while negotiating, Down otherwise.
	// +kubebuilder:validation:Enum=Up;Connecting;Down
	State string `json:"state"`
	// IKESAs is the number of IKE SAs of the tunnel.
	// +optional
	IKESAs int32 `json:"ikeSAs,omitempty"`
	// ChildSAs is the number of installed child SAs of the tunnel.
	// +optional
	ChildSAs int32 `json:"childSAs,omitempty"`
	// EstablishedAt is when the current IKE SA was established.
	// +optional
	EstablishedAt *metav1.Time `json:"establishedAt,omitempty"`
	// LatestHandshake is a WireGuard peer's most recent handshake with the gateway's
	// current key (WireGuard gateways only). A peer is Up while it is younger than three
	// minutes.
	// +optional
	LatestHandshake *metav1.Time `json:"latestHandshake,omitempty"`
	// Reason is the cause of a Down or Connecting state as charon saw it, or of trouble
	// ahead on an Up tunnel (PFSMismatchAtRekey: its rekeys are refused and it goes down
	// when the child SA expires): AuthenticationFailed, NoCommonIKEProposal,
	// NoCommonESPProposal, TrafficSelectorsRefused, PeerNotResponding,
	// PFSMismatchAtRekey; CharonUnreachable when the agent cannot reach charon;
	// WaitingForPreSharedKey when the tunnel is not started because its key is missing,
	// unreadable or too short; and ChangeRefused or Reestablishing while a changed
	// configuration is being applied.
	// Empty when nothing is known to be wrong.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message explains the state in words: what failed, what differs, when the next
	// attempt is due.
	// +optional
	Message string `json:"message,omitempty"`
	// LastTransitionTime is when the status agent first saw the tunnel in its current
	// state (kept across agent restarts while the state stays the same).
	// +optional
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
}

// GatewayStatus is the observed state shared by IPsecGateway and VPNGateway.
type GatewayStatus struct {
	// ObservedGeneration is the generation the operator last reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// ServiceCIDR is the /24 of the pool allocated to this gateway.
	// +optional
	ServiceCIDR string `json:"serviceCIDR,omitempty"`
	// ServiceCIDRGatewayAddress is .1 of the service CIDR: the SNAT source of reverse
	// exposures, never given to an exposure.
	// +optional
	ServiceCIDRGatewayAddress string `json:"serviceCIDRGatewayAddress,omitempty"`
	// FloatingIP is the gateway's public address and every tunnel's IKE local identity.
	// +optional
	FloatingIP string `json:"floatingIP,omitempty"`
	// FloatingIPID is the Neutron ID of the floating IP.
	// +optional
	FloatingIPID string `json:"floatingIPID,omitempty"`
	// PortID is the Neutron ID of the gateway's dedicated port.
	// +optional
	PortID string `json:"portID,omitempty"`
	// PortFixedIP is the dedicated port's fixed IP on the gateway network.
	// +optional
	PortFixedIP string `json:"portFixedIP,omitempty"`
	// PortMACAddress is the dedicated port's MAC address, which selects the host device.
	// +optional
	PortMACAddress string `json:"portMACAddress,omitempty"`
	// SubnetCIDR is the CIDR of the port's subnet, for the pod's policy routing.
	// +optional
	SubnetCIDR string `json:"subnetCIDR,omitempty"`
	// SubnetGatewayIP is the gateway IP of the port's subnet, the pod's default route on NIC2.
	// +optional
	SubnetGatewayIP string `json:"subnetGatewayIP,omitempty"`
	// SecurityGroupID is the Neutron ID of the gateway's security group.
	// +optional
	SecurityGroupID string `json:"securityGroupID,omitempty"`
	// NodeName is the node the port is attached to and the gateway pod is pinned to.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// ServerID is the Nova server the port is attached to.
	// +optional
	ServerID string `json:"serverID,omitempty"`
	// Exposures lists the virtual IP of every exposure.
	// +listType=map
	// +listMapKey=name
	// +optional
	Exposures []AllocatedAddress `json:"exposures,omitempty"`
	// ReverseExposures lists the virtual IP of every reverse exposure.
	// +listType=map
	// +listMapKey=name
	// +optional
	ReverseExposures []AllocatedAddress `json:"reverseExposures,omitempty"`
	// Tunnels is each tunnel's state, written by the gateway's status agent.
	// +listType=map
	// +listMapKey=name
	// +optional
	Tunnels []TunnelState `json:"tunnels,omitempty"`
	// TunnelsReady summarises the tunnels as "up/total", written by the status agent.
	// +optional
	TunnelsReady string `json:"tunnelsReady,omitempty"`
	// TunnelsObservedTime is the status agent's heartbeat: when it last confirmed
	// status.tunnels against charon. It is written with every change and at least once a
	// minute; the operator treats the report as stale (TunnelsUp Unknown) when it is
	// older than its status-agent stale-after time.
	// +optional
	TunnelsObservedTime *metav1.Time `json:"tunnelsObservedTime,omitempty"`
	// TunnelSummary is the operator's reading of the status agent's report, shown by
	// kubectl get: "up/total" while the report is current, "?/total" while there is none
	// or it is stale (see the TunnelsUp condition).
	// +optional
	TunnelSummary string `json:"tunnelSummary,omitempty"`
	// WireGuard is the gateway's WireGuard identity (protocol wireguard only).
	// +optional
	WireGuard *WireGuardStatus `json:"wireguard,omitempty"`
	// InterfacePublicKey is the public key the gateway's WireGuard interface uses, as its
	// status agent last saw it. It differs from wireguard.publicKey until the pod has
	// picked up a rotated key.
	// +optional
	InterfacePublicKey string `json:"interfacePublicKey,omitempty"`
	// Conditions are the operator's reconcile phases and the Ready summary.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// IPsecGateway is a site-to-site IPsec gateway into this platform's services: its
// tunnels to a client's peers, the services the client may reach (exposures) and the
// client's services our side may reach (reverse exposures).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ipsecgw;ipgw,categories=bnerd-vpn
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Pod",type=string,JSONPath=`.status.conditions[?(@.type=="PodReady")].reason`
// +kubebuilder:printcolumn:name="Tunnels Up",type=string,JSONPath=`.status.tunnelSummary`
// +kubebuilder:printcolumn:name="Pod Update",type=string,JSONPath=`.status.conditions[?(@.type=="PodUpToDate")].reason`,priority=1
// +kubebuilder:printcolumn:name="Floating IP",type=string,JSONPath=`.status.floatingIP`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Service CIDR",type=string,JSONPath=`.status.serviceCIDR`,priority=1
// +kubebuilder:printcolumn:name="Agent Report",type=date,JSONPath=`.status.tunnelsObservedTime`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type IPsecGateway struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired gateway.
	// +kubebuilder:validation:XValidation:rule="has(self.tunnels)",message="spec.tunnels is required: an IPsec gateway needs at least one tunnel"
	// +kubebuilder:validation:XValidation:rule="!has(self.reverseExposures) || (has(self.tunnels) && self.reverseExposures.all(r, self.tunnels.exists(t, t.name == r.tunnel)))",message="every reverseExposures[].tunnel must name a tunnel listed in spec.tunnels"
	Spec GatewaySpec `json:"spec"`
	// Status is the gateway as the operator and its status agent observed it.
	// +optional
	Status GatewayStatus `json:"status,omitempty"`
}

// IPsecGatewayList is a list of IPsecGateways.
// +kubebuilder:object:root=true
type IPsecGatewayList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IPsecGateway `json:"items"`
}

// VPNProtocol selects a VPNGateway's tunnel protocol.
// +kubebuilder:validation:Enum=ipsec;wireguard
type VPNProtocol string

const (
	VPNProtocolIPsec     VPNProtocol = "ipsec"
	VPNProtocolWireGuard VPNProtocol = "wireguard"
)

// VPNGatewaySpec is a GatewaySpec with a choice of tunnel protocol.
//
// +kubebuilder:validation:XValidation:rule="(has(self.protocol) && self.protocol == 'wireguard') ? (has(self.wireguard) && !has(self.tunnels)) : (has(self.tunnels) && !has(self.wireguard))",message="protocol ipsec needs spec.tunnels and no spec.wireguard; protocol wireguard needs spec.wireguard (its peers) and no spec.tunnels"
// +kubebuilder:validation:XValidation:rule="!has(self.reverseExposures) || self.reverseExposures.all(r, (has(self.tunnels) && self.tunnels.exists(t, t.name == r.tunnel)) || (has(self.wireguard) && self.wireguard.peers.exists(p, p.name == r.tunnel)))",message="every reverseExposures[].tunnel must name a tunnel listed in spec.tunnels (protocol wireguard: a peer listed in spec.wireguard.peers)"
type VPNGatewaySpec struct {
	GatewaySpec `json:",inline"`

	// Protocol of the tunnels: ipsec (behaves exactly like an IPsecGateway) or wireguard
	// (the peers are spec.wireguard.peers; exposures and reverse exposures work the same).
	// +kubebuilder:default=ipsec
	// +optional
	Protocol VPNProtocol `json:"protocol,omitempty"`

	// WireGuard configures the gateway's WireGuard interface and peers (protocol
	// wireguard only).
	// +optional
	WireGuard *WireGuardSpec `json:"wireguard,omitempty"`
}

// VPNGateway is a protocol-neutral gateway into this platform's services; with
// protocol ipsec it behaves exactly like an IPsecGateway.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=vpngw,categories=bnerd-vpn
// +kubebuilder:printcolumn:name="Protocol",type=string,JSONPath=`.spec.protocol`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Pod",type=string,JSONPath=`.status.conditions[?(@.type=="PodReady")].reason`
// +kubebuilder:printcolumn:name="Tunnels Up",type=string,JSONPath=`.status.tunnelSummary`
// +kubebuilder:printcolumn:name="Pod Update",type=string,JSONPath=`.status.conditions[?(@.type=="PodUpToDate")].reason`,priority=1
// +kubebuilder:printcolumn:name="Floating IP",type=string,JSONPath=`.status.floatingIP`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Service CIDR",type=string,JSONPath=`.status.serviceCIDR`,priority=1
// +kubebuilder:printcolumn:name="Agent Report",type=date,JSONPath=`.status.tunnelsObservedTime`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VPNGateway struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired gateway.
	Spec VPNGatewaySpec `json:"spec"`
	// Status is the gateway as the operator and its status agent observed it.
	// +optional
	Status GatewayStatus `json:"status,omitempty"`
}

// VPNGatewayList is a list of VPNGateways.
// +kubebuilder:object:root=true
type VPNGatewayList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VPNGateway `json:"items"`
}

func init() {
	SchemeBuilder.Register(&IPsecGateway{}, &IPsecGatewayList{}, &VPNGateway{}, &VPNGatewayList{})
}
