package update

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
)

// HeadBytes is how much of the release file is read for its version.
const HeadBytes = 8 << 10

// Errors of the site.
var (
	// ErrSite is an answer of the site that cannot be used.
	ErrSite = errors.New("update: unusable answer from the site")
	// ErrChecksum is a download whose checksum is not the one announced.
	ErrChecksum = errors.New("update: checksum mismatch")
	// ErrTooLarge is a release over MaxBytes.
	ErrTooLarge = errors.New("update: release too large")
)

// Site is the published standard and releases under BaseURL.
type Site struct {
	BaseURL string
	Client  *http.Client
	// MaxBytes bounds a release download.
	MaxBytes int64
}

// Artifact is the release file of this platform under the site:
// releases/mesh-<GOOS>-<GOARCH>.
func Artifact() string { return "releases/mesh-" + runtime.GOOS + "-" + runtime.GOARCH }

// get fetches path under the site, for reading at most limit bytes.
func (s Site) get(ctx context.Context, path string, header http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(s.BaseURL, "/")+"/"+path, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := s.Client.Do(req)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusPartialContent {
		res.Body.Close()
		return nil, fmt.Errorf("%w: GET %s: %s", ErrSite, path, res.Status)
	}
	return res, nil
}

func (s Site) read(ctx context.Context, path string, limit int64) ([]byte, error) {
	res, err := s.get(ctx, path, nil)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	return io.ReadAll(io.LimitReader(res.Body, limit))
}

// StandardVersion is the published standard version (standard/version).
func (s Site) StandardVersion(ctx context.Context) (int, error) {
	b, err := s.read(ctx, "standard/version", 64)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: standard/version is not an integer", ErrSite)
	}
	return n, nil
}

// Preamble is the published instructions preamble
// (standard/agent-instructions.md), at most 256 KiB.
func (s Site) Preamble(ctx context.Context) ([]byte, error) {
	return s.read(ctx, "standard/agent-instructions.md", 256<<10)
}

// Release is what the first line of a release file announces.
type Release struct {
	Version string
	SHA256  string
}

var headRe = regexp.MustCompile(`^mesh-release (go-\d+\.\d+\.\d+) ([0-9a-f]{64})\r?$`)

// Latest reads the version of the published release from the first
// HeadBytes of its file.
func (s Site) Latest(ctx context.Context) (Release, error) {
	res, err := s.get(ctx, Artifact(), http.Header{"Range": {fmt.Sprintf("bytes=0-%d", HeadBytes-1)}})
	if err != nil {
		return Release{}, err
	}
	defer res.Body.Close()
	head, err := io.ReadAll(io.LimitReader(res.Body, HeadBytes))
	if err != nil {
		return Release{}, err
	}
	line, _, _ := bytes.Cut(head, []byte("\n"))
	m := headRe.FindSubmatch(line)
	if m == nil {
		return Release{}, fmt.Errorf("%w: %s has no release line in its first %d bytes", ErrSite, Artifact(), HeadBytes)
	}
	return Release{Version: string(m[1]), SHA256: string(m[2])}, nil
}

// Install downloads the release and replaces exe with it: the binary is
// written next to exe, checked against the announced checksum and renamed
// over exe. Any failure leaves exe as it was.
func (s Site) Install(ctx context.Context, want Release, exe string) error {
	res, err := s.get(ctx, Artifact(), nil)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	br := bufio.NewReader(io.LimitReader(res.Body, s.MaxBytes+HeadBytes+1))
	line, err := br.ReadString('\n')
	if err != nil {
		return fmt.Errorf("%w: release line: %v", ErrSite, err)
	}
	m := headRe.FindStringSubmatch(strings.TrimSuffix(line, "\n"))
	if m == nil || m[1] != want.Version || m[2] != want.SHA256 {
		return fmt.Errorf("%w: the release changed while it was read", ErrSite)
	}
	tmp, err := os.CreateTemp(filepath.Dir(exe), "."+filepath.Base(exe)+".update-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), br)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return err
	case n > s.MaxBytes:
		return fmt.Errorf("%w: over %d bytes", ErrTooLarge, s.MaxBytes)
	case hex.EncodeToString(h.Sum(nil)) != want.SHA256:
		return ErrChecksum
	}
	if err := os.Chmod(tmp.Name(), 0o755); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), exe)
}

var versionRe = regexp.MustCompile(`^go-(\d+)\.(\d+)\.(\d+)$`)

// Newer reports whether version a is newer than b; versions that are not
// go-<major>.<minor>.<patch> are never newer.
func Newer(a, b string) bool {
	ma, mb := versionRe.FindStringSubmatch(a), versionRe.FindStringSubmatch(b)
	if ma == nil || mb == nil {
		return false
	}
	for i := 1; i <= 3; i++ {
		x, _ := strconv.Atoi(ma[i])
		y, _ := strconv.Atoi(mb[i])
		if x != y {
			return x > y
		}
	}
	return false
}
