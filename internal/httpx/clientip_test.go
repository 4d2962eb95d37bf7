package httpx

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// clientOf serves a request from remote with the given X-Forwarded-For
// lines through TrustProxies(ps) and returns the ClientIP a handler sees.
func clientOf(ps Proxies, remote string, xff ...string) string {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	for _, v := range xff {
		r.Header.Add(HeaderForwardedFor, v)
	}
	var got string
	TrustProxies(ps, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got = ClientIP(r)
	})).ServeHTTP(httptest.NewRecorder(), r)
	return got
}

func TestTrustProxies(t *testing.T) {
	ps, err := ParseProxies([]string{"10.0.0.0/8", "192.0.2.1", "fd00::/8"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, remote string
		xff          []string
		want         string
	}{
		{"untrusted peer: header ignored", "203.0.113.5:4000", []string{"198.51.100.1"}, "203.0.113.5"},
		{"untrusted peer, no header", "203.0.113.5:4000", nil, "203.0.113.5"},
		{"one hop", "10.0.0.2:5000", []string{"198.51.100.1"}, "198.51.100.1"},
		{"several hops, trusted ones skipped", "10.0.0.2:5000", []string{"198.51.100.1, 10.1.1.1,192.0.2.1"}, "198.51.100.1"},
		{"spoofed left-most entry", "10.0.0.2:5000", []string{"1.1.1.1, 198.51.100.1"}, "198.51.100.1"},
		{"spoofed trusted left-most entry", "10.0.0.2:5000", []string{"10.9.9.9, 198.51.100.1"}, "198.51.100.1"},
		{"garbage left of the client is never read", "10.0.0.2:5000", []string{"<script>, , 198.51.100.1"}, "198.51.100.1"},
		{"several header lines make one list", "10.0.0.2:5000", []string{"1.1.1.1", "198.51.100.7, 10.1.1.1"}, "198.51.100.7"},
		{"every hop trusted: the left-most", "10.0.0.2:5000", []string{"10.1.1.1, 10.2.2.2"}, "10.1.1.1"},
		{"trusted peer, no header", "10.0.0.2:5000", nil, "10.0.0.2"},
		{"malformed right-most entry: the peer", "10.0.0.2:5000", []string{"198.51.100.1, bogus"}, "10.0.0.2"},
		{"malformed trusted-side entry: the peer", "10.0.0.2:5000", []string{"198.51.100.1, 10.1.1.999, 10.1.1.1"}, "10.0.0.2"},
		{"empty entry: the peer", "10.0.0.2:5000", []string{"198.51.100.1,"}, "10.0.0.2"},
		{"empty header: the peer", "10.0.0.2:5000", []string{""}, "10.0.0.2"},
		{"entries with ports", "10.0.0.2:5000", []string{"198.51.100.1:4711, 10.1.1.1:80"}, "198.51.100.1"},
		{"IPv6 proxy and client", "[fd00::1]:443", []string{"2001:db8::1, fd00::2"}, "2001:db8::1"},
		{"IPv6 client with port", "[fd00::1]:443", []string{"[2001:db8::1]:5555"}, "2001:db8::1"},
		{"IPv6 untrusted peer", "[2001:db8::2]:443", []string{"198.51.100.1"}, "2001:db8::2"},
		{"IPv4-mapped peer and client", "[::ffff:10.0.0.2]:80", []string{"::ffff:198.51.100.1"}, "198.51.100.1"},
		{"bare IP: that address", "192.0.2.1:80", []string{"198.51.100.1"}, "198.51.100.1"},
		{"bare IP: only that address", "192.0.2.2:80", []string{"198.51.100.1"}, "192.0.2.2"},
		{"libp2p request", "p2p/12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo", []string{"198.51.100.1"}, "p2p/12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := clientOf(ps, tc.remote, tc.xff...); got != tc.want {
				t.Errorf("client = %q, want %q", got, tc.want)
			}
		})
	}
	// Without trusted proxies no header is ever read.
	if got := clientOf(nil, "10.0.0.2:5000", "198.51.100.1"); got != "10.0.0.2" {
		t.Errorf("no trusted proxies: client = %q", got)
	}
}

func TestParseProxies(t *testing.T) {
	ps, err := ParseProxies([]string{"10.0.0.0/8", "10.1.2.3/16", "192.0.2.1", " 2001:db8::1", "fd00::/8 "})
	if err != nil {
		t.Fatal(err)
	}
	want := Proxies{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("10.1.0.0/16"),
		netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("2001:db8::1/128"), netip.MustParsePrefix("fd00::/8")}
	if !slices.Equal(ps, want) {
		t.Fatalf("ParseProxies = %v, want %v", ps, want)
	}
	for _, bad := range []string{"", "nonsense", "10.0.0.0/33", "10.0.0.256", "10.0.0.0/8/8", "fd00::/129", "example.com"} {
		_, err := ParseProxies([]string{"10.0.0.0/8", bad})
		if err == nil || !strings.Contains(err.Error(), `"`+bad+`"`) {
			t.Errorf("ParseProxies(%q) = %v, want an error naming it", bad, err)
		}
	}
}

// FuzzTrustProxies: whatever a trusted proxy forwards, the client is an
// address from the header or the peer itself, and nothing panics; an
// untrusted peer is its own client.
func FuzzTrustProxies(f *testing.F) {
	for _, s := range []string{"198.51.100.1", "1.1.1.1, 10.1.1.1", "[2001:db8::1]:80,", "::ffff:10.0.0.1", "a,,b", ""} {
		f.Add(s)
	}
	ps, _ := ParseProxies([]string{"10.0.0.0/8", "fd00::/8"})
	f.Fuzz(func(t *testing.T, xff string) {
		if got := clientOf(ps, "203.0.113.5:1", xff); got != "203.0.113.5" {
			t.Fatalf("untrusted peer: client %q", got)
		}
		got := clientOf(ps, "10.0.0.2:1", xff)
		named := []string{"10.0.0.2"}
		for _, e := range strings.Split(xff, ",") {
			if a, ok := parseHop(e); ok {
				named = append(named, a.String())
			}
		}
		if !slices.Contains(named, got) {
			t.Fatalf("client %q is neither the peer nor named in %q", got, xff)
		}
	})
}
