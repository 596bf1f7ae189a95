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

// TestPublishedConfigReachesFilesAtOnce: the status agent's Publish renames each new
// configuration into place, and a Files reader whose polling interval is an hour (so
// only the directory's notification can wake it) delivers every change.
func TestPublishedConfigReachesFilesAtOnce(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gateway.json")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in := make(chan Snapshot, 1)
	go Publish(ctx, in, cfg, t.Logf)
	f := NewFiles(cfg, "")
	f.Interval = time.Hour
	out := make(chan Snapshot, 1)
	go func() { _ = f.Run(ctx, out) }()
	if s := <-out; s.Complete() {
		t.Fatalf("a snapshot before anything was published: %+v", s)
	}
	for i, want := range []string{`{"a":1}`, `{"a":2}`, `{"a":3}`} {
		in <- Snapshot{Config: []byte(want)}
		select {
		case s := <-out:
			if string(s.Config) != want {
				t.Fatalf("change %d: got %q, want %q", i, s.Config, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("change %d never delivered (the reader polls hourly: no notification reached it)", i)
		}
	}
}
