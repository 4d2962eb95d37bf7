// Package atomicfile writes files whole: a reader, or a process started
// after a crash, sees the old content or the new one, never a mix, and
// what was written is on disk (synced) before it takes its name.
package atomicfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Write replaces path with data, with mode, through a temporary file in
// the same folder renamed over it; the folder is created (0755) when
// missing.
func Write(path string, data []byte, mode os.FileMode) error {
	return write(path, mode, true, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Create writes a new file at path with what fill writes, like Write, but
// fails with fs.ErrExist when path exists, also when it appears while
// fill writes.
func Create(path string, mode os.FileMode, fill func(io.Writer) error) error {
	return write(path, mode, false, fill)
}

func write(path string, mode os.FileMode, replace bool, fill func(io.Writer) error) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// CreateTemp makes the file 0600: nothing of it is readable by others
	// before its mode is set.
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after a rename, a name nothing holds any more
	if err := fillFile(f, mode, fill); err != nil {
		return err
	}
	if replace {
		err = os.Rename(f.Name(), path)
	} else if err = os.Link(f.Name(), path); os.IsExist(err) { // link, unlike rename, fails on an existing name
		return fmt.Errorf("%s: %w", path, fs.ErrExist)
	}
	if err != nil {
		return err
	}
	return syncDir(dir)
}

// fillFile writes a new file's content with fill, gives it its mode, puts
// it on disk and closes it.
func fillFile(f *os.File, mode os.FileMode, fill func(io.Writer) error) error {
	err := fill(f)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncDir makes a new name in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
