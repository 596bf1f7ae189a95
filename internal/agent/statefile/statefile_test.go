package statefile

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteDoesNotFollowAPlantedLink: a link planted at the target or at the name the
// old writers used for their temporary file (<path>.tmp) never leads the write to the
// file it points at; the target ends up a regular file with the new content, readable
// by other users.
func TestWriteDoesNotFollowAPlantedLink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("untouched"), 0o600); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "nat-state.json")
	for _, link := range []string{target, target + ".tmp"} {
		if err := os.Symlink(victim, link); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteJSON(target, map[string]int{"applies": 3}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "untouched" {
		t.Errorf("the link's target was written: %q", b)
	}
	fi, err := os.Lstat(target)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Errorf("target is %v, want a regular file 0644", fi.Mode())
	}
	if b, _ := os.ReadFile(target); string(b) != `{"applies":3}` {
		t.Errorf("target holds %q", b)
	}
	// No temporary file is left beside it.
	ents, _ := os.ReadDir(dir)
	if len(ents) != 3 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want victim, the target and the old .tmp link", names)
	}
}

func TestWriteFailsInAMissingDirectory(t *testing.T) {
	if err := Write(filepath.Join(t.TempDir(), "no", "file"), []byte("x")); err == nil {
		t.Fatal("a write into a missing directory succeeded")
	}
}
