package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// A passing fault of the cloud at start is waited out (the chaos soak saw the operator
// exit on one 503 of Neutron's version document); a refused credential ends the start at
// once.
func TestConnectRetriesTransientFaultsOnly(t *testing.T) {
	seed, err := openstacksim.LoadSeed(filepath.Join(testenv.RepoRoot(), "examples", "sim-estate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := openstacksim.Start(seed)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	id, secret, _ := s.AppCredential("vpn-operator")
	cred := openstack.Credential{AuthURL: s.AuthURL(), Region: s.Region(), AppCredentialID: id, AppCredentialSecret: secret}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound, not a timing
	defer cancel()

	s.Inject(openstacksim.Fault{Method: "GET", PathPattern: "/network/", Status: 503, Count: 2})
	clients, token, err := connectOpenStack(ctx, cred, openstack.ClientOptions{}, logr.Discard())
	if err != nil || clients == nil || token.ProjectID == "" {
		t.Fatalf("two 503s at start: %v", err)
	}
	if got := s.Counters().Faulted; got != 2 {
		t.Fatalf("faulted requests %d, want the 2 injected", got)
	}

	// The extension list read right after (found by the soak once the start read it).
	s.ResetCounters()
	s.Inject(openstacksim.Fault{Method: "GET", PathPattern: "/network/v2.0/extensions", Status: 503, Count: 1})
	s.Inject(openstacksim.Fault{Method: "GET", PathPattern: "/network/v2.0/extensions", Status: 429, RetryAfter: time.Second, Count: 1})
	features, err := discoverFeatures(ctx, clients.Networking, logr.Discard())
	if err != nil || !features.PortTagCreation {
		t.Fatalf("a 503 and a 429 of the extension list at start: %v (features %+v)", err, features)
	}
	if got := s.Counters().Faulted; got != 2 {
		t.Fatalf("faulted requests %d, want the 2 injected", got)
	}

	s.ResetCounters()
	bad := cred
	bad.AppCredentialSecret = "wrong"
	if _, _, err := connectOpenStack(ctx, bad, openstack.ClientOptions{}, logr.Discard()); err == nil || !openstack.IsUnauthorized(err) {
		t.Fatalf("a refused credential: %v", err)
	}
	if n := s.Counters().ByRoute["POST /identity/v3/auth/tokens"]; n != 1 {
		t.Fatalf("a refused credential was tried %d times", n)
	}
}
