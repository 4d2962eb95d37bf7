package update

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCheckURL: a site is https; file:// and loopback http:// only when
// the operator says so; plain http to another host never.
func TestCheckURL(t *testing.T) {
	for _, tc := range []struct {
		url           string
		secure, insec bool
	}{
		{"https://standard.example.com", true, true},
		{"https://standard.example.com/mirror", true, true},
		{"http://standard.example.com", false, false},
		{"http://192.0.2.1:8080", false, false},
		{"http://127.0.0.1:8080", false, true},
		{"http://[::1]:8080", false, true},
		{"http://localhost:8080", false, true},
		{"http://localhost.evil.example", false, false},
		{"file:///srv/site", false, true},
		{"file://host/srv/site", false, false},
		{"ftp://standard.example.com", false, false},
		{"https://user:pw@standard.example.com", false, false},
		{"https://standard.example.com/?x=1", false, false},
		{"https:///nohost", false, false},
		{"standard.example.com", false, false},
	} {
		if got := CheckURL(tc.url, false) == nil; got != tc.secure {
			t.Errorf("CheckURL(%q, false) ok = %v", tc.url, got)
		}
		if got := CheckURL(tc.url, true) == nil; got != tc.insec {
			t.Errorf("CheckURL(%q, true) ok = %v", tc.url, got)
		}
	}
}

// TestRedirectsStayOnTheSite: a site may redirect within what CheckURL
// takes, never to plain http elsewhere.
func TestRedirectsStayOnTheSite(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/standard/version":
			http.Redirect(w, r, "/moved/version", http.StatusFound)
		case "/moved/version":
			fmt.Fprintln(w, "21")
		case "/standard/agent-instructions.md":
			http.Redirect(w, r, "http://192.0.2.1/agent-instructions.md", http.StatusFound)
		}
	}))
	defer srv.Close()
	s := Site{BaseURL: srv.URL, Client: NewClient(5*time.Second, true)}
	if v, err := s.StandardVersion(context.Background()); err != nil || v != 21 {
		t.Fatalf("a redirect on the site: %d %v", v, err)
	}
	if _, err := s.Preamble(context.Background()); err == nil || !strings.Contains(err.Error(), "redirect to http://192.0.2.1") {
		t.Fatalf("a redirect to plain http elsewhere: %v", err)
	}
}

// TestVerify: a release counts with a pinned key only when its signature
// file holds that key's signature of its line and file name.
func TestVerify(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	_, other, _ := ed25519.GenerateKey(nil)
	rel := Release{Version: "go-0.2.0", SHA256: strings.Repeat("ab", 32)}
	sign := func(key ed25519.PrivateKey, text []byte) string {
		return base64.StdEncoding.EncodeToString(ed25519.Sign(key, text)) + "\n"
	}
	wrongName := []byte(fmt.Sprintf("mesh-release %s %s mesh-plan9-mips", rel.Version, rel.SHA256))
	for _, tc := range []struct {
		name, sig string // sig "" is no signature file
		ok        bool
	}{
		{"signed", sign(priv, SignedText(rel)), true},
		{"no signature file", "", false},
		{"another key", sign(other, SignedText(rel)), false},
		{"another platform's file", sign(priv, wrongName), false},
		{"another version", sign(priv, SignedText(Release{Version: "go-0.1.9", SHA256: rel.SHA256})), false},
		{"not base64", "not a signature\n", false},
		{"too short", base64.StdEncoding.EncodeToString([]byte("short")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.sig != "" {
				path := filepath.Join(dir, Artifact()+".sig")
				os.MkdirAll(filepath.Dir(path), 0o755)
				os.WriteFile(path, []byte(tc.sig), 0o644)
			}
			s := Site{BaseURL: "file://" + dir, Client: NewClient(5*time.Second, true)}
			err := s.Verify(context.Background(), rel, pub)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrSignature)) {
				t.Fatalf("Verify: %v", err)
			}
		})
	}
	if !strings.HasSuffix(string(SignedText(rel)), " "+filepath.Base(Artifact())) {
		t.Fatalf("signed text %q", SignedText(rel))
	}
}
