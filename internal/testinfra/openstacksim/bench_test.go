package openstacksim

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"
)

const benchPorts = 10000

// benchEstate is the example estate plus 10,000 tagged ports on a /16, the
// scale of a large gateway fleet's Neutron footprint.
func benchEstate(b *testing.B) (*Server, clients, []string) {
	b.Helper()
	s := startEstate(b)
	c := login(b, s, "vpn-operator")
	n := must[*networks.Network](b)(networks.Create(ctx(), c.network, networks.CreateOpts{Name: "bench"}).Extract())
	must[*subnets.Subnet](b)(subnets.Create(ctx(), c.network, subnets.CreateOpts{NetworkID: n.ID, CIDR: "10.0.0.0/16", IPVersion: 4}).Extract())
	ids := make([]string, benchPorts)
	for i := range ids {
		p, err := s.AddPort(Port{NetworkID: n.ID, Name: fmt.Sprintf("gw-%d", i),
			Tags: []string{"bnerd.net/managed-by=vpn-operator", fmt.Sprintf("bnerd.net/gateway=ns/gw-%d", i)}})
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = p.ID
	}
	return s, c, ids
}

func BenchmarkGetPortByID(b *testing.B) {
	_, c, ids := benchEstate(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := ports.Get(ctx(), c.network, ids[i%len(ids)]).Extract(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGetPortByIDParallel(b *testing.B) {
	_, c, ids := benchEstate(b)
	var n atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(n.Add(1))
			if _, err := ports.Get(ctx(), c.network, ids[i%len(ids)]).Extract(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// The operator's adoption lookup: every port carrying both owner tags.
func BenchmarkListPortsByTag(b *testing.B) {
	_, c, _ := benchEstate(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		got, err := extractPorts(c, ports.ListOpts{Tags: fmt.Sprintf("bnerd.net/managed-by=vpn-operator,bnerd.net/gateway=ns/gw-%d", i%benchPorts)})
		if err != nil || len(got) != 1 {
			b.Fatalf("%d ports, %v", len(got), err)
		}
	}
}

func BenchmarkListPortsByTagParallel(b *testing.B) {
	_, c, _ := benchEstate(b)
	var n atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(n.Add(1))
			got, err := extractPorts(c, ports.ListOpts{Tags: fmt.Sprintf("bnerd.net/managed-by=vpn-operator,bnerd.net/gateway=ns/gw-%d", i%benchPorts)})
			if err != nil || len(got) != 1 {
				b.Errorf("%d ports, %v", len(got), err)
				return
			}
		}
	})
}

func BenchmarkListPortsByFixedIP(b *testing.B) {
	s, c, ids := benchEstate(b)
	ips := make([]string, len(ids))
	for i, id := range ids {
		p, _ := s.Port(id)
		ips[i] = p.FixedIPs[0].IPAddress
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		got, err := extractPorts(c, ports.ListOpts{FixedIPs: []ports.FixedIPOpts{{IPAddress: ips[i%len(ips)]}}})
		if err != nil || len(got) != 1 {
			b.Fatalf("%d ports, %v", len(got), err)
		}
	}
}

// BenchmarkSeedTenThousandPorts measures building the state itself.
func BenchmarkSeedTenThousandPorts(b *testing.B) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s := startEstate(b)
		c := login(b, s, "vpn-operator")
		n := must[*networks.Network](b)(networks.Create(ctx(), c.network, networks.CreateOpts{Name: "bench"}).Extract())
		must[*subnets.Subnet](b)(subnets.Create(ctx(), c.network, subnets.CreateOpts{NetworkID: n.ID, CIDR: "10.0.0.0/16", IPVersion: 4}).Extract())
		b.StartTimer()
		for j := 0; j < benchPorts; j++ {
			if _, err := s.AddPort(Port{NetworkID: n.ID, Tags: []string{fmt.Sprintf("t-%d", j)}}); err != nil {
				b.Fatal(err)
			}
		}
	}
}
