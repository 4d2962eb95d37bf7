// Package fsx writes secret files safely: mode 0600 from the first byte,
// written to a temporary name, synced, then moved into place, so a crash
// never leaves a half-written key or api_key.
package fsx

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteSecret writes data to path with mode 0600, creating its directory
// (mode 0700) when missing. With replace false it refuses to replace an
// existing file (fs.ErrExist), also when path appears while writing.
func WriteSecret(path string, data []byte, replace bool) error {
	if !replace {
		if _, err := os.Stat(path); err == nil {
			return fmt.Errorf("%s: %w", path, fs.ErrExist)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".secret-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if replace {
		return os.Rename(tmp.Name(), path)
	}
	// Link, unlike rename, fails when path appeared meanwhile.
	if err := os.Link(tmp.Name(), path); err != nil {
		if os.IsExist(err) {
			return fmt.Errorf("%s: %w", path, fs.ErrExist)
		}
		return err
	}
	return nil
}
