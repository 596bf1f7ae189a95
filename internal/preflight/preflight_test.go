package preflight

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

type capture struct {
	mu    sync.Mutex
	lines []string
}

func (c *capture) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		c.mu.Lock()
		c.lines = append(c.lines, args)
		c.mu.Unlock()
	}, funcr.Options{Verbosity: 1})
}

func (c *capture) warnings() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, l := range c.lines {
		if strings.Contains(l, "WARNING") {
			n++
		}
	}
	return n
}

func TestCheckCiliumExclusive(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = corev1.AddToScheme(scheme)
	cm := func(data map[string]string) client.Object {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cilium-config"}, Data: data}
	}
	cases := []struct {
		name    string
		objs    []client.Object
		confirm bool
	}{
		{"configmap missing", nil, false},
		{"key missing", []client.Object{cm(map[string]string{"enable-ipv4": "true"})}, false},
		{"exclusive true", []client.Object{cm(map[string]string{"cni-exclusive": "true"})}, false},
		{"exclusive false", []client.Object{cm(map[string]string{"cni-exclusive": "false"})}, true},
		{"exclusive False with spaces", []client.Object{cm(map[string]string{"cni-exclusive": " False "})}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.objs...).Build()
			var logs capture
			got := CheckCiliumExclusive(context.Background(), c, logs.logger())
			if got != tc.confirm {
				t.Fatalf("confirmed=%v, want %v", got, tc.confirm)
			}
			if w := logs.warnings(); (w > 0) == tc.confirm {
				t.Fatalf("warnings=%d with confirmed=%v; logs: %v", w, got, logs.lines)
			}
		})
	}
}
