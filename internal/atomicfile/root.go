package atomicfile

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrOutside is a path that leads outside the folder a Root confines
// writes to: a name with "..", an absolute path elsewhere, or a symbolic
// link, in the name or in any folder above it, to somewhere else. An
// absolute link is refused even when it points inside (os.Root follows
// relative links only).
var ErrOutside = errors.New("the path leaves its folder (through a symbolic link out of it, or an absolute one)")

// OutsideError is an operation a Root refused: Op (write, create, append,
// open, read, stat, make, remove, "run in") on Path, relative to the
// root.
type OutsideError struct{ Op, Path string }

func (e *OutsideError) Error() string {
	return fmt.Sprintf("%s %s: %v", e.Op, e.Path, ErrOutside)
}

func (e *OutsideError) Unwrap() error { return ErrOutside }

// Root confines reads and writes to one folder: every path is opened
// through an os.Root, which resolves each component itself and refuses a
// symbolic link that leaves the folder, wherever it is in the path, so
// that no write lands outside, whatever links the folder holds. Paths may
// be given absolute (under the folder) or relative to it. Writes are
// whole, as Write and Create are.
type Root struct {
	dir string
	// report, when set, is told of each operation refused as outside (an
	// *OutsideError) and of each that succeeded (nil), by the path
	// relative to the folder.
	report func(rel string, err error)
}

// NewRoot confines to dir; report (which may be nil) is told of
// refusals and successes.
func NewRoot(dir string, report func(rel string, err error)) Root {
	return Root{dir: filepath.Clean(dir), report: report}
}

// Dir is the folder.
func (r Root) Dir() string { return r.dir }

// Write replaces path with data, like Write.
func (r Root) Write(path string, data []byte, mode os.FileMode) error {
	return r.write("write", path, mode, true, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Create writes a new file at path, like Create: fs.ErrExist when it
// exists.
func (r Root) Create(path string, mode os.FileMode, fill func(io.Writer) error) error {
	return r.write("create", path, mode, false, fill)
}

// Append adds data at the end of path, creating it (and its folders).
func (r Root) Append(path string, data []byte, mode os.FileMode) error {
	f, err := r.OpenAppend(path, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// OpenAppend opens path for appending, creating it (and its folders).
func (r Root) OpenAppend(path string, mode os.FileMode) (*os.File, error) {
	return r.OpenFile("append", path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, mode)
}

// OpenFile opens path with flag, its folders made when flag creates; op
// names the operation in a refusal.
func (r Root) OpenFile(op, path string, flag int, mode os.FileMode) (*os.File, error) {
	var f *os.File
	err := r.do(op, path, func(root *os.Root, rel string) error {
		if flag&os.O_CREATE != 0 {
			if err := root.MkdirAll(filepath.Dir(rel), 0o755); err != nil {
				return err
			}
		}
		var err error
		f, err = root.OpenFile(rel, flag, mode)
		return err
	})
	return f, err
}

// ReadFile reads path.
func (r Root) ReadFile(path string) ([]byte, error) {
	var b []byte
	err := r.do("read", path, func(root *os.Root, rel string) error {
		var err error
		b, err = root.ReadFile(rel)
		return err
	})
	return b, err
}

// Stat stats path, following links that stay inside.
func (r Root) Stat(path string) (fs.FileInfo, error) {
	var info fs.FileInfo
	err := r.do("stat", path, func(root *os.Root, rel string) error {
		var err error
		info, err = root.Stat(rel)
		return err
	})
	return info, err
}

// MkdirAll makes the folder path and those above it.
func (r Root) MkdirAll(path string, mode os.FileMode) error {
	return r.do("make", path, func(root *os.Root, rel string) error { return root.MkdirAll(rel, mode) })
}

// Remove removes the file (or empty folder) path.
func (r Root) Remove(path string) error {
	return r.do("remove", path, func(root *os.Root, rel string) error { return root.Remove(rel) })
}

// RemoveAll removes path and what it holds.
func (r Root) RemoveAll(path string) error {
	return r.do("remove", path, func(root *os.Root, rel string) error { return root.RemoveAll(rel) })
}

// Resolve is path with its symbolic links resolved, when it is a folder
// that resolves inside; for running a command in it.
func (r Root) Resolve(path string) (string, error) {
	var out string
	err := r.do("run in", path, func(root *os.Root, rel string) error {
		d, err := root.Open(rel)
		if err != nil {
			return err
		}
		info, err := d.Stat()
		d.Close()
		switch {
		case err != nil:
			return err
		case !info.IsDir():
			return fmt.Errorf("%s: not a folder", rel)
		}
		out, err = filepath.EvalSymlinks(filepath.Join(r.dir, rel))
		if err == nil && !within(r.real(), out) {
			err = ErrOutside // the link changed under us
		}
		return err
	})
	return out, err
}

func (r Root) write(op, path string, mode os.FileMode, replace bool, fill func(io.Writer) error) error {
	return r.do(op, path, func(root *os.Root, rel string) error {
		// A rename would replace a link that leads out rather than write
		// through it; it is refused all the same, so that it is seen.
		if info, err := root.Lstat(rel); err == nil && info.Mode()&fs.ModeSymlink != 0 && r.leaves(rel) {
			return ErrOutside
		}
		dir := filepath.Dir(rel)
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		// Made 0600: nothing of it is readable by others before its mode
		// is set.
		tmp := filepath.Join(dir, "."+filepath.Base(rel)+"."+rand.Text()+".tmp")
		f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		defer root.Remove(tmp) // after a rename, a name nothing holds any more
		if err := fillFile(f, mode, fill); err != nil {
			return err
		}
		if replace {
			err = root.Rename(tmp, rel)
		} else if err = root.Link(tmp, rel); errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s: %w", rel, fs.ErrExist)
		}
		if err != nil {
			return err
		}
		d, err := root.Open(dir)
		if err != nil {
			return err
		}
		defer d.Close()
		return d.Sync()
	})
}

// do runs f on path relative to the folder, opened as an os.Root. A path
// outside, or a failure the path's links explain, is an *OutsideError.
func (r Root) do(op, path string, f func(root *os.Root, rel string) error) error {
	rel := path
	if filepath.IsAbs(path) {
		var err error
		if rel, err = filepath.Rel(r.dir, path); err != nil {
			rel = path
		}
	}
	rel = filepath.Clean(rel)
	var err error
	if rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		err = ErrOutside
	} else {
		var root *os.Root
		if root, err = os.OpenRoot(r.dir); err == nil {
			err = f(root, rel)
			root.Close()
		}
	}
	if err != nil && (errors.Is(err, ErrOutside) || r.leaves(rel)) {
		err = &OutsideError{Op: op, Path: rel}
	}
	if r.report != nil && (err == nil || errors.Is(err, ErrOutside)) {
		r.report(rel, err)
	}
	return err
}

// leaves reports whether rel, or a folder above it, is a symbolic link
// that is absolute or leads outside the folder (dangling links
// included).
func (r Root) leaves(rel string) bool {
	real := r.real()
	p := r.dir
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		p = filepath.Join(p, part)
		info, err := os.Lstat(p)
		if err != nil {
			return false
		}
		if info.Mode()&fs.ModeSymlink == 0 {
			continue
		}
		target, err := os.Readlink(p)
		if err != nil || filepath.IsAbs(target) {
			return err == nil
		}
		target = filepath.Join(filepath.Dir(p), target)
		if resolved, err := filepath.EvalSymlinks(target); err == nil {
			target = resolved
		}
		if !within(real, target) && !within(r.dir, target) {
			return true
		}
	}
	return false
}

// real is the folder with its own links resolved.
func (r Root) real() string {
	if real, err := filepath.EvalSymlinks(r.dir); err == nil {
		return real
	}
	return r.dir
}

// within reports whether path is dir or under it.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}
