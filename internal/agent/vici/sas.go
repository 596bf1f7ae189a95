package vici

import (
	"context"
	"fmt"
	"strconv"

	govici "github.com/strongswan/govici/vici"
)

// IKESA is one IKE SA as charon's list-sas reports it.
type IKESA struct {
	Name     string
	UniqueID string
	State    string
	// LocalHost is the address the SA runs from (charon's local-host).
	LocalHost string
	// EstablishedSeconds is the SA's age (valid when State is ESTABLISHED).
	EstablishedSeconds int64
	Children           []ChildSA
}

// ChildSA is one child SA of an IKE SA.
type ChildSA struct {
	Name                  string
	UniqueID              string
	State                 string
	SPIIn                 string
	BytesIn, BytesOut     uint64
	PacketsIn, PacketsOut uint64
	InstallSeconds        int64
}

// ListSAs returns the IKE SAs per connection name. The whole listing is bounded by
// CallTimeout.
func ListSAs(ctx context.Context, s *govici.Session) (map[string][]IKESA, error) {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	out := map[string][]IKESA{}
	for m, err := range s.CallStreaming(ctx, "list-sas", "list-sa", nil) {
		if err != nil {
			return nil, fmt.Errorf("list-sas: %w", err)
		}
		if m.Get("success") != nil {
			if err := m.Err(); err != nil {
				return nil, fmt.Errorf("list-sas: %w", err)
			}
			continue
		}
		for _, name := range m.Keys() {
			ike, ok := m.Get(name).(*govici.Message)
			if !ok {
				continue
			}
			sa := IKESA{
				Name:               name,
				UniqueID:           str(ike, "uniqueid"),
				State:              str(ike, "state"),
				LocalHost:          str(ike, "local-host"),
				EstablishedSeconds: num(ike, "established"),
			}
			if cs, ok := ike.Get("child-sas").(*govici.Message); ok {
				for _, ck := range cs.Keys() {
					c, ok := cs.Get(ck).(*govici.Message)
					if !ok {
						continue
					}
					sa.Children = append(sa.Children, ChildSA{
						Name:           str(c, "name"),
						UniqueID:       str(c, "uniqueid"),
						State:          str(c, "state"),
						SPIIn:          str(c, "spi-in"),
						BytesIn:        unum(c, "bytes-in"),
						BytesOut:       unum(c, "bytes-out"),
						PacketsIn:      unum(c, "packets-in"),
						PacketsOut:     unum(c, "packets-out"),
						InstallSeconds: num(c, "install-time"),
					})
				}
			}
			out[name] = append(out[name], sa)
		}
	}
	return out, nil
}

func str(m *govici.Message, k string) string {
	v, _ := m.Get(k).(string)
	return v
}

func num(m *govici.Message, k string) int64 {
	n, _ := strconv.ParseInt(str(m, k), 10, 64)
	return n
}

func unum(m *govici.Message, k string) uint64 {
	n, _ := strconv.ParseUint(str(m, k), 10, 64)
	return n
}
