package nat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// richModel is model(n) with every map and both directions populated.
func richModel(n int) *gatewayconfig.NAT {
	m := model(n)
	m.ExposurePorts = append(m.ExposurePorts,
		gatewayconfig.PortMapping{VirtualIP: "100.127.0.1", Protocol: "udp", Port: 53, Target: "203.0.113.53", TargetPort: 53, Owner: "dns"},
		gatewayconfig.PortMapping{VirtualIP: "100.127.0.1", Protocol: "tcp", Port: 53, Target: "203.0.113.53", TargetPort: 5353, Owner: "dns"})
	m.ReversePorts = []gatewayconfig.PortMapping{{VirtualIP: "100.64.7.200", Protocol: "tcp", Port: 8443, Target: "198.51.100.5", TargetPort: 8443, Owner: "erp"}}
	m.ExposureAll = []gatewayconfig.AddrMapping{{VirtualIP: "100.126.0.1", Target: "203.0.113.30", Owner: "db"}, {VirtualIP: "100.126.0.2", Target: "203.0.113.31"}}
	return m
}

// expectedListing renders m as nft lists it: one line per set/map element.
func expectedListing(m *gatewayconfig.NAT) map[string][]string {
	out := map[string][]string{MapExposurePorts: nil, MapReversePorts: nil, MapExposureAll: nil, MapReverseAll: nil, SetPeerSubnets: nil}
	for _, e := range elements(m) {
		k := strings.Join(e.key, " . ")
		if e.owner != "" {
			k += " comment " + e.owner
		}
		out[e.mapName] = append(out[e.mapName], k+" : "+strings.Join(e.value, " . "))
	}
	for _, s := range m.PeerSubnets {
		out[SetPeerSubnets] = append(out[SetPeerSubnets], strings.TrimSuffix(s, "/32"))
	}
	for k := range out {
		sort.Strings(out[k])
	}
	return out
}

// nftListing reads every set and map of the table with `nft -j`, i.e. decoded by nft
// from the kernel's bytes.
func nftListing(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, name := range []string{MapExposurePorts, MapReversePorts, MapExposureAll, MapReverseAll, SetPeerSubnets} {
		kind := "map"
		if name == SetPeerSubnets {
			kind = "set"
		}
		raw, err := exec.Command("nft", "-j", "list", kind, "ip", DefaultTable, name).Output()
		if err != nil {
			t.Errorf("nft list %s %s: %v", kind, name, err)
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var doc struct {
			Nftables []map[string]struct {
				Elem []any `json:"elem"`
			} `json:"nftables"`
		}
		if err := dec.Decode(&doc); err != nil {
			t.Errorf("nft -j list %s: %v", name, err)
			continue
		}
		lines := []string{}
		for _, obj := range doc.Nftables {
			for _, el := range obj[kind].Elem {
				if pair, ok := el.([]any); ok && len(pair) == 2 {
					lines = append(lines, nftValue(pair[0])+" : "+nftValue(pair[1]))
				} else {
					lines = append(lines, nftValue(el))
				}
			}
		}
		sort.Strings(lines)
		out[name] = lines
	}
	return out
}

func nftValue(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case []any:
		parts := make([]string, len(x))
		for i, p := range x {
			parts[i] = nftValue(p)
		}
		return strings.Join(parts, " . ")
	case map[string]any:
		if c, ok := x["concat"]; ok {
			return nftValue(c)
		}
		if p, ok := x["prefix"].(map[string]any); ok {
			return fmt.Sprintf("%s/%s", nftValue(p["addr"]), nftValue(p["len"]))
		}
		if e, ok := x["elem"].(map[string]any); ok {
			s := nftValue(e["val"])
			if c, ok := e["comment"]; ok {
				s += " comment " + nftValue(c)
			}
			return s
		}
	}
	return fmt.Sprintf("unexpected %T %v", v, v)
}

func diffListing(t *testing.T, step string, got, want map[string][]string) {
	t.Helper()
	for name, w := range want {
		g := got[name]
		gs, ws := map[string]bool{}, map[string]bool{}
		for _, l := range g {
			gs[l] = true
		}
		for _, l := range w {
			ws[l] = true
		}
		var missing, extra []string
		for _, l := range w {
			if !gs[l] {
				missing = append(missing, l)
			}
		}
		for _, l := range g {
			if !ws[l] {
				extra = append(extra, l)
			}
		}
		if len(missing)+len(extra) > 0 || len(g) != len(w) {
			if len(missing) > 5 {
				missing = append(missing[:5], "…")
			}
			if len(extra) > 5 {
				extra = append(extra[:5], "…")
			}
			t.Errorf("%s: %s has %d elements, want %d; missing %q; unexpected %q", step, name, len(g), len(w), missing, extra)
		}
	}
}

func without(l map[string][]string, name, line string) map[string][]string {
	out := map[string][]string{}
	for k, v := range l {
		for _, x := range v {
			if k != name || x != line {
				out[k] = append(out[k], x)
			}
		}
	}
	return out
}

// TestIncrementalOnTheKernel writes 1,000 exposures (full path), then changes, adds and
// removes elements of every map and the peer subnets through the incremental path and
// compares nft's own listing with the model after each step.
func TestIncrementalOnTheKernel(t *testing.T) {
	inNetns(t, func() {
		ctx := context.Background()
		p, err := New(Options{})
		if err != nil {
			t.Error(err)
			return
		}
		if full, err := p.Sync(ctx, richModel(1000)); err != nil || !full {
			t.Errorf("first sync: full=%v %v", full, err)
			return
		}

		// Remove an element the next change does not touch, behind the agent's back: an
		// incremental path that rewrote more than the changed elements would restore it.
		untouched := "100.64.1.244 . tcp . 443 comment e500 : 203.0.113.20 . 443"
		if out, err := exec.Command("nft", "delete", "element", "ip", DefaultTable, MapExposurePorts, "{ 100.64.1.244 . tcp . 443 }").CombinedOutput(); err != nil {
			t.Errorf("nft delete element: %v %s", err, out)
		}

		// Change, add and remove elements of every map and the peer subnets.
		m2 := richModel(1000)
		m2.ExposurePorts[1].Target = "203.0.113.21"
		m2.ExposurePorts[2].TargetPort = 8443
		m2.ExposurePorts = append(m2.ExposurePorts[:4], m2.ExposurePorts[7:]...) // remove three
		m2.ExposurePorts = append(m2.ExposurePorts,
			gatewayconfig.PortMapping{VirtualIP: "100.120.0.1", Protocol: "udp", Port: 65535, Target: "203.0.113.40", TargetPort: 1, Owner: "new"},
			gatewayconfig.PortMapping{VirtualIP: "100.120.0.1", Protocol: "tcp", Port: 1, Target: "203.0.113.40", TargetPort: 65535})
		m2.ReversePorts = append(m2.ReversePorts, gatewayconfig.PortMapping{VirtualIP: "100.64.7.199", Protocol: "udp", Port: 500, Target: "192.0.2.9", TargetPort: 4500, Owner: "ike"})
		m2.ExposureAll[0].Target = "203.0.113.32"
		m2.ExposureAll = m2.ExposureAll[:1]
		m2.ReverseAll = append(m2.ReverseAll, gatewayconfig.AddrMapping{VirtualIP: "100.64.7.202", Target: "192.0.2.10", Owner: "r2"})
		m2.PeerSubnets = []string{"192.0.2.0/24", "198.51.100.0/24", "203.0.113.99/32"}
		if full, err := p.Sync(ctx, m2); err != nil || full {
			t.Errorf("incremental sync: full=%v %v", full, err)
			return
		}
		diffListing(t, "after incremental", nftListing(t), without(expectedListing(m2), MapExposurePorts, untouched))
		for _, args := range [][]string{
			{MapExposurePorts, "{ 100.120.0.1 . udp . 65535 }"},
			{MapReversePorts, "{ 100.64.7.199 . udp . 500 }"},
			{MapReverseAll, "{ 100.64.7.202 }"},
			{SetPeerSubnets, "{ 192.0.2.77 }"},
			{SetPeerSubnets, "{ 203.0.113.99 }"},
		} {
			if out, err := exec.Command("nft", "get", "element", "ip", DefaultTable, args[0], args[1]).CombinedOutput(); err != nil {
				t.Errorf("nft get element %s %s: %v %s", args[0], args[1], err, out)
			}
		}
		for _, args := range [][]string{{SetPeerSubnets, "{ 192.0.3.0 }"}, {SetPeerSubnets, "{ 203.0.113.100 }"}, {MapExposurePorts, "{ 100.64.0.5 . tcp . 443 }"}} {
			if out, err := exec.Command("nft", "get", "element", "ip", DefaultTable, args[0], args[1]).CombinedOutput(); err == nil {
				t.Errorf("nft get element %s %s found %s", args[0], args[1], out)
			}
		}

		// A large change and an interval at the end of the address range, both still one
		// incremental transaction.
		m3 := richModel(5000)
		m3.PeerSubnets = []string{"192.0.2.0/24", "255.255.255.0/24"}
		if full, err := p.Sync(ctx, m3); err != nil || full {
			t.Errorf("large incremental sync: full=%v %v", full, err)
			return
		}
		diffListing(t, "after large incremental", nftListing(t), without(expectedListing(m3), MapExposurePorts, untouched))

		// A failing element transaction (one of its deletions finds nothing) changes
		// nothing, and the next sync is a full one.
		if out, err := exec.Command("nft", "delete", "element", "ip", DefaultTable, MapExposurePorts, "{ 100.64.0.0 . tcp . 443 }").CombinedOutput(); err != nil {
			t.Errorf("nft delete element: %v %s", err, out)
		}
		m4 := richModel(5000)
		m4.PeerSubnets = m3.PeerSubnets
		m4.ExposurePorts = m4.ExposurePorts[1:]
		m4.ReverseAll[0].Target = "198.51.100.11"
		m4.ExposureAll = append(m4.ExposureAll, gatewayconfig.AddrMapping{VirtualIP: "100.126.0.3", Target: "203.0.113.33"})
		if _, err := p.Sync(ctx, m4); err == nil {
			t.Error("element transaction deleting a missing element succeeded")
		}
		want := without(without(expectedListing(m3), MapExposurePorts, untouched), MapExposurePorts, "100.64.0.0 . tcp . 443 comment e0 : 203.0.113.20 . 443")
		diffListing(t, "after a failed element transaction", nftListing(t), want)
		if full, err := p.Sync(ctx, m4); err != nil || !full {
			t.Errorf("sync after failure: full=%v %v", full, err)
		}
		diffListing(t, "after recovery", nftListing(t), expectedListing(m4))
		if msg, err := NewDriftChecker(p).Check(true); msg != "" || err != nil {
			t.Errorf("drift after the syncs: %q %v", msg, err)
		}
	})
}

func TestElementOps(t *testing.T) {
	old := richModel(5)
	m := richModel(5)
	m.ExposurePorts[1].TargetPort = 8443                                  // changed value
	m.ExposurePorts[2].Owner = "renamed"                                  // owner only: not an element change
	m.ExposurePorts = append(m.ExposurePorts[:3], m.ExposurePorts[4:]...) // 100.64.0.3 removed
	m.ReverseAll[0].Target = "198.51.100.11"
	m.ExposureAll = append(m.ExposureAll, gatewayconfig.AddrMapping{VirtualIP: "100.126.0.9", Target: "203.0.113.39", Owner: "x"})
	m.PeerSubnets = []string{"192.0.2.0/24"}
	var got []string
	for _, op := range elementOps(old, m) {
		verb := "add"
		if op.del {
			verb = "delete"
		}
		got = append(got, fmt.Sprintf("%s %s %v %v %q", verb, op.mapName, op.key, op.value, op.owner))
	}
	want := []string{
		`delete exposure_ports [100.64.0.1 tcp 443] [] ""`,
		`delete exposure_ports [100.64.0.3 tcp 443] [] ""`,
		`delete reverse_all [100.64.7.201] [] ""`,
		`add exposure_all [100.126.0.9] [203.0.113.39] "x"`,
		`add exposure_ports [100.64.0.1 tcp 443] [203.0.113.20 8443] "e1"`,
		`add reverse_all [100.64.7.201] [198.51.100.11] "r"`,
		`delete peer_subnets [198.51.100.0/24] [] ""`,
		`add peer_subnets [192.0.2.0/24] [] ""`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("ops:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if ops := elementOps(m, m); len(ops) != 0 {
		t.Errorf("unchanged model: %d ops", len(ops))
	}
}
