package coord

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agentmesh/mesh/internal/atomicfile"
)

// TokenFile is where the daemon keeps its token (StateDir/token, mode
// 0600): pages send it with their writes; programs of the machine's user
// may read it there.
func (d *Daemon) TokenFile() string { return filepath.Join(d.cfg.StateDir, "token") }

// loadToken reads the daemon's token from path, through the project's
// files (a token file linked out of the project is refused), making one
// (32 random bytes, base64url, mode 0600) when there is none. It is kept
// across restarts, so that a dashboard given it once keeps working;
// deleting the file makes a new one at the next start. A file others may
// have written or may read (not owned by this user, or with a permission
// bit for the group or others, as a file checked out of a repository has)
// holds a token somebody else may know: it is replaced by a new one, and
// why is returned in replaced.
func loadToken(files atomicfile.Root, path string) (tok, replaced string, err error) {
	f, err := files.OpenFile("read", path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		tok, err = newToken(files, path, false)
		if errors.Is(err, fs.ErrExist) {
			return loadToken(files, path) // another process made it first
		}
		return tok, "", err
	}
	if err != nil {
		return "", "", err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return "", "", err
	}
	if why := notPrivate(info, os.Getuid()); why != "" {
		f.Close()
		tok, err = newToken(files, path, true)
		return tok, why, err
	}
	b, err := readAtMost(f, 1024)
	if err != nil {
		return "", "", err
	}
	tok = strings.TrimSpace(string(b))
	if len(tok) < 16 || len(tok) > 256 || strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return "", "", fmt.Errorf("%s: a token is 16 to 256 printable characters without spaces (delete the file for a new one)", path)
	}
	return tok, "", nil
}

// newToken writes a new token at path, mode 0600: over what is there when
// replace, else only when there is nothing (fs.ErrExist).
func newToken(files atomicfile.Root, path string, replace bool) (string, error) {
	raw := make([]byte, 32)
	rand.Read(raw)
	tok := base64.RawURLEncoding.EncodeToString(raw)
	data := []byte(tok + "\n")
	if replace {
		return tok, files.Write(path, data, 0o600)
	}
	return tok, files.Create(path, 0o600, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// notPrivate says why a token file is not the daemon user's own secret:
// not a regular file, owned by another user, or readable or writable by
// the group or others; "" when it is.
func notPrivate(info fs.FileInfo, uid int) string {
	if !info.Mode().IsRegular() {
		return "it is not a regular file"
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) != uid {
		return fmt.Sprintf("it is owned by user %d, not by this daemon's user %d", st.Uid, uid)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Sprintf("its mode %04o lets the group or others read or write it (a file checked out of a repository is 0644)", perm)
	}
	return ""
}

// newGuard makes the request guard of a daemon that listens on d.ln and
// whose certificate names tlsNames.
func (d *Daemon) newGuard(tlsNames []string) (*guard, error) {
	tok, replaced, err := loadToken(d.files, d.TokenFile())
	if err != nil {
		return nil, fmt.Errorf("coord: token: %w", err)
	}
	name := d.TokenFile()
	if rel, err := filepath.Rel(d.cfg.Dir, name); err == nil && !strings.HasPrefix(rel, "..") {
		name = rel
	}
	if replaced != "" {
		msg := "the token file was not private, so its token may be known to others: a new one replaced it"
		d.log.Warn(msg, "file", name, "why", replaced)
		d.debug("warn", "guard", msg, map[string]any{"file": name, "why": replaced})
	}
	hosts := []string{"localhost"}
	for _, h := range append(append([]string{d.cfg.Host}, tlsNames...), d.cfg.AllowedHosts...) {
		hosts = append(hosts, strings.TrimSuffix(strings.ToLower(h), "."))
	}
	listen := d.ln.Addr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	return &guard{hosts: hosts, listen: listen, anyIP: listen.IsUnspecified(), origins: d.cfg.AllowedOrigins,
		token: tok, tokenName: name, requireToken: d.cfg.RequireToken, log: d.log,
		debug: func(f map[string]any) { d.debug("warn", "guard", "request refused", f) }}, nil
}
