// Package fsx writes secret files safely: mode 0600 from the first byte,
// written to a temporary name, synced, then moved into place, so a crash
// never leaves a half-written key or api_key.
package fsx

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/agentmesh/mesh/internal/atomicfile"
)

// WriteSecret writes data to path with mode 0600, creating its directory
// (mode 0700) when missing. With replace false it refuses to replace an
// existing file (fs.ErrExist), also when path appears while writing.
func WriteSecret(path string, data []byte, replace bool) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if replace {
		return atomicfile.Write(path, data, 0o600)
	}
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("%s: %w", path, fs.ErrExist)
	}
	return atomicfile.Create(path, 0o600, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}
