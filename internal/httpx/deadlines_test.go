package httpx

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// sweptServer serves ok on a SweptListener with short timeouts; it
// returns the address.
func sweptServer(t *testing.T, tick time.Duration, h http.Handler) string {
	t.Helper()
	return sweptServerTLS(t, tick, h, nil)
}

// sweptServerTLS is sweptServer, over TLS with cfg unless nil.
func sweptServerTLS(t *testing.T, tick time.Duration, h http.Handler, cfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sl := SweepDeadlines(ln, tick)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 200 * time.Millisecond, IdleTimeout: 400 * time.Millisecond, ConnState: sl.ConnState}
	if cfg != nil {
		go srv.Serve(tls.NewListener(sl, cfg))
	} else {
		go srv.Serve(sl)
	}
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

// cutOff reports whether the server closes c, reading what it sends
// meanwhile; false if it is still open after a minute.
func cutOff(t *testing.T, c net.Conn) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(time.Minute))
	_, err := io.Copy(io.Discard, c)
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestSweptDeadlinesCutSlowClients: with deadlines swept, a client that
// sends nothing, half a header, or nothing after an answer is still cut
// off by the server's header and idle timeouts.
func TestSweptDeadlinesCutSlowClients(t *testing.T) {
	addr := sweptServer(t, 20*time.Millisecond, ok)
	for name, send := range map[string]string{
		"nothing":     "",
		"half header": "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ",
		"idle after":  "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, send)
			if !cutOff(t, c) {
				t.Fatal("the server never closed the connection")
			}
		})
	}
}

// TestSweptDeadlinesKeepAlive: a keep-alive client whose requests come
// further apart than the header timeout, and take longer than the sweep's
// tick, is never cut while it is within its deadlines.
func TestSweptDeadlinesKeepAlive(t *testing.T) {
	addr := sweptServer(t, 20*time.Millisecond, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(50 * time.Millisecond)
		io.WriteString(w, "ok")
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := range 6 {
		if i > 0 {
			time.Sleep(250 * time.Millisecond) // past the header timeout, within the idle one
		}
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(b) != "ok" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, b)
		}
	}
}

// TestSweptReadEndsAtTheSweep: a pending read ends at the first sweep
// past its deadline, not before, and not when a later deadline replaced
// it before the sweep; lifting the deadline lets reads go on.
func TestSweptReadEndsAtTheSweep(t *testing.T) {
	ours, peer := net.Pipe()
	defer peer.Close()
	c := &sweptConn{Conn: ours, l: SweepDeadlines(nil, time.Hour)}
	c.l.last.Store(time.Now().Add(-time.Hour).UnixNano()) // the last sweep
	read := func() (string, error) {
		b := make([]byte, 2)
		n, err := c.Read(b)
		return string(b[:n]), err
	}
	c.SetReadDeadline(time.Now().Add(-time.Millisecond)) // passed, but after the last sweep
	c.SetReadDeadline(time.Now().Add(time.Minute))       // replaced before the sweep
	c.cutIfPast(time.Now())
	go io.WriteString(peer, "hi")
	if got, err := read(); err != nil || got != "hi" {
		t.Fatalf("a read within its deadline: %q, %v", got, err)
	}
	c.SetReadDeadline(time.Now().Add(-time.Millisecond))
	c.cutIfPast(time.Now())
	if _, err := read(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a read past its deadline, after the sweep: %v", err)
	}
	c.SetReadDeadline(time.Time{})
	go io.WriteString(peer, "on")
	if got, err := read(); err != nil || got != "on" {
		t.Fatalf("a read once the deadline is lifted: %q, %v", got, err)
	}
}

// TestSweptHijackedConnExact: a connection a handler takes over has its
// deadlines as it sets them, though no sweep would come for an hour,
// served over TLS too.
func TestSweptHijackedConnExact(t *testing.T) {
	certs := httptest.NewTLSServer(nil) // for its certificate
	certs.Close()
	for name, cfg := range map[string]*tls.Config{"plain": nil, "tls": certs.TLS} {
		t.Run(name, func(t *testing.T) {
			got := make(chan error, 1)
			addr := sweptServerTLS(t, time.Hour, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c, _, err := http.NewResponseController(w).Hijack()
				if err != nil {
					got <- err
					return
				}
				defer c.Close()
				c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
				_, err = c.Read(make([]byte, 1))
				got <- err
			}), cfg)
			var c net.Conn
			var err error
			if cfg != nil {
				c, err = tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
			} else {
				c, err = net.Dial("tcp", addr)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			select {
			case err := <-got:
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("the hijacked read ended with %v, not its deadline", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("the hijacked read never ended: its deadline waits for the sweep")
			}
		})
	}
}

// TestSweptBodyTimeout: ReadBody's deadline holds on a swept connection.
func TestSweptBodyTimeout(t *testing.T) {
	addr := sweptServer(t, 20*time.Millisecond, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(WithBodyTimeout(r.Context(), 100*time.Millisecond))
		if _, err := ReadBody(w, r, 1<<10); err != nil {
			WriteError(nil, w, r, err)
		}
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
	c.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), "body_timeout") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}
