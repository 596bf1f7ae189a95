package migrate

import (
	"bnerd.net/vpn-operator/internal/cryptofloor"
	"fmt"
	"net/netip"
	"strings"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// Why settings are not carried over, shared by both formats.
const (
	whyLocalTS = "our side's networks: the gateway's tunnels carry its own service CIDR (a /24 of the operator's pool) instead, and each service a client reaches becomes an entry of spec.exposures with a virtual IP in it. Add the exposures, then the client changes its remote traffic selector to the gateway's status.serviceCIDR"
	whyLocal   = "the gateway sends IKE from its own Neutron port (local_addrs %any) behind its floating IP"
	whyRender  = "the gateway renders this itself"
	whyEncap   = "the gateway always forces UDP encapsulation (NAT-T), its security group opens only UDP 500 and 4500"
	whyStart   = "the gateway initiates every tunnel at start and re-initiates it after a close or dead peer"
	whyRoadW   = "virtual IPs and address pools are for road warriors; the gateway connects sites"
	whyAuth    = "the gateway authenticates with pre-shared keys only"
	whyIKEv1   = "the gateway speaks IKEv2 only: the client must move to IKEv2"
	whyMode    = "the gateway's child SAs are always tunnel mode"
	whyNoKnob  = "the gateway has no setting for this"
)

// swanctlConnHandling says what happens to each connection-level swanctl key.
var swanctlConnHandling = map[string]string{
	"local_addrs": whyLocal, "local_port": whyLocal, "remote_port": "the gateway talks to the peer's standard ports 500/4500",
	"encap": whyEncap, "mobike": whyNoKnob + " (MOBIKE is not used between fixed sites)", "fragmentation": whyNoKnob,
	"childless": whyNoKnob, "send_certreq": whyAuth, "send_cert": whyAuth, "ocsp": whyAuth, "keyingtries": whyStart,
	"unique": whyRender, "reauth_time": whyNoKnob + " (the gateway rekeys, it does not reauthenticate)", "over_time": whyNoKnob,
	"rand_time": whyNoKnob, "dpd_timeout": "IKEv1 only", "aggressive": whyIKEv1, "pull": whyRoadW, "dscp": whyNoKnob,
	"if_id_in": whyRender, "if_id_out": whyRender, "mediation": whyNoKnob, "mediated_by": whyNoKnob, "mediation_peer": whyNoKnob,
	"ppk_id": whyNoKnob, "ppk_required": whyNoKnob, "close_action": whyStart,
}

var swanctlChildHandling = map[string]string{
	"updown": whyRender, "hostaccess": whyRender, "policies": whyRender, "policies_fwd_out": whyRender, "priority": whyRender,
	"interface": whyRender, "mark_in": whyRender, "mark_out": whyRender, "mark_in_sa": whyRender, "set_mark_in": whyRender,
	"set_mark_out": whyRender, "if_id_in": whyRender, "if_id_out": whyRender, "reqid": whyRender, "start_action": whyStart,
	"close_action": whyStart, "life_time": whyNoKnob + " (the gateway sets the rekey time; strongSwan derives the hard lifetime)",
	"rand_time": whyNoKnob, "rekey_bytes": whyNoKnob, "life_bytes": whyNoKnob, "rand_bytes": whyNoKnob,
	"rekey_packets": whyNoKnob, "life_packets": whyNoKnob, "rand_packets": whyNoKnob, "inactivity": whyStart,
	"ipcomp": whyNoKnob, "replay_window": whyNoKnob, "hw_offload": whyRender, "copy_df": whyRender, "copy_ecn": whyRender,
	"copy_dscp": whyRender, "sha256_96": whyNoKnob, "label": whyNoKnob, "label_mode": whyNoKnob, "per_cpu_sas": whyRender,
}

// ipsecHandling says what happens to each ipsec.conf key not converted below.
var ipsecHandling = map[string]string{
	"left": whyLocal, "leftsubnet": whyLocalTS, "leftfirewall": whyRender, "leftupdown": whyRender, "lefthostaccess": whyRender,
	"leftprotoport": whyRender, "leftsendcert": whyAuth, "leftikeport": whyLocal, "leftsourceip": whyRoadW,
	"rightsourceip": whyRoadW, "rightdns": whyRoadW, "leftdns": whyRoadW, "rightsendcert": whyAuth, "rightikeport": "the gateway talks to the peer's standard ports 500/4500",
	"rightfirewall": whyRender, "rightupdown": whyRender, "rightprotoport": "protocol/port-restricted selectors have no counterpart",
	"auto": whyStart, "closeaction": whyStart, "keyingtries": whyStart, "rekey": whyRender, "reauth": whyNoKnob + " (the gateway rekeys, it does not reauthenticate)",
	"rekeymargin": whyNoKnob, "margintime": whyNoKnob, "rekeyfuzz": whyNoKnob, "ikedscp": whyNoKnob, "dpdtimeout": "IKEv1 only",
	"mobike": whyNoKnob, "forceencaps": whyEncap, "fragmentation": whyNoKnob, "compress": whyNoKnob, "installpolicy": whyRender,
	"mark": whyRender, "mark_in": whyRender, "mark_out": whyRender, "reqid": whyRender, "replay_window": whyNoKnob,
	"inactivity": whyStart, "aggressive": whyIKEv1, "modeconfig": whyRoadW, "xauth": whyAuth, "xauth_identity": whyAuth,
	"eap_identity": whyAuth, "aaa_identity": whyAuth, "tfc": whyNoKnob, "hw_offload": whyRender, "sha256_96": whyNoKnob,
	"lifepackets": whyNoKnob, "lifebytes": whyNoKnob, "marginpackets": whyNoKnob, "marginbytes": whyNoKnob,
	"leftallowany": whyLocal, "rightallowany": "the gateway's peer has one static address",
	"leftca": whyAuth, "rightca": whyAuth, "leftcert": whyAuth, "rightcert": whyAuth, "leftsigkey": whyAuth, "rightsigkey": whyAuth,
	"leftrsasigkey": whyAuth, "rightrsasigkey": whyAuth, "leftgroups": whyAuth, "rightgroups": whyAuth,
	"leftauth2": whyAuth, "rightauth2": whyAuth, "leftid2": whyAuth, "rightid2": whyAuth, "leftcertpolicy": whyAuth,
}

// refuse records why a whole connection cannot become a tunnel and returns nil.
func (r *Result) refuse(c conn, setting, value, why string) *tunnelDraft {
	r.drop(setting, value, "connection "+c.name+" is not migrated: "+why)
	return nil
}

// convert turns one connection into a tunnel draft, or records why it cannot be one.
func (r *Result) convert(c conn) *tunnelDraft {
	if c.legacy {
		return r.convertLegacy(c)
	}
	d := &tunnelDraft{t: v1alpha1.Tunnel{Name: sanitize(c.name)}, origin: Tunnel{From: []string{c.where}}}
	if v, ok := get(c.settings, "version"); ok && v == "1" {
		return r.refuse(c, c.where+".version", v, whyIKEv1)
	}
	if v, ok := get(c.settings, "vips"); ok {
		return r.refuse(c, c.where+".vips", v, whyRoadW)
	}
	if v, ok := get(c.settings, "pools"); ok {
		return r.refuse(c, c.where+".pools", v, whyRoadW)
	}
	for _, side := range [][]setting{c.local, c.remote} {
		for _, s := range side {
			if strings.HasSuffix(s.key, ".auth") && s.value != "psk" {
				return r.refuse(c, s.path, s.value, whyAuth)
			}
		}
	}
	addr, ok := get(c.settings, "remote_addrs")
	if !ok {
		return r.refuse(c, c.where+".remote_addrs", "", "no peer address: the gateway's security group admits one static IPv4 peer address per tunnel")
	}
	if a, err := netip.ParseAddr(addr); err != nil || !a.Is4() {
		return r.refuse(c, c.where+".remote_addrs", addr, "the peer must be one static IPv4 address (the gateway's security group admits exactly that address)")
	}
	d.t.Peer.Address = addr
	for _, s := range c.remote {
		switch {
		case strings.HasSuffix(s.key, ".id"):
			id := strings.TrimPrefix(s.value, "@")
			if id == addr || id == "%any" {
				continue
			}
			if !reIKEID.MatchString(id) || len(id) > 253 {
				return r.refuse(c, s.path, s.value, "the peer identity must be an IP address, an FQDN or user@FQDN (no distinguished names)")
			}
			d.t.Peer.ID = id
		case strings.HasSuffix(s.key, ".auth"):
		default:
			r.drop(s.path, s.value, whyAuth)
		}
	}
	for _, s := range c.local {
		switch {
		case strings.HasSuffix(s.key, ".id"):
			d.localID = strings.TrimPrefix(s.value, "@")
			r.drop(s.path, s.value, "the gateway's IKE identity is always its floating IP")
		case strings.HasSuffix(s.key, ".auth"):
		default:
			r.drop(s.path, s.value, whyAuth)
		}
	}
	for _, s := range c.settings {
		switch s.key {
		case "version", "remote_addrs":
		case "proposals":
			if p, ok := r.proposals(cryptofloor.IKE, s.path, s.value); ok {
				d.t.IKE.Proposals = p
			}
		case "rekey_time":
			if v, ok := r.duration(s.path, s.value); ok {
				d.t.IKE.Lifetime = v
			}
		case "dpd_delay":
			if v, ok := r.duration(s.path, s.value); ok {
				d.t.DPD.Delay = v
			}
		default:
			why := swanctlConnHandling[s.key]
			if why == "" {
				// The value of a setting this migration does not know is not shown:
				// nothing says what it holds.
				r.drop(s.path, "", "not a setting this migration knows")
				continue
			}
			r.drop(s.path, s.value, why)
		}
	}
	if len(c.children) == 0 {
		return r.refuse(c, c.where+".children", "", "no child SA: nothing to carry traffic")
	}
	for _, ch := range c.children {
		if v, ok := get(ch.settings, "mode"); ok && v != "tunnel" {
			r.drop(c.where+".children."+ch.name+".mode", v, "child not migrated: "+whyMode)
			continue
		}
		if v, ok := get(ch.settings, "ah_proposals"); ok {
			r.drop(c.where+".children."+ch.name+".ah_proposals", v, "child not migrated: the gateway uses ESP only")
			continue
		}
		for _, s := range ch.settings {
			switch s.key {
			case "mode":
			case "remote_ts":
				if sn, ok := r.remoteSubnets(s.path, s.value); ok {
					for _, x := range sn {
						if !contains(d.t.Peer.Subnets, x) {
							d.t.Peer.Subnets = append(d.t.Peer.Subnets, x)
						}
					}
				}
			case "local_ts":
				r.drop(s.path, s.value, whyLocalTS)
			case "esp_proposals":
				if p, ok := r.proposals(cryptofloor.ESP, s.path, s.value); ok && len(d.t.ESP.Proposals) == 0 {
					d.t.ESP.Proposals = p
				}
			case "rekey_time":
				if v, ok := r.duration(s.path, s.value); ok && d.t.ESP.Lifetime == "" {
					d.t.ESP.Lifetime = v
				}
			case "dpd_action":
				if a, ok := dpdAction(s.value); ok {
					d.t.DPD.Action = a
				} else {
					r.drop(s.path, s.value, "the gateway's DPD action is restart, clear or trap; restart applies")
				}
			default:
				why := swanctlChildHandling[s.key]
				if why == "" {
					r.drop(s.path, "", "not a setting this migration knows")
					continue
				}
				r.drop(s.path, s.value, why)
			}
		}
	}
	if len(d.t.Peer.Subnets) == 0 {
		return r.refuse(c, c.where+".children", "", "no usable remote_ts: the tunnel needs the client's IPv4 networks")
	}
	d.origin.Peer = addr
	return d
}

func (r *Result) convertLegacy(c conn) *tunnelDraft {
	d := &tunnelDraft{t: v1alpha1.Tunnel{Name: sanitize(c.name)}, origin: Tunnel{From: []string{c.where}}}
	path := func(k string) string {
		for _, s := range c.settings {
			if s.key == k {
				return s.path
			}
		}
		return c.where + ": " + k
	}
	if v, ok := get(c.settings, "keyexchange"); ok && v == "ikev1" {
		return r.refuse(c, path("keyexchange"), v, whyIKEv1)
	} else if !ok || v == "ike" {
		r.Notes = append(r.Notes, fmt.Sprintf("%s: keyexchange is %q; strongSwan then initiates IKEv2, which is all the gateway speaks: check the client is not on IKEv1", c.where, orText(v, "not set")))
	}
	if v, ok := get(c.settings, "type"); ok && v != "tunnel" {
		return r.refuse(c, path("type"), v, whyMode)
	}
	if v, ok := get(c.settings, "authby"); ok && v != "secret" && v != "psk" {
		return r.refuse(c, path("authby"), v, whyAuth)
	}
	for _, k := range []string{"leftauth", "rightauth"} {
		if v, ok := get(c.settings, k); ok && v != "psk" && v != "secret" {
			return r.refuse(c, path(k), v, whyAuth)
		}
	}
	if v, ok := get(c.settings, "ah"); ok {
		return r.refuse(c, path("ah"), v, "the gateway uses ESP only")
	}
	right, _ := get(c.settings, "right")
	if a, err := netip.ParseAddr(right); err != nil || !a.Is4() {
		return r.refuse(c, path("right"), right, "the peer must be one static IPv4 address (the gateway's security group admits exactly that address)")
	}
	d.t.Peer.Address = right
	rs, ok := get(c.settings, "rightsubnet")
	if !ok {
		return r.refuse(c, path("rightsubnet"), "", "no rightsubnet: the tunnel needs the client's IPv4 networks")
	}
	sn, ok := r.remoteSubnets(path("rightsubnet"), rs)
	if !ok {
		return r.refuse(c, path("rightsubnet"), rs, "no usable client networks")
	}
	d.t.Peer.Subnets = sn
	for _, s := range c.settings {
		switch s.key {
		case "right", "rightsubnet", "keyexchange", "type", "authby", "leftauth", "rightauth":
		case "rightid":
			id := strings.TrimPrefix(s.value, "@")
			if id == right || id == "%any" {
				continue
			}
			if !reIKEID.MatchString(id) || len(id) > 253 {
				return r.refuse(c, s.path, s.value, "the peer identity must be an IP address, an FQDN or user@FQDN (no distinguished names)")
			}
			d.t.Peer.ID = id
		case "leftid":
			d.localID = strings.TrimPrefix(s.value, "@")
			r.drop(s.path, s.value, "the gateway's IKE identity is always its floating IP")
		case "ike":
			if p, ok := r.proposals(cryptofloor.IKE, s.path, s.value); ok {
				d.t.IKE.Proposals = p
			}
		case "esp":
			if p, ok := r.proposals(cryptofloor.ESP, s.path, s.value); ok {
				d.t.ESP.Proposals = p
			}
		case "ikelifetime":
			if v, ok := r.duration(s.path, s.value); ok {
				d.t.IKE.Lifetime = v
			}
		case "lifetime", "keylife":
			if v, ok := r.duration(s.path, s.value); ok {
				d.t.ESP.Lifetime = v
			}
		case "dpddelay":
			if v, ok := r.duration(s.path, s.value); ok {
				d.t.DPD.Delay = v
			}
		case "dpdaction":
			if a, ok := dpdAction(s.value); ok {
				d.t.DPD.Action = a
			} else {
				r.drop(s.path, s.value, "the gateway's DPD action is restart, clear or trap (hold becomes trap); restart applies")
			}
		default:
			why := ipsecHandling[s.key]
			if why == "" {
				// The value of a setting this migration does not know is not shown:
				// nothing says what it holds.
				r.drop(s.path, "", "not a setting this migration knows")
				continue
			}
			r.drop(s.path, s.value, why)
		}
	}
	d.origin.Peer = right
	return d
}
