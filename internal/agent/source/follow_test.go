package source

import (
	"context"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

func TestTunnelsFollowKeepsLastValidConfig(t *testing.T) {
	cfg := &gatewayconfig.Config{
		Version: gatewayconfig.FormatVersion, Gateway: gatewayconfig.GatewayRef{Kind: "IPsecGateway", Namespace: "ns", Name: "gw"},
		ServiceCIDR: "100.64.7.0/24", GatewayAddress: "100.64.7.1", PortFixedIP: "203.0.113.5",
		SubnetCIDR: "203.0.113.0/24", SubnetGatewayIP: "203.0.113.1", FloatingIP: "192.0.2.100",
		Tunnels: []gatewayconfig.Tunnel{{Name: "t1", PeerAddress: "192.0.2.2", PeerID: "192.0.2.2",
			RemoteSubnets: []string{"198.51.100.0/24"}, IKEProposals: []string{"aes128gcm16-prfsha256-x25519"},
			ESPProposals: []string{"aes128gcm16-x25519"}, IKERekeySeconds: 3600, ESPRekeySeconds: 600, DPDDelaySeconds: 5, DPDAction: "restart",
			PSK: gatewayconfig.SecretKeyRef{Secret: "t1-psk", Key: "psk"}}},
	}
	js, err := gatewayconfig.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in := make(chan Snapshot)
	var tn Tunnels
	go tn.Follow(ctx, in)
	in <- Snapshot{Config: js}
	in <- Snapshot{Config: []byte("not json")}
	in <- Snapshot{Config: js} // a synchronous channel: the invalid one has been handled
	names, ref := tn.Get()
	if len(names) != 1 || names[0] != "t1" || ref != cfg.Gateway {
		t.Errorf("names %v ref %+v", names, ref)
	}
}

func TestFanoutDeliversTheNewestToEach(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in := make(chan Snapshot)
	a, b := make(chan Snapshot, 1), make(chan Snapshot, 1)
	go Fanout(ctx, in, a, b)
	for _, v := range []string{"1", "2", "3"} {
		in <- Snapshot{Secrets: v}
	}
	in <- Snapshot{Secrets: "4"}
	deadline := time.After(time.Minute)
	for _, c := range []chan Snapshot{a, b} {
		for {
			select {
			case s := <-c:
				if s.Secrets == "4" {
					goto next
				}
			case <-deadline:
				t.Fatal("newest snapshot never delivered")
			}
		}
	next:
	}
}
