// Package atomicfile replaces files whole: a reader (or a daemon started
// after a crash) sees the old content or the new one, never a mix.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data through a temporary file in the same
// folder, renamed over it; the folder is created when missing.
func Write(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), mode)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
