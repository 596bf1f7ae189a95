package status

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/vici"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

type written struct {
	ref      gatewayconfig.GatewayRef
	tunnels  []v1alpha1.TunnelState
	ready    string
	deadline bool
}

// TestAgentRound: nothing is written before the config names tunnels; a charon that is
// not running reports every tunnel Down (that is news worth writing); SAs become Up;
// every VICI listing and API write carries a deadline.
func TestAgentRound(t *testing.T) {
	var names []string
	ref := gatewayconfig.GatewayRef{Kind: "IPsecGateway", Namespace: "ns", Name: "gw"}
	var sas map[string][]vici.IKESA
	var saErr error
	var writes []written
	var listDeadline bool
	a := &Agent{
		Tunnels: func() ([]string, gatewayconfig.GatewayRef) { return names, ref },
		SAs: func(ctx context.Context, _ []string) (map[string][]vici.IKESA, error) {
			_, listDeadline = ctx.Deadline()
			return sas, saErr
		},
		Write: func(ctx context.Context, r gatewayconfig.GatewayRef, ts []v1alpha1.TunnelState, ready string) (bool, error) {
			_, ok := ctx.Deadline()
			writes = append(writes, written{r, ts, ready, ok})
			return true, nil
		},
		Now: func() time.Time { return now },
	}
	ctx := context.Background()
	a.Round(ctx)
	if len(writes) != 0 {
		t.Fatal("wrote before any tunnel was configured")
	}
	names = []string{"hq"}
	saErr = fmt.Errorf("%w: dial unix: no such file", vici.ErrCharonNotRunning)
	a.Round(ctx)
	if len(writes) != 1 || writes[0].ready != "0/1" || writes[0].tunnels[0].State != StateDown || writes[0].tunnels[0].Reason != ReasonCharonUnreachable || writes[0].ref != ref {
		t.Fatalf("writes %+v", writes)
	}
	saErr = nil
	sas = map[string][]vici.IKESA{"hq": {{Name: "hq", State: "ESTABLISHED", EstablishedSeconds: 5, Children: []vici.ChildSA{{Name: "hq", State: "INSTALLED"}}}}}
	ts, ready, wrote := a.Round(ctx)
	if !wrote || ready != "1/1" || ts[0].State != StateUp {
		t.Errorf("round: %v %s %+v", wrote, ready, ts)
	}
	if !listDeadline || !writes[1].deadline {
		t.Error("a VICI listing or an API write ran without a deadline")
	}
}

// TestAgentRunsOnKicks: a kick (a VICI event) triggers a round long before the timer.
func TestAgentRunsOnKicks(t *testing.T) {
	kicks, kick := Kicker()
	var mu sync.Mutex
	rounds := 0
	a := &Agent{
		Tunnels: func() ([]string, gatewayconfig.GatewayRef) { return []string{"hq"}, gatewayconfig.GatewayRef{} },
		SAs:     func(context.Context, []string) (map[string][]vici.IKESA, error) { return nil, nil },
		Write: func(context.Context, gatewayconfig.GatewayRef, []v1alpha1.TunnelState, string) (bool, error) {
			mu.Lock()
			rounds++
			mu.Unlock()
			return false, nil
		},
		Kick: kicks, Interval: time.Hour,
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.Run(ctx)
	kick()
	kick() // coalesces with the first when not yet taken
	deadline := time.After(time.Minute)
	for {
		mu.Lock()
		n := rounds
		mu.Unlock()
		if n >= 1 {
			break
		}
		select {
		case <-deadline:
			t.Fatal("a kick did not trigger a round")
		case <-time.After(time.Millisecond):
		}
	}
}

// TestAgentKeepsTheReportThroughASlowListing: a listing that fails although charon is
// running (busy past the call timeout) does not turn an Up tunnel Down; only a failure
// that persists past the grace does.
func TestAgentKeepsTheReportThroughASlowListing(t *testing.T) {
	ref := gatewayconfig.GatewayRef{Kind: "IPsecGateway", Namespace: "ns", Name: "gw"}
	up := map[string][]vici.IKESA{"hq": {{Name: "hq", State: "ESTABLISHED", Children: []vici.ChildSA{{Name: "hq", State: "INSTALLED"}}}}}
	var saErr error
	var last []v1alpha1.TunnelState
	a := &Agent{
		Tunnels: func() ([]string, gatewayconfig.GatewayRef) { return []string{"hq"}, ref },
		SAs: func(context.Context, []string) (map[string][]vici.IKESA, error) {
			if saErr != nil {
				return nil, saErr
			}
			return up, nil
		},
		Write: func(_ context.Context, _ gatewayconfig.GatewayRef, ts []v1alpha1.TunnelState, _ string) (bool, error) {
			last = ts
			return true, nil
		},
	}
	ctx := context.Background()
	a.Round(ctx)
	if last[0].State != StateUp {
		t.Fatalf("%+v", last)
	}
	saErr = context.DeadlineExceeded
	for i := 0; i < listingGrace; i++ {
		a.Round(ctx)
		if last[0].State != StateUp {
			t.Fatalf("round %d of a slow listing reported %+v", i+1, last)
		}
	}
	saErr = nil
	a.Round(ctx)
	saErr = context.DeadlineExceeded
	for i := 0; i <= listingGrace; i++ {
		a.Round(ctx)
	}
	if last[0].State != StateDown || last[0].Reason != ReasonCharonUnreachable {
		t.Errorf("a listing failing past the grace: %+v", last)
	}
}
