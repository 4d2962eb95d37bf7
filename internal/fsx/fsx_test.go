package fsx

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteSecret(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	if err := WriteSecret(path, []byte("one"), false); err != nil {
		t.Fatal(err)
	}
	if err := WriteSecret(path, []byte("two"), false); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("no-replace over an existing file: %v", err)
	}
	if err := WriteSecret(path, []byte("three"), true); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	st, _ := os.Stat(path)
	if string(b) != "three" || st.Mode().Perm() != 0o600 {
		t.Fatalf("content %q mode %v", b, st.Mode().Perm())
	}
	if n, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".secret-*")); len(n) != 0 {
		t.Fatalf("temporary files left: %v", n)
	}
}

// TestWriteSecretMakesItsDirectory: a key written into a data directory
// that does not exist yet (a first start) creates it, private.
func TestWriteSecretMakesItsDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "data")
	if err := WriteSecret(filepath.Join(dir, "agent.key"), []byte("k"), false); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("directory: %v %v", st, err)
	}
}
