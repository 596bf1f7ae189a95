package source

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// version reads the number after the last "-" of a snapshot part ("cm-17" -> 17).
func version(t *testing.T, s string) int {
	t.Helper()
	if s == "" {
		return 0
	}
	n, err := strconv.Atoi(s[strings.LastIndex(s, "-")+1:])
	if err != nil {
		t.Fatalf("part %q: %v", s, err)
	}
	return n
}

// TestMergerDeliversSnapshotsInOrder races ConfigMap and Secret events the way the two
// informers deliver them (each in its own goroutine, each in order) against a consumer
// that takes snapshots as they come. Every delivered snapshot must be at least as new as
// the one before it in both parts, and the last one must carry both objects' last
// versions: a stale snapshot arriving last would leave the agent on old keys or an old
// connection set until the next edit.
func TestMergerDeliversSnapshotsInOrder(t *testing.T) {
	const events = 2000
	for round := 0; round < 20; round++ {
		ctx, cancel := context.WithCancel(context.Background())
		m := &merger{ctx: ctx, out: make(chan Snapshot, 1)}
		var wg sync.WaitGroup
		for _, part := range []string{"cm", "sec"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 1; i <= events; i++ {
					v := fmt.Sprintf("%s-%d", part, i)
					m.update(func(s *Snapshot) {
						if part == "cm" {
							s.Swanctl = v
						} else {
							s.Secrets = v
						}
					})
				}
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		lastCM, lastSec := 0, 0
		check := func(s Snapshot) {
			cm, sec := version(t, s.Swanctl), version(t, s.Secrets)
			if cm < lastCM || sec < lastSec {
				t.Fatalf("round %d: snapshot (cm %d, secret %d) delivered after (cm %d, secret %d)", round, cm, sec, lastCM, lastSec)
			}
			lastCM, lastSec = cm, sec
		}
	consume:
		for {
			select {
			case s := <-m.out:
				check(s)
			case <-done:
				break consume
			}
		}
		select {
		case s := <-m.out:
			check(s)
		default:
		}
		if lastCM != events || lastSec != events {
			t.Fatalf("round %d: last snapshot delivered is (cm %d, secret %d), want (%d, %d)", round, lastCM, lastSec, events, events)
		}
		cancel()
	}
}

// TestAPIRacingConfigMapAndSecretUpdates drives the API source through informers (on a
// fake clientset) while the ConfigMap and the Secret are updated concurrently: once the
// writers stop, the newest snapshot delivered carries the final content of both.
func TestAPIRacingConfigMapAndSecretUpdates(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := "tenant"
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"},
		Data: map[string]string{gatewayconfig.ConfigMapKeyConfig: "{}", gatewayconfig.ConfigMapKeySwanctl: "cm-0"}}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw-psk"},
		Data: map[string][]byte{gatewayconfig.SecretKeySecrets: []byte("sec-0")}}
	cs := fake.NewClientset(cm, sec)
	out := make(chan Snapshot, 1)
	go func() { _ = (&API{Client: cs, Namespace: ns, ConfigMap: "gw", Secret: "gw-psk"}).Run(ctx, out) }()

	const updates = 300
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 1; i <= updates; i++ {
			c := cm.DeepCopy()
			c.Data[gatewayconfig.ConfigMapKeySwanctl] = fmt.Sprintf("cm-%d", i)
			if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, c, metav1.UpdateOptions{}); err != nil {
				errs <- err
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := 1; i <= updates; i++ {
			s := sec.DeepCopy()
			s.Data[gatewayconfig.SecretKeySecrets] = []byte(fmt.Sprintf("sec-%d", i))
			if _, err := cs.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	lastCM, lastSec := -1, -1
	deadline := time.After(time.Minute) // bounds a hung test; not a latency assertion
	for lastCM != updates || lastSec != updates {
		select {
		case s := <-out:
			cmv, secv := version(t, s.Swanctl), version(t, s.Secrets)
			if cmv < lastCM || secv < lastSec {
				t.Fatalf("snapshot (cm %d, secret %d) delivered after (cm %d, secret %d)", cmv, secv, lastCM, lastSec)
			}
			lastCM, lastSec = cmv, secv
		case <-deadline:
			t.Fatalf("final state never delivered; last snapshot (cm %d, secret %d), want (%d, %d)", lastCM, lastSec, updates, updates)
		}
	}
}
