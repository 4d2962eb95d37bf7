package safefetch

import (
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
		{"multicast", client(nil), "http://224.0.0.1/", ErrForbidden, "multicast"},
		{"name resolving to loopback", client(nil), "http://localhost" + port + "/ok", ErrForbidden, "loopback"},
		{"redirect to 10/8", client(loopbackAllowed()), srv.URL + "/to-private", ErrForbidden, "10.1.2.3"},
		{"redirect to metadata", client(loopbackAllowed()), srv.URL + "/to-metadata", ErrForbidden, "metadata"},
		{"redirect to file:", client(loopbackAllowed()), srv.URL + "/to-file", ErrScheme, "file"},
		{"redirect loop", client(loopbackAllowed()), srv.URL + "/loop", ErrRedirects, "at most 2"},
		{"oversized (Content-Length)", client(loopbackAllowed()), srv.URL + "/big", ErrTooLarge, "1024"},
		{"oversized (chunked)", client(loopbackAllowed()), srv.URL + "/big-chunked", ErrTooLarge, "1024"},
		{"slow server", slow, srv.URL + "/slow", ErrUnreachable, "timed out"},
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
		"127.0.0.1": false, "8.8.8.8": true, "2001:db8::1": true, "::1": false,
	} {
		if err := c.Check(netip.MustParseAddr(addr)); (err == nil) != ok {
			t.Errorf("%s: %v, want allowed=%v", addr, err, ok)
		}
	}
	if _, err := ParseAllow([]string{"10.0.0.0/33"}); err == nil {
		t.Fatal("a malformed CIDR was taken")
	}
}
