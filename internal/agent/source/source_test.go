package source

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestFilesDeliversChanges(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gateway.json")
	for name, v := range map[string]string{"gateway.json": "{}", "secrets.conf": "s"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f := NewFiles(cfg, "")
	f.Interval = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan Snapshot, 1)
	go func() { _ = f.Run(ctx, out) }()
	s := <-out
	if string(s.Config) != "{}" || s.Secrets != "s" || !s.Complete() {
		t.Fatalf("first snapshot %+v", s)
	}
	if err := os.WriteFile(filepath.Join(dir, "gateway.json"), []byte(`{"a":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for s = range out {
		if string(s.Config) == `{"a":1}` {
			break
		}
	}
	if s.Secrets != "s" {
		t.Errorf("snapshot lost secrets: %+v", s)
	}
	if err := os.WriteFile(filepath.Join(dir, "secrets.conf"), []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	for s = range out {
		if s.Secrets == "t" {
			break
		}
	}
}
