package node

import (
	"bufio"
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

// TestSlowClientsAreCut: the bridge cuts a client that sends nothing, or
// half a header, at its header timeout, and a keep-alive connection idle
// past its idle timeout, its deadlines swept rather than timed connection
// by connection. The timeouts are the node's configuration (--header-timeout,
// --idle-timeout): with the defaults (10 s, 2 min) no connection would be
// cut before the client gives up.
func TestSlowClientsAreCut(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, t.TempDir())
	cfg.HeaderTimeout, cfg.IdleTimeout = 200*time.Millisecond, 300*time.Millisecond
	n := startNode(t, cfg)
	for name, send := range map[string]string{
		"nothing":       "",
		"half a header": "GET /v1/agents/a1 HTTP/1.1\r\nHost: x\r\nX-Slow: ",
		"idle":          "GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, err := net.Dial("tcp", n.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, send)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.Copy(io.Discard, c); errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal("the node never closed the connection")
			}
		})
	}
}

// TestUnreadBodyIsBounded: a read sent with a body that never comes (a
// route that reads none: net/http drains it before the answer goes) gets
// its answer, and its connection is closed, once the header timeout and
// the body's (--body-timeout) have passed, as a body a route reads would
// be cut.
func TestUnreadBodyIsBounded(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, t.TempDir())
	cfg.HeaderTimeout = 200 * time.Millisecond
	resp := stallBody(t, cfg, "GET /v1/agents/nobody HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
	if resp.StatusCode != http.StatusNotFound || !resp.Close {
		t.Fatalf("%d, connection closed after it: %v", resp.StatusCode, resp.Close)
	}
}

// TestStalledBodyTimesOut: a write whose body stalls is answered 408
// body_timeout once the node's --body-timeout passes.
func TestStalledBodyTimesOut(t *testing.T) {
	t.Parallel()
	resp := stallBody(t, testConfig(t, t.TempDir()), "POST /v1/agents/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), "body_timeout") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// stallBody starts a node of cfg with a body timeout of 1 s, sends it
// head (a request whose body is announced and never comes) and returns its
// answer, which must come within 20 s (the default body timeout is 30).
func stallBody(t *testing.T, cfg Config, head string) *http.Response {
	cfg.BodyTimeout = time.Second
	n := startNode(t, cfg)
	c, err := net.Dial("tcp", n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	io.WriteString(c, head)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	return resp
}

// TestAgentReadAllocations: GET /v1/agents/<id> through the whole bridge
// allocates once (the answer's recorder for the route metrics), as
// net/http's own mux does for a route with a path value; it is routed by
// its path alone (docs/architecture.md, Reads at the ceiling). Not
// parallel: AllocsPerRun counts every goroutine's allocations.
func TestAgentReadAllocations(t *testing.T) {
	n := startNode(t, testConfig(t, t.TempDir()))
	mustCall(t, n, 201, "POST", "/v1/agents/register", `{"agent_id":"a1"}`)
	r := httptest.NewRequest("GET", "/v1/agents/a1", nil)
	w := &discard{header: http.Header{}}
	h := n.Handler()
	if allocs := testing.AllocsPerRun(1000, func() { clear(w.header); h.ServeHTTP(w, r) }); allocs > 1 || w.status != http.StatusOK {
		t.Fatalf("%v allocations a read, status %d", allocs, w.status)
	}
}

// discard is a ResponseWriter that keeps an answer's status alone.
type discard struct {
	header http.Header
	status int
}

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) WriteHeader(code int)        { d.status = code }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
