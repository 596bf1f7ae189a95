package v1alpha1

import (
	"encoding/base64"
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"bnerd.net/vpn-operator/internal/addrpolicy"
)

// WireGuardListenPort is the effective listen port of wg.
func WireGuardListenPort(wg *WireGuardSpec) int32 {
	if wg == nil || wg.ListenPort == 0 {
		return DefaultWireGuardListenPort
	}
	return wg.ListenPort
}

// WireGuardKeyPort is the UDP port of a gateway key slot: slot 0 is the listen port,
// slot 1 the port after it (the one before it when the listen port is 65535). A key
// rotation serves the new key on the slot the current key is not on, so each key keeps
// its port for its whole life and a client changes its configuration once: to the new
// key and its port together.
func WireGuardKeyPort(wg *WireGuardSpec, slot int) int32 {
	port := WireGuardListenPort(wg)
	if slot == 0 {
		return port
	}
	if port == 65535 {
		return port - 1
	}
	return port + 1
}

// validateWireGuard checks the peers the schema cannot fully judge and records their
// networks in tunnels and remote, as the tunnel loop does for IPsec.
func validateWireGuard(p *field.Path, wg *WireGuardSpec, tunnels map[string][]string, remote *[]owned) field.ErrorList {
	var errs field.ErrorList
	if wg == nil {
		return field.ErrorList{field.Required(p, "a gateway with protocol wireguard needs spec.wireguard with at least one peer")}
	}
	if wg.ListenPort < 0 || wg.ListenPort > 65535 {
		errs = append(errs, field.Invalid(p.Child("listenPort"), wg.ListenPort, "must be between 1 and 65535"))
	}
	pp := p.Child("peers")
	if len(wg.Peers) == 0 {
		errs = append(errs, field.Required(pp, "name at least one peer"))
	}
	keys := map[string]string{}
	endpoints := map[string]string{}
	for i := range wg.Peers {
		peer := &wg.Peers[i]
		ip := pp.Index(i)
		if !dnsLabel.MatchString(peer.Name) || len(peer.Name) > 32 {
			errs = append(errs, field.Invalid(ip.Child("name"), peer.Name, "must be a DNS label of at most 32 characters"))
		}
		if _, dup := tunnels[peer.Name]; dup {
			errs = append(errs, field.Duplicate(ip.Child("name"), peer.Name))
		}
		tunnels[peer.Name] = peer.AllowedIPs
		if err := checkWireGuardKey(peer.PublicKey); err != nil {
			// The value is a public key: safe to echo.
			errs = append(errs, field.Invalid(ip.Child("publicKey"), peer.PublicKey, err.Error()))
		} else if other, dup := keys[peer.PublicKey]; dup {
			errs = append(errs, field.Duplicate(ip.Child("publicKey"), fmt.Sprintf("%s (also the key of peer %q; WireGuard tells peers apart by their key)", peer.PublicKey, other)))
		} else {
			keys[peer.PublicKey] = peer.Name
		}
		if peer.PersistentKeepalive < 0 || peer.PersistentKeepalive > 65535 {
			errs = append(errs, field.Invalid(ip.Child("persistentKeepalive"), peer.PersistentKeepalive, "must be between 0 (off) and 65535 seconds"))
		}
		var endpoint netip.Addr
		if peer.Endpoint != nil {
			ep := ip.Child("endpoint")
			a, err := parseIPv4(peer.Endpoint.Address)
			if err != nil {
				errs = append(errs, field.Invalid(ep.Child("address"), peer.Endpoint.Address, err.Error()))
			} else {
				if err := (addrpolicy.Policy{}).PeerAddress(a); err != nil {
					errs = append(errs, field.Invalid(ep.Child("address"), peer.Endpoint.Address, err.Error()))
				}
				endpoint = a
				key := fmt.Sprintf("%s:%d", a, endpointPort(peer.Endpoint))
				if other, dup := endpoints[key]; dup {
					errs = append(errs, field.Duplicate(ep, fmt.Sprintf("%s (also the endpoint of peer %q)", key, other)))
				}
				endpoints[key] = peer.Name
			}
			if peer.Endpoint.Port < 0 || peer.Endpoint.Port > 65535 {
				errs = append(errs, field.Invalid(ep.Child("port"), peer.Endpoint.Port, "must be between 1 and 65535"))
			}
		}
		if len(peer.AllowedIPs) == 0 {
			errs = append(errs, field.Required(ip.Child("allowedIPs"), "name at least one of the client's networks"))
		}
		for j, sn := range peer.AllowedIPs {
			sp := ip.Child("allowedIPs").Index(j)
			pfx, err := parseIPv4Prefix(sn)
			if err != nil {
				errs = append(errs, field.Invalid(sp, sn, err.Error()))
				continue
			}
			if pfx.Bits() == 0 {
				errs = append(errs, field.Invalid(sp, sn, "would send everything to this peer; name the client's networks"))
			} else if err := (addrpolicy.Policy{}).ClientSubnet(pfx); err != nil {
				errs = append(errs, field.Invalid(sp, sn, err.Error()))
			}
			if endpoint.IsValid() && pfx.Contains(endpoint) {
				errs = append(errs, field.Invalid(sp, sn, fmt.Sprintf("contains the peer's own endpoint %s: its encrypted packets would be routed into the tunnel they carry", endpoint)))
			}
			for _, o := range *remote {
				if o.prefix.Overlaps(pfx) {
					errs = append(errs, field.Invalid(sp, sn, fmt.Sprintf("overlaps %s at %s: WireGuard routes each address to exactly one peer", o.prefix, o.path)))
				}
			}
			*remote = append(*remote, owned{pfx, sp})
		}
	}
	return errs
}

// ValidateAddresses checks the peers' networks against the operator's address policy,
// as GatewaySpec.ValidateAddresses does for the tunnels' client subnets (nil: nothing to
// check).
func (w *WireGuardSpec) ValidateAddresses(pol addrpolicy.Policy) field.ErrorList {
	if w == nil {
		return nil
	}
	var errs field.ErrorList
	p := field.NewPath("spec", "wireguard", "peers")
	for i, peer := range w.Peers {
		for j, sn := range peer.AllowedIPs {
			if pfx, err := netip.ParsePrefix(sn); err == nil && pfx.Bits() > 0 {
				if err := pol.ClientSubnet(pfx); err != nil {
					errs = append(errs, field.Invalid(p.Index(i).Child("allowedIPs").Index(j), sn, err.Error()))
				}
			}
		}
	}
	return errs
}

func endpointPort(ep *WireGuardEndpoint) int32 {
	if ep.Port == 0 {
		return DefaultWireGuardListenPort
	}
	return ep.Port
}

// WireGuardEndpointPort is the effective UDP port of a peer's endpoint.
func WireGuardEndpointPort(ep *WireGuardEndpoint) int32 { return endpointPort(ep) }

// checkWireGuardKey accepts a base64 Curve25519 key as wg(8) prints it.
func checkWireGuardKey(k string) error {
	b, err := base64.StdEncoding.DecodeString(k)
	if err != nil || len(b) != 32 || base64.StdEncoding.EncodeToString(b) != k {
		return fmt.Errorf("must be a WireGuard key: 44 characters of base64 encoding 32 bytes, as `wg pubkey` prints it")
	}
	return nil
}
