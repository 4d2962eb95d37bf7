package update

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strings"
	"time"
)

// ErrSignature is a release whose signature file is missing or does not
// verify against the pinned key.
var ErrSignature = errors.New("update: release signature missing or invalid")

// CheckURL accepts a site URL the daemon may update itself from: https;
// with insecure also file:// and http:// on a loopback address (tests, a
// mirror on the machine), never plain http to another host, where anyone
// on the path could serve a release.
func CheckURL(raw string, insecure bool) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return err
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return errors.New("no credentials, query or fragment in a site URL")
	case u.Scheme == "https" && u.Host != "":
		return nil
	case !insecure:
		return errors.New("the site must be https (file:// and loopback http:// only with --insecure-site)")
	case u.Scheme == "file" && u.Host == "" && u.Path != "":
		return nil
	case u.Scheme == "http" && loopback(u.Hostname()):
		return nil
	}
	return errors.New("want https, or with --insecure-site a file:// path or http:// on a loopback address")
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// NewClient is the HTTP client of a site: each request within timeout,
// redirects followed only to URLs CheckURL takes (no downgrade to http),
// and with insecure file:// URLs read from the file system.
func NewClient(timeout time.Duration, insecure bool) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if insecure {
		tr.RegisterProtocol("file", http.NewFileTransport(http.Dir("/")))
	}
	return &http.Client{Timeout: timeout, Transport: tr, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("more than 5 redirects")
		}
		if err := CheckURL(req.URL.String(), insecure); err != nil {
			return fmt.Errorf("redirect to %s: %w", req.URL.Redacted(), err)
		}
		return nil
	}}
}

// SignedText is what a release's signature signs: its release line (its
// version and checksum) and the name of its file, so that a signed
// release of one platform cannot be served as another's:
//
//	mesh-release go-0.2.0 <sha256 hex> mesh-linux-amd64
func SignedText(rel Release) []byte {
	return fmt.Appendf(nil, "mesh-release %s %s %s", rel.Version, rel.SHA256, path.Base(Artifact()))
}

// SigBytes bounds a signature file.
const SigBytes = 1024

// Verify checks rel against key: the signature file next to the release
// (releases/mesh-<GOOS>-<GOARCH>.sig) must hold the base64 Ed25519
// signature of SignedText(rel). A file that is missing, malformed or does
// not verify is ErrSignature; a site that cannot be reached is not.
func (s Site) Verify(ctx context.Context, rel Release, key ed25519.PublicKey) error {
	b, err := s.read(ctx, Artifact()+".sig", SigBytes)
	if errors.Is(err, ErrSite) {
		return fmt.Errorf("%w: %v", ErrSignature, err)
	} else if err != nil {
		return err
	}
	sig, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("%w: %s.sig is not a base64 Ed25519 signature", ErrSignature, Artifact())
	}
	if !ed25519.Verify(key, SignedText(rel), sig) {
		return fmt.Errorf("%w: %s.sig does not verify against the pinned release key", ErrSignature, Artifact())
	}
	return nil
}
