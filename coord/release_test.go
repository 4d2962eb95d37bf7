package coord_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentmesh/mesh/coord"
	"github.com/agentmesh/mesh/coord/update"
)

// fileSite is a site in a folder, read through file://.
type fileSite string

func (s fileSite) put(rel, content string) {
	path := filepath.Join(string(s), rel)
	os.MkdirAll(filepath.Dir(path), 0o755)
	os.WriteFile(path, []byte(content), 0o644)
}

// TestPinnedReleaseKey: with a release key pinned, POST /self-update
// installs a newer release only when its signature file verifies against
// that key; otherwise it answers 502 release_signature_invalid, announces
// the failure and leaves the executable alone. The site is a folder
// (file://).
func TestPinnedReleaseKey(t *testing.T) {
	t.Parallel()
	pub, priv, _ := ed25519.GenerateKey(nil)
	_, other, _ := ed25519.GenerateKey(nil)
	site := fileSite(t.TempDir())
	site.put("standard/version", "19\n")
	site.put("standard/agent-instructions.md", "Be kind.\n")
	body := "new binary"
	sum := sha256.Sum256([]byte(body))
	rel := update.Release{Version: "go-99.0.0", SHA256: hex.EncodeToString(sum[:])}
	site.put(update.Artifact(), fmt.Sprintf("mesh-release %s %s\n%s", rel.Version, rel.SHA256, body))
	exe := filepath.Join(t.TempDir(), "mesh")
	os.WriteFile(exe, []byte("old binary"), 0o755)
	onSite := withSite("file://"+string(site), exe)
	h := start(t, project(t), func(c *coord.Config) {
		onSite(c)
		c.ReleaseKey = pub
	})
	ws := h.socket()
	sig := func(key ed25519.PrivateKey, text []byte) string {
		return base64.StdEncoding.EncodeToString(ed25519.Sign(key, text))
	}
	for _, tc := range []struct{ name, sig string }{
		{"no signature file", ""},
		{"another key", sig(other, update.SignedText(rel))},
		{"another platform's file", sig(priv, fmt.Appendf(nil, "mesh-release %s %s mesh-plan9-mips", rel.Version, rel.SHA256))},
		{"not a signature", "0123"},
	} {
		os.Remove(filepath.Join(string(site), update.Artifact()+".sig"))
		if tc.sig != "" {
			site.put(update.Artifact()+".sig", tc.sig+"\n")
		}
		h.wantError("POST", "/self-update", "", http.StatusBadGateway, "release_signature_invalid")
		if ev := ws.next("daemon.upgrade.failed"); ev["latest"] != "go-99.0.0" {
			t.Fatalf("%s: %v", tc.name, ev)
		}
		if b, _ := os.ReadFile(exe); string(b) != "old binary" {
			t.Fatalf("%s: the executable was replaced", tc.name)
		}
	}
	site.put(update.Artifact()+".sig", sig(priv, update.SignedText(rel))+"\n")
	var res struct{ Updated bool }
	if code := h.do("POST", "/self-update", "", &res); code != http.StatusOK || !res.Updated {
		t.Fatalf("signed release: %d %+v", code, res)
	}
	if b, _ := os.ReadFile(exe); string(b) != body {
		t.Fatalf("executable %q", b)
	}
}

// TestSiteURLMustBeHTTPS: a site over plain http, or a folder, is taken
// only with InsecureSite, and then only on a loopback address.
func TestSiteURLMustBeHTTPS(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url      string
		insecure bool
		ok       bool
	}{
		{"https://standard.example.com", false, true},
		{"http://standard.example.com", false, false},
		{"http://standard.example.com", true, false},
		{"http://127.0.0.1:8080", false, false},
		{"http://127.0.0.1:8080", true, true},
		{"file:///srv/site", false, false},
		{"file:///srv/site", true, true},
	} {
		_, err := coord.New(coord.Config{Dir: t.TempDir(), SiteURL: tc.url, InsecureSite: tc.insecure})
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, coord.ErrConfig)) {
			t.Errorf("%s (insecure %v): %v", tc.url, tc.insecure, err)
		}
	}
}
