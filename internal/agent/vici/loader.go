// Package vici loads the rendered swanctl configuration into charon over its VICI socket
// and reads tunnel state back. It converts the same swanctl.conf text the operator
// renders, so what the gateway runs is exactly what was rendered and reviewed.
package vici

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"

	govici "github.com/strongswan/govici/vici"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// listKeys are the swanctl.conf keys whose comma-separated values are lists in VICI
// (the same set swanctl's own load-conns uses).
var listKeys = map[string]bool{
	"local_addrs": true, "remote_addrs": true, "proposals": true, "esp_proposals": true,
	"ah_proposals": true, "local_ts": true, "remote_ts": true, "vips": true, "pools": true,
	"groups": true, "cert_policy": true,
}

func sectionMessage(s *gatewayconfig.Section) (*govici.Message, error) {
	m := govici.NewMessage()
	for _, kv := range s.Keys {
		var v any = kv.Value
		if listKeys[kv.Key] {
			parts := strings.Split(kv.Value, ",")
			for i := range parts {
				parts[i] = strings.TrimSpace(parts[i])
			}
			v = parts
		}
		if err := m.Set(kv.Key, v); err != nil {
			return nil, err
		}
	}
	for _, c := range s.Sections {
		sub, err := sectionMessage(c)
		if err != nil {
			return nil, err
		}
		if err := m.Set(c.Name, sub); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Connection is one connection of swanctl.conf ready for load-conn.
type Connection struct {
	Name    string
	Message *govici.Message
	// Hash identifies the connection's content; an unchanged hash is not reloaded.
	Hash string
}

// Connections converts the connections section of swanctl.conf text.
func Connections(swanctl string) ([]Connection, error) {
	root, err := gatewayconfig.ParseSettings(swanctl)
	if err != nil {
		return nil, fmt.Errorf("parsing swanctl.conf: %w", err)
	}
	conns := root.Sub("connections")
	if conns == nil {
		return nil, fmt.Errorf("swanctl.conf has no connections section")
	}
	var out []Connection
	for _, c := range conns.Sections {
		body, err := sectionMessage(c)
		if err != nil {
			return nil, fmt.Errorf("connection %s: %w", c.Name, err)
		}
		msg := govici.NewMessage()
		if err := msg.Set(c.Name, body); err != nil {
			return nil, err
		}
		h := sha256.New()
		for _, p := range flatten(c, "") {
			h.Write([]byte(p + "\n"))
		}
		out = append(out, Connection{Name: c.Name, Message: msg, Hash: hex.EncodeToString(h.Sum(nil))})
	}
	return out, nil
}

func flatten(s *gatewayconfig.Section, prefix string) []string {
	var out []string
	for _, kv := range s.Keys {
		out = append(out, prefix+kv.Key+"="+kv.Value)
	}
	for _, c := range s.Sections {
		out = append(out, flatten(c, prefix+c.Name+".")...)
	}
	return out
}

// Loader keeps charon's connections and shared keys equal to the rendered files. It
// loads keys before connections (a connection with start_action=start initiates at
// once), reloads only connections whose content changed, unloads removed ones, and
// initiates connections that have no IKE SA, so unchanged tunnels keep their SAs.
type Loader struct {
	Socket string
	// LocalAddress, when set, is the only address an IKE SA may run from (the gateway
	// port's fixed IP): an SA established from any other (over the pod network, before
	// the port's routing was in place) is terminated and initiated again.
	LocalAddress string
	// Logf receives one line per action; it never receives secret values.
	Logf func(format string, args ...any)

	mu      sync.Mutex
	loaded  map[string]string
	secrets string
	// childless counts consecutive rounds a tunnel's IKE SA had no child SA of its name.
	childless map[string]int
}

// Result reports what one Apply did.
type Result struct {
	Loaded, Unloaded, Initiated []string
	// Terminated are connections whose IKE SA ran from the wrong address.
	Terminated    []string
	SecretsLoaded bool
}

// SetLocalAddress sets LocalAddress (safe while Apply runs elsewhere).
func (l *Loader) SetLocalAddress(a string) {
	l.mu.Lock()
	l.LocalAddress = a
	l.mu.Unlock()
}

func (l *Loader) logf(format string, args ...any) {
	if l.Logf != nil {
		l.Logf(format, args...)
	}
}

// Session opens a VICI session on the loader's socket.
func (l *Loader) Session() (*govici.Session, error) {
	return Dial(l.Socket)
}

// Apply converges charon to swanctl and secrets text.
func (l *Loader) Apply(ctx context.Context, swanctl, secrets string) (Result, error) {
	var res Result
	conns, err := Connections(swanctl)
	if err != nil {
		return res, err
	}
	keys, err := gatewayconfig.ParseSecrets(secrets)
	if err != nil {
		return res, err
	}
	s, err := l.Session()
	if err != nil {
		return res, fmt.Errorf("connecting to charon: %w", err)
	}
	defer s.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.loaded == nil {
		l.loaded = map[string]string{}
	}

	present, err := charonConns(ctx, s)
	if err != nil {
		return res, err
	}
	// A charon that lost its connections restarted: its keys are gone too.
	for name := range l.loaded {
		if !present[name] {
			delete(l.loaded, name)
			l.secrets = ""
		}
	}

	secretsHash := hashOf(secrets)
	if secretsHash != l.secrets {
		if err := loadShared(ctx, s, keys); err != nil {
			return res, err
		}
		l.secrets = secretsHash
		res.SecretsLoaded = true
		l.logf("loaded %d shared keys", len(keys))
	}

	want := map[string]bool{}
	for _, c := range conns {
		want[c.Name] = true
		if present[c.Name] && l.loaded[c.Name] == c.Hash {
			continue
		}
		if err := call(ctx, s, "load-conn", c.Message); err != nil {
			return res, fmt.Errorf("load-conn %s: %w", c.Name, err)
		}
		l.loaded[c.Name] = c.Hash
		res.Loaded = append(res.Loaded, c.Name)
		l.logf("loaded connection %s", c.Name)
	}
	for name := range present {
		if want[name] {
			continue
		}
		m := govici.NewMessage()
		_ = m.Set("name", name)
		if err := call(ctx, s, "unload-conn", m); err != nil {
			return res, fmt.Errorf("unload-conn %s: %w", name, err)
		}
		delete(l.loaded, name)
		res.Unloaded = append(res.Unloaded, name)
		l.logf("unloaded connection %s", name)
	}

	sas, err := ListSAs(ctx, s)
	if err != nil {
		return res, err
	}
	if l.LocalAddress != "" {
		for name, list := range sas {
			kept := list[:0]
			for _, sa := range list {
				if sa.LocalHost == "" || sa.LocalHost == l.LocalAddress {
					kept = append(kept, sa)
					continue
				}
				m := govici.NewMessage()
				_ = m.Set("ike-id", sa.UniqueID)
				_ = m.Set("force", "yes")
				_ = m.Set("timeout", "-1")
				if err := call(ctx, s, "terminate", m); err != nil {
					l.logf("terminate %s #%s (from %s): %v", name, sa.UniqueID, sa.LocalHost, err)
					kept = append(kept, sa)
					continue
				}
				res.Terminated = append(res.Terminated, name)
				l.logf("terminated %s #%s: it ran from %s, not from the port's address %s", name, sa.UniqueID, sa.LocalHost, l.LocalAddress)
			}
			sas[name] = kept
		}
	}
	for _, c := range conns {
		switch tunnelState(sas[c.Name], c.Name) {
		case saUp, saBusy:
			delete(l.childless, c.Name)
			continue
		case saChildless:
			// A child SA deleted on its own (by the peer, by hand, by an expiry without
			// rekey) leaves the IKE SA up and the tunnel dead: nothing re-creates it, since
			// start_action only fires on load. It is initiated again inside the existing
			// IKE SA once it was missing for two rounds in a row, so a rekey in flight
			// never gets a duplicate.
			if l.childless == nil {
				l.childless = map[string]int{}
			}
			l.childless[c.Name]++
			if l.childless[c.Name] < 2 {
				continue
			}
		}
		delete(l.childless, c.Name)
		m := govici.NewMessage()
		_ = m.Set("child", c.Name)
		_ = m.Set("ike", c.Name)
		_ = m.Set("timeout", "-1")
		if err := call(ctx, s, "initiate", m); err != nil {
			// The peer may be unreachable; the next round retries.
			l.logf("initiate %s: %v", c.Name, err)
			continue
		}
		res.Initiated = append(res.Initiated, c.Name)
		l.logf("initiated %s", c.Name)
	}
	sort.Strings(res.Unloaded)
	return res, nil
}

type saState int

const (
	saNone      saState = iota // no IKE SA: initiate
	saUp                       // an established IKE SA carries the tunnel's child SA
	saBusy                     // an IKE SA is connecting, rekeying or being deleted: wait
	saChildless                // established IKE SA(s), none with the tunnel's child SA
)

func tunnelState(sas []IKESA, child string) saState {
	if len(sas) == 0 {
		return saNone
	}
	for _, sa := range sas {
		if sa.State != "ESTABLISHED" {
			return saBusy
		}
		for _, c := range sa.Children {
			if c.Name == child {
				return saUp
			}
		}
	}
	return saChildless
}

func hashOf(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func call(ctx context.Context, s *govici.Session, cmd string, in *govici.Message) error {
	out, err := callOut(ctx, s, cmd, in)
	if err != nil {
		return err
	}
	return out.Err()
}

// callOut is one VICI command bounded by CallTimeout.
func callOut(ctx context.Context, s *govici.Session, cmd string, in *govici.Message) (*govici.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	return s.Call(ctx, cmd, in)
}

func loadShared(ctx context.Context, s *govici.Session, keys []gatewayconfig.SharedSecret) error {
	for _, k := range keys {
		m := govici.NewMessage()
		_ = m.Set("id", k.Section)
		_ = m.Set("type", "IKE")
		_ = m.Set("data", string(k.Secret))
		_ = m.Set("owners", k.Owners)
		if err := call(ctx, s, "load-shared", m); err != nil {
			// The error from charon cannot contain the key; ours names only the section.
			return fmt.Errorf("load-shared %s failed", k.Section)
		}
	}
	// Keys of removed tunnels must not stay usable.
	out, err := callOut(ctx, s, "get-shared", nil)
	if err != nil {
		return fmt.Errorf("get-shared: %w", err)
	}
	keep := map[string]bool{}
	for _, k := range keys {
		keep[k.Section] = true
	}
	if ids, ok := out.Get("keys").([]string); ok {
		for _, id := range ids {
			if keep[id] {
				continue
			}
			m := govici.NewMessage()
			_ = m.Set("id", id)
			if err := call(ctx, s, "unload-shared", m); err != nil {
				return fmt.Errorf("unload-shared %s: %w", id, err)
			}
		}
	}
	return nil
}

func charonConns(ctx context.Context, s *govici.Session) (map[string]bool, error) {
	out, err := callOut(ctx, s, "get-conns", nil)
	if err != nil {
		return nil, fmt.Errorf("get-conns: %w", err)
	}
	present := map[string]bool{}
	if names, ok := out.Get("conns").([]string); ok {
		for _, n := range names {
			present[n] = true
		}
	}
	return present, nil
}
