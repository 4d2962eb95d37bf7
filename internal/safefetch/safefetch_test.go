package safefetch

import (
	"compress/gzip"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func loopbackAllowed() []netip.Prefix { return []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} }

func client(allow []netip.Prefix) *Client {
	return New(Config{Allow: allow, Timeout: 2 * time.Second, MaxBytes: 1 << 10, MaxRedirects: 2})
}

// TestRefusesForbiddenTargets: each forbidden target is refused, with the
// reason a caller shows; the allowed server itself answers.
func TestRefusesForbiddenTargets(t *testing.T) {
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(`{"name":"ok"}`)) })
	mux.HandleFunc("/big", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(strings.Repeat("x", 2<<10))) })
	mux.HandleFunc("/big-chunked", func(w http.ResponseWriter, _ *http.Request) {
		for range 4 {
			w.Write([]byte(strings.Repeat("x", 512)))
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/gzip-bomb", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		zw.Write(make([]byte, 8<<20)) // some 8 KiB on the wire
		zw.Close()
	})
	mux.HandleFunc("/trickle", func(w http.ResponseWriter, r *http.Request) {
		for {
			w.Write([]byte(" "))
			w.(http.Flusher).Flush()
			select {
			case <-time.After(20 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
	})
	mux.HandleFunc("/to-private", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://10.1.2.3/card", http.StatusFound)
	})
	mux.HandleFunc("/to-metadata", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	})
	mux.HandleFunc("/to-file", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop", http.StatusFound) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer close(release)
	port := srv.URL[strings.LastIndex(srv.URL, ":"):]
	slow := New(Config{Allow: loopbackAllowed(), Timeout: 300 * time.Millisecond, MaxBytes: 1 << 10})

	if b, err := client(loopbackAllowed()).Get(context.Background(), srv.URL+"/ok", "application/json"); err != nil || string(b) != `{"name":"ok"}` {
		t.Fatalf("allowed loopback: %q %v", b, err)
	}
	for _, tc := range []struct {
		name string
		c    *Client
		url  string
		want error
		why  string
	}{
		{"loopback without allow", client(nil), srv.URL + "/ok", ErrForbidden, "loopback"},
		{"10/8", client(nil), "http://10.0.0.1/", ErrForbidden, "private"},
		{"172.16/12", client(nil), "http://172.16.5.4/", ErrForbidden, "private"},
		{"192.168/16", client(nil), "http://192.168.1.1/", ErrForbidden, "private"},
		{"CGNAT", client(nil), "http://100.64.0.1/", ErrForbidden, "carrier-grade"},
		{"metadata v4", client(nil), "http://169.254.169.254/latest/meta-data/", ErrForbidden, "metadata"},
		{"metadata v6", client(nil), "http://[fd00:ec2::254]/", ErrForbidden, "metadata"},
		{"unspecified", client(nil), "http://0.0.0.0" + port + "/ok", ErrForbidden, "unspecified"},
		{"[::1]", client(nil), "http://[::1]" + port + "/ok", ErrForbidden, "loopback"},
		{"fe80::", client(nil), "http://[fe80::1]/", ErrForbidden, "link-local"},
		{"v4-mapped loopback", client(nil), "http://[::ffff:127.0.0.1]" + port + "/ok", ErrForbidden, "loopback"},
		{"NAT64 of private", client(nil), "http://[64:ff9b::a00:1]/", ErrForbidden, "private"},
		{"v4-compatible loopback", client(nil), "http://[::127.0.0.1]" + port + "/ok", ErrForbidden, "IPv4-compatible"},
		{"v4-translated", client(nil), "http://[::ffff:0:a00:1]/", ErrForbidden, "IPv4-translated"},
		{"local-use NAT64", client(nil), "http://[64:ff9b:1::a00:1]/", ErrForbidden, "local-use NAT64"},
		{"Teredo", client(nil), "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", ErrForbidden, "Teredo"},
		{"6to4 of loopback", client(nil), "http://[2002:7f00:1::1]/", ErrForbidden, "loopback"},
		{"discard-only", client(nil), "http://[100::1]/", ErrForbidden, "not global unicast"},
		{"zoned link-local", client(nil), "http://[fe80::1%25lo]" + port + "/", ErrForbidden, "link-local"},
		{"multicast", client(nil), "http://224.0.0.1/", ErrForbidden, "multicast"},
		{"TEST-NET-1", client(nil), "http://192.0.2.1/", ErrForbidden, "documentation"},
		{"TEST-NET-2", client(nil), "http://198.51.100.7/", ErrForbidden, "documentation"},
		{"TEST-NET-3", client(nil), "http://203.0.113.200/", ErrForbidden, "documentation"},
		{"NAT64 of TEST-NET-3", client(nil), "http://[64:ff9b::cb00:7101]/", ErrForbidden, "documentation"},
		{"documentation v6", client(nil), "http://[2001:db8::1]/", ErrForbidden, "documentation"},
		{"name resolving to loopback", client(nil), "http://localhost" + port + "/ok", ErrForbidden, "loopback"},
		{"redirect to 10/8", client(loopbackAllowed()), srv.URL + "/to-private", ErrForbidden, "10.1.2.3"},
		{"redirect to metadata", client(loopbackAllowed()), srv.URL + "/to-metadata", ErrForbidden, "metadata"},
		{"redirect to file:", client(loopbackAllowed()), srv.URL + "/to-file", ErrScheme, "file"},
		{"redirect loop", client(loopbackAllowed()), srv.URL + "/loop", ErrRedirects, "at most 2"},
		{"oversized (Content-Length)", client(loopbackAllowed()), srv.URL + "/big", ErrTooLarge, "1024"},
		{"oversized (chunked)", client(loopbackAllowed()), srv.URL + "/big-chunked", ErrTooLarge, "1024"},
		{"slow server", slow, srv.URL + "/slow", ErrUnreachable, "timed out"},
		{"trickled body", slow, srv.URL + "/trickle", ErrUnreachable, "timed out"},
		{"gzip bomb", client(loopbackAllowed()), srv.URL + "/gzip-bomb", ErrTooLarge, "1024"},
		{"file scheme", client(loopbackAllowed()), "file:///etc/passwd", ErrScheme, "file"},
		{"gopher scheme", client(loopbackAllowed()), "gopher://127.0.0.1" + port + "/", ErrScheme, "gopher"},
		{"not found", client(loopbackAllowed()), srv.URL + "/nothing", ErrStatus, "404"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.c.Get(context.Background(), tc.url, "application/json")
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("GET %s: %q, %v; want %v naming %q", tc.url, b, err, tc.want, tc.why)
			}
		})
	}
}

// TestAllowNarrowsToItsRange: allowing one address does not allow its
// neighbours, nor other forbidden ranges.
func TestAllowNarrowsToItsRange(t *testing.T) {
	allow, err := ParseAllow([]string{"10.0.0.5", " 192.168.0.0/24 "})
	if err != nil {
		t.Fatal(err)
	}
	c := client(allow)
	for addr, ok := range map[string]bool{
		"10.0.0.5": true, "10.0.0.6": false, "192.168.0.77": true, "192.168.1.1": false,
		"127.0.0.1": false, "8.8.8.8": true, "2606:4700::1111": true, "::1": false,
		"64:ff9b::808:808": true, "2002:808:808::1": true, "2001:db8::1": false,
		"192.0.2.1": false, "198.51.100.1": false, "203.0.113.1": false, "192.0.3.1": true, "203.0.114.1": true,
	} {
		if err := c.Check(netip.MustParseAddr(addr)); (err == nil) != ok {
			t.Errorf("%s: %v, want allowed=%v", addr, err, ok)
		}
	}
	if _, err := ParseAllow([]string{"10.0.0.0/33"}); err == nil {
		t.Fatal("a malformed CIDR was taken")
	}
}
