package psk_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/agent/loader"
	"bnerd.net/vpn-operator/internal/agent/psk"
	"bnerd.net/vpn-operator/internal/agent/source"
	"bnerd.net/vpn-operator/internal/agent/status"
	"bnerd.net/vpn-operator/internal/agent/vici"
	"bnerd.net/vpn-operator/internal/gatewayconfig"
	"bnerd.net/vpn-operator/internal/render"
	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// The secret scan of the gateway pod's side: the loader and the status agent, wired as
// the agent binary wires them and talking to a real API server as the pod's
// ServiceAccount, go through a missing key, a key below the floor, a Secret without the
// named key, and good and rotated keys. No key value, raw or base64, appears in the
// agents' logs, the gateway's status they write, the namespace's Events and ConfigMaps,
// or the connections they load into charon (keys go only to the shared-secret load).
func TestAgentSecretScan(t *testing.T) {
	testenv.Need(t)
	const (
		ns      = "psk-scan"
		good    = "zq-scan-good-key-5c1d2e3f4a5b6c7d"
		rotated = "zq-scan-rotated-key-8e9f0a1b2c3d4e5f"
		short   = "zq-scan-sh"
		stray   = "zq-scan-under-another-key-00112233"
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs, g := gatewayPod(t, ns, "gw", "hq-psk", "branch-psk")
	spec := v1alpha1.GatewaySpec{Tunnels: []v1alpha1.Tunnel{
		{Name: "hq", Peer: v1alpha1.Peer{Address: "198.51.100.7", Subnets: []string{"192.168.10.0/24"}}, PreSharedKey: v1alpha1.SecretKeyRef{Name: "hq-psk", Key: "psk"}},
		{Name: "branch", Peer: v1alpha1.Peer{Address: "203.0.113.9", Subnets: []string{"172.16.5.0/24"}}, PreSharedKey: v1alpha1.SecretKeyRef{Name: "branch-psk", Key: "psk"}},
	}}
	gw := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"}, Spec: spec}
	if err := env.Client.Create(ctx, gw); err != nil {
		t.Fatal(err)
	}
	podCfg := rest.CopyConfig(env.Config)
	podCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + render.ServiceAccountName(g.Name)}
	podClient, err := client.New(podCfg, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}

	var lg logs
	rec := &recorder{}
	l := &loader.Loop{Applier: rec, Keys: psk.NewAPI(ctx, cs, ns, lg.logf), Interval: 50 * time.Millisecond, Logf: lg.logf}
	snaps := make(chan source.Snapshot, 1)
	go l.Run(ctx, snaps)
	ref := gatewayconfig.GatewayRef{Kind: "IPsecGateway", Namespace: ns, Name: "gw"}
	kicks, kick := status.Kicker()
	agent := &status.Agent{
		Tunnels: func() ([]string, gatewayconfig.GatewayRef) { return []string{"hq", "branch"}, ref },
		SAs:     func(context.Context, []string) (map[string][]vici.IKESA, error) { return nil, nil },
		Write:   status.ClientWriter(podClient, time.Hour),
		Waiting: l.Waiting, Kick: kicks, Interval: 50 * time.Millisecond, Logf: lg.logf,
	}
	go agent.Run(ctx)
	js, err := gatewayconfig.Marshal(config(t, ns, "hq", "branch"))
	if err != nil {
		t.Fatal(err)
	}
	snaps <- source.Snapshot{Config: js}

	tunnelMessage := func(name string) string {
		var cur v1alpha1.IPsecGateway
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "gw"}, &cur); err != nil {
			return err.Error()
		}
		for _, ts := range cur.Status.Tunnels {
			if ts.Name == name {
				return ts.Message
			}
		}
		return ""
	}
	step := func(what, hqValue string, branch map[string]string, want string) {
		t.Helper()
		putSecret(t, ns, "hq-psk", map[string]string{"psk": hqValue})
		putSecret(t, ns, "branch-psk", branch)
		waitFor(t, what, func() (bool, string) {
			kick()
			m := tunnelMessage("branch")
			return strings.Contains(m, want), m
		})
	}
	step("branch without its Secret's key", good, map[string]string{"other": stray}, `has no key "psk"`)
	step("branch's key below the floor", good, map[string]string{"psk": short}, "is shorter than 20 bytes")
	step("branch loaded", good, map[string]string{"psk": good}, "no IKE SA")
	step("keys rotated", rotated, map[string]string{"psk": rotated}, "no IKE SA")
	waitFor(t, "the rotated key loaded", func() (bool, string) {
		_, keys := rec.last()
		return len(keys) == 2 && string(keys[0].Secret) == rotated && string(keys[1].Secret) == rotated, fmt.Sprint(len(keys))
	})

	var places []string
	places = append(places, "log "+lg.all())
	var cur v1alpha1.IPsecGateway
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "gw"}, &cur); err != nil {
		t.Fatal(err)
	}
	st, _ := json.Marshal(cur.Status)
	places = append(places, "status "+string(st))
	var evs corev1.EventList
	if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		places = append(places, "event "+e.Reason+" "+e.Message)
	}
	var cms corev1.ConfigMapList
	if err := env.Client.List(ctx, &cms, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms.Items {
		for k, v := range cm.Data {
			places = append(places, "configmap "+cm.Name+" "+k+" "+v)
		}
	}
	rec.mu.Lock()
	for _, c := range rec.calls {
		places = append(places, "connections "+c[0])
	}
	applies := len(rec.calls)
	rec.mu.Unlock()
	if applies < 2 || len(cur.Status.Tunnels) != 2 {
		t.Fatalf("too little to scan: %d applies, status %s", applies, st)
	}
	for _, v := range []string{good, rotated, short, stray} {
		for _, enc := range []string{v, base64.StdEncoding.EncodeToString([]byte(v))} {
			for _, p := range places {
				if strings.Contains(p, enc) {
					t.Errorf("a key value reached %.60q", p)
				}
			}
		}
	}
}
