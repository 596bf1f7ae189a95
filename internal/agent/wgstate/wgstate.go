// Package wgstate is the state file a WireGuard gateway's wireguard role writes after
// every sync and the status agent and exporter read: the interface's public key and each
// peer's handshake and byte counters. Only the wireguard container holds the privilege to
// ask the device; the others read this file from the pod's shared volume.
package wgstate

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"bnerd.net/vpn-operator/internal/agent/statefile"
)

// Peer is one peer of the device as last read.
type Peer struct {
	Name      string `json:"name"`
	PublicKey string `json:"publicKey"`
	// Endpoint is where the peer's packets come from now (learned for a roaming peer).
	Endpoint string `json:"endpoint,omitempty"`
	// LatestHandshake is the peer's latest handshake with the interface's current key;
	// zero when there was none since that key was applied.
	LatestHandshake time.Time `json:"latestHandshake,omitempty"`
	ReceiveBytes    int64     `json:"receiveBytes"`
	TransmitBytes   int64     `json:"transmitBytes"`
}

// State is the file's content: the device of the current key (its fields at the top, as
// before key slots) and, during a key rotation's overlap, the previous key's device.
type State struct {
	// UpdatedAt is when the wireguard role last read the devices.
	UpdatedAt time.Time `json:"updatedAt"`
	// Implementation is "kernel" or "userspace" (wireguard-go).
	Implementation string `json:"implementation"`
	Device
	// Previous is the device still serving the key a rotation replaced.
	Previous *Device `json:"previous,omitempty"`
}

// Device is one WireGuard interface as last read.
type Device struct {
	Interface string `json:"interface"`
	// PublicKey is the interface's public key; KeyAppliedAt when its private key was set.
	PublicKey    string    `json:"publicKey"`
	KeyAppliedAt time.Time `json:"keyAppliedAt,omitempty"`
	ListenPort   int       `json:"listenPort"`
	Peers        []Peer    `json:"peers"`
}

// Devices returns the current key's device and, during an overlap, the previous key's.
func (s State) Devices() []Device {
	if s.Previous == nil {
		return []Device{s.Device}
	}
	return []Device{s.Device, *s.Previous}
}

// Stale is how old a state may be before readers treat the wireguard role as gone.
const Stale = 30 * time.Second

// Write replaces path atomically, never through a link (package statefile).
func Write(path string, st State) error {
	return statefile.WriteJSON(path, st)
}

// Read returns the state, or an error when it is missing, unreadable or older than
// Stale at now.
func Read(path string, now time.Time) (State, error) {
	var st State
	b, err := os.ReadFile(path)
	if err != nil {
		return st, fmt.Errorf("the wireguard container has not reported yet: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("unreadable WireGuard state: %w", err)
	}
	if age := now.Sub(st.UpdatedAt); age > Stale {
		return st, fmt.Errorf("the wireguard container last reported %s ago", age.Round(time.Second))
	}
	return st, nil
}

// Peer returns the peer called name, if the device has it.
func (s Device) Peer(name string) (Peer, bool) {
	for _, p := range s.Peers {
		if p.Name == name {
			return p, true
		}
	}
	return Peer{}, false
}
