package vici

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	govici "github.com/strongswan/govici/vici"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

const sample = `connections {
  hq {
    version = 2
    remote_addrs = 198.51.100.7
    proposals = aes256gcm16-prfsha384-ecp384,aes256-sha384-ecp384
    local {
      id = "192.0.2.44"
    }
    children {
      hq {
        local_ts = 100.64.3.0/24
        remote_ts = 192.168.10.0/24,192.168.20.0/24
        start_action = start
      }
    }
  }
  branch {
    remote_addrs = 203.0.113.9
  }
}
`

func TestConnectionsConvertsListsAndSections(t *testing.T) {
	conns, err := Connections(sample)
	if err != nil {
		t.Fatal(err)
	}
	if len(conns) != 2 || conns[0].Name != "hq" || conns[1].Name != "branch" {
		t.Fatalf("connections: %+v", conns)
	}
	hq := conns[0].Message.Get("hq").(*govici.Message)
	if got := hq.Get("proposals"); !reflect.DeepEqual(got, []string{"aes256gcm16-prfsha384-ecp384", "aes256-sha384-ecp384"}) {
		t.Errorf("proposals %#v", got)
	}
	if got := hq.Get("version"); got != "2" {
		t.Errorf("version %#v", got)
	}
	child := hq.Get("children").(*govici.Message).Get("hq").(*govici.Message)
	if got := child.Get("remote_ts"); !reflect.DeepEqual(got, []string{"192.168.10.0/24", "192.168.20.0/24"}) {
		t.Errorf("remote_ts %#v", got)
	}
	if got := hq.Get("local").(*govici.Message).Get("id"); got != "192.0.2.44" {
		t.Errorf("quoted id not unquoted: %#v", got)
	}
	// the hash follows content: one changed value changes only that connection's hash
	again, _ := Connections(strings.Replace(sample, "203.0.113.9", "203.0.113.10", 1))
	if again[0].Hash != conns[0].Hash || again[1].Hash == conns[1].Hash {
		t.Error("hash does not track per-connection content")
	}
}

func TestConnectionsFromRenderer(t *testing.T) {
	cfg := &gatewayconfig.Config{
		Version: gatewayconfig.FormatVersion, Gateway: gatewayconfig.GatewayRef{Kind: "IPsecGateway", Namespace: "ns", Name: "gw"},
		ServiceCIDR: "100.64.7.0/24", GatewayAddress: "100.64.7.1", PortFixedIP: "203.0.113.5",
		SubnetCIDR: "203.0.113.0/24", SubnetGatewayIP: "203.0.113.1", FloatingIP: "192.0.2.100",
		Tunnels: []gatewayconfig.Tunnel{{Name: "t1", PeerAddress: "192.0.2.2", PeerID: "192.0.2.2",
			RemoteSubnets: []string{"198.51.100.0/24"}, IKEProposals: []string{"aes128gcm16-prfsha256-x25519"},
			ESPProposals: []string{"aes128gcm16-x25519"}, IKERekeySeconds: 3600, ESPRekeySeconds: 600, DPDDelaySeconds: 5, DPDAction: "restart",
			PSK: gatewayconfig.SecretKeyRef{Secret: "t1-psk", Key: "psk"}}},
	}
	text, err := gatewayconfig.RenderSwanctl(cfg)
	if err != nil {
		t.Fatal(err)
	}
	conns, err := Connections(text)
	if err != nil || len(conns) != 1 {
		t.Fatalf("%v %v", conns, err)
	}
	children := conns[0].Message.Get("t1").(*govici.Message).Get("children").(*govici.Message)
	if keys := children.Keys(); !reflect.DeepEqual(keys, []string{"t1", "t1" + gatewayconfig.FailClosedChildSuffix}) {
		t.Errorf("children %v", keys)
	}
}

// TestSummarize: a rekey in flight, of the child SA or of the IKE SA, never reads as
// down; a tunnel whose SAs are being set up or deleted is negotiating; an IKE SA without
// the tunnel's child SA is half-open.
func TestSummarize(t *testing.T) {
	child := func(name, state string) ChildSA { return ChildSA{Name: name, State: state} }
	type want struct{ up, established, negotiating bool }
	for _, tc := range []struct {
		name string
		sas  []IKESA
		want want
	}{
		{"no IKE SA", nil, want{}},
		{"up", []IKESA{{State: "ESTABLISHED", Children: []ChildSA{child("t1", "INSTALLED")}}}, want{up: true, established: true}},
		{"child rekeying, successor installing", []IKESA{{State: "ESTABLISHED", Children: []ChildSA{child("t1", "REKEYING"), child("t1", "INSTALLING")}}}, want{up: true, established: true, negotiating: true}},
		{"child rekeyed, successor installed", []IKESA{{State: "ESTABLISHED", Children: []ChildSA{child("t1", "REKEYED"), child("t1", "INSTALLED")}}}, want{up: true, established: true}},
		{"IKE SA rekeying", []IKESA{{State: "REKEYING", Children: []ChildSA{child("t1", "INSTALLED")}}}, want{up: true}},
		{"IKE SA rekeyed next to its successor", []IKESA{{State: "REKEYED", Children: []ChildSA{child("t1", "INSTALLED")}}, {State: "ESTABLISHED", EstablishedSeconds: 1}}, want{up: true, established: true}},
		{"IKE SA rekeyed, no successor", []IKESA{{State: "REKEYED", Children: []ChildSA{child("t1", "INSTALLED")}}}, want{}},
		{"connecting", []IKESA{{State: "CONNECTING"}}, want{negotiating: true}},
		{"IKE SA being deleted", []IKESA{{State: "DELETING", Children: []ChildSA{child("t1", "INSTALLED")}}}, want{negotiating: true}},
		{"child deleted", []IKESA{{State: "ESTABLISHED"}}, want{established: true}},
		{"child being created", []IKESA{{State: "ESTABLISHED", Children: []ChildSA{child("t1", "CREATED")}}}, want{established: true, negotiating: true}},
		{"only another child", []IKESA{{State: "ESTABLISHED", Children: []ChildSA{child("t2", "INSTALLED")}}}, want{established: true}},
	} {
		s := Summarize(tc.sas, "t1")
		if got := (want{s.Up, s.Established, s.Negotiating}); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
		if s.Up && s.Newest == nil {
			t.Errorf("%s: up without a newest IKE SA", tc.name)
		}
	}
}

// TestSuperseded: which IKE SAs of a tunnel the loader ends as duplicates. Only
// ESTABLISHED ones older than the newest ESTABLISHED one carrying the tunnel's child SA;
// never an IKE SA in a rekey (REKEYING, REKEYED, DELETING), never a newer one without
// the child, nothing while only one is ESTABLISHED.
func TestSuperseded(t *testing.T) {
	child := func(state string) []ChildSA { return []ChildSA{{Name: "t1", UniqueID: "9", State: state}} }
	sa := func(id, state string, age int64, children []ChildSA) IKESA {
		return IKESA{Name: "t1", UniqueID: id, State: state, EstablishedSeconds: age, Children: children}
	}
	for _, tc := range []struct {
		name string
		sas  []IKESA
		want []string
	}{
		{"one", []IKESA{sa("1", IKEEstablished, 50, child("INSTALLED"))}, nil},
		{"crossing", []IKESA{sa("3", IKEEstablished, 4, child("INSTALLED")), sa("4", IKEEstablished, 3, child("INSTALLED"))}, []string{"3"}},
		{"same second, the lower ID goes", []IKESA{sa("4", IKEEstablished, 3, child("INSTALLED")), sa("3", IKEEstablished, 3, child("INSTALLED"))}, []string{"3"}},
		{"three", []IKESA{sa("5", IKEEstablished, 1, child("INSTALLED")), sa("3", IKEEstablished, 9, child("INSTALLED")), sa("4", IKEEstablished, 7, nil)}, []string{"3", "4"}},
		{"IKE rekey in flight", []IKESA{sa("3", IKERekeying, 90, child("INSTALLED")), sa("4", IKEEstablished, 0, child("INSTALLED"))}, nil},
		{"rekeyed, not yet deleted", []IKESA{sa("3", IKERekeyed, 90, nil), sa("4", IKEEstablished, 0, child("INSTALLED"))}, nil},
		{"deleting", []IKESA{sa("3", IKEDeleting, 90, child("INSTALLED")), sa("4", IKEEstablished, 0, child("INSTALLED"))}, nil},
		{"newer without the child", []IKESA{sa("3", IKEEstablished, 90, child("INSTALLED")), sa("4", IKEEstablished, 0, nil)}, nil},
		{"none carries", []IKESA{sa("3", IKEEstablished, 90, child("CREATED")), sa("4", IKEEstablished, 0, nil)}, nil},
		{"another child's name", []IKESA{sa("3", IKEEstablished, 90, child("INSTALLED")), sa("4", IKEEstablished, 0, []ChildSA{{Name: "t2", State: "INSTALLED"}})}, nil},
	} {
		if got := superseded(tc.sas, "t1"); !slices.Equal(got, tc.want) {
			t.Errorf("%s: superseded = %v, want %v", tc.name, got, tc.want)
		}
	}
}
