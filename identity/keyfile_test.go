package identity

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "id.key")
	k, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	again, err := LoadOrCreateKey(path)
	if err != nil || !again.Equal(k) {
		t.Fatalf("second load gave another key (%v)", err)
	}
	if err := WriteKey(path, GenerateKey()); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("WriteKey over an existing file: %v", err)
	}
	os.WriteFile(path, []byte("not a key"), 0o600)
	if _, err := LoadKey(path); !errors.Is(err, ErrBadKeyFile) {
		t.Fatalf("garbage key file: %v", err)
	}
}
