// Package statefile writes the small JSON files the gateway pod's containers hand each
// other on a shared emptyDir (init-nat's and the wireguard role's statistics, the status
// agent's copy of the configuration and its IPsec listing). Writers and readers run as
// different users in different containers, and an emptyDir is mode 0777 without the
// sticky bit, so a writer must never follow a link another container planted: each write
// goes to a fresh temporary file created exclusively (O_CREAT|O_EXCL, which refuses an
// existing name, a symbolic link included) and is renamed over the target (rename
// replaces a link, it does not write through it). Readers then see the old content or
// the new one, never half of it.
package statefile

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Write replaces path with data, mode 0644 (readers run as other users).
func Write(path string, data []byte) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			_ = os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	// CreateTemp makes the file 0600; the readers are other users.
	if err := f.Chmod(0o644); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("replacing %s: %w", path, err)
	}
	ok = true
	return nil
}

// WriteJSON replaces path with v as JSON.
func WriteJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return Write(path, b)
}
