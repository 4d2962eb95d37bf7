package httpx

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestAddrKey: every per-address count and limit takes an IPv6 address by
// its /64, so a host cannot escape it by rotating through its block; an
// IPv4 address counts alone. What it makes is exactly what ValidAddrKey
// takes from another node.
func TestAddrKey(t *testing.T) {
	for ip, want := range map[string]string{
		"198.51.100.7":             "198.51.100.7",
		"::ffff:198.51.100.7":      "198.51.100.7",
		"2001:db8:1:2:3:4:5:6":     "2001:db8:1:2::/64",
		"2001:db8:1:2::9":          "2001:db8:1:2::/64",
		"fe80::1%eth0":             "fe80::/64",
		"p2p/12D3KooWExamplePeer1": "p2p/12D3KooWExamplePeer1",
		"":                         "unknown",
	} {
		if got := AddrKey(ip); got != want {
			t.Errorf("AddrKey(%q) = %q, want %q", ip, got, want)
		}
		if valid := ValidAddrKey(AddrKey(ip)); valid != !strings.HasPrefix(want, "p2p/") && want != "unknown" {
			t.Errorf("ValidAddrKey(%q) = %v", want, valid)
		}
	}
	for _, s := range []string{"2001:db8:1:2::1", "2001:db8::/48", "2001:db8:1:2::/64 ", "198.51.100.7/32", "::ffff:198.51.100.7", "2001:DB8:1:2::/64", "x"} {
		if ValidAddrKey(s) {
			t.Errorf("ValidAddrKey(%q) = true, want false: AddrKey never makes it", s)
		}
	}
}

func TestCheckBaseURL(t *testing.T) {
	for _, s := range []string{"http://127.0.0.1:7777", "https://mesh.example.com", "https://mesh.example.com/prefix", "http://[::1]:80"} {
		if err := CheckBaseURL(s); err != nil {
			t.Errorf("CheckBaseURL(%q): %v", s, err)
		}
	}
	for _, s := range []string{"", "mesh.example.com", "ftp://mesh.example.com", "javascript:alert(1)", "https://user:pw@mesh.example.com",
		"https://mesh.example.com/?q=1", "https://mesh.example.com/#x", "https://mesh.example.com\r\nX-Evil: 1", "https://mesh.example.com/\x00",
		"https://mesh.example.com/\x7f", "https://mesh.example.com/\xff", "http:///path", "https://" + strings.Repeat("a", 1100) + ".example"} {
		if err := CheckBaseURL(s); err == nil {
			t.Errorf("CheckBaseURL(%q) = nil, want an error", s)
		}
	}
}

func FuzzCheckBaseURL(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1:7777", "https://u@x", "https://x/\x01", "https://x?#"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if CheckBaseURL(s) != nil {
			return
		}
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || strings.ContainsAny(s, "\r\n\x00?#") {
			t.Fatalf("CheckBaseURL took %q", s)
		}
	})
}

// TestRetryAfter: an error that says when to retry is sent with a
// Retry-After header in whole seconds, rounded up; With keeps it.
func TestRetryAfter(t *testing.T) {
	w := httptest.NewRecorder()
	WriteError(nil, w, httptest.NewRequest("POST", "/", nil), ErrRateLimited.After(1500*time.Millisecond).With("slow down"))
	if w.Code != 429 || w.Header().Get("Retry-After") != "2" || !strings.Contains(w.Body.String(), `"detail":"slow down"`) {
		t.Fatalf("%d %v %s", w.Code, w.Header(), w.Body)
	}
	w = httptest.NewRecorder()
	WriteError(nil, w, httptest.NewRequest("POST", "/", nil), ErrInvalid)
	if w.Header().Get("Retry-After") != "" {
		t.Fatal("Retry-After on an error that sets none")
	}
}
