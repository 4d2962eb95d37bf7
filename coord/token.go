package coord

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"path/filepath"
	"strings"

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
// deleting the file makes a new one at the next start.
func loadToken(files atomicfile.Root, path string) (string, error) {
	b, err := readHeadIn(files, path, 1024)
	if errors.Is(err, fs.ErrNotExist) {
		raw := make([]byte, 32)
		rand.Read(raw)
		tok := base64.RawURLEncoding.EncodeToString(raw)
		err := files.Create(path, 0o600, func(w io.Writer) error {
			_, err := io.WriteString(w, tok+"\n")
			return err
		})
		if errors.Is(err, fs.ErrExist) {
			return loadToken(files, path) // another process made it first
		} else if err != nil {
			return "", err
		}
		return tok, nil
	}
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 || len(tok) > 256 || strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return "", fmt.Errorf("%s: a token is 16 to 256 printable characters without spaces (delete the file for a new one)", path)
	}
	return tok, nil
}

// newGuard makes the request guard of a daemon that listens on d.ln and
// whose certificate names tlsNames.
func (d *Daemon) newGuard(tlsNames []string) (*guard, error) {
	tok, err := loadToken(d.files, d.TokenFile())
	if err != nil {
		return nil, fmt.Errorf("coord: token: %w", err)
	}
	name := d.TokenFile()
	if rel, err := filepath.Rel(d.cfg.Dir, name); err == nil && !strings.HasPrefix(rel, "..") {
		name = rel
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
