package soak

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
	"bnerd.net/vpn-operator/test/harness"
)

// Gateways created by 8 clients at once while the operator process is SIGKILLed and
// restarted twice: every restart rebuilds the service-CIDR pool from status, and no /24
// (nor virtual IP) is ever handed out twice. (The scale harness does the same with 200
// gateways among 1,000; docs/reliability.md.)
func TestPoolRebuiltAcrossRestartsUnderConcurrentCreates(t *testing.T) {
	testenv.Need(t)
	if testing.Short() {
		t.Skip("builds and runs the operator process; skipped in -short mode")
	}
	ctx := context.Background()
	w := newWorld(t, ctx, settings{seed: 1})
	w.sim.SetLatency(20 * time.Millisecond)

	const clients, each = 8, 6
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := make(chan error, clients*each)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				obj := newGatewayObject(v1alpha1.KindIPsecGateway, tenantNamespaces[c%len(tenantNamespaces)], fmt.Sprintf("burst-%d-%d", c, i))
				spec := specOf(obj)
				spec.Tunnels = []v1alpha1.Tunnel{{Name: "hq", Peer: v1alpha1.Peer{Address: fmt.Sprintf("198.51.100.%d", 1+c*each+i), Subnets: []string{"192.168.10.0/24"}},
					PreSharedKey: v1alpha1.SecretKeyRef{Name: "psk", Key: "psk"}}}
				spec.Exposures = []v1alpha1.Exposure{{Name: "portal", Target: v1alpha1.Target{Address: "10.250.0.20", Ports: []v1alpha1.PortSpec{{Port: 443, Protocol: v1alpha1.ProtocolTCP}}}}}
				if err := w.c.Create(ctx, obj); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				w.gws[gwKey(v1alpha1.KindIPsecGateway, obj.GetNamespace(), obj.GetName())] = &gwRec{kind: v1alpha1.KindIPsecGateway, ns: obj.GetNamespace(), name: obj.GetName()}
				mu.Unlock()
				time.Sleep(150 * time.Millisecond)
			}
		}(c)
	}
	for i := 0; i < 2; i++ {
		time.Sleep(2 * time.Second)
		w.op.Kill()
		w.kills++
		if err := w.op.Start(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	w.waitConverged(ConvergeBound)
	in, err := harness.BuildAuditInput(ctx, w.c, w.sim, w.baseline, w.deleted)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Gateways) != clients*each {
		t.Fatalf("audited %d gateways, want %d", len(in.Gateways), clients*each)
	}
	w.audit("after creates across restarts")
	w.deleteAll()
	w.waitGone(ConvergeBound)
	w.audit("after deleting everything")
}
