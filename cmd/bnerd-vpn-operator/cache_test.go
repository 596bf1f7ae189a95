package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"bnerd.net/vpn-operator/internal/render"
)

// The manager caches only gateway pods: the cluster's other pods stay out of memory.
func TestPodCacheHoldsOnlyGatewayPods(t *testing.T) {
	f, cfg, err := parseFlags(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	scheme, err := newScheme()
	if err != nil {
		t.Fatal(err)
	}
	opts := managerOptions(f, cfg, scheme)
	for obj, by := range opts.Cache.ByObject {
		if _, ok := obj.(*corev1.Pod); !ok {
			continue
		}
		if by.Label == nil || !by.Label.Matches(labels.Set(render.PodSelector())) || by.Label.Matches(labels.Set{"app": "other"}) {
			t.Fatalf("pod cache selector %v", by.Label)
		}
		return
	}
	t.Fatal("no pod cache selector: every pod of the cluster would be cached")
}
